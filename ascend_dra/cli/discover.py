"""``ascend-dra discover``: what this node has, as a table or as the ResourceSlices the daemon would publish.

Each profile's discovery runs exactly as in the daemon (same :class:`ProfileContext`, same chain),
bounded by a deadline and isolated: a profile that fails is reported, the others are shown.
The YAML and JSON outputs are the ``resource.k8s.io/v1`` ResourceSlice objects of
:func:`ascend_dra.cluster.publish.build_slices` for the merged inventory (pool = node name, generation 1).

A profile may also explain its answer: an optional method ``discovery_notes() -> Sequence[str]``
(the Ascend profiles say which npu-smi binary they ran, and count and list the chips they did not
publish, with the reason). The notes are lines under the table and ``#`` comments on top of the
YAML; a ``v1`` ``List`` has no place for them, so the JSON output leaves them out.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from ascend_dra.cluster.publish import build_slices
from ascend_dra.model import Device, Inventory
from ascend_dra.profiles.base import ProfileContext

__all__ = ("DEFAULT_TIMEOUT_S", "OUTPUTS", "discover_profiles", "main", "profile_notes", "render", "run")

#: Output formats of :func:`run`.
OUTPUTS = ("table", "yaml", "json")
#: Seconds one profile's discovery may take (the daemon's ``--discovery-timeout`` default).
DEFAULT_TIMEOUT_S = 30.0
_COLUMNS = ("PROFILE", "DEVICE", "CHIP", "MEMORY", "NUMA", "TOPOLOGY", "TIER")


async def discover_profiles(
    profiles: Sequence[Any], ctx: ProfileContext, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> tuple[dict[str, Inventory], dict[str, str]]:
    """Discover every profile, one at a time, each within ``timeout_s`` seconds, isolated as the
    daemon isolates it (:func:`ascend_dra.profiles.registry.discover_isolated`, the same messages).

    :param profiles: objects with ``name`` and ``async discover(ctx)`` (the profile contract).
    :return: ``(profile name -> Inventory, profile name -> error message)``; a profile whose
        discovery raised, timed out or returned devices the API server would reject is in the second.
    """
    from ascend_dra.profiles.registry import LoadedProfile, ProfileLoadError, discover_isolated

    inventories: dict[str, Inventory] = {}
    errors: dict[str, str] = {}
    for profile in profiles:
        name = str(getattr(profile, "name", type(profile).__name__))
        loaded = LoadedProfile(name=name, distribution="unknown", version="", target="", profile=profile)
        try:
            inventories[name] = await discover_isolated(loaded, ctx, timeout_s=timeout_s)
        except ProfileLoadError as exc:
            errors[name] = exc.reason
    return inventories, errors


def profile_notes(profiles: Sequence[Any]) -> dict[str, tuple[str, ...]]:
    """Profile name -> the lines of its optional ``discovery_notes()`` (after :func:`discover_profiles`).

    A profile without the method, or whose method raises, has no notes (discover still shows its devices).
    """
    notes: dict[str, tuple[str, ...]] = {}
    for profile in profiles:
        method = getattr(profile, "discovery_notes", None)
        if not callable(method):
            continue
        try:
            lines = tuple(str(line) for line in method())
        except Exception:  # a profile's own report must not hide its devices
            continue
        if lines:
            notes[str(getattr(profile, "name", type(profile).__name__))] = lines
    return notes


def _merged(inventories: Mapping[str, Inventory], errors: dict[str, str]) -> tuple[Inventory, dict[str, str]]:
    """All devices in one inventory (a name already taken by an earlier profile is skipped and
    reported in ``errors``); also returns device name -> the profile that owns it."""
    owner: dict[str, str] = {}
    devices: list[Device] = []
    counter_sets = []
    for name, inventory in inventories.items():
        for device in inventory.devices:
            if device.name in owner:
                errors.setdefault(name, "")
                errors[name] = (errors[name] + "; " if errors[name] else "") + (
                    f"device {device.name} skipped: profile {owner[device.name]} already has it")
                continue
            owner[device.name] = name
            devices.append(device)
        counter_sets.extend(inventory.counter_sets)
    sources = sorted({i.source for i in inventories.values() if i.source})
    return Inventory(devices=tuple(devices), counter_sets=tuple(counter_sets), source=",".join(sources)), owner


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _table(inventories: Mapping[str, Inventory], errors: Mapping[str, str], owner: Mapping[str, str],
           notes: Mapping[str, Sequence[str]]) -> str:
    rows = [_COLUMNS]
    empty = []
    for name, inventory in inventories.items():
        if not inventory.devices:
            empty.append(f"{name}: no devices (tier {inventory.source or 'unknown'})")
        for device in inventory.devices:
            if owner.get(device.name) != name:
                continue
            attributes = device.attributes
            memory = device.capacities.get("memory")
            rows.append((
                name, device.name,
                _cell(attributes.get("chipName") or attributes.get("chipFamily")),
                _cell(memory.value if memory else None),
                _cell(attributes.get("numaNode")),
                _cell(attributes.get("topologyGroup")),
                _cell(inventory.source),
            ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    if len(rows) == 1:
        lines.append("(no devices)")
    lines.extend(empty)
    lines.extend(f"{name}: {note}" for name, profile_lines in notes.items() for note in profile_lines)
    lines.extend(f"{name}: {message}" for name, message in errors.items())
    return "\n".join(lines) + "\n"


def render(inventories: Mapping[str, Inventory], errors: Mapping[str, str], ctx: ProfileContext,
           output: str, notes: Mapping[str, Sequence[str]] | None = None) -> str:
    """Render discovered inventories.

    :param notes: profile name -> lines from its ``discovery_notes()`` (:func:`profile_notes`):
        ``<profile>: <line>`` under the table, before the failures; ``# <profile>: <line>`` on top
        of the YAML, after the failures; not in the JSON.
    :param output: ``table`` (one row per device: profile, device, chip, memory, NUMA node,
        topology group, discovery tier; then one line per failed profile), ``yaml`` (the
        ResourceSlices as a multi-document stream, failures as ``#`` comments on top) or ``json``
        (a ``v1`` ``List`` of the ResourceSlices; failures are not in it).
    :raises ValueError: if ``output`` is not one of :data:`OUTPUTS`.
    """
    if output not in OUTPUTS:
        raise ValueError(f"discover: output {output!r} is not one of {', '.join(OUTPUTS)}")
    errors = dict(errors)
    merged, owner = _merged(inventories, errors)
    notes = notes or {}
    if output == "table":
        return _table(inventories, errors, owner, notes)
    slices = build_slices(merged, driver_name=ctx.driver_name, node_name=ctx.node_name)
    if output == "json":
        document = {"apiVersion": "v1", "kind": "List", "items": slices}
        return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n"
    comments = "".join(f"# {name}: {message}\n" for name, message in errors.items())
    comments += "".join(f"# {name}: {note}\n" for name, lines in notes.items() for note in lines)
    return comments + yaml.safe_dump_all(slices, sort_keys=False)


async def run(profiles: Sequence[Any], ctx: ProfileContext, output: str, *,
              timeout_s: float = DEFAULT_TIMEOUT_S, load_errors: Mapping[str, str] | None = None) -> str:
    """Discover with ``profiles`` and return the text to print (see :func:`render` for the formats).

    :param profiles: profile objects (``name``, ``async discover(ctx)``), in the order to show them.
    :param load_errors: profile name -> why it could not be loaded; shown like discovery failures.
    :raises ValueError: if ``output`` is not one of :data:`OUTPUTS` (checked before discovering).
    """
    if output not in OUTPUTS:
        raise ValueError(f"discover: output {output!r} is not one of {', '.join(OUTPUTS)}")
    inventories, errors = await discover_profiles(profiles, ctx, timeout_s=timeout_s)
    return render(inventories, {**(load_errors or {}), **errors}, ctx, output, profile_notes(profiles))


async def main(args: argparse.Namespace, options: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """``ascend-dra discover`` from parsed CLI flags (``--profiles``, ``--output``, ``--node-name``,
    ``--driver-name``, ``--fake-devices``, ``--npu-smi``, ``--dev-root``, ``--sys-root``).

    :return: ``(text to print, True if every profile loaded and discovered)``. Profiles that keep
        files (the fake one's driver directory) get a temporary state directory: discover writes
        nothing on the node.
    """
    from ascend_dra.profiles.registry import load_profiles

    loaded = load_profiles(list(args.profiles), log=False)
    profiles = [entry.profile for entry in loaded if entry.profile is not None]
    load_errors = {entry.name: str(entry.error) for entry in loaded if entry.profile is None}
    with tempfile.TemporaryDirectory(prefix="ascend-dra-discover-") as state_dir:
        ctx = ProfileContext(
            node_name=args.node_name, driver_name=args.driver_name, fake_devices=args.fake_devices,
            dev_root=args.dev_root, sys_root=args.sys_root, npu_smi=args.npu_smi, state_dir=Path(state_dir),
            options=dict(options or {}),
        )
        inventories, errors = await discover_profiles(profiles, ctx, timeout_s=30.0)
        text = render(inventories, {**load_errors, **errors}, ctx, args.output, profile_notes(profiles))
    return text, not load_errors and not errors
