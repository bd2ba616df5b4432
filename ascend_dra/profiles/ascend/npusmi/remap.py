"""``npu-smi info -t phyid-remap -p <physical ID>``: one chip's logic ID, NPU ID and chip ID, parsed.

Lines are ``key:value`` with **no space** after the colon (``"\\t%-30s:%d\\n"``), so the ``key :
value`` reader of :mod:`.keyvalue` does not apply. Two layouts, both printed by
``show_ascend_chip_phyid_remap_info`` (npu_chip_info.c of the open npu-smi source; docs/ascend-hardware.md#the-ids):

* every generation before the 950: ``Chip Physical ID``, ``Chip Logic ID``, ``NPU ID``, ``Chip ID``.
* the 950 (``NPU_SMI_V2``): ``Chip Phy-ID``, ``NPU ID``, ``Slot ID``, ``Chip ID`` and no logic-ID line.
  Its ``NPU ID`` **is** the logic ID: the DCMI device ID that ``dcmiv2_get_dev_id_by_chip_phy_id``
  returns, the same number its ``npu-smi info`` table prints as ``NPU ID`` ("Logical ID of the
  software" in the Ascend 950 npu-smi manual). A ``Slot ID`` line is what tells this layout apart.

Keys are matched without case, spaces or punctuation, and the usual variants are accepted
(``Chip Logic ID`` / ``Logic ID``, ``NPU ID`` / ``Card ID``, ``Chip Phy-ID`` / ``Phy ID`` / ``Physical ID``).
Samples: ``950_info_-t_phyid-remap_-p_0.txt`` (the 950 manual's example),
``910C_A3_info_-t_phyid-remap_-p_0_constructed.txt`` (constructed; its ``Chip Phy-ID`` key is the 950's
spelling, where the source prints ``Chip Physical ID`` for the 910C).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from ascend_dra.profiles.ascend.npusmi import _text
from ascend_dra.profiles.ascend.npusmi import bounds as b
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError

__all__ = ("PhyIdRemap", "parse_phyid_remap")

#: normalised key (lower case, letters and digits only) -> field.
_KEYS = {
    "chiplogicid": "logic_id", "logicid": "logic_id",
    "npuid": "npu_id", "cardid": "npu_id",
    "chipid": "chip_id", "slotid": "slot_id",
    "chipphyid": "physical_id", "phyid": "physical_id", "physicalid": "physical_id", "chipphysicalid": "physical_id",
}
_BOUNDS = {"logic_id": b.LOGIC_ID, "npu_id": b.NPU_ID, "chip_id": b.CHIP_ID, "slot_id": b.SLOT_ID,
           "physical_id": b.PHYSICAL_ID}
_LABELS = {"logic_id": "logic ID", "npu_id": "NPU ID", "chip_id": "chip ID", "slot_id": "slot ID",
           "physical_id": "physical ID"}


@attrs.frozen
class PhyIdRemap:
    """What ``-t phyid-remap -p <physical_id>`` says about one chip.

    :ivar physical_id: the ``-p`` argument (the ``davinci<N>`` number), or the value printed for it.
    :ivar logic_id: ``Chip Logic ID``; on the 950 its ``NPU ID`` (see the module docstring).
    :ivar fields: every line as printed, key -> value.
    :ivar slot_id: ``Slot ID`` (the 950 only), else None.
    """

    physical_id: int
    logic_id: int
    npu_id: int
    chip_id: int
    fields: Mapping[str, str]
    slot_id: int | None = None


def parse_phyid_remap(text: str, *, physical_id: int,
                      command: str = "npu-smi info -t phyid-remap -p <N>") -> PhyIdRemap:
    """Parse ``npu-smi info -t phyid-remap -p <physical_id>`` (see the module docstring).

    :param physical_id: the physical ID that was asked for; a printed physical ID must equal it.
    :raises NpuSmiParseError: on a line that is not ``key:value``, an ID that is not a number within
        its range (:mod:`.bounds`), an ID printed twice (under any of its spellings), a missing
        logic ID, NPU ID or chip ID (naming the field), a logic-ID line beside a ``Slot ID`` (neither
        layout), or a printed physical ID that is not the one asked for.
    """
    values: dict[str, int | None] = {}
    fields: dict[str, str] = {}
    where: dict[str, tuple[int, str]] = {}
    once = _text.Once(command)
    for line_no, line in _text.numbered_lines(command, text):
        if not line.strip():
            continue
        # Split at the first ':' (a key has none), not by a regex: ^\s*([^:]*[^:\s])\s*:\s*(.*?)\s*$
        # took time quadratic in the length of a line of blanks.
        before, colon, after = line.partition(":")
        key, value = before.strip(), after.strip()
        if not colon or not key:
            raise NpuSmiParseError(command, line_no, line, "expected 'key:value'")
        fields.setdefault(key, value)
        field = _KEYS.get(re.sub(r"[^a-z0-9]", "", key.lower()))
        if field is not None:
            once.add(field, line_no, line, f"{_LABELS[field]} line ({_text.shown(key)!r})")
            values[field] = _text.to_int(command, line_no, line, value, key, _BOUNDS[field])
            where[field] = (line_no, line)
    if not fields:
        raise NpuSmiParseError(command, 0, "", "empty output")
    required = [(field, _LABELS[field]) for field in ("logic_id", "npu_id", "chip_id")]
    if "slot_id" in values:  # the 950's layout: its NPU ID is the logic ID
        if "logic_id" in values:
            raise NpuSmiParseError(command, *where["logic_id"],
                                   "a logic ID and a Slot ID: neither npu-smi's layout (the 950 prints NPU ID as "
                                   "the logic ID)")
        npu_id = values["logic_id"] = values.get("npu_id")
        problem = None if npu_id is None else b.LOGIC_ID.problem(npu_id)
        if problem is not None:
            raise NpuSmiParseError(command, *where["npu_id"], f"NPU ID, the 950's logic ID: {problem}")
        required = required[1:]
    for field, label in required:
        if values.get(field) is None:
            line_no, line = where.get(field, (0, ""))
            raise NpuSmiParseError(command, line_no, line,
                                   f"no {label} (keys printed: {_text.shown(', '.join(fields))})")
    printed = values.get("physical_id")
    if printed is not None and printed != physical_id:
        raise NpuSmiParseError(command, *where["physical_id"],
                               f"physical ID {printed} printed for -p {physical_id}")
    return PhyIdRemap(physical_id=physical_id, logic_id=values["logic_id"],  # type: ignore[arg-type]
                      npu_id=values["npu_id"], chip_id=values["chip_id"], fields=fields,  # type: ignore[arg-type]
                      slot_id=values.get("slot_id"))
