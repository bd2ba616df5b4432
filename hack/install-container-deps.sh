#!/usr/bin/env bash
# Installs what tests/container needs on Debian 12: podman (4.3.1) + runc (crun cannot run on a hybrid
# cgroup host), a static busybox (the test image's rootfs) and mmdebstrap (the base of our image,
# hack/build-base-image.sh); for the test bed of tests/e2e, the CNI plugins (bridge, host-local,
# loopback) and iptables (a node's DNAT for the kubernetes Service). Idempotent: apt runs only if
# something is missing.
set -euo pipefail

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
[[ -x /bin/busybox ]] || need+=(busybox-static)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || [[ -x /usr/sbin/iptables ]] || need+=(iptables)
# podman runs containers as root with --network=none here, so no uidmap/slirp4netns are needed;
# fuse-overlayfs and conmon come with podman's own dependencies.
if ((${#need[@]})); then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install-container-deps.sh: need root or sudo to apt-get install ${need[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  echo "== apt-get install ${need[*]} (for tests/container)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
podman --version
