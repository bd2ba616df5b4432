"""Parser for ``npu-smi info -m``: each chip's NPU ID, chip ID, logic ID and name (re-exported by :mod:`.tables`).

The header is split at runs of two or more blanks (or a TAB), a row at blanks with the chip name
last, never by offset (docs/ascend-hardware.md#npu-smi-output-format). Samples:
``tests/fixtures/npu-smi/`` (provenance in its ``SOURCES.md``).
"""

from __future__ import annotations

import re

import attrs

from ascend_dra.profiles.ascend.npusmi import _text
from ascend_dra.profiles.ascend.npusmi import bounds as b
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError

__all__ = ("MappingRow", "parse_mapping")


@attrs.frozen
class MappingRow:
    """One row of ``npu-smi info -m``.

    :ivar logic_id: ``Chip Logic ID``; None on ``Mcu`` rows (printed ``-``) and on the 950 (no such column).
    :ivar chip_name: as printed (``Ascend 910B4``, ``MiniD`` for the 310, ``Mcu``).
    :ivar physical_id: a chip physical-ID column, if this generation prints one (``Chip Phy-ID``
        on the 950, 910_93 **[U]**).
    :ivar slot_id: ``Slot ID`` (the 950), else None.
    """

    npu_id: int
    chip_id: int
    logic_id: int | None
    chip_name: str
    physical_id: int | None = None
    slot_id: int | None = None

    @property
    def is_mcu(self) -> bool:
        """True for the board's MCU row (not a chip)."""
        return self.chip_name.lower() == "mcu"


_MAPPING_COLUMNS = {
    "NPU ID": "npu_id", "Chip ID": "chip_id", "Chip Logic ID": "logic_id",
    "Chip Phy-ID": "physical_id", "Chip Physical ID": "physical_id", "Chip Name": "chip_name",
    "Slot ID": "slot_id",
}
_MAPPING_BOUNDS = {"npu_id": b.NPU_ID, "chip_id": b.CHIP_ID, "logic_id": b.LOGIC_ID, "physical_id": b.PHYSICAL_ID,
                   "slot_id": b.SLOT_ID}


def parse_mapping(text: str, *, command: str = "npu-smi info -m") -> tuple[MappingRow, ...]:
    """Parse ``npu-smi info -m`` (columns ``NPU ID``, ``Chip ID``, ``Chip Logic ID``, ``Chip Name``;
    the 950 prints ``NPU ID``, ``Slot ID``, ``Chip ID``, ``Chip Phy-ID``, ``Chip Name`` and no logic
    ID, which is then None and found from the device nodes, :mod:`.ids`).

    Samples: ``910A_info_-m_*.txt``, ``910B4_info_-m_8cards_with_Mcu.txt`` (Mcu rows, right padding),
    ``310_info_-m_atlas800-3000_MiniD_Mcu.txt``, ``950PR_info_-m_*.txt``.

    :raises NpuSmiParseError: on an unknown column (a newer generation), a row with too few
        values, an ID that is not a number within its range (:mod:`.bounds`), or a chip, logic ID or
        physical ID printed twice (each names one chip of the node).
    """
    header: list[str] | None = None
    rows: list[MappingRow] = []
    once = _text.Once(command)
    for line_no, line in _text.numbered_lines(command, text):
        if not line.strip():
            continue
        if header is None:
            header = re.split(r"\s{2,}|\t", line.strip())
            unknown = [name for name in header if name not in _MAPPING_COLUMNS]
            if unknown or header[-1] != "Chip Name" or "NPU ID" not in header or "Chip ID" not in header:
                raise NpuSmiParseError(command, line_no, line,
                                       f"unknown header (columns {_text.shown(', '.join(unknown)) or 'out of order'})")
            continue
        parts = line.split(None, len(header) - 1)
        if len(parts) != len(header):
            raise NpuSmiParseError(command, line_no, line, f"expected {len(header)} columns")
        values: dict[str, object] = {"logic_id": None}
        for name, value in zip(header, parts, strict=True):
            field = _MAPPING_COLUMNS[name]
            values[field] = (value.strip() if field == "chip_name"
                             else _text.to_int(command, line_no, line, value, name, _MAPPING_BOUNDS[field]))
        if values["npu_id"] is None or values["chip_id"] is None:
            raise NpuSmiParseError(command, line_no, line, "NPU ID and Chip ID are required")
        row = MappingRow(**values)  # type: ignore[arg-type]
        once.add(("chip", row.npu_id, row.chip_id), line_no, line, f"row for NPU {row.npu_id} chip {row.chip_id}")
        for what, number in (("logic ID", row.logic_id), ("physical ID", row.physical_id)):
            if number is not None:
                once.add((what, number), line_no, line, f"{what} {number}")
        rows.append(row)
    if header is None:
        raise NpuSmiParseError(command, 0, "", "empty output")
    return tuple(rows)
