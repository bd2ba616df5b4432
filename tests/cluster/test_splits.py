"""One node, both splits, against the real kube-scheduler (docs/splits.md): a node with
``--profiles HAMivNPUCore,hard-vNPU`` publishes each chip as a soft-share device that consumes all of
the chip's counters, beside the chip's template vNPUs. The scheduler itself then gives out one mode
per chip: a soft pod lands on a chip, a vNPU pod goes to the other; with every chip taken, a pod of
the other mode waits; once the last share of a chip is released, a vNPU is allocated on it and made
at Prepare. Before 1.36 the scheduler does not count a shared device's counters (splits.py), and the
daemon refuses to start with one line naming the flags.

The node is Lab 18's two 310P3 chips (physical IDs 0 and 2), lab node and npu-smi simulator in one
(tests/bothsplits.py). The test plays the kubelet (Prepare/Unprepare over the sockets).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.bothsplits import PROFILES, BothSplitsHost
from tests.cluster.test_hard_vnpu import allocated, assert_pending, delete, prepare, release
from tests.cluster.test_publish import RES, delete_our_slices, ok, our_slices, wait_until
from tests.cluster.versions import at_least
from tests.hardvnpu import vnpu_keys
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SOFT_CLASS = "hami-vnpu-core.project-hami.io"
VNPU_CLASS = "ascend310p-vnpu.ascend.project-hami.io"


def start(cp, root: Path, host: BothSplitsHost, *, wait: bool = True, templates: str | None = None) -> DaemonProcess:
    extra = ["--profile-option", f"hard-vNPU.templates={templates}"] if templates else []
    return DaemonProcess(root, node=cp.node_name, kubeconfig=cp.kubeconfig, profiles=PROFILES, env=host.env,
                         extra_args=[*host.args(), *extra]).start(wait=wait)


@pytest.fixture(params=[None, "vir04_3c"], ids=["all-templates", "vir04_3c"])
def node(cp, short_tmp, k8s_version, request):
    """The daemon with both splits on the two-chip node, the two DeviceClasses applied; with every
    template (every counter published), or only ``vir04_3c``, whose two instances a chip cannot
    exceed any counter with: its counter set is ``aicore`` alone (templates.binding_counters)."""
    if not at_least(k8s_version, "1.36"):
        pytest.skip("test_before_1_36_the_daemon_refuses_both_splits covers this version")
    host = BothSplitsHost(short_tmp / "host")
    d = start(cp, short_tmp / "node", host, templates=request.param)
    for path in ("hami-vnpu-core.yaml", "hard-vnpu.yaml"):
        for doc in yaml.safe_load_all((EXAMPLES / "deviceclasses" / path).read_text()):
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


def create(cp, pods: list[str], class_name: str, physical_id: int | None = None) -> str:
    """A pod with its own claim for one device of ``class_name``, on the chip ``physical_id`` if given."""
    name = f"sp-{uuid.uuid4().hex[:8]}"
    request: dict[str, Any] = {"name": "npu", "exactly": {"deviceClassName": class_name}}
    if physical_id is not None:
        request["exactly"]["selectors"] = [
            {"cel": {"expression": f'device.attributes["{DRIVER}"].physicalID == {physical_id}'}}]
    ok(cp, "POST", f"{RES}/namespaces/default/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}}})
    ok(cp, "POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"resourceClaims": [{"name": "npu", "resourceClaimName": name}],
                 "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "npu"}]}}]}})
    pods.append(name)
    return name


def chip_of(cp, device: str) -> int:
    """The physical ID of a published device of our pool."""
    for s in our_slices(cp, cp.node_name):
        for d in s["spec"].get("devices", ()):
            if d["name"] == device:
                return d["attributes"]["physicalID"]["int"]
    raise AssertionError(f"{device} is not published")


def test_the_scheduler_gives_each_chip_one_mode_and_a_released_chip_the_other(cp, node):
    d, host, k, pods = node
    slices = wait_until(lambda: (s := our_slices(cp, cp.node_name)) and any("sharedCounters" in x["spec"] for x in s)
                        and s, "slices published")
    soft = {x["name"]: x for s in slices for x in s["spec"].get("devices", ()) if x.get("allowMultipleAllocations")}
    assert sorted(soft) == ["npu-0-0", "npu-1-0"]
    assert [c["counterSet"] for c in soft["npu-0-0"]["consumesCounters"]] == ["npu-0-0-counters"]
    counters = next(c["counters"] for s in slices for c in s["spec"].get("sharedCounters", ())
                    if c["name"] == "npu-0-0-counters")
    assert soft["npu-0-0"]["consumesCounters"][0]["counters"] == counters  # all of the set
    assert (sorted(counters) == ["aicore"]) == (d.extra_args[-1] == "hard-vNPU.templates=vir04_3c")

    # A soft pod on chip 0; a vNPU pod, free to go anywhere, goes to chip 2.
    s1 = create(cp, pods, SOFT_CLASS, physical_id=0)
    c1 = allocated(cp, s1)
    assert prepare(k, c1) == "npu-0-0"
    v1 = create(cp, pods, VNPU_CLASS)
    vnpu = prepare(k, allocated(cp, v1))
    assert vnpu.startswith("vnpu-1-0-") and chip_of(cp, vnpu) == 2
    assert {key[0] for key in vnpu_keys(host.sim.vnpus())} == {5}  # NPU ID 5 is physical ID 2
    # Another soft pod, free to go anywhere, shares chip 0: chip 2 is cut.
    s2 = create(cp, pods, SOFT_CLASS)
    c2 = allocated(cp, s2)
    assert prepare(k, c2) == "npu-0-0"

    # Every chip is taken by one mode: a vNPU of chip 0 and a share of chip 2 wait.
    v2 = create(cp, pods, VNPU_CLASS, physical_id=0)
    s3 = create(cp, pods, SOFT_CLASS, physical_id=2)
    assert_pending(cp, v2)
    assert_pending(cp, s3)

    # One share of chip 0 goes: the other still holds the chip's mode.
    release(cp, k, s1, c1)
    assert_pending(cp, v2)
    # The last share goes: the vNPU is allocated on chip 0 and made there; chip 2 is still cut.
    release(cp, k, s2, c2)
    made = prepare(k, allocated(cp, v2, within=120))
    assert made.startswith("vnpu-0-0-")
    assert {key[0] for key in vnpu_keys(host.sim.vnpus())} == {4, 5}
    assert_pending(cp, s3)


def test_before_1_36_the_daemon_refuses_both_splits(cp, short_tmp, k8s_version):
    if at_least(k8s_version, "1.36"):
        pytest.skip("1.36 and later keep the splits apart: the other test covers them")
    host = BothSplitsHost(short_tmp / "host")
    d = start(cp, short_tmp / "node", host, wait=False)
    assert d.wait_exit(60) == 1
    refusals = [line for line in d.log_text().splitlines() if "refusing to start" in line]
    assert len(refusals) == 1, d.log_text()
    assert "--profiles HAMivNPUCore,hard-vNPU: one node with both splits needs kube-scheduler 1.36 or later " \
           f"(the API server is v{k8s_version}." in refusals[0]
    assert refusals[0].endswith("load one of them, --profiles HAMivNPUCore or --profiles hard-vNPU")
    assert our_slices(cp, cp.node_name) == []


@pytest.mark.anyio
async def test_the_1_35_scheduler_gives_a_soft_shared_chip_a_vnpu(cp, short_tmp, k8s_version, monkeypatch):
    """Why 1.35 is refused: the same pool, published by hand, is accepted by its API server, and its
    scheduler gives a vNPU of chip 0 while a share of chip 0 is allocated (the v1.35 allocator does not
    count a shared allocation's counters in a later cycle)."""
    if at_least(k8s_version, "1.36"):
        pytest.skip("1.36 and later count them: the scheduler test covers them")
    from ascend_dra.cli.discover import discover_profiles
    from ascend_dra.cluster.poolview import merged
    from ascend_dra.cluster.slices import build_slices
    from ascend_dra.profiles.ascend.hardvnpu.profile import HardVnpuProfile
    from ascend_dra.profiles.ascend.sim import npusmi_sim
    from ascend_dra.profiles.ascend.vnpucore.profile import VnpuCoreProfile

    host = BothSplitsHost(short_tmp / "host")
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim.sim_dir))
    inventories, errors = await discover_profiles((VnpuCoreProfile(), HardVnpuProfile()), host.ctx(cp.node_name))
    assert errors == {}
    for obj in build_slices(merged(inventories), driver_name=DRIVER, node_name=cp.node_name):
        ok(cp, "POST", f"{RES}/resourceslices", obj)
    for path in ("hami-vnpu-core.yaml", "hard-vnpu.yaml"):
        for doc in yaml.safe_load_all((EXAMPLES / "deviceclasses" / path).read_text()):
            status, reply = cp.api("POST", f"{RES}/deviceclasses", doc)
            assert status in (201, 409), reply
    pods: list[str] = []
    try:
        share = allocated(cp, create(cp, pods, SOFT_CLASS, physical_id=0))
        assert share["status"]["allocation"]["devices"]["results"][0]["device"] == "npu-0-0"
        vnpu = allocated(cp, create(cp, pods, VNPU_CLASS, physical_id=0))
        assert vnpu["status"]["allocation"]["devices"]["results"][0]["device"].startswith("vnpu-0-0-")
        # The other order holds on 1.35 too: a vNPU is an exclusive device, counted in every cycle.
        allocated(cp, create(cp, pods, VNPU_CLASS, physical_id=2))
        assert_pending(cp, create(cp, pods, SOFT_CLASS, physical_id=2))
    finally:
        for p in pods:
            delete(cp, p)
        delete_our_slices(cp, cp.node_name)
