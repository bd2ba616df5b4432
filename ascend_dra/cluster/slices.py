"""ResourceSlice objects for one node-local pool, as plain ``resource.k8s.io/v1`` JSON dicts.

Pure functions shared by the publisher (cluster and standalone), ``ascend-dra discover`` and the
tests. Source: ``resource.k8s.io/v1`` types and validation (
docs/architecture.md#resourceslice-publishing, docs/architecture.md#api-objects-and-limits): one pool per node named
after the node, at most 128 devices
per slice (64 when any device has taints or consumes counters), shared counters in slices of
their own (Kubernetes 1.35: a slice holds devices or sharedCounters, not both; at most 8 counter
sets per slice).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import anyio.lowlevel
import orjson

from ascend_dra.model import Capacity, CounterSet, Device, Inventory, attribute_to_api, canonical_quantity

__all__ = (
    "MAX_COUNTER_SETS_PER_SLICE",
    "MAX_DEVICES_PER_SLICE",
    "MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS",
    "build_slices",
    "build_slices_stepwise",
    "device_to_api",
    "keep_taint_times",
    "slice_content",
    "slice_generate_name",
)

MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS = 64
MAX_COUNTER_SETS_PER_SLICE = 8


def _q(quantity: str | None) -> str | None:
    # Published in the API server's canonical form, so a read-back equals what we sent and the
    # publisher can tell "unchanged" from "changed" by comparing them.
    return None if quantity is None else canonical_quantity(quantity)


def _capacity(capacity: Capacity) -> dict[str, Any]:
    out: dict[str, Any] = {"value": _q(capacity.value)}
    policy = capacity.request_policy
    if policy is not None:
        api: dict[str, Any] = {"default": _q(policy.default)}
        if policy.valid_values:
            api["validValues"] = [_q(v) for v in policy.valid_values]
        if policy.valid_range_min is not None:
            rng = {"min": _q(policy.valid_range_min)}
            if policy.valid_range_max is not None:
                rng["max"] = _q(policy.valid_range_max)
            if policy.valid_range_step is not None:
                rng["step"] = _q(policy.valid_range_step)
            api["validRange"] = rng
        out["requestPolicy"] = api
    return out


def device_to_api(device: Device) -> dict[str, Any]:
    """Return ``device`` as a ``resource.k8s.io/v1`` ``Device`` JSON object."""
    out: dict[str, Any] = {"name": device.name}
    if device.attributes:
        out["attributes"] = {k: attribute_to_api(v) for k, v in sorted(device.attributes.items())}
    if device.capacities:
        out["capacity"] = {k: _capacity(v) for k, v in sorted(device.capacities.items())}
    if device.allow_multiple_allocations:
        out["allowMultipleAllocations"] = True
    if device.consumes_counters:
        out["consumesCounters"] = [
            {"counterSet": c.counter_set, "counters": {k: {"value": _q(v)} for k, v in sorted(c.counters.items())}}
            for c in device.consumes_counters
        ]
    if device.taints:
        out["taints"] = [
            {"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})} for t in device.taints
        ]
    return out


def _counter_set_to_api(counter_set: CounterSet) -> dict[str, Any]:
    return {"name": counter_set.name,
            "counters": {k: {"value": _q(v)} for k, v in sorted(counter_set.counters.items())}}


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def slice_generate_name(node_name: str, driver_name: str) -> str:
    """``metadata.generateName`` as the Go helper 0.34/0.35 sets it: ``<node>-<driver>-``.

    The API server truncates the base to 58 characters and appends 5 random ones.
    """
    return f"{node_name}-{driver_name}-"


def _specs(inventory: Inventory) -> tuple[int, Iterator[dict[str, Any]]]:
    """How many slices ``inventory`` needs, and their specs built one slice at a time (lazily)."""
    advanced = any(d.taints or d.consumes_counters for d in inventory.devices)
    per_slice = MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS if advanced else MAX_DEVICES_PER_SLICE
    device_chunks = _chunks(sorted(inventory.devices, key=lambda d: d.name), per_slice)
    counter_chunks = _chunks(sorted(inventory.counter_sets, key=lambda c: c.name), MAX_COUNTER_SETS_PER_SLICE)
    count = len(device_chunks) + len(counter_chunks)

    def specs() -> Iterator[dict[str, Any]]:
        for chunk in device_chunks:
            yield {"devices": [device_to_api(d) for d in chunk]}
        for chunk in counter_chunks:
            yield {"sharedCounters": [_counter_set_to_api(c) for c in chunk]}
        if not count:
            yield {"devices": []}

    return max(count, 1), specs()


def _slice_object(spec: dict[str, Any], count: int, *, driver_name: str, node_name: str, pool_generation: int = 1,
                  owner: dict[str, Any] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"generateName": slice_generate_name(node_name, driver_name)}
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": owner["name"], "uid": owner["uid"], "controller": True}
        ]
    pool = {"name": node_name, "generation": pool_generation, "resourceSliceCount": count}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {"driver": driver_name, "nodeName": node_name, "pool": pool, **spec},
    }


def build_slices(
    inventory: Inventory,
    *,
    driver_name: str,
    node_name: str,
    pool_generation: int = 1,
    owner: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Return the ResourceSlice objects that publish ``inventory`` as the node's pool.

    :param inventory: all devices and counter sets of the node (every profile merged).
    :param owner: ``{"name": <node>, "uid": <node uid>}`` for the owner reference, or None.
    :return: ``[ResourceSlice dict, ...]``; always at least one slice (an empty pool is published
        as one slice without devices, so the scheduler knows the pool is empty).
    """
    count, specs = _specs(inventory)
    return [_slice_object(spec, count, driver_name=driver_name, node_name=node_name,
                          pool_generation=pool_generation, owner=owner) for spec in specs]


async def build_slices_stepwise(inventory: Inventory, **options: Any) -> list[dict[str, Any]]:
    """:func:`build_slices` (the same keyword arguments and result), letting the event loop run after each slice.

    Building the 1,024 devices of a large node in one step held the loop for 20-55 ms, and every
    GetInfo and Prepare behind it waited; one slice (at most 128 devices) takes a millisecond or
    two (docs/performance.md#getinfo-and-the-event-loop).
    """
    count, specs = _specs(inventory)
    out = []
    for spec in specs:
        out.append(_slice_object(spec, count, **options))
        await anyio.lowlevel.checkpoint()
    return out


def _taint_id(taint: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """What makes two taints of a device the same taint: key, value (empty as None) and effect."""
    return taint.get("key"), taint.get("value") or None, taint.get("effect")


def slice_content(spec: Mapping[str, Any]) -> bytes:
    """What identifies a slice's content: its ``spec`` without the pool (generation, slice count)
    and without the taints' ``timeAdded``, which we never send and the API server stamps on each
    taint written without one (``resource.k8s.io/v1`` defaulting)."""
    body = {k: v for k, v in spec.items() if k != "pool"}
    devices = body.get("devices")
    if devices and any("taints" in d for d in devices):
        body["devices"] = [
            {**d, "taints": [{k: v for k, v in t.items() if k != "timeAdded"} for t in d["taints"]]}
            if d.get("taints") else d for d in devices]
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def keep_taint_times(desired: Iterable[dict[str, Any]], existing: Iterable[Mapping[str, Any]]) -> None:
    """Give each taint of ``desired`` (slices about to be written; changed in place) the
    ``timeAdded`` that the same taint (key, value, effect) of the same device has in ``existing``
    (the stored slices, whichever slice held the device). Written without it, the API server stamps
    the time of the write: every rewrite of the pool (another device's health, a hot-plug, a restart)
    made a device unhealthy for hours look tainted a moment ago. The Go resourceslice controller of
    ``k8s.io/dynamic-resource-allocation`` keeps the stored time the same way."""
    times = {(device.get("name"), *_taint_id(taint)): taint["timeAdded"]
             for obj in existing for device in (obj.get("spec") or {}).get("devices") or ()
             for taint in device.get("taints") or () if taint.get("timeAdded")}
    if not times:
        return
    for obj in desired:
        for device in obj["spec"].get("devices") or ():
            for taint in device.get("taints") or ():
                added = times.get((device["name"], *_taint_id(taint)))
                if added is not None:
                    taint["timeAdded"] = added
