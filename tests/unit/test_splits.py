"""One node, both splits (splits.py, docs/splits.md): each chip's soft-share device consumes all of the
counters its template vNPUs consume, the hard-vNPU whole chip of that name is left out, one profile
alone is unchanged; the daemon refuses both against an API server older than 1.36."""

from __future__ import annotations

import pytest

from ascend_dra.cli.discover import discover_profiles
from ascend_dra.cluster.poolview import merged, whole_devices_only
from ascend_dra.cluster.slices import build_slices
from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.model import AllocatedDevice
from ascend_dra.profiles import checks
from ascend_dra.profiles.ascend import splits
from ascend_dra.profiles.ascend.hardvnpu.profile import HardVnpuProfile
from ascend_dra.profiles.ascend.sim import npusmi_sim
from ascend_dra.profiles.ascend.vnpucore.profile import VnpuCoreProfile
from ascend_dra.state.guard import CounterIndex, GuardError, HoldIndex, check_counters
from tests.bothsplits import BothSplitsHost

pytestmark = pytest.mark.anyio


@pytest.fixture
def host(tmp_path, monkeypatch):
    node = BothSplitsHost(tmp_path)
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(node.sim.sim_dir))
    return node


async def discover(node: BothSplitsHost, *profiles) -> dict:
    inventories, errors = await discover_profiles(profiles, node.ctx())
    assert errors == {}
    return inventories


def names(inventory) -> list[str]:
    return [d.name for d in inventory.devices]


async def test_each_chip_publishes_its_soft_share_consuming_every_counter_its_vnpus_consume(host):
    found = await discover(host, VnpuCoreProfile(), HardVnpuProfile())
    soft, hard = found[splits.SOFT], found[splits.HARD]
    assert names(soft) == ["npu-0-0", "npu-1-0"]
    assert not {"npu-0-0", "npu-1-0"} & set(names(hard))  # the whole chips of hard-vNPU are left out
    assert {d.attributes["type"] for d in hard.devices} == {"vnpu"}
    sets = {s.name: s.counters for s in hard.counter_sets}
    for device in soft.devices:
        assert device.allow_multiple_allocations
        [use] = device.consumes_counters
        assert use.counter_set == f"{device.name}-counters"
        assert use.counters == sets[use.counter_set]  # all of the chip: a lock on its mode
    pool = merged(found)
    assert checks.inventory_problems(pool) == []
    slices = build_slices(pool, driver_name="ascend.project-hami.io", node_name="node-1")
    published = [d["name"] for s in slices for d in s["spec"].get("devices", ())]
    assert sorted(published) == sorted(names(soft) + names(hard))


async def test_one_split_alone_publishes_what_it_did(host):
    alone = await discover(host, HardVnpuProfile())
    both = await discover(host, VnpuCoreProfile(), HardVnpuProfile())
    assert set(names(alone[splits.HARD])) - set(names(both[splits.HARD])) == {"npu-0-0", "npu-1-0"}
    soft = await discover(host, VnpuCoreProfile())
    assert all(not d.consumes_counters for d in soft[splits.SOFT].devices)
    assert splits.combine(soft) == soft and splits.combine(alone) == alone


async def test_a_chip_only_hard_vnpu_offers_keeps_its_whole_chip(host):
    host.lab.set_device_share(5, 0, False)  # logic ID 1: no soft share
    found = await discover(host, VnpuCoreProfile(), HardVnpuProfile())
    assert names(found[splits.SOFT]) == ["npu-0-0"]
    assert "npu-1-0" in names(found[splits.HARD]) and "npu-0-0" not in names(found[splits.HARD])
    assert checks.inventory_problems(merged(found)) == []


async def test_without_counters_on_the_api_server_each_chip_is_offered_soft_only(host):
    """DRAPartitionableDevices off: the fallback keeps the devices that take whole counter sets,
    the soft shares, and no vNPU; never two devices of one chip."""
    fallback = whole_devices_only(merged(await discover(host, VnpuCoreProfile(), HardVnpuProfile())))
    assert names(fallback) == ["npu-0-0", "npu-1-0"]
    assert all(d.allow_multiple_allocations and not d.consumes_counters for d in fallback.devices)


async def test_the_guard_keeps_the_modes_apart_when_a_scheduler_does_not(host):
    """A share held by a prepared claim refuses a vNPU of its chip (an older kube-scheduler during an
    upgrade); a second share fits; a vNPU held refuses the chip's first share; another chip is free."""
    found = await discover(host, VnpuCoreProfile(), HardVnpuProfile())
    index = CounterIndex([c for i in found.values() for c in i.counter_sets],
                         [d for i in found.values() for d in i.devices])

    def held(device: str, share: str | None) -> HoldIndex:
        taken = HoldIndex()
        taken.update("a", ckpt.ClaimRecord("a", "default", "a", ckpt.PREPARE_COMPLETED, "boot", (
            ckpt.DeviceRecord("npu", "node-1", device, share_id=share),)))
        return taken

    def want(device: str, share: str | None = None) -> list[AllocatedDevice]:
        return [AllocatedDevice("npu", "ascend.project-hami.io", "node-1", device, share_id=share)]

    vnpu = "vnpu-0-0-vir01-0"
    with pytest.raises(GuardError, match=rf"device {vnpu} needs .* of counter set npu-0-0-counters, which has 0 "):
        check_counters("ResourceClaim default/b", want(vnpu), index, held("npu-0-0", "s1"))
    check_counters("ResourceClaim default/b", want("npu-0-0", "s2"), index, held("npu-0-0", "s1"))
    with pytest.raises(GuardError, match=r"device npu-0-0 needs .* \(held: vnpu-0-0-vir01-0 by"):
        check_counters("ResourceClaim default/b", want("npu-0-0", "s1"), index, held(vnpu, None))
    check_counters("ResourceClaim default/b", want("vnpu-1-0-vir01-0"), index, held("npu-0-0", "s1"))


@pytest.mark.parametrize(("version", "refused"), [
    ({"gitVersion": "v1.35.4"}, True), ({"gitVersion": "v1.34.10"}, True), ({}, True), (None, True),
    ({"gitVersion": "v1.36.3"}, False), ({"gitVersion": "v1.37.2"}, False), ({"gitVersion": "v1.38.0-alpha.1"}, False),
    ({"gitVersion": "v2.0.0"}, False)])
def test_both_splits_need_an_api_server_of_1_36_or_later(version, refused):
    line = splits.refusal(version)
    assert (line is not None) == refused
    if refused:
        assert "\n" not in line
        assert line.startswith("--profiles HAMivNPUCore,hard-vNPU: one node with both splits needs kube-scheduler "
                               "1.36 or later (the API server is ")
        assert line.endswith("load one of them, --profiles HAMivNPUCore or --profiles hard-vNPU")


def test_both_loaded_needs_both_names():
    assert splits.both_loaded({"HAMivNPUCore": 1, "hard-vNPU": 2})
    assert not splits.both_loaded(["HAMivNPUCore", "npu-310P"])
