"""The npu-smi discovery tier: chips from npu-smi's outputs, joined with ``/dev/davinci*`` and sysfs.

Calls, in order (all through :class:`NpuSmi`, so each has a deadline and typed errors):

1. ``npu-smi info`` (required): chips, NPU IDs, chip IDs, names, health, PCI addresses, memory
   totals (DDR, and HBM on the 910 family), the 310's ``Device`` column, the 910_93's ``Phy-ID``.
2. ``npu-smi info -m``: logic IDs (falls back to the ``Device`` column, then ``phyid-remap``,
   then the devfs rule -- a failing ``-m`` on a 910 host loses nothing else).
3. per NPU ``-t board -i N`` (driver ``Software Version``, ``PCI Device ID`` = the generation, else
   the one sysfs holds for the chip's Bus-Id when npu-smi names no family;
   on the 950 its ``DDie ID`` = ``uuid``), per chip ``-t board -i N -c C`` (VDie ID = ``uuid``;
   not on the 950, whose npu-smi takes no ``-c``), per NPU ``-t common -i N`` (``Aicore Count``).
4. ``-t phyid-remap -p N`` per ``/dev/davinci<N>``, only when the IDs of steps 1-2 are missing or
   disagree (:mod:`.ids`).
5. ``-t topo`` when a 910-family chip is present: HCCS links and CPU affinity (:func:`with_topology`).

Steps 2-5 are enrichments: when one fails, a WARNING names the call and its fields alone are
omitted; what was inferred or lost is also returned as notes (``ascend-dra discover`` shows them).
How logic and physical IDs are chosen is in :mod:`.ids`. A chip without a physical ID, or two chips
sharing one, fails the tier: a device we cannot inject must not be published. A chip whose
``/dev/davinci<physicalID>`` is absent is dropped, with the reason, and so is a chip that ``npu-smi
info`` prints with one row only (its health or its logic ID unknown, :class:`.tables.IncompleteChip`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TypeVar

import anyio
import attrs

from ascend_dra.profiles.ascend.chip import DroppedChip, NpuChip
from ascend_dra.profiles.ascend.chips import (
    ChipFamily,
    MemoryKind,
    family_of,
    memory_kind,
    model_of,
    normalise_chip_name,
)
from ascend_dra.profiles.ascend.discovery import devfs
from ascend_dra.profiles.ascend.discovery.carryover import (
    TOPOLOGY_FACTS,
    carry_counted,
    describe_carried,
    kept_logic_ids,
)
from ascend_dra.profiles.ascend.discovery.ids import PartialChip, ResolvedIds, remap_reason, resolve_ids
from ascend_dra.profiles.ascend.discovery.stable import StableAnswers, info_fingerprint
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiError, NpuSmiTimeout
from ascend_dra.profiles.ascend.npusmi.keyvalue import BoardInfo, ChipBoardInfo
from ascend_dra.profiles.ascend.npusmi.readings import CommonInfo
from ascend_dra.profiles.ascend.npusmi.remap import PhyIdRemap
from ascend_dra.profiles.ascend.npusmi.runner import DEFAULT_CONCURRENCY, NpuSmi
from ascend_dra.profiles.ascend.npusmi.tables import InfoChip, InfoTable, MappingRow
from ascend_dra.profiles.ascend.npusmi.topo import LABEL_NPU, Topology

__all__ = ("HCCS_LINKS", "TOPOLOGY_FAMILIES", "NpuSmiAnswer", "discover_npu_smi", "topology_groups", "with_topology",
           "without_shared_uuids")

logger = logging.getLogger(__name__)

#: Link kinds of ``-t topo`` that count as HCCS (``SIO`` joins the two dies of a 910C, ``HCCS_SW``
#: goes through an HCCS switch; docs/ascend-hardware.md#npu-smi-commands).
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


async def _optional(call: Callable[[], Awaitable[T]], what: str, budget: _Budget,
                    failure_level: int = logging.WARNING) -> T | None:
    async with budget.limiter:
        if budget.timed_out is not None:
            logger.debug("npu-smi enrichment skipped after a timeout",
                         extra={"what": what, "after": budget.timed_out})
            return None
        return await _call(call, what, budget, failure_level)


async def _call(call: Callable[[], Awaitable[T]], what: str, budget: _Budget, failure_level: int) -> T | None:
    try:
        return await call()
    except NpuSmiTimeout as exc:
        budget.timed_out = what
        logger.warning("npu-smi enrichment timed out; later enrichments are skipped",
                       extra={"what": what, "error": str(exc), "tier": "npu-smi"})
        return None
    except NpuSmiError as exc:
        logger.log(failure_level, "npu-smi enrichment failed; its attributes are omitted",
                   extra={"what": what, "error": str(exc), "tier": "npu-smi"})
        return None


@attrs.frozen
class NpuSmiAnswer:
    """What the npu-smi tier found.

    :ivar chips: chips to publish, ordered by logic ID.
    :ivar dropped: chips npu-smi lists whose ``/dev/davinci<physicalID>`` is absent.
    :ivar notes: what was inferred, corrected or lost, one line each (``ascend-dra discover`` shows them).
    """

    chips: tuple[NpuChip, ...]
    dropped: tuple[DroppedChip, ...] = ()
    notes: tuple[str, ...] = ()


async def discover_npu_smi(npu_smi: NpuSmi, *, dev_root: Path, sys_root: Path,
                           known: Mapping[int, NpuChip] | None = None,
                           stable: StableAnswers | None = None) -> NpuSmiAnswer:
    """Discover every chip of the node through npu-smi (all families; profiles filter).

    Only ``npu-smi info`` is required; each other call fills its own fields and, when it fails,
    those fields alone are missing (a WARNING names the call and what was lost), unless ``known``
    (the chips of this daemon's last npu-smi answer, by physical ID) has them for the same chip:
    the uuid, the AI core count and the topology are then kept (:mod:`.carryover`). With
    ``stable`` (the profile's, kept across rediscoveries), the ``-t board``, ``-t common`` and
    ``-t topo`` answers of an earlier discovery are used again while ``info`` shows the same chips
    (:mod:`.stable`): a rediscovery of an unchanged node makes two calls, ``info`` and ``info -m``.

    :return: the chips ordered by logic ID, the chips without a device node, and notes.
    :raises NpuSmiError: when ``npu-smi info`` fails or cannot be parsed, or when a chip has no
        physical ID, or two chips share a logic or physical ID (the tier's caller falls back).
    """
    info = await npu_smi.info()
    if info.skipped:
        logger.debug("npu-smi info: lines outside the table ignored", extra={"lines": info.skipped})
    budget = _Budget()
    notes: list[str] = []
    if stable is None:
        stable = StableAnswers(max_age_s=0.0)  # keeps nothing: every call is made
    stable.begin(info_fingerprint(npu_smi.command_line(), info))
    mapping = await _optional(npu_smi.mapping, "npu-smi info -m", budget)
    npu_ids = sorted({c.npu_id for c in info.chips})
    boards: dict[int, BoardInfo | None] = {}
    commons: dict[int, CommonInfo | None] = {}
    chip_boards: dict[tuple[int, int], ChipBoardInfo | None] = {}

    async def card(npu_id: int) -> None:
        boards[npu_id] = await stable.get(("board", npu_id), lambda: _optional(
            lambda: npu_smi.board(npu_id), f"board -i {npu_id}", budget))
        commons[npu_id] = await stable.get(("common", npu_id), lambda: _optional(
            lambda: npu_smi.common(npu_id), f"common -i {npu_id}", budget))

    async def chip(npu_id: int, chip_id: int) -> None:
        chip_boards[(npu_id, chip_id)] = await stable.get(("chip_board", npu_id, chip_id), lambda: _optional(
            lambda: npu_smi.chip_board(npu_id, chip_id), f"board -i {npu_id} -c {chip_id}", budget))

    async with anyio.create_task_group() as tg:
        for npu_id in npu_ids:
            tg.start_soon(card, npu_id)
        for c in info.chips:
            # The 950's npu-smi refuses -c (docs/ascend-discovery.md#npu-smi-per-chip-readings):
            # the call would only fail, with a WARNING at every discovery.
            if family_of(c.name) is not ChipFamily.ASCEND950:
                tg.start_soon(chip, c.npu_id, c.chip_id)

    # A chip npu-smi does not name (anonymised outputs print ``xxx``) may still be told by the PCI
    # device ID sysfs holds for its Bus-Id, as the devfs tier tells it.
    unnamed = {a for c in info.chips if family_of(c.name) is None
               and (a := _pci_address(c, chip_boards.get((c.npu_id, c.chip_id)))) is not None}
    functions = await anyio.to_thread.run_sync(
        lambda: {a: devfs.pci_function(sys_root, a) for a in sorted(unnamed)}) if unnamed else {}
    partial = [_assemble(info, c, mapping, boards.get(c.npu_id), commons.get(c.npu_id),
                         chip_boards.get((c.npu_id, c.chip_id)), functions, sys_root) for c in info.chips]
    numbers, by_address = await anyio.to_thread.run_sync(_davinci_nodes, dev_root, sys_root)
    incomplete = _incomplete(info, partial, by_address)
    # An address a one-row chip prints is not the complete chips' to take: both chips of a 300I Duo
    # print the card's one Bus-Id, and with one of them set apart the other's would look unshared.
    printed_alone = {(row.bus_id or "").lower() for row in info.incomplete}
    by_address = {a: n for a, n in by_address.items() if a not in printed_alone}
    reason = remap_reason(partial, numbers, by_address)
    remaps: dict[int, PhyIdRemap] = {}
    if reason is not None:
        remaps = await _remaps(npu_smi, numbers, budget, reason)
        if remaps:
            notes.append(f"phyid-remap used ({reason}): answered for {len(remaps)} of {len(numbers)} davinci nodes")
    resolved = await anyio.to_thread.run_sync(lambda: resolve_ids(
        partial, numbers=numbers, by_address=by_address, remaps=remaps, dev_root=dev_root,
        command=npu_smi.command_line("info")))
    notes.extend(resolved.notes)
    chips = await anyio.to_thread.run_sync(_chips, resolved, sys_root)
    if mapping is None and any(p.logic_from_device is None for p in partial):
        # 910 family: no Device column, so -m was the source of logic IDs (and of nothing else
        # that info did not give); the rest of the chip is kept.
        kept = None if remaps else kept_logic_ids(chips, known)
        if kept is not None:  # a running daemon: the names its last answer gave stay (carryover.py)
            chips = kept
            logger.warning("npu-smi info -m failed; logic IDs kept from the last npu-smi answer",
                           extra={"chips": len(partial), "tier": "npu-smi"})
        else:
            logger.warning("npu-smi info -m failed; logic IDs come from phyid-remap or the physical order",
                           extra={"chips": len(partial), "tier": "npu-smi"})
        source = "kept from the last npu-smi answer" if kept is not None else "from phyid-remap or the physical order"
        notes.append(f"npu-smi info -m failed: logic IDs {source}; "
                     "the other fields come from npu-smi info and -t board/common")
    carried: dict[str, int] = {}
    chips = [carry_counted(c, known, _unread(c, boards, commons, chip_boards), carried) for c in chips]
    chips = without_shared_uuids(chips)
    if any(c.family in TOPOLOGY_FAMILIES for c in chips):
        topo = await stable.get("topo", lambda: _optional(npu_smi.topo, "npu-smi info -t topo", budget))
        if topo is None:
            chips = [carry_counted(c, known, TOPOLOGY_FACTS, carried) for c in chips]
            if any(c.family in TOPOLOGY_FAMILIES and c.hccs is None for c in chips):
                notes.append("npu-smi info -t topo gave no answer: hccs, topologyGroup and cpuAffinity omitted")
        else:
            chips, topo_notes = with_topology(chips, topo)
            notes.extend(topo_notes)
    if carried:
        notes.append(describe_carried(carried, "npu-smi calls failed"))
        logger.info("attributes kept from the last npu-smi answer for the calls that failed",
                    extra={"carried": carried, "tier": "npu-smi"})
    return NpuSmiAnswer(chips=tuple(sorted(chips, key=lambda c: c.logic_id)),
                        dropped=(*incomplete, *resolved.dropped), notes=tuple(notes))


async def _remaps(npu_smi: NpuSmi, numbers: list[int], budget: _Budget, reason: str) -> dict[int, PhyIdRemap]:
    """``phyid-remap -p N`` for every davinci number; the first failure stops the rest (an npu-smi
    without the command would fail them all). A failure is logged at INFO: the fallback it leaves
    (rank, the devfs rule) is itself logged and noted, and an npu-smi without the command must not
    add a WARNING to every periodic rediscovery."""
    logger.info("asking npu-smi phyid-remap", extra={"reason": reason, "davinci": numbers, "tier": "npu-smi"})
    out: dict[int, PhyIdRemap] = {}
    first, rest = numbers[0], numbers[1:]
    answer = await _optional(lambda: npu_smi.phyid_remap(first), f"phyid-remap -p {first}", budget, logging.INFO)
    if answer is None:
        return out
    out[first] = answer

    async def one(number: int) -> None:
        result = await _optional(lambda: npu_smi.phyid_remap(number), f"phyid-remap -p {number}", budget,
                                 logging.INFO)
        if result is not None:
            out[number] = result

    async with anyio.create_task_group() as tg:
        for number in rest:
            tg.start_soon(one, number)
    return out


def _incomplete(info: InfoTable, partial: list[PartialChip], by_address: Mapping[str, int]) -> list[DroppedChip]:
    """The chips ``npu-smi info`` printed with one of their two rows only (:class:`.tables.IncompleteChip`),
    as chips not published. Without the first row their health is unknown and their NPU ID and name are
    not printed, so npu-smi cannot be asked about them, and published such a chip would count as healthy;
    without the second, DCMI could not give its logic ID (docs/ascend-hardware.md#npu-smi-commands). The
    physical ID is the ``Phy-ID`` column (910_93) or the davinci node sysfs names for the Bus-Id (not one
    another chip prints too), the logic ID the ``Device`` column (310/310P): for the record only."""
    printed = {p.pci_address for p in partial}
    out = []
    for row in info.incomplete:
        address = (row.bus_id or "").lower() or None
        physical = row.phy_id
        if physical is None and address is not None and address not in printed:
            physical = by_address.get(address)
        out.append(DroppedChip(reason=row.reason, physical_id=physical, logic_id=row.device, chip_id=row.chip_id,
                               npu_id=row.npu_id, chip_name=row.name))
    return out


def _unread(chip: NpuChip, boards: Mapping[int, BoardInfo | None], commons: Mapping[int, CommonInfo | None],
            chip_boards: Mapping[tuple[int, int], ChipBoardInfo | None]) -> tuple[str, ...]:
    """The facts (:data:`.carryover.FACTS`) of ``chip`` whose npu-smi call failed or was skipped
    after a timeout: the uuid's board call (the card's on the 950, else the chip's) and the
    AI core count's ``-t common``."""
    npu, chip_id = chip.npu_id or 0, chip.chip_id or 0  # always set on this tier (npu-smi info)
    unread = []
    uuid_source = boards.get(npu) if chip.family is ChipFamily.ASCEND950 else chip_boards.get((npu, chip_id))
    if uuid_source is None:
        unread.append("uuid")
    if commons.get(npu) is None:
        unread.append("aicore_count")  # replaces the catalogue's count only with one read from this chip
    return tuple(unread)


def _davinci_nodes(dev_root: Path, sys_root: Path) -> tuple[list[int], dict[str, int]]:
    """The davinci numbers under ``dev_root`` and PCI address -> number from sysfs (blocking)."""
    numbers = devfs.davinci_numbers(dev_root)
    return numbers, {a: n for n in numbers if (a := devfs.davinci_pci_address(sys_root, n)) is not None}


def _pci_address(row: InfoChip, chip_board: ChipBoardInfo | None) -> str | None:
    """The chip's PCI address in sysfs spelling: ``npu-smi info``'s Bus-Id, else ``-t board -c``'s."""
    return (row.bus_id or (chip_board.pcie_bus_info if chip_board else None) or "").lower() or None


def _family(row: InfoChip, mapped: MappingRow | None, mapping_answered: bool, board: BoardInfo | None,
            chip_board: ChipBoardInfo | None, function: devfs.PciFunction | None,
            sys_root: Path) -> tuple[ChipFamily | None, tuple[str, ...]]:
    """The chip's family from, in order, the board's PCI device ID or the name ``info`` prints, the
    ``-t board -c`` chip name, the ``-m`` chip name and the PCI device ID in sysfs; when none
    tells, what each source said (``unknown_family`` shows it: only what was read is named)."""
    family = family_of(row.name, pci_device_id=board.pci_device_id if board else None)
    if family is None and chip_board is not None:
        family = family_of(chip_board.chip_name)
    if family is None and mapped is not None:
        family = family_of(mapped.chip_name)
    if family is None and function is not None:
        family = family_of(None, pci_device_id=function.device)
    if family is not None:
        return family, ()
    board_call = f"npu-smi info -t board -i {row.npu_id}"
    said = [f"chip name {row.name!r} matches no family" if row.name else "npu-smi info printed no chip name"]
    said.append(f"{board_call} gave no answer" if board is None else
                f"{board_call} printed no PCI Device ID" if board.pci_device_id is None else
                f"PCI Device ID {board.pci_device_id} ({board_call}) is no Ascend chip's")
    said.append(f"{board_call} -c {row.chip_id} gave no answer" if chip_board is None else
                f"{board_call} -c {row.chip_id} printed no Chip Name" if not chip_board.chip_name else
                f"{board_call} -c {row.chip_id} names it {chip_board.chip_name!r}, no known family")
    said.append("npu-smi info -m gave no answer" if not mapping_answered else
                f"npu-smi info -m does not list NPU {row.npu_id} chip {row.chip_id}" if mapped is None else
                f"npu-smi info -m names it {mapped.chip_name!r}, no known family")
    if function is None:
        said.append("sysfs not read: npu-smi gave no PCI address (Bus-Id NA)")
    else:
        where = sys_root / "bus" / "pci" / "devices" / function.address / "device"
        said.append(f"sysfs {where} cannot be read" if function.device is None else
                    f"sysfs {where} says {function.device}, no Ascend chip's")
    return None, tuple(said)


def _assemble(info: InfoTable, row: InfoChip, mapping: tuple[MappingRow, ...] | None, board: BoardInfo | None,
              common: CommonInfo | None, chip_board: ChipBoardInfo | None,
              functions: Mapping[str, devfs.PciFunction], sys_root: Path) -> PartialChip:
    """Everything npu-smi says about one chip (logic and physical IDs still open, :mod:`.ids`).

    :param functions: PCI address -> what sysfs holds for it, read for chips npu-smi does not name.
    """
    mapped = next((m for m in mapping or () if m.npu_id == row.npu_id and m.chip_id == row.chip_id
                   and not m.is_mcu), None)
    name = row.name
    address = _pci_address(row, chip_board)
    family, family_said = _family(row, mapped, mapping is not None, board, chip_board,
                                  functions.get(address) if address else None, sys_root)
    model = model_of(name)
    kind = memory_kind(family) if family else None
    hbm, ddr = row.hbm_total_mib, row.memory_total_mib
    memory = (hbm if kind is MemoryKind.HBM else ddr) or None
    aicore = None
    if common is not None:
        # chip_id None: the 950's one-block output, which names its NPU's only chip
        aicore = next((c.aicore_count for c in common.chips if c.chip_id in (row.chip_id, None)), None)
    if aicore is None and model is not None:
        aicore = model.aicore
    driver = (board.software_version if board else None) or info.driver_version
    uuid = chip_board.vdie_id if chip_board else None
    if uuid is None and board is not None and board.chip_count == 1:
        uuid = board.ddie_id  # the 950: the card-level board names its one device
    return PartialChip(
        npu_id=row.npu_id,
        chip_id=row.chip_id,
        logic_from_mapping=mapped.logic_id if mapped is not None else None,
        logic_from_device=row.device,
        physical_printed=row.phy_id if row.phy_id is not None else (mapped.physical_id if mapped else None),
        pci_address=address,
        fields={
            "chip_id": row.chip_id,
            "npu_id": row.npu_id,
            "chip_name": normalise_chip_name(name),
            "family": family,
            "family_said": family_said,
            "health": row.health,
            "pci_address": address,
            "uuid": uuid,
            "memory_mib": memory,
            "memory_kind": kind,
            "aicore_count": aicore,
            "driver_version": driver,
        },
    )


def _chips(resolved: ResolvedIds, sys_root: Path) -> list[NpuChip]:
    """NpuChips with their IDs and NUMA nodes (blocking: reads sysfs)."""
    chips = []
    for partial, logic_id, physical_id in resolved.chips:
        address = partial.pci_address
        numa = devfs.numa_node(sys_root, address) if address else None
        chips.append(NpuChip(logic_id=logic_id, physical_id=physical_id, numa_node=numa,
                             **partial.fields))  # type: ignore[arg-type]
    return chips


def without_shared_uuids(chips: list[NpuChip]) -> list[NpuChip]:
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
    """Map each label of ``topo`` that has an HCCS link to ``hccs-<n>``: n numbers the HCCS-connected
    groups in order of their lowest label. Labels without an HCCS link are left out."""
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


def with_topology(chips: list[NpuChip], topo: Topology) -> tuple[list[NpuChip], tuple[str, ...]]:
    """Add ``hccs``, ``topology_group`` and ``cpu_affinity`` from ``-t topo``.

    ``NPU<k>`` labels are NPU (card) IDs, so every chip of NPU k (both dies of a 910C, the chips
    of a multi-chip card) takes row k; ``Phy-ID<k>`` labels (A3) are physical IDs (reference
    docs/ascend-hardware.md#the-ids). Groups are renumbered ``hccs-0``, ``hccs-1``, ... in order of their lowest
    logic ID. A label that names no chip of the node, or a chip that no label names, is logged
    and reported in the returned notes; the chips that do match keep their topology.

    :return: the chips (same order) and the notes.
    """
    def key(c: NpuChip) -> int | None:
        return c.npu_id if topo.label_kind == LABEL_NPU else c.physical_id

    what = "NPU ID" if topo.label_kind == LABEL_NPU else "physical ID"
    labels = set(topo.ids)
    unmatched_labels = sorted(labels - {key(c) for c in chips})
    unmatched_chips = [c for c in chips if key(c) not in labels]
    notes = []
    if unmatched_labels or unmatched_chips:
        note = (f"npu-smi info -t topo: labels {unmatched_labels} name no chip of this node; "
                f"{len(unmatched_chips)} chips have no row (labels are {what}s)")
        notes.append(note)
        logger.warning("npu-smi info -t topo does not match the chips; topology omitted where it does not",
                       extra={"topo_ids": topo.ids, "label_kind": topo.label_kind, "unmatched_labels": unmatched_labels,
                              "chips_without_row": [c.logic_id for c in unmatched_chips], "tier": "npu-smi"})
    label_groups = topology_groups(topo)
    members: dict[str, list[int]] = {}
    for c in chips:
        group = label_groups.get(key(c))  # type: ignore[arg-type]
        if group is not None:
            members.setdefault(group, []).append(c.logic_id)
    renumbered = {old: f"hccs-{n}" for n, old in enumerate(sorted(members, key=lambda g: min(members[g])))}
    out = []
    for c in chips:
        label = key(c)
        if label not in labels:
            out.append(c)
            continue
        group = label_groups.get(label)  # type: ignore[arg-type]
        affinity = topo.cpu_affinity[topo.ids.index(label)]  # type: ignore[arg-type]
        out.append(attrs.evolve(c, hccs=group is not None, topology_group=renumbered.get(group or ""),
                                cpu_affinity=affinity))
    return out, tuple(notes)
