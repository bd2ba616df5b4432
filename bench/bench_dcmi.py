"""The DCMI tier against the npu-smi tier on one simulated 16-chip 910B3 node: CPU and wall time of a
discovery, of a health pass and of a hard vNPU's create + destroy, printed as ratios.

Run: ``.venv/bin/python bench/bench_dcmi.py [--rounds N]`` (needs gcc: the test ``libdcmi.so`` is built
from ``tests/dcmisim/libdcmi.c`` on first use).

One fake node (``tests/dcmisim``: the npu-smi simulator's ``host.json``, /dev, sysfs) is discovered by
the ``npu-910`` profile three ways, each the median of ``--rounds`` (after one untimed warm-up):

* ``dcmi``: the test ``libdcmi.so`` through the DCMI worker (started in the warm-up; its start is
  timed on its own), plus the one ``npu-smi info -t topo`` the tier still makes (to the script below);
* ``npu-smi (cat)``: a shell script that ``cat``s what the simulator prints for each call: the cost of
  one process per call and our parsing, a floor under any real npu-smi (which also opens DCMI at
  every start);
* ``npu-smi (sim)``, with ``--sim``: the Python simulator itself (a Python start per call; slow).

The vNPU figure is one ``vir05_1c_16g`` vNPU created and destroyed on chip 0 by the hard-vNPU
profile's calls (:class:`ascend_dra.profiles.ascend.hardvnpu.calls.VnpuCalls`, without the ledger and
read-backs around them): through DCMI (the test library writes the simulator's state file, fsync
included), through a script that only prints npu-smi's ``Status : OK`` (the floor: one process per
call, no state), and with ``--sim`` through the simulator.

CPU is the daemon's own (``time.process_time``) plus its children's: the npu-smi processes
(``RUSAGE_CHILDREN``) and the DCMI worker (``/proc/<pid>/stat``). The test library answers from a
file, where the real one asks the driver: the DCMI figures are what the daemon and its worker spend,
not what the driver does.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ascend_dra.profiles.ascend.dcmi.client import DcmiClient  # noqa: E402
from ascend_dra.profiles.ascend.hardvnpu.calls import VnpuCalls  # noqa: E402
from ascend_dra.profiles.ascend.npu910 import Npu910Profile  # noqa: E402
from ascend_dra.profiles.ascend.npusmi.runner import NpuSmi  # noqa: E402
from ascend_dra.profiles.ascend.sim import npusmi_sim  # noqa: E402
from tests.dcmisim import SIM, FakeHost, build, fake_host  # noqa: E402

CHIPS = 16
_TICK = os.sysconf("SC_CLK_TCK")


def cat_npu_smi(host: FakeHost) -> str:
    """A shell script answering every call the npu-smi tier makes with the simulator's output."""
    answers = host.sim_dir.parent / "answers"
    answers.mkdir()
    calls = ["info", "info -m"] + [f"info -t {k} -i {n}" for n in range(CHIPS) for k in ("board", "common")] + \
        [f"info -t board -i {n} -c 0" for n in range(CHIPS)]
    lines = ["#!/bin/sh", 'case "$*" in']
    for i, call in enumerate(calls):
        (answers / f"{i}.txt").write_text(npusmi_sim.run(call.split(), host.sim_dir))
        lines.append(f"  {shlex.quote(call)}) exec cat {answers / f'{i}.txt'} ;;")
    lines += ['  *) echo "unsupported: $*" >&2; exit 2 ;;', "esac", ""]
    exe = answers / "npu-smi"
    exe.write_text("\n".join(lines))
    exe.chmod(0o755)
    return str(exe)


def ok_npu_smi(host: FakeHost) -> str:
    """A script that answers ``set -t create-vnpu`` / ``destroy-vnpu`` with npu-smi's success lines."""
    exe = host.sim_dir.parent / "answers" / "npu-smi-ok"
    exe.write_text("#!/bin/sh\nprintf '\\tStatus : OK\\n\\tMessage : done\\n'\n")
    exe.chmod(0o755)
    return str(exe)


def worker_pid(profile: Npu910Profile | DcmiClient) -> int | None:
    if isinstance(profile, DcmiClient):
        return profile.pid
    return profile.dcmi.client.pid if profile.dcmi.client is not None else None


def worker_cpu(profile: Npu910Profile | DcmiClient) -> float:
    """CPU seconds the DCMI worker has used so far (0 without one)."""
    pid = worker_pid(profile)
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def worker_rss_mib(profile: Npu910Profile) -> float:
    pid = worker_pid(profile)
    if pid is None:
        return 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_now(profile: Npu910Profile | DcmiClient) -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime + worker_cpu(profile)


async def measure(step: Callable[[], Awaitable[object]], profile: Npu910Profile | DcmiClient,
                  rounds: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds of ``step`` over ``rounds``."""
    walls, cpus = [], []
    for _ in range(rounds):
        cpu, wall = cpu_now(profile), time.perf_counter()
        await step()
        walls.append(time.perf_counter() - wall)
        cpus.append(cpu_now(profile) - cpu)
    return statistics.median(walls), statistics.median(cpus)


async def run(rounds: int, with_sim: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = [{"npu_id": n, "chip_id": 0, "logic_id": n, "physical_id": n, "model": "910B3",
                 "bus_id": f"0000:{0x11 + 4 * n:02X}:00.0"} for n in range(CHIPS)]
        host = fake_host(Path(tmp), rows)
        os.environ[npusmi_sim.ENV_DIR] = str(host.sim_dir)
        cat = cat_npu_smi(host)
        ways = {"dcmi": (host.dcmi_root, cat), "npu-smi (cat)": (host.plain_root, cat)}
        if with_sim:
            ways["npu-smi (sim)"] = (host.plain_root, SIM)
        results: dict[str, dict[str, tuple[float, float]]] = {}
        for name, (root, npu_smi) in ways.items():
            profile = Npu910Profile(host_root=root)
            ctx = host.ctx(npu_smi)
            start = time.perf_counter()
            inventory = await profile.discover(ctx)  # warm-up; starts the DCMI worker
            first = time.perf_counter() - start
            assert len(inventory.devices) == CHIPS and inventory.source == name.split()[0], inventory.source
            assert all(d.attributes.get("uuid") for d in inventory.devices)
            results[name] = {
                "first": (first, 0.0),
                "discover": await measure(lambda p=profile, c=ctx: p.discover(c), profile, rounds),
                "health": await measure(lambda p=profile, c=ctx, i=inventory: p.health(c, i), profile, rounds * 3),
            }
            if name == "dcmi":
                rss = worker_rss_mib(profile)
            profile.close()
        vnpu = await vnpu_figures(host, rounds * 3, with_sim)
    print(f"{CHIPS}-chip 910B3 node; median of {rounds} discoveries, {rounds * 3} health passes and {rounds * 3} "
          "vNPU create+destroy cycles")
    print(f"  DCMI worker: first discovery (worker start included) {results['dcmi']['first'][0] * 1e3:.1f} ms, "
          f"RSS {rss:.1f} MiB")
    print(f"  {'':36}{'wall ms':>10}{'CPU ms':>10}{'wall / dcmi':>13}{'CPU / dcmi':>12}")
    for what in ("discover", "health"):
        base_wall, base_cpu = results["dcmi"][what]
        for name in ways:
            wall, cpu = results[name][what]
            print(f"  {what + ', ' + name:36}{wall * 1e3:10.2f}{cpu * 1e3:10.2f}{wall / base_wall:13.1f}"
                  f"{cpu / base_cpu:12.1f}")
    base_wall, base_cpu = vnpu["dcmi"]
    for name, (wall, cpu) in vnpu.items():
        print(f"  {'vNPU create+destroy, ' + name:36}{wall * 1e3:10.2f}{cpu * 1e3:10.2f}{wall / base_wall:13.1f}"
              f"{cpu / base_cpu:12.1f}")


async def vnpu_figures(host: FakeHost, rounds: int, with_sim: bool) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds of one vNPU's create + destroy, per way (see the module docstring)."""
    client = DcmiClient(build(), timeout_s=10.0)
    ways = {"dcmi": (VnpuCalls(NpuSmi(SIM, timeout_s=10.0), client), client),
            "npu-smi (ok)": (VnpuCalls(NpuSmi(ok_npu_smi(host), timeout_s=10.0), None), None)}
    if with_sim:
        ways["npu-smi (sim)"] = (VnpuCalls(NpuSmi(SIM, timeout_s=10.0), None), None)
    figures = {}
    for name, (calls, measured) in ways.items():
        async def cycle(c: VnpuCalls = calls, expect: str = name.split()[0]) -> None:
            assert await c.create(0, 0, 100, "vir05_1c_16g") == expect
            assert await c.destroy(0, 0, 100) == expect
        await cycle()  # warm-up; starts the DCMI worker
        figures[name] = await measure(cycle, measured if measured is not None else client, rounds)
    client.close()
    assert npusmi_sim.Sim(host.sim_dir).load() == []
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sim", action="store_true", help="also the Python simulator as npu-smi (slow)")
    args = parser.parse_args()
    logging.getLogger("ascend_dra").setLevel(logging.ERROR)  # the fake node has no topology, no driver files
    anyio.run(run, args.rounds, args.sim)


if __name__ == "__main__":
    main()
