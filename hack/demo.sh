#!/usr/bin/env bash
# `make demo`: the whole node side on a laptop. Starts the daemon with the fake profile in
# standalone mode under ./demo, plays the kubelet (register, prepare the example claim, show the
# CDI spec, unprepare), then stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DIR=demo
NODE=demo-node
ADRA=("$PY" -m ascend_dra.cli)

rm -rf "$DIR"
mkdir -p "$DIR/claims/default"
cp examples/claims/default/npu-claim.yaml "$DIR/claims/default/"

echo "==> ascend-dra run --profiles fake --standalone $DIR --node-name $NODE"
"${ADRA[@]}" run --profiles fake --standalone "$DIR" --node-name "$NODE" >"$DIR/daemon.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  [ -S "$DIR/plugins_registry/ascend.project-hami.io-reg.sock" ] && ls "$DIR"/resourceslices/*.yaml >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { cat "$DIR/daemon.log"; exit 1; }
  sleep 0.1
done
cat "$DIR/daemon.log"

echo; echo "==> published ResourceSlice ($DIR/resourceslices/)"
cat "$DIR"/resourceslices/*.yaml

echo; echo "==> ascend-dra call register   (GetInfo + NotifyRegistrationStatus, as the kubelet)"
"${ADRA[@]}" call --standalone "$DIR" register

echo; echo "==> ascend-dra call prepare default/npu-claim"
"${ADRA[@]}" call --standalone "$DIR" prepare default/npu-claim

echo; echo "==> ascend-dra call unprepare default/npu-claim"
"${ADRA[@]}" call --standalone "$DIR" unprepare default/npu-claim
echo "CDI specs left in $DIR/cdi: $(ls "$DIR/cdi")"

kill -TERM $pid
wait $pid
trap - EXIT
echo; echo "==> daemon stopped; sockets removed: $(ls "$DIR/plugins_registry" | wc -l) left"
