"""``npu-smi info -t topo``: the link matrix between NPUs (and NICs), parsed.

Layouts (docs/ascend-hardware.md#npu-smi-commands, docs/ascend-hardware.md#the-ids "Further facts from the open Ascend
driver and npu-smi
source"):

* rows and columns labelled ``NPU<k>``, where k is the **NPU (card) ID** (npu-smi fills them from
  ``dcmi_get_card_num_list``), not the logic ID; a trailing ``CPU Affinity`` column
  (``910B3_info_-t_topo.txt``);
* current npu-smi adds ``NIC0`` … ``NIC3`` columns, on 910B as well as A3
  (``910B3_info_-t_topo_NIC_constructed.txt``);
* A3 labels rows and columns ``Phy-ID<k>``, k being the chip's **physical ID**
  (``910C_A3_info_-t_topo_Phy-ID_NIC_constructed.txt``).

The legend under the matrix is ignored. ``NIC<k>`` rows, if a version prints them, are read like
the others (their CPU affinity is not kept). Unknown labels, link kinds or row lengths raise
:class:`NpuSmiParseError`, so a newer layout is reported, never misread.
"""

from __future__ import annotations

import re

import attrs

from ascend_dra.profiles.ascend.npusmi import _text
from ascend_dra.profiles.ascend.npusmi import bounds as b
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError

__all__ = ("LABEL_NPU", "LABEL_PHYSICAL", "LINK_KINDS", "Topology", "parse_topo")

#: Link kinds printed by ``-t topo`` (its legend, and the npu-smi source; docs/ascend-hardware.md#npu-smi-commands);
#: ``UB`` is the 950's ("Connection traversing UB").
LINK_KINDS = frozenset({"X", "HCCS", "HCCS_SW", "SIO", "UB", "PIX", "PXB", "PHB", "SYS", "NA"})
#: ``Topology.label_kind``: labels are NPU (card) IDs (``NPU<k>``) ...
LABEL_NPU = "npu"
#: ... or physical IDs (``Phy-ID<k>``, A3).
LABEL_PHYSICAL = "physical"

_LABEL = re.compile(r"(?P<kind>NPU|Phy-ID|NIC)(?P<n>[0-9]+)")
_KINDS = {"NPU": LABEL_NPU, "Phy-ID": LABEL_PHYSICAL}
#: What the number of each label kind is (docs/ascend-hardware.md#the-ids).
_LABEL_BOUNDS = {"NPU": b.NPU_ID, "Phy-ID": b.PHYSICAL_ID, "NIC": b.NIC}


@attrs.frozen
class Topology:
    """``npu-smi info -t topo``.

    :ivar ids: the numbers of the chip labels, in column order: NPU IDs (``label_kind`` ``npu``)
        or physical IDs (``physical``).
    :ivar links: ``links[i][j]`` is the link kind between ``ids[i]`` and ``ids[j]`` (``X`` on the diagonal).
    :ivar cpu_affinity: per label, the ``CPU Affinity`` list as printed (``144-167``), None when absent.
    :ivar label_kind: what the numbers in ``ids`` are (:data:`LABEL_NPU` or :data:`LABEL_PHYSICAL`).
    :ivar nics: the ``NIC<k>`` column numbers, in order (empty on older npu-smi).
    :ivar nic_links: ``nic_links[i][j]``: link kind between ``ids[i]`` and ``NIC<nics[j]>``.
    """

    ids: tuple[int, ...]
    links: tuple[tuple[str, ...], ...]
    cpu_affinity: tuple[str | None, ...]
    label_kind: str = LABEL_NPU
    nics: tuple[int, ...] = ()
    nic_links: tuple[tuple[str, ...], ...] = ()

    def link(self, a: int, b: int) -> str:
        """The link kind between labels ``a`` and ``b`` (numbers as in ``ids``)."""
        return self.links[self.ids.index(a)][self.ids.index(b)]


def _label(command: str, line_no: int, line: str, token: str) -> tuple[str, int]:
    match = _LABEL.fullmatch(token)
    if not match:
        raise NpuSmiParseError(command, line_no, line,
                               f"unknown label {_text.shown(token)!r} (known: NPU<k>, Phy-ID<k>, NIC<k>)")
    kind = match.group("kind")
    number = _text.to_int(command, line_no, line, match.group("n"), f"{kind}<k> label", _LABEL_BOUNDS[kind])
    assert number is not None  # digits are never absent
    return kind, number


def parse_topo(text: str, *, command: str = "npu-smi info -t topo") -> Topology:
    """Parse the ``npu-smi info -t topo`` matrix (see the module docstring for the layouts).

    :return: the chip-to-chip matrix, the CPU affinity per chip label and the chip-to-NIC links.
    :raises NpuSmiParseError: on a missing or mixed header (``NPU<k>`` and ``Phy-ID<k>`` together),
        a label printed twice (as a column or as a row), a row for an unknown label, a row of the
        wrong length, an unknown link kind, a label number out of its range (:mod:`.bounds`), or a
        matrix that is not square.
    """
    columns: list[tuple[str, int]] | None = None
    has_affinity = False
    rows: dict[int, tuple[tuple[str, ...], tuple[str, ...], str | None]] = {}
    printed_rows = _text.Once(command)
    for line_no, line in _text.numbered_lines(command, text):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("Legend") or stripped.startswith("NIC Legend"):
            break
        if columns is None:
            has_affinity = stripped.endswith("CPU Affinity")
            names = stripped.removesuffix("CPU Affinity").split()
            columns = [_label(command, line_no, line, n) for n in names]
            printed_columns = _text.Once(command)
            for name, column in zip(names, columns, strict=True):
                printed_columns.add(column, line_no, line, f"column {name}")
            kinds = {kind for kind, _ in columns if kind != "NIC"}
            if len(kinds) != 1:
                raise NpuSmiParseError(command, line_no, line,
                                       "expected a header of NPU<k> or Phy-ID<k> columns (then NIC<k>)")
            continue
        parts = stripped.split()
        kind, number = _label(command, line_no, line, parts[0])
        printed_rows.add((kind, number), line_no, line, f"row {parts[0]}")
        values = parts[1:]
        width = len(columns)
        if kind == "NIC":
            # A NIC row (if printed) has no CPU affinity to keep; its links are the columns' transpose.
            if len(values) not in (width, width + 1):
                raise NpuSmiParseError(command, line_no, line, f"expected {width} values")
            _check_links(command, line_no, line, values[:width])
            continue
        if (kind, number) not in columns:
            raise NpuSmiParseError(command, line_no, line, f"row {parts[0]} has no column")
        want = width + (1 if has_affinity else 0)
        if len(values) != want:
            raise NpuSmiParseError(command, line_no, line, f"expected {want} values")
        links = values[:width]
        _check_links(command, line_no, line, links)
        chip_links = tuple(v for (k, _), v in zip(columns, links, strict=True) if k != "NIC")
        nic_links = tuple(v for (k, _), v in zip(columns, links, strict=True) if k == "NIC")
        affinity = _text.text_or_none(values[-1]) if has_affinity else None
        rows[number] = (chip_links, nic_links, affinity)
    if columns is None:
        raise NpuSmiParseError(command, 0, "", "empty output")
    ids = [n for k, n in columns if k != "NIC"]
    if sorted(rows) != sorted(ids):
        raise NpuSmiParseError(command, 0, "", f"matrix has rows for {_text.shown(str(sorted(rows)))} but columns "
                               f"for {_text.shown(str(ids))}")
    kind = next(k for k, _ in columns if k != "NIC")
    return Topology(
        ids=tuple(ids),
        links=tuple(rows[i][0] for i in ids),
        cpu_affinity=tuple(rows[i][2] for i in ids),
        label_kind=_KINDS[kind],
        nics=tuple(n for k, n in columns if k == "NIC"),
        nic_links=tuple(rows[i][1] for i in ids),
    )


def _check_links(command: str, line_no: int, line: str, links: list[str]) -> None:
    for link in links:
        if link not in LINK_KINDS:
            raise NpuSmiParseError(command, line_no, line,
                                   f"unknown link kind {_text.shown(link)!r} (known: {', '.join(sorted(LINK_KINDS))})")
