"""Discovery cost of a 16-chip Ascend node, beside the cost of one npu-smi-sized subprocess spawn.

Run: ``.venv/bin/python bench/bench_discovery.py [--rounds N]``

Figures (each the median over ``--rounds``):

* ``parse``: pure parsing of everything the npu-smi tier reads for 16 chips (``info``, ``info -m``,
  16 card boards, 16 chip boards, 16 ``-t common``, ``-t topo``), per node and per chip;
* ``spawn floor``: one ``cat`` of a fixture through ``anyio.run_process`` (what any npu-smi call
  costs at least, before npu-smi does any work);
* ``discover``: the ``npu-910`` profile's whole discovery against a fake npu-smi (a shell script that
  ``cat``\\ s the outputs), i.e. 51 subprocesses plus parsing plus the /dev and sysfs look-ups.

Ratios: discover / (calls x spawn floor) says how much of discovery is process spawning; parse
per chip / spawn floor says how cheap parsing is next to one call. The 16-chip outputs are built
from the real fixtures (``910B3_info.txt`` rows, ``910A_info_-t_board_*``, ``910B1_info_-t_common_-i_1.txt``,
``910B3_info_-t_topo.txt``) with NPU IDs 0..15.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ascend_dra.profiles.ascend.npu910 import Npu910Profile  # noqa: E402
from ascend_dra.profiles.ascend.npusmi import keyvalue, readings, tables  # noqa: E402
from ascend_dra.profiles.base import ProfileContext  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "npu-smi"
CHIPS = 16


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def build_outputs() -> dict[str, str]:
    """npu-smi arguments -> output for a 16-chip 910B3 node, from the fixtures."""
    info = _fixture("910B3_info.txt").splitlines()
    head, rule = info[:6], info[8]
    row1, row2 = info[6], info[7]
    body = []
    for n in range(CHIPS):
        body += [row1.replace("| 0     910B3", f"| {n:<5} 910B3", 1),
                 row2.replace("0000:C1:00.0", f"0000:{0x10 + n:02X}:00.0", 1), rule]
    outputs = {"info": "\n".join(head + body) + "\n"}
    mapping = ["NPU ID                         Chip ID                        Chip Logic ID                  Chip Name"]
    mapping += [f"{n:<30} {0:<30} {n:<30} Ascend 910B3" for n in range(CHIPS)]
    outputs["info -m"] = "\n".join(mapping) + "\n"
    board = _fixture("910A_info_-t_board_-i.txt").replace("0xD801", "0xD802")
    chip_board = _fixture("910A_info_-t_board_-i_-c_VDieID.txt")
    common = _fixture("910B1_info_-t_common_-i_1.txt")
    for n in range(CHIPS):
        outputs[f"info -t board -i {n}"] = board.replace("NPU ID                         : 0",
                                                         f"NPU ID                         : {n}")
        outputs[f"info -t board -i {n} -c 0"] = chip_board.replace("D2102003", f"D21020{n:02X}")
        outputs[f"info -t common -i {n}"] = common
    names = "".join(f"NPU{n:<8}" for n in range(CHIPS))
    topo = [f"\t   {names}CPU Affinity"]
    for a in range(CHIPS):
        links = "".join(f"{'X' if a == b else 'HCCS':<11}" for b in range(CHIPS))
        topo.append(f"NPU{a:<8}{links}0-23")
    outputs["info -t topo"] = "\n".join(topo) + "\n"
    return outputs


def parse_all(outputs: dict[str, str]) -> None:
    tables.parse_info(outputs["info"])
    tables.parse_mapping(outputs["info -m"])
    for n in range(CHIPS):
        keyvalue.parse_board(outputs[f"info -t board -i {n}"])
        keyvalue.parse_chip_board(outputs[f"info -t board -i {n} -c 0"])
        readings.parse_common(outputs[f"info -t common -i {n}"])
    tables.parse_topo(outputs["info -t topo"])


def write_node(directory: Path, outputs: dict[str, str]) -> tuple[Path, Path, Path]:
    """A fake npu-smi script answering ``outputs`` by ``cat``, and fake /dev and sysfs trees."""
    answers = directory / "answers"
    answers.mkdir()
    lines = ["#!/bin/sh", 'case "$*" in']
    for i, (args, text) in enumerate(outputs.items()):
        (answers / f"{i}.txt").write_text(text)
        lines.append(f'  "{args}") exec cat {answers / f"{i}.txt"} ;;')
    lines += ['  *) echo "unsupported: $*" >&2; exit 1 ;;', "esac", ""]
    exe = directory / "npu-smi"
    exe.write_text("\n".join(lines))
    exe.chmod(0o755)
    dev = directory / "dev"
    dev.mkdir()
    for name in [f"davinci{n}" for n in range(CHIPS)] + ["davinci_manager", "devmm_svm", "hisi_hdc"]:
        (dev / name).touch()
    sys_root = directory / "sys"
    sys_root.mkdir()
    return exe, dev, sys_root


def median_s(samples: list[float]) -> float:
    return statistics.median(samples)


async def measure(rounds: int) -> dict[str, float]:
    outputs = build_outputs()
    parse_samples = []
    for _ in range(rounds * 5):
        start = time.perf_counter()
        parse_all(outputs)
        parse_samples.append(time.perf_counter() - start)
    with tempfile.TemporaryDirectory() as tmp:
        exe, dev, sys_root = write_node(Path(tmp), outputs)
        spawn_samples = []
        for _ in range(rounds * 5):
            start = time.perf_counter()
            await anyio.run_process(["cat", str(FIXTURES / "910B3_info.txt")])
            spawn_samples.append(time.perf_counter() - start)
        ctx = ProfileContext(node_name="bench", driver_name="ascend.project-hami.io", dev_root=dev,
                             sys_root=sys_root, npu_smi=str(exe), state_dir=Path(tmp) / "state")
        profile = Npu910Profile(host_root=Path(tmp))
        discover_samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            inventory = await profile.discover(ctx)
            discover_samples.append(time.perf_counter() - start)
        assert len(inventory.devices) == CHIPS and inventory.source == "npu-smi", inventory
        assert all(d.attributes.get("uuid") for d in inventory.devices)
    return {"parse": median_s(parse_samples), "spawn": median_s(spawn_samples),
            "discover": median_s(discover_samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    logging.getLogger("ascend_dra").setLevel(logging.ERROR)  # the fake node has no driver files
    figures = anyio.run(measure, args.rounds)
    calls = 3 + 3 * CHIPS
    parse, spawn, discover = figures["parse"], figures["spawn"], figures["discover"]
    print(f"16-chip node, median of {args.rounds} discoveries ({args.rounds * 5} parses / spawns)")
    print(f"  spawn floor (cat of a fixture)     {spawn * 1e3:9.3f} ms")
    print(f"  parse, whole node                  {parse * 1e3:9.3f} ms   = {parse / spawn:6.2f} x spawn")
    print(f"  parse, per chip                    {parse / CHIPS * 1e6:9.1f} us   = "
          f"{parse / CHIPS / spawn:6.3f} x spawn")
    print(f"  discover (npu-910, {calls} npu-smi calls) {discover * 1e3:9.3f} ms   = {discover / spawn:6.1f} x spawn"
          f" = {discover / (calls * spawn):5.2f} x ({calls} x spawn)")
    print(f"  discover per chip                  {discover / CHIPS * 1e3:9.3f} ms")


if __name__ == "__main__":
    main()
