"""Parsers for npu-smi's tabular outputs: ``npu-smi info`` (the box table) and the ``-t`` list of
``info -h``. ``info -m`` lives in :mod:`.mapping`, ``-t topo`` in :mod:`.topo`, ``-t template-info``
and ``-t info-vnpu`` in :mod:`.vnpu_tables` (all re-exported here).

Column widths and header spacing differ between driver versions, so box tables are read by
header names and ``|`` separators, never by offsets (docs/ascend-hardware.md#npu-smi-output-format). Memory is in
**MiB** (npu-smi labels it ``MB``); template memory in **GiB** (``mem_size >> 10``).
A header or value we do not know raises :class:`NpuSmiParseError` naming the command and the
line, so a newer layout is reported instead of being misread.
Samples: ``tests/fixtures/npu-smi/`` (real outputs; provenance in its ``SOURCES.md``).
"""

from __future__ import annotations

import re

import attrs

from ascend_dra.profiles.ascend.npusmi import _text
from ascend_dra.profiles.ascend.npusmi import bounds as b
from ascend_dra.profiles.ascend.npusmi.bounds import Bounds
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.npusmi.mapping import MappingRow, parse_mapping
from ascend_dra.profiles.ascend.npusmi.topo import LINK_KINDS, Topology, parse_topo
from ascend_dra.profiles.ascend.npusmi.vnpu_tables import (
    Template,
    Vnpu,
    VnpuInfo,
    parse_template_info,
    parse_vnpu_info,
)

__all__ = (
    "LINK_KINDS",
    "IncompleteChip",
    "InfoChip",
    "InfoProcess",
    "InfoTable",
    "MappingRow",
    "Template",
    "Topology",
    "Vnpu",
    "VnpuInfo",
    "parse_help_types",
    "parse_info",
    "parse_mapping",
    "parse_template_info",
    "parse_topo",
    "parse_vnpu_info",
)

# domain:bus:device.function, as npu-smi prints Bus-Id ("%04X:%02X:%02X.%-4X", npu_info_print.c)
_PCI_ADDRESS = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_HEADER = re.compile(r"npu-smi\s+(?P<tool>\S+)\s+Version:\s*(?P<driver>\S+)")
_TITLE = "'npu-smi ... Version:' title"


def _tokens(cell: str) -> list[str]:
    """The values of a cell, ``used / total`` (spaces optional, ``NA`` or ``-`` allowed) as one value.

    Joined word by word, not by a regex: ``(\\S+?)\\s*/\\s*(\\S+)`` searched over a long word
    without ``/`` tried every start and end in it (quadratic; a 32,000-character cell took ~10 s).
    """
    tokens: list[str] = []
    for word in cell.split():
        if tokens and (word.startswith("/") or tokens[-1].endswith("/")):
            tokens[-1] += word
        else:
            tokens.append(word)
    return tokens


# -- npu-smi info ---------------------------------------------------------------------------------


@attrs.frozen
class InfoChip:
    """One chip of the ``npu-smi info`` table (two rows per chip).

    :ivar npu_id: ``NPU`` column (the card ID that ``-i`` takes; not an index, e.g. 4, 215, 32768),
        ``NPU ID`` on the 950.
    :ivar chip_id: ``Chip`` column (chip index inside the NPU); 0 on the 950, whose table has no
        chip column (one chip per NPU ID; ``npu-smi info -m`` prints ``Chip ID`` 0 for each).
    :ivar device: the ``Device`` column on 310/310P, else None: the logic ID (npu-smi prints
        ``dcmi_get_device_logic_id`` there, ``print_card_total_info_second``; docs/ascend-hardware.md#the-ids).
    :ivar phy_id: the ``Phy-ID`` column on 910_93 (the physical ID), else None.
    :ivar bus_id: PCI address as printed (``0000:C1:00.0``), None when ``NA``.
    :ivar memory_used_mib, memory_total_mib: ``Memory-Usage(MB)`` (DDR).
    :ivar hbm_used_mib, hbm_total_mib: ``HBM-Usage(MB)`` (910 family only).
    :ivar power_w: None when ``NA`` (310P) or ``-`` (second die of a 910_93).
    :ivar npu_util_percent: ``NPU Util(%)`` (the 950's table prints it where others print ``AICore(%)``).
    """

    npu_id: int
    name: str
    health: str
    chip_id: int
    device: int | None = None
    phy_id: int | None = None
    bus_id: str | None = None
    power_w: float | None = None
    temperature_c: int | None = None
    hugepages_used: int | None = None
    hugepages_total: int | None = None
    aicore_percent: int | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    hbm_used_mib: int | None = None
    hbm_total_mib: int | None = None
    npu_util_percent: int | None = None


@attrs.frozen
class InfoProcess:
    """One row of the process table under ``npu-smi info``. Memory in MiB. ``chip_id`` is 0 on the
    950, whose rows name only the ``NPU ID``."""

    npu_id: int
    chip_id: int
    pid: int
    name: str
    memory_mib: int | None
    pid_in_container: int | None = None


@attrs.frozen
class IncompleteChip:
    """A chip that ``npu-smi info`` printed with one of its two rows only (npu_info_print.c).

    * The first row (``NPU Name | Health | Power ...``) is left out when npu-smi cannot name the
      chip's health: ``print_card_total_info_first`` (and ``..._with_HBM_first``) return without
      printing when ``npu_common_get_health_state_str`` refuses the value DCMI gave (one outside
      ``OK``, ``Warning``, ``Alarm``, ``Critical``, ``UNKNOWN``). The NPU ID, name and health are lost.
    * The second row (``Chip Device | Bus-Id | AICore ...``) is left out when
      ``dcmi_get_device_logic_id`` fails (``print_card_total_info_second``). The chip ID, logic ID
      and bus ID are lost.

    :ivar line_no, line: the row printed.
    :ivar npu_id, name, health: from a first row alone, else None.
    :ivar chip_id: the ``Chip`` column of a second row alone (0 on the 950, as for its complete chips).
    :ivar device: the ``Device`` column (310/310P; the logic ID), else None.
    :ivar phy_id: the ``Phy-ID`` column (910_93; the physical ID), else None.
    :ivar bus_id: the ``Bus-Id`` column as printed, None when ``NA`` or not printed.
    """

    line_no: int
    line: str
    chip_id: int | None = None
    device: int | None = None
    phy_id: int | None = None
    bus_id: str | None = None
    npu_id: int | None = None
    name: str | None = None
    health: str | None = None

    @property
    def reason(self) -> str:
        """What happened to the chip, naming what the row says of it (for logs and ``ascend-dra discover``)."""
        known = ", ".join(f"{label} {_text.shown(str(value))}" for label, value in (
            ("NPU", self.npu_id), ("name", self.name), ("health", self.health), ("chip", self.chip_id),
            ("Device", self.device), ("Phy-ID", self.phy_id), ("Bus-Id", self.bus_id)) if value is not None)
        if self.npu_id is not None:
            return (f"npu-smi info printed only its first row (line {self.line_no}: {known}): npu-smi could not "
                    "read its logic ID, and its chip ID and bus ID are missing")
        return (f"npu-smi info printed only its second row (line {self.line_no}: {known}): "
                "npu-smi could not print its health, and its NPU ID and name are missing")


@attrs.frozen
class InfoTable:
    """``npu-smi info``.

    :ivar tool_version: ``npu-smi <version>`` in the title (anonymised ``xxx`` in some samples).
    :ivar driver_version: ``Version: <version>`` in the title (the driver package, e.g. ``25.5.1``).
    :ivar chips: the chips printed with both rows, in output order.
    :ivar skipped: ``(line_no, line)`` of non-table lines that were ignored (log lines of an
        in-container limiter before the table, an author's ``...`` elision).
    :ivar incomplete: chips printed with one of their two rows only (:class:`IncompleteChip`), not in ``chips``.
    """

    tool_version: str | None
    driver_version: str | None
    chips: tuple[InfoChip, ...]
    processes: tuple[InfoProcess, ...] = ()
    skipped: tuple[tuple[int, str], ...] = ()
    incomplete: tuple[IncompleteChip, ...] = ()


# Column names of the two header rows -> (field, kind, range). Kinds: int, float, str, pair.
_ROW1: dict[str, tuple[str, str, Bounds | None]] = {
    "NPU": ("npu_id", "int", b.NPU_ID), "NPU ID": ("npu_id", "int", b.NPU_ID), "Name": ("name", "str", None),
    "Health": ("health", "str", None), "Power(W)": ("power_w", "float", b.POWER_W),
    "Temp(C)": ("temperature_c", "int", b.TEMPERATURE_C), "Hugepages-Usage(page)": ("hugepages", "pair", b.HUGEPAGES),
}
_ROW2: dict[str, tuple[str, str, Bounds | None]] = {
    "Chip": ("chip_id", "int", b.CHIP_ID), "Device": ("device", "int", b.LOGIC_ID),
    "Phy-ID": ("phy_id", "int", b.PHYSICAL_ID), "Bus-Id": ("bus_id", "str", None),
    "AICore(%)": ("aicore_percent", "int", b.PERCENT), "Memory-Usage(MB)": ("memory", "pair", b.MEMORY_MIB),
    "HBM-Usage(MB)": ("hbm", "pair", b.MEMORY_MIB), "NPU Util(%)": ("npu_util_percent", "int", b.PERCENT),
}
#: Header names of two words (the 950's), which splitting a header cell at blanks must keep whole.
_TWO_WORD_COLUMNS = {("NPU", "ID"), ("NPU", "Util(%)")}


def _column_names(cell: str) -> list[str]:
    """A header cell's column names: its words, with those of :data:`_TWO_WORD_COLUMNS` kept together."""
    names: list[str] = []
    for word in cell.split():
        if names and (names[-1], word) in _TWO_WORD_COLUMNS:
            names[-1] = f"{names[-1]} {word}"
        else:
            names.append(word)
    return names


def parse_info(text: str, *, command: str = "npu-smi info") -> InfoTable:
    """Parse the ``npu-smi info`` box table (and the process table under it, if any).

    Layouts covered (samples in ``tests/fixtures/npu-smi/``): 310/310P ``Chip Device``
    (``310P3_info.txt``, ``310_info_atlas800-3000_*``), 910 ``Chip`` with ``HBM-Usage``
    (``910A_info_atlas800-9010_npu-smi-22.0.3.1.txt``, ``910B3_info.txt``), 910_93 ``Chip Phy-ID``
    (``910C_A3_info_in_container_vcann-rt_anonymised.txt``), the 950's ``NPU ID`` table without a
    chip column, with ``NPU Util(%)`` and ``NPU ID`` process rows (``950*_info*.txt``), the 80-column
    20.2.0 table without hugepages, ``60156/ 65536``, separator typos, log lines before the table,
    a ``No running processes`` line right under the chips (a publication that cut the process header).
    A chip block of one row alone (npu-smi could not print the chip's health, or read its logic ID)
    goes to ``incomplete`` and the other chips are read (:class:`IncompleteChip`; known from the source only).

    npu-smi prints its title once, first: a second title (concatenated or repeated output) is an
    error naming it, and so is a chip (``NPU`` and ``Chip``) printed twice. Before, a title reset the
    reader and the chip rows above it were dropped without a word.

    :return: chips in output order.
    :raises NpuSmiParseError: on a title or header we do not know, a second title, a chip block that
        is neither two rows nor one of them alone, a chip printed twice, a cell whose value count
        differs from its header, a value that is not a number within its range (:mod:`.bounds`), a
        Bus-Id that is not a PCI address, or a line longer than :data:`._text.MAX_LINE`.
    """
    lines = _text.numbered_lines(command, text)
    tool = driver = None
    titles, printed = _text.Once(command), _text.Once(command)
    columns: list[list[list[str]]] = []  # header rows -> cells -> column names
    chips: list[InfoChip] = []
    incomplete: list[IncompleteChip] = []
    processes: list[InfoProcess] = []
    skipped: list[tuple[int, str]] = []
    state = "title"  # title -> header -> body; "processes" after a process header
    block: list[tuple[int, str]] = []
    process_columns: list[str] = []

    def flush() -> None:
        if not block:
            return
        if state == "body" and len(block) == 1:
            incomplete.append(_one_row_alone(command, columns, *block[0]))
        elif state == "body":
            chip = _info_chip(command, columns, block)
            printed.add((chip.npu_id, chip.chip_id), *block[0], f"chip NPU {chip.npu_id} chip {chip.chip_id}")
            chips.append(chip)
        block.clear()

    for line_no, line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if _text.is_rule(stripped):
            flush()
            if state == "header" and "=" in stripped:
                if len(columns) != 2:
                    raise NpuSmiParseError(command, line_no, line, "expected two header rows before the '=' rule")
                state = "body"
            elif state == "process-header" and "=" in stripped:
                state = "processes"
            continue
        if not stripped.startswith("|"):
            skipped.append((line_no, line))
            continue
        match = _HEADER.search(stripped)
        if match:
            titles.add("title", line_no, line, _TITLE)  # one table per output
            tool, driver = _text.text_or_none(match.group("tool")), _text.text_or_none(match.group("driver"))
            state, columns = "header", []
            continue
        cells = _text.cells(stripped)
        if "Process id" in cells or any(c.startswith("Process id") for c in cells):
            flush()
            process_columns = cells
            state = "process-header"
            continue
        if state == "header":
            columns.append([_column_names(cell) for cell in cells])
            if len(columns) > 2:
                raise NpuSmiParseError(command, line_no, line, "more than two header rows")
            known = (_ROW1, _ROW2)[len(columns) - 1]
            unknown = [name for names in columns[-1] for name in names if name not in known]
            if unknown:  # said at the header that has it, also with no chip under it
                raise NpuSmiParseError(command, line_no, line, f"unknown column {unknown[0]!r}")
            continue
        if state == "body":
            if _no_processes(cells):
                continue  # a process table's only row, its header cut by whoever published it
            block.append((line_no, line))
            if len(block) > 2:
                raise NpuSmiParseError(command, line_no, line, "a chip takes two rows between separators")
            continue
        if state == "processes":
            process = _info_process(command, process_columns, line_no, line)
            if process is not None:
                processes.append(process)
            continue
        raise NpuSmiParseError(command, line_no, line, "table row before the 'npu-smi ... Version:' title")
    flush()
    if state == "title":
        raise NpuSmiParseError(command, 0, "", "no 'npu-smi ... Version:' table found")
    if state == "header":
        raise NpuSmiParseError(command, *lines[-1], "table header without rows")
    return InfoTable(tool_version=tool, driver_version=driver, chips=tuple(chips), processes=tuple(processes),
                     skipped=tuple(skipped), incomplete=tuple(incomplete))


def _info_chip(command: str, columns: list[list[list[str]]], block: list[tuple[int, str]]) -> InfoChip:
    if len(block) != 2:
        line_no, line = block[0]
        raise NpuSmiParseError(command, line_no, line, "a chip takes two rows between separators")
    values: dict[str, object] = {}
    for (line_no, line), header, known in zip(block, columns, (_ROW1, _ROW2), strict=True):
        cells = _text.cells(line)
        if len(cells) != len(header):
            raise NpuSmiParseError(command, line_no, line, f"{len(cells)} cells, the header has {len(header)}")
        values.update(_row_values(command, line_no, line, header, cells, known))
    if "chip_id" not in values and _no_chip_column(columns):
        values["chip_id"] = 0
    for required in ("npu_id", "chip_id", "name", "health"):
        if values.get(required) is None:
            line_no, line = block[0]
            raise NpuSmiParseError(command, line_no, line, f"no value for {required}")
    bus_id = values.get("bus_id")
    if bus_id is not None and not _PCI_ADDRESS.match(str(bus_id)):
        # It names a sysfs path and is published: what is not an address is neither.
        raise NpuSmiParseError(command, *block[1],
                               f"Bus-Id {_text.shown(str(bus_id))!r} is not a PCI address (dddd:bb:dd.f) or NA")
    return InfoChip(**values)  # type: ignore[arg-type]


def _no_chip_column(columns: list[list[list[str]]]) -> bool:
    """The 950's table: one chip per ``NPU ID`` and no chip column, so each chip is chip 0."""
    return columns[0][:1] == [["NPU ID"]]


def _row_values(command: str, line_no: int, line: str, header: list[list[str]], cells: list[str],
                known: dict[str, tuple[str, str, Bounds | None]]) -> dict[str, object]:
    """The :class:`InfoChip` fields of one row: each cell's values under its header cell's column names."""
    values: dict[str, object] = {}
    for names, cell in zip(header, cells, strict=True):
        tokens = _tokens(cell)
        if len(tokens) != len(names):
            raise NpuSmiParseError(command, line_no, line, f"cell {_text.shown(cell)!r} has {len(tokens)} "
                                   f"values for columns {_text.shown(', '.join(names))}")
        for name, token in zip(names, tokens, strict=True):
            if name not in known:
                raise NpuSmiParseError(command, line_no, line, f"unknown column {name!r}")
            field, kind, bounds = known[name]
            if kind == "int" and bounds is not None:
                values[field] = _text.to_int(command, line_no, line, token, name, bounds)
            elif kind == "float" and bounds is not None:
                values[field] = _text.to_float(command, line_no, line, token, name, bounds)
            elif kind == "pair" and bounds is not None:
                used, total = _text.to_pair(command, line_no, line, token, name, bounds)
                prefix = {"hugepages": "hugepages", "memory": "memory", "hbm": "hbm"}[field]
                unit = "" if field == "hugepages" else "_mib"
                values[f"{prefix}_used{unit}"], values[f"{prefix}_total{unit}"] = used, total
            elif field == "health":
                # Kept as printed: "NA" or "Unknown" for one chip is that chip's health, unknown
                # (CHIP_HEALTH), not a table to refuse for every chip.
                values[field] = token.strip()
            else:
                values[field] = _text.text_or_none(token)
    return values


def _one_row_alone(command: str, columns: list[list[list[str]]], line_no: int, line: str) -> IncompleteChip:
    """A one-row chip block, read as the second row of a chip whose first row npu-smi left out, or
    else as the first row of one whose second row it left out (:class:`IncompleteChip`). A row
    that has neither row's cells and values is still an error."""
    cells = _text.cells(line)
    problems = []
    for header, known in ((columns[1], _ROW2), (columns[0], _ROW1)):
        if len(cells) != len(header):
            problems.append(f"{len(cells)} cells against {len(header)}")
            continue
        try:  # a cell whose value count differs from its header's is refused here
            values = _row_values(command, line_no, line, header, cells, known)
        except NpuSmiParseError as exc:
            problems.append(exc.reason)
            continue
        bus_id = values.get("bus_id")
        if known is _ROW2 and bus_id is not None and not _PCI_ADDRESS.match(str(bus_id)):
            # the shape alone is no proof
            problems.append(f"Bus-Id {_text.shown(str(bus_id))!r} is not a PCI address or NA")
            continue
        if known is _ROW1:
            return IncompleteChip(line_no=line_no, line=line, npu_id=values.get("npu_id"),  # type: ignore[arg-type]
                                  name=values.get("name"), health=values.get("health"))  # type: ignore[arg-type]
        chip_id = values.get("chip_id")
        if chip_id is None and _no_chip_column(columns):
            chip_id = 0
        return IncompleteChip(line_no=line_no, line=line, chip_id=chip_id, device=values.get("device"),  # type: ignore[arg-type]
                              phy_id=values.get("phy_id"), bus_id=values.get("bus_id"))  # type: ignore[arg-type]
    raise NpuSmiParseError(command, line_no, line, "a chip takes two rows between separators (as a second row "
                           f"alone: {problems[0]}; as a first row alone: {problems[1]})")


def _no_processes(cells: list[str]) -> bool:
    """The process table's ``No running processes found in NPU <n>`` row."""
    return len(cells) == 1 and cells[0].startswith("No running processes")


def _info_process(command: str, columns: list[str], line_no: int, line: str) -> InfoProcess | None:
    cells = _text.cells(line)
    if _no_processes(cells):
        return None
    if len(cells) < 4:
        raise NpuSmiParseError(command, line_no, line, "a process row has NPU/Chip, id, name and memory cells")
    npu_chip = cells[0].split()
    if columns[:1] == ["NPU ID"] and len(npu_chip) == 1:
        npu_chip.append("0")  # the 950: rows name the NPU ID only (one chip per NPU ID)
    if len(npu_chip) != 2:
        raise NpuSmiParseError(command, line_no, line, "the first cell must hold the NPU and chip IDs")
    npu_id = _text.to_int(command, line_no, line, npu_chip[0], "NPU", b.NPU_ID)
    chip_id = _text.to_int(command, line_no, line, npu_chip[1], "Chip", b.CHIP_ID)
    pid = _text.to_int(command, line_no, line, cells[1], "Process id", b.PID)
    if npu_id is None or chip_id is None or pid is None:
        raise NpuSmiParseError(command, line_no, line, "NPU, chip and process IDs are required")
    in_container = None
    if len(cells) > 4:
        in_container = _text.to_int(command, line_no, line, cells[4], "Process id in container", b.PID)
    return InfoProcess(npu_id=npu_id, chip_id=chip_id, pid=pid, name=cells[2],
                       memory_mib=_text.to_int(command, line_no, line, cells[3], "Process memory(MB)", b.MEMORY_MIB),
                       pid_in_container=in_container)


# -- npu-smi info -h ------------------------------------------------------------------------------


def parse_help_types(text: str, *, command: str = "npu-smi info -h") -> tuple[str, ...]:
    """Return the ``-t`` types that ``npu-smi info -h`` lists (to know whether ``topo`` exists).

    Sample: ``npu-smi_info_-h_23.0.rc2.txt``.

    :raises NpuSmiParseError: when no ``type:`` list is found.
    """
    collected: list[str] = []
    collecting = False
    for _, line in _text.numbered_lines(command, text):
        stripped = line.strip()
        if stripped.startswith("type:"):
            collecting = True
            stripped = stripped[len("type:"):]
        elif collecting and (not stripped or stripped.endswith(":") or stripped.startswith("-")):
            break
        if collecting:
            collected.extend(t.strip().rstrip(".") for t in stripped.split(",") if t.strip().rstrip("."))
            if stripped.endswith("."):
                break
    if not collected:
        raise NpuSmiParseError(command, 0, "", "no 'type:' list found")
    return tuple(collected)
