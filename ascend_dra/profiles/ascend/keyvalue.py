"""Parsers for npu-smi's key/value outputs: ``info -l``, ``-t board``, ``-t memory``, ``-t usages``,
``-t common``, ``-t health``, ``-t device-share`` (and the generic form of any other ``-t``).

Real npu-smi prints ``\\t%-30s : %s``; published samples show a TAB, 8 spaces or no indent, and
sometimes trailing spaces (docs/ascend-hardware.md#npu-smi-output-format), so keys and values are stripped. A blank
line separates blocks. Every unit is the one npu-smi prints: memory in **MiB** (npu-smi says
``MB``; the numbers are binary, e.g. ``HBM Capacity(MB) : 65536`` for 64 GiB), rates in percent,
frequencies in MHz, power in W, temperature in °C. Unknown keys are kept in ``fields`` (newer
npu-smi adds keys); a line that is not ``key : value`` raises :class:`NpuSmiParseError`.
Samples: ``tests/fixtures/npu-smi/`` (real outputs; provenance in its ``SOURCES.md``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from ascend_dra.profiles.ascend import _text
from ascend_dra.profiles.ascend.errors import NpuSmiParseError

__all__ = (
    "BoardInfo",
    "ChipBoardInfo",
    "ChipCommon",
    "ChipMemory",
    "ChipUsages",
    "CommonInfo",
    "DeviceShare",
    "HealthInfo",
    "KeyValueBlock",
    "ListedNpu",
    "McuCommon",
    "MemoryInfo",
    "NpuList",
    "UsagesInfo",
    "die_id",
    "parse_board",
    "parse_chip_board",
    "parse_common",
    "parse_device_share",
    "parse_health",
    "parse_key_values",
    "parse_list",
    "parse_memory",
    "parse_usages",
)

_KEY_VALUE = re.compile(r"^\s*(?P<key>[^:]*?[^:\s])\s+:(?:\s(?P<value>.*))?$")
_DIE_GROUP = re.compile(r"^[0-9A-Fa-f]{8}$")


@attrs.frozen
class KeyValueBlock:
    """One blank-line separated block: ``(key, value, line_no, line)`` in output order."""

    entries: tuple[tuple[str, str, int, str], ...]

    def get(self, key: str) -> str | None:
        """The first value printed for ``key``, or None."""
        for k, v, _, _ in self.entries:
            if k == key:
                return v
        return None

    def where(self, key: str) -> tuple[int, str]:
        """``(line_no, line)`` of ``key`` (of the block's first line when absent)."""
        for k, _, line_no, line in self.entries:
            if k == key:
                return line_no, line
        return self.entries[0][2], self.entries[0][3]

    def as_dict(self) -> dict[str, str]:
        """Keys to values (the first occurrence wins)."""
        out: dict[str, str] = {}
        for k, v, _, _ in self.entries:
            out.setdefault(k, v)
        return out


def parse_key_values(text: str, *, command: str = "npu-smi info -t <type>") -> tuple[KeyValueBlock, ...]:
    """Split a key/value output into blocks.

    :return: the non-empty blocks in output order.
    :raises NpuSmiParseError: on a non-blank line that is not ``key : value``, or an empty output.
    """
    blocks: list[KeyValueBlock] = []
    current: list[tuple[str, str, int, str]] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            if current:
                blocks.append(KeyValueBlock(tuple(current)))
                current = []
            continue
        match = _KEY_VALUE.match(line)
        if not match:
            raise NpuSmiParseError(command, line_no, line, "expected 'key : value'")
        current.append((match.group("key").strip(), (match.group("value") or "").strip(), line_no, line))
    if current:
        blocks.append(KeyValueBlock(tuple(current)))
    if not blocks:
        raise NpuSmiParseError(command, 0, "", "empty output")
    return tuple(blocks)


def _int(command: str, block: KeyValueBlock, key: str) -> int | None:
    value = block.get(key)
    if value is None:
        return None
    line_no, line = block.where(key)
    return _text.to_int(command, line_no, line, value, key)


def _amount(command: str, block: KeyValueBlock, key: str) -> int | None:
    """A capacity or count: like ``_int``, and DCMI's 8255 "not supported" reads as None (:mod:`._text`)."""
    value = block.get(key)
    if value is None:
        return None
    line_no, line = block.where(key)
    return _text.to_amount(command, line_no, line, value, key)


def _float(command: str, block: KeyValueBlock, key: str) -> float | None:
    value = block.get(key)
    if value is None:
        return None
    line_no, line = block.where(key)
    return _text.to_float(command, line_no, line, value, key)


def _str(block: KeyValueBlock, key: str) -> str | None:
    value = block.get(key)
    return None if value is None else _text.text_or_none(value)


def _require_int(command: str, block: KeyValueBlock, key: str) -> int:
    value = _int(command, block, key)
    if value is None:
        line_no, line = block.where(key)
        raise NpuSmiParseError(command, line_no, line, f"missing {key!r}")
    return value


def _merge(blocks: tuple[KeyValueBlock, ...]) -> KeyValueBlock:
    return KeyValueBlock(tuple(entry for block in blocks for entry in block.entries))


# -- npu-smi info -l ------------------------------------------------------------------------------


@attrs.frozen
class ListedNpu:
    """One NPU of ``npu-smi info -l``. ``product_name``/``serial_number`` only on non-server boards."""

    npu_id: int
    chip_count: int | None = None
    product_name: str | None = None
    serial_number: str | None = None


@attrs.frozen
class NpuList:
    """``npu-smi info -l``: ``Total Count`` (``Card Count`` on 310/310B) and the NPUs."""

    total_count: int | None
    npus: tuple[ListedNpu, ...]


def parse_list(text: str, *, command: str = "npu-smi info -l") -> NpuList:
    """Parse ``npu-smi info -l``.

    Samples: ``910B4_info_-l_8cards.txt`` (8 NPUs, 1 chip each), ``950_info_-l.txt`` (Product Name,
    Serial Number, no Chip Count).

    :raises NpuSmiParseError: when the count disagrees with the NPUs listed, or a block has no ``NPU ID``.
    """
    blocks = parse_key_values(text, command=command)
    total: int | None = None
    npus: list[ListedNpu] = []
    for block in blocks:
        keys = block.as_dict()
        if "Total Count" in keys or "Card Count" in keys:
            total = _int(command, block, "Total Count" if "Total Count" in keys else "Card Count")
            continue
        npus.append(ListedNpu(
            npu_id=_require_int(command, block, "NPU ID"),
            chip_count=_int(command, block, "Chip Count"),
            product_name=_str(block, "Product Name"),
            serial_number=_str(block, "Serial Number"),
        ))
    if total is not None and total != len(npus):
        raise NpuSmiParseError(command, 0, "", f"count says {total} NPUs but {len(npus)} are listed")
    return NpuList(total_count=total, npus=tuple(npus))


# -- npu-smi info -t board -i N [-c C] ------------------------------------------------------------


@attrs.frozen
class BoardInfo:
    """Card level ``npu-smi info -t board -i N``.

    :ivar software_version: the driver version as printed (``23.0.5``; not always semver).
    :ivar pci_device_id: lower-case hex with ``0x`` (``0xd801``); names the chip generation.
    :ivar fields: every key as printed, for keys this class does not name.
    """

    npu_id: int
    software_version: str | None
    firmware_version: str | None
    board_id: str | None
    pcie_bus_info: str | None
    slot_id: int | None
    pci_vendor_id: str | None
    pci_device_id: str | None
    chip_count: int | None
    fields: Mapping[str, str]


def parse_board(text: str, *, command: str = "npu-smi info -t board -i <N>") -> BoardInfo:
    """Parse card-level ``npu-smi info -t board -i N``. Sample: ``910A_info_-t_board_-i.txt``.

    :raises NpuSmiParseError: on a layout error or a missing ``NPU ID``.
    """
    block = _merge(parse_key_values(text, command=command))
    return BoardInfo(
        npu_id=_require_int(command, block, "NPU ID"),
        software_version=_str(block, "Software Version"),
        firmware_version=_str(block, "Firmware Version"),
        board_id=_lower(_str(block, "Board ID")),
        pcie_bus_info=_lower(_str(block, "PCIe Bus Info")),
        slot_id=_int(command, block, "Slot ID"),
        pci_vendor_id=_lower(_str(block, "PCI Vendor ID")),
        pci_device_id=_lower(_str(block, "PCI Device ID")),
        chip_count=_int(command, block, "Chip Count"),
        fields=block.as_dict(),
    )


@attrs.frozen
class ChipBoardInfo:
    """Chip level ``npu-smi info -t board -i N -c C``.

    :ivar chip_name: ``Chip Name`` (``910B4``, ``Ascend910`` on A3; anonymised ``xxx`` in some samples).
    :ivar npu_name: ``NPU Name`` (A3 only, e.g. ``9392`` -> SoC ``Ascend910_9392``).
    :ivar vdie_id: ``VDie ID`` (or ``Die ID`` on 310P) as five upper-case groups joined by ``-``
        (the HAMi device UUID convention, docs/ascend-hardware.md#hami-device-plugin-conventions); None when absent.
    :ivar ndie_id: ``NDie ID`` in the same form.
    """

    npu_id: int
    chip_id: int
    chip_type: str | None
    chip_name: str | None
    chip_version: str | None
    npu_name: str | None
    board_id: str | None
    vdie_id: str | None
    ndie_id: str | None
    chip_position_id: int | None
    pcie_bus_info: str | None
    firmware_version: str | None
    fields: Mapping[str, str]


def die_id(command: str, line_no: int, line: str, value: str) -> str | None:
    """Normalise a die ID: ``"68496E64 20E05477 ..."`` -> ``"68496E64-20E05477-..."`` (upper case).

    :raises NpuSmiParseError: when the value is not five 8-digit hex groups (or absent).
    """
    if _text.is_absent(value):
        return None
    groups = value.split()
    if len(groups) != 5 or not all(_DIE_GROUP.match(g) for g in groups):
        raise NpuSmiParseError(command, line_no, line, f"die ID {value!r} is not five 8-digit hex groups")
    return "-".join(g.upper() for g in groups)


def parse_chip_board(text: str, *, command: str = "npu-smi info -t board -i <N> -c <C>") -> ChipBoardInfo:
    """Parse chip-level ``npu-smi info -t board -i N -c C``.

    Samples: ``910A_info_-t_board_-i_-c_VDieID.txt``, ``910_info_-t_board_-i_-c_VDie_NDie_gpustack.txt``,
    ``310P_info_-t_board_-i_-c_DieID.txt`` (``Die ID``), ``910B4_A2_info_-t_board_-i_0_-c_0.txt`` and
    ``910C_A3_info_-t_board_-i_0_-c_0.txt`` (truncated by their authors).

    :raises NpuSmiParseError: on a layout error, a malformed die ID, or a missing ``NPU ID``/``Chip ID``.
    """
    block = _merge(parse_key_values(text, command=command))
    vdie_key = "VDie ID" if block.get("VDie ID") is not None else "Die ID"
    vdie = block.get(vdie_key)
    ndie = block.get("NDie ID")
    return ChipBoardInfo(
        npu_id=_require_int(command, block, "NPU ID"),
        chip_id=_require_int(command, block, "Chip ID"),
        chip_type=_str(block, "Chip Type"),
        chip_name=_str(block, "Chip Name"),
        chip_version=_str(block, "Chip Version"),
        npu_name=_str(block, "NPU Name"),
        board_id=_lower(_str(block, "Board ID")),
        vdie_id=None if vdie is None else die_id(command, *block.where(vdie_key), vdie),
        ndie_id=None if ndie is None else die_id(command, *block.where("NDie ID"), ndie),
        chip_position_id=_int(command, block, "Chip Position ID"),
        pcie_bus_info=_lower(_str(block, "PCIe Bus Info")),
        firmware_version=_str(block, "Firmware Version"),
        fields=block.as_dict(),
    )


def _lower(value: str | None) -> str | None:
    return None if value is None else value.lower()


# -- npu-smi info -t memory -i N ------------------------------------------------------------------


@attrs.frozen
class ChipMemory:
    """Memory of one chip (``chip_id`` None when the output names no chip). Sizes in MiB."""

    chip_id: int | None
    ddr_capacity_mib: int | None
    ddr_clock_mhz: int | None
    hbm_capacity_mib: int | None
    hbm_clock_mhz: int | None
    hbm_temperature_c: int | None
    hbm_manufacturer_id: str | None


@attrs.frozen
class MemoryInfo:
    """``npu-smi info -t memory -i N``."""

    npu_id: int
    chips: tuple[ChipMemory, ...]


def parse_memory(text: str, *, command: str = "npu-smi info -t memory -i <N>") -> MemoryInfo:
    """Parse ``npu-smi info -t memory -i N``. Sample: ``950_info_-t_memory.txt`` (HBM 131072 MiB).

    A block with ``Chip ID`` is one chip; without it (the 950 sample) the whole output is one chip.

    :raises NpuSmiParseError: on a layout error or a missing ``NPU ID``.
    """
    blocks = parse_key_values(text, command=command)
    npu_id: int | None = None
    chips: list[ChipMemory] = []
    for block in blocks:
        if block.get("NPU ID") is not None:
            npu_id = _require_int(command, block, "NPU ID")
        if any(k.startswith(("DDR", "HBM")) for k, *_ in block.entries):
            chips.append(ChipMemory(
                chip_id=_int(command, block, "Chip ID"),
                ddr_capacity_mib=_amount(command, block, "DDR Capacity(MB)"),
                ddr_clock_mhz=_int(command, block, "DDR Clock Speed(MHz)"),
                hbm_capacity_mib=_amount(command, block, "HBM Capacity(MB)"),
                hbm_clock_mhz=_int(command, block, "HBM Clock Speed(MHz)"),
                hbm_temperature_c=_int(command, block, "HBM Temperature(C)"),
                hbm_manufacturer_id=_lower(_str(block, "HBM Manufacturer ID")),
            ))
    if npu_id is None:
        raise NpuSmiParseError(command, 0, "", "missing 'NPU ID'")
    return MemoryInfo(npu_id=npu_id, chips=tuple(chips))


# -- npu-smi info -t usages -i N ------------------------------------------------------------------


@attrs.frozen
class ChipUsages:
    """One chip of ``-t usages``: capacities in MiB, and every ``... Usage Rate(%)`` line in ``rates``.

    ``rates`` keys are printed names without ``Usage Rate(%)``: ``DDR``, ``HBM``, ``Aicore``,
    ``Aicpu``, ``Ctrlcpu``, ``Vectorcore`` / ``Aivector``, ``DDR Bandwidth``, ``DVPP VDEC``, ...
    """

    chip_id: int
    ddr_capacity_mib: int | None
    hbm_capacity_mib: int | None
    rates: Mapping[str, int | None]


@attrs.frozen
class UsagesInfo:
    """``npu-smi info -t usages -i N``."""

    npu_id: int
    chip_count: int | None
    chips: tuple[ChipUsages, ...]


def parse_usages(text: str, *, command: str = "npu-smi info -t usages -i <N>") -> UsagesInfo:
    """Parse ``npu-smi info -t usages -i N``: the ``Chip ID`` line **ends** each chip's block.

    Samples: ``910A_info_-t_usages.txt``, ``910B1_info_-t_usages_-i_0.txt``,
    ``310P-duo_info_-t_usages_-i_1_2chips_DDR.txt`` (two chips, DDR only).

    :raises NpuSmiParseError: on a layout error, a chip block without ``Chip ID``, or a
        ``Chip Count`` that disagrees with the blocks.
    """
    blocks = parse_key_values(text, command=command)
    head, body = blocks[0], blocks[1:]
    npu_id = _require_int(command, head, "NPU ID")
    chip_count = _int(command, head, "Chip Count")
    chips = []
    for block in body:
        if block.entries[-1][0] != "Chip ID":
            line_no, line = block.entries[-1][2], block.entries[-1][3]
            raise NpuSmiParseError(command, line_no, line, "a chip block must end with 'Chip ID'")
        rates = {
            k[: -len(" Usage Rate(%)")]: _text.to_int(command, n, line, v, k)
            for k, v, n, line in block.entries if k.endswith(" Usage Rate(%)")
        }
        chips.append(ChipUsages(
            chip_id=_require_int(command, block, "Chip ID"),
            ddr_capacity_mib=_amount(command, block, "DDR Capacity(MB)"),
            hbm_capacity_mib=_amount(command, block, "HBM Capacity(MB)"),
            rates=rates,
        ))
    _check_count(command, head, chip_count, len(chips))
    return UsagesInfo(npu_id=npu_id, chip_count=chip_count, chips=tuple(chips))


def _check_count(command: str, head: KeyValueBlock, expected: int | None, found: int) -> None:
    if expected is not None and expected != found:
        line_no, line = head.where("Chip Count")
        raise NpuSmiParseError(command, line_no, line, f"says {expected} chips but {found} are printed")


# -- npu-smi info -t common -i N ------------------------------------------------------------------


@attrs.frozen
class ChipCommon:
    """One chip of ``-t common``. ``aicore_count`` is absent on 310P (no ``Aicore Count`` line)."""

    chip_id: int
    memory_usage_percent: int | None
    hbm_usage_percent: int | None
    aicore_usage_percent: int | None
    aicore_freq_mhz: int | None
    aicore_cur_freq_mhz: int | None
    aicore_count: int | None
    temperature_c: int | None
    power_w: float | None


@attrs.frozen
class McuCommon:
    """The trailing ``Chip Name : mcu`` block of ``-t common``."""

    temperature_c: int | None
    power_w: float | None


@attrs.frozen
class CommonInfo:
    """``npu-smi info -t common -i N``."""

    npu_id: int
    chip_count: int | None
    chips: tuple[ChipCommon, ...]
    mcu: McuCommon | None


def parse_common(text: str, *, command: str = "npu-smi info -t common -i <N>") -> CommonInfo:
    """Parse ``npu-smi info -t common -i N``: blocks start with ``Chip ID``; ``Chip Name : mcu`` ends it.

    Samples: ``910A_info_-t_common_-i_0_with_mcu.txt`` (Aicore Count 32), ``910B1_info_-t_common_-i_1.txt``
    (Aicore Count 24), ``310P-duo_info_-t_common_-i_1_2chips.txt`` (two chips, no Aicore Count).

    :raises NpuSmiParseError: on a layout error, an unknown block, or a ``Chip Count`` mismatch.
    """
    blocks = parse_key_values(text, command=command)
    head, body = blocks[0], blocks[1:]
    npu_id = _require_int(command, head, "NPU ID")
    chip_count = _int(command, head, "Chip Count")
    chips: list[ChipCommon] = []
    mcu: McuCommon | None = None
    for block in body:
        first = block.entries[0]
        if first[0] == "Chip Name" and first[1].lower() == "mcu":
            mcu = McuCommon(
                temperature_c=_int(command, block, "Temperature(C)"),
                power_w=_float(command, block, "NPU Real-time Power(W)"),
            )
        elif first[0] == "Chip ID":
            chips.append(ChipCommon(
                chip_id=_require_int(command, block, "Chip ID"),
                memory_usage_percent=_int(command, block, "Memory Usage Rate(%)"),
                hbm_usage_percent=_int(command, block, "HBM Usage Rate(%)"),
                aicore_usage_percent=_int(command, block, "Aicore Usage Rate(%)"),
                aicore_freq_mhz=_int(command, block, "Aicore Freq(MHZ)"),
                aicore_cur_freq_mhz=_int(command, block, "Aicore curFreq(MHZ)"),
                aicore_count=_amount(command, block, "Aicore Count"),
                temperature_c=_int(command, block, "Temperature(C)"),
                power_w=_float(command, block, "NPU Real-time Power(W)"),
            ))
        else:
            raise NpuSmiParseError(command, first[2], first[3], "a block must start with 'Chip ID' or 'Chip Name'")
    _check_count(command, head, chip_count, len(chips))
    return CommonInfo(npu_id=npu_id, chip_count=chip_count, chips=tuple(chips), mcu=mcu)


# -- npu-smi info -t health -i N -c C -------------------------------------------------------------


@attrs.frozen
class HealthInfo:
    """``npu-smi info -t health``: ``status`` is ``OK``, ``Warning``, ``Alarm`` or ``Critical``
    (chip values in the npu-smi source ``npu_chip_info.c``); error code/information None when ``NA``."""

    status: str
    error_code: str | None
    error_information: str | None


def parse_health(text: str, *, command: str = "npu-smi info -t health -i <N> -c <C>") -> HealthInfo:
    """Parse ``npu-smi info -t health -i N -c C``. Sample: ``910A_info_-t_health.txt``.

    :raises NpuSmiParseError: when ``Health Status`` is missing.
    """
    block = _merge(parse_key_values(text, command=command))
    status = _str(block, "Health Status")
    if status is None:
        raise NpuSmiParseError(command, *block.where("Health Status"), "missing 'Health Status'")
    return HealthInfo(
        status=status,
        error_code=_str(block, "Error Code"),
        error_information=_str(block, "Error Information"),
    )


# -- npu-smi info -t device-share -----------------------------------------------------------------


@attrs.frozen
class DeviceShare:
    """Device-share mode of one chip (needed by HAMi soft splitting, docs/ascend-hardware.md#device-share-mode)."""

    npu_id: int
    chip_id: int
    enabled: bool


def parse_device_share(text: str, *, command: str = "npu-smi info -t device-share") -> tuple[DeviceShare, ...]:
    """Parse ``npu-smi info -t device-share [-i N]``: per NPU ``NPU ID``/``Chip Count``, then per chip
    ``Device-share Status`` followed by ``Chip ID``. Sample: ``310P3_info_-t_device-share.txt``.

    :raises NpuSmiParseError: on a chip block before any NPU, a missing or non-boolean status.
    """
    out: list[DeviceShare] = []
    npu_id: int | None = None
    for block in parse_key_values(text, command=command):
        if block.get("NPU ID") is not None:
            npu_id = _require_int(command, block, "NPU ID")
            continue
        if npu_id is None:
            raise NpuSmiParseError(command, block.entries[0][2], block.entries[0][3], "chip block before 'NPU ID'")
        raw = block.get("Device-share Status")
        line_no, line = block.where("Device-share Status")
        enabled = None if raw is None else _text.to_bool(command, line_no, line, raw, "Device-share Status")
        if enabled is None:
            raise NpuSmiParseError(command, line_no, line, "missing 'Device-share Status'")
        out.append(DeviceShare(npu_id=npu_id, chip_id=_require_int(command, block, "Chip ID"), enabled=enabled))
    return tuple(out)
