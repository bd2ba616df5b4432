"""Our daemon beside the Go reference driver (kubernetes-sigs/dra-example-driver's kubelet plugin), issue 15.

Run: ``.venv/bin/python bench/bench_vs_go.py [--quick] [--claims 256] [--device-status default|on|off]
[--order ours,Go|Go,ours] [--go-binary PATH]``

One test control plane (tests/cluster/controlplane.py) serves both drivers, one after the other, on
the same node name: ours (the ``fake`` profile in cluster mode, as bench_matrix.py runs it) and
``dra-example-kubeletplugin`` of kubernetes-sigs/dra-example-driver v0.4.0 (commit
bab2dce4b045e729565c9a3b85554738247cda30; driver ``gpu.example.com``, devices ``gpu-0``..), run with
``--kube-api-qps -1`` (client-go's rate limiter off: its defaults, QPS 5 / burst 10, would cap
it at 5 claim GETs a second after the first 10). The binary is not built by this repository; the
script looks for it under ``${ASCEND_DRA_CACHE:-~/.cache/ascend-dra}/dra-example-driver-bab2dce/`` and
exits 2 with a hint when it is missing.

Each driver is played the kubelet by grpcio (C-core) stubs of the v1 DRA API over one channel, all
client threads sharing it. Figures, the same claims count for both (``--claims``, 256; ``--quick`` 64):

* start -> first ResourceSlice in the API server (8 devices each, median of ``--startup-runs``);
* an empty ``NodePrepareResources`` at 1 in flight: p50, and the driver's CPU per call
  (utime + stime of /proc/PID/stat before and after);
* Prepare of single-device claims one at a time (p50, p99), then their Unprepare (p50); the claims are
  created in the API server with their allocation written as the scheduler would (tests/claimfiles.py):
  ``npu-K-0`` of our pool, or ``gpu-K`` of the Go driver's (at most 128 devices: its one slice holds
  them all; claim K takes ``gpu-(K mod 128)``, which it does not check);
* 16 and 64 Prepares in flight: claims/s (then Unprepared at the same concurrency);
* driver CPU ms per Prepare (1, 16, 64 in flight) and per Unprepare (one at a time), and the driver's
  requests on ResourceClaims per Prepare and per Unprepare (kube-apiserver's ``apiserver_request_total``);
* the driver's CPU while idle (ms per second, over ``--idle-seconds``): every CPU figure above is
  net of it (the phase's CPU minus the idle rate times the phase's length);
* RSS idle (after its first slice) and after every phase.

``--device-status on`` makes both write the claims' ``status.devices`` (the Go driver's
``--gpu-device-status``: a GET and an UpdateStatus inside its Prepare), ``off`` neither (our
``--claim-status false``); the default runs each as shipped: ours writes it after the answer, the
Go driver does not. ``--order Go,ours`` runs the Go driver first.

Every answer is checked: no error, one device, CDI device ids (for the Go driver, the claim's own
``k8s.gpu.example.com/gpu=<uid>-gpu-K``); no claim CDI spec is left after the Unprepares. Before each
CPU reading the driver is left until it is idle again (two half-second windows at its idle rate), so
background work such as our claim status writes is counted in the phase that caused it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_matrix import tmpfs_cdi_dir  # noqa: E402
from bench_prepare import Call, Stats, run_calls  # noqa: E402
from bench_startup import CLK_TCK, cpu_s, delete_slices, driver_slices, rss_mib  # noqa: E402

from tests.claimfiles import claim_object, create_in_api  # noqa: E402
from tests.integration.daemon import DaemonProcess, Kubelet, accepts  # noqa: E402
from tests.kubelet_pb.dra.v1 import api_pb2 as v1_pb2  # noqa: E402
from tests.kubelet_pb.dra.v1 import api_pb2_grpc as v1_grpc  # noqa: E402

RES = "/apis/resource.k8s.io/v1"
OUR_DRIVER = "ascend.project-hami.io"
GO_DRIVER = "gpu.example.com"
GO_COMMIT = "bab2dce4b045e729565c9a3b85554738247cda30"  # v0.4.0
GO_MAX_DEVICES = 128  # its gpu profile publishes one slice; the API server takes at most 128 devices in one
STARTUP_DEVICES = 8  # the Go driver's default --num-devices


def default_go_binary() -> Path:
    cache = Path(os.environ.get("ASCEND_DRA_CACHE") or Path.home() / ".cache" / "ascend-dra")
    return cache / f"dra-example-driver-{GO_COMMIT[:7]}" / "dra-example-kubeletplugin"


def idle_rate(pid: int, seconds: float) -> float:
    """The process's CPU seconds per second while nobody calls it."""
    cpu0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_s(pid) - cpu0) / (time.monotonic() - t0)


def settle(pid: int, idle: float, window: float = 0.5, limit: float = 20.0) -> tuple[float, float]:
    """Wait until two windows in a row used no more CPU than idle (plus two clock ticks); return the
    CPU seconds and the monotonic time of that last reading."""
    deadline = time.monotonic() + limit
    last, then, quiet = cpu_s(pid), time.monotonic(), 0
    while time.monotonic() < deadline and quiet < 2:
        time.sleep(window)
        now, at = cpu_s(pid), time.monotonic()
        quiet = quiet + 1 if now - last <= idle * (at - then) + 2 / CLK_TCK else 0
        last, then = now, at
    return last, then


def claim_requests(cp) -> int:
    """kube-apiserver's count of requests on resourceclaims (any verb, subresource, code) so far."""
    status, body = cp.api("GET", "/metrics")
    if status != 200:
        raise RuntimeError(f"GET /metrics: {status}")
    total = 0.0
    for line in body.splitlines() if isinstance(body, str) else ():
        if line.startswith("apiserver_request_total{") and 'resource="resourceclaims"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


class Driver:
    """One kubelet plugin process on the test control plane: start, its sockets, claims for it."""

    name = ""
    driver = ""

    def __init__(self, cp, root: Path, devices: int) -> None:
        self.cp, self.root, self.devices = cp, root, devices
        root.mkdir(parents=True, exist_ok=True)
        self.cdi_dir = root / "cdi"
        self.cdi_tmpfs = tmpfs_cdi_dir(self.cdi_dir)  # as /var/run/cdi on a node
        # Each driver is given the real directory, as on a node: the Go driver's CDI library rescans
        # its spec dirs after every write and finds nothing in a symlinked one, which made its Prepare look cheap.
        self.cdi_root = self.cdi_tmpfs or self.cdi_dir
        self.pid = 0

    # -- process
    def spawn(self) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def log_tail(self) -> str:
        raise NotImplementedError

    @property
    def dra_socket(self) -> Path:
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> float:
        """Start the process; return seconds from the start to its first ResourceSlice in the API
        server, once its DRA socket accepts too."""
        delete_slices(self.cp, self.driver)
        started = time.perf_counter()
        self.spawn()
        slice_s = None
        deadline = started + timeout
        while time.perf_counter() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited:\n{self.log_tail()}")
            if slice_s is None and driver_slices(self.cp, self.driver):
                slice_s = time.perf_counter() - started
            if slice_s is not None and accepts(self.dra_socket):
                return slice_s
            time.sleep(0.005)
        raise RuntimeError(f"{self.name}: no ResourceSlice and DRA socket after {timeout:.0f} s:\n{self.log_tail()}")

    def close(self) -> None:
        try:
            self.stop()
        finally:
            if self.cdi_tmpfs is not None:
                shutil.rmtree(self.cdi_tmpfs, ignore_errors=True)

    # -- claims
    def new_claims(self, n: int) -> list[dict]:
        raise NotImplementedError

    def check_prepared(self, claim: dict, answer) -> None:
        uid = claim["metadata"]["uid"]
        if answer.error:
            raise RuntimeError(f"{self.name}: prepare {uid}: {answer.error}")
        if len(answer.devices) != 1 or not answer.devices[0].cdi_device_ids:
            raise RuntimeError(f"{self.name}: prepare {uid}: expected one device with CDI ids, got {answer.devices}")
        wanted = claim["status"]["allocation"]["devices"]["results"][0]["device"]
        if answer.devices[0].device_name != wanted:
            raise RuntimeError(f"{self.name}: prepare {uid}: device {answer.devices[0].device_name}, not {wanted}")

    def leftover_specs(self) -> list[str]:
        """CDI spec files other than the driver's common one."""
        return sorted(p.name for p in self.cdi_dir.iterdir() if "common" not in p.name)


class Ours(Driver):
    name = "ours"
    driver = OUR_DRIVER

    def __init__(self, cp, root: Path, devices: int, status: bool = True) -> None:
        super().__init__(cp, root, devices)
        self.daemon = DaemonProcess(root, node=cp.node_name, fake_devices=devices, kubeconfig=cp.kubeconfig,
                                    extra_args=["--cdi-root", str(self.cdi_root)]  # the last one given wins
                                    + ([] if status else ["--claim-status", "false"]))

    def spawn(self) -> None:
        self.daemon.start(wait=False)
        self.pid = self.daemon.proc.pid

    def alive(self) -> bool:
        return self.daemon.proc is not None and self.daemon.proc.poll() is None

    def stop(self) -> None:
        self.daemon.stop()

    def log_tail(self) -> str:
        return self.daemon.log_text()[-4000:]

    @property
    def dra_socket(self) -> Path:
        return self.daemon.dra_socket

    def new_claims(self, n: int) -> list[dict]:
        return [create_in_api(self.cp, claim_object(f"ours-{uuid.uuid4().hex[:10]}", node=self.cp.node_name,
                                                    results=[("npu", f"npu-{i}-0")]))
                for i in range(n)]


class Go(Driver):
    name = "Go"
    driver = GO_DRIVER

    def __init__(self, cp, root: Path, devices: int, binary: Path, status: bool = False) -> None:
        super().__init__(cp, root, min(devices, GO_MAX_DEVICES))
        self.binary, self.status = binary, status
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = root / "driver.log"

    def spawn(self) -> None:
        r = self.root
        (r / "plugins_registry").mkdir(exist_ok=True)  # the kubelet's; the plugin does not create it
        args = [str(self.binary), "--node-name", self.cp.node_name, "--kubeconfig", str(self.cp.kubeconfig),
                "--cdi-root", str(self.cdi_root), "--num-devices", str(self.devices),
                "--kubelet-registrar-directory-path", str(r / "plugins_registry"),
                "--kubelet-plugins-directory-path", str(r / "plugins"),
                # client-go's token bucket off (QPS <= 0 makes no rate limiter): only its code is measured
                "--kube-api-qps", "-1", "--kube-api-burst", "1000000",
                *(["--gpu-device-status"] if self.status else [])]
        env = {**os.environ, "NODE_NAME": self.cp.node_name}  # its common CDI spec reads NODE_NAME
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        self.proc = None

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    @property
    def dra_socket(self) -> Path:
        return self.root / "plugins" / GO_DRIVER / "dra.sock"

    def new_claims(self, n: int) -> list[dict]:
        made = []
        for i in range(n):
            obj = claim_object(f"go-{uuid.uuid4().hex[:10]}", node=self.cp.node_name, driver=GO_DRIVER,
                               results=[("gpu", f"gpu-{i % self.devices}")])
            obj["spec"]["devices"]["requests"][0]["name"] = "gpu"
            made.append(create_in_api(self.cp, obj, device_class=GO_DRIVER))
        return made

    def check_prepared(self, claim: dict, answer) -> None:
        super().check_prepared(claim, answer)
        uid, device = claim["metadata"]["uid"], answer.devices[0].device_name
        own = f"k8s.{GO_DRIVER}/gpu={uid}-{device}"
        if own not in answer.devices[0].cdi_device_ids:
            raise RuntimeError(f"Go: prepare {uid}: {own} not in {list(answer.devices[0].cdi_device_ids)}")


def delete_claims(cp) -> None:
    status, body = cp.api("DELETE", f"{RES}/namespaces/default/resourceclaims")
    if status != 200:
        raise RuntimeError(f"deleting the claims: {status} {body}")


def startup_s(make: Callable[[Path], Driver], runs: int) -> float:
    """Median seconds from the process start to its first ResourceSlice, fresh directories each run."""
    times = []
    for _ in range(runs):
        root = Path(tempfile.mkdtemp(prefix="abg-", dir="/tmp"))
        driver = make(root)
        try:
            times.append(driver.start())
        finally:
            driver.close()
            shutil.rmtree(root, ignore_errors=True)
    return statistics.median(times)


def measure(driver: Driver, args: argparse.Namespace) -> dict[str, float]:
    """Every figure of one running driver (the table's column)."""
    cp, pid = driver.cp, driver.pid
    out: dict[str, float] = {}
    time.sleep(1)  # let its first publish and watches settle
    idle = idle_rate(pid, args.idle_seconds)
    out["idle cpu"] = idle * 1e3
    out["rss idle"] = rss_mib(pid)
    channel = grpc.insecure_channel(f"unix://{driver.dra_socket}")
    stub = v1_grpc.DRAPluginStub(channel)
    try:
        empty = v1_pb2.NodePrepareResourcesRequest(claims=[])
        empty_call = Call(stub.NodePrepareResources, lambda _: empty)

        def prepared(claim: dict, reply) -> None:
            uid = claim["metadata"]["uid"]
            if uid not in reply.claims:
                raise RuntimeError(f"{driver.name}: no answer for claim {uid}")
            driver.check_prepared(claim, reply.claims[uid])

        def unprepared(claim: dict, reply) -> None:
            uid = claim["metadata"]["uid"]
            if uid not in reply.claims or reply.claims[uid].error:
                raise RuntimeError(f"{driver.name}: unprepare {uid}: "
                                   f"{reply.claims[uid].error if uid in reply.claims else 'no answer'}")

        prepare = Call(stub.NodePrepareResources, Kubelet.prepare_request, prepared)
        unprepare = Call(stub.NodeUnprepareResources, Kubelet.unprepare_request, unprepared)

        def phase(items, call, concurrency: int) -> tuple[Stats, float, int]:
            """Run the calls; return their stats, the driver's CPU seconds beyond its idle rate (from
            before the first call until it is idle again) and its requests on claims."""
            (cpu0, t0), req0 = settle(pid, idle), claim_requests(cp)
            stats = run_calls(items, call, concurrency)
            cpu1, t1 = settle(pid, idle)
            return stats, cpu1 - cpu0 - idle * (t1 - t0), claim_requests(cp) - req0

        run_calls(range(50), empty_call, 1)  # warm up the channel and the code paths
        warm = driver.new_claims(2)
        run_calls(warm, prepare, 1)
        run_calls(warm, unprepare, 1)

        stats, cpu, _ = phase(range(args.empty_calls), empty_call, 1)
        out["empty p50 ms"] = stats.p50_ms
        out["empty cpu ms"] = cpu / args.empty_calls * 1e3

        claims = driver.new_claims(args.claims)
        stats, cpu, requests = phase(claims, prepare, 1)
        out["prepare p50 ms"], out["prepare p99 ms"] = stats.p50_ms, stats.p99_ms
        out["prepare cpu ms"] = cpu / len(claims) * 1e3
        out["prepare requests"] = requests / len(claims)
        out["rss held"] = rss_mib(pid)
        stats, cpu, requests = phase(claims, unprepare, 1)
        out["unprepare p50 ms"] = stats.p50_ms
        out["unprepare cpu ms"] = cpu / len(claims) * 1e3
        out["unprepare requests"] = requests / len(claims)

        for concurrency in (16, 64):
            claims = driver.new_claims(args.claims)
            stats, cpu, _ = phase(claims, prepare, concurrency)
            out[f"prepare {concurrency} /s"] = stats.per_s
            out[f"prepare {concurrency} cpu ms"] = cpu / len(claims) * 1e3
            run_calls(claims, unprepare, concurrency)
        left = driver.leftover_specs()
        if left:
            raise RuntimeError(f"{driver.name}: {len(left)} claim CDI specs left after the Unprepares, e.g. {left[0]}")
        settle(pid, idle)
        out["rss after"] = rss_mib(pid)
    finally:
        channel.close()
    return out


ROWS = (  # key, label, format
    ("start slice ms", f"start -> first ResourceSlice, ms ({STARTUP_DEVICES} devices)", "{:.0f}"),
    ("empty p50 ms", "empty NodePrepareResources p50, ms", "{:.3f}"),
    ("empty cpu ms", "  driver CPU per empty call, ms", "{:.3f}"),
    ("prepare p50 ms", "Prepare p50, 1 at a time, ms", "{:.2f}"),
    ("prepare p99 ms", "Prepare p99, 1 at a time, ms", "{:.2f}"),
    ("unprepare p50 ms", "Unprepare p50, 1 at a time, ms", "{:.2f}"),
    ("prepare 16 /s", "Prepare, 16 in flight, claims/s", "{:.0f}"),
    ("prepare 64 /s", "Prepare, 64 in flight, claims/s", "{:.0f}"),
    ("prepare cpu ms", "driver CPU per Prepare (1 at a time), ms", "{:.2f}"),
    ("prepare 16 cpu ms", "driver CPU per Prepare (16 in flight), ms", "{:.2f}"),
    ("prepare 64 cpu ms", "driver CPU per Prepare (64 in flight), ms", "{:.2f}"),
    ("unprepare cpu ms", "driver CPU per Unprepare (1 at a time), ms", "{:.2f}"),
    ("prepare requests", "API requests on claims per Prepare", "{:.2f}"),
    ("unprepare requests", "API requests on claims per Unprepare", "{:.2f}"),
    ("idle cpu", "driver CPU while idle, ms per second", "{:.1f}"),
    ("rss idle", "RSS idle, MiB", "{:.1f}"),
    ("rss held", "RSS with the claims held, MiB", "{:.1f}"),
    ("rss after", "RSS after all phases, MiB", "{:.1f}"),
)


def print_table(ours: dict[str, float], go: dict[str, float], args: argparse.Namespace) -> None:
    status = {"default": "each driver's default (ours writes it, Go does not)", "on": "written by both",
              "off": "written by neither"}[args.device_status]
    print(f"\nascend-dra beside dra-example-driver v0.4.0 ({GO_COMMIT[:7]}, kube-api-qps off): {os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]}, {args.claims} single-device claims per phase, one grpcio channel each, "
          f"{args.order} in that order; claim status.devices: {status}")
    width = max(len(r[1]) for r in ROWS)
    header = f"{'figure':<{width}}{'ours':>10}{'Go':>10}{'ours/Go':>9}"
    print(header)
    print("-" * len(header))
    for key, label, fmt in ROWS:
        a, b = ours[key], go[key]
        ratio = f"{a / b:>9.2f}" if b else f"{'-':>9}"
        print(f"{label:<{width}}{fmt.format(a):>10}{fmt.format(b):>10}{ratio}")
    print("-" * len(header))
    print("ours/Go below 1 is better for times, CPU, requests and RSS; above 1 for claims/s.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=256, help="claims per phase, both drivers (default 256)")
    parser.add_argument("--empty-calls", type=int, default=2000, help="empty NodePrepareResources calls")
    parser.add_argument("--startup-runs", type=int, default=3, help="cold starts per driver for the slice figure")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="how long the idle CPU rate is measured")
    parser.add_argument("--quick", action="store_true", help="64 claims, 500 empty calls, 1 start")
    parser.add_argument("--go-binary", type=Path, default=default_go_binary(), help="dra-example-kubeletplugin")
    parser.add_argument("--device-status", default="default", choices=("default", "on", "off"),
                        help="claim status.devices writes: each driver's default (ours on, Go off), both on "
                        "(Go's --gpu-device-status), or both off (our --claim-status false)")
    parser.add_argument("--order", default="ours,Go", choices=("ours,Go", "Go,ours"),
                        help="which driver runs first on the control plane (default ours,Go)")
    args = parser.parse_args(argv)
    if args.quick:
        args.claims, args.empty_calls, args.startup_runs, args.idle_seconds = 64, 500, 1, 5.0
    if not os.access(args.go_binary, os.X_OK):
        print(f"bench_vs_go.py: no Go reference driver at {args.go_binary}: put there the dra-example-kubeletplugin "
              f"of kubernetes-sigs/dra-example-driver v0.4.0 ({GO_COMMIT[:7]}; bench/README.md says how to build "
              f"it), or pass --go-binary", file=sys.stderr)
        return 2

    from tests.cluster.controlplane import ControlPlane, default_bin_dir, exit_on_sigterm

    exit_on_sigterm()  # a stopped run still stops its control plane
    cp = ControlPlane(Path(tempfile.mkdtemp(prefix="adm-cp-")), default_bin_dir())
    work = Path(tempfile.mkdtemp(prefix="abg-", dir="/tmp"))  # short: unix socket paths stay under 108 bytes
    drivers: list[Driver] = []
    results: dict[str, dict[str, float]] = {}
    try:
        cp.start()
        for doc in yaml.safe_load_all((ROOT / "examples/deviceclasses/fake.yaml").read_text()):
            cp.api("POST", f"{RES}/deviceclasses", doc)
        cp.api("POST", f"{RES}/deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": GO_DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{GO_DRIVER}'"}}]}})
        makers: dict[str, Callable[[Path, int], Driver]] = {
            "ours": lambda root, n: Ours(cp, root, n, status=args.device_status != "off"),
            "Go": lambda root, n: Go(cp, root, n, args.go_binary, status=args.device_status == "on"),
        }
        for name in args.order.split(","):
            make = makers[name]
            start = startup_s(lambda root, make=make: make(root, STARTUP_DEVICES), args.startup_runs)
            driver = make(work / name, args.claims)
            drivers.append(driver)
            driver.start()
            results[name] = {"start slice ms": start * 1e3, **measure(driver, args)}
            driver.close()
            delete_claims(cp)
    finally:
        for driver in drivers:
            with contextlib.suppress(Exception):
                driver.close()
        with contextlib.suppress(Exception):
            cp.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(cp.workdir, ignore_errors=True)
    print_table(results["ours"], results["Go"], args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
