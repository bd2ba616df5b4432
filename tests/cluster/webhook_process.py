"""``ascend-dra webhook`` as a child process, and its admission configurations on a real API server."""

from __future__ import annotations

import base64
import contextlib
import copy
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.controlplane import free_port
from tests.webhook_certs import issue, make_ca

DEPLOYMENTS = Path(__file__).resolve().parents[2] / "deployments" / "webhook"
TEST_LABEL = "ascend-dra-webhook-test"


class WebhookProcess:
    """The webhook on ``port`` (every address, the default; the tests use 127.0.0.1) with the test CA's
    certificate; restartable on the same port. Without a port the webhook binds a free one itself,
    read from its "webhook serving" log line, so no other socket can take it first. The metrics
    port must be chosen here (``--metrics-port 0`` turns ``/metrics`` off): :func:`free_port`, and
    chosen again if it was taken all the same."""

    def __init__(self, workdir: Path, kubeconfig: Path, cert: Path, key: Path, ca: Path, *, mode: str = "claim",
                 profiles: str = "fake,gpu,npu-310P", orphan_grace: float = 15.0, port: int | None = None) -> None:
        self.workdir = workdir
        self.kubeconfig = kubeconfig
        self.cert, self.key, self.ca = cert, key, ca
        self.mode = mode
        self.profiles = profiles
        self.orphan_grace = orphan_grace
        self.port = port or 0  # 0: the webhook binds a free port, read from its log (free_port() could race)
        self.metrics_port = free_port()  # the CLI's --metrics-port 0 turns /metrics off: chosen here
        self._rebinds = 0
        self.log = workdir / f"webhook-{mode}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WebhookProcess:
        argv = [sys.executable, "-m", "ascend_dra.cli", "webhook", "--port", str(self.port),  # default address: *
                "--tls-cert-file", str(self.cert), "--tls-private-key-file", str(self.key),
                "--kubeconfig", str(self.kubeconfig), "--conversion-mode", self.mode, "--profiles", self.profiles,
                "--orphan-grace", str(self.orphan_grace), "--metrics-port", str(self.metrics_port),
                "--log-level", "debug"]
        logged = self.log.stat().st_size if self.log.exists() else 0  # what earlier starts wrote
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        context = ssl.create_default_context(cafile=str(self.ca))
        ports = None
        while True:
            if self.proc.poll() is not None:
                if b"Address already in use" in self.log.read_bytes()[logged:] and self._rebinds < 3:
                    # another socket took the metrics port between free_port() and the webhook's bind
                    # (free_port picks below the ephemeral range, so only another test's pick can): pick again.
                    self._rebinds += 1
                    self.metrics_port = free_port()
                    return self.start()
                raise RuntimeError(f"webhook exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            if ports is None and (ports := _serving_ports(self.log.read_bytes()[logged:])) is not None:
                assert self.port in (0, ports[0]) and ports[1] == self.metrics_port, (self.port, ports)
                self.port = ports[0]  # a restart keeps its port
            if ports is not None:
                try:
                    with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/readyz", context=context,
                                                timeout=2) as r:
                        if r.status == 200:
                            return self
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"webhook not ready within 30 s:\n{self.log_text()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def rss_bytes(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")


def configurations(port: int, ca: Path, run_id: str) -> list[dict[str, Any]]:
    """deployments/webhook/webhook-configurations.yaml with clientConfig pointed at 127.0.0.1:``port``,
    the test CA as caBundle, names suffixed with ``run_id``, and only namespaces labelled
    ``ascend-dra-webhook-test=<run_id>`` selected."""
    docs = list(yaml.safe_load_all((DEPLOYMENTS / "webhook-configurations.yaml").read_text()))
    bundle = base64.b64encode(ca.read_bytes()).decode()
    result = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": f"{doc['metadata']['name']}-{run_id}"}
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
            hook["namespaceSelector"]["matchExpressions"].append(
                {"key": TEST_LABEL, "operator": "In", "values": [run_id]})
        result.append(doc)
    return result


def _serving_ports(log: bytes) -> tuple[int, int] | None:
    """``(port, metrics_port)`` from the webhook's "webhook serving" line (text log format), or None yet."""
    match = re.search(rb"webhook serving .*?\bport=(\d+) .*?\bmetrics_port=(\d+)", log)
    return (int(match.group(1)), int(match.group(2))) if match else None


class Hook:
    """One webhook process for a test module (restartable on the same port, in either mode), its
    certificates, and the namespaces it serves (labelled with this run's id)."""

    def __init__(self, cp: Any, workdir: Path, mode: str = "claim", profiles: str = "fake,gpu,npu-310P") -> None:
        self.cp = cp
        self.workdir = workdir
        self.ca = make_ca(workdir / "pki")
        self.cert, self.key = issue(workdir / "pki", self.ca, "serving")
        self.run_id = uuid.uuid4().hex[:8]
        self.proc: WebhookProcess | None = None
        self.port = 0
        self.first_mode = mode
        self.profiles = profiles

    def use(self, mode: str) -> WebhookProcess:
        """The running webhook in ``mode``, restarted on the same port if it runs in the other mode or not at all."""
        if self.proc is not None and self.proc.mode == mode and self.proc.proc is not None:
            return self.proc
        self.stop()
        self.proc = WebhookProcess(self.workdir, self.cp.kubeconfig, self.cert, self.key, self.ca[0], mode=mode,
                                   profiles=self.profiles, port=self.port or None).start()
        self.port = self.proc.port
        return self.proc

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def namespace(self, name: str | None = None) -> str:
        """Create (or reuse) a namespace the webhook configurations select; returns its name."""
        name = name or f"wh-{uuid.uuid4().hex[:8]}"
        status, reply = self.cp.api("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": {
            TEST_LABEL: self.run_id, "hami.io/webhook": "ignore"}}})
        assert status in (201, 409), reply
        if status == 409:  # left by an earlier hook: select it for this one
            status, reply = self.cp.api("PATCH", f"/api/v1/namespaces/{name}",
                                        {"metadata": {"labels": {TEST_LABEL: self.run_id}}},
                                        content_type="application/merge-patch+json")
            assert status == 200, reply
        deadline = time.monotonic() + 10
        while self.cp.api("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] != 200:
            assert time.monotonic() < deadline, f"no default service account in {name}"
            time.sleep(0.1)
        return name


@contextlib.contextmanager
def installed_hook(cp: Any, workdir: Path, mode: str = "claim", profiles: str = "fake,gpu,npu-310P"
                   ) -> Iterator[Hook]:
    """A running webhook with both configurations on ``cp`` (and RuntimeClass ``ascend``), removed afterwards.

    Returns once the API server uses the configurations (a bad claim's dry run is denied).
    """
    hook = Hook(cp, workdir, mode, profiles)
    hook.use(mode)
    created = []
    try:
        for doc in configurations(hook.port, hook.ca[0], hook.run_id):
            plural = ("validatingwebhookconfigurations" if doc["kind"] == "ValidatingWebhookConfiguration"
                      else "mutatingwebhookconfigurations")
            status, reply = cp.api("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", doc)
            assert status == 201, reply
            created.append(f"/apis/admissionregistration.k8s.io/v1/{plural}/{doc['metadata']['name']}")
        status, reply = cp.api("POST", "/apis/node.k8s.io/v1/runtimeclasses",
                               {"metadata": {"name": "ascend"}, "handler": "ascend"})
        assert status in (201, 409), reply
        probe = hook.namespace()
        bad = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "probe"},
               "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}], "config": [
                   {"opaque": {"driver": "ascend.project-hami.io", "parameters": {"kind": "Nope"}}}]}}}
        deadline = time.monotonic() + 20
        # The API server picks up new configurations through an informer.
        while cp.api("POST", f"/apis/resource.k8s.io/v1/namespaces/{probe}/resourceclaims?dryRun=All", bad)[0] != 422:
            assert time.monotonic() < deadline, "webhook configurations not in use after 20 s"
            time.sleep(0.2)
        yield hook
    finally:
        for path in created:
            cp.api("DELETE", path)
        hook.stop()
