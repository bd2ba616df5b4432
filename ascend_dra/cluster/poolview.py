"""What the ResourceSlices show of the node's devices: every profile's inventory as one pool, the
unhealthy devices tainted or left out, and what makes up for a feature gate the API server lacks.

The API server drops the fields of a disabled gate from a ResourceSlice without an error
(docs/architecture.md#feature-gates; the publisher reports it, cluster.DroppedFieldsError). Two of
those fields keep devices from being handed out wrongly, so their loss is made up for here:

* ``taints`` (gate DRADeviceTaints): with ``--unhealthy-devices taint`` the unhealthy devices are
  then withdrawn instead of tainted;
* ``sharedCounters`` / ``consumesCounters`` (gate DRAPartitionableDevices, KEP-4815): without them
  the scheduler sees a whole chip and each vNPU that could be cut from it as independent devices,
  and gives a chip whole and cut at once; only one of those Prepares can succeed (the guard refuses
  the others, and their pods wait). :func:`whole_devices_only` then publishes only the devices that
  take whole counter sets (the chips), which the scheduler can hand out correctly.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping

import attrs

from ascend_dra.model import CounterConsumption, Device, DeviceTaint, Inventory, parse_quantity

__all__ = ("GATE_KEPT_ANSWERS", "GATE_KEPT_ANSWERS_MAX", "PoolView", "merged", "whole_devices_only")

log = logging.getLogger(__name__)

#: Answers in a row that must find a gate's fields kept before its fallback ends (PoolView.on_probe):
#: API servers behind one address may differ while they are restarted one by one to turn a gate on.
GATE_KEPT_ANSWERS = 3
#: At most this many once relapses have doubled it.
GATE_KEPT_ANSWERS_MAX = 48


def merged(inventories: Mapping[str, Inventory], taints: Mapping[str, DeviceTaint] | None = None,
           withdrawn: Collection[str] = ()) -> Inventory:
    """All profiles' devices and counter sets as one pool, with ``taints`` (device name -> taint)
    added to the devices they name and the ``withdrawn`` devices left out (their counter sets stay:
    other devices of the chip may consume them)."""
    taints = taints or {}
    return Inventory(
        devices=tuple(attrs.evolve(d, taints=(*d.taints, taints[d.name])) if d.name in taints else d
                      for inv in inventories.values() for d in inv.devices if d.name not in withdrawn),
        counter_sets=tuple(c for inv in inventories.values() for c in inv.counter_sets),
    )


def _takes_whole(consumption: CounterConsumption, sets: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether ``consumption`` takes every counter of its set, all of it."""
    totals = sets.get(consumption.counter_set)
    if totals is None:
        return False
    try:
        return all(parse_quantity(consumption.counters.get(name, "0")) >= parse_quantity(total)
                   for name, total in totals.items())
    except ValueError:
        return False


def whole_devices_only(inventory: Inventory) -> Inventory:
    """``inventory`` for an API server without DRAPartitionableDevices: the devices that consume no
    counter set, and those that consume the whole of each set they consume (a whole chip), without
    their counter consumption; no counter sets. A vNPU template device, which takes part of its
    chip's set, is left out.

    :param inventory: devices and counter sets (model.py), as the profiles published them.
    """
    sets = {s.name: s.counters for s in inventory.counter_sets}

    def kept(device: Device) -> bool:
        return all(_takes_whole(c, sets) for c in device.consumes_counters)

    return attrs.evolve(inventory, counter_sets=(), devices=tuple(
        attrs.evolve(d, consumes_counters=()) if d.consumes_counters else d
        for d in inventory.devices if kept(d)))


class PoolView:
    """The daemon's view of what to publish (see the module docstring).

    :param driver_name: the taint key is ``<driver>/unhealthy``.
    :param unhealthy_devices: ``--unhealthy-devices``: ``taint``, ``withdraw`` or ``publish``.
    :ivar taints: device name -> the taint published for it because its profile reports it unhealthy.
    :ivar withdrawn: devices left out because their profile reports them unhealthy.
    :ivar taints_dropped: the API server dropped our taints (DRADeviceTaints off): ``taint`` withdraws.
    :ivar counters_dropped: the API server dropped our counters (DRAPartitionableDevices off): whole
        chips only, until a dry-run create finds them kept again (gateprobe.py).
    """

    def __init__(self, driver_name: str, unhealthy_devices: str) -> None:
        self.unhealthy_devices = unhealthy_devices
        self._taint = DeviceTaint(key=f"{driver_name}/unhealthy", effect="NoSchedule")
        self.taints: dict[str, DeviceTaint] = {}
        self.withdrawn: frozenset[str] = frozenset()
        self.taints_dropped = False
        self.counters_dropped = False
        self._health: Mapping[str, bool | None] = {}
        self._kept_streak: dict[str, int] = {}  # gate -> probe answers in a row that found it kept
        self._kept_needed: dict[str, int] = {}  # gate -> answers needed (doubled at each relapse)
        self._ended_by_probe: set[str] = set()  # fallbacks a probe ended (a drop after it is a relapse)

    def mark_unhealthy(self, health: Mapping[str, bool | None]) -> bool:
        """Taint or withdraw the devices ``health`` calls unhealthy (False); return whether the
        slices must be written again.

        A device whose health became unknown (None: npu-smi failed or hung, the chip left its
        table) keeps the verdict it had: a broken chip is the likeliest to stop answering, and it
        must not go back into the pool for that. It is released when it reports healthy (True) or
        leaves the inventory (absent from ``health``).
        """
        before = {name for name, healthy in self._health.items() if healthy is False}
        self._health = {name: False if healthy is None and name in before else healthy
                        for name, healthy in health.items()}
        unhealthy = sorted(self.unhealthy(self._health))
        mode = self.unhealthy_devices
        if mode == "taint" and self.taints_dropped:
            mode = "withdraw"
        taints = {name: self._taint for name in unhealthy} if mode == "taint" else {}
        withdrawn = frozenset(unhealthy) if mode == "withdraw" else frozenset()
        if (taints, withdrawn) == (self.taints, self.withdrawn):
            return False
        if withdrawn - self.withdrawn:
            log.warning("unhealthy devices are left out of the ResourceSlices until healthy", extra={
                "devices": ",".join(sorted(withdrawn - self.withdrawn)), "unhealthy_devices": self.unhealthy_devices})
        if self.withdrawn - withdrawn:
            log.info("devices are back in the ResourceSlices", extra={
                "devices": ",".join(sorted(self.withdrawn - withdrawn))})
        self.taints, self.withdrawn = taints, withdrawn
        return True

    def unhealthy(self, names: Iterable[str]) -> list[str]:
        """Which of ``names`` are held unhealthy now, by the rule of :meth:`mark_unhealthy` (an
        unhealthy device whose health turned unknown still counts), whatever ``unhealthy_devices``."""
        return [name for name in names if self._health.get(name) is False]

    def on_dropped(self, gates: Collection[str]) -> bool:
        """The API server dropped fields these ``gates`` keep; return whether the slices must be
        written again (their fallback starts now)."""
        changed = False
        for gate in set(gates) & self._ended_by_probe:  # a probe said kept, a write says dropped
            self._ended_by_probe.discard(gate)
            needed = min(GATE_KEPT_ANSWERS_MAX, 2 * self._kept_needed.get(gate, GATE_KEPT_ANSWERS))
            self._kept_needed[gate] = needed
            log.warning("the API server dropped a gate's fields again after a dry run had found them kept (API "
                        "servers that differ?); the fallback is back, and ends only after more answers in a row",
                        extra={"gate": gate, "answers_needed": needed})
        self._kept_streak.clear()
        if "DRADeviceTaints" in gates and not self.taints_dropped:
            self.taints_dropped = True
            log.warning("the API server drops device taints (feature gate DRADeviceTaints off): unhealthy devices "
                        "are withdrawn from the ResourceSlices instead of tainted")
            changed = self.mark_unhealthy(self._health)
        if "DRAPartitionableDevices" in gates and not self.counters_dropped:
            self.counters_dropped = True
            log.warning("the API server drops shared counters (feature gate DRAPartitionableDevices off): only "
                        "whole chips are published, no vNPU templates, until the API server keeps them (asked every "
                        "--rediscover-interval with a dry-run create; three answers in a row)")
            changed = True
        return changed

    @property
    def dropped_gates(self) -> list[str]:
        """The feature gates whose fields the API server dropped, whose fallback is on."""
        return [g for g, on in (("DRADeviceTaints", self.taints_dropped),
                                ("DRAPartitionableDevices", self.counters_dropped)) if on]

    def on_probe(self, asked: Collection[str], kept: Collection[str]) -> bool:
        """One dry-run answer (gateprobe.py) about the gates ``asked``: those in ``kept`` had their fields
        kept. A fallback ends once :data:`GATE_KEPT_ANSWERS` answers in a row found its gate kept (twice
        as many after each relapse, at most :data:`GATE_KEPT_ANSWERS_MAX`); return whether the slices
        must be written again."""
        ending = []
        for gate in asked:
            self._kept_streak[gate] = self._kept_streak.get(gate, 0) + 1 if gate in kept else 0
            if self._kept_streak[gate] >= self._kept_needed.get(gate, GATE_KEPT_ANSWERS):
                ending.append(gate)
                self._kept_streak[gate] = 0
        self._ended_by_probe.update(ending)
        return self.on_kept(ending) if ending else False

    def on_kept(self, gates: Collection[str]) -> bool:
        """The API server keeps the fields of these ``gates`` again (gateprobe.py); return whether
        the slices must be written again (their fallback ends now)."""
        changed = False
        if "DRADeviceTaints" in gates and self.taints_dropped:
            self.taints_dropped = False
            log.warning("the API server keeps device taints again (feature gate DRADeviceTaints on): unhealthy "
                        "devices are tainted again, as --unhealthy-devices says")
            changed = self.mark_unhealthy(self._health)
        if "DRAPartitionableDevices" in gates and self.counters_dropped:
            self.counters_dropped = False
            log.warning("the API server keeps shared counters again (feature gate DRAPartitionableDevices on): "
                        "vNPU templates are published again")
            changed = True
        return changed

    def full(self, inventories: Mapping[str, Inventory]) -> Inventory:
        """Every profile's devices and counter sets, none withdrawn or tainted: what gateprobe.py asks
        about (a dry run stores nothing; with every device withdrawn there was none to taint)."""
        return merged(inventories)

    def desired(self, inventories: Mapping[str, Inventory]) -> Inventory:
        """The pool to publish from every profile's inventory."""
        pool = merged(inventories, self.taints, self.withdrawn)
        return whole_devices_only(pool) if self.counters_dropped else pool
