"""The node's inventories: every loaded profile discovered, one failure never harming another.

The daemon discovers at start-up and again on every rediscovery (daemon.py); a profile that raises,
hangs or reuses a device name of another profile loses only its own devices (docs/architecture.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import attrs

from ascend_dra.model import Inventory
from ascend_dra.node.settings import Settings
from ascend_dra.profiles.base import ProfileContext
from ascend_dra.profiles.registry import LoadedProfile, ProfileLoadError, discover_isolated

__all__ = ("discover_all", "profile_context")

# The name these lines had before they moved here: --log-level quiets a logger by name (docs/logging.md).
log = logging.getLogger("ascend_dra.node.daemon")


def profile_context(settings: Settings) -> ProfileContext:
    """The :class:`ProfileContext` every profile receives, from the daemon settings."""
    return ProfileContext(
        node_name=settings.node_name, driver_name=settings.driver_name, fake_devices=settings.fake_devices,
        dev_root=settings.dev_root, sys_root=settings.sys_root, npu_smi=settings.npu_smi,
        state_dir=settings.plugin_dir / "profiles", options=dict(settings.profile_options),
        boot_id_file=settings.boot_id_file, dev_root_on_host=settings.dev_root_on_host,
    )


async def discover_all(
    loaded: Mapping[str, LoadedProfile], ctx: ProfileContext, timeout_s: float, *, level: int = logging.INFO,
    errors: dict[str, str] | None = None,
) -> dict[str, Inventory]:
    """Discover every profile, isolating failures: a profile that raises, hangs past ``timeout_s``
    or returns a device name another profile already uses loses those devices (or all of them),
    and the error is logged with its distribution; the others go on.

    :param errors: when given, filled with profile name -> why its discovery failed.
    :return: profile name -> inventory, for the profiles that discovered successfully.
    """
    inventories: dict[str, Inventory] = {}
    names: dict[str, str] = {}
    for name, entry in loaded.items():
        try:
            inventory = await discover_isolated(entry, ctx, timeout_s=timeout_s)
        except ProfileLoadError as exc:
            log.error("profile discovery failed; skipping the profile", extra={"profile": name, "error": str(exc)})
            if errors is not None:
                errors[name] = exc.reason
            continue
        kept = []
        for device in inventory.devices:
            if device.name in names:
                log.error("device name already used by another profile; skipping the device",
                          extra={"profile": name, "device": device.name, "other_profile": names[device.name]})
                continue
            names[device.name] = name
            kept.append(device)
        inventories[name] = attrs.evolve(inventory, devices=tuple(kept))
        log.log(level, "discovered devices", extra={"profile": name, "devices": len(kept), "tier": inventory.source})
        if not kept and level >= logging.INFO:  # at start-up: a node, or --profiles, that may be the wrong one
            log.warning("a profile found no devices; it publishes none", extra={"profile": name})
    return inventories
