"""Pods with claims on the bed: a simulated NPU on the fake node, Lab 18's HAMi pods on the lab node.

The pods are those of tests/kubelet/pods.py (the busybox image prints the env, then what ``script``
prints, then sleeps) on the pod network instead of the host's, pinned to a node by its hostname
label; Lab 18's pod (tests.cluster.test_webhook.LAB_POD) keeps everything but its image and command.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.cluster.test_publish import pod_claim
from tests.cluster.test_webhook import LAB_POD
from tests.kubelet.pods import DRIVER, ENV_DONE, FAKE_CLASS, RES, ok, pod_manifest, wait_for, wait_running

CLAIMS_NS = "e2e-claims"
#: Lab 18's namespace (its pods name it).
LAB_NS = "dra-ascend-e2e"
#: What a claim's CDI edits give the container: device nodes, the driver's version file, and for a
#: HAMivNPUCore share the preload file and hami-vnpu-core's directory.
PROBE = ("ls /dev/davinci*; cat /usr/local/Ascend/driver/version.info; cat /etc/ld.so.preload 2>/dev/null; "
         "ls -d /hami-vnpu-core 2>/dev/null;")
#: The second lab chip's VDie ID: a HAMi pod pinned to it does not compete with the first chip's.
SECOND_CHIP_UUID = "D8496E64-20C101B1-C0D42F23-AED8030A-40003039"


def on_pod_network(manifest: dict[str, Any], node: str) -> dict[str, Any]:
    """``manifest`` on ``node``'s pod network (tests/kubelet's pods use the host's)."""
    manifest = copy.deepcopy(manifest)
    manifest["spec"]["hostNetwork"] = False
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return manifest


def create_claim_pod(cp: Any, ns: str, name: str, node: str) -> None:
    """Create a pod on ``node`` with one fake NPU (its own claim template ``name``, FakeConfig
    ``aicoreLimit: 40``). The template goes out as kubectl sends it (compact JSON, sorted keys): the
    API server refuses status patches of claims whose opaque parameters were written otherwise
    (docs/kubernetes-versions.md, "API-server quirk"), and users create claims with kubectl."""
    config = {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "FakeConfig", "aicoreLimit": 40}
    status, reply = cp.api("POST", f"{RES}/namespaces/{ns}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "npu", "exactly": {"deviceClassName": FAKE_CLASS}}],
            "config": [{"requests": ["npu"], "opaque": {"driver": DRIVER, "parameters": config}}]}}}},
        json_style="kubectl")
    assert status == 201, reply
    ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", on_pod_network(pod_manifest(name, claim_template=name,
                                                                               script=PROBE), node))


def our_status(cp: Any, ns: str, pod: str) -> list[dict[str, Any]]:
    """Our driver's entries of ``status.devices`` of the pod's claim (KEP-4817, written by the daemon)."""
    claim = pod_claim(cp, ns, pod)
    return [d for d in (claim or {}).get("status", {}).get("devices") or [] if d["driver"] == DRIVER]


def start_claim_pod(cp: Any, ns: str, name: str, node: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`create_claim_pod`; it and its claim once running."""
    create_claim_pod(cp, ns, name, node)
    pod = wait_running(cp, ns, name, within=120)
    claim = pod_claim(cp, ns, name)
    assert claim is not None
    return pod, claim


def lab_pod(name: str, *, chip_uuid: str | None = None) -> dict[str, Any]:
    """Lab 18's HAMi pod (8192 MiB / 50 cores of the chip its uuid annotation pins) named ``name``,
    running our busybox with the env printer; ``chip_uuid`` pins it to another chip."""
    pod = copy.deepcopy(LAB_POD)
    pod["metadata"]["name"] = name
    if chip_uuid:
        pod["metadata"]["annotations"]["hami.io/use-Ascend310P-uuid"] = chip_uuid
    runnable = pod_manifest(name, script=PROBE)["spec"]
    [container] = pod["spec"]["containers"]
    container.update({k: runnable["containers"][0][k] for k in ("image", "imagePullPolicy", "command")})
    pod["spec"]["terminationGracePeriodSeconds"] = runnable["terminationGracePeriodSeconds"]
    return pod


def pod_log(cp: Any, ns: str, name: str, container: str = "main", within: float = 30.0) -> str:
    """The container's log once the env printer is done with the env (the probe output follows)."""
    def printed() -> str | None:
        status, text = cp.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}/log?container={container}")
        return text if status == 200 and isinstance(text, str) and ENV_DONE in text else None

    return wait_for(printed, f"the log of pod {ns}/{name}", within, every=0.3)


def printed_env(log: str) -> dict[str, str]:
    """The env lines the container printed before :data:`ENV_DONE`."""
    return dict(line.split("=", 1) for line in log.split(ENV_DONE, 1)[0].splitlines() if "=" in line)


def running_state(cp: Any, ns: str, name: str) -> tuple[str, int, str]:
    """``(container ID, restart count, started at)`` of the pod's one container."""
    pod = ok(cp, "GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    [status] = pod["status"]["containerStatuses"]
    assert "running" in status["state"], status
    return status["containerID"], status["restartCount"], status["state"]["running"]["startedAt"]
