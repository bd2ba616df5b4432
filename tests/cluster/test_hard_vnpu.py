"""The hard-vNPU profile against the real scheduler (DRAPartitionableDevices on): template claims
fill a chip up to its counters and the next stays pending; a whole-chip claim waits while any
vNPU of the chip is allocated, and vice versa; deleting a claim frees its counters, and the pending
claim is allocated and prepared with a fresh vNPU in the simulated npu-smi.

The node is one simulated 910B4 (NPU ID 4, physical ID 0): four ``vir05_1c_8g`` fill its 20 AI
cores (docs/ascend-hardware.md#910b-and-a3-templates). The test plays the kubelet (Prepare/Unprepare over the sockets).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.controlplane import DEFAULT_FEATURE_GATES, ControlPlane, default_bin_dir
from tests.cluster.test_publish import RES, delete_our_slices, ok, our_slices, pod_claim, wait_until
from tests.hardvnpu import SimHost, daemon_args, vnpu_keys
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
VNPU_CLASS = "ascend910b-vnpu.ascend.project-hami.io"
CHIP_CLASS = "ascend910b-chip.ascend.project-hami.io"
VIR05 = f'device.attributes["{DRIVER}"].vnpuTemplate == "vir05_1c_8g"'


@pytest.fixture(params=["910B4"])
def node(cp, short_tmp, request):
    """A hard-vNPU daemon on a one-chip host (910B4 unless the test asks for another model by
    ``@pytest.mark.parametrize("node", [...], indirect=True)``), its DeviceClasses applied; cleaned up after."""
    root = short_tmp / "node"
    host = SimHost(root, chips=((4, 0, 0, 0, request.param),))
    d = DaemonProcess(root, node=cp.node_name, kubeconfig=cp.kubeconfig, profiles="hard-vNPU", env=host.env,
                      extra_args=daemon_args(host)).start()
    for doc in yaml.safe_load_all((EXAMPLES / "deviceclasses" / "hard-vnpu.yaml").read_text()):
        status, reply = cp.api("POST", f"{RES}/deviceclasses", doc)
        assert status in (201, 409), reply
    k = Kubelet(d)
    pods: list[str] = []
    yield d, host, k, pods
    k.close()
    for p in pods:
        delete(cp, p)
    d.stop()
    delete_our_slices(cp, cp.node_name)


def create(cp, pods: list[str], class_name: str, selector: str | None = None) -> str:
    """A pod with its own ResourceClaim (same name) for one device of ``class_name``."""
    name = f"hv-{uuid.uuid4().hex[:8]}"
    request: dict[str, Any] = {"name": "npu", "exactly": {"deviceClassName": class_name}}
    if selector:
        request["exactly"]["selectors"] = [{"cel": {"expression": selector}}]
    ok(cp, "POST", f"{RES}/namespaces/default/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}}})
    ok(cp, "POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"resourceClaims": [{"name": "npu", "resourceClaimName": name}],
                 "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "npu"}]}}]}})
    pods.append(name)
    return name


def delete(cp, name: str) -> None:
    cp.api("DELETE", f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")
    cp.api("DELETE", f"{RES}/namespaces/default/resourceclaims/{name}")


def allocated(cp, pod: str, within: float = 60) -> dict:
    return wait_until(lambda: (c := pod_claim(cp, "default", pod)) and c.get("status", {}).get("allocation") and c,
                      f"{pod} allocated", within=within)


def assert_pending(cp, pod: str) -> None:
    """The scheduler tried and found no fit (PodScheduled False, Unschedulable), and the claim has
    no allocation."""
    def unschedulable() -> bool:
        obj = ok(cp, "GET", f"/api/v1/namespaces/default/pods/{pod}")
        return any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
                   for c in obj.get("status", {}).get("conditions", []))
    wait_until(unschedulable, f"{pod} unschedulable", within=60)
    assert not ok(cp, "GET", f"{RES}/namespaces/default/resourceclaims/{pod}").get("status", {}).get("allocation")


def prepare(k: Kubelet, claim: dict) -> str:
    uid = claim["metadata"]["uid"]
    assert k.prepare(claim).claims[uid].error == ""
    return claim["status"]["allocation"]["devices"]["results"][0]["device"]


def release(cp, k: Kubelet, pod: str, claim: dict) -> None:
    """What the kubelet and the controllers do when a pod goes: Unprepare, then the claim is deleted."""
    cp.api("DELETE", f"/api/v1/namespaces/default/pods/{pod}?gracePeriodSeconds=0")
    assert k.unprepare(claim).claims[claim["metadata"]["uid"]].error == ""
    cp.api("DELETE", f"{RES}/namespaces/default/resourceclaims/{pod}")


def test_vnpus_fill_the_chip_then_pend_and_a_freed_one_is_prepared_fresh(cp, node):
    d, host, k, pods = node
    [counters] = wait_until(lambda: [s for s in our_slices(cp, cp.node_name) if "sharedCounters" in s["spec"]],
                            "counter slice published")
    assert counters["spec"]["sharedCounters"][0]["counters"]["aicore"] == {"value": "20"}
    first = [create(cp, pods, VNPU_CLASS, VIR05) for _ in range(4)]
    claims = {p: allocated(cp, p) for p in first}
    devices = {p: prepare(k, c) for p, c in claims.items()}
    assert sorted(devices.values()) == [f"vnpu-0-0-vir05-1c-8g-{i}" for i in range(4)]
    assert vnpu_keys(host.vnpus()) == {(4, 0, 105), (4, 0, 106), (4, 0, 107), (4, 0, 108)}

    fifth = create(cp, pods, VNPU_CLASS, VIR05)
    assert_pending(cp, fifth)
    # Any other template of the chip would over-commit its AI cores too.
    bigger = create(cp, pods, VNPU_CLASS)
    assert_pending(cp, bigger)
    pods.remove(bigger)
    delete(cp, bigger)

    gone = first[1]
    freed_id = 105 + int(devices[gone].rsplit("-", 1)[1])  # vir05_1c_8g instances hold IDs 105..108
    release(cp, k, gone, claims[gone])
    assert (4, 0, freed_id) not in vnpu_keys(host.vnpus())
    claim = allocated(cp, fifth, within=90)
    assert prepare(k, claim) == devices[gone]
    assert len(host.vnpus()) == 4
    spec = (d.cdi_dir / f"k8s.{DRIVER}-vnpu_{claim['metadata']['uid']}.yaml").read_text()
    assert f"/dev/davinci{freed_id}" in spec and f"/vdavinci{freed_id}" in spec  # container and host path
    assert f"ASCEND_VISIBLE_DEVICES={freed_id}" in spec
    assert (4, 0, freed_id) in vnpu_keys(host.vnpus())


def test_a_whole_chip_waits_for_its_vnpus_and_vnpus_wait_for_the_whole_chip(cp, node):
    _, host, k, pods = node
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    vnpu = create(cp, pods, VNPU_CLASS, VIR05)
    vnpu_claim = allocated(cp, vnpu)
    prepare(k, vnpu_claim)
    chip = create(cp, pods, CHIP_CLASS)
    assert_pending(cp, chip)

    release(cp, k, vnpu, vnpu_claim)
    assert host.vnpus() == []
    chip_claim = allocated(cp, chip, within=90)
    assert prepare(k, chip_claim) == "npu-0-0"
    assert host.vnpus() == []  # a whole chip creates no vNPU
    later = create(cp, pods, VNPU_CLASS, VIR05)
    assert_pending(cp, later)
    release(cp, k, chip, chip_claim)
    assert prepare(k, allocated(cp, later, within=90)) == "vnpu-0-0-vir05-1c-8g-0"
    assert vnpu_keys(host.vnpus()) == {(4, 0, 105)}


@pytest.mark.anyio
@pytest.mark.parametrize("node", ["310P3"], indirect=True)
@pytest.mark.parametrize("order", [("vir01",) * 6 + ("vir02_1c",), ("vir02", "vir01", "vir04_3c"),
                                   ("vir01",) * 3 + ("vir02",) * 2],
                         ids=["huawei full 310P3", "vir02 vir01 vir04_3c", "three vir01 then two vir02"])
def test_a_310p3_takes_every_combination_its_counters_allow_in_the_order_claims_come(cp, node, order):
    """With vNPU IDs dealt round-robin over the templates, each of these left its last claim
    pending: every free instance of the template shared an ID with a vNPU already allocated (a
    hard-vNPU user's trial). Each claim is allocated by the real scheduler before the next is made."""
    _, host, k, pods = node
    wait_until(lambda: [s for s in our_slices(cp, cp.node_name) if "sharedCounters" in s["spec"]],
               "counter slice published")
    made = []
    for template in order:
        pod = create(cp, pods, "ascend310p-vnpu.ascend.project-hami.io",
                     f'device.attributes["{DRIVER}"].vnpuTemplate == "{template}"')
        made.append(prepare(k, allocated(cp, pod)))
    assert [name.split("-")[3] for name in made] == [t.replace("_", "-").split("-")[0] for t in order]
    assert len({v[2] for v in vnpu_keys(host.vnpus())}) == len(order)  # one vNPU each, distinct IDs


@pytest.mark.anyio
async def test_eight_310p3_chips_publish_in_split_slices_the_api_server_stores_unchanged(control_plane, tmp_path,
                                                                                         monkeypatch):
    from ascend_dra.cluster.slices import build_slices
    from ascend_dra.profiles.ascend.hardvnpu.profile import HardVnpuProfile
    from ascend_dra.profiles.ascend.sim import npusmi_sim

    host = SimHost(tmp_path, chips=tuple((i, 0, i, i, "310P3") for i in range(8)))
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    inventory = await HardVnpuProfile().discover(host.ctx("fixture-hard-vnpu"))
    created = []
    try:
        objs = build_slices(inventory, driver_name=DRIVER, node_name="fixture-hard-vnpu")
        assert len(objs) == 6  # 312 devices in 5 slices of at most 64, 8 counter sets in one
        for obj in objs:
            stored = ok(control_plane, "POST", f"{RES}/resourceslices", obj)
            created.append(stored["metadata"]["name"])
            assert stored["spec"] == obj["spec"]
    finally:
        for name in created:
            control_plane.api("DELETE", f"{RES}/resourceslices/{name}")


def test_the_example_claim_templates_are_accepted(control_plane):
    for doc in yaml.safe_load_all((EXAMPLES / "claims" / "hard-vnpu" / "templates.yaml").read_text()):
        name = doc["metadata"]["name"]
        ok(control_plane, "POST", f"{RES}/namespaces/default/resourceclaimtemplates", doc)
        control_plane.api("DELETE", f"{RES}/namespaces/default/resourceclaimtemplates/{name}")


def test_without_partitionable_devices_only_whole_chips_are_published(short_tmp):
    """An API server with DRAPartitionableDevices off drops the counters: the scheduler then saw the
    chip and each vNPU template as independent devices, and gave a chip whole and cut at once (only
    the Prepares that fit succeeded; the other pods waited for good). Now only the whole chip is
    published, without counters; a pod for it runs, a pod for a vNPU stays unschedulable. Once the
    operator turns the gate on (kube-apiserver restarted, not the daemon), the templates come back:
    the fallback lasted until the daemon restarted."""
    cp = ControlPlane(short_tmp / "cp", default_bin_dir(), feature_gates={**DEFAULT_FEATURE_GATES,
                                                                          "DRAPartitionableDevices": False})
    cp.start()
    root = short_tmp / "node"
    host = SimHost(root, chips=((4, 0, 0, 0, "910B4"),))
    d = DaemonProcess(root, node=cp.node_name, kubeconfig=cp.kubeconfig, profiles="hard-vNPU", env=host.env,
                      extra_args=[*daemon_args(host), "--rediscover-interval", "1"]).start()
    pods: list[str] = []
    try:
        for doc in yaml.safe_load_all((EXAMPLES / "deviceclasses" / "hard-vnpu.yaml").read_text()):
            ok(cp, "POST", f"{RES}/deviceclasses", doc)

        def published() -> list[dict]:
            return [dev for s in our_slices(cp, cp.node_name) for dev in s["spec"].get("devices") or []]

        wait_until(lambda: [dev["name"] for dev in published()] == ["npu-0-0"], "whole chips only", within=30)
        assert not any(s["spec"].get("sharedCounters") for s in our_slices(cp, cp.node_name))
        assert "the API server drops shared counters" in d.log_text()
        vnpu = create(cp, pods, VNPU_CLASS, VIR05)
        chip = create(cp, pods, CHIP_CLASS)
        assert prepare(Kubelet(d), allocated(cp, chip)) == "npu-0-0"
        assert_pending(cp, vnpu)
        time.sleep(2)  # the daemon asks every --rediscover-interval (1 s): the answer is still no
        assert [dev["name"] for dev in published()] == ["npu-0-0"]

        cp.set_feature_gates(DEFAULT_FEATURE_GATES)
        wait_until(lambda: any(s["spec"].get("sharedCounters") for s in our_slices(cp, cp.node_name))
                   and len(published()) > 1, "vNPU templates published again", within=60)
        assert "the API server keeps shared counters again" in d.log_text()
        assert {dev["name"] for dev in published() if dev.get("consumesCounters")} >= {"npu-0-0"}
    finally:
        for p in pods:
            delete(cp, p)
        d.stop()
        cp.stop()
