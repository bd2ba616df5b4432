"""Whether the API server keeps the ResourceSlice fields of a feature gate again.

When kube-apiserver drops the fields of a disabled gate (``taints``: DRADeviceTaints;
``sharedCounters``/``consumesCounters``: DRAPartitionableDevices), the daemon falls back to a pool
the scheduler can hand out correctly without them (poolview.py). An operator who then turns the gate
on restarts kube-apiserver, not our DaemonSet, so the daemon asks again now and then. It must not
ask by publishing: slices with vNPU templates whose counters are dropped would let the scheduler
give a chip whole and cut at once. It asks with a dry-run create (``?dryRun=All``), which answers
the object as it would be stored, fields of disabled gates dropped, and stores nothing (API
conventions, "Dry-run"; the daemon already may create ResourceSlices).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import attrs

from ascend_dra.cluster.apiclient import RESOURCE_V1, KubeApi
from ascend_dra.cluster.apiserver import dropped_fields
from ascend_dra.cluster.slices import build_slices
from ascend_dra.model import DeviceTaint, Inventory

__all__ = ("gates_still_dropped",)

#: The fields each gate keeps, as found in a slice spec or one of its devices.
_GATE_FIELDS = {"DRADeviceTaints": ("taints",), "DRAPartitionableDevices": ("sharedCounters", "consumesCounters")}


def _asks(spec: dict[str, Any], gates: Collection[str]) -> bool:
    """Whether a slice spec carries a field of one of ``gates``."""
    keys = {k for g in gates for k in _GATE_FIELDS.get(g, ())}
    return bool(keys & spec.keys()) or any(keys & d.keys() for d in spec.get("devices") or ())


async def gates_still_dropped(api: KubeApi, inventory: Inventory, gates: Collection[str], *,
                              driver_name: str, node_name: str) -> list[str]:
    """Which of ``gates`` kube-apiserver still drops, asked with a dry-run create of the first slice
    of ``inventory`` (the pool as it would be published with every gate on) that carries each one's
    fields.

    For DRADeviceTaints one device gets a taint ``<driver>/gate-probe``, since the pool has
    none while every device is healthy. A gate none of whose fields the pool has (no vNPU
    templates, no devices) cannot be asked about and is answered as still dropped: the fallback
    then costs nothing.

    :raises ApiError: the API server refused or did not answer.
    """
    if "DRADeviceTaints" in gates and inventory.devices:
        first, *rest = inventory.devices
        probe = DeviceTaint(key=f"{driver_name}/gate-probe", effect="NoSchedule")
        inventory = attrs.evolve(inventory, devices=(attrs.evolve(first, taints=(*first.taints, probe)), *rest))
    slices = build_slices(inventory, driver_name=driver_name, node_name=node_name)
    # The first slice that carries each gate's fields says it (a node of 1,024 devices has 16 slices)
    asked: list[dict[str, Any]] = []
    for gate in gates:
        first = next((s for s in slices if _asks(s["spec"], (gate,))), None)
        if first is not None and all(first is not s for s in asked):
            asked.append(first)
    dropped: set[str] = {g for g in gates if not any(_asks(s["spec"], (g,)) for s in asked)}
    for obj in asked:
        stored = await api.call("POST", f"{RESOURCE_V1}/resourceslices", query=[("dryRun", "All")], body=obj)
        dropped.update(dropped_fields(obj["spec"], (stored or {}).get("spec") or {})[1])
    return [g for g in gates if g in dropped]
