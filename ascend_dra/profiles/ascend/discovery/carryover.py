"""Facts a chip keeps from an earlier npu-smi answer when a later discovery could not read them.

A running daemon rediscovers every minute and on hot-plug (docs/ascend-discovery.md). When an
npu-smi call fails or times out then (a busy or upgrading driver), the fields only that call gives
would vanish from the republished ResourceSlice: a pod that selects a chip by ``uuid`` would stop
matching, and a chip's ``memory`` capacity would disappear when the devfs tier answers instead.
These fields are facts of the hardware in its slot, not readings: the VDie ID, the HBM or DDR total,
the AI core count, the HCCS wiring. They cannot change while the chip stays in place (a chip is
replaced with the node powered off, and a restarted daemon remembers nothing), so the value the
last answer read is still true, and is kept.

A chip is the same chip when its physical ID, PCI address and (where both tiers know them) NPU ID,
chip ID and family are the same. Readings that do change are never carried over: ``health``, and
``driver_version`` (a driver upgrade changes it with the chip in place).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from ascend_dra.profiles.ascend.chip import NpuChip

__all__ = ("FACTS", "TOPOLOGY_FACTS", "carry", "carry_counted", "describe_carried", "kept_logic_ids", "same_chip")

#: The fields from ``-t topo`` (HCCS links and CPU affinity): physical wiring.
TOPOLOGY_FACTS = ("hccs", "topology_group", "cpu_affinity")
#: Every field a chip keeps while it stays in place, in :class:`NpuChip`'s spelling.
FACTS = ("chip_name", "family", "uuid", "memory_mib", "memory_kind", "aicore_count", *TOPOLOGY_FACTS)
#: Field -> the device attribute or capacity it becomes (docs/ascend-discovery.md), for notes.
_PUBLISHED = {"chip_name": "model", "family": "family", "uuid": "uuid", "memory_mib": "memory",
              "memory_kind": "memory", "aicore_count": "aicore", "hccs": "hccs", "topology_group": "topologyGroup",
              "cpu_affinity": "cpuAffinity"}


def same_chip(new: NpuChip, old: NpuChip) -> bool:
    """Whether ``new`` (this discovery) is the chip ``old`` (an earlier npu-smi answer) described.

    The physical ID and the PCI address must be equal (an address unknown to both counts as equal);
    NPU ID, chip ID and family must be equal where both know them (the devfs tier knows none of the
    first two).
    """
    if new.physical_id != old.physical_id or new.pci_address != old.pci_address:
        return False
    return all(a is None or b is None or a == b for a, b in (
        (new.npu_id, old.npu_id), (new.chip_id, old.chip_id), (new.family, old.family)))


def carry(chip: NpuChip, known: Mapping[int, NpuChip] | None, fields: Iterable[str]) -> tuple[NpuChip, tuple[str, ...]]:
    """Take each of ``fields`` (names of :data:`FACTS`) from the remembered chip of the same physical ID.

    A field is taken only when the remembered chip is :func:`same_chip` and has a value for it; the
    caller names the fields this discovery could not read (a failed call), so a value it did read,
    or chose to omit, is never overwritten.

    :return: the chip, and the names of the fields taken (empty: unchanged).
    """
    old = (known or {}).get(chip.physical_id)
    if old is None or not same_chip(chip, old):
        return chip, ()
    taken = {f: getattr(old, f) for f in fields if getattr(old, f) is not None and getattr(chip, f) != getattr(old, f)}
    return (attrs.evolve(chip, **taken), tuple(taken)) if taken else (chip, ())


def carry_counted(chip: NpuChip, known: Mapping[int, NpuChip] | None, fields: Iterable[str],
                  carried: dict[str, int]) -> NpuChip:
    """:func:`carry`, adding one to ``carried[field]`` for each field taken (for :func:`describe_carried`)."""
    chip, taken = carry(chip, known, fields)
    for field in taken:
        carried[field] = carried.get(field, 0) + 1
    return chip


def kept_logic_ids(chips: Sequence[NpuChip], known: Mapping[int, NpuChip] | None) -> list[NpuChip] | None:
    """``chips`` with the logic IDs of the last npu-smi answer, when that answer saw exactly these chips.

    For an answer whose logic IDs had to be inferred (``npu-smi info -m`` failed, no ``Device``
    column, no ``phyid-remap``): the rank rule can differ from DCMI's numbering, and device names
    (``npu-<logicID>-0``) must not change under allocated claims. None when a chip is new, moved or
    gone, or the remembered logic IDs are not distinct: the inferred IDs then stand.
    """
    if not known or {c.physical_id for c in chips} != set(known):
        return None
    if any(not same_chip(c, known[c.physical_id]) for c in chips):
        return None
    logic = [known[c.physical_id].logic_id for c in chips]
    if len(set(logic)) != len(logic):
        return None
    return [attrs.evolve(c, logic_id=known[c.physical_id].logic_id) for c in chips]


def describe_carried(carried: Mapping[str, int], why: str) -> str:
    """One note: ``<why>; kept from the last npu-smi answer: uuid (2 chips), aicore (2 chips)``.

    :param carried: field name -> how many chips took it.
    """
    published: dict[str, int] = {}
    for field, count in carried.items():
        name = _PUBLISHED[field]
        published[name] = max(published.get(name, 0), count)
    listed = ", ".join(f"{name} ({n} chip{'s' if n != 1 else ''})" for name, n in published.items())
    return f"{why}; kept from the last npu-smi answer: {listed}"
