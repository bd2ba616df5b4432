#!/usr/bin/env bash
# Installs what the monitoring test (tests/cluster/test_hami_monitoring.py) needs on Debian 12: a real
# Prometheus (2.42, Debian's package) to scrape the daemon. Idempotent: apt runs only if it is missing.
set -euo pipefail

need=()
command -v prometheus >/dev/null || need+=(prometheus)
if ((${#need[@]})); then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install-observe-deps.sh: need root or sudo to apt-get install ${need[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  echo "== apt-get install ${need[*]} (for tests/cluster/test_hami_monitoring.py)"
  $SUDO apt-get update -qq
  # Where an init system runs services, the package also starts one on :9090; the test starts its own
  # server on a free port and does not use it.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
prometheus --version 2>&1 | head -1
