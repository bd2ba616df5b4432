"""guard.check_counters: devices that consume one shared counter set never take more of it together
than it has, whatever the scheduler allocated (docs/architecture.md#durable-state)."""

from __future__ import annotations

import pytest

from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.model import AllocatedDevice, CounterConsumption, CounterSet, Device
from ascend_dra.state.guard import CounterIndex, GuardError, HoldIndex, check_counters

CHIP = CounterSet("chip-0", {"aicore": "8", "memory": "24Gi"})
DEVICES = (
    Device("whole", consumes_counters=(CounterConsumption("chip-0", {"aicore": "8", "memory": "24Gi"}),)),
    Device("vir04-a", consumes_counters=(CounterConsumption("chip-0", {"aicore": "4", "memory": "12Gi"}),)),
    Device("vir04-b", consumes_counters=(CounterConsumption("chip-0", {"aicore": "4", "memory": "12Gi"}),)),
    Device("vir01", consumes_counters=(CounterConsumption("chip-0", {"aicore": "1", "memory": "3Gi"}),)),
    Device("shared", allow_multiple_allocations=True,
           consumes_counters=(CounterConsumption("chip-0", {"aicore": "4"}),)),
    Device("plain"),
)
INDEX = CounterIndex((CHIP,), DEVICES)


def result(device: str, admin: bool = False, share: str | None = None) -> AllocatedDevice:
    return AllocatedDevice("npu", "d", "node-1", device, share_id=share, admin_access=admin)


def held(*claims: tuple[str, list[str]], admin: bool = False) -> HoldIndex:
    taken = HoldIndex()
    for uid, devices in claims:
        taken.update(uid, ckpt.ClaimRecord(uid, "default", uid, ckpt.PREPARE_COMPLETED, "boot", tuple(
            ckpt.DeviceRecord("npu", "node-1", d, admin_access=admin) for d in devices)))
    return taken


def test_a_partition_is_refused_while_another_claim_holds_the_whole_device_naming_it():
    with pytest.raises(GuardError) as caught:
        check_counters("ResourceClaim default/b", [result("vir01")], INDEX, held(("a", ["whole"])))
    assert str(caught.value).startswith(
        "ResourceClaim default/b: device vir01 needs aicore 1 of counter set chip-0, which has 0 of 8 free "
        "(held: whole by ResourceClaim default/a (uid a)).")


def test_the_whole_device_is_refused_while_partitions_hold_part_of_it():
    with pytest.raises(GuardError, match=r"device whole needs aicore 8 .* which has 4 of 8 free \(held: vir04-a by"):
        check_counters("ResourceClaim default/b", [result("whole")], INDEX, held(("a", ["vir04-a"])))


def test_partitions_that_fit_pass_and_one_claims_devices_count_together():
    check_counters("c", [result("vir04-b")], INDEX, held(("a", ["vir04-a"])))
    check_counters("c", [result("vir04-a"), result("vir04-b")], INDEX, HoldIndex())
    with pytest.raises(GuardError, match=r"devices vir04-a, vir04-b, vir01 need aicore 9 .* 8 of 8 free$"):
        check_counters("c", [result("vir04-a"), result("vir04-b"), result("vir01")], INDEX, HoldIndex())


def test_admin_access_consumes_nothing_and_holds_nothing():
    check_counters("c", [result("vir01", admin=True)], INDEX, held(("a", ["whole"])))
    check_counters("c", [result("whole")], INDEX, held(("a", ["whole"]), admin=True))


def test_a_share_of_a_device_another_claim_holds_adds_nothing_and_the_replayed_claim_is_left_out():
    check_counters("c", [result("shared", share="s2"), result("vir04-a")], INDEX, held(("a", ["shared"])))
    check_counters("c", [result("whole")], INDEX, held(("c", ["whole"])), exclude="c")


def test_devices_without_counters_are_not_looked_at():
    check_counters("c", [result("plain")], INDEX, held(("a", ["whole"])))
