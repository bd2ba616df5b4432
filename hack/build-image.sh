#!/usr/bin/env bash
# `make image`: the Dockerfile, built with podman from Debian's packages and PyPI only (no registry).
#
#   IMAGE       the tag (Makefile: ascend-dra:<version of pyproject.toml>)
#   BASE_IMAGE  empty: the Debian bookworm base made and cached by hack/build-base-image.sh (its
#               builder variant for the first stage); else that image, for both stages
#   WHEELS      "host" (default): the locked wheels, fetched on the host by hack/fetch-wheels.sh and
#               mounted read-only at /wheels, and the build runs without a network; "index": pip in
#               the build uses its package index (the build needs the network then)
#
# Layers are cached by podman (--layers): a build with nothing changed takes seconds, a change of the
# code rebuilds only the layer that installs ascend-dra itself (the dependencies' layer changes with
# pyproject.toml or requirements.lock); the image the tag named before is removed. Prints the size last.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="${IMAGE:?build-image.sh: IMAGE (the tag) is required}"
BASE_IMAGE="${BASE_IMAGE:-}"
WHEELS="${WHEELS:-host}"

command -v podman >/dev/null || {
    echo "build-image.sh: needs podman (hack/install-container-deps.sh installs it)" >&2; exit 1; }

args=(--layers --tag "$IMAGE" --file "$ROOT/Dockerfile")
if [[ -z "$BASE_IMAGE" ]]; then
    bases="$("$ROOT/hack/build-base-image.sh" | tail -1)"
    read -r runtime builder <<<"$bases"
    args+=(--build-arg "BASE_IMAGE=$runtime" --build-arg "BUILDER_IMAGE=$builder")
else
    args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
fi
case "$WHEELS" in
    host) wheels="$("$ROOT/hack/fetch-wheels.sh" | tail -1)"
          args+=(--network=none --volume "$wheels:/wheels:ro" --build-arg WHEELS=/wheels) ;;
    index) ;;
    *) echo "build-image.sh: WHEELS must be host or index, not '$WHEELS'" >&2; exit 2 ;;
esac

t0=$SECONDS
previous="$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
podman build "${args[@]}" "$ROOT"
# The image the tag named before is nameless now: remove it unless a container uses it (its layers
# shared with the new one stay).
if [[ -n "$previous" && "$previous" != "$(podman image inspect --format '{{.Id}}' "$IMAGE")" ]]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
fi
echo "== $IMAGE built in $((SECONDS - t0)) s, $(podman image inspect --format '{{.Size}}' "$IMAGE" |
    awk '{printf "%.0f MB", $1 / 1e6}')"
