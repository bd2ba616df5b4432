#!/usr/bin/env bash
# The image's base, made from Debian bookworm's packages (CPython 3.11) with mmdebstrap, no registry:
#
#   localhost/ascend-dra-base:bookworm-<hash>          python3 and what the daemon needs at run time
#   localhost/ascend-dra-base:bookworm-<hash>-builder  the same plus python3-venv, for the Dockerfile's
#                                                     builder stage (ensurepip; never in the image)
#
# The runtime is a root filesystem tarball cached in
# ${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}/base-bookworm-<hash>/runtime.tar, with the builder's
# extra packages next to it (builder-debs/); <hash> is this script's, so a changed package list makes
# them again. The tarball is imported with `podman import`, the builder is one `podman build` layer on
# it; each only when podman's storage lacks it. Prints the two image names last: RUNTIME BUILDER.
#
# The packages are the security-updated ones of the day of the build; remove the cache directory to
# take newer ones. Needs root (mmdebstrap's root mode) and deb.debian.org.
#
# Usage: hack/build-base-image.sh            build/import if missing, print the names
#        hack/build-base-image.sh --print    only print the names
#        hack/build-base-image.sh --force    rebuild the tarballs
set -euo pipefail

HASH="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
CACHE="${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}/base-bookworm-$HASH"
RUNTIME="localhost/ascend-dra-base:bookworm-$HASH"
BUILDER="$RUNTIME-builder"

# What the daemon and the webhook run on. python3 brings CPython 3.11 and its standard library;
# libstdc++6 is for the host's npu-smi (and the driver's libraries it loads), which the chart mounts
# and the Ascend profiles run inside the container (the official python images have it through apt).
RUNTIME_PACKAGES=python3,libstdc++6
# The builder stage makes the venv with `python3.11 -m venv`, which needs ensurepip.
BUILDER_PACKAGES=python3-venv
MIRRORS=(
    "deb http://deb.debian.org/debian bookworm main"
    "deb http://deb.debian.org/debian bookworm-updates main"
    "deb http://deb.debian.org/debian-security bookworm-security main"
)

force=0
case "${1:-}" in
    "") ;;
    --print) echo "$RUNTIME $BUILDER"; exit 0 ;;
    --force) force=1 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "build-base-image.sh: unknown argument $1" >&2; exit 2 ;;
esac

command -v mmdebstrap >/dev/null || {
    echo "build-base-image.sh: needs mmdebstrap (hack/install-container-deps.sh installs it)" >&2; exit 1; }
command -v podman >/dev/null || {
    echo "build-base-image.sh: needs podman (hack/install-container-deps.sh installs it)" >&2; exit 1; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9

# mmdebstrap variant "essential": the Essential:yes packages (coreutils, bash, dpkg, ...) and the
# listed ones; no apt (nothing installs packages at run time). merged /usr as bookworm's own hook
# makes it, without the usrmerge package (it would pull in perl). No docs, man pages or locales
# except the copyright files. The last hook has apt download (not install) the builder's packages
# against the same package lists and dpkg status, so that they fit the runtime exactly.
bootstrap() {
    local t0=$SECONDS log="$CACHE/mmdebstrap.log"
    echo "== mmdebstrap bookworm ($RUNTIME_PACKAGES) -> $CACHE/runtime.tar (log: $log)" >&2
    rm -rf "$CACHE/builder-debs" && mkdir -p "$CACHE/builder-debs/partial"
    if ! mmdebstrap --format=tar --variant=essential --include="$RUNTIME_PACKAGES" \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
        --aptopt='Acquire::Check-Valid-Until "false"' \
        --customize-hook="APT_CONFIG=\$MMDEBSTRAP_APT_CONFIG apt-get --yes --download-only \
            -oDir::Cache::Archives=$CACHE/builder-debs/ install ${BUILDER_PACKAGES//,/ }" \
        bookworm "$CACHE/runtime.tar.tmp" "${MIRRORS[@]}" >"$log" 2>&1; then
        tail -20 "$log" >&2
        echo "build-base-image.sh: mmdebstrap failed (whole log: $log)" >&2
        exit 1
    fi
    rm -rf "$CACHE/builder-debs/partial" "$CACHE/builder-debs/lock"
    # mmdebstrap leaves apt's directories (configuration, empty lists and cache) though the variant has
    # no apt: drop them from the tarball (Python's tarfile: GNU tar --delete mangles pax headers).
    python3 - "$CACHE/runtime.tar.tmp" "$CACHE/runtime.tar.new" <<'EOF'
import sys, tarfile
drop = ("./etc/apt", "./var/cache/apt", "./var/lib/apt", "./var/log/apt")
with tarfile.open(sys.argv[1]) as src, tarfile.open(sys.argv[2], "w", format=tarfile.PAX_FORMAT) as dst:
    for member in src:
        if member.name not in drop and not member.name.startswith(tuple(d + "/" for d in drop)):
            dst.addfile(member, src.extractfile(member) if member.isreg() else None)
EOF
    rm -f "$CACHE/runtime.tar.tmp"
    mv -f "$CACHE/runtime.tar.new" "$CACHE/runtime.tar"
    echo "== runtime.tar: $(du -h "$CACHE/runtime.tar" | cut -f1) in $((SECONDS - t0)) s;" \
         "builder packages: $(cd "$CACHE/builder-debs" && echo *.deb)" >&2
}

if ((force == 1)) || [[ ! -f "$CACHE/runtime.tar" ]]; then bootstrap; fi

# podman import: the official python images' environment (PATH and a UTF-8 locale; C.UTF-8 is in libc6).
if ((force == 1)) || ! podman image exists "$RUNTIME"; then
    podman import --quiet --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV=LANG=C.UTF-8' --change 'CMD=["python3"]' "$CACHE/runtime.tar" "$RUNTIME" >/dev/null
    echo "== imported $RUNTIME" >&2
fi
# dpkg (essential) installs the downloaded packages; no network in the build.
if ((force == 1)) || ! podman image exists "$BUILDER"; then
    printf 'FROM %s\nRUN DEBIAN_FRONTEND=noninteractive dpkg --install /debs/*.deb\n' "$RUNTIME" |
        podman build --quiet --network=none --volume "$CACHE/builder-debs:/debs:ro" --tag "$BUILDER" \
            --file - "$CACHE/builder-debs" >/dev/null
    echo "== built $BUILDER" >&2
fi
echo "$RUNTIME $BUILDER"
