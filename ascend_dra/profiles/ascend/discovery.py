"""The discovery chain: npu-smi -> ``/dev/davinci*`` + sysfs -> simulated (the seed design's order).

The first tier that answers wins and is returned as ``source`` (``npu-smi``, ``devfs``,
``simulated``; it becomes ``Inventory.source``) and logged at INFO with the field ``tier``. A
failing npu-smi tier (missing, non-zero exit, timeout, unknown layout) is logged at WARNING with
its error and the chain goes on. The simulated tier runs only when the profile option asks for
it (:class:`SimulateMode`), because a real node with a broken npu-smi must not advertise invented
NPUs. With nothing found and no simulation, the result is an empty devfs answer.
"""

from __future__ import annotations

import enum
import logging
from pathlib import Path

import attrs

from ascend_dra.profiles.ascend import devfs
from ascend_dra.profiles.ascend.chip import NpuChip
from ascend_dra.profiles.ascend.chips import ChipModel
from ascend_dra.profiles.ascend.errors import NpuSmiError
from ascend_dra.profiles.ascend.npusmi import DEFAULT_TIMEOUT_S, NpuSmi
from ascend_dra.profiles.ascend.npusmi_tier import discover_npu_smi
from ascend_dra.profiles.ascend.simulated import simulated_chips

__all__ = ("TIER_DEVFS", "TIER_NPU_SMI", "TIER_SIMULATED", "Discovery", "SimulateMode", "discover_chips")

logger = logging.getLogger(__name__)

TIER_NPU_SMI = "npu-smi"
TIER_DEVFS = "devfs"
TIER_SIMULATED = "simulated"


class SimulateMode(enum.StrEnum):
    """When the simulated tier runs (profile option ``simulate``)."""

    NEVER = "never"        # default: real tiers only
    FALLBACK = "fallback"  # when npu-smi fails and devfs finds no davinci node
    ALWAYS = "always"      # skip the real tiers (laptops, CI)


@attrs.frozen
class Discovery:
    """What the chain found: the tier that answered, its chips, and why earlier tiers did not answer."""

    source: str
    chips: tuple[NpuChip, ...]
    failures: tuple[str, ...] = ()


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
) -> Discovery:
    """Run the chain and return the first tier's answer (all families; the profile filters).

    :param npu_smi: the npu-smi executable (``ProfileContext.npu_smi``).
    :param dev_root: where ``davinci<N>`` nodes are looked for (``ProfileContext.dev_root``).
    :param sys_root: sysfs root (``ProfileContext.sys_root``).
    :param simulated_model: the model simulated chips have (required unless ``simulate`` is NEVER).
    :param simulated_count: how many simulated chips (``ProfileContext.fake_devices``).
    :param timeout_s: deadline of each npu-smi call, in seconds.
    :raises ValueError: if simulation is asked for without a model.
    """
    if simulate is not SimulateMode.NEVER and simulated_model is None:
        raise ValueError("simulated discovery needs a chip model")
    failures: list[str] = []
    if simulate is not SimulateMode.ALWAYS:
        try:
            chips = await discover_npu_smi(NpuSmi(npu_smi, timeout_s=timeout_s), dev_root=dev_root,
                                           sys_root=sys_root)
        except NpuSmiError as exc:
            failures.append(str(exc))
            logger.warning("discovery tier failed; trying the next",
                           extra={"tier": TIER_NPU_SMI, "error": str(exc), "profile": profile})
        else:
            return _found(Discovery(TIER_NPU_SMI, chips), profile)
        chips = await devfs.discover_devfs(dev_root, sys_root)
        if chips or simulate is SimulateMode.NEVER:
            return _found(Discovery(TIER_DEVFS, chips, tuple(failures)), profile)
        failures.append(f"no davinci<N> device node under {dev_root}")
    assert simulated_model is not None
    return _found(Discovery(TIER_SIMULATED, simulated_chips(node_name, simulated_model, simulated_count),
                            tuple(failures)), profile)


def _found(result: Discovery, profile: str) -> Discovery:
    logger.info("discovery tier used", extra={"tier": result.source, "chips": len(result.chips), "profile": profile})
    return result
