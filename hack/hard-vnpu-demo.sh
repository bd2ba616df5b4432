#!/usr/bin/env bash
# The hard-vNPU profile on a laptop: one simulated 910B4 served by the stateful npu-smi simulator
# (ascend-dra-npu-smi-sim), the daemon in standalone mode under ./demo-hard-vnpu; prepare the example
# claim (the simulator creates vNPU 105), show the vNPU and the CDI spec, unprepare (it is destroyed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DIR=demo-hard-vnpu
NODE=demo-node
ADRA=("$PY" -m ascend_dra.cli)
SIM="$(dirname "$PY")/ascend-dra-npu-smi-sim"
export ASCEND_NPU_SMI_SIM_DIR="$PWD/$DIR/npu-smi-sim"

rm -rf "$DIR"
mkdir -p "$DIR/claims/default" "$DIR/dev"
cp examples/claims/hard-vnpu/allocated-vir05.yaml "$DIR/claims/default/vnpu-claim.yaml"
echo "demo-boot" >"$DIR/boot_id"
"$PY" -c "import sys; from pathlib import Path; from ascend_dra.profiles.ascend.sim.npusmi_sim import write_host
write_host(Path(sys.argv[1]), [dict(npu_id=0, chip_id=0, logic_id=0, physical_id=0, model='910B4')],
           boot_id_file=Path(sys.argv[2]), dev_dir=Path(sys.argv[3]))" "$ASCEND_NPU_SMI_SIM_DIR" "$DIR/boot_id" "$DIR/vdev"

echo "==> ascend-dra run --profiles hard-vNPU --standalone $DIR (simulated 910B4, npu-smi simulator)"
"${ADRA[@]}" run --profiles hard-vNPU --standalone "$DIR" --node-name "$NODE" --fake-devices 1 \
  --npu-smi "$SIM" --dev-root "$DIR/dev" --boot-id-file "$DIR/boot_id" \
  --profile-option hard-vNPU.simulate=always --profile-option "hard-vNPU.vnpu-dev-dir=$PWD/$DIR/vdev" >"$DIR/daemon.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 200); do
  [ -S "$DIR/plugins_registry/ascend.project-hami.io-reg.sock" ] && ls "$DIR"/resourceslices/*.yaml >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { cat "$DIR/daemon.log"; exit 1; }
  sleep 0.1
done

echo; echo "==> ascend-dra call prepare default/vnpu-claim"
"${ADRA[@]}" call --standalone "$DIR" prepare default/vnpu-claim
echo; echo "==> npu-smi info -t info-vnpu -i 0 -c 0 (simulator)"
"$SIM" info -t info-vnpu -i 0 -c 0
echo; echo "==> CDI spec"
cat "$DIR"/cdi/*vnpu_7c1e5b3a*.yaml

echo; echo "==> ascend-dra call unprepare default/vnpu-claim"
"${ADRA[@]}" call --standalone "$DIR" unprepare default/vnpu-claim
"$SIM" info -t info-vnpu -i 0 -c 0 | grep "Total number of vnpu"

kill -TERM $pid
wait $pid
trap - EXIT
