"""Each chip's logic and physical ID on the npu-smi tier: from npu-smi's outputs, ``phyid-remap`` and ``/dev``.

The IDs are kept apart as in :mod:`.chip` (docs/ascend-hardware.md#the-ids). Sources, best first:

* ``npu-smi info -t phyid-remap -p <physical ID>`` maps a ``davinci<N>`` number to the chip's
  logic ID, NPU ID and chip ID on every chip type (docs/ascend-hardware.md#the-ids; on the 950, whose
  ``npu-smi info`` and ``-m`` print no logic ID, its ``NPU ID`` is the logic ID, :mod:`.remap`). It is asked only when
  the other sources are missing or disagree (:func:`remap_reason`), once per ``/dev/davinci<N>``;
  when it answers, it wins, and each value it corrects is logged.
* logic ID: ``Chip Logic ID`` of ``npu-smi info -m``, else the ``Device`` column of the 310/310P
  table, else the devfs rule: the rank of the physical ID among the node's ``davinci<N>``
  numbers (:mod:`.devfs`) -- the same rule as the devfs tier, so a device keeps its name when
  the tier changes.
* physical ID: the 910_93 ``Phy-ID`` column (or a physical-ID column of ``-m``), else the davinci
  node whose sysfs entry names the chip's PCI address (an address more than one chip prints, as
  both chips of an Atlas 300I Duo card do, identifies neither), else by rank (the k-th chip in
  logic-ID order, or in table order when logic IDs are unknown, owns the k-th davinci number, when
  the counts agree).

A chip with no physical ID, or two chips sharing a logic or physical ID, fail the tier (a device
we cannot inject must not be published). A chip whose ``/dev/davinci<physicalID>`` is absent is
dropped, with its reason.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import attrs

from ascend_dra.profiles.ascend.chip import DroppedChip
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.npusmi.remap import PhyIdRemap

__all__ = ("PartialChip", "ResolvedIds", "remap_reason", "resolve_ids")

logger = logging.getLogger(__name__)


@attrs.frozen
class PartialChip:
    """What npu-smi's outputs say about one chip's IDs (None = not said), and its other fields.

    :ivar logic_from_mapping: ``Chip Logic ID`` of ``-m``.
    :ivar logic_from_device: the ``Device`` column of ``npu-smi info`` (310/310P).
    :ivar physical_printed: the ``Phy-ID`` column (910_93) or a physical-ID column of ``-m``.
    :ivar fields: the other :class:`.chip.NpuChip` fields (``logic_id``/``physical_id`` excluded).
    """

    npu_id: int
    chip_id: int
    logic_from_mapping: int | None
    logic_from_device: int | None
    physical_printed: int | None
    pci_address: str | None
    fields: Mapping[str, object]

    def label(self) -> str:
        """``NPU <n> chip <c>``, for messages."""
        return f"NPU {self.npu_id} chip {self.chip_id}"


@attrs.frozen
class ResolvedIds:
    """The outcome of :func:`resolve_ids`.

    :ivar chips: ``(partial chip, logic ID, physical ID)`` for every chip to publish, in input order.
    :ivar dropped: chips whose device node is absent.
    :ivar notes: what was inferred or corrected, one line each (shown by ``ascend-dra discover``).
    """

    chips: tuple[tuple[PartialChip, int, int], ...]
    dropped: tuple[DroppedChip, ...]
    notes: tuple[str, ...]


def remap_reason(partial: list[PartialChip], numbers: list[int], by_address: Mapping[str, int]) -> str | None:
    """Why ``phyid-remap`` should be asked, or None when npu-smi's outputs already give every ID, agreeing.

    :param numbers: the node's ``davinci<N>`` numbers (:func:`.devfs.davinci_numbers`).
    :param by_address: PCI address -> davinci number, from sysfs (:func:`.devfs.davinci_pci_address`).
    """
    if not numbers:
        return None
    by_address = _unshared(partial, by_address)
    physical = [p.physical_printed for p in partial if p.physical_printed is not None]
    logic = [p.logic_from_mapping if p.logic_from_mapping is not None else p.logic_from_device for p in partial]
    for p in partial:
        if p.logic_from_mapping is None and p.logic_from_device is None:
            return f"no logic ID for {p.label()}"
        if None not in (p.logic_from_mapping, p.logic_from_device) and p.logic_from_mapping != p.logic_from_device:
            return (f"{p.label()}: logic ID {p.logic_from_mapping} in npu-smi info -m but Device "
                    f"{p.logic_from_device} in npu-smi info")
        if p.physical_printed is None and by_address.get(p.pci_address or "") is None:
            return f"no physical ID for {p.label()} in npu-smi's outputs or sysfs"
        if p.physical_printed is not None and p.physical_printed not in numbers:
            return f"{p.label()}: physical ID {p.physical_printed} has no davinci node"
    if len(set(physical)) != len(physical):
        return "several chips print the same physical ID"
    if len(set(logic)) != len(logic):
        return "several chips have the same logic ID"
    return None


def resolve_ids(partial: list[PartialChip], *, numbers: list[int], by_address: Mapping[str, int],
                remaps: Mapping[int, PhyIdRemap], dev_root: Path, command: str) -> ResolvedIds:
    """Give every chip a logic and a physical ID (see the module docstring). Blocking (reads ``dev_root``).

    :param remaps: physical ID -> what ``phyid-remap -p`` said (only those that answered).
    :raises NpuSmiParseError: when a chip has no physical ID, or two chips share a logic or physical ID.
    """
    notes: list[str] = []
    by_address = _unshared(partial, by_address)
    by_pair = {(r.npu_id, r.chip_id): r for r in remaps.values()}
    physical: dict[int, int | None] = {}
    logic: dict[int, int | None] = {}
    for i, p in enumerate(partial):
        remapped = by_pair.get((p.npu_id, p.chip_id))
        printed_logic = p.logic_from_mapping if p.logic_from_mapping is not None else p.logic_from_device
        if remapped is not None:
            for what, before, after in (("physical ID", p.physical_printed, remapped.physical_id),
                                        ("logic ID", printed_logic, remapped.logic_id)):
                if before is not None and before != after:
                    notes.append(f"{p.label()}: {what} {after} from phyid-remap, not {before}")
                    logger.warning("npu-smi outputs disagree; phyid-remap wins",
                                   extra={"npu_id": p.npu_id, "chip_id": p.chip_id, "what": what,
                                          "printed": before, "remapped": after, "tier": "npu-smi"})
            physical[i], logic[i] = remapped.physical_id, remapped.logic_id
            continue
        physical[i] = p.physical_printed if p.physical_printed is not None else by_address.get(p.pci_address or "")
        logic[i] = printed_logic
        if None not in (p.logic_from_mapping, p.logic_from_device) and p.logic_from_mapping != p.logic_from_device:
            # Device names follow the logic ID: say which was taken, not at INFO only.
            notes.append(f"{p.label()}: logic ID {p.logic_from_mapping} from npu-smi info -m, not Device "
                         f"{p.logic_from_device} of npu-smi info (phyid-remap did not answer)")
            logger.warning("npu-smi outputs disagree and phyid-remap did not answer; npu-smi info -m wins",
                           extra={"npu_id": p.npu_id, "chip_id": p.chip_id, "mapping": p.logic_from_mapping,
                                  "device": p.logic_from_device, "tier": "npu-smi"})
    ranked = _physical_by_rank(partial, numbers, physical, logic)
    if ranked:
        labels = ", ".join(f"{partial[i].label()} -> davinci{physical[i]}" for i in ranked)
        notes.append(f"physical IDs by rank (no Phy-ID column, sysfs link or phyid-remap answer): {labels}")
        logger.info("physical IDs by rank", extra={"chips": labels, "tier": "npu-smi"})
    for i, p in enumerate(partial):
        if physical[i] is None:
            raise NpuSmiParseError(command, 0, "", (
                f"no physical ID for {p.label()}: no Phy-ID column, no phyid-remap answer, no davinci node "
                f"whose sysfs entry names {p.pci_address}, and {len(numbers)} davinci nodes under {dev_root} "
                f"for {len(partial)} chips"))
    _unique(partial, physical, "physical ID", command)
    kept: list[int] = []
    dropped: list[DroppedChip] = []
    for i, p in enumerate(partial):
        node = dev_root / f"davinci{physical[i]}"
        if node.exists():
            kept.append(i)
        else:
            dropped.append(DroppedChip(reason=f"no device node {node}", physical_id=physical[i], logic_id=logic[i],
                                       npu_id=p.npu_id, chip_id=p.chip_id,
                                       chip_name=p.fields.get("chip_name")))  # type: ignore[arg-type]
    inferred = [i for i in kept if logic[i] is None]
    # The devfs rule; the kept chips' nodes exist, so they are among the numbers (a node that
    # appeared since the listing is ranked too).
    ranks = sorted({*numbers, *(physical[i] for i in kept)})  # type: ignore[misc]
    for i in inferred:
        logic[i] = ranks.index(physical[i])  # type: ignore[arg-type]
    if inferred:
        labels = ", ".join(f"{partial[i].label()} -> {logic[i]}" for i in inferred)
        notes.append(f"logic IDs not reported by npu-smi; inferred from physical order (the devfs rule): {labels}")
        logger.warning("logic IDs not reported by npu-smi; inferred from physical order",
                       extra={"chips": labels, "tier": "npu-smi"})
    _unique([partial[i] for i in kept], {n: logic[i] for n, i in enumerate(kept)}, "logic ID", command)
    return ResolvedIds(chips=tuple((partial[i], logic[i], physical[i]) for i in kept),  # type: ignore[misc]
                       dropped=tuple(dropped), notes=tuple(notes))


def _unshared(partial: list[PartialChip], by_address: Mapping[str, int]) -> Mapping[str, int]:
    """``by_address`` without the addresses more than one chip prints: both chips of an Atlas 300I
    Duo card print the card's one Bus-Id (tests/fixtures/npu-smi/SOURCES.md, S23), which would give
    them one physical ID."""
    printed = [p.pci_address for p in partial if p.pci_address]
    shared = {a for a in printed if printed.count(a) > 1}
    return {a: n for a, n in by_address.items() if a not in shared} if shared else by_address


def _physical_by_rank(partial: list[PartialChip], numbers: list[int], physical: dict[int, int | None],
                      logic: dict[int, int | None]) -> list[int]:
    """The k-th chip (logic-ID order, else table order) owns the k-th davinci number, when the counts
    agree. Returns the indexes of the chips whose physical ID was set so."""
    if len(numbers) != len(partial) or all(v is not None for v in physical.values()):
        return []
    if all(v is not None for v in logic.values()):
        order = sorted(range(len(partial)), key=lambda i: logic[i])  # type: ignore[arg-type, return-value]
    else:
        order = list(range(len(partial)))
    ranked = []
    for i, number in zip(order, numbers, strict=True):
        if physical[i] is None:
            physical[i] = number
            ranked.append(i)
    return ranked


def _unique(partial: list[PartialChip], values: Mapping[int, int | None], label: str, command: str) -> None:
    seen: dict[int, PartialChip] = {}
    for i, p in enumerate(partial):
        value = values[i]
        if value is None:
            continue
        if value in seen:
            raise NpuSmiParseError(command, 0, "", f"{seen[value].label()} and {p.label()} share {label} {value}")
        seen[value] = p
