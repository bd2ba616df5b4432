#!/usr/bin/env bash
# The HAMivNPUCore profile on the simulated Lab 18 node, with no cluster: builds the lab node under
# ./demo/lab (npu-smi stand-in, fake /dev and host root), runs the daemon in standalone mode, shows
# what `discover` sees, prepares the lab's claim A (as the scheduler allocated it: npu-0-0, 8Gi, 50
# cores), prints its CDI spec and local dir, unprepares it, and stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DIR=demo/lab
NODE=aio-node74-arm
ADRA=("$PY" -m ascend_dra.cli)

rm -rf "$DIR"
read -r -a LAB <<<"$("$PY" -m ascend_dra.profiles.ascend.sim.labnode "$DIR/node")"
echo "==> ascend-dra discover --profiles HAMivNPUCore ${LAB[*]}"
"${ADRA[@]}" discover --profiles HAMivNPUCore --node-name "$NODE" "${LAB[@]}" 2>/dev/null

mkdir -p "$DIR/sa/claims/dra-ascend-e2e"
CLAIM=dra-ascend-e2e-ascend-share-a-app-ascend310p
cat >"$DIR/sa/claims/dra-ascend-e2e/$CLAIM.yaml" <<YAML
# examples/hami-lab/ascend-share-a.yaml's claim after the scheduler allocated it (Lab 18 step 5).
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $CLAIM, namespace: dra-ascend-e2e, uid: 8ec6bbf9-8ce0-4aa1-bc57-7078653d090c}
status:
  allocation:
    devices:
      results:
      - {request: npu, driver: ascend.project-hami.io, pool: $NODE, device: npu-0-0,
         shareID: be06132e-0aff-4efc-bd8e-42a4e06ed385,
         consumedCapacity: {cores: "50", memory: 8Gi, containers: "1"}}
YAML

echo; echo "==> ascend-dra run --profiles HAMivNPUCore --standalone $DIR/sa ${LAB[*]}"
"${ADRA[@]}" run --profiles HAMivNPUCore --standalone "$DIR/sa" --node-name "$NODE" "${LAB[@]}" >"$DIR/daemon.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  [ -S "$DIR/sa/plugins_registry/ascend.project-hami.io-reg.sock" ] && ls "$DIR"/sa/resourceslices/*.yaml >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { cat "$DIR/daemon.log"; exit 1; }
  sleep 0.1
done

echo; echo "==> ascend-dra call prepare dra-ascend-e2e/$CLAIM"
"${ADRA[@]}" call --standalone "$DIR/sa" prepare "dra-ascend-e2e/$CLAIM"
echo "local dir: $(ls -ld "$DIR"/node/host/usr/local/hami-vnpu-core/containers/*/npu)"

echo; echo "==> ascend-dra call unprepare dra-ascend-e2e/$CLAIM"
"${ADRA[@]}" call --standalone "$DIR/sa" unprepare "dra-ascend-e2e/$CLAIM" >/dev/null
echo "local dirs left: $(ls "$DIR/node/host/usr/local/hami-vnpu-core/containers" | wc -l); claim specs left: $(ls "$DIR/sa/cdi" | grep -vc common)"
kill -TERM $pid
wait $pid
trap - EXIT
