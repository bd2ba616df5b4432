"""Chip health and readings from DCMI at the health interval: one round trip to the DCMI worker for
every chip, no process (:class:`..dcmi.client.DcmiClient`).

Per chip (the ``npuID`` and ``chipID`` attributes of its devices; every device of a chip, hard vNPUs
too, gets the chip's answer), the calls npu-smi itself makes for the ``npu-smi info`` columns that
health and the usage metrics read (profiles/ascend/usage.py, docs/monitoring.md):

* ``dcmi_get_device_health`` (``Health``): 0 OK and 1 Warning are healthy, 2 Alarm and 3 Critical
  not, anything else (4 UNKNOWN) unknown, as ``profile.CHIP_HEALTH`` reads npu-smi's words;
* ``dcmi_get_device_utilization_rate`` for the AI cores (``AICore(%)``);
* ``dcmi_get_device_hbm_info`` on a chip whose ``memoryType`` is HBM (``HBM-Usage(MB)``),
  ``dcmi_get_device_memory_info_v3`` on a DDR one (``Memory-Usage(MB)``: used = size - available);
* ``dcmi_get_device_temperature`` (``Temp(C)``) and ``dcmi_get_device_power_info`` (tenths of a
  watt; ``Power(W)``).

"Not supported" (-8255), and a call the library does not export, leave that value unknown, as it is
in npu-smi's answer (npu-smi asks the same call). A chip for which any call returns an error or does
not answer (a hang kills the worker, :mod:`..dcmi.client`) is left to npu-smi as a whole: its health
and its readings come from one ``npu-smi info``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from ascend_dra.model import DeviceReading
from ascend_dra.profiles.ascend.dcmi.api import FUNCTION_NOT_FOUND, UTILIZATION_AICORE
from ascend_dra.profiles.ascend.dcmi.client import Answer, DcmiClient
from ascend_dra.profiles.base import Device

__all__ = ("DcmiHealth", "dcmi_health")

logger = logging.getLogger(__name__)

#: DCMI health value -> healthy? (0 OK and 1 Warning work; 2 Alarm, 3 Critical do not; 4 UNKNOWN).
_HEALTHY = {0: True, 1: True, 2: False, 3: False}
#: What each chip is asked, after its health, by the ``memoryType`` attribute of its devices.
_MEMORY_CALL = {"HBM": "dcmi_get_device_hbm_info", "DDR": "dcmi_get_device_memory_info_v3"}


@attrs.frozen
class DcmiHealth:
    """What DCMI said at one health pass.

    :ivar health: device name -> healthy (True), unhealthy (False), unknown (None), for the devices
        of the chips DCMI answered every call for.
    :ivar readings: device name -> :class:`~ascend_dra.model.DeviceReading` for the same devices.
    :ivar rest: the devices DCMI did not answer for (an error code, no answer, no IDs): ask npu-smi.
    """

    health: dict[str, bool | None]
    readings: dict[str, DeviceReading]
    rest: list[Device]


def _calls(card: int, device: int, memory_type: object) -> list[tuple[object, ...]]:
    calls: list[tuple[object, ...]] = [
        ("dcmi_get_device_health", card, device),
        ("dcmi_get_device_utilization_rate", card, device, UTILIZATION_AICORE),
        ("dcmi_get_device_temperature", card, device),
        ("dcmi_get_device_power_info", card, device)]
    if isinstance(memory_type, str) and memory_type in _MEMORY_CALL:
        calls.append((_MEMORY_CALL[memory_type], card, device))
    return calls


def _known(answer: Answer) -> bool:
    """The answer counts (a value, or a value nobody can read): not a failure to hand to npu-smi."""
    return answer.ok or answer.unsupported or answer.code == FUNCTION_NOT_FOUND


def _reading(answers: Sequence[Answer]) -> DeviceReading:
    values = {a.call[0]: a.value for a in answers if a.ok}
    used = total = None
    if (hbm := values.get("dcmi_get_device_hbm_info")) is not None:
        used, total = hbm["memory_usage"], hbm["memory_size"]  # type: ignore[index]
    elif (ddr := values.get("dcmi_get_device_memory_info_v3")) is not None:
        total = ddr["memory_size"]  # type: ignore[index]
        used = total - ddr["memory_available"]  # type: ignore[index,operator]
    core, celsius, power = (values.get(f"dcmi_get_device_{name}") for name in (
        "utilization_rate", "temperature", "power_info"))
    return DeviceReading(core_percent=None if core is None else float(core),  # type: ignore[arg-type]
                         memory_used_mib=used, memory_total_mib=total or None,
                         temperature_c=None if celsius is None else float(celsius),  # type: ignore[arg-type]
                         power_w=None if power is None else power / 10)  # type: ignore[operator]


async def dcmi_health(client: DcmiClient, devices: Sequence[Device]) -> DcmiHealth:
    """Health and readings of ``devices`` (see the module docstring), one round trip for all chips.

    :raises DcmiError: DCMI cannot be asked (nothing answered).
    """
    chips: dict[tuple[int, int], list[Device]] = {}
    rest: list[Device] = []
    for d in devices:
        npu, chip = d.attributes.get("npuID"), d.attributes.get("chipID")
        if isinstance(npu, int) and isinstance(chip, int):
            chips.setdefault((npu, chip), []).append(d)
        else:
            rest.append(d)
    per_chip = [_calls(npu, chip, next((m.attributes["memoryType"] for m in members if "memoryType" in m.attributes),
                                       None)) for (npu, chip), members in chips.items()]
    answers = await client.call([call for calls in per_chip for call in calls])
    health: dict[str, bool | None] = {}
    readings: dict[str, DeviceReading] = {}
    failed: list[Answer] = []
    start = 0
    for members, calls in zip(chips.values(), per_chip, strict=True):
        mine, start = answers[start:start + len(calls)], start + len(calls)
        if not all(_known(a) for a in mine):
            failed += [a for a in mine if not _known(a)]
            rest += members
            continue
        verdict = _HEALTHY.get(mine[0].value) if mine[0].ok else None  # type: ignore[arg-type]
        reading = _reading(mine)
        for d in members:
            health[d.name], readings[d.name] = verdict, reading
    if rest:
        logger.info("DCMI gave no health or readings for some chips; npu-smi is asked", extra={
            "devices": [d.name for d in rest], "calls": [a.describe() for a in failed][:3], "tier": "dcmi"})
    return DcmiHealth(health, readings, rest)
