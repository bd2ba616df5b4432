"""Parsers for npu-smi's per-chip readings: ``-t memory``, ``-t usages``, ``-t common``, ``-t health``.

Key/value outputs read with :func:`.keyvalue.parse_key_values` (its module docstring gives the
layout rules). Memory is in **MiB** (npu-smi says ``MB``), rates in percent, frequencies in MHz,
power in W, temperature in °C. Samples: ``tests/fixtures/npu-smi/`` (provenance in ``SOURCES.md``).

Per generation (the npu-smi printing code ``npu_info_print.c``, ``npu_card_info.c``;
docs/ascend-discovery.md#npu-smi-per-chip-readings): the 310/310B print their memory without a
``DDR`` prefix (``Memory Capacity(MB)`` in ``-t usages``, ``Capacity(MB)``/``Clock Speed(MHz)`` in
``-t memory``) and put ``Chip ID`` **before** a chip's lines, where the others put it after; the
950's npu-smi takes one device per ``-i`` and prints neither ``Chip Count`` nor ``Chip ID``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from ascend_dra.profiles.ascend.npusmi import _text
from ascend_dra.profiles.ascend.npusmi import bounds as b
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.npusmi.keyvalue import KeyValueBlock, parse_key_values

__all__ = (
    "BoardCpuCommon",
    "ChipCommon",
    "ChipMemory",
    "ChipUsages",
    "CommonInfo",
    "HealthInfo",
    "McuCommon",
    "MemoryInfo",
    "UsagesInfo",
    "parse_common",
    "parse_health",
    "parse_memory",
    "parse_usages",
)


#: Key/value keys whose first present spelling is read: the 310/310B print their memory (DDR,
#: LPDDR on the 310B) without the ``DDR`` prefix (``print_ddr_info``, ``print_chip_memory_usages_info``).
_DDR_CAPACITY = ("DDR Capacity(MB)", "Capacity(MB)")
_DDR_CLOCK = ("DDR Clock Speed(MHz)", "Clock Speed(MHz)")
_USAGES_DDR_CAPACITY = ("DDR Capacity(MB)", "Memory Capacity(MB)")
#: Power of the mcu and 3559 blocks of ``-t common``: ``NPU Real-time Power(W)`` (mcu, 310P and
#: samples of other generations), ``Power Dissipation(W)`` (mcu on 310/310B, and the 3559).
_BOARD_POWER = ("NPU Real-time Power(W)", "Power Dissipation(W)")
#: ``-t usages`` lines read into ``rates`` under another name than ``<name> Usage Rate(%)``.
_OTHER_RATES = {"NPU Utilization(%)": "NPU Utilization"}


# -- npu-smi info -t memory -i N ------------------------------------------------------------------


@attrs.frozen
class ChipMemory:
    """Memory of one chip (``chip_id`` None when the output names no chip). Sizes in MiB.

    :ivar ddr_capacity_mib: ``DDR Capacity(MB)``; on 310/310B ``Capacity(MB)`` (what the ``npu-smi
        info`` table prints as the memory total; the 310B's ``Total Capacity(MB)`` stays unread).
    :ivar ddr_clock_mhz: ``DDR Clock Speed(MHz)``; on 310/310B ``Clock Speed(MHz)``.
    """

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
    """Parse ``npu-smi info -t memory -i N``. Samples: ``950_info_-t_memory.txt`` (HBM 131072 MiB),
    ``310B_info_-t_memory_-i_0.txt`` (``Capacity(MB)``/``Clock Speed(MHz)``, no ``DDR`` prefix).

    A block with ``Chip ID`` is one chip; without it (the 950 sample) the whole output is one chip.

    :raises NpuSmiParseError: on a layout error, a missing ``NPU ID``, a second ``NPU ID`` or chip, or
        a number out of its range (:mod:`.bounds`).
    """
    blocks = parse_key_values(text, command=command)
    npu_id: int | None = None
    chips: list[ChipMemory] = []
    once = _text.Once(command)
    for block in blocks:
        if block.get("NPU ID") is not None:
            once.add("npu", *block.where("NPU ID"), "'NPU ID' line")
            npu_id = block.required_integer(command, "NPU ID", b.NPU_ID)
        if any(k.startswith(("DDR", "HBM")) or k in _DDR_CAPACITY + _DDR_CLOCK for k, *_ in block.entries):
            chip_id = block.integer(command, "Chip ID", b.CHIP_ID)
            once.add(("chip", chip_id), *block.where("Chip ID"),
                     "block without 'Chip ID'" if chip_id is None else f"chip {chip_id}")
            chips.append(ChipMemory(
                chip_id=chip_id,
                ddr_capacity_mib=block.amount(command, block.first_key(*_DDR_CAPACITY), b.MEMORY_MIB),
                ddr_clock_mhz=block.integer(command, block.first_key(*_DDR_CLOCK), b.FREQUENCY_MHZ),
                hbm_capacity_mib=block.amount(command, "HBM Capacity(MB)", b.MEMORY_MIB),
                hbm_clock_mhz=block.integer(command, "HBM Clock Speed(MHz)", b.FREQUENCY_MHZ),
                hbm_temperature_c=block.integer(command, "HBM Temperature(C)", b.TEMPERATURE_C),
                hbm_manufacturer_id=block.text_lower("HBM Manufacturer ID"),
            ))
    if npu_id is None:
        raise NpuSmiParseError(command, 0, "", "missing 'NPU ID'")
    return MemoryInfo(npu_id=npu_id, chips=tuple(chips))


# -- npu-smi info -t usages -i N ------------------------------------------------------------------


@attrs.frozen
class ChipUsages:
    """One chip of ``-t usages``: capacities in MiB, and every ``... Usage Rate(%)`` line in ``rates``.

    ``rates`` keys are printed names without ``Usage Rate(%)``: ``DDR``, ``HBM``, ``Aicore``,
    ``Aicpu``, ``Ctrlcpu``, ``Vectorcore`` / ``Aivector``, ``DDR Bandwidth``, ``DVPP VDEC``,
    ``Memory`` / ``Memory Bandwidth`` (310/310B), ...; and ``NPU Utilization`` for the
    ``NPU Utilization(%)`` line (910B, 910_93, 950). All in percent.

    :ivar chip_id: None on the 950, whose output names no chip.
    :ivar ddr_capacity_mib: ``DDR Capacity(MB)``; on 310/310B ``Memory Capacity(MB)``.
    """

    chip_id: int | None
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
    """Parse ``npu-smi info -t usages -i N``: a head block (``NPU ID``, ``Chip Count``), then one
    block per chip that ``Chip ID`` **ends** (310/310B: **starts**). The 950 prints one block, ``NPU
    ID`` and the readings of its one chip (``chip_id`` None).

    Samples: ``910A_info_-t_usages.txt``, ``910B1_info_-t_usages_-i_0.txt``,
    ``310P-duo_info_-t_usages_-i_1_2chips_DDR.txt`` (two chips, DDR only),
    ``310B_info_-t_usages_-i_0.txt`` (``Chip ID`` first, ``Memory Capacity(MB)``),
    ``950_info_-t_usages_-i_0.txt`` (one block, ``NPU Utilization(%)``).

    :raises NpuSmiParseError: on a layout error, a chip block without ``Chip ID`` at either end, a
        value that is not an integer within its range (:mod:`.bounds`) or NA, a chip printed twice,
        or a ``Chip Count`` that disagrees with the blocks.
    """
    blocks = parse_key_values(text, command=command)
    head, body = blocks[0], blocks[1:]
    npu_id = head.required_integer(command, "NPU ID", b.NPU_ID)
    chip_count = head.integer(command, "Chip Count", b.CHIPS_PER_NPU)
    chips = []
    once = _text.Once(command)
    if not body and chip_count is None and len(head.entries) > 1:
        chips.append(_chip_usages(command, head, None))  # the 950: one device, no Chip ID
    for block in body:
        if "Chip ID" not in (block.entries[0][0], block.entries[-1][0]):
            line_no, line = block.entries[-1][2], block.entries[-1][3]
            raise NpuSmiParseError(command, line_no, line, "a chip block must start or end with 'Chip ID'")
        chip_id = block.required_integer(command, "Chip ID", b.CHIP_ID)
        once.add(chip_id, *block.where("Chip ID"), f"chip {chip_id}")
        chips.append(_chip_usages(command, block, chip_id))
    _check_count(command, head, chip_count, len(chips))
    return UsagesInfo(npu_id=npu_id, chip_count=chip_count, chips=tuple(chips))


def _chip_usages(command: str, block: KeyValueBlock, chip_id: int | None) -> ChipUsages:
    rates = {
        k[: -len(" Usage Rate(%)")] if k.endswith(" Usage Rate(%)") else _OTHER_RATES[k]:
            _text.to_int(command, n, line, v, k, b.PERCENT)
        for k, v, n, line in block.entries if k.endswith(" Usage Rate(%)") or k in _OTHER_RATES
    }
    return ChipUsages(
        chip_id=chip_id,
        ddr_capacity_mib=block.amount(command, block.first_key(*_USAGES_DDR_CAPACITY), b.MEMORY_MIB),
        hbm_capacity_mib=block.amount(command, "HBM Capacity(MB)", b.MEMORY_MIB),
        rates=rates,
    )


def _check_count(command: str, head: KeyValueBlock, expected: int | None, found: int) -> None:
    if expected is not None and expected != found:
        line_no, line = head.where("Chip Count")
        raise NpuSmiParseError(command, line_no, line, f"says {expected} chips but {found} are printed")


# -- npu-smi info -t common -i N ------------------------------------------------------------------


@attrs.frozen
class ChipCommon:
    """One chip of ``-t common``. ``aicore_count`` is absent on 310P (no ``Aicore Count`` line).

    :ivar chip_id: None on the 950, whose output names no chip (one device per ``-i``).
    """

    chip_id: int | None
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
    """The ``Chip Name : mcu`` block of ``-t common`` (``MCU`` on 310/310B; ``print_mcu_common_info``).

    :ivar power_w: ``NPU Real-time Power(W)``; on 310/310B ``Power Dissipation(W)``.
    """

    temperature_c: int | None
    power_w: float | None


@attrs.frozen
class BoardCpuCommon:
    """The ``Chip Name : 3559`` block of ``-t common``: the board's HiSilicon 3559 CPU, which some
    cards carry beside their NPU chips (``print_cpu_common_info``, printed after the mcu block when
    DCMI's ``dcmi_get_device_id_in_card`` names a CPU). It is no NPU chip.

    :ivar power_w: ``Power Dissipation(W)``.
    """

    temperature_c: int | None
    power_w: float | None


@attrs.frozen
class CommonInfo:
    """``npu-smi info -t common -i N``.

    :ivar cpu: the board CPU's block (:class:`BoardCpuCommon`), None when not printed.
    """

    npu_id: int
    chip_count: int | None
    chips: tuple[ChipCommon, ...]
    mcu: McuCommon | None
    cpu: BoardCpuCommon | None = None


def parse_common(text: str, *, command: str = "npu-smi info -t common -i <N>") -> CommonInfo:
    """Parse ``npu-smi info -t common -i N``: a head block (``NPU ID``, ``Chip Count``), then blocks
    that start with ``Chip ID``, then the board's ``Chip Name : mcu`` block and ``Chip Name : 3559``
    block, each only when the card has one (``print_common_info``, ``print_mcu_common_info``,
    ``print_cpu_common_info`` in npu_info_print.c). The 950 prints one block, ``NPU ID`` and the
    readings of its one chip (``chip_id`` None), as in ``-t usages``.

    Samples: ``910A_info_-t_common_-i_0_with_mcu.txt`` (Aicore Count 32), ``910B1_info_-t_common_-i_1.txt``
    (Aicore Count 24), ``310P-duo_info_-t_common_-i_1_2chips.txt`` (two chips, no Aicore Count),
    ``950_info_-t_common_-i_0.txt`` (one block, Aicore Count 32), ``910A_info_-t_common_-i_0_no-blank-line.txt``
    (the head and the chip in one block). The ``3559`` block is known from the source only
    (``tests/unit/test_ascend_readings.py``).

    :raises NpuSmiParseError: on a layout error, a block that starts otherwise (another ``Chip Name``),
        a second mcu or 3559 block, a chip printed twice, a value that is not a number within its
        range (:mod:`.bounds`), or a ``Chip Count`` mismatch.
    """
    blocks = parse_key_values(text, command=command)
    head, body = blocks[0], blocks[1:]
    keys = [k for k, *_ in head.entries]
    if "Chip ID" in keys[1:]:  # no blank line before the first chip block (a document's rendering dropped it)
        at = keys.index("Chip ID", 1)
        head, body = KeyValueBlock(head.entries[:at]), [KeyValueBlock(head.entries[at:]), *body]
    npu_id = head.required_integer(command, "NPU ID", b.NPU_ID)
    chip_count = head.integer(command, "Chip Count", b.CHIPS_PER_NPU)
    once = _text.Once(command)
    chips: list[ChipCommon] = []
    board: dict[str, tuple[int | None, float | None]] = {}  # "mcu" / "3559" -> (temperature, power)
    if not body and chip_count is None and len(head.entries) > 1:
        chips.append(_chip_common(command, head, None))  # the 950: one device, no Chip ID
    for block in body:
        key, value, line_no, line = block.entries[0]
        if key == "Chip ID":
            chip_id = block.required_integer(command, "Chip ID", b.CHIP_ID)
            once.add(chip_id, line_no, line, f"chip {chip_id}")
            chips.append(_chip_common(command, block, chip_id))
            continue
        name = value.lower()
        if key != "Chip Name" or name not in ("mcu", "3559"):
            raise NpuSmiParseError(command, line_no, line,
                                   "a block must start with 'Chip ID' or 'Chip Name : mcu' or 'Chip Name : 3559'")
        if name in board:
            raise NpuSmiParseError(command, line_no, line, f"a second 'Chip Name : {name}' block")
        board[name] = (block.integer(command, "Temperature(C)", b.TEMPERATURE_C),
                       block.number(command, block.first_key(*_BOARD_POWER), b.POWER_W))
    _check_count(command, head, chip_count, len(chips))
    mcu, cpu = board.get("mcu"), board.get("3559")
    return CommonInfo(npu_id=npu_id, chip_count=chip_count, chips=tuple(chips),
                      mcu=None if mcu is None else McuCommon(*mcu), cpu=None if cpu is None else BoardCpuCommon(*cpu))


def _chip_common(command: str, block: KeyValueBlock, chip_id: int | None) -> ChipCommon:
    return ChipCommon(
        chip_id=chip_id,
        memory_usage_percent=block.integer(command, "Memory Usage Rate(%)", b.PERCENT),
        hbm_usage_percent=block.integer(command, "HBM Usage Rate(%)", b.PERCENT),
        aicore_usage_percent=block.integer(command, "Aicore Usage Rate(%)", b.PERCENT),
        aicore_freq_mhz=block.integer(command, "Aicore Freq(MHZ)", b.FREQUENCY_MHZ),
        aicore_cur_freq_mhz=block.integer(command, "Aicore curFreq(MHZ)", b.FREQUENCY_MHZ),
        aicore_count=block.amount(command, "Aicore Count", b.AICORE_COUNT),
        temperature_c=block.integer(command, "Temperature(C)", b.TEMPERATURE_C),
        power_w=block.number(command, "NPU Real-time Power(W)", b.POWER_W),
    )


# -- npu-smi info -t health -i N -c C -------------------------------------------------------------


@attrs.frozen
class HealthInfo:
    """``npu-smi info -t health``: ``status`` is ``OK``, ``Warning``, ``Alarm`` or ``Critical``
    (chip values in the npu-smi source ``npu_chip_info.c``).

    :ivar error_code: the ``Error Code`` value as printed (every code, space-separated); None when ``NA``.
    :ivar error_information: the first code's text; None when ``NA``.
    :ivar error_codes: each code in upper-case hex (``80E18005``), in printed order; empty when ``NA``.
    :ivar error_informations: each code's text in printed order: the first from the ``Error
        Information`` line, the others from the lines with no key under it. A code whose text DCMI does
        not have reads as the code itself (decimal; hex on the 950), one whose lookup failed as npu-smi's
        sentence ``Failed to get error information for error code : 0x...``, both as printed.
    """

    status: str
    error_code: str | None
    error_information: str | None
    error_codes: tuple[str, ...] = ()
    error_informations: tuple[str, ...] = ()


#: ``print_diagnosis_info`` (npu_info_print.c; ``print_error_info`` in npu_info_print_ext.c for the
#: 950): the text of every code after the first is ``"\n\t%-30s : %s\n"`` with the key ``" "``, a
#: blank line and then a line with no key.
_NO_KEY = re.compile(r"^\s*:\s(?P<value>.*)$")
#: A text lookup that fails prints ``"Failed to get error information for error code : 0x%04x\n"``:
#: for the first code straight after ``"\t%-30s :"`` (``Error Information :Failed ...``, no space),
#: for the others on a line of its own.
_LOOKUP_FAILED = re.compile(
    r"^\s*(?P<key>Error Information\s*:)?(?P<text>Failed to get error information for error code : 0x[0-9A-Fa-f]+)\s*$")
_HEX = re.compile(r"^[0-9A-Fa-f]+$")
_INFORMATION = "Error Information"


def parse_health(text: str, *, command: str = "npu-smi info -t health -i <N> -c <C>") -> HealthInfo:
    """Parse ``npu-smi info -t health -i N -c C`` (the 950: ``-t health -i N``, whose status line is
    ``Health``, not ``Health Status``). Samples: ``910A_info_-t_health.txt``, ``950_info_-t_health_-i_0.txt``;
    several error codes (``Error Code`` lists them on one line, each further text is on a line with no
    key) are known from the source only (``print_diagnosis_info``, npu_info_print.c;
    ``tests/unit/test_ascend_readings.py``).

    :raises NpuSmiParseError: when neither ``Health Status`` nor ``Health`` is printed, a line with no
        key (or a failed-lookup line) does not follow ``Error Information``, or a code is not hexadecimal.
    """
    lines = [line for _, line in _text.numbered_lines(command, text)]
    # (line_no, line, text, keyed): error texts on lines parse_key_values cannot read; blanked for it.
    texts: list[tuple[int, str, str, bool]] = []
    for index, line in enumerate(lines):
        failed = _LOOKUP_FAILED.match(line)
        if failed is not None:
            texts.append((index + 1, line, failed.group("text"), failed.group("key") is not None))
        elif (no_key := _NO_KEY.match(line)) is not None:
            texts.append((index + 1, line, no_key.group("value").strip(), False))
        else:
            continue
        lines[index] = ""
    block = KeyValueBlock.merged(parse_key_values("\n".join(lines), command=command), command)
    key = block.first_key("Health Status", "Health")
    status = block.text(key)
    if status is None:
        raise NpuSmiParseError(command, *block.where(key), "missing 'Health Status' (950: 'Health')")
    keyed = sorted([(n, line, value) for n, line, value, has_key in texts if has_key]
                   + [(n, line, v) for k, v, n, line in block.entries if k == _INFORMATION])
    once = _text.Once(command)
    for n, line, _ in keyed:  # keyed, or a failed lookup straight after the key
        once.add(_INFORMATION, n, line, f"{_INFORMATION!r} line")
    first = _text.text_or_none(keyed[0][2]) if keyed else None
    informations = [] if first is None else [first]
    for n, line, value, has_key in texts:
        if not has_key:
            if first is None or n < keyed[0][0]:  # npu-smi prints them only under a first text
                raise NpuSmiParseError(command, n, line, f"a line without a key must continue {_INFORMATION!r}")
            informations.append(value)
    return HealthInfo(
        status=status,
        error_code=block.text("Error Code"),
        error_information=informations[0] if informations else None,
        error_codes=_error_codes(command, block),
        error_informations=tuple(informations),
    )


def _error_codes(command: str, block: KeyValueBlock) -> tuple[str, ...]:
    """The codes of ``Error Code`` (``" %04X"`` each, on one line), upper case; () when absent or ``NA``."""
    value = block.text("Error Code")
    if value is None:
        return ()
    codes = value.split()
    for code in codes:
        if not _HEX.match(code):
            raise NpuSmiParseError(command, *block.where("Error Code"),
                                   f"Error Code: {_text.shown(code)!r} is not a hexadecimal code")
    return tuple(code.upper() for code in codes)
