#!/usr/bin/env bash
# The wheels the image's build installs offline (Dockerfile, ARG WHEELS), fetched on the host with
# the host's own pip settings (index, certificate bundle: a build container has neither):
#
#   ${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}/wheels-<hash>/
#
# Every pin of requirements.lock and pyproject.toml's build-system requirements (hatchling and its
# dependencies, for the build of ascend-dra itself), as binary wheels for CPython 3.11 on glibc 2.36
# (Debian bookworm, the base of the image) or older. <hash> covers the lock, the build requirements
# and this script; fetched only when missing. Prints the directory last.
#
# Usage: hack/fetch-wheels.sh            fetch if missing, print the directory
#        hack/fetch-wheels.sh --print    only print the directory
#        hack/fetch-wheels.sh --force    fetch again
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || { echo "fetch-wheels.sh: needs $PYTHON (or PYTHON=...)" >&2; exit 1; }
BUILD_REQUIRES="$("$PYTHON" -c 'import sys, tomllib; print(*tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"], sep="\n")' "$ROOT/pyproject.toml")"
HASH="$( (cat "$ROOT/requirements.lock" "${BASH_SOURCE[0]}"; echo "$BUILD_REQUIRES") | sha256sum | cut -c1-12)"
CACHE="${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}"
DIR="$CACHE/wheels-$HASH"
# glibc of the image's base; pip takes only the platforms it is given (no "this or older" for manylinux_2_x).
GLIBC_MINOR=36
ARCH="$(uname -m)"

force=0
case "${1:-}" in
    "") ;;
    --print) echo "$DIR"; exit 0 ;;
    --force) force=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "fetch-wheels.sh: unknown argument $1" >&2; exit 2 ;;
esac
if ((force == 0)) && [[ -f "$DIR/.complete" ]]; then echo "$DIR"; exit 0; fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.wheels.lock"
flock 9
if ((force == 0)) && [[ -f "$DIR/.complete" ]]; then echo "$DIR"; exit 0; fi  # fetched meanwhile

# pip itself, in a venv of its own (Debian's python3.11 has no pip module without python3-pip).
PIP_VENV="$CACHE/pip-venv"
[[ -x "$PIP_VENV/bin/pip" ]] || "$PYTHON" -m venv "$PIP_VENV" >&2

platforms=()
for ((minor = GLIBC_MINOR; minor >= 17; minor--)); do platforms+=(--platform "manylinux_2_${minor}_$ARCH"); done
platforms+=(--platform "manylinux2014_$ARCH")

t0=$SECONDS
echo "== pip download: requirements.lock and $(echo "$BUILD_REQUIRES" | tr '\n' ' ')-> $DIR" >&2
rm -rf "$DIR.tmp"
mapfile -t build_requires <<<"$BUILD_REQUIRES"
"$PIP_VENV/bin/pip" download --quiet --disable-pip-version-check --dest "$DIR.tmp" --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 "${platforms[@]}" \
    -r "$ROOT/requirements.lock" "${build_requires[@]}" >&2
touch "$DIR.tmp/.complete"
rm -rf "$DIR"
mv "$DIR.tmp" "$DIR"
echo "== $(find "$DIR" -name '*.whl' | wc -l) wheels, $(du -sh "$DIR" | cut -f1), in $((SECONDS - t0)) s" >&2
echo "$DIR"
