"""Parsers for npu-smi's hard-vNPU tables: ``npu-smi info -t template-info`` and ``-t info-vnpu``.

Read by header names and ``|`` separators as :mod:`.tables` reads the box tables
(docs/ascend-hardware.md#npu-smi-output-format); template memory is in **GiB** (``mem_size >> 10``).
A header or value we do not know raises :class:`NpuSmiParseError` naming the command and the
line. Samples: ``tests/fixtures/npu-smi/`` (real outputs; provenance in its ``SOURCES.md``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from ascend_dra.profiles.ascend.npusmi import _text
from ascend_dra.profiles.ascend.npusmi import bounds as b
from ascend_dra.profiles.ascend.npusmi.bounds import Bounds
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError

__all__ = ("Template", "Vnpu", "VnpuInfo", "parse_template_info", "parse_vnpu_info")


# -- npu-smi info -t template-info ----------------------------------------------------------------


@attrs.frozen
class Template:
    """One hard-vNPU template of ``-t template-info``. Memory in **GiB**; engine counts; None for ``NA``."""

    name: str
    aicore: int | None
    memory_gib: int | None
    aicpu: int | None
    vpc: int | None
    venc: int | None
    jpegd: int | None
    pngd: int | None
    vdec: int | None
    jpege: int | None


_TEMPLATE_ROW1 = ["Name", "AICORE", "Memory", "AICPU", "VPC", "VENC", "JPEGD"]
_TEMPLATE_ROW2 = ["GB", "PNGD", "VDEC", "JPEGE"]


def parse_template_info(text: str, *, command: str = "npu-smi info -t template-info") -> tuple[Template, ...]:
    """Parse ``npu-smi info -t template-info`` (two rows per template; header rule ``|===|`` or ``+===+``).

    Samples: ``310P3_info_-t_template-info_drv22.0.4.txt`` (7 templates),
    ``910B4_A2-inference_info_-t_template-info.txt`` (4 templates).

    :raises NpuSmiParseError: on an unknown header, a template with one row, a second title or
        template of one name, or a number that is not one within its range (:mod:`.bounds`).
    """
    header: list[list[str]] = []
    templates: list[Template] = []
    pending: tuple[int, str, list[str]] | None = None
    once = _text.Once(command)
    for line_no, line in _text.numbered_lines(command, text):
        stripped = line.strip()
        if not stripped or _text.is_rule(stripped):
            continue
        inner = stripped.strip("|").strip()
        if inner.startswith("NPU instance template info"):
            once.add("title", line_no, line, "'NPU instance template info' title")
            continue
        words = inner.split()
        if len(header) < 2 and (words[:1] == ["Name"] or words[:1] == ["GB"]):
            header.append(words)
            expected = _TEMPLATE_ROW1 if len(header) == 1 else _TEMPLATE_ROW2
            if words != expected:
                raise NpuSmiParseError(command, line_no, line, f"unknown header; expected {' '.join(expected)}")
            continue
        if len(header) != 2:
            raise NpuSmiParseError(command, line_no, line, "template row before the header")
        if pending is None:
            if len(words) != 7:
                raise NpuSmiParseError(command, line_no, line, "a template's first row has 7 values")
            pending = (line_no, line, words)
            continue
        if len(words) != 3:
            raise NpuSmiParseError(command, line_no, line, "a template's second row has 3 values (PNGD VDEC JPEGE)")
        first_no, first_line, first = pending
        pending = None
        once.add(("template", first[0]), first_no, first_line, f"template {first[0]!r}")

        def num(value: str, what: str, n: int, text_line: str, bounds: Bounds = b.MEDIA_ENGINES) -> int | None:
            return _text.to_int(command, n, text_line, value, what, bounds)

        templates.append(Template(
            name=first[0],
            aicore=_text.to_amount(command, first_no, first_line, first[1], "AICORE", b.AICORE_COUNT),
            memory_gib=_text.to_amount(command, first_no, first_line, first[2], "Memory", b.MEMORY_GIB),
            aicpu=num(first[3], "AICPU", first_no, first_line, b.AICPU),
            vpc=num(first[4], "VPC", first_no, first_line),
            venc=num(first[5], "VENC", first_no, first_line),
            jpegd=num(first[6], "JPEGD", first_no, first_line),
            pngd=num(words[0], "PNGD", line_no, line),
            vdec=num(words[1], "VDEC", line_no, line),
            jpege=num(words[2], "JPEGE", line_no, line),
        ))
    if pending is not None:
        raise NpuSmiParseError(command, pending[0], pending[1], "template without its second row")
    if len(header) != 2:
        raise NpuSmiParseError(command, 0, "", "no template-info header found")
    return tuple(templates)


# -- npu-smi info -t info-vnpu -i N -c C ----------------------------------------------------------


@attrs.frozen
class Vnpu:
    """One hard vNPU. ``container_id`` ``000000000000`` / ``status`` 0 = created, not bound;
    ``ffffffffffff`` / 1 = in use (docs/ascend-hardware.md#hard-vnpu-templates)."""

    vnpu_id: int
    vgroup_id: int
    container_id: str
    status: int
    template_name: str


@attrs.frozen
class VnpuInfo:
    """``npu-smi info -t info-vnpu``.

    :ivar resources: column (``AICORE``, ``Memory`` in GiB, ``AICPU``, ``VPC``, ``VENC``, ``VDEC``,
        ``JPEGD``, ``JPEGE``, ``PNGD``) -> ``(free, total)``; a side is None when printed ``NA``.
        Empty when the output has no resource table (a fragment).
    """

    resources: Mapping[str, tuple[int | None, int | None]]
    total: int
    vnpus: tuple[Vnpu, ...]


_VNPU_TOTAL = re.compile(r"^Total number of vnpu:\s*(\S+)$")
_VNPU_HEADER = ["Vnpu ID", "Vgroup ID", "Container ID", "Status", "Template Name"]
#: Resource columns of ``info-vnpu`` and the range of each side of their ``free/total``.
_RESOURCES = {"AICORE": b.AICORE, "Memory": b.MEMORY_GIB, "AICPU": b.AICPU, "VPC": b.MEDIA_ENGINES,
              "VENC": b.MEDIA_ENGINES, "VDEC": b.MEDIA_ENGINES, "JPEGD": b.MEDIA_ENGINES, "JPEGE": b.MEDIA_ENGINES,
              "PNGD": b.MEDIA_ENGINES}


def parse_vnpu_info(text: str, *, command: str = "npu-smi info -t info-vnpu -i <N> -c <C>") -> VnpuInfo:
    """Parse ``npu-smi info -t info-vnpu -i N -c C``.

    Samples: ``910B4_A2-inference_info_-t_info-vnpu_empty_and_2vnpus.txt``,
    ``910B4-1_64G_info_-t_info-vnpu_empty_and_2vnpus.txt`` (no row header when there are no vNPUs),
    ``310P3_info_-t_info-vnpu_fragment_drv22.0.4.txt`` (vNPU list only).

    Each title, header and the vNPU count are printed once; a second one (repeated output) is an
    error, and so is a vNPU printed twice.

    :raises NpuSmiParseError: on an unknown resource column, a bad ``free/total`` value (a side out
        of its range, :mod:`.bounds`, or more free than total), a missing ``Total number of vnpu``,
        a second title, header, count or vNPU, or a vNPU count that differs from the rows printed
        (a cut-off output).
    """
    columns: list[str] | None = None
    resources: dict[str, tuple[int | None, int | None]] = {}
    total: int | None = None
    total_at: tuple[int, str] = (0, "")
    vnpus: list[Vnpu] = []
    in_list = False
    once = _text.Once(command)
    for line_no, line in _text.numbered_lines(command, text):
        stripped = line.strip()
        if not stripped or _text.is_rule(stripped):
            continue
        inner = stripped.strip("|").strip()
        if inner.startswith(("NPU resource static info", "Format:")) or inner == "GB":
            once.add(inner.partition(" ")[0], line_no, line, f"{_text.shown(inner)!r} line")
            continue
        if inner.startswith("AICORE"):
            once.add("resource header", line_no, line, "resource header")
            columns = inner.split()
            if columns != list(_RESOURCES):
                raise NpuSmiParseError(command, line_no, line, "unknown resource columns")
            continue
        match = _VNPU_TOTAL.match(inner)
        if match:
            once.add("total", line_no, line, "'Total number of vnpu' line")
            total = _text.to_int(command, line_no, line, match.group(1), "Total number of vnpu", b.VNPUS)
            total_at = (line_no, line)
            continue
        cells = _text.cells(stripped)
        if cells == _VNPU_HEADER:
            once.add("vnpu header", line_no, line, "vNPU header")
            in_list = True
            continue
        if columns is not None and not resources and total is None:
            values = inner.split()
            if len(values) != len(columns):
                raise NpuSmiParseError(command, line_no, line, f"expected {len(columns)} free/total values")
            for name, value in zip(columns, values, strict=True):
                resources[name] = _text.to_pair(command, line_no, line, value, name, _RESOURCES[name])
            continue
        if in_list and len(cells) == 5:
            vnpu_id = _text.to_int(command, line_no, line, cells[0], "Vnpu ID", b.VNPU_ID)
            vgroup_id = _text.to_int(command, line_no, line, cells[1], "Vgroup ID", b.VGROUP_ID)
            status = _text.to_int(command, line_no, line, cells[3], "Status", b.VNPU_STATUS)
            if vnpu_id is None or vgroup_id is None or status is None:
                raise NpuSmiParseError(command, line_no, line, "Vnpu ID, Vgroup ID and Status are required")
            once.add(("vnpu", vnpu_id), line_no, line, f"vNPU {vnpu_id}")
            vnpus.append(Vnpu(vnpu_id=vnpu_id, vgroup_id=vgroup_id, container_id=cells[2], status=status,
                              template_name=cells[4]))
            continue
        raise NpuSmiParseError(command, line_no, line, "unexpected line")
    if total is None:
        raise NpuSmiParseError(command, 0, "", "missing 'Total number of vnpu'")
    if total != len(vnpus):
        raise NpuSmiParseError(command, *total_at, f"says {total} vNPUs but {len(vnpus)} rows are printed")
    return VnpuInfo(resources=resources, total=total, vnpus=tuple(vnpus))
