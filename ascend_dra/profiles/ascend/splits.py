"""One node, both splits: ``HAMivNPUCore`` (soft shares) and ``hard-vNPU`` (template vNPUs) on the same chips.

Each chip is either soft-shared or cut into vNPUs, whichever its first claim asks for, and the
kube-scheduler itself keeps the two apart (docs/splits.md). The encoding: in the chip's pool, the
soft-share device (``allowMultipleAllocations``, KEP-5075) consumes **all** of the chip's shared
counters (KEP-4815), the counters the template vNPUs consume. The structured allocator of
kube-scheduler 1.36 and later charges a shareable device's counters once, while any allocation holds
it (``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/experimental/``
``allocator_experimental.go``, ``allocateDevice``: ``skipCounterCheck`` when the device's capacity is
in use already; ``checkAvailableCounters`` counts an allocated device through
``internal.IsDeviceAllocated``, which looks at the shared allocations too: kubernetes/kubernetes
PR #139040, in v1.36.2). So shares of a chip coexist with each other and never with a vNPU of that
chip, and a chip without claims serves either. The hard-vNPU whole chip (``npu-<logicID>-0``, the
soft device's name too) is left out of such chips: it would be a third mode of the chip under the
same name.

The v1.35 allocator (v1.35.4) looks at ``AllocatedDevices`` only when it rebuilds the counters of a
new scheduling cycle, and a shared allocation is not in it: a soft share allocated in an earlier
cycle consumes nothing there, and a vNPU of the same chip would be allocated. No encoding with the
1.35 fields keeps the modes apart, so a daemon that loads both profiles refuses to start against an
API server older than 1.36 (:func:`refusal`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

import attrs

from ascend_dra.model import Device, Inventory

__all__ = ("HARD", "MIN_MINOR", "SOFT", "both_loaded", "combine", "refusal")

log = logging.getLogger(__name__)

SOFT = "HAMivNPUCore"
HARD = "hard-vNPU"
#: The oldest Kubernetes minor whose scheduler counts a shared device's counters across cycles.
MIN_MINOR = 36

_GIT_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


def both_loaded(names: object) -> bool:
    """Whether the profile names (any container of ``str``) hold both splits."""
    return SOFT in names and HARD in names  # type: ignore[operator]


def combine(inventories: Mapping[str, Inventory]) -> dict[str, Inventory]:
    """The inventories with both splits of each chip in one pool (module docstring); unchanged
    unless both :data:`SOFT` and :data:`HARD` discovered.

    A soft device and the hard-vNPU whole chip of one chip have the same name (``npu-<logicID>-0``,
    attributes.device_name) and the same ``physicalID``. For each such pair the whole chip is left
    out and the soft device takes its counter consumption (every counter of the chip's set). A chip
    that only one profile offers (device-share off, a model without templates) keeps that
    profile's devices as they are.

    :param inventories: profile name -> inventory, as each profile discovered it.
    :return: profile name -> inventory, in the same order.
    """
    soft, hard = inventories.get(SOFT), inventories.get(HARD)
    if soft is None or hard is None:
        return dict(inventories)
    wholes = {d.name: d for d in hard.devices if d.consumes_counters and "vnpuTemplate" not in d.attributes}
    paired: set[str] = set()
    soft_devices: list[Device] = []
    for device in soft.devices:
        whole = wholes.get(device.name)
        if whole is not None and whole.attributes.get("physicalID") == device.attributes.get("physicalID"):
            paired.add(device.name)
            device = attrs.evolve(device, consumes_counters=whole.consumes_counters)
        soft_devices.append(device)
    if paired:
        log.debug("soft shares and vNPUs of the same chips in one pool", extra={"devices": ",".join(sorted(paired))})
    out = dict(inventories)
    out[SOFT] = attrs.evolve(soft, devices=tuple(soft_devices))
    out[HARD] = attrs.evolve(hard, devices=tuple(d for d in hard.devices if d.name not in paired))
    return out


def refusal(version: Mapping[str, object] | None) -> str | None:
    """Why a node may not load both splits against this API server, as one line, or None.

    :param version: the API server's ``/version`` answer (``gitVersion`` such as ``v1.35.4``).
    """
    git = str((version or {}).get("gitVersion") or "")
    found = _GIT_VERSION.match(git)
    if found is not None and (int(found[1]), int(found[2])) >= (1, MIN_MINOR):
        return None
    seen = git or "of unknown version"
    return (f"--profiles {SOFT},{HARD}: one node with both splits needs kube-scheduler 1.{MIN_MINOR} or later "
            f"(the API server is {seen}); an older scheduler does not count a soft-shared chip's counters "
            f"and would give a chip's soft share and a vNPU of it at once (docs/splits.md): load one of them, "
            f"--profiles {SOFT} or --profiles {HARD}")
