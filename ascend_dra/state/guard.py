"""The double-allocation guard (docs/architecture.md#durable-state): a device held by a live claim is refused to
another claim
unless the device allows multiple allocations and the consumed capacities fit.

Rules, each a fault seen in other drivers:

- An exclusive hold (an allocation with no share ID) takes the whole device, even if the device is
  re-published later with ``allowMultipleAllocations: true``: a share may not join it, and the
  hold counts as consuming everything.
- An allocation with ``adminAccess`` (KEP-5018) is neither guarded nor a holder: the scheduler
  allocates it on devices that workload claims hold (it does not reserve), so refusing it, or
  letting it block a workload claim, breaks monitoring and debugging pods.
- A record that this release cannot read (another release's shape) holds the devices it names
  exclusively: when in doubt, never double-book.
- Devices that consume one shared counter set (KEP-4815: a whole chip and the vNPUs cut from it)
  never take more of it together than it has (:func:`check_counters`), whatever the scheduler
  allocated: an API server without the DRAPartitionableDevices gate drops the counters, and a
  claim force-deleted before its Unprepare frees them in the scheduler while its devices still run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from decimal import Decimal

import attrs

from ascend_dra.durable.checkpoint import ClaimRecord, DeviceRecord, UnreadableRecord
from ascend_dra.model import AllocatedDevice, Capacity, CounterSet, Device, in_unit, parse_quantity, unit_of

__all__ = ("CounterIndex", "GuardError", "Hold", "HoldIndex", "check_counters", "check_free")


class GuardError(Exception):
    """The device cannot be given to this result; the message names the device and the holder.

    :ivar holders: ``(namespace, name, uid)`` of the prepared claims that hold what was asked for
        (empty when the claim refused itself or the holder's record is unreadable): the state asks
        whether they still exist (a claim deleted without an Unprepare holds its devices until one).
    """

    def __init__(self, message: str, holders: Iterable[tuple[str, str, str]] = ()) -> None:
        super().__init__(message)
        self.holders = tuple(dict.fromkeys(holders))


@attrs.frozen
class Hold:
    """One claim's hold on one device: who holds it (for messages) and what it consumes."""

    who: str  # "ResourceClaim ns/name (uid ...)"
    device: DeviceRecord
    claim: tuple[str, str, str] | None = None  # (namespace, name, uid); None: an unreadable record


class HoldIndex:
    """Every claim's holds by device, kept up to date record by record, so that checking a device
    costs the same with 10 or 10,000 prepared claims.

    Fed by :meth:`update` on every record change (``checkpoint.RecordTable.on_change``).
    """

    def __init__(self) -> None:
        self._by_device: dict[str, dict[str, list[Hold]]] = {}  # device -> claim uid -> holds
        self._devices_of: dict[str, tuple[str, ...]] = {}  # claim uid -> devices it holds

    def update(self, uid: str, record: ClaimRecord | UnreadableRecord | None) -> None:
        """Replace the holds of claim ``uid`` with those of ``record`` (None: the claim is gone)."""
        for name in self._devices_of.pop(uid, ()):
            held = self._by_device.get(name)
            if held is not None:
                held.pop(uid, None)
                if not held:
                    del self._by_device[name]
        if record is None:
            return
        holds: dict[str, list[Hold]] = {}
        if isinstance(record, UnreadableRecord):
            who = f"claim uid {uid} (a checkpoint record this release cannot read)"
            for name in record.device_names:
                holds.setdefault(name, []).append(Hold(who, DeviceRecord(request="", pool="", device=name)))
        else:
            who = f"ResourceClaim {record.namespace}/{record.name} (uid {record.uid})"
            for device in record.devices:
                if not device.admin_access:
                    holds.setdefault(device.device, []).append(
                        Hold(who, device, (record.namespace, record.name, record.uid)))
        for name, held in holds.items():
            self._by_device.setdefault(name, {})[uid] = held
        self._devices_of[uid] = tuple(holds)

    def holds(self, device: str, exclude: str | None = None) -> list[Hold]:
        """The holds on ``device`` of every claim but ``exclude``."""
        return [h for uid, held in self._by_device.get(device, {}).items() if uid != exclude for h in held]


def check_free(ref: str, result: AllocatedDevice, device: Device, taken: HoldIndex,
               same_claim: list[AllocatedDevice], exclude: str | None = None) -> None:
    """Refuse ``result`` if ``device`` cannot take it beside the other claims' holds and the
    earlier results of the same claim (``same_claim``, on the same device).

    :param ref: ``ResourceClaim ns/name``, for messages.
    :param exclude: a claim whose own holds do not count (its replay re-plans it).
    :raises GuardError: held exclusively (by a hold or by this result), allocated twice in a
        claim while exclusive, or consumed capacity (``consumedCapacity``, Quantity strings) over
        the device's capacity; also an unparsable consumed capacity.
    """
    if any(r.share_id == result.share_id and (r.admin_access or result.admin_access) for r in same_claim):
        # Its two CDI devices would have one name. Allocators since kubernetes/kubernetes#131299 never
        # give one claim a device twice, with or without admin access; an older or foreign one might.
        raise GuardError(f"{ref}: device {result.device} is allocated twice in this claim, once with admin access; "
                         "a claim may use a device only once")
    if result.admin_access:
        return
    holds = taken.holds(result.device, exclude)
    same_claim = [r for r in same_claim if not r.admin_access]
    if not device.allow_multiple_allocations or result.share_id is None:
        if holds:
            raise GuardError(f"{ref}: device {result.device} is already prepared for {holds[0].who} and "
                             + ("does not allow multiple allocations" if not device.allow_multiple_allocations
                                else "this allocation has no share ID, so it would take the whole device"),
                             _claims(holds))
        if same_claim:
            raise GuardError(f"{ref}: device {result.device} is allocated twice in this claim and does not "
                             "allow multiple allocations")
        return
    if any(r.share_id == result.share_id for r in same_claim):
        # Its two CDI devices would have one name ("profile ... produced invalid CDI spec" before).
        raise GuardError(f"{ref}: device {result.device} has shareID {result.share_id} twice in this claim "
                         "(status.allocation.devices.results); each share of a device has a shareID of its own")
    exclusive = next((h for h in holds if h.device.holds_exclusively), None)
    if exclusive is not None:
        raise GuardError(f"{ref}: device {result.device} is already prepared for {exclusive.who}, which holds it "
                         "exclusively (it was allocated while the device allowed one allocation only)",
                         _claims([exclusive]))
    for name, asked in result.consumed_capacity.items():
        try:
            amount = parse_quantity(asked)
        except ValueError as exc:
            raise GuardError(f"{ref}: consumedCapacity {name} of device {result.device}: {exc}") from None
        capacity = device.capacities.get(name)  # a capacity the device lacks is not summed below
        problem = None if capacity is None else _outside_policy(amount, capacity, unit_of(asked))
        if problem is not None:
            raise GuardError(f"{ref}: consumedCapacity {name} {asked} of device {result.device} {problem}")
    for name, capacity in device.capacities.items():
        # Holds in the checkpoint and earlier results of this claim were checked already.
        used = sum((parse_quantity(h.device.consumed_capacity[name]) for h in holds
                    if name in h.device.consumed_capacity), start=parse_quantity(0))
        used += sum((parse_quantity(r.consumed_capacity[name]) for r in same_claim if name in r.consumed_capacity),
                    start=parse_quantity(0))
        asked = result.consumed_capacity.get(name, "0")
        total = parse_quantity(capacity.value)
        if used + parse_quantity(asked) > total:
            unit = unit_of(asked)  # every amount in the unit the allocation gave (issue 40)
            raise GuardError(f"{ref}: device {result.device} capacity {name}: {asked} requested but only "
                             f"{in_unit(max(total - used, Decimal(0)), unit)} of {in_unit(total, unit)} is free",
                             _claims(h for h in holds if name in h.device.consumed_capacity))


def _claims(holds: Iterable[Hold]) -> list[tuple[str, str, str]]:
    return [h.claim for h in holds if h.claim is not None]


def _outside_policy(amount: Decimal, capacity: Capacity, unit: str) -> str | None:
    """Why ``amount`` is not a value the scheduler can have booked of ``capacity``, or None; the
    policy's values are written in ``unit``, the suffix the amount was given with.

    The scheduler books a request rounded up to the capacity's request policy (KEP-5075
    ``DeviceCapacity.requestPolicy``): a negative amount, or one outside the policy's valid values
    or range, came from a foreign allocator or a hand-written claim, and summed with the others it
    would let a device be over-booked (-100 then 64 and 64 of 64 containers fit).
    """
    if amount < 0:
        return "is negative"
    policy = capacity.request_policy
    if policy is None:
        return None
    if policy.valid_values:
        if all(parse_quantity(v) != amount for v in policy.valid_values):
            values = ", ".join(in_unit(v, unit) for v in policy.valid_values)
            return f"is not one of the device's valid values ({values})"
        return None
    low = parse_quantity(policy.valid_range_min) if policy.valid_range_min is not None else None
    high = parse_quantity(policy.valid_range_max) if policy.valid_range_max is not None else None
    step = parse_quantity(policy.valid_range_step) if policy.valid_range_step is not None else None
    allowed = " ".join(part for part in (
        f"from {in_unit(low, unit)}" if low is not None else "",
        f"to {in_unit(high, unit)}" if high is not None else "",
        f"in steps of {in_unit(step, unit)}" if step else "") if part)
    if (low is not None and amount < low) or (high is not None and amount > high) or \
            (step and low is not None and (amount - low) % step):
        return f"is outside the device's valid range ({allowed})"
    return None


class CounterIndex:
    """The node's shared counter sets and what each device consumes of them, parsed once per
    inventory (``CounterSet``, ``DeviceCounterConsumption``; gate DRAPartitionableDevices).

    :ivar capacity: counter set -> counter -> amount.
    :ivar consumption: device -> counter set -> counter -> amount, for devices that consume any.
    :ivar consumers: counter set -> the devices that consume it.
    :ivar units: counter set -> counter -> the suffix its amounts are published with (the first
        device's consumption's, else the set's own), the one unit a refusal states them in.
    :raises ValueError: a counter that is not a Quantity (the inventory checks refuse it first).
    """

    def __init__(self, counter_sets: Iterable[CounterSet] = (), devices: Iterable[Device] = ()) -> None:
        counter_sets = list(counter_sets)
        self.capacity = {s.name: {c: parse_quantity(v) for c, v in s.counters.items()} for s in counter_sets}
        self.consumption: dict[str, dict[str, dict[str, Decimal]]] = {}
        self.consumers: dict[str, list[str]] = defaultdict(list)
        self.units: dict[str, dict[str, str]] = defaultdict(dict)
        for device in devices:
            for use in device.consumes_counters:
                amounts = {c: parse_quantity(v) for c, v in use.counters.items()}
                self.consumption.setdefault(device.name, {})[use.counter_set] = amounts
                self.consumers[use.counter_set].append(device.name)
                for counter, value in use.counters.items():
                    self.units[use.counter_set].setdefault(counter, unit_of(value))
        for counter_set in counter_sets:
            for counter, value in counter_set.counters.items():
                self.units[counter_set.name].setdefault(counter, unit_of(value))


def check_counters(ref: str, results: Sequence[AllocatedDevice], index: CounterIndex, taken: HoldIndex,
                   exclude: str | None = None) -> None:
    """Refuse a claim whose devices would take, with the devices other claims hold, more of a shared
    counter set than it has. A held device counts once, however many shares of it are held; a
    device of this claim that another claim holds already (a share) adds nothing; admin access
    consumes nothing (KEP-5018).

    :param exclude: a claim whose own holds do not count (its replay re-plans it).
    :raises GuardError: naming the devices, the counter set and counter, what is free, and who holds the rest.
    """
    mine = list(dict.fromkeys(r.device for r in results if not r.admin_access and r.device in index.consumption))
    for set_name in sorted({s for name in mine for s in index.consumption[name]}):
        capacity = index.capacity.get(set_name)
        if capacity is None:
            continue  # a set the inventory does not define: its checks refuse such a device before publishing
        used: dict[str, Decimal] = defaultdict(Decimal)
        holders = []
        holding: list[Hold] = []
        held = set()
        for name in index.consumers[set_name]:
            holds = taken.holds(name, exclude)
            if holds:
                held.add(name)
                for counter, amount in index.consumption[name][set_name].items():
                    used[counter] += amount
                holders.append(f"{name} by {holds[0].who}")
                holding += holds
        asked: dict[str, Decimal] = defaultdict(Decimal)
        wanting = [n for n in mine if set_name in index.consumption[n] and n not in held]
        for name in wanting:
            for counter, amount in index.consumption[name][set_name].items():
                asked[counter] += amount
        for counter, total in capacity.items():
            if used[counter] + asked[counter] > total:
                free = max(total - used[counter], Decimal(0))
                unit = index.units[set_name].get(counter, "")
                raise GuardError(
                    f"{ref}: {'devices' if len(wanting) > 1 else 'device'} {', '.join(wanting)} "
                    f"{'need' if len(wanting) > 1 else 'needs'} {counter} "
                    f"{in_unit(asked[counter], unit)} of counter set {set_name}, which has "
                    f"{in_unit(free, unit)} of {in_unit(total, unit)} free"
                    + (f" (held: {'; '.join(holders)}). The scheduler frees a claim's counters when it is "
                       "deallocated, before its Unprepare, and books none where the DRAPartitionableDevices "
                       "gate is off; the kubelet retries once the holders are unprepared" if holders else ""),
                    _claims(holding))
