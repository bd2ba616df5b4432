"""Prepare/Unprepare latency and throughput of a real daemon, beside an empty RPC and an fsync.

Run: ``.venv/bin/python bench/bench_prepare.py [--claims 1000] [--concurrency 64] [--quick]
[--profile FILE] [--device-metadata false]``

A real ``ascend-dra run --profiles fake --standalone DIR`` process (1,024 simulated devices) is
driven over its unix socket by a grpcio (C-core) client playing the kubelet. Each claim is a
standalone claim file holding one device of its own (claim ``i`` gets ``npu-i-0``).

Phases (each figure is per claim; each RPC carries one claim):

* ``sequential``: Prepare every claim one after the other (the checkpoint grows to ``--claims``
  records), then Unprepare them one after the other;
* ``concurrent``: the same with ``--concurrency`` calls in flight on one channel (as the kubelet
  shares one connection across pod workers), one claim per call, kept in flight from grpcio's own
  thread (:func:`run_calls` with a :class:`Call`).

Floors, measured in the same run against the same daemon and directory:

* ``empty RPC``: ``NodePrepareResources`` with zero claims over the same socket (sequential, and
  with the same concurrency for the concurrent phase's ratios);
* ``fsync``: write 1 KiB to a temp file, fsync it, rename it over a file, fsync the directory, in the
  daemon's plugin data directory (next to ``checkpoint.json``): the cost of one atomic durable
  replace, of which a Prepare does three (checkpoint ``PrepareStarted``, CDI spec, checkpoint
  ``PrepareCompleted``) and an Unprepare one and a half (checkpoint, spec unlink + dir fsync).

``--device-metadata false`` runs the daemon without device metadata files (KEP-5304; on by default, as
in the daemon: each Prepare then also writes one small file and its directories, and each Unprepare
removes them).

``--profile FILE`` runs the daemon under cProfile (main thread only: worker-thread file I/O shows as
the awaiting coroutine) and writes the stats to FILE on exit.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.claimfiles import claim_object, write_claim  # noqa: E402
from tests.integration.daemon import DaemonProcess, Kubelet  # noqa: E402
from tests.kubelet_pb.dra.v1 import api_pb2 as v1_pb2  # noqa: E402

NODE = "bench-node"
DEVICES = 1024


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    ordered = sorted(samples)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class Stats:
    """Latencies (seconds) of one kind of call and the wall time of the phase that made them."""

    def __init__(self, latencies: list[float], wall_s: float) -> None:
        self.latencies = latencies
        self.wall_s = wall_s

    @property
    def p50_ms(self) -> float:
        return percentile(self.latencies, 50) * 1e3

    @property
    def p99_ms(self) -> float:
        return percentile(self.latencies, 99) * 1e3

    @property
    def per_s(self) -> float:
        return len(self.latencies) / self.wall_s

    @classmethod
    def pooled(cls, parts: Sequence[Stats]) -> Stats:
        """Several runs of the same phase as one: their latencies together, their wall times added."""
        return cls([t for part in parts for t in part.latencies], sum(part.wall_s for part in parts))


class Call:
    """One kind of RPC the benchmark's client sends: ``method`` (a grpcio multi-callable) with the
    request ``request(item)`` builds; ``check(item, answer)`` raises if the answer refuses the item."""

    def __init__(self, method: Any, request: Callable[[object], Any],
                 check: Callable[[object, Any], None] | None = None) -> None:
        self.method, self.request, self.check = method, request, check

    def __call__(self, item: object) -> None:
        """Send it and wait for the answer (blocking)."""
        answer = self.method(self.request(item), timeout=45)
        if self.check is not None:
            self.check(item, answer)

    def start(self, item: object) -> Any:
        """Send it; the answer comes as a ``grpc.Future``."""
        return self.method.future(self.request(item), timeout=45)


def run_calls(items: Sequence[object], call: Callable[[object], None], concurrency: int) -> Stats:
    """Call ``call(item)`` for every item, ``concurrency`` at a time; return latencies and wall time.

    One at a time, or for a plain callable, from ``concurrency`` threads that each wait for their
    answer. A :class:`Call` with ``concurrency`` > 1 is kept in flight from grpcio's own thread
    instead (:func:`_run_pipelined`): 64 Python threads waiting on blocking calls cost the client
    0.3-0.5 ms of CPU per Prepare, taken from the 2 cores the daemon and the API server share
    (docs/performance.md#the-benchmarks-client).
    """
    if concurrency > 1 and isinstance(call, Call):
        return _run_pipelined(items, call, concurrency)
    latencies: list[float] = []
    errors: list[BaseException] = []
    work: queue.SimpleQueue[object] = queue.SimpleQueue()
    for item in items:
        work.put(item)
    lock = threading.Lock()

    def worker() -> None:
        mine = []
        while True:
            try:
                item = work.get_nowait()
            except queue.Empty:
                break
            start = time.perf_counter()
            try:
                call(item)
            except BaseException as exc:
                errors.append(exc)
                break
            mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} call(s) failed; first: {errors[0]!r}") from errors[0]
    return Stats(latencies, wall)


def _run_pipelined(items: Sequence[object], call: Call, concurrency: int) -> Stats:
    """``concurrency`` calls in flight with no thread of ours waiting: each answer's callback (on
    grpcio's thread) records its latency and sends the next item. The first failure stops sending."""
    todo = list(items)
    latencies: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    finished = threading.Event()
    sent = answered = 0
    none = object()

    def take() -> object:  # under lock: the next item to send, or ``none``
        nonlocal sent
        if errors or sent == len(todo):
            return none
        sent += 1
        return todo[sent - 1]

    def send(item: object) -> None:  # outside the lock: a call already answered runs done() at once
        began = time.perf_counter()
        call.start(item).add_done_callback(lambda future: done(item, future, began))

    def done(item: object, future: Any, began: float) -> None:
        nonlocal answered
        took = time.perf_counter() - began
        try:
            answer = future.result()
            if call.check is not None:
                call.check(item, answer)
        except BaseException as exc:
            errors.append(exc)
        with lock:
            latencies.append(took)
            answered += 1
            following = take()
            if following is none and answered == sent:
                finished.set()
        if following is not none:
            send(following)

    start = time.perf_counter()
    with lock:
        first = [item for item in (take() for _ in range(concurrency)) if item is not none]
        if not first:
            finished.set()
    for item in first:
        send(item)
    finished.wait()
    wall = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} call(s) failed; first: {errors[0]!r}") from errors[0]
    return Stats(latencies, wall)


def fsync_floor(directory: Path, rounds: int) -> Stats:
    """One atomic durable replace of a 1 KiB file in ``directory`` (what write_atomic does)."""
    target = directory / "bench-fsync.json"
    tmp = directory / ".bench-fsync.json.tmp"
    data = os.urandom(1024)
    latencies = []
    start_all = time.perf_counter()
    for _ in range(rounds):
        start = time.perf_counter()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        latencies.append(time.perf_counter() - start)
    wall = time.perf_counter() - start_all
    target.unlink()
    return Stats(latencies, wall)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=1000, help="claims per phase (default 1000, max 1024)")
    parser.add_argument("--concurrency", type=int, default=64, help="client threads in the concurrent phase")
    parser.add_argument("--floor-rounds", type=int, default=1000, help="calls per floor measurement")
    parser.add_argument("--quick", action="store_true", help="a small run: 100 claims, 16 threads, 200 floor calls")
    parser.add_argument("--profile", type=Path, help="run the daemon under cProfile and write its stats here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (printed) for inspection")
    parser.add_argument("--device-metadata", choices=("true", "false"), default="true",
                        help="the daemon's --device-metadata (default true, as the daemon's)")
    args = parser.parse_args(argv)
    if args.quick:
        args.claims, args.concurrency, args.floor_rounds = 100, 16, 200
    if not 1 <= args.claims <= DEVICES:
        parser.error(f"--claims must be 1..{DEVICES} (each claim takes a device of its own)")

    # A short path: unix socket paths must stay under 108 bytes.
    root = Path(tempfile.mkdtemp(prefix="adb-", dir="/tmp"))
    daemon = DaemonProcess(root / "sa", node=NODE, fake_devices=DEVICES,
                           extra_args=["--device-metadata", args.device_metadata])
    try:
        claims = [write_claim(daemon.root, claim_object(f"bench-{i}", node=NODE, results=[("npu", f"npu-{i}-0")]))
                  for i in range(args.claims)]
        start_daemon(daemon, None if args.profile is None else args.profile.resolve())
        kubelet = Kubelet(daemon)
        try:
            figures = measure(kubelet, daemon, claims, args)
        finally:
            kubelet.close()
        code = daemon.stop()
        if code:
            print(f"daemon exited with {code}:\n{daemon.log_text()[-4000:]}", file=sys.stderr)
    finally:
        daemon.stop()
        if args.keep:
            print(f"work directory kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print_table(figures, args)
    if args.profile is not None:
        print(f"\ncProfile stats of the daemon: {args.profile} (python -m pstats {args.profile})")
    return 0


def start_daemon(daemon: DaemonProcess, profile: Path | None) -> None:
    """Start the daemon, under ``python -m cProfile -o PROFILE`` when ``profile`` is given."""
    if profile is None:
        daemon.start()
        return
    original = subprocess.Popen

    def popen(args, *rest, **kwargs):  # type: ignore[no-untyped-def]
        return original([args[0], "-m", "cProfile", "-o", str(profile), *args[1:]], *rest, **kwargs)

    subprocess.Popen = popen  # type: ignore[misc]  # DaemonProcess.start looks it up at call time
    try:
        daemon.start()
    finally:
        subprocess.Popen = original  # type: ignore[misc]


def measure(kubelet: Kubelet, daemon: DaemonProcess, claims: list[dict], args: argparse.Namespace) -> dict:
    empty = v1_pb2.NodePrepareResourcesRequest(claims=[])
    empty_call = Call(kubelet.v1.NodePrepareResources, lambda _: empty)

    def prepared(claim: object, reply: Any) -> None:
        uid = claim["metadata"]["uid"]
        if reply.claims[uid].error or len(reply.claims[uid].devices) != 1:
            raise RuntimeError(f"prepare {uid}: {reply.claims[uid].error or 'no device'}")

    def unprepared(claim: object, reply: Any) -> None:
        uid = claim["metadata"]["uid"]
        if reply.claims[uid].error:
            raise RuntimeError(f"unprepare {uid}: {reply.claims[uid].error}")

    prepare = Call(kubelet.v1.NodePrepareResources, kubelet.prepare_request, prepared)
    unprepare = Call(kubelet.v1.NodeUnprepareResources, kubelet.unprepare_request, unprepared)

    # Warm up the channel and the daemon's code paths.
    run_calls(range(50), empty_call, 1)
    prepare(claims[0])
    unprepare(claims[0])

    figures = {}
    figures["empty RPC, 1 at a time"] = run_calls(range(args.floor_rounds), empty_call, 1)
    figures[f"empty RPC, {args.concurrency} at a time"] = run_calls(
        range(args.floor_rounds * 4), empty_call, args.concurrency)
    figures["fsync (1 KiB atomic replace)"] = fsync_floor(daemon.checkpoint.parent, args.floor_rounds)
    figures["prepare, 1 at a time"] = run_calls(claims, prepare, 1)
    figures["unprepare, 1 at a time"] = run_calls(claims, unprepare, 1)
    figures[f"prepare, {args.concurrency} at a time"] = run_calls(claims, prepare, args.concurrency)
    figures[f"unprepare, {args.concurrency} at a time"] = run_calls(claims, unprepare, args.concurrency)
    leftovers = [p for p in daemon.cdi_dir.glob("*.yaml") if not p.name.endswith("_common.yaml")]
    if leftovers:
        raise RuntimeError(f"{len(leftovers)} CDI specs left after unprepare, e.g. {leftovers[0]}")
    return figures


def print_table(figures: dict[str, Stats], args: argparse.Namespace) -> None:
    seq_rpc = figures["empty RPC, 1 at a time"]
    con_rpc = figures[f"empty RPC, {args.concurrency} at a time"]
    fsync = figures["fsync (1 KiB atomic replace)"]
    print(f"\nascend-dra Prepare/Unprepare benchmark: {args.claims} single-device claims, fake profile, "
          f"{DEVICES} devices, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    header = (f"{'figure':<34}{'p50 ms':>9}{'p99 ms':>9}{'calls/s':>10}"
              f"{'p50/RPC':>9}{'p50/fsync':>10}{'/s vs RPC':>10}")
    print(header)
    print("-" * len(header))
    for name, stats in figures.items():
        if name.startswith(("prepare", "unprepare")):
            rpc = con_rpc if "1 at a time" not in name else seq_rpc
            ratios = (f"{stats.p50_ms / rpc.p50_ms:>9.1f}{stats.p50_ms / fsync.p50_ms:>10.1f}"
                      f"{stats.per_s / rpc.per_s:>10.3f}")
        else:
            ratios = f"{'floor':>9}{'':>10}{'':>10}"
        print(f"{name:<34}{stats.p50_ms:>9.3f}{stats.p99_ms:>9.3f}{stats.per_s:>10.0f}{ratios}")
    print("\np50/RPC: p50 over the empty-RPC p50 at the same concurrency; p50/fsync: p50 over one atomic durable "
          "replace; /s vs RPC: claims/s over empty RPCs/s at the same concurrency.\nEach call carries one claim, so "
          "calls/s = claims/s. A fake-profile Prepare does one journal append (fdatasync) and writes its CDI spec "
          "without fsync (docs/durable-state.md).")


if __name__ == "__main__":
    sys.exit(main())
