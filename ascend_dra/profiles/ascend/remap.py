"""``npu-smi info -t phyid-remap -p <physical ID>``: one chip's logic ID, NPU ID and chip ID, parsed.

The open npu-smi source prints, for the physical ID given with ``-p``, the chip's logic ID, NPU
ID and chip ID, on every chip type; its lines are ``key:value`` with **no space** after the colon
(docs/ascend-hardware.md#the-ids, "Further facts from the open Ascend driver and npu-smi source"), so the
``key : value`` reader of :mod:`.keyvalue` does not apply. The key spellings are not documented;
the usual variants are accepted (``Chip Logic ID`` / ``Logic ID``, ``NPU ID`` / ``Card ID``,
``Chip ID``, ``Chip Phy-ID`` / ``Phy ID`` / ``Physical ID``), matched without case, spaces or
punctuation. Sample: ``910C_A3_info_-t_phyid-remap_-p_0_constructed.txt`` (constructed from the
documented format).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from ascend_dra.profiles.ascend import _text
from ascend_dra.profiles.ascend.errors import NpuSmiParseError

__all__ = ("PhyIdRemap", "parse_phyid_remap")

_LINE = re.compile(r"^\s*(?P<key>[^:]*[^:\s])\s*:\s*(?P<value>.*?)\s*$")
#: normalised key (lower case, letters and digits only) -> field.
_KEYS = {
    "chiplogicid": "logic_id", "logicid": "logic_id",
    "npuid": "npu_id", "cardid": "npu_id",
    "chipid": "chip_id",
    "chipphyid": "physical_id", "phyid": "physical_id", "physicalid": "physical_id", "chipphysicalid": "physical_id",
}


@attrs.frozen
class PhyIdRemap:
    """What ``-t phyid-remap -p <physical_id>`` says about one chip.

    :ivar physical_id: the ``-p`` argument (the ``davinci<N>`` number), or the value printed for it.
    :ivar fields: every line as printed, key -> value.
    """

    physical_id: int
    logic_id: int
    npu_id: int
    chip_id: int
    fields: Mapping[str, str]


def parse_phyid_remap(text: str, *, physical_id: int,
                      command: str = "npu-smi info -t phyid-remap -p <N>") -> PhyIdRemap:
    """Parse ``npu-smi info -t phyid-remap -p <physical_id>`` (see the module docstring).

    :param physical_id: the physical ID that was asked for; a printed physical ID must equal it.
    :raises NpuSmiParseError: on a line that is not ``key:value``, a non-numeric ID, a missing
        logic ID, NPU ID or chip ID (naming the field), or a printed physical ID that is not the one asked for.
    """
    values: dict[str, int | None] = {}
    fields: dict[str, str] = {}
    where: dict[str, tuple[int, str]] = {}
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _LINE.match(line)
        if not match:
            raise NpuSmiParseError(command, line_no, line, "expected 'key:value'")
        key, value = match.group("key").strip(), match.group("value")
        fields.setdefault(key, value)
        field = _KEYS.get(re.sub(r"[^a-z0-9]", "", key.lower()))
        if field is not None and field not in values:
            values[field] = _text.to_int(command, line_no, line, value, key)
            where[field] = (line_no, line)
    if not fields:
        raise NpuSmiParseError(command, 0, "", "empty output")
    for field, label in (("logic_id", "logic ID"), ("npu_id", "NPU ID"), ("chip_id", "chip ID")):
        if values.get(field) is None:
            line_no, line = where.get(field, (0, ""))
            raise NpuSmiParseError(command, line_no, line, f"no {label} (keys printed: {', '.join(fields)})")
    printed = values.get("physical_id")
    if printed is not None and printed != physical_id:
        raise NpuSmiParseError(command, *where["physical_id"],
                               f"physical ID {printed} printed for -p {physical_id}")
    return PhyIdRemap(physical_id=physical_id, logic_id=values["logic_id"],  # type: ignore[arg-type]
                      npu_id=values["npu_id"], chip_id=values["chip_id"], fields=fields)  # type: ignore[arg-type]
