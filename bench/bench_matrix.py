"""Every Prepare/Unprepare figure of issue 15 in one table, each beside its floor measured in the same run.

Run: ``.venv/bin/python bench/bench_matrix.py [--quick] [--modes standalone,cluster]`` (``make bench``).

For each mode (``standalone``: claim files; ``cluster``: claims in the real test API server, the daemon
GETs each one) and each number of claims already prepared (0, 128, 1,024), ``--batch`` claims are
prepared and then unprepared 1, 16 and 64 at a time, ``--rounds`` times, the samples of the rounds
pooled (4 x 256 by default: a p99 of 256 calls one at a time is about the third slowest call of one
second, and one hiccup of the VM decided it; grpcio, one channel, one claim per call; with
more than one in flight the answers' callbacks send the next calls,
docs/performance.md#the-benchmarks-client). Floors, measured against the same daemon, directory and
API server, again for each number of claims held (the RPC just before each phase, at its
concurrency), so that a figure and its floor are minutes apart at most: this VM's speed drifts by
a third within an hour, and a full matrix takes about 11 minutes. Every floor and every phase
begins once the daemon has written the claim statuses of what came before
(``ascend_dra_claim_status_pending`` 0): a GET floor measured while 1,024 statuses went out was
nearly twice as slow as one measured on an idle API server:

* ``RPC``: an empty ``NodePrepareResources`` at the same concurrency;
* ``write``: one durable append of a 512-byte line (write + fdatasync) in the plugin data dir, the
  durable work one Prepare or Unprepare does (docs/durable-state.md);
* ``GET`` (cluster): a keep-alive GET of a ResourceClaim over one TLS connection;
* ``claim file read`` (standalone): reading and parsing one claim file as the daemon does (PyYAML's
  C loader).

The daemon's CDI dir is on tmpfs (``/dev/shm``), as ``/var/run/cdi`` is on a node; its checkpoint is on
the disk, as ``/var/lib/kubelet`` is.

Each timed phase follows ``--warmup`` untimed Prepares and Unprepares of other claims (default 8): the
floors are measured in long warm runs, and on a VM the first calls after even a short idle spell are
2-5x slower, the empty RPC as much as a Prepare. How a lone call fares is printed apart: the first
empty RPC and the first Prepare after 1 s of idleness.

Prepare's floor is RPC + write + GET (cluster mode) or claim file read (standalone), Unprepare's RPC
+ write. Also: cold start to GetInfo answered and to the first slice (cluster, from
bench_startup.py), the event loop's longest stall while serving
(``ascend_dra_event_loop_stall_max_seconds``) beside the same monitor in a bare process, and the
daemon's RSS idle and after every phase beside a process that only imports the dependencies.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_prepare import Call, Stats, run_calls  # noqa: E402
from bench_startup import import_floor, rss_mib  # noqa: E402

from tests.claimfiles import claim_object, create_in_api, write_claim  # noqa: E402
from tests.cluster.controlplane import exit_on_sigterm, free_port  # noqa: E402
from tests.integration.daemon import DaemonProcess, Kubelet  # noqa: E402
from tests.kubelet_pb.dra.v1 import api_pb2 as v1_pb2  # noqa: E402

RES = "/apis/resource.k8s.io/v1"
NODE = "bench-node"


def append_floor(directory: Path, rounds: int) -> Stats:
    """One durable 512-byte append (write + fdatasync), what one journal write costs."""
    path = directory / "bench-append.journal"
    line = os.urandom(255).hex().encode() + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    latencies = []
    started = time.perf_counter()
    try:
        for _ in range(rounds):
            t = time.perf_counter()
            os.write(fd, line)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink()
    return Stats(latencies, time.perf_counter() - started)


def get_floor(cp, name: str, rounds: int) -> Stats:
    """Keep-alive GETs of one ResourceClaim over one TLS connection (http.client)."""
    url = urllib.parse.urlsplit(cp.server)
    conn = http.client.HTTPSConnection(url.hostname, url.port, context=cp._ssl())
    headers = {"Authorization": f"Bearer {cp.token}", "Accept": "application/json"}
    latencies = []
    started = time.perf_counter()
    for _ in range(rounds):
        t = time.perf_counter()
        conn.request("GET", f"{RES}/namespaces/default/resourceclaims/{name}", headers=headers)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"GET claim: {response.status}")
        latencies.append(time.perf_counter() - t)
    conn.close()
    return Stats(latencies, time.perf_counter() - started)


#: Calls after a second of idleness in the cold figure (each a fresh claim: a device of its own).
COLD_ROUNDS = 5


def cold_calls(node: Node, first_device: int, empty_call, prepare, unprepare) -> tuple[float, float]:
    """(empty RPC, Prepare): the median latency in ms of the first call after 1 s of idleness,
    over :data:`COLD_ROUNDS` rounds, each call's claim fresh.

    On a VM the first calls after an idle spell are 2-5x slower than the steady state, the empty RPC
    as much as a Prepare (docs/performance.md#cold-calls), and fall back over the next ~8 calls; the
    timed phases are measured warm (``--warmup``), so this is how a lone Prepare fares, beside its floor.
    """
    rpc, prep = [], []
    for claim in node.claims(COLD_ROUNDS, first_device):
        time.sleep(1)
        t = time.perf_counter()
        empty_call(None)
        rpc.append((time.perf_counter() - t) * 1000)
        time.sleep(1)
        t = time.perf_counter()
        prepare(claim)
        prep.append((time.perf_counter() - t) * 1000)
        unprepare(claim)
    return statistics.median(rpc), statistics.median(prep)


def claim_file_floor(path: Path, rounds: int) -> Stats:
    """Reading and parsing one standalone claim file as the daemon does (claims.py: the whole file,
    PyYAML's C loader): what any Prepare in standalone mode must do to learn its claim."""
    from ascend_dra.state.claims import _Loader

    latencies = []
    started = time.perf_counter()
    for _ in range(rounds):
        t = time.perf_counter()
        __import__("yaml").load(path.read_text(), Loader=_Loader)
        latencies.append(time.perf_counter() - t)
    return Stats(latencies, time.perf_counter() - started)


def stall_floor(seconds: float = 3.0) -> tuple[float, float]:
    """(own, late): the longest stall of the daemon's monitor (loopstall.py) in a bare asyncio process
    doing nothing else, without and with the time its thread waited for a CPU (the OS's share)."""
    code = ("import anyio\nfrom ascend_dra.observe.loopstall import LoopStallMonitor\nasync def m():\n"
            " mon = LoopStallMonitor()\n async with anyio.create_task_group() as tg:\n"
            f"  tg.start_soon(mon.run)\n  await anyio.sleep({seconds})\n  tg.cancel_scope.cancel()\n"
            " print(mon.longest['starting'], mon.longest_late['starting'])\nanyio.run(m)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    own, late = out.split()
    return float(own), float(late)


def scrape(port: int, sample: str) -> float | None:
    """The value of one sample (name and labels as exposed) on the daemon's ``/metrics``; None if absent."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = re.search(rf"^{re.escape(sample)} ([0-9.e+-]+)$", body, re.MULTILINE)
    return float(found.group(1)) if found else None


def scrape_stall(port: int) -> float:
    stall = scrape(port, 'ascend_dra_event_loop_stall_max_seconds{phase="serving"}')
    return float("nan") if stall is None else stall


def settle(port: int, within_s: float = 120.0) -> float:
    """Wait until the daemon has no claim status left to write (``ascend_dra_claim_status_pending``
    0; standalone has none): a floor or a phase measured during the flush of the previous phase's
    statuses would share the API server with it. Return the seconds waited."""
    began = time.monotonic()
    while time.monotonic() - began < within_s:
        if not scrape(port, "ascend_dra_claim_status_pending"):  # 0, or not exported
            return time.monotonic() - began
        time.sleep(0.05)
    raise RuntimeError(f"the daemon's claim statuses were still being written after {within_s:.0f} s")


def tmpfs_cdi_dir(cdi_dir: Path) -> Path | None:
    """Put the daemon's CDI dir on tmpfs, as ``/var/run/cdi`` is on a real node (the checkpoint stays on
    disk): ``cdi_dir`` becomes a symlink to a new dir under ``/dev/shm``, returned; None where there is none."""
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        return None
    target = Path(tempfile.mkdtemp(prefix="adm-cdi-", dir="/dev/shm"))
    cdi_dir.parent.mkdir(parents=True, exist_ok=True)
    cdi_dir.symlink_to(target, target_is_directory=True)
    return target


class GetInfoProbe:
    """Calls GetInfo on the registration socket every 20 ms from a thread of its own (its own
    channel, as the kubelet's plugin watcher has), recording each answer's latency in ms."""

    def __init__(self, daemon: DaemonProcess, into: list[float]) -> None:
        self.kubelet, self.into = Kubelet(daemon), into
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            started = time.perf_counter()
            try:
                self.kubelet.get_info()  # deadline 1 s, as the kubelet's
            except Exception:  # the deadline missed (or the daemon gone): shown as inf
                self.into.append(float("inf"))
                continue
            self.into.append((time.perf_counter() - started) * 1000)

    def __enter__(self) -> GetInfoProbe:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.kubelet.close()


class Node:
    """A daemon (standalone or cluster mode) and a source of allocated claims for it."""

    def __init__(self, mode: str, root: Path, devices: int, cp=None, loopwatch: Path | None = None,
                 claim_status: bool = True) -> None:
        self.mode, self.cp, self.devices = mode, cp, devices
        self.metrics_port = free_port()
        args = ["--metrics-port", str(self.metrics_port), "--metrics-address", "127.0.0.1"]
        if not claim_status:
            args += ["--claim-status", "false"]
        node = cp.node_name if cp is not None else NODE
        self.node = node
        env = {}
        if loopwatch is not None:  # bench/loopwatch/sitecustomize.py: what held the loop
            paths = [str(ROOT / "bench" / "loopwatch"), *filter(None, [os.environ.get("PYTHONPATH")])]
            env = {"PYTHONPATH": os.pathsep.join(paths),
                   "ASCEND_DRA_LOOPWATCH": str(loopwatch)}
        self.daemon = DaemonProcess(root / "node", node=node, fake_devices=devices, extra_args=args, env=env,
                                    kubeconfig=cp.kubeconfig if cp is not None else None)
        self.cdi_tmpfs = tmpfs_cdi_dir(self.daemon.cdi_dir)

    def close(self) -> None:
        self.daemon.stop()
        if self.cdi_tmpfs is not None:
            shutil.rmtree(self.cdi_tmpfs, ignore_errors=True)
    def claims(self, n: int, first_device: int) -> list[dict]:
        """``n`` new allocated claims on devices ``first_device``.. (new uids each time)."""
        made = []
        for i in range(n):
            device = f"npu-{first_device + i}-0"
            obj = claim_object(f"b-{uuid.uuid4().hex[:10]}", node=self.node, results=[("npu", device)])
            if self.cp is None:
                write_claim(self.daemon.root, obj)
            else:
                obj = create_in_api(self.cp, obj)
            made.append(obj)
        return made


def _span(values) -> str:
    """``"lo-hi"`` of floats in ms (one value: just it), for the floors measured at each held count."""
    lo, hi = min(values := list(values)), max(values)
    return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"


def bench_mode(mode: str, args, cp=None) -> tuple[list[tuple], dict]:
    root = Path(tempfile.mkdtemp(prefix="adm-", dir="/tmp"))
    held_counts = [0, 128] if args.quick else [0, 128, 1024]
    most = max(held_counts)
    spare = most + args.batch + 1  # the first device after the held claims, a batch and the GET probe
    loopwatch = Path(args.loopwatch).with_suffix(f".{mode}.json") if args.loopwatch else None
    node = Node(mode, root, devices=spare + max(args.warmup, COLD_ROUNDS), cp=cp, loopwatch=loopwatch,
                claim_status=args.claim_status == "on")
    rows: list[tuple] = []
    extra: dict = {}
    try:
        node.daemon.start()
        if cp is not None:  # wait for the first publish: the inventory is what Prepare checks
            time.sleep(1)
        extra["rss idle"] = rss_mib(node.daemon.proc.pid)
        k = Kubelet(node.daemon)
        empty = v1_pb2.NodePrepareResourcesRequest(claims=[])
        empty_call = Call(k.v1.NodePrepareResources, lambda _: empty)

        def answered(claim: dict, reply) -> None:
            if reply.claims[claim["metadata"]["uid"]].error:
                raise RuntimeError(reply.claims[claim["metadata"]["uid"]].error)

        prepare = Call(k.v1.NodePrepareResources, k.prepare_request, answered)
        unprepare = Call(k.v1.NodeUnprepareResources, k.unprepare_request, answered)

        run_calls(range(50), empty_call, 1)
        # The claim's fetch: a keep-alive GET (cluster), reading and parsing its file (standalone).
        probe = node.claims(1, most + args.batch)[0]

        def fetch_floor() -> Stats:
            if cp is not None:
                return get_floor(cp, probe["metadata"]["name"], args.floor_rounds)
            return claim_file_floor(node.daemon.root / "claims" / "default" / f"{probe['metadata']['name']}.yaml",
                                    args.floor_rounds)

        def rpc_floor(in_flight: int) -> Stats:
            rounds = args.floor_rounds if in_flight == 1 else args.floor_rounds * 2
            return run_calls(range(rounds), empty_call, in_flight)

        # Measured again just before each held count's phases (the RPC before each phase): this
        # VM's speed drifts by a third within an hour, and a full matrix takes several minutes.
        settle(node.metrics_port)
        write, get = append_floor(node.daemon.checkpoint.parent, args.floor_rounds), fetch_floor()
        rpc = {1: rpc_floor(1)}  # 16 and 64: before their phases
        snapshots: list[tuple[dict[int, Stats], Stats, Stats]] = []

        def prepare_floor(in_flight: int) -> float:
            return rpc[in_flight].p50_ms + write.p50_ms + get.p50_ms

        extra["cold"] = cold_calls(node, spare, empty_call, prepare, unprepare)
        extra["floor_rpc"], extra["floor_prepare"] = rpc[1].p50_ms, prepare_floor(1)  # what the cold calls face
        held: list[dict] = []
        getinfo_ms: list[float] = []  # GetInfo answers while 64 calls are in flight (the kubelet allows 1 s)
        for count in held_counts:
            extra_claims = node.claims(count - len(held), len(held))
            run_calls(extra_claims, prepare, 16)
            held += extra_claims
            settle(node.metrics_port)
            write, get = append_floor(node.daemon.checkpoint.parent, args.floor_rounds), fetch_floor()
            for c in (1, 16, 64):
                settle(node.metrics_port)
                rpc[c] = rpc_floor(c)
                batch = node.claims(args.batch, most)
                if args.warmup:  # untimed, as the floors are measured warm (docs/performance.md#cold-calls)
                    warm = node.claims(args.warmup, spare)
                    run_calls(warm, prepare, min(c, args.warmup))
                    run_calls(warm, unprepare, min(c, args.warmup))
                    settle(node.metrics_port)
                rounds: list[tuple[Stats, Stats]] = []
                with GetInfoProbe(node.daemon, getinfo_ms) if c == 64 else contextlib.nullcontext():
                    for _ in range(args.rounds):
                        rounds.append((run_calls(batch, prepare, c), run_calls(batch, unprepare, c)))
                p, u = Stats.pooled([r[0] for r in rounds]), Stats.pooled([r[1] for r in rounds])
                floor_p = prepare_floor(c)
                floor_u = rpc[c].p50_ms + write.p50_ms
                rows.append((mode, count, c, "prepare", p, floor_p))
                rows.append((mode, count, c, "unprepare", u, floor_u))
            snapshots.append((dict(rpc), write, get))

        # The floors' own p99 beside their p50, over the held counts: the p99 targets are ratios to
        # the p50 floor, and a GET or an fdatasync alone can take twice its p50 now and then.
        def spread(stats: list[Stats]) -> str:
            return f"{_span(s.p50_ms for s in stats)}/{_span(s.p99_ms for s in stats)}"

        extra["floors"] = {"RPC p50/p99 ms (1/16/64)": " ".join(spread([r[c] for r, _, _ in snapshots])
                                                               for c in (1, 16, 64)),
                           "write p50/p99 ms": spread([w for _, w, _ in snapshots]),
                           f"{'GET' if cp is not None else 'claim file read'} p50/p99 ms":
                               spread([g for _, _, g in snapshots])}
        extra["getinfo"] = getinfo_ms
        extra["stall"] = scrape_stall(node.metrics_port)
        extra["rss after"] = rss_mib(node.daemon.proc.pid)
        k.close()
    finally:
        node.close()
        shutil.rmtree(root, ignore_errors=True)
    return rows, extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="standalone,cluster")
    parser.add_argument("--batch", type=int, default=256, help="claims prepared and unprepared per figure")
    parser.add_argument("--rounds", type=int, default=None,
                        help="times each batch is prepared and unprepared per figure (the samples pooled); "
                             "default 4, 1 with --quick")
    parser.add_argument("--floor-rounds", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="0 and 128 held, batches of 64")
    parser.add_argument("--startup-runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=8,
                        help="untimed Prepares and Unprepares (other claims) just before each timed phase, as "
                             "the floors are measured warm; 0: none (docs/performance.md#cold-calls)")
    parser.add_argument("--loopwatch", metavar="PATH", help="record the daemon's longest event-loop callbacks and "
                        "the stacks inside them to PATH.<mode>.json (bench/loopwatch; slows the daemon a little)")
    parser.add_argument("--claim-status", choices=("on", "off"), default="on",
                        help="cluster mode: write status.devices after each answer (on, as shipped) or not, to "
                             "tell its share of the figures (the writes compete for the CPU and the disk)")
    args = parser.parse_args(argv)
    exit_on_sigterm()  # a stopped run still stops its control plane
    if args.quick:  # an explicit --rounds stays (it was overridden: "--quick --rounds 4" ran one round)
        args.batch, args.floor_rounds, args.startup_runs = 64, 200, 1
    if args.rounds is None:
        args.rounds = 1 if args.quick else 4
    modes = args.modes.split(",")
    cp = None
    if "cluster" in modes:
        from tests.cluster.controlplane import ControlPlane, default_bin_dir

        cp = ControlPlane(Path(tempfile.mkdtemp(prefix="adm-cp-")), default_bin_dir())
        cp.start()
        for doc in __import__("yaml").safe_load_all((ROOT / "examples/deviceclasses/fake.yaml").read_text()):
            cp.api("POST", f"{RES}/deviceclasses", doc)
    rows, extras = [], {}
    try:
        for mode in modes:
            mode_rows, extras[mode] = bench_mode(mode, args, cp if mode == "cluster" else None)
            rows += mode_rows
        startup = None
        if cp is not None:
            from bench_startup import one_start

            runs = [one_start(cp) for _ in range(args.startup_runs)]
            startup = [statistics.median(r[i] for r in runs) for i in range(len(runs[0]))]
    finally:
        if cp is not None:
            cp.stop()
    floor_import_s, floor_rss = import_floor()
    loop_floor = stall_floor()

    print(f"\nascend-dra benchmark matrix: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, batches of "
          f"{args.batch} single-device claims prepared and unprepared {args.rounds} times a figure, fake profile, "
          f"{args.warmup} untimed calls before each phase"
          + ("" if args.claim_status == "on" else ", claim status (status.devices) not written"))
    header = f"{'mode':<11}{'held':>6}{'in flight':>10}  {'op':<10}{'p50 ms':>8}{'p99 ms':>8}{'claims/s':>9}" \
             f"{'floor ms':>9}{'p50/floor':>10}{'p99/floor':>10}"
    print(header)
    print("-" * len(header))
    for mode, held, c, op, stats, floor in rows:
        print(f"{mode:<11}{held:>6}{c:>10}  {op:<10}{stats.p50_ms:>8.2f}{stats.p99_ms:>8.2f}{stats.per_s:>9.0f}"
              f"{floor:>9.2f}{stats.p50_ms / floor:>10.2f}{stats.p99_ms / floor:>10.2f}")
    print("-" * len(header))
    for mode, extra in extras.items():
        print(f"{mode:<11} floors: " + ", ".join(f"{k} {v}" for k, v in extra["floors"].items()))
        cold_rpc, cold_prepare = extra["cold"]
        print(f"{mode:<11} first call after 1 s idle (median of {COLD_ROUNDS}): empty RPC {cold_rpc:.2f} ms, Prepare "
              f"{cold_prepare:.2f} ms (ratio {cold_prepare / cold_rpc:.2f}; warm, the Prepare floor over the RPC "
              f"floor is {(extra['floor_prepare'] / extra['floor_rpc']):.2f})")
        print(f"{mode:<11} longest event-loop stall while serving, the CPU wait taken out (loopstall.py): "
              f"{extra['stall'] * 1000:.1f} ms (floor, the same monitor in a bare asyncio process: "
              f"{loop_floor[0] * 1000:.1f} ms; its lateness with the CPU wait: {loop_floor[1] * 1000:.1f} ms)")
        if extra["getinfo"]:
            gi = sorted(extra["getinfo"])
            print(f"{mode:<11} GetInfo while 64 calls are in flight: p50 {statistics.median(gi):.1f} ms, max "
                  f"{gi[-1]:.1f} ms over {len(gi)} calls (the kubelet's deadline: 1000 ms)")
        print(f"{mode:<11} RSS idle {extra['rss idle']:.1f} MiB, after all phases {extra['rss after']:.1f} MiB "
              f"(floor, import only: {floor_rss:.1f} MiB; ratios {extra['rss idle'] / floor_rss:.2f}, "
              f"{extra['rss after'] / floor_rss:.2f})")
    if startup is not None:
        socket_s, getinfo_s, slice_s = startup[0], startup[1], startup[2]
        print(f"cluster     cold start: socket {socket_s * 1000:.0f} ms, GetInfo answered {getinfo_s * 1000:.0f} ms "
              f"({(getinfo_s - socket_s) * 1000:.0f} ms after the socket accepted), first slice "
              f"{slice_s * 1000:.0f} ms (floor, import only: {floor_import_s * 1000:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
