"""End to end: Lab 18's HAMi pod, converted by the webhook, allocated by the real scheduler
against the HAMivNPUCore profile's slices and prepared by our daemon, as the lab's steps 4-6 show.

The daemon runs ``HAMivNPUCore`` on the simulated lab node (``ascend_dra.profiles.ascend.sim.labnode``:
two 310P3, an npu-smi stand-in, a fake host root); the webhook runs in each mode with that
profile loaded, so its config kind ``VnpuCoreConfig`` is validated too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_dra.profiles.ascend.sim import labnode
from tests.cluster.test_publish import EXAMPLES, RES, delete_our_slices, ok, our_slices, pod_claim, wait_until
from tests.cluster.test_webhook import LAB_CLAIM_SPEC, LAB_POD
from tests.cluster.webhook_process import installed_hook
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

pytestmark = pytest.mark.cluster

NS = "dra-ascend-e2e"
#: The lab's step 6: the env a pod A container gets (NPU_MEM_QUOTA in MiB, NPU_PRIORITY in percent).
LAB_ENV = {"NPU_PRIORITY": "50", "ASCEND_VISIBLE_DEVICES": "0",
           "NPU_GLOBAL_SHM_PATH": "/hami-shared-region/0_global_registry",
           "NPU_LOCAL_SHM_PATH": "/hami-vnpu-shmem/vnpu_local_shmem", "NPU_MEM_QUOTA": "8192"}


@contextlib.contextmanager
def lab_node(cp, short_tmp: Path, tmp_path: Path, mode: str) -> Iterator[tuple[DaemonProcess, Kubelet, Any]]:
    """The simulated lab node's HAMivNPUCore daemon in cluster mode and the webhook in ``mode``, with
    the hami-vnpu-core DeviceClass and the node's slices published; removed afterwards."""
    delete_our_slices(cp, cp.node_name)
    node = labnode.build(short_tmp / "lab")
    status, reply = cp.api("POST", f"{RES}/deviceclasses",
                           yaml.safe_load((EXAMPLES / "deviceclasses" / "hami-vnpu-core.yaml").read_text()))
    assert status in (201, 409), reply
    daemon = DaemonProcess(short_tmp / "node", node=cp.node_name, kubeconfig=cp.kubeconfig, profiles="HAMivNPUCore",
                           extra_args=node.flags()).start()
    kubelet = Kubelet(daemon)
    try:
        with installed_hook(cp, tmp_path, mode, profiles="HAMivNPUCore,npu-310P") as hook:
            wait_until(lambda: our_slices(cp, cp.node_name), "HAMivNPUCore slices published")
            yield daemon, kubelet, hook
    finally:
        kubelet.close()
        daemon.stop()
        delete_our_slices(cp, cp.node_name)


@pytest.mark.parametrize("mode", ["claim", "template"])
def test_lab_pod_is_converted_allocated_and_prepared_as_the_lab_shows(control_plane, short_tmp, tmp_path, mode):
    cp = control_plane
    with lab_node(cp, short_tmp, tmp_path, mode) as (daemon, kubelet, hook):
        try:
            ns = hook.namespace(NS)
            # The profile's own config kind is checked when a claim is created.
            bad = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "bad"},
                   "spec": {"devices": {"requests": [{"name": "npu", "exactly": {
                       "deviceClassName": "hami-vnpu-core.project-hami.io"}}], "config": [{"opaque": {
                           "driver": DRIVER, "parameters": {"apiVersion": f"{DRIVER}/v1alpha1",
                                                            "kind": "VnpuCoreConfig", "mountTools": "yes"}}}]}}}
            status, reply = cp.api("POST", f"{RES}/namespaces/{ns}/resourceclaims", bad)
            assert status == 422 and reply["message"].endswith(
                "spec.devices.config[0].opaque.parameters.mountTools: must be a boolean, got a string \"yes\" "
                "(for all requests)"), reply
            ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", LAB_POD)
            claim = wait_until(lambda: (c := pod_claim(cp, ns, "ascend-share-a")) and c.get("status", {}).get(
                "allocation") and c, "allocated", within=30)
            assert claim["spec"] == LAB_CLAIM_SPEC
            [result] = claim["status"]["allocation"]["devices"]["results"]
            share_id = result.pop("shareID")
            # The lab's step 5, plus the profile's `containers` capacity (one hami-vnpu-core slot per container).
            assert result == {"consumedCapacity": {"cores": "50", "memory": "8Gi", "containers": "1"},
                              "device": "npu-0-0", "driver": DRIVER, "pool": cp.node_name, "request": "npu"}
            bound = wait_until(lambda: ok(cp, "GET", f"/api/v1/namespaces/{ns}/pods/ascend-share-a")["spec"].get(
                "nodeName"), "pod bound", within=30)
            assert bound == cp.node_name
            uid = claim["metadata"]["uid"]
            reply = kubelet.prepare(claim)
            assert reply.claims[uid].error == ""
            [prepared] = reply.claims[uid].devices
            assert prepared.share_id == share_id
            spec = yaml.safe_load((daemon.cdi_dir / f"k8s.{DRIVER}-vnpu_{uid}.yaml").read_text())
            device = spec["devices"][0]  # the claim's own; then the device metadata mount (KEP-5304)
            assert dict(e.split("=", 1) for e in device["containerEdits"]["env"]) == LAB_ENV
            assert kubelet.unprepare(claim).claims[uid].error == ""
            # Deleting the pod removes its claim (garbage collector: the pod owns it in both modes).
            ok(cp, "DELETE", f"/api/v1/namespaces/{ns}/pods/ascend-share-a?gracePeriodSeconds=0")
            wait_until(lambda: cp.api("GET", f"{RES}/namespaces/{ns}/resourceclaims/{claim['metadata']['name']}")[0]
                       == 404, "claim deleted with its pod", within=60)
        finally:
            cp.api("DELETE", f"/api/v1/namespaces/{NS}/pods/ascend-share-a?gracePeriodSeconds=0")


def test_a_hami_count_of_two_with_round_thousand_mib_gets_two_chips_of_that_memory(control_plane, short_tmp, tmp_path):
    """``huawei.com/Ascend310P: 2`` with ``-memory: 4000``, through the real API server: the
    webhook sees the memory as ``4k`` (the API server's canonical form) and reads 4000 MiB, not a
    refused 4000 bytes; the scheduler puts the two shares on two chips, not both on one (the
    claim's distinctAttribute), and each container edit carries the 4000 MiB quota."""
    cp = control_plane
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "two-chips"}, "spec": {
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {
            "huawei.com/Ascend310P": 2, "huawei.com/Ascend310P-memory": 4000, "huawei.com/Ascend310P-core": 25}}}]}}
    with lab_node(cp, short_tmp, tmp_path, "template") as (daemon, kubelet, hook):
        ns = hook.namespace(NS)
        try:
            ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", pod)
            claim = wait_until(lambda: (c := pod_claim(cp, ns, "two-chips")) and c.get("status", {}).get(
                "allocation") and c, "allocated", within=30)
            results = claim["status"]["allocation"]["devices"]["results"]
            assert sorted(r["device"] for r in results) == ["npu-0-0", "npu-1-0"]
            assert {r["consumedCapacity"]["memory"] for r in results} == {"4000Mi"}
            uid = claim["metadata"]["uid"]
            reply = kubelet.prepare(claim)
            assert reply.claims[uid].error == ""
            spec = yaml.safe_load((daemon.cdi_dir / f"k8s.{DRIVER}-vnpu_{uid}.yaml").read_text())
            envs = [dict(e.split("=", 1) for e in d["containerEdits"]["env"]) for d in spec["devices"]
                    if "env" in d["containerEdits"]]  # not the device metadata mount (KEP-5304)
            assert [env["NPU_MEM_QUOTA"] for env in envs] == ["4000", "4000"]
            assert kubelet.unprepare(claim).claims[uid].error == ""
        finally:
            cp.api("DELETE", f"/api/v1/namespaces/{ns}/pods/two-chips?gracePeriodSeconds=0")


@pytest.mark.parametrize("word", ["Ascend910B3", "Ascend910B"])
def test_a_request_for_another_chip_model_is_not_given_a_310p_share(control_plane, short_tmp, tmp_path, word):
    """HAMi gives ``huawei.com/Ascend910B3`` (and ``Ascend910B``, its name before v2.7) only 910B3
    chips. The lab node has two 310P3: the converted pod stays unschedulable, its claim unallocated.
    Without the chip-model selector the scheduler gave it a share of a 310P3 (HAMi-DRA's claims
    have none); ``Ascend910B`` was not converted at all."""
    cp = control_plane
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other-model"}, "spec": {
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {
            f"huawei.com/{word}": 1, f"huawei.com/{word}-memory": 1024}}}]}}
    with lab_node(cp, short_tmp, tmp_path, "template") as (_daemon, _kubelet, hook):
        ns = hook.namespace(NS)
        try:
            stored = ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", pod)
            assert stored["spec"]["resourceClaims"]  # converted
            wait_until(lambda: any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                                   for c in ok(cp, "GET", f"/api/v1/namespaces/{ns}/pods/other-model")
                                   .get("status", {}).get("conditions", [])), "unschedulable", within=30)
            claim = wait_until(lambda: pod_claim(cp, ns, "other-model"), "the pod's claim", within=30)
            assert not claim.get("status", {}).get("allocation")
        finally:
            cp.api("DELETE", f"/api/v1/namespaces/{ns}/pods/other-model?gracePeriodSeconds=0")


def test_an_init_container_books_no_share_beside_the_app_container_it_fits_in(control_plane, short_tmp, tmp_path):
    """HAMi books the larger of an init container's and the app containers' requests (its scheduler's
    CollapseInitContainerUsage). With a claim of its own per init container, pod A (init and app, 16 GiB
    each) took both of the node's 310P3 (21525 MiB each) and pod B (16 GiB) stayed pending; pod A's init
    container now uses its app container's claim, so A takes one chip and B the other."""
    cp = control_plane
    memory = {"huawei.com/Ascend310P": 1, "huawei.com/Ascend310P-memory": 16384, "huawei.com/Ascend310P-core": 25}

    def pod(name: str, init: bool) -> dict:
        spec: dict = {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                      "resources": {"limits": memory}}]}
        if init:
            spec["initContainers"] = [{"name": "warm", "image": "registry.k8s.io/pause:3.10",
                                       "resources": {"limits": memory}}]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}

    with lab_node(cp, short_tmp, tmp_path, "template") as (_daemon, _kubelet, hook):
        ns = hook.namespace(NS)
        try:
            ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", pod("with-init", True))
            stored = ok(cp, "GET", f"/api/v1/namespaces/{ns}/pods/with-init")
            assert len(stored["spec"]["resourceClaims"]) == 1
            assert stored["spec"]["initContainers"][0]["resources"]["claims"] == \
                stored["spec"]["containers"][0]["resources"]["claims"]
            ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", pod("after", False))
            devices = [wait_until(lambda p=p: (c := pod_claim(cp, ns, p)) and c.get("status", {}).get("allocation")
                                  and c["status"]["allocation"]["devices"]["results"][0]["device"],
                                  f"{p} allocated", within=30) for p in ("with-init", "after")]
            assert sorted(devices) == ["npu-0-0", "npu-1-0"]
        finally:
            for name in ("with-init", "after"):
                cp.api("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0")
