"""The discovery chain: DCMI -> npu-smi -> ``/dev/davinci*`` + sysfs -> simulated (docs/ascend-discovery.md).

The first tier that answers wins and is returned as ``source`` (``dcmi``, ``npu-smi``, ``devfs``,
``simulated``; it becomes ``Inventory.source``) and logged at INFO with the field ``tier``. The
DCMI tier runs only when the profile gives a :class:`..dcmi.client.DcmiSource` and ``libdcmi.so`` is found
(:mod:`.dcmi_tier`). A failing DCMI or npu-smi tier (missing, non-zero exit, timeout, unknown
layout) is logged at WARNING with its error and the chain goes on. The simulated tier runs only
when the profile option asks for it (:class:`SimulateMode`), because a real node with a broken
npu-smi must not advertise invented NPUs. With nothing found and no simulation, the result is an empty devfs answer.

Device names do not depend on the tier (docs/ascend-discovery.md): a chip of the npu-smi tier
whose ``/dev/davinci<physicalID>`` is absent is not returned but listed as dropped, and the devfs
tier, which cannot know chip IDs, says so in its notes.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from pathlib import Path

import anyio
import attrs

from ascend_dra.profiles.ascend.chip import DroppedChip, NpuChip
from ascend_dra.profiles.ascend.chips import ChipModel
from ascend_dra.profiles.ascend.dcmi.client import DcmiError, DcmiSource
from ascend_dra.profiles.ascend.discovery import devfs
from ascend_dra.profiles.ascend.discovery.carryover import FACTS, carry_counted, describe_carried
from ascend_dra.profiles.ascend.discovery.dcmi_tier import TIER_DCMI, discover_dcmi
from ascend_dra.profiles.ascend.discovery.npusmi_tier import discover_npu_smi
from ascend_dra.profiles.ascend.discovery.simulated import simulated_chips
from ascend_dra.profiles.ascend.discovery.stable import StableAnswers
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiError, NpuSmiNotFound
from ascend_dra.profiles.ascend.npusmi.locate import LocatedNpuSmi, locate_npu_smi
from ascend_dra.profiles.ascend.npusmi.runner import DEFAULT_TIMEOUT_S, NpuSmi

__all__ = ("DRIVER_TIERS", "TIER_DCMI", "TIER_DEVFS", "TIER_NPU_SMI", "TIER_SIMULATED", "Discovery", "SimulateMode",
           "discover_chips")

logger = logging.getLogger(__name__)

TIER_NPU_SMI = "npu-smi"
TIER_DEVFS = "devfs"
TIER_SIMULATED = "simulated"
#: The tiers that ask the driver (NPU and chip IDs known, health readable).
DRIVER_TIERS = frozenset({TIER_DCMI, TIER_NPU_SMI})


class SimulateMode(enum.StrEnum):
    """When the simulated tier runs (profile option ``simulate``)."""

    NEVER = "never"        # default: real tiers only
    FALLBACK = "fallback"  # when npu-smi fails and devfs finds no davinci node
    ALWAYS = "always"      # skip the real tiers (laptops, CI)


@attrs.frozen
class Discovery:
    """What the chain found: the tier that answered, its chips, and why earlier tiers did not answer.

    :ivar npu_smi: which npu-smi executable was tried and how it was found (None with ``always``).
    :ivar dropped: chips the answering tier found but that are not returned (no device node).
    :ivar notes: what an operator should know about this answer (``ascend-dra discover`` shows them).
    :ivar failures: why the npu-smi and the devfs tier did not answer, in that order, for those tried.
    :ivar dcmi_failure: why the DCMI tier did not answer, when it was tried.
    """

    source: str
    chips: tuple[NpuChip, ...]
    failures: tuple[str, ...] = ()
    npu_smi: LocatedNpuSmi | None = None
    dropped: tuple[DroppedChip, ...] = ()
    notes: tuple[str, ...] = ()
    dcmi_failure: str | None = None


async def discover_chips(
    *,
    npu_smi: str,
    dev_root: Path,
    sys_root: Path,
    node_name: str,
    simulate: SimulateMode = SimulateMode.NEVER,
    simulated_model: ChipModel | None = None,
    simulated_count: int = 0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    profile: str = "",
    host_root: Path = Path("/"),
    search_path: str | None = None,
    known: Mapping[int, NpuChip] | None = None,
    dcmi: DcmiSource | None = None,
    stable: StableAnswers | None = None,
) -> Discovery:
    """Run the chain and return the first tier's answer (all families; the profile filters).

    :param npu_smi: the npu-smi executable (``ProfileContext.npu_smi``); the default bare name is
        searched on ``search_path`` and then in the driver's install locations under ``host_root``
        (:func:`.locate.locate_npu_smi`).
    :param dev_root: where ``davinci<N>`` nodes are looked for (``ProfileContext.dev_root``). A chip
        of the npu-smi tier whose ``<dev_root>/davinci<physicalID>`` is absent is not returned: it
        is logged and listed in ``Discovery.dropped`` (a container could not be given it).
    :param sys_root: sysfs root (``ProfileContext.sys_root``).
    :param simulated_model: the model simulated chips have (required unless ``simulate`` is NEVER).
    :param simulated_count: how many simulated chips (``ProfileContext.fake_devices``).
    :param timeout_s: deadline of each npu-smi call, in seconds.
    :param known: chips of an earlier npu-smi answer, by physical ID. When the devfs tier answers
        for exactly known physical IDs, its chips take their logic, chip and NPU IDs from there,
        so a device keeps its name when npu-smi stops answering (docs/ascend-discovery.md). Facts
        of the hardware that a failed npu-smi call or the devfs tier cannot read (uuid, memory,
        AI cores, topology) are kept from there too, per chip in the same slot (:mod:`.carryover`).
    :param dcmi: the profile's DCMI library and client: ``libdcmi.so`` is looked for under
        ``host_root`` and, when found, the DCMI tier runs first (None: no DCMI tier).
    :param stable: the profile's npu-smi answers kept across rediscoveries (:mod:`.stable`), used by
        the npu-smi tier (None: every call is made).
    :raises ValueError: if simulation is asked for without a model.
    """
    if simulate is not SimulateMode.NEVER and simulated_model is None:
        raise ValueError("simulated discovery needs a chip model")
    failures: list[str] = []
    located: LocatedNpuSmi | None = None
    if simulate is not SimulateMode.ALWAYS:
        located = await anyio.to_thread.run_sync(
            lambda: locate_npu_smi(npu_smi, host_root=host_root, search_path=search_path))
        notes = [f"npu-smi: {located.describe()}"]
        dcmi_failure = None
        if dcmi is not None:
            found = await _dcmi_tier(dcmi, located, notes, dev_root=dev_root, sys_root=sys_root, timeout_s=timeout_s,
                                     host_root=host_root, known=known, profile=profile)
            if isinstance(found, Discovery):
                return found
            dcmi_failure = found
        try:
            if not located.found:
                raise NpuSmiNotFound(f"{npu_smi} info", npu_smi, "not on $PATH nor in the driver's install "
                                     f"locations ({', '.join(located.searched[1:])})")
            answer = await discover_npu_smi(NpuSmi(located.executable, timeout_s=timeout_s), dev_root=dev_root,
                                            sys_root=sys_root, known=known, stable=stable)
        except NpuSmiError as exc:
            failures.append(str(exc))
            logger.warning("discovery tier failed; trying the next",
                           extra={"tier": TIER_NPU_SMI, "error": str(exc), "profile": profile,
                                  "npu_smi": located.executable})
        else:
            for chip in answer.dropped:
                logger.warning("chip not published", extra={**chip.log_fields(), "tier": TIER_NPU_SMI,
                                                             "profile": profile})
            return _found(Discovery(TIER_NPU_SMI, answer.chips, npu_smi=located, dropped=answer.dropped,
                                    notes=(*notes, *answer.notes), dcmi_failure=dcmi_failure), profile)
        chips = await devfs.discover_devfs(dev_root, sys_root)
        if chips or simulate is SimulateMode.NEVER:
            chips, devfs_notes = _devfs_ids(chips, known, profile)
            chips, facts_notes = _devfs_facts(chips, known, profile)
            devfs_notes = (*devfs_notes, *facts_notes)
            return _found(Discovery(TIER_DEVFS, chips, tuple(failures), npu_smi=located,
                                    notes=(*notes, *devfs_notes), dcmi_failure=dcmi_failure), profile)
        failures.append(f"no davinci<N> device node under {dev_root}")
    assert simulated_model is not None
    return _found(Discovery(TIER_SIMULATED, simulated_chips(node_name, simulated_model, simulated_count),
                            tuple(failures), npu_smi=located,
                            dcmi_failure=dcmi_failure if simulate is not SimulateMode.ALWAYS else None), profile)


async def _dcmi_tier(dcmi: DcmiSource, located: LocatedNpuSmi, notes: list[str], *, dev_root: Path, sys_root: Path,
                     timeout_s: float, host_root: Path, known: Mapping[int, NpuChip] | None,
                     profile: str) -> Discovery | str | None:
    """The DCMI tier: its Discovery, or why it failed (str), or None when no library is installed.
    Adds the ``dcmi: ...`` note in front of ``notes``. A failure is logged at WARNING when it differs
    from the last one (a broken library would otherwise add the same line to every rediscovery)."""
    where = await dcmi.refresh(host_root)
    if dcmi.client is None:
        notes.insert(0, f"dcmi: {where.describe()}")
        return None
    npu_smi = NpuSmi(located.executable, timeout_s=timeout_s) if located.found else None
    try:
        answer = await discover_dcmi(dcmi.client, dev_root=dev_root, sys_root=sys_root, npu_smi=npu_smi, known=known)
    except DcmiError as exc:
        level = logging.WARNING if str(exc) != dcmi.last_failure else logging.DEBUG
        dcmi.last_failure = str(exc)
        logger.log(level, "discovery tier failed; trying the next",
                   extra={"tier": TIER_DCMI, "error": str(exc), "profile": profile, "library": str(where.path)})
        notes.insert(0, f"dcmi: {where.describe()}")
        return str(exc)
    dcmi.last_failure = None
    version = dcmi.client.dcmi_version
    notes.insert(0, f"dcmi: {where.describe()}" + (f" ({version})" if version else ""))
    return _found(Discovery(TIER_DCMI, answer.chips, npu_smi=located, dropped=answer.dropped,
                            notes=(*notes, *answer.notes)), profile)


def _devfs_ids(chips: tuple[NpuChip, ...], known: Mapping[int, NpuChip] | None,
               profile: str) -> tuple[tuple[NpuChip, ...], tuple[str, ...]]:
    """Logic, chip and NPU IDs of devfs chips: remembered from npu-smi when it saw the same chips,
    else the devfs rule (logic ID = rank of the physical ID; chip and NPU IDs unknown)."""
    if not chips:
        return chips, ()
    physical = {c.physical_id for c in chips}
    if known and physical == set(known) and len({k.logic_id for k in known.values()}) == len(known):
        logger.info("devfs tier: logic, chip and NPU IDs kept from the last npu-smi answer",
                    extra={"tier": TIER_DEVFS, "profile": profile, "chips": len(chips)})
        kept = tuple(attrs.evolve(c, logic_id=known[c.physical_id].logic_id, chip_id=known[c.physical_id].chip_id,
                                  npu_id=known[c.physical_id].npu_id) for c in chips)
        return kept, ("devfs tier: logic, chip and NPU IDs kept from the last npu-smi answer",)
    note = ("devfs tier: chip IDs and NPU IDs unknown (chipID and npuID omitted); logic ID = rank of the "
            "physical ID among /dev/davinci<N>")
    logger.warning("chip IDs unknown on this tier; device names use the logic ID only",
                   extra={"tier": TIER_DEVFS, "profile": profile, "chips": len(chips)})
    return chips, (note,)


def _devfs_facts(chips: tuple[NpuChip, ...], known: Mapping[int, NpuChip] | None,
                 profile: str) -> tuple[tuple[NpuChip, ...], tuple[str, ...]]:
    """What the devfs tier cannot read (uuid, memory, AI cores, model, topology), kept per chip from
    the last npu-smi answer when it saw the same chip in the same slot (:mod:`.carryover`)."""
    carried: dict[str, int] = {}
    out = [carry_counted(c, known, [f for f in FACTS if getattr(c, f) is None], carried) for c in chips]
    if not carried:
        return chips, ()
    logger.info("devfs tier: attributes kept from the last npu-smi answer",
                extra={"tier": TIER_DEVFS, "profile": profile, "carried": carried})
    return tuple(out), (describe_carried(carried, "devfs tier"),)


def _found(result: Discovery, profile: str) -> Discovery:
    logger.info("discovery tier used", extra={"tier": result.source, "chips": len(result.chips), "profile": profile,
                                              "dropped": len(result.dropped)})
    return result
