"""The Ascend chip catalogue: families, PCI device IDs, and per-model facts we cannot read from npu-smi.

Every fact cites docs/ascend-hardware.md: docs/ascend-hardware.md#chip-families (families, chip names, PCI device
IDs, memory kind), docs/ascend-hardware.md#compute-and-memory (AI cores per model, per-chip DVPP engines). Values the
node reports itself
(``Aicore Count`` of ``npu-smi info -t common``, memory totals of ``npu-smi info``) win over this
table; the table fills gaps (310P has no ``Aicore Count`` line) and serves simulated devices.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping

import attrs

__all__ = (
    "MODELS",
    "PCI_DEVICE_FAMILY",
    "ChipFamily",
    "ChipModel",
    "MemoryKind",
    "family_of",
    "model_of",
    "normalise_chip_name",
)

#: PCI vendor ID of Huawei (``PCI Vendor ID : 0x19e5`` in ``910A_info_-t_board_-i.txt``).
HUAWEI_PCI_VENDOR = "0x19e5"


class ChipFamily(enum.StrEnum):
    """Chip generation, published as attribute ``chipFamily`` (docs/ascend-hardware.md#chip-families)."""

    ASCEND310 = "Ascend310"
    ASCEND310B = "Ascend310B"
    ASCEND310P = "Ascend310P"
    ASCEND910 = "Ascend910"
    ASCEND910B = "Ascend910B"
    ASCEND910C = "Ascend910C"  # 910_93 / A3; npu-smi prints the chip name "Ascend910"
    ASCEND950 = "Ascend950"


class MemoryKind(enum.StrEnum):
    """What the ``memory`` capacity counts: HBM on the 910 family, DDR on 310/310P (docs/architecture.md#names)."""

    HBM = "HBM"
    DDR = "DDR"


#: PCI device ID (lower-case hex) -> family (docs/ascend-hardware.md#chip-families, from the npu-smi source and
#: mind-cluster).
PCI_DEVICE_FAMILY: Mapping[str, ChipFamily] = {
    "0xd100": ChipFamily.ASCEND310,
    "0xd105": ChipFamily.ASCEND310B,
    "0xd500": ChipFamily.ASCEND310P,
    "0xd801": ChipFamily.ASCEND910,
    "0xd802": ChipFamily.ASCEND910B,
    "0xd803": ChipFamily.ASCEND910C,
    "0xd806": ChipFamily.ASCEND950,
}

_MEMORY_KIND = {
    ChipFamily.ASCEND310: MemoryKind.DDR, ChipFamily.ASCEND310B: MemoryKind.DDR,
    ChipFamily.ASCEND310P: MemoryKind.DDR, ChipFamily.ASCEND910: MemoryKind.HBM,
    ChipFamily.ASCEND910B: MemoryKind.HBM, ChipFamily.ASCEND910C: MemoryKind.HBM,
    ChipFamily.ASCEND950: MemoryKind.HBM,
}

# Chip-name patterns, most specific first. 910B and 310P follow mind-cluster ascend-common/devmanager
# (docs/ascend-hardware.md#chip-families); "310Pvir01" is a 310P hard vNPU seen inside a container; "MiniD" is
# how ``npu-smi info -m`` names the 310.
_NAME_PATTERNS: tuple[tuple[re.Pattern[str], ChipFamily], ...] = (
    (re.compile(r"^(910B\d|A2G\d)"), ChipFamily.ASCEND910B),
    (re.compile(r"^(Ascend910|910_93|910C)"), ChipFamily.ASCEND910C),
    (re.compile(r"^910"), ChipFamily.ASCEND910),
    (re.compile(r"^(310P\d?|I2\d?)"), ChipFamily.ASCEND310P),
    (re.compile(r"^310B"), ChipFamily.ASCEND310B),
    (re.compile(r"^(310$|MiniD$)"), ChipFamily.ASCEND310),
    (re.compile(r"^(Ascend)?950"), ChipFamily.ASCEND950),  # the 950's table prints Ascend950PR, Ascend950DT
)


@attrs.frozen
class ChipModel:
    """Facts about one chip model.

    :ivar memory_mib: memory of one chip as npu-smi shows it (MiB), for simulated devices.
    :ivar aicore: AI cores of one chip (one die on 910C).
    :ivar dvpp: media engines of one chip (``vpc``, ``vdec``, ``jpegd``, ``jpege``, ``venc``, ``pngd``);
        empty where no source gives them.
    """

    name: str
    family: ChipFamily
    memory_mib: int
    aicore: int | None
    aicpu: int | None = None
    dvpp: Mapping[str, int] = attrs.field(factory=dict)


#: Known models. Sources (docs/ascend-hardware.md#compute-and-memory): 310P3 8 AIC / 7 AICPU, 21527 MiB allocatable DDR
#: and the DVPP engines of the "Atlas inference, 310P (8 AIC)" row; 910B1 24 AIC (``Aicore Count : 24``
#: in ``910B1_info_-t_common_-i_1.txt``); 910B2 24/6; 910B3, 910B4, 910B4-1 20/7; 910C 20/7 per die;
#: 910A 32 AIC in ``910A_info_-t_common_-i_0_with_mcu.txt`` (30 on other 910A, so None here);
#: 310 8192 MiB per chip (``310_info_atlas800-3000_*``), AI cores not in any source.
MODELS: Mapping[str, ChipModel] = {
    m.name: m for m in (
        ChipModel("310", ChipFamily.ASCEND310, 8192, None),
        ChipModel("310P3", ChipFamily.ASCEND310P, 21527, 8, 7,
                  {"vpc": 12, "vdec": 12, "jpegd": 16, "jpege": 8, "venc": 3}),
        ChipModel("910A", ChipFamily.ASCEND910, 32768, None, 14,
                  {"vpc": 16, "vdec": 16, "jpegd": 16, "pngd": 24, "jpege": 8}),
        ChipModel("910B1", ChipFamily.ASCEND910B, 65536, 24),
        ChipModel("910B2", ChipFamily.ASCEND910B, 65536, 24, 6),
        ChipModel("910B3", ChipFamily.ASCEND910B, 65536, 20, 7),
        ChipModel("910B4", ChipFamily.ASCEND910B, 32768, 20, 7),
        ChipModel("910B4-1", ChipFamily.ASCEND910B, 65536, 20, 7),
        ChipModel("Ascend910", ChipFamily.ASCEND910C, 65536, 20, 7),
    )
}


def normalise_chip_name(name: str) -> str:
    """Drop the ``Ascend `` prefix that ``npu-smi info -m`` prints (``Ascend 910B4`` -> ``910B4``)."""
    name = name.strip()
    return name[len("Ascend "):] if name.startswith("Ascend ") else name


def family_of(chip_name: str | None, *, pci_device_id: str | None = None) -> ChipFamily | None:
    """Return the family of a chip from its PCI device ID (preferred) or its name; None if unknown.

    :param chip_name: as npu-smi prints it (``910B3``, ``Ascend 910B4``, ``Ascend910``, ``MiniD``,
        ``Ascend950PR``).
    :param pci_device_id: ``0xd802`` (any case), from ``-t board`` or sysfs.
    """
    if pci_device_id:
        family = PCI_DEVICE_FAMILY.get(pci_device_id.lower())
        if family is not None:
            return family
    if not chip_name:
        return None
    name = normalise_chip_name(chip_name)
    for pattern, family in _NAME_PATTERNS:
        if pattern.match(name):
            return family
    return None


def memory_kind(family: ChipFamily) -> MemoryKind:
    """HBM or DDR: what the ``memory`` capacity of a chip of ``family`` counts."""
    return _MEMORY_KIND[family]


def model_of(chip_name: str | None) -> ChipModel | None:
    """The catalogue entry for a chip name (``Ascend 910B4`` and ``910B4`` alike), or None."""
    if not chip_name:
        return None
    return MODELS.get(normalise_chip_name(chip_name))
