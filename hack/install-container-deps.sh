#!/usr/bin/env bash
# Installs what tests/container needs on Debian 12: podman (4.3.1) + runc (crun cannot run on a hybrid
# cgroup host) and a static busybox (the image's rootfs). Idempotent: apt runs only if something is missing.
set -euo pipefail

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
[[ -x /bin/busybox ]] || need+=(busybox-static)
# podman runs containers as root with --network=none here, so no uidmap/slirp4netns are needed;
# fuse-overlayfs and conmon come with podman's own dependencies.
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
podman --version
