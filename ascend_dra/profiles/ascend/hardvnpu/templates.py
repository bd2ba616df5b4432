"""The hard-vNPU template catalogue: what each chip model can be cut into, and what a cut costs.

Facts (docs/ascend-hardware.md):

* docs/ascend-hardware.md#310p-templates: the seven 310P3 templates with every engine count
(``310P3_info_-t_template-info_drv22.0.4.txt``).
* docs/ascend-hardware.md#910-templates: 910A templates ``vir02``/``vir04``/``vir08``/``vir16`` (AI cores = the
number); HAMi's memory
  values are ``32768 MiB x n / 30``, so here ``32768 x n / <AI cores of the chip>`` (30 or 32)
  **[derived]**; their AICPU and engine counts are in no source.
* docs/ascend-hardware.md#910b-and-a3-templates: 910B/A2/A3 templates; 910B4 rows with engines
(``910B4_A2-inference_info_-t_template-info.txt``);
  ``vir10_3c_32g`` engines derived from the 910B4-1 ``info-vnpu`` sample; ``vir05_1c_16g``,
  ``vir03_1c_8g``, ``vir06_1c_16g``, ``vir12_3c_32g`` engines unknown. Chip assignment from HAMi's
  device-config (docs/ascend-hardware.md#910b-and-a3-templates). **910B4-1 has its own templates** (64 GB:
  ``vir05_1c_16g``, ``vir10_3c_32g``),
  never 910B4's.
* docs/ascend-hardware.md#compute-and-memory: per-chip AI cores, AICPUs, memory, engines; 910B4/910B4-1 engine totals
from the ``info-vnpu``
  samples (VPC 9, VENC 0, VDEC 2, JPEGD 24, JPEGE 4); max 7 vNPUs on a 310P, 15/16 on a 910A.
* docs/ascend-hardware.md#hard-vnpu-templates: vNPU IDs are ``physicalID x 16 + 100 + k``, k <= 7 on inference chips
(310P), <= 15 on training
  chips (mind-cluster ``dcmi_api.go``).

When the node answers ``npu-smi info -t template-info`` its templates replace these tables (the
reference says to prefer the node's own list, docs/ascend-hardware.md#910b-and-a3-templates).

Units: memory in **MiB** everywhere here (template-info prints GiB, ``mem_size >> 10``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import attrs

from ascend_dra.profiles.ascend.npusmi import tables

__all__ = (
    "ENGINES",
    "MODELS",
    "ChipResources",
    "VnpuTemplate",
    "binding_counters",
    "chip_counters",
    "from_template_info",
    "id_choices",
    "max_instances",
    "resources_of",
    "template_counters",
    "vnpu_id",
)

#: Media (DVPP) engines, in the column order of ``template-info`` (docs/ascend-hardware.md#npu-smi-commands).
ENGINES = ("vpc", "venc", "jpegd", "pngd", "vdec", "jpege")
#: vNPU IDs start here (docs/ascend-hardware.md#hard-vnpu-templates: ``physicalID x 16 + 100 + k``).
VNPU_ID_BASE = 100
VNPU_ID_STRIDE = 16


@attrs.frozen
class VnpuTemplate:
    """One template. ``aicpu`` / ``engines`` are None where no source gives them.

    :ivar memory_mib: memory of one vNPU, in MiB.
    :ivar engines: engine name (:data:`ENGINES`) -> units, or None when unknown.
    """

    name: str
    aicore: int
    memory_mib: int
    aicpu: int | None = None
    engines: Mapping[str, int] | None = None


@attrs.frozen
class ChipResources:
    """What one chip of a model offers to vNPUs, and the templates it accepts.

    :ivar memory_mib: memory the templates are cut from, in MiB (the chip's total; e.g. 2 x
        ``vir10_3c_16g`` fill a 32 GiB 910B4, ``910B4_A2-inference_info_-t_info-vnpu_*``).
    :ivar aicpu: AICPUs, or None when unknown (no ``aicpu`` counter then).
    :ivar engines: engine totals, or None when unknown (no engine counters then).
    :ivar id_slots: how many vNPU IDs a chip has (k of ``physicalID x 16 + 100 + k`` is below it).
    :ivar max_vnpus: most vNPUs one chip holds at once (None: only ``id_slots`` bounds it).
    """

    model: str
    aicore: int
    memory_mib: int
    aicpu: int | None
    engines: Mapping[str, int] | None
    id_slots: int
    templates: tuple[VnpuTemplate, ...]
    max_vnpus: int | None = None

    def template(self, name: str) -> VnpuTemplate | None:
        """The template called ``name``, or None."""
        return next((t for t in self.templates if t.name == name), None)


def _t(name: str, aicore: int, memory_gib: int, aicpu: int | None, *engines: int) -> VnpuTemplate:
    return VnpuTemplate(name, aicore, memory_gib * 1024, aicpu,
                        dict(zip(ENGINES, engines, strict=True)) if engines else None)


# 310P3 (docs/ascend-hardware.md#310p-templates): Name AICORE Memory AICPU VPC VENC JPEGD / PNGD VDEC JPEGE.
_310P3 = (
    _t("vir01", 1, 3, 1, 1, 0, 2, 0, 1, 1),
    _t("vir02", 2, 6, 2, 3, 1, 4, 0, 3, 2),
    _t("vir02_1c", 2, 6, 1, 3, 0, 4, 0, 3, 2),
    _t("vir04", 4, 12, 4, 6, 2, 8, 0, 6, 4),
    _t("vir04_3c", 4, 12, 3, 6, 1, 8, 0, 6, 4),
    _t("vir04_3c_ndvpp", 4, 12, 3, 0, 0, 0, 0, 0, 0),
    _t("vir04_4c_dvpp", 4, 12, 4, 12, 3, 16, 0, 12, 8),
)
# 910B4, 32 GB (docs/ascend-hardware.md#910b-and-a3-templates, 910B4_A2-inference_info_-t_template-info.txt).
_910B4 = (
    _t("vir10_3c_16g", 10, 16, 3, 4, 0, 12, 0, 1, 2),
    _t("vir10_4c_16g_m", 10, 16, 4, 9, 0, 24, 0, 2, 4),
    _t("vir10_3c_16g_nm", 10, 16, 3, 0, 0, 0, 0, 0, 0),
    _t("vir05_1c_8g", 5, 8, 1, 2, 0, 6, 0, 0, 1),
)
# 910B3, 910B4-1, 910C/A3 inference (docs/ascend-hardware.md#910b-and-a3-templates): vir05_1c_16g engines unknown.
_64G_INFERENCE = (
    _t("vir05_1c_16g", 5, 16, 1),
    _t("vir10_3c_32g", 10, 32, 3, 4, 0, 12, 0, 1, 2),
)
# 910B1/910B2, A3 training (docs/ascend-hardware.md#910b-and-a3-templates); vir03_1c_8g only on the 24-core 910B2.
_910B2 = (_t("vir03_1c_8g", 3, 8, 1), _t("vir06_1c_16g", 6, 16, 1), _t("vir12_3c_32g", 12, 32, 3))
_910B4_ENGINES = {"vpc": 9, "venc": 0, "jpegd": 24, "pngd": 0, "vdec": 2, "jpege": 4}


def _910a(aicore: int) -> ChipResources:
    templates = tuple(VnpuTemplate(f"vir{n:02d}", n, 32768 * n // aicore) for n in (2, 4, 8, 16))
    return ChipResources("910A", aicore, 32768, None, None, 16, templates, max_vnpus=aicore // 2)


#: Chip model (as ``npu-smi info`` names it) -> its resources and default templates.
MODELS: Mapping[str, ChipResources] = {
    "310P3": ChipResources("310P3", 8, 24576, 7, {"vpc": 12, "venc": 3, "jpegd": 16, "pngd": 0, "vdec": 12,
                                                  "jpege": 8}, 8, _310P3, max_vnpus=7),
    "910A": _910a(30),
    "910B1": ChipResources("910B1", 24, 65536, None, None, 16, _910B2[1:]),
    "910B2": ChipResources("910B2", 24, 65536, 6, None, 16, _910B2),
    "910B3": ChipResources("910B3", 20, 65536, 7, None, 16, _64G_INFERENCE),
    "910B4": ChipResources("910B4", 20, 32768, 7, _910B4_ENGINES, 16, _910B4),
    "910B4-1": ChipResources("910B4-1", 20, 65536, 7, _910B4_ENGINES, 16, _64G_INFERENCE),
    "Ascend910": ChipResources("Ascend910", 20, 65536, 7, None, 16, _64G_INFERENCE),
}


def resources_of(model: str | None, aicore_count: int | None = None) -> ChipResources | None:
    """The catalogue entry for a chip model, or None when the model has no hard-vNPU templates.

    :param aicore_count: ``Aicore Count`` the node reports; a 910A with 32 AI cores gets templates
        sized for 32 (two ``vir16`` fit, docs/ascend-hardware.md#910-templates).
    """
    if model == "910A" and aicore_count in (30, 32):
        return _910a(aicore_count)
    return MODELS.get(model or "")


def from_template_info(base: ChipResources, parsed: Iterable[tables.Template]) -> ChipResources:
    """``base`` with the templates the node printed (``npu-smi info -t template-info``).

    A template with an ``NA`` AI-core or memory value cannot be sized and is left out; an ``NA``
    engine makes that template's engines unknown.
    """
    templates = []
    for t in parsed:
        if t.aicore is None or t.memory_gib is None:
            continue
        engine_values = {e: getattr(t, e) for e in ENGINES}
        engines = None if any(v is None for v in engine_values.values()) else engine_values
        templates.append(VnpuTemplate(t.name, t.aicore, t.memory_gib * 1024, t.aicpu, engines))
    return attrs.evolve(base, templates=tuple(templates))


def _counted(resources: ChipResources) -> tuple[bool, tuple[str, ...]]:
    """Whether AICPUs are counted, and which engines: only when the chip's total and every
    template's need are known (a counter some templates do not state would let them over-commit
    it unseen), and an engine only when some template uses it."""
    aicpu = resources.aicpu is not None and all(t.aicpu is not None for t in resources.templates)
    engines: tuple[str, ...] = ()
    if resources.engines is not None and all(t.engines is not None for t in resources.templates):
        engines = tuple(e for e in ENGINES if any(t.engines[e] for t in resources.templates if t.engines))
    return aicpu, engines


def template_counters(resources: ChipResources, template: VnpuTemplate) -> dict[str, int]:
    """What one vNPU of ``template`` consumes: ``aicore``, ``memory`` (MiB), ``aicpu``, engines."""
    aicpu, engines = _counted(resources)
    out = {"aicore": template.aicore, "memory": template.memory_mib}
    if aicpu and template.aicpu is not None:
        out["aicpu"] = template.aicpu
    for e in engines:
        out[e] = template.engines[e] if template.engines else 0
    return {k: v for k, v in out.items() if v}


def chip_counters(resources: ChipResources) -> dict[str, int]:
    """The chip's totals of every counter a template consumes (memory in MiB)."""
    aicpu, engines = _counted(resources)
    out = {"aicore": resources.aicore, "memory": resources.memory_mib}
    if aicpu and resources.aicpu is not None:
        out["aicpu"] = resources.aicpu
    for e in engines:
        out[e] = resources.engines[e] if resources.engines else 0
    return out


def binding_counters(totals: Mapping[str, int], needs: Sequence[Mapping[str, int]]) -> tuple[str, ...]:
    """The counters of ``totals`` worth publishing for a chip whose vNPU devices need ``needs``.

    A counter that every published vNPU device together, each allocated once, cannot exceed never
    stops an allocation: publishing it only costs the scheduler a check per device and the slices
    their bytes (a 310P3 cut only into ``vir04_3c``: 8 counters a device, none of them binding). Kept:
    each counter the devices together could exceed, and the first counter (in ``totals`` order) that
    every device consumes, which the whole chip and a soft share take in full and so keeps them
    apart from every vNPU of the chip (docs/splits.md). When no counter is consumed by every device,
    all are kept.

    :param totals: counter -> the chip's total (:func:`chip_counters`, plus any ``vnpu-id-<k>``).
    :param needs: one mapping per published vNPU device: counter -> what it consumes.
    :return: the counter names to publish, in ``totals`` order.
    """
    exceedable = {name for name, total in totals.items() if sum(n.get(name, 0) for n in needs) > total}
    common = next((name for name in totals if needs and all(n.get(name, 0) > 0 for n in needs)), None)
    if common is None:
        return tuple(totals)
    return tuple(name for name in totals if name in exceedable or name == common)


def max_instances(resources: ChipResources, template: VnpuTemplate) -> int:
    """How many vNPUs of ``template`` one empty chip holds: the tightest counter, the vNPU limit
    and the number of vNPU IDs (e.g. 7 ``vir01`` on a 310P3: 7 AICPUs)."""
    totals = chip_counters(resources)
    fits = [totals.get(name, 0) // need for name, need in template_counters(resources, template).items()]
    fits.append(resources.id_slots)
    if resources.max_vnpus is not None:
        fits.append(resources.max_vnpus)
    return max(min(fits), 0)


def id_choices(resources: ChipResources, template: VnpuTemplate) -> int:
    """How many instance devices ``template`` gets when a chip's instances share its vNPU IDs: one
    per ID it may take, IDs ``0 .. n-1``, so that whatever the chip holds, a free one is left.

    One vNPU of ``template`` coexists with at most ``m`` others: its chip's vNPU limit and IDs less
    one, and for each counter every template needs, what is left of it over the least any template
    needs. With ``m + 1`` IDs to choose from, ``m`` others can never take them all, so every
    combination the counters allow is schedulable, whatever order the claims come in (a scheduler
    takes the first free instance; with IDs dealt round-robin over the templates, Huawei's own full
    310P3, six vir01 and one vir02_1c, stayed pending). At least :func:`max_instances`.
    """
    if max_instances(resources, template) == 0:
        return 0  # it does not fit the chip at all (a template-info template larger than the chip)
    totals = chip_counters(resources)
    needs = [template_counters(resources, t) for t in resources.templates]
    own = template_counters(resources, template)
    others = [resources.id_slots - 1]
    if resources.max_vnpus is not None:
        others.append(resources.max_vnpus - 1)
    for counter, total in totals.items():
        least = min(n.get(counter, 0) for n in needs)
        if least > 0:
            others.append((total - own.get(counter, 0)) // least)
    return max(min(resources.id_slots, 1 + max(min(others), 0)), max_instances(resources, template))


def vnpu_id(physical_id: int, slot: int) -> int:
    """The vNPU ID of slot ``slot`` on the chip with ``physical_id`` (``physicalID x 16 + 100 + k``)."""
    return VNPU_ID_BASE + VNPU_ID_STRIDE * physical_id + slot


#: A template name as npu-smi prints them (``vir04_3c_ndvpp``, ``vir10_3c_16g``).
_TEMPLATE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def parse_template_names(value: str) -> tuple[str, ...]:
    """The names of a ``hard-vNPU.templates`` value, separated by commas or spaces (spaces in
    ``PROFILE_OPTIONS`` and the chart's ``profileOptions``, whose entries commas separate); ``""``: none."""
    return tuple(n for n in re.split(r"[,\s]+", value) if n)


def check_template_names(value: str) -> None:
    """The ``hard-vNPU.templates`` option's check.

    :raises ValueError: empty, or a name that is not a template name (lower-case letters, digits and
        ``_``, as ``npu-smi info -t template-info`` prints them), naming it and the known ones.
    """
    names = parse_template_names(value)
    if not names:
        raise ValueError("is empty; give template names such as vir04_3c,vir02 (or leave the option out for all)")
    bad = [n for n in names if not _TEMPLATE_NAME.fullmatch(n)]
    if bad:
        known = sorted({t.name for r in MODELS.values() for t in r.templates})
        raise ValueError(f"holds {', '.join(map(repr, bad))}, not a template name (lower-case letters, digits, _); "
                         f"templates of the known chip models: {', '.join(known)}")
