"""``ascend-dra webhook`` as a child process, and its admission configurations on a real API server."""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import json
import os
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

from tests.cluster.controlplane import STATE_FILE, ControlPlane, free_port, pid_alive, pid_cmdline
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
                 profiles: str = "fake,gpu,npu-310P", orphan_grace: float = 15.0, port: int | None = None,
                 detach: bool = False, extra_args: tuple[str, ...] = ()) -> None:
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
        self.detach = detach  # its own session: it outlives ``webhook_process.py up``
        self.extra_args = extra_args

    def start(self) -> WebhookProcess:
        argv = [sys.executable, "-m", "ascend_dra.cli", "webhook", "--port", str(self.port),  # default address: *
                "--tls-cert-file", str(self.cert), "--tls-private-key-file", str(self.key),
                "--kubeconfig", str(self.kubeconfig), "--conversion-mode", self.mode, "--profiles", self.profiles,
                "--orphan-grace", str(self.orphan_grace), "--metrics-port", str(self.metrics_port),
                "--log-level", "debug", *self.extra_args]
        logged = self.log.stat().st_size if self.log.exists() else 0  # what earlier starts wrote
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=self.detach)
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


def configurations(port: int, ca: Path, run_id: str | None) -> list[dict[str, Any]]:
    """deployments/webhook/webhook-configurations.yaml with clientConfig pointed at 127.0.0.1:``port``,
    the test CA as caBundle, names suffixed with ``run_id``, and only namespaces labelled
    ``ascend-dra-webhook-test=<run_id>`` selected; with no ``run_id`` (``up``), the names and the
    selectors of the deployment."""
    docs = list(yaml.safe_load_all((DEPLOYMENTS / "webhook-configurations.yaml").read_text()))
    bundle = base64.b64encode(ca.read_bytes()).decode()
    result = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        name = doc["metadata"]["name"]
        doc["metadata"] = {"name": f"{name}-{run_id}" if run_id else name}
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
            if run_id:
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

    def use(self, mode: str, extra_args: tuple[str, ...] = ()) -> WebhookProcess:
        """The running webhook in ``mode`` with ``extra_args``, restarted on the same port if it runs
        otherwise or not at all."""
        if self.proc is not None and (self.proc.mode, self.proc.extra_args) == (mode, extra_args) \
                and self.proc.proc is not None:
            return self.proc
        self.stop()
        self.proc = WebhookProcess(self.workdir, self.cp.kubeconfig, self.cert, self.key, self.ca[0], mode=mode,
                                   profiles=self.profiles, port=self.port or None, extra_args=extra_args).start()
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


def wait_in_use(cp: Any, namespace: str, within: float = 20.0) -> bool:
    """Wait until the API server sends claims in ``namespace`` to the webhook (it picks up new
    configurations through an informer): a dry run of a claim with a bad config is refused."""
    bad = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "probe"},
           "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}], "config": [
               {"opaque": {"driver": "ascend.project-hami.io", "parameters": {"kind": "Nope"}}}]}}}
    deadline = time.monotonic() + within
    while cp.api("POST", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims?dryRun=All", bad)[0] != 422:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


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
            plural = _plural(doc["kind"])
            status, reply = cp.api("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", doc)
            assert status == 201, reply
            created.append(f"/apis/admissionregistration.k8s.io/v1/{plural}/{doc['metadata']['name']}")
        status, reply = cp.api("POST", "/apis/node.k8s.io/v1/runtimeclasses",
                               {"metadata": {"name": "ascend"}, "handler": "ascend"})
        assert status in (201, 409), reply
        assert wait_in_use(cp, hook.namespace()), "webhook configurations not in use after 20 s"
        yield hook
    finally:
        for path in created:
            cp.api("DELETE", path)
        hook.stop()


# ---------------------------------------------------------------------- CLI (make webhook-up / webhook-down)
STATE = "webhook.json"


def _plural(kind: str) -> str:
    """``ValidatingWebhookConfiguration`` -> ``validatingwebhookconfigurations`` (the resource's name)."""
    return f"{kind.lower()}s"


def _cmd_up(args: argparse.Namespace) -> int:
    """Start the webhook detached on the control plane that ``controlplane.py up`` started in
    ``--dir``, on 127.0.0.1 with a CA of its own, and install both configurations (the deployment's
    names and selectors, clientConfig a url), as ``deployments/webhook`` does in a cluster; return
    once the API server sends claims to it, so a pod created next is converted."""
    workdir = Path(args.dir).resolve()
    if not (workdir / STATE_FILE).exists():
        print(f"no control plane in {workdir}: run make cluster-up first", file=sys.stderr)
        return 1
    if (workdir / STATE).exists():
        _cmd_down(args)
    cp = ControlPlane.attach(workdir)
    pki = workdir / "webhook-pki"
    ca = make_ca(pki)
    cert, key = issue(pki, ca, "serving")
    proc = WebhookProcess(workdir, cp.kubeconfig, cert, key, ca[0], mode=args.mode, profiles=args.profiles,
                          detach=True).start()
    assert proc.proc is not None
    paths = []
    for doc in configurations(proc.port, ca[0], None):
        path = f"/apis/admissionregistration.k8s.io/v1/{_plural(doc['kind'])}"
        cp.api("DELETE", f"{path}/{doc['metadata']['name']}")  # one left by an earlier run
        status, reply = cp.api("POST", path, doc)
        if status != 201:
            proc.stop()
            print(f"installing {doc['kind']} failed: {reply}", file=sys.stderr)
            return 1
        paths.append(f"{path}/{doc['metadata']['name']}")
    (workdir / STATE).write_text(json.dumps({"pid": proc.proc.pid, "configurations": paths}))
    if not wait_in_use(cp, "default"):
        print("the API server does not use the webhook configurations after 20 s", file=sys.stderr)
        _cmd_down(args)
        return 1
    print(f"webhook serving on https://127.0.0.1:{proc.port} ({args.mode} mode, profiles {args.profiles}), "
          f"log {proc.log}; configurations ascend-dra-webhook installed")
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    """Remove what ``up`` installed and stop the webhook."""
    workdir = Path(args.dir).resolve()
    state_path = workdir / STATE
    if not state_path.exists():
        print("no webhook to stop")
        return 0
    state = json.loads(state_path.read_text())
    if (workdir / STATE_FILE).exists():
        cp = ControlPlane.attach(workdir)
        for path in state["configurations"]:
            cp.api("DELETE", path)
    pid = state["pid"]
    if "webhook" in pid_cmdline(pid):  # still ours, not a reused pid
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    state_path.unlink()
    print("webhook stopped; configurations removed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ascend-dra webhook on the local test control plane")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start it detached and install its configurations")
    up.add_argument("--dir", default=".cluster", help="the control plane's directory (make cluster-up)")
    up.add_argument("--mode", default="template", choices=("template", "claim"), help="--conversion-mode")
    up.add_argument("--profiles", default="HAMivNPUCore,npu-310P", help="profiles whose opaque configs it validates")
    up.set_defaults(func=_cmd_up)
    down = sub.add_parser("down", help="remove the configurations and stop it")
    down.add_argument("--dir", default=".cluster", help="the control plane's directory")
    down.set_defaults(func=_cmd_down)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
