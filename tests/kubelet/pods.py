"""Pods for the real kubelet: manifests, waits and their log, through the API server (stdlib client
of :class:`~tests.cluster.controlplane.ControlPlane`).

Every pod uses ``hostNetwork`` (no CNI network is set up; the CRI creates no network namespace for
it), no service-account token, the busybox image of :mod:`tests.kubelet.images` (``imagePullPolicy:
Never``: there is no registry) and a 1 s termination grace period (its ``sleep`` ignores SIGTERM as
PID 1). Its container prints ``env`` sorted, one ``KEY=VALUE`` a line, then sleeps: the pod log holds
the environment the container got, CDI edits included.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.cluster.controlplane import ControlPlane
from tests.cluster.test_publish import pod_claim
from tests.kubelet.images import BUSYBOX_REF

RES = "/apis/resource.k8s.io/v1"
DRIVER = "ascend.project-hami.io"
FAKE_CLASS = "fake.ascend.project-hami.io"
ENV_DONE = "--env-end--"


def wait_for(probe: Callable[[], Any], what: str, within: float = 60.0, every: float = 0.1) -> Any:
    """``probe()``'s first truthy value; :class:`TimeoutError` naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not {what} within {within} s (last: {value!r})")
        time.sleep(every)


def ok(cp: ControlPlane, method: str, path: str, body: Any = None) -> Any:
    status, reply = cp.api(method, path, body)
    assert status in (200, 201), f"{method} {path}: HTTP {status}: {reply}"
    return reply


def create_namespace(cp: ControlPlane, name: str) -> None:
    ok(cp, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(lambda: cp.api("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] == 200,
             f"ServiceAccount {name}/default created", within=30)


def pod_manifest(name: str, *, claim_template: str | None = None, claim: str | None = None,
                 script: str = "") -> dict[str, Any]:
    """A pod whose container ``main`` prints its env, then ``ENV_DONE``, runs ``script``, sleeps.

    With ``claim_template`` / ``claim`` the container uses the pod claim ``npu`` from that
    ResourceClaimTemplate / ResourceClaim; without, the pod has no claim.
    """
    container: dict[str, Any] = {
        "name": "main", "image": BUSYBOX_REF, "imagePullPolicy": "Never",
        "command": ["sh", "-c", f"env | sort; echo {ENV_DONE}; {script} exec sleep 3600"],
    }
    spec: dict[str, Any] = {"hostNetwork": True, "automountServiceAccountToken": False, "restartPolicy": "Never",
                            "terminationGracePeriodSeconds": 1, "containers": [container]}
    if claim_template or claim:
        ref = {"resourceClaimTemplateName": claim_template} if claim_template else {"resourceClaimName": claim}
        spec["resourceClaims"] = [{"name": "npu", **ref}]
        container["resources"] = {"claims": [{"name": "npu"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def fake_template(cp: ControlPlane, namespace: str, name: str, aicore_limit: int = 40) -> None:
    """A ResourceClaimTemplate for one fake NPU with a FakeConfig (the env our spec sets)."""
    config = {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "FakeConfig", "aicoreLimit": aicore_limit}
    ok(cp, "POST", f"{RES}/namespaces/{namespace}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "npu", "exactly": {"deviceClassName": FAKE_CLASS}}],
            "config": [{"requests": ["npu"], "opaque": {"driver": DRIVER, "parameters": config}}]}}}})


def get_pod(cp: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return ok(cp, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}")


def unschedulable(cp: ControlPlane, namespace: str, name: str) -> str | None:
    """The scheduler's message while the pod is ``PodScheduled=False`` for ``Unschedulable``; else None."""
    for c in get_pod(cp, namespace, name).get("status", {}).get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
            return c.get("message", "")
    return None


def running(cp: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    """The pod once its container runs; :class:`AssertionError` if it failed."""
    pod = get_pod(cp, namespace, name)
    status = pod.get("status", {})
    assert status.get("phase") not in ("Failed", "Succeeded"), f"pod {name} ended: {status}"
    states = [c.get("state", {}) for c in status.get("containerStatuses") or []]
    return pod if states and all("running" in s for s in states) else None


def wait_running(cp: ControlPlane, namespace: str, name: str, within: float = 90.0) -> dict[str, Any]:
    """The pod once running; :class:`TimeoutError` with its status and events otherwise."""
    try:
        return wait_for(lambda: running(cp, namespace, name), f"pod {namespace}/{name} running", within)
    except TimeoutError as e:
        events = cp.api("GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={name}")[1]
        said = [f"{ev.get('reason')}: {ev.get('message')}" for ev in (events or {}).get("items", [])]
        raise TimeoutError(f"{e}; status: {get_pod(cp, namespace, name).get('status')}; events: {said}") from None


def container_env(cp: ControlPlane, namespace: str, name: str, within: float = 30.0,
                  container: str = "main") -> dict[str, str]:
    """The env ``container`` printed (its log, read through the API server from the kubelet)."""
    def printed() -> str | None:
        status, text = cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log?container={container}")
        return text if status == 200 and isinstance(text, str) and ENV_DONE in text else None

    text = wait_for(printed, f"env of pod {name} in its log", within, every=0.3)
    lines = text.split(ENV_DONE, 1)[0].splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def delete_pod(cp: ControlPlane, namespace: str, name: str, within: float = 60.0) -> None:
    """Delete gracefully (the kubelet stops the container and confirms); return when the pod is gone."""
    cp.api("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
    wait_for(lambda: cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")[0] == 404,
             f"pod {namespace}/{name} deleted", within)


def our_slices(cp: ControlPlane, node: str) -> list[dict[str, Any]]:
    items = ok(cp, "GET", f"{RES}/resourceslices?fieldSelector=spec.nodeName={node}")["items"]
    return [s for s in items if s["spec"]["driver"] == DRIVER]


def delete_our_slices(cp: ControlPlane, node: str) -> None:
    """Remove what an earlier module's daemon (another profile) published for ``node``."""
    for s in our_slices(cp, node):
        cp.api("DELETE", f"{RES}/resourceslices/{s['metadata']['name']}")


def specs(cdi_dir: Path) -> list[Path]:
    """Our claims' CDI spec files in ``cdi_dir`` (one per claim, plus the common one)."""
    return sorted(cdi_dir.glob(f"k8s.{DRIVER}-*_*.yaml"))


def start_fake_claim_pod(cp: ControlPlane, ns: str, name: str, script: str = "") -> tuple[dict, dict]:
    """A pod with one fake NPU (its own template ``name``); return it once running, and its claim."""
    fake_template(cp, ns, name)
    ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", pod_manifest(name, claim_template=name, script=script))
    pod = wait_running(cp, ns, name)
    claim = pod_claim(cp, ns, name)
    assert claim is not None
    return pod, claim
