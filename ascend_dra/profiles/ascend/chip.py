"""One discovered chip: the record every discovery tier produces and both profiles consume.

The three ID kinds are kept apart (reference ascend.md §5, "The IDs"):

* ``npu_id`` -- npu-smi's card number; what ``npu-smi ... -i`` takes. Not an index (4, 5 on the
  Lab 18 host; 215 on a 310 sample). Only the npu-smi tier knows it.
* ``logic_id`` -- DCMI's logical device number, 0..n-1 over all chips of the node. Device names
  (``npu-<logicID>-<chip>``) and the ``index`` attribute use it, as Project-HAMi's ascend-dra-driver does.
* ``physical_id`` -- the hardware chip number: ``/dev/davinci<physicalID>`` and
  ``ASCEND_VISIBLE_DEVICES`` (the Ascend Docker Runtime reads physical IDs, reference ascend.md §5
  and §8). Lab 18: NPU IDs 4/5, physical IDs 0/2, logic IDs 0/1 -- three different numbers.

``chip_id`` is the chip's index inside its NPU (0, 1 on a 310P Duo or a 910C's two dies).
"""

from __future__ import annotations

import attrs

from ascend_dra.profiles.ascend.chips import ChipFamily, MemoryKind

__all__ = ("NpuChip",)


@attrs.frozen
class NpuChip:
    """One chip as discovered. None = not known from this tier (the attribute is then omitted).

    :ivar memory_mib: HBM (910 family) or DDR (310 family) total in **MiB**, as ``npu-smi info`` prints it.
    :ivar memory_kind: which of the two ``memory_mib`` counts.
    :ivar pci_address: lower-case ``dddd:bb:dd.f`` (sysfs spelling).
    :ivar driver_version: the driver version as printed (``25.5.1``, ``24.1.rc1.b030``).
    :ivar uuid: the VDie ID (or 310P Die ID), five upper-case 8-hex groups joined by ``-``.
    :ivar hccs: whether the chip has an HCCS link to another chip (``-t topo``).
    :ivar topology_group: the HCCS-connected group it belongs to (``hccs-<n>``).
    :ivar cpu_affinity: ``CPU Affinity`` of ``-t topo`` (``144-167``).
    """

    logic_id: int
    physical_id: int
    chip_id: int = 0
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
