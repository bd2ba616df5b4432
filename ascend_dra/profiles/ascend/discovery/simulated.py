"""The simulated discovery tier: chips of a catalogue model, for nodes (and laptops) without NPUs.

The last tier of the discovery chain (docs/ascend-discovery.md): devices generated from the node
name and the device count. The profiles use it only when asked (profile option ``simulate``), because a real
node whose npu-smi is broken must not advertise invented NPUs to the scheduler.
UUIDs have the VDie shape (five 8-hex groups) and are derived from the node name, the model
and the index, so they are stable across restarts and differ between nodes.
"""

from __future__ import annotations

import hashlib

from ascend_dra.profiles.ascend.chip import NpuChip
from ascend_dra.profiles.ascend.chips import ChipModel, memory_kind

__all__ = ("SIMULATED_DRIVER_VERSION", "simulated_chips", "simulated_uuid")

#: Driver version reported by simulated chips (the Lab 18 driver, docs/ascend-hardware.md#sources).
SIMULATED_DRIVER_VERSION = "25.5.1"


def simulated_uuid(node_name: str, model: str, index: int) -> str:
    """A stable VDie-shaped UUID: SHA-1 of ``<node>/<model>/<index>``, five upper-case 8-hex groups."""
    digest = hashlib.sha1(f"{node_name}/{model}/{index}".encode()).hexdigest().upper()
    return "-".join(digest[i:i + 8] for i in range(0, 40, 8))


def simulated_chips(node_name: str, model: ChipModel, count: int) -> tuple[NpuChip, ...]:
    """``count`` chips of ``model``: NPU ID = logic ID = physical ID = index, one chip per NPU.

    :param count: number of chips (``ProfileContext.fake_devices``); negative counts give none.
    """
    return tuple(
        NpuChip(
            logic_id=i,
            physical_id=i,
            chip_id=0,
            npu_id=i,
            chip_name=model.name,
            family=model.family,
            health="OK",
            uuid=simulated_uuid(node_name, model.name, i),
            memory_mib=model.memory_mib,
            memory_kind=memory_kind(model.family),
            aicore_count=model.aicore,
            driver_version=SIMULATED_DRIVER_VERSION,
        )
        for i in range(max(count, 0))
    )
