"""Every refusal that states a quantity states all of them in one unit, the one the request was
written in (issue 40: ``8Gi requested but only 5390729216 of 21525Mi is free`` mixed three).

The refusals: the double-allocation guard's capacity, request-policy and shared-counter checks
(guard.py, reached from planning.py and the replay), HAMivNPUCore's quota (vnpu_core_quota.py) and
the webhook's HAMi ``-memory`` bounds (webhook/hami.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.hami.convert import ConversionError, convert_pod
from ascend_dra.model import (
    AllocatedDevice,
    Capacity,
    CapacityRequestPolicy,
    CounterConsumption,
    CounterSet,
    Device,
    in_unit,
    unit_of,
)
from ascend_dra.profiles.ascend.vnpucore.profile import capacities
from ascend_dra.profiles.ascend.vnpucore.quota import share_of
from ascend_dra.state.guard import CounterIndex, GuardError, HoldIndex, check_counters, check_free

MIB = 2**20


@pytest.mark.parametrize(("amount", "unit", "text"), [
    (5390729216, "Gi", "~5.020Gi"),
    ("21525Mi", "Gi", "~21.02Gi"),
    ("21525Mi", "Mi", "21525Mi"),
    (5390729216 + MIB // 16, "Mi", "5141.0625Mi"),
    ("1Mi", "Ki", "1024Ki"),
    ("1Mi", "M", "1.048576M"),
    ("1Mi", "Gi", "~0.0009765Gi"),
    (MIB, "", "1048576"),
    (Decimal("0.5"), "", "0.5"),
    ("1", "m", "1000m"),
    (0, "Gi", "0Gi"),
], ids=["bytes-in-Gi", "Mi-in-Gi", "Mi-in-Mi", "bytes-in-Mi", "Mi-in-Ki", "Mi-in-M", "Mi-in-Gi-small",
        "bytes-plain", "fraction-plain", "one-in-milli", "zero"])
def test_in_unit_is_exact_or_marked_and_never_rounded_up(amount, unit, text):
    assert in_unit(amount, unit) == text


@pytest.mark.parametrize(("quantity", "unit"), [("8Gi", "Gi"), ("500m", "m"), ("8589934592", ""), ("8e9", ""),
                                                ("4k", "k"), (7, "")])
def test_unit_of_is_the_suffix_as_written(quantity, unit):
    assert unit_of(quantity) == unit


def test_in_unit_refuses_what_is_no_quantity_suffix():
    with pytest.raises(ValueError, match="'GB' is not a Quantity suffix"):
        in_unit(1, "GB")


# -- the guard: capacity ---------------------------------------------------------------------------


def chip_device() -> Device:
    """A HAMivNPUCore chip of 21525 MiB, as the profile publishes it."""
    return Device("npu-0-0", capacities=capacities(21525), allow_multiple_allocations=True)


def holding(memory: str) -> HoldIndex:
    taken = HoldIndex()
    taken.update("a", ckpt.ClaimRecord("a", "default", "a", ckpt.PREPARE_COMPLETED, "boot", (
        ckpt.DeviceRecord("npu", "node-1", "npu-0-0", share_id="s-a",
                          consumed_capacity={"memory": memory, "cores": "1", "containers": "1"}),)))
    return taken


def share(memory: str, cores: str = "1") -> AllocatedDevice:
    return AllocatedDevice("npu", "d", "node-1", "npu-0-0", share_id="s-b",
                           consumed_capacity={"memory": memory, "cores": cores, "containers": "1"})


@pytest.mark.parametrize(("asked", "free_total"), [
    ("8Gi", "~5.020Gi of ~21.02Gi"),  # the message: "only 5390729216 of 21525Mi" before
    ("8192Mi", "5141Mi of 21525Mi"),
    (str(8 * 2**30), f"5390729216 of {21525 * MIB}"),
    ("8.388608G", "~5.390G of ~22.57G"),  # 8Gi, in decimal units
], ids=["Gi", "Mi", "bytes", "decimal-G"])
def test_a_capacity_refusal_states_free_and_total_in_the_requests_unit(asked, free_total):
    taken = holding(f"{21525 * MIB - 5390729216}")  # leaves 5390729216 bytes free
    with pytest.raises(GuardError) as caught:
        check_free("ResourceClaim default/b", share(asked), chip_device(), taken, [])
    assert str(caught.value) == (f"ResourceClaim default/b: device npu-0-0 capacity memory: {asked} requested "
                                 f"but only {free_total} is free")


@pytest.mark.parametrize(("asked", "problem"), [
    ("22Gi", "is outside the device's valid range (from ~0.0009765Gi to ~21.02Gi in steps of ~0.0009765Gi)"),
    ("1536Ki", "is outside the device's valid range (from 1024Ki to 22041600Ki in steps of 1024Ki)"),
    ("0.5Mi", "is outside the device's valid range (from 1Mi to 21525Mi in steps of 1Mi)"),
], ids=["Gi", "Ki", "Mi"])
def test_a_request_policy_refusal_states_the_range_in_the_requests_unit(asked, problem):
    with pytest.raises(GuardError) as caught:
        check_free("ResourceClaim default/b", share(asked), chip_device(), HoldIndex(), [])
    assert str(caught.value) == f"ResourceClaim default/b: consumedCapacity memory {asked} of device npu-0-0 {problem}"


def test_a_valid_values_refusal_states_them_in_the_requests_unit():
    device = Device("x", capacities={"memory": Capacity("4Gi", CapacityRequestPolicy(
        default="1Gi", valid_values=("1Gi", "2Gi")))}, allow_multiple_allocations=True)
    result = AllocatedDevice("npu", "d", "node-1", "x", share_id="s", consumed_capacity={"memory": "1536Mi"})
    with pytest.raises(GuardError) as caught:
        check_free("c", result, device, HoldIndex(), [])
    assert str(caught.value) == ("c: consumedCapacity memory 1536Mi of device x is not one of the device's valid "
                                 "values (1024Mi, 2048Mi)")


# -- the guard: shared counters --------------------------------------------------------------------


def test_a_counter_refusal_states_every_amount_in_the_unit_the_devices_consume_in():
    """Before: ``needs memory 12Gi of counter set chip-0, which has 8Gi of 21525Mi free`` (canonical
    forms, each its own unit)."""
    chip = CounterSet("chip-0", {"memory": "21525Mi"})
    devices = (Device("big", consumes_counters=(CounterConsumption("chip-0", {"memory": "12288Mi"}),)),
               Device("odd", consumes_counters=(CounterConsumption("chip-0", {"memory": "13237Mi"}),)))
    taken = HoldIndex()
    taken.update("a", ckpt.ClaimRecord("a", "default", "a", ckpt.PREPARE_COMPLETED, "boot",
                                       (ckpt.DeviceRecord("npu", "node-1", "odd"),)))
    with pytest.raises(GuardError) as caught:
        check_counters("c", [AllocatedDevice("npu", "d", "node-1", "big")], CounterIndex((chip,), devices), taken)
    assert str(caught.value).startswith("c: device big needs memory 12288Mi of counter set chip-0, which has "
                                        "8288Mi of 21525Mi free (held: odd by ")


def test_a_counter_set_alone_gives_the_unit_when_no_device_consumes_the_counter_with_one():
    index = CounterIndex((CounterSet("s", {"memory": "16Gi"}),), ())
    assert index.units["s"] == {"memory": "Gi"}


# -- HAMivNPUCore's quota and the webhook's HAMi memory --------------------------------------------


@pytest.mark.parametrize(("memory", "below"), [("512Ki", "1024Ki"), ("1000", "1048576"), ("0.5Mi", "1Mi"),
                                               ("1M", "1.048576M")])
def test_a_quota_under_one_mib_is_refused_in_the_allocations_unit(memory, below):
    device = AllocatedDevice("npu", "d", "node-1", "npu-0-0", share_id="s",
                             consumed_capacity={"memory": memory, "cores": "10", "containers": "1"})
    with pytest.raises(ValueError) as caught:
        share_of(device)
    assert str(caught.value) == (f"device npu-0-0: consumedCapacity memory {memory} is below {below}; "
                                 "NPU_MEM_QUOTA=0 would mean unlimited to hami-vnpu-core")


def hami_memory_refusal(memory: str) -> str:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {
        "huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": memory}}}]}}
    with pytest.raises(ConversionError) as caught:
        convert_pod(pod, "ns")
    [(_, reason)] = caught.value.problems
    return reason


RULE = "a plain number is MiB, a value with a byte unit (Ki, Mi, Gi, M, G, ...) is bytes"


@pytest.mark.parametrize(("memory", "reason"), [
    ("1023Ki", f"'1023Ki' is less than 1024Ki, the smallest share: {RULE}"),  # before: "is 1047552 bytes, ... 1 MiB"
    ("1M", f"'1M' is less than 1.048576M, the smallest share: {RULE}"),
    ("2147483648", f"'2147483648' is more than 2147483647 MiB, the most HAMi accepts: {RULE}"),
    ("3000000k", f"'3000000k' is more than 2147483.647k MiB, the most HAMi accepts: {RULE}"),
    ("2Pi", f"'2Pi' is more than ~1.999Pi, the most HAMi accepts: {RULE}"),  # before: "more than 2147483647 MiB"
], ids=["Ki-under", "M-under", "plain-over", "k-over", "Pi-over"])
def test_a_hami_memory_refusal_states_its_bound_in_the_values_unit(memory, reason):
    assert hami_memory_refusal(memory) == reason
