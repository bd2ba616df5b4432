"""Lab 18 (the HAMi DRA lab, docs/ascend-hardware.md) end to end on a real node: HAMi-syntax pods → our
webhook → ResourceClaims → the real scheduler → the real kubelet → our Prepare (HAMivNPUCore on the
simulated lab node) → containerd → the container's env shows ``NPU_MEM_QUOTA`` and ``NPU_PRIORITY``; the
third pod on the same chip stays Pending; deleting the first lets the third start.

The lab's pod (``tests.cluster.test_webhook.LAB_POD``) is used as written except what this node
needs: our busybox image instead of vllm-ascend (no registry), a command printing the env, host
network (no CNI) and no service-account token. Its RuntimeClass ``ascend`` is a runc handler of our
containerd (tests/kubelet/node.py).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ascend_dra.profiles.ascend.sim import labnode
from tests.cluster.test_webhook import LAB_POD
from tests.cluster.test_webhook_allocation import LAB_ENV
from tests.cluster.webhook_process import installed_hook
from tests.integration.daemon import DaemonProcess
from tests.kubelet.pods import (
    DRIVER,
    RES,
    container_env,
    delete_our_slices,
    delete_pod,
    get_pod,
    ok,
    our_slices,
    pod_claim,
    pod_manifest,
    unschedulable,
    wait_for,
    wait_running,
)

pytestmark = pytest.mark.kubelet

NS = "dra-ascend-e2e"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def lab_daemon(node, kubelet_cp) -> Iterator[DaemonProcess]:
    """Our daemon with HAMivNPUCore on the simulated lab node (two 310P3), registered with the kubelet."""
    delete_our_slices(kubelet_cp, node.node_name)  # the fake profile's, if its module ran first
    lab = labnode.build(node.workdir.parent / "lab")
    assert lab.real_device_nodes, "containerd injects the lab's device nodes: mknod needs root"
    d = DaemonProcess(node.kubelet_root, node=node.node_name, kubeconfig=kubelet_cp.kubeconfig,
                      profiles="HAMivNPUCore", extra_args=lab.flags()).start()
    try:
        wait_for(lambda: [s for s in our_slices(kubelet_cp, node.node_name)
                          if {dev["name"] for dev in s["spec"]["devices"]} == {"npu-0-0", "npu-1-0"}],
                 "the lab's slice published", within=30)
        yield d
    finally:
        d.stop()


def lab_pod(name: str) -> dict:
    """The lab's HAMi pod renamed (8192 MiB / 50 cores of the chip its uuid annotation pins), runnable here."""
    pod = copy.deepcopy(LAB_POD)
    pod["metadata"]["name"] = name
    runnable = pod_manifest(name)["spec"]
    [container] = pod["spec"]["containers"]
    container.update({k: runnable["containers"][0][k] for k in ("image", "imagePullPolicy", "command")})
    pod["spec"].update({k: runnable[k] for k in ("hostNetwork", "automountServiceAccountToken",
                                                  "terminationGracePeriodSeconds")})
    return pod


def test_the_labs_hami_pods_run_with_their_quota_the_third_waits_for_the_first(node, lab_daemon, tmp_path):
    cp = node.cp
    status, reply = cp.api("POST", f"{RES}/deviceclasses",
                           yaml.safe_load((EXAMPLES / "deviceclasses" / "hami-vnpu-core.yaml").read_text()))
    assert status in (201, 409), reply
    with installed_hook(cp, tmp_path, "claim", profiles="HAMivNPUCore,npu-310P") as hook:
        ns = hook.namespace(NS)
        try:
            # B is created once A has a node: with both created at once, one CI run's kube-scheduler
            # 1.35 marked B Unschedulable ("cannot allocate all claims") in the second it was created,
            # though B fits beside A, and did not try B again within 120 s (not reproduced in 5 runs
            # since, with both cores loaded or not; the logs were lost). How the scheduler orders two
            # pods created at once is not what this test is about; what it checks (both run on the
            # chip with their quota, C waits for A) is unchanged.
            ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", lab_pod("ascend-share-a"))
            wait_for(lambda: get_pod(cp, ns, "ascend-share-a")["spec"].get("nodeName"), "A scheduled", within=60)
            ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", lab_pod("ascend-share-b"))
            for name in ("ascend-share-a", "ascend-share-b"):
                wait_running(cp, ns, name, within=120)
                env = container_env(cp, ns, name, container="app")
                assert {k: env.get(k) for k in LAB_ENV} == LAB_ENV, env
            claims = {n: pod_claim(cp, ns, n) for n in ("ascend-share-a", "ascend-share-b")}
            results = {n: c["status"]["allocation"]["devices"]["results"][0] for n, c in claims.items()}
            assert {r["device"] for r in results.values()} == {"npu-0-0"}
            assert results["ascend-share-a"]["shareID"] != results["ascend-share-b"]["shareID"]
            # Step 9: the chip has 5141 MiB / 0 cores left; C (pinned to it as well) stays Pending.
            ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", lab_pod("ascend-share-c"))
            assert "cannot allocate all claims" in wait_for(lambda: unschedulable(cp, ns, "ascend-share-c"),
                                                            "C unschedulable", within=30)
            spec_a = [p for p in node.cdi_dir.glob(f"k8s.{DRIVER}-vnpu_*.yaml")
                      if claims["ascend-share-a"]["metadata"]["uid"] in p.name]
            assert spec_a
            delete_pod(cp, ns, "ascend-share-a")
            wait_for(lambda: not any(p.exists() for p in spec_a), "A's spec removed by Unprepare", within=30)
            wait_running(cp, ns, "ascend-share-c", within=120)
            env = container_env(cp, ns, "ascend-share-c", container="app")
            assert {k: env.get(k) for k in LAB_ENV} == LAB_ENV, env
            assert get_pod(cp, ns, "ascend-share-b")["status"]["phase"] == "Running"
        finally:
            for name in ("ascend-share-a", "ascend-share-b", "ascend-share-c"):
                if cp.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}")[0] == 200:
                    delete_pod(cp, ns, name)
