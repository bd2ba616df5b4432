"""AdmissionReviews per second and latency of ``ascend-dra webhook``, beside an echo handler on the same stack.

Figures, each from ``--reviews`` reviews sent by ``--concurrency`` keep-alive HTTPS connections:

- ``echo``: the floor: an aiohttp server with the webhook's own TLS context (:class:`ServingCertificate`)
  whose one handler reads the body and answers a fixed AdmissionReview. Same process layout, same pin;
- ``claim``: ``/validate-resource-claim-parameters`` with a typical ResourceClaim (one request, one
  ``NpuConfig`` for our driver and one config of another driver), answered allowed;
- ``claim-bad``: the same with a wrong ``NpuConfig`` (two faults), answered denied;
- ``hami-pod``: ``/mutate-pods`` with Lab 18's step-4 pod (``dryRun: true``, template mode): the
  conversion plus one server-side dry-run create of its ResourceClaimTemplate in the real API server;
- ``api-alone``: the dry-run create ``hami-pod`` makes, sent straight to the API server (its floor);
- ``convert_pod alone``: the pure conversion of the lab pod, in microseconds, in the bench process;
- ``rss``: the webhook's resident memory (``VmRSS``) after all of it, and its peak (``VmHWM``).

The server processes are pinned to CPU 0 (``--server-cpu``), the load generator to CPU 1 when the
machine has one; the control plane shares the machine. Needs the test control plane binaries.

    python bench/bench_webhook.py [--reviews 3000] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from tests.cluster.controlplane import ControlPlane, default_bin_dir, exit_on_sigterm, free_port  # noqa: E402
from tests.cluster.webhook_process import WebhookProcess  # noqa: E402
from tests.webhook_certs import issue, make_ca  # noqa: E402

DRIVER = "ascend.project-hami.io"


def review(kind: dict[str, str], obj: dict[str, Any], namespace: str, dry_run: bool = False) -> bytes:
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "bench", "kind": kind, "resource": {}, "operation": "CREATE", "namespace": namespace,
        "name": obj["metadata"].get("name", ""), "object": obj, "dryRun": dry_run,
        "userInfo": {"username": "bench"}}})


def typical_claim(bad: bool = False) -> dict[str, Any]:
    parameters = ({"apiVersion": f"{DRIVER}/v1alpha1", "kind": "NpuConfig", "logLevel": "loud", "extra": 1} if bad
                  else {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "NpuConfig", "logLevel": "info"})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "train-0", "namespace": "bench"},
            "spec": {"devices": {"requests": [{"name": "npu", "exactly": {
                "deviceClassName": "npu.ascend.project-hami.io", "allocationMode": "ExactCount", "count": 2}}],
                "config": [{"requests": ["npu"], "opaque": {"driver": DRIVER, "parameters": parameters}},
                           {"opaque": {"driver": "gpu.example.com", "parameters": {"kind": "X"}}}]}}}


LAB_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {
    "name": "ascend-share-a", "namespace": "bench", "labels": {"hami.io/webhook": "ignore"},
    "annotations": {"hami.io/use-Ascend310P-uuid": "68496E64-20E05477-92C31323-6E78030A-BD003019"}},
    "spec": {"runtimeClassName": "ascend", "containers": [{
        "name": "app", "image": "quay.io/ascend/vllm-ascend:v0.23.0-310p", "command": ["sh", "-c", "sleep 3600"],
        "resources": {"limits": {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "8192",
                                 "huawei.com/Ascend310P-core": "50"}}}]}}


def echo_server(port: int, cert: str, key: str) -> None:
    """The floor: aiohttp + the webhook's TLS context + one handler answering a fixed review."""
    from aiohttp import web

    from ascend_dra.webhook.metrics import WebhookMetrics
    from ascend_dra.webhook.review import allowed
    from ascend_dra.webhook.tls import ServingCertificate

    certificate = ServingCertificate(Path(cert), Path(key), WebhookMetrics())
    answer = allowed("bench")

    async def echo(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=answer, content_type="application/json")

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/echo", echo)
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=certificate.server_context, access_log=None,
                print=None)


async def load(url: str, body: bytes, reviews: int, concurrency: int, ca: Path,
               headers: dict[str, str] | None = None) -> tuple[float, list[float]]:
    """Send ``reviews`` POSTs over ``concurrency`` connections; returns (seconds, latencies in s)."""
    import aiohttp

    context = ssl.create_default_context(cafile=str(ca))
    headers = {"Content-Type": "application/json", **(headers or {})}
    latencies: list[float] = []
    remaining = reviews
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=concurrency)) as session:
        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as reply:
                    payload = await reply.read()
                    assert reply.status in (200, 201), payload[:300]
                latencies.append(time.perf_counter() - started)

        warm = min(50, reviews)
        for _ in range(warm):  # connections up, caches warm
            async with session.post(url, data=body, headers=headers) as reply:
                await reply.read()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started, latencies


def convert_time(pod: dict[str, Any], rounds: int = 2000) -> float:
    """Seconds per :func:`convert_pod` of ``pod`` (template mode), in this process."""
    from ascend_dra.hami.convert import convert_pod

    started = time.perf_counter()
    for _ in range(rounds):
        convert_pod(pod, "bench")
    return (time.perf_counter() - started) / rounds


def wait_listening(port: int, within_s: float = 20.0) -> None:
    import socket

    deadline = time.monotonic() + within_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def pin(pid: int, cpus: set[int]) -> None:
    available = os.sched_getaffinity(0)
    if cpus <= available:
        os.sched_setaffinity(pid, cpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviews", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--server-cpu", type=int, default=0)
    args = parser.parse_args()
    exit_on_sigterm()  # a stopped run still stops its control plane
    with tempfile.TemporaryDirectory(prefix="adra-bench-wh-") as tmp:
        work = Path(tmp)
        ca = make_ca(work / "pki")
        cert, key = issue(work / "pki", ca, "serving")
        cp = ControlPlane(work / "cp", default_bin_dir()).start()
        echo = None
        hook = None
        try:
            cp.api("POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}})
            hook = WebhookProcess(work, cp.kubeconfig, cert, key, ca[0], mode="template",
                                  profiles="npu-310P,npu-910").start()
            echo_port = free_port()
            echo = subprocess.Popen([sys.executable, __file__, "--echo-server", str(echo_port), str(cert), str(key)])
            assert hook.proc is not None
            server_cpus = {args.server_cpu}
            pin(hook.proc.pid, server_cpus)
            pin(echo.pid, server_cpus)
            others = os.sched_getaffinity(0) - server_cpus
            if others:
                os.sched_setaffinity(0, others)
            wait_listening(echo_port)
            scenarios = [
                ("echo", f"https://127.0.0.1:{echo_port}/echo",
                 review({"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaim"}, typical_claim(),
                        "bench")),
                ("claim", f"https://127.0.0.1:{hook.port}/validate-resource-claim-parameters",
                 review({"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaim"}, typical_claim(),
                        "bench")),
                ("claim-bad", f"https://127.0.0.1:{hook.port}/validate-resource-claim-parameters",
                 review({"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaim"}, typical_claim(True),
                        "bench")),
                ("hami-pod", f"https://127.0.0.1:{hook.port}/mutate-pods",
                 review({"group": "", "version": "v1", "kind": "Pod"}, LAB_POD, "bench", dry_run=True)),
            ]
            # The API part of hami-pod on its own: the same dry-run create, sent straight to the API server.
            from ascend_dra.hami.convert import convert_pod

            [planned] = convert_pod(LAB_POD, "bench").claims
            template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                        "metadata": {"name": planned.object_name}, "spec": {"spec": planned.spec}}
            scenarios.append(("api-alone", f"{cp.server}/apis/resource.k8s.io/v1/namespaces/bench/"
                              "resourceclaimtemplates?dryRun=All", orjson.dumps(template)))
            results = {}
            convert_us = convert_time(LAB_POD) * 1e6
            for name, url, body in scenarios:
                api = name == "api-alone"
                seconds, latencies = asyncio.run(load(
                    url, body, args.reviews, args.concurrency, cp.ca_file if api else ca[0],
                    {"Authorization": f"Bearer {cp.token}"} if api else None))
                latencies.sort()
                results[name] = (len(latencies) / seconds, statistics.median(latencies) * 1000,
                                 latencies[int(len(latencies) * 0.99) - 1] * 1000)
            status = {line.split(":")[0]: line.split()[1] for line in
                      Path(f"/proc/{hook.proc.pid}/status").read_text().splitlines()
                      if line.startswith(("VmRSS", "VmHWM"))}
        finally:
            if echo is not None:
                echo.terminate()
                echo.wait()
            if hook is not None:
                hook.stop()
            cp.stop()
    floor_rate, _, floor_p99 = results["echo"]
    print(f"ascend-dra webhook: {args.reviews} reviews per figure, {args.concurrency} connections, "
          f"server on CPU {args.server_cpu}, {os.cpu_count()} CPUs in all")
    print(f"{'figure':<10} {'reviews/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'/s vs echo':>11} {'p99/echo':>9}")
    for name, (rate, p50, p99) in results.items():
        print(f"{name:<10} {rate:>10.0f} {p50:>8.2f} {p99:>8.2f} {rate / floor_rate:>11.2f} {p99 / floor_p99:>9.2f}")
    print(f"convert_pod alone (in the bench process): {convert_us:.0f} us per lab pod; api-alone is the API "
          "server's dry-run create that hami-pod makes, sent directly")
    print(f"webhook rss {int(status['VmRSS']) / 1024:.1f} MiB (peak {int(status['VmHWM']) / 1024:.1f} MiB)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--echo-server":
        echo_server(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        sys.exit(0)
    sys.exit(main())
