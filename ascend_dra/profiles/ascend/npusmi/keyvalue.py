"""Parsers for npu-smi's key/value outputs: ``info -l``, ``-t board``, ``-t device-share``,
``-t vnpu-cfg-recover`` and the generic form of any other ``-t``; ``-t memory``, ``-t usages``,
``-t common`` and ``-t health`` are in :mod:`.readings`.

Real npu-smi prints ``\\t%-30s : %s``; published samples show a TAB, 8 spaces or no indent, and
sometimes trailing spaces (docs/ascend-hardware.md#npu-smi-output-format), so keys and values are stripped. A blank
line separates blocks. Every unit is the one npu-smi prints: memory in **MiB** (npu-smi says
``MB``; the numbers are binary, e.g. ``HBM Capacity(MB) : 65536`` for 64 GiB), rates in percent,
frequencies in MHz, power in W, temperature in °C. Unknown keys are kept in ``fields`` (newer
npu-smi adds keys); a line that is not ``key : value``, a key printed twice in one block, and a
number outside its range (:mod:`.bounds`) raise :class:`NpuSmiParseError`.
Samples: ``tests/fixtures/npu-smi/`` (real outputs; provenance in its ``SOURCES.md``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from ascend_dra.profiles.ascend.npusmi import _text
from ascend_dra.profiles.ascend.npusmi import bounds as b
from ascend_dra.profiles.ascend.npusmi.bounds import Bounds
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError

__all__ = (
    "BoardInfo",
    "ChipBoardInfo",
    "DeviceShare",
    "KeyValueBlock",
    "ListedNpu",
    "NpuList",
    "die_id",
    "parse_board",
    "parse_chip_board",
    "parse_device_share",
    "parse_key_values",
    "parse_list",
    "parse_vnpu_cfg_recover",
)

_DIE_GROUP = re.compile(r"^[0-9A-Fa-f]{8}$")
# domain:bus:device.function, as npu-smi prints a Bus-Id (the pattern of .tables)
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")


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

    def first_key(self, *keys: str) -> str:
        """The first of ``keys`` this block prints (the first of all when it prints none): one
        field under the spellings of several generations (``VDie ID`` / ``DDie ID`` / ``Die ID``)."""
        return next((k for k in keys if self.get(k) is not None), keys[0])

    def where(self, key: str) -> tuple[int, str]:
        """``(line_no, line)`` of ``key`` (of the block's first line when absent; ``(0, "")`` for an empty block)."""
        for k, _, line_no, line in self.entries:
            if k == key:
                return line_no, line
        return (self.entries[0][2], self.entries[0][3]) if self.entries else (0, "")

    def as_dict(self) -> dict[str, str]:
        """Keys to values (the first occurrence wins)."""
        out: dict[str, str] = {}
        for k, v, _, _ in self.entries:
            out.setdefault(k, v)
        return out

    @staticmethod
    def merged(blocks: tuple[KeyValueBlock, ...], command: str) -> KeyValueBlock:
        """One block of every entry of ``blocks``, in order (for outputs whose blocks are one record).

        :raises NpuSmiParseError: naming the second line of a key printed twice (in one record, as in one block).
        """
        block = KeyValueBlock(tuple(entry for block in blocks for entry in block.entries))
        _once_each(command, block.entries)
        return block

    def text(self, key: str) -> str | None:
        """The value of ``key``; None when missing or one of npu-smi's "no value" spellings."""
        value = self.get(key)
        return None if value is None else _text.text_or_none(value)

    def text_lower(self, key: str) -> str | None:
        """:meth:`text` in lower case (hex IDs, printed in either case by different drivers)."""
        value = self.text(key)
        return None if value is None else value.lower()

    def integer(self, command: str, key: str, bounds: Bounds) -> int | None:
        """The value of ``key`` as an int within ``bounds``; None when missing or absent.

        :raises NpuSmiParseError: naming ``command`` and the line, when it is not an integer within ``bounds``.
        """
        value = self.get(key)
        if value is None:
            return None
        return _text.to_int(command, *self.where(key), value, key, bounds)

    def required_integer(self, command: str, key: str, bounds: Bounds) -> int:
        """:meth:`integer`, which must be present.

        :raises NpuSmiParseError: when missing, absent or not an integer within ``bounds``.
        """
        value = self.integer(command, key, bounds)
        if value is None:
            raise NpuSmiParseError(command, *self.where(key), f"missing {_text.shown(key)!r}")
        return value

    def amount(self, command: str, key: str, bounds: Bounds) -> int | None:
        """A capacity or count: like :meth:`integer`, and DCMI's 8255 "not supported" reads as None (:mod:`._text`)."""
        value = self.get(key)
        if value is None:
            return None
        return _text.to_amount(command, *self.where(key), value, key, bounds)

    def number(self, command: str, key: str, bounds: Bounds) -> float | None:
        """The value of ``key`` as a float within ``bounds`` (watts, say); None when missing or absent.

        :raises NpuSmiParseError: when it is not a number within ``bounds``.
        """
        value = self.get(key)
        if value is None:
            return None
        return _text.to_float(command, *self.where(key), value, key, bounds)


def parse_key_values(text: str, *, command: str = "npu-smi info -t <type>") -> tuple[KeyValueBlock, ...]:
    """Split a key/value output into blocks.

    A key is everything before the line's first ``:``, and is followed by blank space (npu-smi
    pads it to 30 characters); the value is what follows the ``:`` and one blank, stripped.

    :return: the non-empty blocks in output order.
    :raises NpuSmiParseError: on a non-blank line that is not ``key : value``, a key printed twice in
        one block, a line longer than :data:`._text.MAX_LINE`, or an empty output.
    """
    blocks: list[KeyValueBlock] = []
    current: list[tuple[str, str, int, str]] = []
    for line_no, line in _text.numbered_lines(command, text):
        if not line.strip():
            if current:
                blocks.append(KeyValueBlock(tuple(current)))
                current = []
            continue
        entry = _key_value(line)
        if entry is None:
            raise NpuSmiParseError(command, line_no, line, "expected 'key : value'")
        current.append((*entry, line_no, line))
    if current:
        blocks.append(KeyValueBlock(tuple(current)))
    if not blocks:
        raise NpuSmiParseError(command, 0, "", "empty output")
    for block in blocks:
        _once_each(command, block.entries)
    return tuple(blocks)


def _key_value(line: str) -> tuple[str, str] | None:
    """``(key, value)`` of a ``key : value`` line, None when it is not one.

    Read by position, not by the regex ``^\\s*([^:]*?[^:\\s])\\s+:(?:\\s(.*))?$`` it replaces (the
    same lines), which took time quadratic in the length of a line of blanks and no ``:``.
    """
    before, colon, after = line.partition(":")
    key = before.strip()
    if not colon or not key or before == before.rstrip() or (after and not after[0].isspace()):
        return None
    return key, after.strip()


def _once_each(command: str, entries: tuple[tuple[str, str, int, str], ...]) -> None:
    """A block holds each key once: a second one is two records run together, or a repeated line."""
    once = _text.Once(command)
    for key, _, line_no, line in entries:
        once.add(key, line_no, line, f"{_text.shown(key)!r} line")


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

    :raises NpuSmiParseError: when the count disagrees with the NPUs listed, a block has no ``NPU ID``,
        an NPU or the count is printed twice, or a number is out of its range (:mod:`.bounds`).
    """
    blocks = parse_key_values(text, command=command)
    total: int | None = None
    npus: list[ListedNpu] = []
    counted, listed = _text.Once(command), _text.Once(command)
    for block in blocks:
        keys = block.as_dict()
        if "Total Count" in keys or "Card Count" in keys:
            key = "Total Count" if "Total Count" in keys else "Card Count"
            counted.add("count", *block.where(key), f"{_text.shown(key)!r} line")
            total = block.integer(command, key, b.NPUS)
            continue
        npu_id = block.required_integer(command, "NPU ID", b.NPU_ID)
        listed.add(npu_id, *block.where("NPU ID"), f"NPU {npu_id}")
        npus.append(ListedNpu(
            npu_id=npu_id,
            chip_count=block.integer(command, "Chip Count", b.CHIPS_PER_NPU),
            product_name=block.text("Product Name"),
            serial_number=block.text("Serial Number"),
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
    :ivar ddie_id: ``DDie ID`` (950 only; its ``-i`` names one device) in the form of
        :attr:`ChipBoardInfo.vdie_id`; None when absent.
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
    ddie_id: str | None
    fields: Mapping[str, str]


def parse_board(text: str, *, command: str = "npu-smi info -t board -i <N>") -> BoardInfo:
    """Parse card-level ``npu-smi info -t board -i N``. Samples: ``910A_info_-t_board_-i.txt``,
    ``950_info_-t_board_-i.txt`` (``DDie ID``).

    :raises NpuSmiParseError: on a layout error, a malformed ``DDie ID`` or ``PCIe Bus Info``, a number
        out of its range (:mod:`.bounds`) or a missing ``NPU ID``.
    """
    block = KeyValueBlock.merged(parse_key_values(text, command=command), command)
    ddie = block.get("DDie ID")
    return BoardInfo(
        npu_id=block.required_integer(command, "NPU ID", b.NPU_ID),
        software_version=block.text("Software Version"),
        firmware_version=block.text("Firmware Version"),
        board_id=block.text_lower("Board ID"),
        pcie_bus_info=_pci_address(command, block),
        slot_id=block.integer(command, "Slot ID", b.SLOT_ID),
        pci_vendor_id=block.text_lower("PCI Vendor ID"),
        pci_device_id=block.text_lower("PCI Device ID"),
        chip_count=block.integer(command, "Chip Count", b.CHIPS_PER_NPU),
        ddie_id=None if ddie is None else die_id(command, *block.where("DDie ID"), ddie, "DDie ID"),
        fields=block.as_dict(),
    )


@attrs.frozen
class ChipBoardInfo:
    """Chip level ``npu-smi info -t board -i N -c C``.

    :ivar chip_name: ``Chip Name`` (``910B4``, ``Ascend910`` on A3; anonymised ``xxx`` in some samples).
    :ivar npu_name: ``NPU Name`` (A3 only, e.g. ``9392`` -> SoC ``Ascend910_9392``).
    :ivar vdie_id: ``VDie ID`` (``DDie ID`` on the 950, ``Die ID`` on 310P) as five upper-case
        groups joined by ``-`` (the HAMi device UUID convention,
        docs/ascend-hardware.md#hami-device-plugin-conventions); None when absent.
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


def die_id(command: str, line_no: int, line: str, value: str, what: str = "die ID") -> str | None:
    """Normalise a die ID: ``"68496E64 20E05477 ..."`` -> ``"68496E64-20E05477-..."`` (upper case).

    Five groups (``DSMI_SOC_DIE_LEN``) of ``%08X`` in every spelling (``VDie``/``NDie``/``DDie``/``Die ID``).
    All zeros or all ones is None, as an absent value: no chip has that die ID, and published as a
    ``uuid`` it would name a chip by a value any chip may print.

    :param what: the key, named in the error.
    :raises NpuSmiParseError: when the value is not five 8-digit hex groups (or absent).
    """
    if _text.is_absent(value):
        return None
    groups = value.split()
    if len(groups) != 5 or not all(_DIE_GROUP.match(g) for g in groups):
        raise NpuSmiParseError(command, line_no, line, f"{what}: {_text.shown(value)!r} is not five 8-digit hex groups")
    if {g.upper() for g in groups} in ({"00000000"}, {"FFFFFFFF"}):
        return None
    return "-".join(g.upper() for g in groups)


def _pci_address(command: str, block: KeyValueBlock) -> str | None:
    """``PCIe Bus Info`` in lower case, None when absent (discovery's fallback for a chip's Bus-Id).

    :raises NpuSmiParseError: when it is not a PCI address: it names a sysfs path and is published.
    """
    value = block.text_lower("PCIe Bus Info")
    if value is not None and not _PCI_ADDRESS.fullmatch(value):
        raise NpuSmiParseError(command, *block.where("PCIe Bus Info"),
                               f"PCIe Bus Info: {_text.shown(value)!r} is not a PCI address (dddd:bb:dd.f) or NA")
    return value


def _without_chip_version(value: str) -> str:
    """The groups of a 310/310B ``Die ID``: npu-smi prints the chip version and a comma before them
    (``Die ID : V1, 409921D4 2140A100 ...``; ``print_die_id_info`` prints ``chip_ver`` there for
    ``NPU_CHIP_310`` and ``NPU_CHIP_310B``, and so does the board CPU's block). Other values unchanged."""
    version, comma, groups = value.partition(",")
    if comma and version.strip() and len(version.split()) == 1:
        return groups.strip()
    return value


def parse_chip_board(text: str, *, command: str = "npu-smi info -t board -i <N> -c <C>") -> ChipBoardInfo:
    """Parse chip-level ``npu-smi info -t board -i N -c C``.

    Samples: ``910A_info_-t_board_-i_-c_VDieID.txt``, ``910_info_-t_board_-i_-c_VDie_NDie_gpustack.txt``,
    ``310P_info_-t_board_-i_-c_DieID.txt`` (``Die ID``), ``910B4_A2_info_-t_board_-i_0_-c_0.txt`` and
    ``910C_A3_info_-t_board_-i_0_-c_0.txt`` (truncated by their authors). On 310 and 310B the
    ``Die ID`` value starts with the chip version and a comma (source only, :func:`_without_chip_version`),
    which is dropped. ``DDie ID`` (950) is read
    as the npu-smi source prints it (``print_die_id_info``); no published chip-level 950 sample
    exists, since the 950's npu-smi takes no ``-c`` (its card-level ``DDie ID`` is in :func:`parse_board`).

    :raises NpuSmiParseError: on a layout error, a malformed die ID or ``PCIe Bus Info``, a number out
        of its range (:mod:`.bounds`), or a missing ``NPU ID``/``Chip ID``.
    """
    block = KeyValueBlock.merged(parse_key_values(text, command=command), command)
    vdie_key = block.first_key("VDie ID", "DDie ID", "Die ID")
    vdie = block.get(vdie_key)
    if vdie_key == "Die ID" and vdie is not None:
        vdie = _without_chip_version(vdie)
    ndie = block.get("NDie ID")
    return ChipBoardInfo(
        npu_id=block.required_integer(command, "NPU ID", b.NPU_ID),
        chip_id=block.required_integer(command, "Chip ID", b.CHIP_ID),
        chip_type=block.text("Chip Type"),
        chip_name=block.text("Chip Name"),
        chip_version=block.text("Chip Version"),
        npu_name=block.text("NPU Name"),
        board_id=block.text_lower("Board ID"),
        vdie_id=None if vdie is None else die_id(command, *block.where(vdie_key), vdie, vdie_key),
        ndie_id=None if ndie is None else die_id(command, *block.where("NDie ID"), ndie, "NDie ID"),
        chip_position_id=block.integer(command, "Chip Position ID", b.CHIP_ID),
        pcie_bus_info=_pci_address(command, block),
        firmware_version=block.text("Firmware Version"),
        fields=block.as_dict(),
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

    :raises NpuSmiParseError: on a chip block before any NPU, a missing or non-boolean status, an NPU
        or a chip printed twice, or an ID out of its range (:mod:`.bounds`).
    """
    out: list[DeviceShare] = []
    npu_id: int | None = None
    once = _text.Once(command)
    for block in parse_key_values(text, command=command):
        if block.get("NPU ID") is not None:
            npu_id = block.required_integer(command, "NPU ID", b.NPU_ID)
            once.add(("npu", npu_id), *block.where("NPU ID"), f"NPU {npu_id}")
            continue
        if npu_id is None:
            raise NpuSmiParseError(command, block.entries[0][2], block.entries[0][3], "chip block before 'NPU ID'")
        raw = block.get("Device-share Status")
        line_no, line = block.where("Device-share Status")
        enabled = None if raw is None else _text.to_bool(command, line_no, line, raw, "Device-share Status")
        if enabled is None:
            raise NpuSmiParseError(command, line_no, line, "missing 'Device-share Status'")
        chip_id = block.required_integer(command, "Chip ID", b.CHIP_ID)
        once.add(("chip", npu_id, chip_id), *block.where("Chip ID"), f"chip {chip_id} of NPU {npu_id}")
        out.append(DeviceShare(npu_id=npu_id, chip_id=chip_id, enabled=enabled))
    return tuple(out)


# -- npu-smi info -t vnpu-cfg-recover --------------------------------------------------------------

VNPU_CFG_RECOVER = "VNPU config recover mode"


def parse_vnpu_cfg_recover(text: str, *, command: str = "npu-smi info -t vnpu-cfg-recover") -> bool:
    """Parse ``npu-smi info -t vnpu-cfg-recover``: ``VNPU config recover mode : Enable`` (or ``Disable``).

    Enabled, its default, the device keeps its vNPUs' configuration through a restart, so they exist
    again after a reboot (docs/ascend-hardware.md#hard-vnpu-templates; the line as MindCluster "Creating vNPUs"
    prints it, https://www.hiascend.com/document/detail/en/mindcluster/730/clustersched/schedulingug/cpaug_0011.html).

    :return: True for ``Enable``, False for ``Disable``.
    :raises NpuSmiParseError: when the line is missing or its value is neither ``Enable`` nor ``Disable``.
    """
    block = KeyValueBlock.merged(parse_key_values(text, command=command), command)
    raw = block.get(VNPU_CFG_RECOVER)
    line_no, line = block.where(VNPU_CFG_RECOVER)
    if raw is None:
        raise NpuSmiParseError(command, line_no, line, f"missing {VNPU_CFG_RECOVER!r}")
    if raw.lower() not in ("enable", "disable"):
        raise NpuSmiParseError(command, line_no, line,
                               f"{VNPU_CFG_RECOVER}: {_text.shown(raw)!r} is not Enable or Disable")
    return raw.lower() == "enable"
