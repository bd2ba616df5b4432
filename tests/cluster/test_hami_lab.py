"""Lab 18 (HAMi DRA on two 310P3) on the real control plane: steps 3, 5, 7 and 9 as
assertions.

The daemon runs the ``HAMivNPUCore`` profile against the simulated lab node (an npu-smi stand-in
printing real output formats, a fake host root and /dev), publishes to the real kube-apiserver, the
real kube-scheduler allocates the lab's claims for the lab's pods (``examples/hami-lab/``), and the
test plays the kubelet over the daemon's sockets.
HAMi-DRA's validating webhook deletes a pod's claim when the pod goes; the test does that itself.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_dra.profiles.ascend.sim import labnode
from tests.cluster.controlplane import DEFAULT_FEATURE_GATES, ControlPlane, default_bin_dir
from tests.cluster.test_publish import EXAMPLES, RES, delete_our_slices, ok, our_slices, wait_until
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

pytestmark = pytest.mark.cluster

NS = "dra-ascend-e2e"
UUID_0 = "68496E64-20E05477-92C31323-6E78030A-BD003019"
UUID_1 = "D8496E64-20C101B1-C0D42F23-AED8030A-40003039"
KIND_FILE = f"k8s.{DRIVER}-vnpu_{{uid}}.yaml"


def _lab_manifests() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The lab's claims and pods by name, from ``examples/hami-lab/<pod>.yaml`` (claim, then pod)."""
    claims, pods = {}, {}
    for pod in ("ascend-share-a", "ascend-share-b", "ascend-share-c", "ascend-ctrl-a", "ascend-ctrl-b"):
        claim, obj = yaml.safe_load_all((EXAMPLES / "hami-lab" / f"{pod}.yaml").read_text())
        claims[claim["metadata"]["name"]] = claim
        pods[obj["metadata"]["name"]] = obj
    return claims, pods


CLAIMS, PODS = _lab_manifests()


def claim_name(pod: str) -> str:
    return f"{NS}-{pod}-app-ascend310p"


def create(cp, obj: dict[str, Any]) -> dict[str, Any]:
    kind = obj["kind"]
    path = {"ResourceClaim": f"{RES}/namespaces/{NS}/resourceclaims", "Pod": f"/api/v1/namespaces/{NS}/pods",
            "DeviceClass": f"{RES}/deviceclasses", "RuntimeClass": "/apis/node.k8s.io/v1/runtimeclasses",
            "Namespace": "/api/v1/namespaces"}[kind]
    status, reply = cp.api("POST", path, obj)
    assert status in (201, 409), f"create {kind} {obj['metadata']['name']}: {status} {reply}"
    return reply


def lab_pod(cp, pod: str, claim: dict[str, Any] | None = None, template: str | None = None) -> None:
    """Create the lab's claim and pod ``pod`` (or, with ``template``, a copy of that one renamed)."""
    source = template or pod
    claim = copy.deepcopy(claim or CLAIMS[claim_name(source)])
    claim["metadata"]["name"] = claim_name(pod)
    create(cp, claim)
    obj = copy.deepcopy(PODS[source])
    obj["metadata"]["name"] = pod
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": claim_name(pod)}]
    obj["spec"]["resourceClaims"] = [{"name": claim_name(pod), "resourceClaimName": claim_name(pod)}]
    create(cp, obj)


def get_claim(cp, pod: str) -> dict[str, Any]:
    return ok(cp, "GET", f"{RES}/namespaces/{NS}/resourceclaims/{claim_name(pod)}")


def allocated(cp, pod: str) -> dict[str, Any] | None:
    claim = get_claim(cp, pod)
    return claim if claim.get("status", {}).get("allocation") else None


def unschedulable(cp, pod: str) -> str | None:
    """The scheduler's message once it gave up on ``pod`` (PodScheduled False, Unschedulable)."""
    obj = ok(cp, "GET", f"/api/v1/namespaces/{NS}/pods/{pod}")
    for condition in obj.get("status", {}).get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition["status"] == "False" \
                and condition.get("reason") == "Unschedulable":
            return condition.get("message", "")
    return None


def result_of(claim: dict[str, Any]) -> dict[str, Any]:
    [result] = claim["status"]["allocation"]["devices"]["results"]
    return result


def delete_pod_and_claim(cp, pod: str) -> None:
    cp.api("DELETE", f"/api/v1/namespaces/{NS}/pods/{pod}?gracePeriodSeconds=0")
    cp.api("DELETE", f"{RES}/namespaces/{NS}/resourceclaims/{claim_name(pod)}")


def cleanup(cp) -> None:
    pods = ok(cp, "GET", f"/api/v1/namespaces/{NS}/pods")["items"]
    for pod in pods:
        cp.api("DELETE", f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}?gracePeriodSeconds=0")
    ok(cp, "DELETE", f"{RES}/namespaces/{NS}/resourceclaims")
    wait_until(lambda: not ok(cp, "GET", f"{RES}/namespaces/{NS}/resourceclaims")["items"], "claims gone",
               within=60)


@contextlib.contextmanager
def lab_daemon(cp: ControlPlane, workdir: Path, *extra_args: str) -> Iterator[tuple[DaemonProcess, Kubelet, Any]]:
    """The lab node's daemon (HAMivNPUCore on the simulated 2x 310P3, run with ``extra_args`` too),
    the lab's DeviceClass, namespace and RuntimeClass; everything the test created is removed
    afterwards. Yields the daemon, a kubelet client of it and the lab node."""
    delete_our_slices(cp, cp.node_name)
    node = labnode.build(workdir / "lab")
    for manifest in ("hami-lab/namespace.yaml", "deviceclasses/hami-vnpu-core.yaml",
                     "hami-lab/runtimeclass-ascend.yaml"):
        create(cp, yaml.safe_load((EXAMPLES / manifest).read_text()))
    cleanup(cp)
    d = DaemonProcess(workdir / "node", node=cp.node_name, kubeconfig=cp.kubeconfig, profiles="HAMivNPUCore",
                      extra_args=[*node.flags(), *extra_args]).start()
    k = Kubelet(d)
    try:
        yield d, k, node
    finally:
        k.close()
        cleanup(cp)
        d.stop()
        delete_our_slices(cp, cp.node_name)


@pytest.fixture
def lab(control_plane, short_tmp):
    """:func:`lab_daemon` with the lab's own flags."""
    with lab_daemon(control_plane, short_tmp) as (d, k, node):
        yield control_plane, d, k, node


def spec_of(d: DaemonProcess, uid: str) -> dict[str, Any]:
    return yaml.safe_load((d.cdi_dir / KIND_FILE.format(uid=uid)).read_text())


def container_env(d: DaemonProcess, uid: str) -> dict[str, str]:
    # the claim's device, not the one that mounts its device metadata file (KEP-5304)
    [device] = [x for x in spec_of(d, uid)["devices"] if "-metadata_" not in x["name"]]
    return dict(e.split("=", 1) for e in device["containerEdits"]["env"])


def local_dir(node: labnode.LabNode, uid: str) -> Path:
    return node.host_root / "usr/local/hami-vnpu-core/containers" / uid


def test_step3_slice_carries_the_labs_attributes_and_capacities(lab) -> None:
    cp, _, _, _ = lab
    [obj] = wait_until(lambda: our_slices(cp, cp.node_name), "published")
    node_uid = ok(cp, "GET", f"/api/v1/nodes/{cp.node_name}")["metadata"]["uid"]
    assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": cp.node_name,
                                                   "uid": node_uid, "controller": True}]
    spec = obj["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"], spec["pool"]["resourceSliceCount"]) == (
        "ascend.project-hami.io", cp.node_name, cp.node_name, 1)
    devices = {d["name"]: d for d in spec["devices"]}
    assert sorted(devices) == ["npu-0-0", "npu-1-0"]
    # The lab's slice (step 3), field by field.
    lab_slice = {
        "npu-0-0": {"brand": {"string": "Huawei"}, "index": {"int": 0}, "model": {"string": "310P3"},
                    "physicalID": {"int": 0}, "productName": {"string": "310P3"},
                    "type": {"string": "HAMivNPUCore"}, "uuid": {"string": UUID_0}},
        "npu-1-0": {"brand": {"string": "Huawei"}, "index": {"int": 1}, "model": {"string": "310P3"},
                    "physicalID": {"int": 2}, "productName": {"string": "310P3"},
                    "type": {"string": "HAMivNPUCore"}, "uuid": {"string": UUID_1}},
    }
    for name, attributes in lab_slice.items():
        device = devices[name]
        assert device["allowMultipleAllocations"] is True
        for key, value in attributes.items():
            assert device["attributes"][key] == value, (name, key)
        capacity = device["capacity"]
        assert capacity["cores"]["value"] == "100"
        assert capacity["cores"]["requestPolicy"]["validRange"] == {"min": "1", "max": "100", "step": "1"}
        assert capacity["memory"]["value"] == "21525Mi"
        assert capacity["memory"]["requestPolicy"]["validRange"] == {"min": "1Mi", "max": "21525Mi", "step": "1Mi"}
        # Our defaults differ from the lab's on purpose (docs/hami-vnpu-core.md): 1/64 of the memory, 1 core.
        assert capacity["memory"]["requestPolicy"]["default"] == "336Mi"
        assert capacity["cores"]["requestPolicy"]["default"] == "1"
        assert capacity["containers"] == {"value": "64", "requestPolicy": {"default": "1", "validValues": ["1"]}}
    # Our other attributes beside the lab's, within the API's limit of 32.
    assert devices["npu-1-0"]["attributes"]["npuID"] == {"int": 5}
    assert devices["npu-1-0"]["attributes"]["pciAddress"] == {"string": "0000:85:00.0"}


def test_steps_5_7_9_share_pending_release_reallocate(lab) -> None:
    cp, d, k, node = lab
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    # Step 5 and 7: pods A and B, pinned to npu-0-0 by uuid, 8192 MiB / 50 cores each.
    lab_pod(cp, "ascend-share-a")
    lab_pod(cp, "ascend-share-b")
    a = wait_until(lambda: allocated(cp, "ascend-share-a"), "claim A allocated", within=30)
    b = wait_until(lambda: allocated(cp, "ascend-share-b"), "claim B allocated", within=30)
    assert a["spec"]["devices"] == CLAIMS[claim_name("ascend-share-a")]["spec"]["devices"]
    for claim in (a, b):
        result = result_of(claim)
        assert {k_: result[k_] for k_ in ("device", "driver", "pool", "request")} == {
            "device": "npu-0-0", "driver": DRIVER, "pool": cp.node_name, "request": "npu"}
        assert result["consumedCapacity"] == {"cores": "50", "memory": "8Gi", "containers": "1"}
    assert result_of(a)["shareID"] != result_of(b)["shareID"]
    reply = k.prepare(a, b)
    for claim in (a, b):
        uid = claim["metadata"]["uid"]
        assert reply.claims[uid].error == ""
        [prepared] = reply.claims[uid].devices
        assert prepared.share_id == result_of(claim)["shareID"]
        assert container_env(d, uid) == {
            "NPU_PRIORITY": "50", "ASCEND_VISIBLE_DEVICES": "0",
            "NPU_GLOBAL_SHM_PATH": "/hami-shared-region/0_global_registry",
            "NPU_LOCAL_SHM_PATH": "/hami-vnpu-shmem/vnpu_local_shmem", "NPU_MEM_QUOTA": "8192"}
        assert (local_dir(node, uid) / "npu").is_dir()
    # Step 9: pod C (8192 / 50) stays pending: npu-0-0 has 5141 MiB / 0 cores left.
    lab_pod(cp, "ascend-share-c")
    message = wait_until(lambda: unschedulable(cp, "ascend-share-c"), "pod C unschedulable", within=30)
    assert "cannot allocate all claims" in message
    assert allocated(cp, "ascend-share-c") is None
    # The memory-only control on npu-1-0: ctrl-a 8192/50 fits, ctrl-b 14000/40 does not (13333 MiB left).
    lab_pod(cp, "ascend-ctrl-a")
    ctrl_a = wait_until(lambda: allocated(cp, "ascend-ctrl-a"), "ctrl-a allocated", within=30)
    assert result_of(ctrl_a)["device"] == "npu-1-0"
    lab_pod(cp, "ascend-ctrl-b")
    message = wait_until(lambda: unschedulable(cp, "ascend-ctrl-b"), "ctrl-b unschedulable", within=30)
    assert "cannot allocate all claims" in message
    assert allocated(cp, "ascend-ctrl-b") is None
    # Release: delete pod A (and its claim, as HAMi-DRA's webhook does); the kubelet unprepares it.
    uid_a = a["metadata"]["uid"]
    delete_pod_and_claim(cp, "ascend-share-a")
    assert k.unprepare(a).claims[uid_a].error == ""
    assert not (d.cdi_dir / KIND_FILE.format(uid=uid_a)).exists()
    assert not local_dir(node, uid_a).exists()
    # Reallocate: C lands on the same device and is prepared.
    c = wait_until(lambda: allocated(cp, "ascend-share-c"), "claim C allocated after A's release", within=60)
    assert result_of(c)["device"] == "npu-0-0"
    assert result_of(c)["shareID"] not in (result_of(a)["shareID"], result_of(b)["shareID"])
    uid_c = c["metadata"]["uid"]
    assert k.prepare(c).claims[uid_c].error == ""
    assert container_env(d, uid_c)["NPU_MEM_QUOTA"] == "8192"
    assert (local_dir(node, uid_c) / "npu").is_dir()
    assert allocated(cp, "ascend-ctrl-b") is None  # still pending: A's release freed npu-0-0 only
    for claim in (b, c, ctrl_a):
        assert k.unprepare(claim).claims[claim["metadata"]["uid"]].error == ""


def one_core_claim(memory: str | None = None) -> dict[str, Any]:
    claim = copy.deepcopy(CLAIMS[claim_name("ascend-ctrl-a")])  # pinned to npu-1-0
    requests: dict[str, str] = {"cores": "1"}
    if memory is not None:
        requests["memory"] = memory
    claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"] = requests
    return claim


def test_step9_registry_64_one_core_claims_fit_the_65th_stays_pending(lab) -> None:
    cp, d, k, _ = lab
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    pods = [f"one-core-{i}" for i in range(64)]
    for pod in pods:
        lab_pod(cp, pod, claim=one_core_claim(), template="ascend-ctrl-a")
    claims = [wait_until(lambda p=p: allocated(cp, p), f"{p} allocated", within=60) for p in pods]
    results = [result_of(c) for c in claims]
    assert {r["device"] for r in results} == {"npu-1-0"}
    assert len({r["shareID"] for r in results}) == 64
    # A cores-only claim gets the memory default (1/64 of the chip), not the whole chip.
    assert {tuple(sorted(r["consumedCapacity"].items())) for r in results} == {
        (("containers", "1"), ("cores", "1"), ("memory", "336Mi"))}
    # The 65th fits by memory (64 x 336 + 1 <= 21525 MiB) and cores (65 <= 100), not by the registry.
    # Its memory, 1000000 bytes, is not a whole MiB: the scheduler rounds it up to the 1Mi step.
    lab_pod(cp, "one-core-64", claim=one_core_claim(memory="1000000"), template="ascend-ctrl-a")
    message = wait_until(lambda: unschedulable(cp, "one-core-64"), "the 65th unschedulable", within=30)
    assert "cannot allocate all claims" in message
    assert allocated(cp, "one-core-64") is None
    # Our Prepare takes all 64 shares at once (its guard sums the containers capacity too).
    reply = k.prepare(*claims)
    errors = {uid: entry.error for uid, entry in reply.claims.items() if entry.error}
    assert errors == {}
    assert len(reply.claims) == 64
    reply = k.unprepare(*claims)
    assert {uid: entry.error for uid, entry in reply.claims.items() if entry.error} == {}
    # One share released: the 65th gets its registry slot.
    delete_pod_and_claim(cp, pods[0])
    last = wait_until(lambda: allocated(cp, "one-core-64"), "the 65th allocated after a release", within=60)
    assert result_of(last)["consumedCapacity"] == {"containers": "1", "cores": "1", "memory": "1Mi"}
    uid = last["metadata"]["uid"]
    assert k.prepare(last).claims[uid].error == ""
    device = spec_of(d, uid)["devices"][0]  # the claim's own; then the device metadata mount (KEP-5304)
    assert "NPU_MEM_QUOTA=1" in device["containerEdits"]["env"]
    assert k.unprepare(last).claims[uid].error == ""


def test_without_the_consumable_capacity_gate_prepare_names_the_gate(short_tmp) -> None:
    """A control plane with ``DRAConsumableCapacity`` off: the API server drops the claim's capacity
    requests and the slice's sharing fields, the scheduler allocates npu-0-0 whole and writes no
    ``consumedCapacity``, and our Prepare refuses the claim naming the gate."""
    gates = {**DEFAULT_FEATURE_GATES, "DRAConsumableCapacity": False}
    cp = ControlPlane(short_tmp / "cp", default_bin_dir(), feature_gates=gates)
    cp.start()
    node = labnode.build(short_tmp / "lab")
    d = DaemonProcess(short_tmp / "node", node=cp.node_name, kubeconfig=cp.kubeconfig, profiles="HAMivNPUCore",
                      extra_args=node.flags())
    try:
        for manifest in ("hami-lab/namespace.yaml", "deviceclasses/hami-vnpu-core.yaml",
                         "hami-lab/runtimeclass-ascend.yaml"):
            create(cp, yaml.safe_load((EXAMPLES / manifest).read_text()))
        d.start()
        wait_until(lambda: our_slices(cp, cp.node_name), "published")
        lab_pod(cp, "ascend-share-a")
        a = wait_until(lambda: allocated(cp, "ascend-share-a"), "claim A allocated", within=30)
        assert "capacity" not in a["spec"]["devices"]["requests"][0]["exactly"]  # dropped by the API server
        assert result_of(a)["device"] == "npu-0-0"
        assert "consumedCapacity" not in result_of(a)
        k = Kubelet(d)
        try:
            error = k.prepare(a).claims[a["metadata"]["uid"]].error
        finally:
            k.close()
        assert error == (
            f"ResourceClaim {NS}/{claim_name('ascend-share-a')}: profile HAMivNPUCore failed to apply its config: "
            "ValueError: device npu-0-0 (request npu) was allocated without consumedCapacity memory, cores: enable "
            "the feature gate DRAConsumableCapacity on kube-apiserver, kube-scheduler, kube-controller-manager and "
            "the kubelet, then recreate the claim")
        assert not list((node.host_root / "usr/local/hami-vnpu-core/containers").iterdir())
    finally:
        d.stop()
        cp.stop()
