"""What each published chip reports in ``npu-smi info``: compute and memory in use, temperature, power.

The Ascend profiles read it from the same ``npu-smi info`` as their health (profile.py,
``AscendChipProfile.health``), at the daemon's health interval, and keep it for ``/metrics``
(:class:`~ascend_dra.model.DeviceReading`; docs/monitoring.md). The table's columns
(docs/ascend-hardware.md#npu-smi, parsed by :func:`.tables.parse_info`): ``AICore(%)`` (``NPU
Util(%)`` on the 950), ``HBM-Usage(MB)`` on the 910 family and ``Memory-Usage(MB)`` (DDR) on
310/310P, ``Temp(C)``, ``Power(W)`` (``NA`` on the 310P). The memory read is the one the ``memory``
capacity counts (attributes.py): HBM where the chip has it, else DDR.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ascend_dra.model import Device, DeviceReading
from ascend_dra.profiles.ascend.npusmi.tables import InfoChip, InfoTable

__all__ = ("chip_reading", "chip_readings")


def chip_reading(chip: InfoChip) -> DeviceReading:
    """One chip's row of ``npu-smi info`` as a reading (MiB as npu-smi's ``MB``; None where it printed none)."""
    if chip.hbm_total_mib:
        used, total = chip.hbm_used_mib, chip.hbm_total_mib
    else:
        used, total = chip.memory_used_mib, chip.memory_total_mib
    core = chip.aicore_percent if chip.aicore_percent is not None else chip.npu_util_percent
    return DeviceReading(
        core_percent=None if core is None else float(core), memory_used_mib=used, memory_total_mib=total or None,
        temperature_c=None if chip.temperature_c is None else float(chip.temperature_c), power_w=chip.power_w)


def chip_readings(table: InfoTable, devices: Iterable[Device]) -> dict[str, DeviceReading]:
    """``{device name: reading}`` for the published ``devices`` the table lists, matched by their
    ``npuID`` and ``chipID`` attributes (every device of a chip, hard vNPUs too, gets the chip's);
    devices the table does not list get none."""
    rows: Mapping[tuple[int, int], InfoChip] = {(c.npu_id, c.chip_id): c for c in table.chips}
    readings: dict[str, DeviceReading] = {}
    for device in devices:
        row = rows.get((device.attributes.get("npuID"), device.attributes.get("chipID")))  # type: ignore[arg-type]
        if row is not None:
            readings[device.name] = chip_reading(row)
    return readings
