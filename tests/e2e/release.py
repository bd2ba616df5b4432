"""Our chart on the bed, installed as docs/operations.md tells a user to: ``helm`` and ``kubectl``
commands (and hack/webhook-certs.sh) run against the bed's API server.

Two releases in namespace ``ascend-dra`` (one DaemonSet runs one profile list, and the two nodes
differ):

* ``ascend-dra`` -- Lab 18's values (``ci/webhook-values.yaml``: HAMivNPUCore and the webhook, its
  serving certificate from hack/webhook-certs.sh) on the node labelled
  ``accelerator=huawei-Ascend310P`` (the chart's default affinity), node-b, the simulated lab node.
  The webhook validates the configs of both releases' profiles (``webhook.profiles``: the union of
  what the node daemons run, as the chart's README says);
* ``ascend-dra-fake`` -- ``ci/fake-values.yaml`` (simulated NPUs, no privilege) on node-a.

Both with our image (``image.repository``/``image.tag``), which every node has (imagePullPolicy
IfNotPresent, the default).
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.bed import Bed

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deployments" / "helm" / "ascend-dra"
NAMESPACE = "ascend-dra"
DRIVER = "ascend.project-hami.io"
LAB_RELEASE, FAKE_RELEASE = "ascend-dra", "ascend-dra-fake"
LAB_NODE, FAKE_NODE = "node-b", "node-a"
WEBHOOK = "ascend-dra-webhook"


class CommandFailed(AssertionError):
    """helm, kubectl or a script failed; the message holds the command and its output."""


def helm_bin() -> Path:
    out = subprocess.run(["bash", str(ROOT / "hack" / "build-helm.sh"), "--print"], check=True, capture_output=True,
                         text=True).stdout
    return Path(out.strip())


@dataclass
class Tools:
    """helm, kubectl and the environment that points them at the bed (``KUBECONFIG``)."""

    bed: Bed
    workdir: Path

    @property
    def env(self) -> dict[str, str]:
        assert self.bed.cp is not None
        kubectl_dir = str(self.bed.kubectl_bin().parent)
        return {**os.environ, "KUBECONFIG": str(self.bed.cp.kubeconfig),
                "PATH": f"{kubectl_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                # helm's own state (repositories, cache) in the working dir, not the user's home
                **{f"HELM_{k}_HOME": str(self.workdir / f"helm-{k.lower()}") for k in ("CACHE", "CONFIG", "DATA")}}

    def run(self, argv: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 300) -> str:
        """Run ``argv`` with the bed's KUBECONFIG; return stdout.

        :raises CommandFailed: non-zero exit.
        """
        proc = subprocess.run(list(argv), capture_output=True, text=True, env={**self.env, **(env or {})},
                              cwd=self.workdir, timeout=timeout)
        if proc.returncode != 0:
            raise CommandFailed(f"{' '.join(argv)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def helm(self, *args: str) -> str:
        return self.run([str(helm_bin()), *args])

    def kubectl(self, *args: str) -> str:
        return self.run([str(self.bed.kubectl_bin()), *args])


def image_values(repository: str, tag: str) -> list[str]:
    return ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}"]


def install(tools: Tools, repository: str, tag: str) -> None:
    """docs/operations.md, "Install": label the lab node, install both releases, make the webhook's
    certificate with hack/webhook-certs.sh, wait for the rollouts."""
    values = CHART / "ci"
    tools.kubectl("label", "node", LAB_NODE, "accelerator=huawei-Ascend310P")
    tools.helm("install", LAB_RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace",
               "-f", str(values / "webhook-values.yaml"), "--set", "webhook.profiles={HAMivNPUCore,fake}",
               "--set", "grafanaDashboard.enabled=true", *image_values(repository, tag))
    tools.run(["bash", str(ROOT / "hack" / "webhook-certs.sh")],
              env={"NAMESPACE": NAMESPACE, "SERVICE": WEBHOOK, "CONFIG": WEBHOOK, "CA_DIR": str(tools.workdir / "pki")})
    tools.helm("install", FAKE_RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(values / "fake-values.yaml"),
               "--set-json", f'daemon.nodeSelector={{"kubernetes.io/hostname":"{FAKE_NODE}"}}',
               *image_values(repository, tag))
    wait_rolled_out(tools)


def wait_rolled_out(tools: Tools) -> None:
    """``kubectl rollout status`` of both DaemonSets and the webhook's Deployment."""
    for what in (f"ds/{LAB_RELEASE}-kubeletplugin", f"ds/{FAKE_RELEASE}-kubeletplugin", f"deploy/{WEBHOOK}"):
        tools.kubectl("-n", NAMESPACE, "rollout", "status", what, "--timeout=240s")


def ca_bundle(tools: Tools) -> str:
    """The base64 CA that hack/webhook-certs.sh made (``--set webhook.certificate.caBundle=...``)."""
    return base64.b64encode((tools.workdir / "pki" / "ca.crt").read_bytes()).decode()


def daemon_pods(cp: Any, release: str) -> list[dict[str, Any]]:
    """The release's DaemonSet pods (every phase), oldest first."""
    status, reply = cp.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector="
                                  f"app.kubernetes.io/name%3D{release}-kubeletplugin")
    assert status == 200, reply
    return sorted(reply["items"], key=lambda p: p["metadata"]["creationTimestamp"])


def webhook_pods(cp: Any) -> list[dict[str, Any]]:
    status, reply = cp.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector="
                                  f"app.kubernetes.io/name%3D{WEBHOOK}")
    assert status == 200, reply
    return reply["items"]


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions") or [])
