"""What the slices show (poolview.py): unhealthy devices per --unhealthy-devices, and the fallbacks
for an API server that drops taints or counters."""

from __future__ import annotations

import pytest

from ascend_dra.cluster.poolview import PoolView, whole_devices_only
from ascend_dra.model import CounterConsumption, CounterSet, Device, Inventory

CHIP_SET = CounterSet("npu-0-0-counters", {"aicore": "20", "memory": "32Gi"})
CHIP = Device("npu-0-0", consumes_counters=(CounterConsumption("npu-0-0-counters", {"aicore": "20",
                                                                                   "memory": "32768Mi"}),))
VNPU = Device("vnpu-0-0-vir05-0", consumes_counters=(CounterConsumption("npu-0-0-counters", {"aicore": "5",
                                                                                           "memory": "8Gi"}),))
PLAIN = Device("npu-1-0")


def names(inventory: Inventory) -> list[str]:
    return [d.name for d in inventory.devices]


def test_whole_devices_only_keeps_the_chips_and_the_devices_without_counters():
    pool = Inventory(devices=(CHIP, VNPU, PLAIN), counter_sets=(CHIP_SET,))
    whole = whole_devices_only(pool)
    assert names(whole) == ["npu-0-0", "npu-1-0"]  # 32768Mi is all of 32Gi
    assert whole.counter_sets == () and all(d.consumes_counters == () for d in whole.devices)


@pytest.mark.parametrize("consumption", [
    CounterConsumption("npu-0-0-counters", {"aicore": "20"}),  # not every counter of the set
    CounterConsumption("other-set", {"aicore": "20", "memory": "32Gi"}),  # a set the pool lacks
    CounterConsumption("npu-0-0-counters", {"aicore": "20", "memory": "lots"}),  # not a quantity
], ids=["part of the set", "unknown set", "unparsable"])
def test_a_device_that_does_not_provably_take_whole_sets_is_left_out(consumption):
    odd = Device("odd", consumes_counters=(consumption,))
    assert names(whole_devices_only(Inventory(devices=(odd, PLAIN), counter_sets=(CHIP_SET,)))) == ["npu-1-0"]


def test_taint_is_the_default_and_turns_to_withdraw_once_taints_are_dropped():
    view = PoolView("d.example.com", "taint")
    inventories = {"p": Inventory(devices=(CHIP, VNPU, PLAIN), counter_sets=(CHIP_SET,))}
    assert view.mark_unhealthy({"npu-0-0": False, "vnpu-0-0-vir05-0": None, "npu-1-0": True})
    pool = view.desired(inventories)
    assert [(d.name, [t.key for t in d.taints]) for d in pool.devices] == [
        ("npu-0-0", ["d.example.com/unhealthy"]), ("vnpu-0-0-vir05-0", []), ("npu-1-0", [])]  # unknown: as is
    assert not view.mark_unhealthy({"npu-0-0": False, "npu-1-0": True})  # nothing new
    assert view.on_dropped(["DRADeviceTaints"])
    assert names(view.desired(inventories)) == ["vnpu-0-0-vir05-0", "npu-1-0"]
    assert all(not d.taints for d in view.desired(inventories).devices)
    assert not view.on_dropped(["DRADeviceTaints"])  # once
    assert view.mark_unhealthy({"npu-0-0": True, "npu-1-0": True})  # recovered: back
    assert names(view.desired(inventories)) == ["npu-0-0", "vnpu-0-0-vir05-0", "npu-1-0"]


def test_counters_and_taints_dropped_together_leave_healthy_whole_chips():
    view = PoolView("d.example.com", "taint")
    inventories = {"p": Inventory(devices=(CHIP, VNPU, PLAIN), counter_sets=(CHIP_SET,))}
    view.mark_unhealthy({"npu-1-0": False})
    assert view.on_dropped(["DRAPartitionableDevices", "DRADeviceTaints"])
    pool = view.desired(inventories)
    assert names(pool) == ["npu-0-0"] and pool.counter_sets == ()


def test_a_gate_kept_again_ends_its_fallback():
    """The fallbacks lasted until the daemon restarted; an operator turns a gate on by restarting
    kube-apiserver, not our DaemonSet (gateprobe.py asks, on_kept ends the fallback)."""
    view = PoolView("d.example.com", "taint")
    inventories = {"p": Inventory(devices=(CHIP, VNPU, PLAIN), counter_sets=(CHIP_SET,))}
    view.mark_unhealthy({"npu-1-0": False})
    assert view.on_dropped(["DRAPartitionableDevices", "DRADeviceTaints"])
    assert view.dropped_gates == ["DRADeviceTaints", "DRAPartitionableDevices"]
    # What is asked about: every device, the withdrawn one too (with every device withdrawn, none
    # was left to carry the probe's taint, and the taints' fallback never ended).
    assert names(view.full(inventories)) == ["npu-0-0", "vnpu-0-0-vir05-0", "npu-1-0"]
    assert not view.on_kept([])
    assert view.on_kept(["DRAPartitionableDevices"])
    pool = view.desired(inventories)
    assert names(pool) == ["npu-0-0", "vnpu-0-0-vir05-0"] and pool.counter_sets == (CHIP_SET,)
    assert view.on_kept(["DRADeviceTaints"])  # the withdrawn device comes back, tainted
    assert [(d.name, [t.key for t in d.taints]) for d in view.desired(inventories).devices] == [
        ("npu-0-0", []), ("vnpu-0-0-vir05-0", []), ("npu-1-0", ["d.example.com/unhealthy"])]
    assert view.dropped_gates == [] and not view.on_kept(["DRADeviceTaints", "DRAPartitionableDevices"])


def test_a_fallback_ends_after_answers_in_a_row_and_a_relapse_asks_for_twice_as_many():
    """One dry-run answer ended a fallback: behind one address, API servers restarted one by one to
    turn a gate on answer differently, and each flap published vNPU templates a server without the
    gate stored without their counters."""
    from ascend_dra.cluster.poolview import GATE_KEPT_ANSWERS, GATE_KEPT_ANSWERS_MAX

    gate = "DRAPartitionableDevices"
    view = PoolView("d.example.com", "taint")
    view.on_dropped([gate])

    def answers(*kept: bool) -> list[bool]:
        return [view.on_probe([gate], [gate] if k else []) for k in kept]

    assert answers(*[True] * (GATE_KEPT_ANSWERS - 1), False, *[True] * (GATE_KEPT_ANSWERS - 1)) == \
        [False] * (2 * GATE_KEPT_ANSWERS - 1) and view.dropped_gates == [gate]  # a "dropped" starts over
    assert answers(True) == [True] and view.dropped_gates == []
    assert view.on_dropped([gate])  # a relapse: the next write was stored without the counters
    assert answers(*[True] * (2 * GATE_KEPT_ANSWERS - 1)) == [False] * (2 * GATE_KEPT_ANSWERS - 1)
    assert answers(True) == [True] and view.dropped_gates == []
    for _ in range(10):  # relapses never ask for more than the cap
        view.on_dropped([gate])
        while not view.on_probe([gate], [gate]):
            pass
    assert view._kept_needed[gate] == GATE_KEPT_ANSWERS_MAX


@pytest.mark.parametrize(("mode", "expected"), [("withdraw", ["npu-1-0"]), ("publish", ["npu-0-0", "npu-1-0"])])
def test_withdraw_and_publish_never_taint(mode, expected):
    view = PoolView("d.example.com", mode)
    view.mark_unhealthy({"npu-0-0": False})
    pool = view.desired({"p": Inventory(devices=(Device("npu-0-0"), PLAIN))})
    assert names(pool) == expected and all(not d.taints for d in pool.devices)
    assert not view.on_dropped(["DRADeviceTaints"])  # nothing was tainted


def test_an_unhealthy_device_whose_health_turns_unknown_stays_out_until_healthy():
    """npu-smi failing or hanging makes every device unknown; a broken chip is the likeliest to drop
    out of its table. Unknown released the taint (or the withdrawal) and the chip went back."""
    for mode in ("taint", "withdraw"):
        view = PoolView("d.example.com", mode)
        inventories = {"p": Inventory(devices=(Device("npu-0-0"), PLAIN))}
        view.mark_unhealthy({"npu-0-0": False, "npu-1-0": True})
        marked = view.desired(inventories)
        assert not view.mark_unhealthy({"npu-0-0": None, "npu-1-0": None})
        assert view.desired(inventories) == marked
        assert view.mark_unhealthy({"npu-0-0": True, "npu-1-0": None})
        assert names(view.desired(inventories)) == ["npu-0-0", "npu-1-0"]
        assert all(not d.taints for d in view.desired(inventories).devices)
        # A device that was never unhealthy and turns unknown is published as it is.
        assert not view.mark_unhealthy({"npu-0-0": None, "npu-1-0": None})


@pytest.mark.parametrize("mode", ["taint", "withdraw", "publish"])
def test_unhealthy_names_the_devices_held_unhealthy_unknown_health_included(mode):
    """What the Prepare's WARNING names: the raw health feed says None for a chip that stopped
    answering after it went unhealthy, and such a chip was prepared with a plain INFO line."""
    view = PoolView("d.example.com", mode)
    view.mark_unhealthy({"npu-0-0": False, "npu-1-0": True, "npu-2-0": None})
    assert view.unhealthy(["npu-0-0", "npu-1-0", "npu-2-0", "npu-9-0"]) == ["npu-0-0"]
    view.mark_unhealthy({"npu-0-0": None, "npu-1-0": True, "npu-2-0": None})
    assert view.unhealthy(["npu-0-0", "npu-1-0"]) == ["npu-0-0"]
    view.mark_unhealthy({"npu-0-0": True, "npu-1-0": True, "npu-2-0": None})
    assert view.unhealthy(["npu-0-0", "npu-1-0"]) == []
