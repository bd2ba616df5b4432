"""The npu-smi discovery tier: chips from npu-smi's outputs, joined with ``/dev/davinci*`` and sysfs.

Calls, in order (all through :class:`NpuSmi`, so each has a deadline and typed errors):

1. ``npu-smi info`` (required): chips, NPU IDs, chip IDs, names, health, PCI addresses, memory
   totals (DDR, and HBM on the 910 family), the 310's ``Device`` column, the 910_93's ``Phy-ID``.
2. ``npu-smi info -m``: logic IDs (falls back to the ``Device`` column).
3. per NPU ``-t board -i N`` (driver ``Software Version``, ``PCI Device ID`` = the generation),
   per chip ``-t board -i N -c C`` (VDie ID = ``uuid``), per NPU ``-t common -i N`` (``Aicore Count``).
4. ``-t topo`` when a 910-family chip is present: HCCS links and CPU affinity.

Steps 2-4 are enrichments: when one fails, a warning is logged and its attributes are omitted.
Physical IDs come from the ``Phy-ID`` column, else from the davinci node whose sysfs entry points
at the chip's PCI address, else by rank (the k-th logic ID owns the k-th davinci number, when the
counts agree; see :mod:`.devfs`). A chip without a physical ID, or two chips sharing one, fails the
tier: a device we cannot inject must not be published.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio
import attrs

from ascend_dra.profiles.ascend import devfs
from ascend_dra.profiles.ascend.chip import NpuChip
from ascend_dra.profiles.ascend.chips import (
    ChipFamily,
    MemoryKind,
    family_of,
    memory_kind,
    model_of,
    normalise_chip_name,
)
from ascend_dra.profiles.ascend.errors import NpuSmiError, NpuSmiParseError, NpuSmiTimeout
from ascend_dra.profiles.ascend.keyvalue import BoardInfo, ChipBoardInfo, CommonInfo
from ascend_dra.profiles.ascend.npusmi import DEFAULT_CONCURRENCY, NpuSmi
from ascend_dra.profiles.ascend.tables import InfoChip, InfoTable, MappingRow, Topology

__all__ = ("HCCS_LINKS", "TOPOLOGY_FAMILIES", "discover_npu_smi", "topology_groups")

logger = logging.getLogger(__name__)

#: Link kinds of ``-t topo`` that count as HCCS (``SIO`` joins the two dies of a 910C, ``HCCS_SW``
#: goes through an HCCS switch; reference ascend.md §4.1).
HCCS_LINKS = frozenset({"HCCS", "HCCS_SW", "SIO"})
#: Families whose chips are linked by HCCS, so ``-t topo`` is worth a call.
TOPOLOGY_FAMILIES = frozenset({ChipFamily.ASCEND910, ChipFamily.ASCEND910B, ChipFamily.ASCEND910C})

T = TypeVar("T")


class _Budget:
    """Enrichment calls stop after the first timeout: a wedged driver answers none of them, and
    waiting for each in turn would outlast the daemon's discovery deadline."""

    def __init__(self) -> None:
        self.timed_out: str | None = None
        # Checked after a slot is free, so calls queued behind a hanging one see its timeout.
        self.limiter = anyio.CapacityLimiter(DEFAULT_CONCURRENCY)


async def _optional(call: Callable[[], Awaitable[T]], what: str, budget: _Budget) -> T | None:
    async with budget.limiter:
        if budget.timed_out is not None:
            logger.debug("npu-smi enrichment skipped after a timeout",
                         extra={"what": what, "after": budget.timed_out})
            return None
        return await _call(call, what, budget)


async def _call(call: Callable[[], Awaitable[T]], what: str, budget: _Budget) -> T | None:
    try:
        return await call()
    except NpuSmiTimeout as exc:
        budget.timed_out = what
        logger.warning("npu-smi enrichment timed out; later enrichments are skipped",
                       extra={"what": what, "error": str(exc), "tier": "npu-smi"})
        return None
    except NpuSmiError as exc:
        logger.warning("npu-smi enrichment failed; its attributes are omitted",
                       extra={"what": what, "error": str(exc), "tier": "npu-smi"})
        return None


async def discover_npu_smi(npu_smi: NpuSmi, *, dev_root: Path, sys_root: Path) -> tuple[NpuChip, ...]:
    """Discover every chip of the node through npu-smi (all families; profiles filter).

    :return: chips ordered by logic ID.
    :raises NpuSmiError: when ``npu-smi info`` fails or cannot be parsed, or when a chip has no
        logic ID or no physical ID, or two chips share one (the tier's caller falls back).
    """
    info = await npu_smi.info()
    if info.skipped:
        logger.debug("npu-smi info: lines outside the table ignored", extra={"lines": info.skipped})
    budget = _Budget()
    mapping = await _optional(npu_smi.mapping, "npu-smi info -m", budget)
    npu_ids = sorted({c.npu_id for c in info.chips})
    boards: dict[int, BoardInfo | None] = {}
    commons: dict[int, CommonInfo | None] = {}
    chip_boards: dict[tuple[int, int], ChipBoardInfo | None] = {}

    async def card(npu_id: int) -> None:
        boards[npu_id] = await _optional(lambda: npu_smi.board(npu_id), f"board -i {npu_id}", budget)
        commons[npu_id] = await _optional(lambda: npu_smi.common(npu_id), f"common -i {npu_id}", budget)

    async def chip(npu_id: int, chip_id: int) -> None:
        chip_boards[(npu_id, chip_id)] = await _optional(
            lambda: npu_smi.chip_board(npu_id, chip_id), f"board -i {npu_id} -c {chip_id}", budget)

    async with anyio.create_task_group() as tg:
        for npu_id in npu_ids:
            tg.start_soon(card, npu_id)
        for c in info.chips:
            tg.start_soon(chip, c.npu_id, c.chip_id)

    partial = [_assemble(info, c, mapping, boards.get(c.npu_id), commons.get(c.npu_id),
                         chip_boards.get((c.npu_id, c.chip_id)), npu_smi) for c in info.chips]
    chips = await anyio.to_thread.run_sync(_with_host_ids, partial, info, dev_root, sys_root,
                                           npu_smi.command_line("info"))
    if any(c.family in TOPOLOGY_FAMILIES for c in chips):
        topo = await _optional(npu_smi.topo, "npu-smi info -t topo", budget)
        if topo is not None:
            chips = _with_topology(chips, topo)
    return tuple(sorted(chips, key=lambda c: c.logic_id))


def _assemble(info: InfoTable, row: InfoChip, mapping: tuple[MappingRow, ...] | None, board: BoardInfo | None,
              common: CommonInfo | None, chip_board: ChipBoardInfo | None, npu_smi: NpuSmi) -> dict[str, object]:
    """Everything npu-smi says about one chip, as NpuChip fields (physical ID still open)."""
    mapped = next((m for m in mapping or () if m.npu_id == row.npu_id and m.chip_id == row.chip_id
                   and not m.is_mcu), None)
    logic_id = mapped.logic_id if mapped is not None and mapped.logic_id is not None else row.device
    if logic_id is None:
        raise NpuSmiParseError(npu_smi.command_line("info", "-m"), 0, "",
                               f"no logic ID for NPU {row.npu_id} chip {row.chip_id}: no 'Chip Logic ID' "
                               "row and no 'Device' column in npu-smi info")
    name = row.name
    pci_device_id = board.pci_device_id if board else None
    family = family_of(name, pci_device_id=pci_device_id)
    if family is None and chip_board is not None:
        family = family_of(chip_board.chip_name)
    if family is None and mapped is not None:
        family = family_of(mapped.chip_name)
    model = model_of(name)
    kind = memory_kind(family) if family else None
    hbm, ddr = row.hbm_total_mib, row.memory_total_mib
    memory = (hbm if kind is MemoryKind.HBM else ddr) or None
    aicore = None
    if common is not None:
        aicore = next((c.aicore_count for c in common.chips if c.chip_id == row.chip_id), None)
    if aicore is None and model is not None:
        aicore = model.aicore
    driver = (board.software_version if board else None) or info.driver_version
    return {
        "logic_id": logic_id,
        "chip_id": row.chip_id,
        "npu_id": row.npu_id,
        "chip_name": normalise_chip_name(name),
        "family": family,
        "health": row.health,
        "pci_address": (row.bus_id or (chip_board.pcie_bus_info if chip_board else None) or "").lower() or None,
        "uuid": chip_board.vdie_id if chip_board else None,
        "memory_mib": memory,
        "memory_kind": kind,
        "aicore_count": aicore,
        "driver_version": driver,
        "physical_id": row.phy_id,
    }


def _with_host_ids(partial: list[dict[str, object]], info: InfoTable, dev_root: Path, sys_root: Path,
                   command: str) -> list[NpuChip]:
    """Fill physical IDs and NUMA nodes from ``/dev`` and sysfs (blocking; runs in a worker thread)."""
    numbers = devfs.davinci_numbers(dev_root)
    by_address = {a: n for n in numbers if (a := devfs.davinci_pci_address(sys_root, n)) is not None}
    by_rank = {}
    if len(numbers) == len(partial):
        ranked = sorted(partial, key=lambda p: p["logic_id"])  # type: ignore[arg-type, return-value]
        by_rank = {p["logic_id"]: n for p, n in zip(ranked, numbers, strict=True)}
    chips = []
    for fields in partial:
        physical = fields["physical_id"]
        if physical is None and fields["pci_address"] in by_address:
            physical = by_address[fields["pci_address"]]  # type: ignore[index]
        if physical is None:
            physical = by_rank.get(fields["logic_id"])
        if physical is None:
            raise NpuSmiParseError(command, 0, "", (
                f"no physical ID for NPU {fields['npu_id']} chip {fields['chip_id']}: no Phy-ID column, no "
                f"davinci node whose sysfs entry names {fields['pci_address']}, and {len(numbers)} davinci "
                f"nodes under {dev_root} for {len(partial)} chips"))
        address = fields["pci_address"]
        numa = devfs.numa_node(sys_root, address) if isinstance(address, str) else None
        chips.append(NpuChip(**{**fields, "physical_id": physical, "numa_node": numa}))  # type: ignore[arg-type]
    for attr, label in (("logic_id", "logic ID"), ("physical_id", "physical ID")):
        seen: dict[int, NpuChip] = {}
        for c in chips:
            value = getattr(c, attr)
            if value in seen:
                raise NpuSmiParseError(command, 0, "", (
                    f"NPU {seen[value].npu_id} chip {seen[value].chip_id} and NPU {c.npu_id} chip {c.chip_id} "
                    f"share {label} {value}"))
            seen[value] = c
    return _without_shared_uuids(chips)


def _without_shared_uuids(chips: list[NpuChip]) -> list[NpuChip]:
    """Drop a VDie ID that more than one chip reports: a uuid must name one chip (HAMi selects by it)."""
    counts: dict[str, int] = {}
    for c in chips:
        if c.uuid:
            counts[c.uuid] = counts.get(c.uuid, 0) + 1
    shared = {u for u, n in counts.items() if n > 1}
    if shared:
        logger.warning("several chips report the same VDie ID; uuid omitted for them",
                       extra={"uuids": sorted(shared), "tier": "npu-smi"})
    return [attrs.evolve(c, uuid=None) if c.uuid in shared else c for c in chips]


def topology_groups(topo: Topology) -> dict[int, str]:
    """Map each NPU of ``topo`` that has an HCCS link to ``hccs-<n>``: n numbers the HCCS-connected
    groups in order of their lowest NPU. NPUs without an HCCS link are left out."""
    parent = {i: i for i in topo.ids}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    linked: set[int] = set()
    for a in topo.ids:
        for b in topo.ids:
            if a != b and topo.link(a, b) in HCCS_LINKS:
                linked.update((a, b))
                parent[root(a)] = root(b)
    groups: dict[int, list[int]] = {}
    for i in sorted(linked):
        groups.setdefault(root(i), []).append(i)
    ordered = sorted(groups.values(), key=min)
    return {member: f"hccs-{n}" for n, members in enumerate(ordered) for member in members}


def _with_topology(chips: list[NpuChip], topo: Topology) -> list[NpuChip]:
    """Add ``hccs``, ``topology_group`` and ``cpu_affinity``; ``NPU<k>`` of ``-t topo`` is taken as logic ID k."""
    logic_ids = {c.logic_id for c in chips}
    if not set(topo.ids) <= logic_ids:
        logger.warning("npu-smi info -t topo names NPUs that are not logic IDs of this node; topology omitted",
                       extra={"topo_ids": topo.ids, "logic_ids": sorted(logic_ids), "tier": "npu-smi"})
        return chips
    groups = topology_groups(topo)
    out = []
    for c in chips:
        if c.logic_id not in topo.ids:
            out.append(c)
            continue
        affinity = topo.cpu_affinity[topo.ids.index(c.logic_id)]
        out.append(attrs.evolve(c, hccs=c.logic_id in groups, topology_group=groups.get(c.logic_id),
                           cpu_affinity=affinity))
    return out

