#!/usr/bin/env bash
# `make test`'s runs of tests/cluster on every Kubernetes version, all at once: each run
# starts its own control plane on ports of its own, and the runs mostly wait on their API servers, so
# side by side they take about as long as one. Each run's output is printed when it ends, in the order
# given; the exit code is 1 when any run failed.
# Usage: hack/test-versions.sh PYTHON VERSION...
set -uo pipefail
py=$1
shift
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
for v in "$@"; do
  ASCEND_DRA_K8S=$v "$py" -m pytest tests/cluster -q -p no:cacheprovider >"$logs/$v.log" 2>&1 &
  pids+=("$!")
done
rc=0
for i in "${!pids[@]}"; do
  v=${*:i+1:1}
  wait "${pids[$i]}" || rc=1
  echo "== tests/cluster on Kubernetes $v"
  cat "$logs/$v.log"
done
exit "$rc"
