"""Cold start of the daemon in cluster mode, and its memory, beside the cost of importing its dependencies.

Figures (median of ``--runs`` starts, each a fresh process and fresh directories):

- ``socket``: process start -> the registration socket accepts connections (the kubelet may call us);
- ``GetInfo``: process start -> GetInfo answered on it (the kubelet gives it 1 s);
- ``slice``: process start -> the API server holds our first ResourceSlice;
- ``rss``: resident memory of the daemon once its slice is published (``VmRSS``).

Floor, measured in the same run: a Python process that only imports the dependencies
(anyio, attrs, cattrs, orjson, PyYAML, grpclib, betterproto2, kubernetes-asyncio, tenacity) and
exits; its wall time and peak RSS. Needs the test control plane (``make cluster-bins``); starts its
own unless ``--kubeconfig`` names a running one (``make cluster-up``).

    python bench/bench_startup.py [--runs 5] [--kubeconfig .cluster/kubeconfig]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.controlplane import ControlPlane, default_bin_dir, exit_on_sigterm  # noqa: E402
from tests.integration.daemon import accepts  # noqa: E402

DRIVER = "ascend.project-hami.io"
IMPORTS = "import anyio, attrs, cattrs, orjson, yaml, grpclib.server, betterproto2, kubernetes_asyncio, tenacity"


def import_floor() -> tuple[float, float]:
    """Seconds and peak RSS (MiB) of a process that imports the dependencies and exits.

    The process reports its own peak (``RUSAGE_SELF``): the children's maximum of this process
    would be the largest child ever, e.g. a kube-apiserver the benchmark started.
    """
    code = f"{IMPORTS}\nimport resource\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    seconds = time.perf_counter() - started
    return seconds, int(out.split()[-1]) / 1024


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime of the process (every thread), in seconds (``/proc/PID/stat`` fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def driver_slices(cp: ControlPlane, driver: str = DRIVER) -> list:
    """The ResourceSlices of ``driver`` (ours by default) on the control plane's node."""
    selector = urllib.parse.quote(f"spec.driver={driver},spec.nodeName={cp.node_name}")
    status, body = cp.api("GET", f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector={selector}")
    return body["items"] if status == 200 else []


def delete_slices(cp: ControlPlane, driver: str = DRIVER) -> None:
    selector = urllib.parse.quote(f"spec.driver={driver},spec.nodeName={cp.node_name}")
    cp.api("DELETE", f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector={selector}")


def get_info_s(reg: Path, started: float) -> float:
    """Call GetInfo on the registration socket as the kubelet does (1 s deadline, retried until it
    answers); return seconds from ``started`` to the answer."""
    import grpc

    from tests.kubelet_pb.pluginregistration import api_pb2 as reg_pb2
    from tests.kubelet_pb.pluginregistration import api_pb2_grpc as reg_grpc

    with grpc.insecure_channel(f"unix://{reg}") as channel:
        stub = reg_grpc.RegistrationStub(channel)
        while True:
            try:
                stub.GetInfo(reg_pb2.InfoRequest(), timeout=1)
                return time.perf_counter() - started
            except grpc.RpcError:
                time.sleep(0.001)


def one_start(cp: ControlPlane) -> tuple[float, float, float, float]:
    """One cold start: seconds to the socket accepting, to GetInfo answered, to the first slice; RSS (MiB)."""
    delete_slices(cp)
    work = Path(tempfile.mkdtemp(prefix="adra-bench-", dir="/tmp"))
    (work / "boot_id").write_text("bench\n")
    reg = work / "plugins_registry" / f"{DRIVER}-reg.sock"
    args = [sys.executable, "-m", "ascend_dra.cli", "run", "--profiles", "fake", "--node-name", cp.node_name,
            "--kubeconfig", str(cp.kubeconfig), "--cdi-root", str(work / "cdi"), "--kubelet-root-dir", str(work),
            "--kubelet-registrar-directory-path", str(work / "plugins_registry"),
            "--kubelet-plugins-directory-path", str(work / "plugins"), "--boot-id-file", str(work / "boot_id")]
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        socket_s = info_s = slice_s = None
        deadline = started + 60
        while time.perf_counter() < deadline and slice_s is None:
            if socket_s is None and accepts(reg):
                socket_s = time.perf_counter() - started
                info_s = get_info_s(reg, started)
            if socket_s is not None and driver_slices(cp):
                slice_s = time.perf_counter() - started
            time.sleep(0.005)
        if slice_s is None or socket_s is None or info_s is None:
            raise RuntimeError("the daemon did not publish within 60 s")
        time.sleep(0.5)  # let the watch settle: memory as it runs, not mid-publish
        return socket_s, info_s, slice_s, rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kubeconfig", type=Path, help="a control plane started by `make cluster-up`")
    args = parser.parse_args()
    exit_on_sigterm()  # a stopped run still stops its control plane
    cp: ControlPlane | None = None
    own = args.kubeconfig is None
    if own:
        cp = ControlPlane(Path(tempfile.mkdtemp(prefix="adra-bench-cp-")), default_bin_dir())
        cp.start()
    else:
        cp = ControlPlane.attach(args.kubeconfig.resolve().parent)
    try:
        floors = [import_floor() for _ in range(args.runs)]
        starts = [one_start(cp) for _ in range(args.runs)]
    finally:
        if own:
            cp.stop()
    floor_s = statistics.median(f[0] for f in floors)
    floor_rss = statistics.median(f[1] for f in floors)
    socket_s = statistics.median(s[0] for s in starts)
    info_s = statistics.median(s[1] for s in starts)
    slice_s = statistics.median(s[2] for s in starts)
    rss = statistics.median(s[3] for s in starts)
    worst_gap = max(s[1] - s[0] for s in starts)
    rows = [
        ("floor: import of the dependencies", f"{floor_s * 1000:.0f} ms", "1.00"),
        ("start -> registration socket serving", f"{socket_s * 1000:.0f} ms", f"{socket_s / floor_s:.2f}"),
        ("start -> GetInfo answered", f"{info_s * 1000:.0f} ms", f"{info_s / floor_s:.2f}"),
        ("socket accepting -> GetInfo answered, worst run", f"{worst_gap * 1000:.0f} ms", "(kubelet: 1000 ms)"),
        ("start -> first slice accepted by the API server", f"{slice_s * 1000:.0f} ms", f"{slice_s / floor_s:.2f}"),
        ("floor: peak RSS of the import-only process", f"{floor_rss:.1f} MiB", "1.00"),
        ("daemon RSS after start (cluster mode, 4 fake devices)", f"{rss:.1f} MiB", f"{rss / floor_rss:.2f}"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'median':>10}  ratio to floor   (runs: {args.runs}, python {sys.version.split()[0]},"
          f" {os.cpu_count()} cores)")
    for name, value, ratio in rows:
        print(f"{name:<{width}}  {value:>10}  {ratio}")
    print(json.dumps({"floor_import_s": floor_s, "socket_s": socket_s, "getinfo_s": info_s, "slice_s": slice_s,
                      "floor_rss_mib": floor_rss, "rss_mib": rss}))


if __name__ == "__main__":
    main()
