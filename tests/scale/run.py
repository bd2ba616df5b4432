"""``make scale``: the scale bed under ClusterLoader2's DRA workloads, ours beside the Go reference
driver in the same run, and one report.

Run: ``.venv/bin/python -m tests.scale.run [--nodes 100] [--shapes whole,hami,hard] [--drivers ours,go]
[--rates 10,20] [--churn-completions 10] [--churn-run-s 30] [--steady-s 60] [--burst 500]
[--tier dcmi|npu-smi] [--quick]``

For each node kind (``--shapes``), each driver in turn serves every node (one process a node), with
the kubelet stand-ins (kubelet.py) on its sockets, through the phases of scenario.py. The report
prints, per kind and phase, our figure, the Go driver's and their ratio; ratios are the figures
that carry over to other machines (both ran on the same machine minutes apart), so the machine's
load (``uptime``) is printed before and after. Exits 2 with a hint without the Go driver's binary
(bench/README.md builds it), unless ``--drivers ours``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import sys
from pathlib import Path

from tests.cluster.controlplane import exit_on_sigterm
from tests.scale.bed import Bed
from tests.scale.fleet import SHAPES, go_binary
from tests.scale.scenario import Figures, Options, Session

__all__ = ("main", "report")

#: Figures printed, in order, and whether below 1 is better for ours/Go ("low") or above ("high").
ROWS = (
    ("all registered s", "low"), ("per driver p50 s", "low"),
    ("startup p50 s", "low"), ("startup p90 s", "low"), ("startup p99 s", "low"),
    ("claim alloc p50 s", "low"), ("claim alloc p99 s", "low"),
    ("scheduled pods/s", "high"), ("scheduled pods/s max", "high"),
    ("prepare p50 ms", "low"), ("prepare p99 ms", "low"), ("unprepare p50 ms", "low"), ("unprepare p99 ms", "low"),
    ("prepare errors", "low"), ("api requests per prepare", "low"),
    ("cpu ms/s per driver", "low"), ("children cpu ms/s per driver", "low"), ("rss MiB all drivers", "low"),
    ("api requests /node/min", "low"), ("watches /node/min", "low"),
    ("create p50 ms", "low"), ("create p99 ms", "low"), ("review p50 ms", "low"), ("review p99 ms", "low"),
    ("apiserver webhook p50 ms", "low"), ("apiserver webhook p99 ms", "low"),
    ("creates refused", "low"), ("generator behind s", "low"), ("seconds", "low"),
)


def uptime() -> str:
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    return f"load average {' '.join(load)} on {os.cpu_count()} CPUs"


def inotify_problem(nodes: int) -> str | None:
    """Why this host cannot run ``nodes`` daemons, or None: each watches its device dir with one
    inotify instance (a real node runs one), and the kernel allows ``fs.inotify.max_user_instances``
    per user (128 by default) in all."""
    path = Path("/proc/sys/fs/inotify/max_user_instances")
    limit = int(path.read_text()) if path.exists() else 0
    if limit and limit < nodes + 40:
        return (f"{nodes} daemons need more inotify instances than fs.inotify.max_user_instances={limit} allows; "
                f"raise it (as root: sysctl -w fs.inotify.max_user_instances={max(512, nodes + 40)})")
    return None


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def report(results: dict[str, dict[str, dict[str, Figures]]], options: Options) -> str:
    """The table: per shape, per phase, per figure: ours, Go, ours/Go."""
    lines = [f"scale bed: {options.nodes} nodes x 8 chips, Python {platform.python_version()}, "
             f"{os.cpu_count()} CPUs; fill {options.fill:.0%} at {', '.join(f'{r:g}' for r in options.rates)} pods/s; "
             f"churn {options.churn_completions} x {options.churn_run_s:g} s pods per job at {options.churn_rate:g} "
             f"jobs/s; burst {options.burst} HAMi pods"]
    for shape, drivers in results.items():
        ours, go = drivers.get("ours", {}), drivers.get("go", {})
        lines.append(f"\n== {shape} ==")
        lines.append(f"{'phase':<14}{'figure':<31}{'ours':>10}{'Go':>10}{'ours/Go':>9}")
        for phase in dict.fromkeys([*ours, *go]):
            a, b = ours.get(phase, {}), go.get(phase, {})
            for key, _better in ROWS:
                if key not in a and key not in b:
                    continue
                x, y = a.get(key), b.get(key)
                ratio = (f"{x / y:.2f}" if x is not None and y and not math.isnan(x) and not math.isnan(y) else "-")
                lines.append(f"{phase:<14}{key:<31}{_fmt(x):>10}{_fmt(y):>10}{ratio:>9}")
    return "\n".join(lines)


async def _run(bed: Bed, shapes: list[str], drivers: list[str], options: Options,
               results: dict[str, dict[str, dict[str, Figures]]]) -> None:
    """Run every shape with every driver, filling ``results`` (what finished stays there if one fails)."""
    from tests.cluster.webhook_process import installed_hook

    for shape in shapes:
        for driver in drivers:
            print(f"-- {shape}, {driver}: {uptime()}", flush=True)
            figures = results.setdefault(shape, {}).setdefault(driver, {})
            if shape == "hami" and driver == "ours":
                with installed_hook(bed.cp, bed.workdir, "template", profiles="HAMivNPUCore,npu-310P") as hook:
                    hook.use("template", ("--log-level", "info"))
                    await Session(bed, shape, driver, options, hook, figures).run()
            else:
                await Session(bed, shape, driver, options, figures=figures).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--drivers", default="ours,go")
    parser.add_argument("--rates", default="10,20")
    parser.add_argument("--churn-completions", type=int, default=10)
    parser.add_argument("--churn-run-s", type=float, default=30.0)
    parser.add_argument("--churn-rate", type=float, default=5.0)
    parser.add_argument("--steady-s", type=float, default=60.0)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--tier", choices=("dcmi", "npu-smi"), default="dcmi",
                        help="what the hami and hard nodes' daemons ask: DCMI first (the driver's libdcmi.so, as "
                        "on a node with the Ascend driver; default), or npu-smi only")
    parser.add_argument("--quick", action="store_true", help="10 nodes, 3 completions of 5 s, 20 s windows, burst 100")
    args = parser.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    drivers = [d for d in args.drivers.split(",") if d]
    if not set(shapes) <= set(SHAPES) or not set(drivers) <= {"ours", "go"}:
        parser.error(f"--shapes takes {', '.join(SHAPES)}; --drivers takes ours, go")
    if "go" in drivers and not os.access(go_binary(), os.X_OK):
        print(f"scale: no Go reference driver at {go_binary()} (bench/README.md says how to build it), or pass "
              "--drivers ours", file=sys.stderr)
        return 2
    options = Options(nodes=args.nodes, rates=tuple(float(r) for r in args.rates.split(",")),
                      churn_completions=args.churn_completions, churn_run_s=args.churn_run_s,
                      churn_rate=args.churn_rate, steady_s=args.steady_s, burst=args.burst)
    if args.quick:
        options = Options(nodes=10, rates=options.rates, churn_completions=3, churn_run_s=5, steady_s=20, burst=100)
    problem = inotify_problem(options.nodes)
    if problem:
        print(f"scale: {problem}", file=sys.stderr)
        return 2
    exit_on_sigterm()
    print(f"scale: {uptime()}; the hami and hard nodes ask {args.tier} first", flush=True)
    bed = Bed(options.nodes, dcmi=args.tier == "dcmi").start()
    results: dict[str, dict[str, dict[str, Figures]]] = {}
    try:
        asyncio.run(_run(bed, shapes, drivers, options, results))
    finally:
        bed.stop()
        print(report(results, options))
        print(f"\nafter: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

