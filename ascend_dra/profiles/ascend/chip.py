"""One discovered chip: the record every discovery tier produces and both profiles consume.

The three ID kinds are kept apart (docs/ascend-hardware.md#the-ids, "The IDs"):

* ``npu_id`` -- npu-smi's card number; what ``npu-smi ... -i`` takes. Not an index (4, 5 on the
  Lab 18 host; 215 on a 310 sample). Only the npu-smi tier knows it.
* ``logic_id`` -- DCMI's logical device number, 0..n-1 over all chips of the node. Device names
  (``npu-<logicID>-0``, see :func:`.attributes.device_name`) and the ``index`` attribute use it, as
  Project-HAMi's ascend-dra-driver does.
* ``physical_id`` -- the hardware chip number: ``/dev/davinci<physicalID>`` and
  ``ASCEND_VISIBLE_DEVICES`` (the Ascend Docker Runtime reads physical IDs, docs/ascend-hardware.md#the-ids,
  docs/ascend-hardware.md#ascend-docker-runtime). Lab 18: NPU IDs 4/5, physical IDs 0/2, logic IDs 0/1 -- three
  different numbers.

``chip_id`` is the chip's index inside its NPU (0, 1 on a 310P Duo or a 910C's two dies). Only
npu-smi knows it: the devfs tier leaves it None (the ``chipID`` attribute is then omitted), which
is why it is not part of the device name.
"""

from __future__ import annotations

import attrs

from ascend_dra.profiles.ascend.chips import ChipFamily, MemoryKind

__all__ = ("DroppedChip", "NpuChip")


@attrs.frozen
class NpuChip:
    """One chip as discovered. None = not known from this tier (the attribute is then omitted).

    :ivar memory_mib: HBM (910 family) or DDR (310 family) total in **MiB**, as ``npu-smi info`` prints it.
    :ivar memory_kind: which of the two ``memory_mib`` counts.
    :ivar pci_address: lower-case ``dddd:bb:dd.f`` (sysfs spelling).
    :ivar driver_version: the driver version as printed (``25.5.1``, ``24.1.rc1.b030``).
    :ivar uuid: the VDie ID (the 950's DDie ID, the 310P's Die ID), five upper-case 8-hex groups joined by ``-``.
    :ivar hccs: whether the chip has an HCCS link to another chip (``-t topo``).
    :ivar topology_group: the HCCS-connected group it belongs to (``hccs-<n>``).
    :ivar cpu_affinity: ``CPU Affinity`` of ``-t topo`` (``144-167``).
    :ivar family_said: when ``family`` is None, what each source the tier read said about it, one
        phrase each (``sysfs /sys/bus/pci/devices/0000:61:00.0/device cannot be read``); empty otherwise.
    """

    logic_id: int
    physical_id: int
    chip_id: int | None = None
    npu_id: int | None = None
    chip_name: str | None = None
    family: ChipFamily | None = None
    health: str | None = None
    pci_address: str | None = None
    numa_node: int | None = None
    uuid: str | None = None
    memory_mib: int | None = None
    memory_kind: MemoryKind | None = None
    aicore_count: int | None = None
    driver_version: str | None = None
    hccs: bool | None = None
    topology_group: str | None = None
    cpu_affinity: str | None = None
    family_said: tuple[str, ...] = ()


@attrs.frozen
class DroppedChip:
    """A chip that discovery found but does not publish, and why (logged, and shown by ``discover``).

    :ivar reason: what is wrong, e.g. ``no /dev/davinci2 under /dev`` or ``chip family unknown``.
    :ivar physical_id, logic_id, npu_id, chip_id: the IDs known for it (None = not known).
    """

    reason: str
    physical_id: int | None = None
    logic_id: int | None = None
    npu_id: int | None = None
    chip_id: int | None = None
    chip_name: str | None = None

    @classmethod
    def of(cls, chip: NpuChip, reason: str) -> DroppedChip:
        """The record for a discovered ``chip``."""
        return cls(reason=reason, physical_id=chip.physical_id, logic_id=chip.logic_id, npu_id=chip.npu_id,
                   chip_id=chip.chip_id, chip_name=chip.chip_name)

    def describe(self) -> str:
        """``physical ID 2 (NPU 1 chip 0, 910B3): <reason>``, naming only the IDs that are known."""
        ids = [f"{label} {value}" for label, value in (
            ("physical ID", self.physical_id), ("logic ID", self.logic_id)) if value is not None]
        where = [f"NPU {self.npu_id}" if self.npu_id is not None else "",
                 f"chip {self.chip_id}" if self.chip_id is not None else "", self.chip_name or ""]
        detail = " ".join(w for w in where[:2] if w)
        inner = ", ".join(x for x in (detail, where[2]) if x)
        head = ", ".join(ids) or "chip"
        return f"{head}{f' ({inner})' if inner else ''}: {self.reason}"

    def log_fields(self) -> dict[str, object]:
        """The record as log fields (docs/architecture.md#names: ``physical_id``, ``logic_id``, ...)."""
        return {"reason": self.reason, "physical_id": self.physical_id, "logic_id": self.logic_id,
                "npu_id": self.npu_id, "chip_id": self.chip_id, "chip_name": self.chip_name}
