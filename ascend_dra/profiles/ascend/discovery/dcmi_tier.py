"""The DCMI discovery tier: the calls npu-smi itself makes, without npu-smi (health at the health
interval is :mod:`.dcmi_health`).

Discovery asks, in four round trips to the worker (:class:`..dcmi.client.DcmiClient`): the card list and
the driver version; the chips of each card (``dcmi_get_device_id_in_card``); per chip its logic ID,
chip info (name, AI cores), PCIe info (address, PCI device ID = the generation) and health; per chip
its physical ID, die ID (``VDIE``, the 950's ``DDIE``) and memory (``dcmi_get_device_hbm_info`` on the
910 family, ``dcmi_get_device_memory_info_v3`` on the 310 family). These are the calls behind the
fields of ``npu-smi info``, ``-m``, ``-t board`` and ``-t common`` (npu_info.c, npu_chip_info.c of the
driver's npu-smi), read the same way, so both tiers publish the same devices.

* A card list, chip count, logic ID or physical ID that does not come fails the tier: the chain
  goes on to npu-smi, which then answers everything.
* Any other call that returns an error or does not answer falls back to npu-smi for that answer:
  the npu-smi tier runs once and gives the fields DCMI did not (a note and a WARNING name the call).
  ``-8255`` ("not supported") is not an error here: the value is unknown, as ``8255`` is on the
  npu-smi tier (npu-smi asks the same call and would not know it either).
* A health value npu-smi cannot name (not 0-4) leaves the chip out, as npu-smi prints no first
  table row for it (:data:`..dcmi.api.HEALTH_STATES`).
* Topology still comes from ``npu-smi info -t topo`` (one call per discovery, 910 family only).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs

from ascend_dra.profiles.ascend.chip import DroppedChip, NpuChip
from ascend_dra.profiles.ascend.chips import ChipFamily, family_of, memory_kind, model_of, normalise_chip_name
from ascend_dra.profiles.ascend.dcmi.api import DIE_DDIE, DIE_VDIE, HEALTH_STATES
from ascend_dra.profiles.ascend.dcmi.client import Answer, DcmiClient, DcmiError
from ascend_dra.profiles.ascend.discovery import devfs
from ascend_dra.profiles.ascend.discovery.carryover import FACTS, TOPOLOGY_FACTS, carry_counted, describe_carried
from ascend_dra.profiles.ascend.discovery.npusmi_tier import (
    TOPOLOGY_FAMILIES,
    discover_npu_smi,
    with_topology,
    without_shared_uuids,
)
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiError
from ascend_dra.profiles.ascend.npusmi.runner import NpuSmi

__all__ = ("TIER_DCMI", "DcmiAnswer", "discover_dcmi")

logger = logging.getLogger(__name__)

TIER_DCMI = "dcmi"
#: A count DCMI passes on for "not supported" (docs/ascend-discovery.md#values-npu-smi-cannot-give).
_NOT_SUPPORTED_VALUE = 8255


@attrs.frozen
class DcmiAnswer:
    """What the DCMI tier found.

    :ivar chips: chips to publish, ordered by logic ID.
    :ivar dropped: chips without a device node, or with a health value npu-smi cannot print.
    :ivar notes: one line each: calls that failed and who answered instead, what was kept.
    :ivar from_npu_smi: field -> number of chips whose value npu-smi gave (a DCMI call failed).
    """

    chips: tuple[NpuChip, ...]
    dropped: tuple[DroppedChip, ...] = ()
    notes: tuple[str, ...] = ()
    from_npu_smi: Mapping[str, int] = attrs.field(factory=dict)


@attrs.define
class _Chip:
    """One chip while its answers come in: fields for :class:`NpuChip`, and the DCMI calls that failed."""

    card: int
    device: int
    fields: dict[str, Any] = attrs.field(factory=dict)
    #: field -> the failed call that should have given it (npu-smi is asked instead)
    failed: dict[str, Answer] = attrs.field(factory=dict)
    health_code: int | None = None

    def fail(self, answer: Answer, *fields: str) -> None:
        for field in fields:
            self.failed.setdefault(field, answer)


def _required(answer: Answer) -> Any:
    if not answer.ok:
        raise DcmiError(f"DCMI cannot list the chips: {answer.describe()}")
    return answer.value


def _count(value: int) -> int | None:
    """A DCMI total or count; ``8255`` ("not supported" passed on as a value) and 0 are unknown."""
    return None if value in (0, _NOT_SUPPORTED_VALUE) else value


async def discover_dcmi(client: DcmiClient, *, dev_root: Path, sys_root: Path, npu_smi: NpuSmi | None,
                        known: Mapping[int, NpuChip] | None = None) -> DcmiAnswer:
    """Discover every chip of the node through DCMI (all families; profiles filter).

    :param npu_smi: asked for what a failed DCMI call did not give, and for the topology (None: not
        found; those fields are then kept from ``known`` or omitted).
    :param known: the chips of this daemon's last answer from the driver (DCMI or npu-smi), by
        physical ID: facts no tier could read this time are kept from there (:mod:`.carryover`).
    :return: the chips ordered by logic ID, the chips left out, notes.
    :raises DcmiError: DCMI cannot be asked, or cannot list the chips or give their logic or physical
        IDs, or two chips share a logic or physical ID (the chain falls back to npu-smi).
    """
    first = await client.call([("dcmi_get_card_list",), ("dcmi_get_driver_version",)])
    cards = _required(first[0])
    counts = await client.call([("dcmi_get_device_id_in_card", card) for card in cards])
    chips = [_Chip(card, device) for card, answer in zip(cards, counts, strict=True)
             for device in range(_required(answer)["device_id_max"])]
    # The IDs first: a call that hangs loses the answers after it, and the tier needs every ID.
    per_chip = ("dcmi_get_device_chip_info", "dcmi_get_device_pcie_info_v2", "dcmi_get_device_health")
    second = await client.call([("dcmi_get_device_logic_id", c.card, c.device) for c in chips]
                               + [(name, c.card, c.device) for c in chips for name in per_chip])
    for chip, logic in zip(chips, second, strict=False):
        chip.fields.update(logic_id=_required(logic), npu_id=chip.card, chip_id=chip.device)
    for i, chip in enumerate(chips):
        info, pcie, health = second[len(chips) + 3 * i:len(chips) + 3 * i + 3]
        _read_chip_info(chip, info)
        _read_pcie(chip, pcie)
        _classify(chip)
        if health.ok:
            chip.health_code = health.value
            chip.fields["health"] = _health_name(health.value)
        elif not health.unsupported:
            chip.fail(health, "health")
        _read_driver(chip, first[1])
    third = await client.call([("dcmi_get_device_phyid_from_logicid", c.fields["logic_id"]) for c in chips]
                              + [call for c in chips for call in _third_calls(c)])
    for chip, physical in zip(chips, third, strict=False):
        chip.fields["physical_id"] = _required(physical)
    at = len(chips)
    for chip in chips:
        calls = _third_calls(chip)
        answers = third[at:at + len(calls)]
        at += len(calls)
        _read_die(chip, answers[0])
        if len(answers) > 1:
            _read_memory(chip, answers[1])
    return await _assemble(chips, dev_root=dev_root, sys_root=sys_root, npu_smi=npu_smi, known=known)


def _read_chip_info(chip: _Chip, answer: Answer) -> None:
    if answer.ok:
        name = normalise_chip_name(answer.value["chip_name"]) or None
        chip.fields.update(chip_name=name, aicore_count=_count(answer.value["aicore_cnt"]))
    elif not answer.unsupported:
        chip.fail(answer, "chip_name", "aicore_count", "family", "memory_kind", "memory_mib")


def _read_pcie(chip: _Chip, answer: Answer) -> None:
    if answer.ok:
        v = answer.value
        chip.fields["pci_address"] = f"{v['domain']:04x}:{v['bus']:02x}:{v['device']:02x}.{v['function']:x}"
        chip.fields["pci_device_id"] = f"0x{v['deviceid']:04x}" if v["deviceid"] else None
    elif not answer.unsupported:
        chip.fail(answer, "pci_address")


def _classify(chip: _Chip) -> None:
    """Family (PCI device ID first, then the name), memory kind, and the catalogue's AI cores."""
    name, pci = chip.fields.get("chip_name"), chip.fields.pop("pci_device_id", None)
    family = family_of(name, pci_device_id=pci)
    chip.fields.update(family=family, memory_kind=memory_kind(family) if family else None)
    if chip.fields.get("aicore_count") is None and (model := model_of(name)) is not None:
        chip.fields["aicore_count"] = model.aicore  # as the npu-smi tier: the catalogue fills the gap


def _read_driver(chip: _Chip, answer: Answer) -> None:
    if answer.ok:
        chip.fields["driver_version"] = answer.value or None
    elif not answer.unsupported:
        chip.fail(answer, "driver_version")


def _third_calls(chip: _Chip) -> list[tuple[object, ...]]:
    family = chip.fields.get("family")
    calls: list[tuple[object, ...]] = [
        ("dcmi_get_device_die_v2", chip.card, chip.device, DIE_DDIE if family is ChipFamily.ASCEND950 else DIE_VDIE)]
    if family is not None:
        hbm = chip.fields["memory_kind"].value == "HBM"
        calls.append(("dcmi_get_device_hbm_info" if hbm else "dcmi_get_device_memory_info_v3", chip.card, chip.device))
    return calls


def _read_die(chip: _Chip, answer: Answer) -> None:
    if answer.ok:
        chip.fields["uuid"] = "-".join(f"{word:08X}" for word in answer.value)
    elif not answer.unsupported:
        chip.fail(answer, "uuid")


def _read_memory(chip: _Chip, answer: Answer) -> None:
    if answer.ok:
        chip.fields["memory_mib"] = _count(answer.value["memory_size"])
    elif not answer.unsupported:
        chip.fail(answer, "memory_mib")


def _health_name(code: int) -> str | None:
    return HEALTH_STATES[code] if 0 <= code < len(HEALTH_STATES) else None


async def _assemble(chips: list[_Chip], *, dev_root: Path, sys_root: Path, npu_smi: NpuSmi | None,
                    known: Mapping[int, NpuChip] | None) -> DcmiAnswer:
    """Fill failed fields from npu-smi, check the IDs, drop chips that cannot be published, add the topology."""
    _unique(chips, "physical_id")
    _unique(chips, "logic_id")
    notes: list[str] = []
    taken: dict[str, int] = {}
    if any(c.failed for c in chips):
        taken, note = await _from_npu_smi(chips, npu_smi=npu_smi, dev_root=dev_root, sys_root=sys_root, known=known)
        notes.append(note)
    dropped: list[DroppedChip] = []
    found: list[NpuChip] = []
    carried: dict[str, int] = {}
    nodes, numa = await anyio.to_thread.run_sync(_node_facts, chips, dev_root, sys_root)
    for c in chips:
        physical = c.fields["physical_id"]
        record = DroppedChip(reason="", physical_id=physical, logic_id=c.fields["logic_id"], npu_id=c.card,
                             chip_id=c.device, chip_name=c.fields.get("chip_name"))
        if c.health_code is not None and c.fields.get("health") is None:
            dropped.append(attrs.evolve(record, reason=(
                f"DCMI health value {c.health_code} is none of {', '.join(HEALTH_STATES)}: npu-smi would not "
                "print the chip's first row, and published it would count as healthy")))
            continue
        if physical not in nodes:
            dropped.append(attrs.evolve(record, reason=f"no device node {dev_root / f'davinci{physical}'}"))
            continue
        chip = NpuChip(numa_node=numa.get(c.fields.get("pci_address")),
                       **{k: v for k, v in c.fields.items() if k in _NPU_CHIP_FIELDS})
        unread = [f for f in c.failed if f in FACTS and getattr(chip, f) is None]
        found.append(carry_counted(chip, known, unread, carried))
    found = without_shared_uuids(found)
    if any(c.family in TOPOLOGY_FAMILIES for c in found):
        found, topo_notes = await _topology(found, npu_smi, known, carried)
        notes.extend(topo_notes)
    if carried:
        notes.append(describe_carried(carried, "DCMI and npu-smi did not answer"))
        logger.info("attributes kept from the last answer", extra={"carried": carried, "tier": TIER_DCMI})
    for chip in dropped:
        logger.warning("chip not published", extra={**chip.log_fields(), "tier": TIER_DCMI})
    return DcmiAnswer(chips=tuple(sorted(found, key=lambda c: c.logic_id)), dropped=tuple(dropped),
                      notes=tuple(notes), from_npu_smi=taken)


_NPU_CHIP_FIELDS = frozenset(attrs.fields_dict(NpuChip))


def _node_facts(chips: Sequence[_Chip], dev_root: Path, sys_root: Path) -> tuple[set[int], dict[str, int]]:
    """The physical IDs whose ``davinci<N>`` exists, and PCI address -> NUMA node (blocking: one
    thread for all chips)."""
    nodes = {c.fields["physical_id"] for c in chips if (dev_root / f"davinci{c.fields['physical_id']}").exists()}
    addresses = {a for c in chips if (a := c.fields.get("pci_address"))}
    return nodes, {a: n for a in addresses if (n := devfs.numa_node(sys_root, a)) is not None}


def _unique(chips: Sequence[_Chip], field: str) -> None:
    seen: dict[int, _Chip] = {}
    for c in chips:
        other = seen.setdefault(c.fields[field], c)
        if other is not c:
            label = field.replace("_id", " ID").replace("_", " ")
            raise DcmiError(f"DCMI gives NPU {other.card} chip {other.device} and NPU {c.card} chip {c.device} "
                            f"the same {label} {c.fields[field]}")


async def _from_npu_smi(chips: list[_Chip], *, npu_smi: NpuSmi | None, dev_root: Path, sys_root: Path,
                        known: Mapping[int, NpuChip] | None) -> tuple[dict[str, int], str]:
    """The npu-smi tier's values for the fields whose DCMI call failed, by physical ID (the same NPU
    and chip IDs); :return: field -> chips taken, and the note."""
    calls = sorted({a.describe() for c in chips for a in c.failed.values()})
    fields = sorted({f for c in chips for f in c.failed})
    shown = "; ".join(calls[:3]) + (f"; and {len(calls) - 3} more" if len(calls) > 3 else "")
    if npu_smi is None:
        logger.warning("DCMI calls failed and npu-smi is not there; their fields are omitted",
                       extra={"calls": calls, "fields": fields, "tier": TIER_DCMI})
        return {}, f"dcmi: {shown}; npu-smi not found: {', '.join(fields)} omitted"
    try:
        answer = await discover_npu_smi(npu_smi, dev_root=dev_root, sys_root=sys_root, known=known)
    except NpuSmiError as exc:
        logger.warning("DCMI calls failed and npu-smi failed too; their fields are omitted",
                       extra={"calls": calls, "fields": fields, "error": str(exc), "tier": TIER_DCMI})
        return {}, f"dcmi: {shown}; npu-smi failed too ({exc}): {', '.join(fields)} omitted"
    by_physical = {c.physical_id: c for c in answer.chips}
    taken: dict[str, int] = {}
    for c in chips:
        other = by_physical.get(c.fields["physical_id"])
        if other is None or (other.npu_id, other.chip_id) != (c.card, c.device):
            continue
        for field in c.failed:
            c.fields[field] = getattr(other, field)
            taken[field] = taken.get(field, 0) + 1
    logger.warning("DCMI calls failed; npu-smi answered for them",
                   extra={"calls": calls, "from_npu_smi": taken, "tier": TIER_DCMI})
    what = ", ".join(f"{f} ({n} chip{'s' if n != 1 else ''})" for f, n in sorted(taken.items())) or "nothing"
    return taken, f"dcmi: {shown}; from npu-smi: {what}"


async def _topology(chips: list[NpuChip], npu_smi: NpuSmi | None, known: Mapping[int, NpuChip] | None,
                    carried: dict[str, int]) -> tuple[list[NpuChip], tuple[str, ...]]:
    """HCCS links and CPU affinity from ``npu-smi info -t topo`` (:func:`.npusmi_tier.with_topology`)."""
    try:
        topo = await npu_smi.topo() if npu_smi is not None else None
    except NpuSmiError as exc:
        logger.warning("npu-smi enrichment failed; its attributes are omitted",
                       extra={"what": "npu-smi info -t topo", "error": str(exc), "tier": TIER_DCMI})
        topo = None
    if topo is None:
        chips = [carry_counted(c, known, TOPOLOGY_FACTS, carried) for c in chips]
        if any(c.family in TOPOLOGY_FAMILIES and c.hccs is None for c in chips):
            return chips, ("npu-smi info -t topo gave no answer: hccs, topologyGroup and cpuAffinity omitted",)
        return chips, ()
    return with_topology(chips, topo)
