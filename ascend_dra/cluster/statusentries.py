"""What a prepared claim's ``status.devices`` says (KEP-4817): the entries and the apply body.

Pure functions of a :class:`PreparedClaim` and its CDI specs; claimstatus.py decides when and how
they are written. The ``data`` of an entry is described there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import orjson
import yaml

from ascend_dra.model import PreparedDevice

__all__ = (
    "MAX_DATA_BYTES",
    "MAX_DEVICES",
    "PreparedClaim",
    "apply_body",
    "cdi_env",
    "device_entries",
    "field_manager",
)

# The name these lines had before they moved here: --log-level quiets a logger by name (docs/logging.md).
log = logging.getLogger("ascend_dra.cluster.claimstatus")

#: ``AllocatedDeviceStatus.data`` limit (``resource.k8s.io/v1`` validation): 10 KiB of JSON.
MAX_DATA_BYTES = 10 * 1024
#: Entries per claim: ``status.devices`` matches allocated devices, at most 32 results per claim.
MAX_DEVICES = 32
#: Which CDI env variables are the profile's per-device data worth showing (quota, visibility).
_ENV_SHOWN = re.compile(r"^(ASCEND_[A-Z0-9_]*|NPU_[A-Z0-9_]*|NVIDIA_VISIBLE_DEVICES"
                        r"|[A-Z0-9_]*_(QUOTA|LIMIT|PRIORITY))$")
#: ``fieldManager`` is at most 128 characters (apimachinery ``ValidateFieldManager``).
MAX_FIELD_MANAGER = 128


def field_manager(driver_name: str, pool: str | None) -> str:
    """The field manager of one node's status writes: ``<driver>/<pool>`` (a node's pool is named
    after it), cut to 128 characters with a hash of the pool in place of its end; the driver name
    alone without a pool."""
    if pool is None:
        return driver_name
    name = f"{driver_name}/{pool}"
    if len(name) <= MAX_FIELD_MANAGER:
        return name
    digest = hashlib.sha256(pool.encode()).hexdigest()[:16]
    return f"{name[:MAX_FIELD_MANAGER - 17]}-{digest}"


@attrs.frozen
class PreparedClaim:
    """What one successful Prepare leaves for the status writer, captured when it answered.

    :ivar attributes: device name -> its published attributes (from the inventory).
    :ivar spec_files: the claim's CDI spec files (absolute paths), read for ``env``.
    :ivar side_effects: profile name -> what its ``prepare_side_effects`` returned.
    """

    namespace: str
    name: str
    uid: str
    devices: tuple[PreparedDevice, ...]
    attributes: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    spec_files: tuple[Path, ...] = ()
    side_effects: Mapping[str, Any] = attrs.field(factory=dict)


def cdi_env(spec_files: Sequence[Path]) -> dict[str, dict[str, str]]:
    """Read CDI spec files (JSON or YAML); return fully-qualified device id -> its env as a dict.

    Read on the event loop, as Prepare writes them: the CDI dir is tmpfs on a node and a spec is a
    few KiB, so a read costs microseconds and a worker thread's hand-off more. A file that is
    missing or unreadable adds nothing.
    """
    found: dict[str, dict[str, str]] = {}
    for path in spec_files:
        try:
            spec = _load_spec(path.read_bytes())
        except (OSError, yaml.YAMLError) as exc:
            log.debug("cannot read a CDI spec for the claim status", extra={"path": str(path), "error": str(exc)})
            continue
        if not isinstance(spec, Mapping):
            continue
        kind = spec.get("kind", "")
        for device in spec.get("devices") or []:
            edits = device.get("containerEdits") or {}
            env = dict(e.split("=", 1) for e in edits.get("env") or [] if isinstance(e, str) and "=" in e)
            found[f"{kind}={device.get('name', '')}"] = env
    return found


def _load_spec(raw: bytes) -> Any:
    """A CDI spec's content: JSON (what we write; orjson, ~50x faster than PyYAML), else YAML."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _vnpu_id(side_effects: Mapping[str, Any], device_name: str) -> Any:
    for effects in side_effects.values():
        if isinstance(effects, Mapping):
            per_device = effects.get("devices")
            if isinstance(per_device, Mapping) and isinstance(per_device.get(device_name), Mapping):
                value = per_device[device_name].get("vnpuID")
                if value is not None:
                    return value
    return None


def device_entries(driver_name: str, claim: PreparedClaim, env: Mapping[str, Mapping[str, str]]) -> list[dict]:
    """The claim's ``status.devices`` entries for our devices (pure).

    :param env: CDI device id -> env, as :func:`cdi_env` returns.
    """
    entries = []
    for device in claim.devices[:MAX_DEVICES]:
        data: dict[str, Any] = {}
        physical_id = claim.attributes.get(device.device_name, {}).get("physicalID")
        if physical_id is not None:
            data["physicalID"] = physical_id
        shown = {k: v for cdi_id in device.cdi_device_ids for k, v in env.get(cdi_id, {}).items()
                 if _ENV_SHOWN.match(k)}
        if shown:
            data["env"] = dict(sorted(shown.items()))
        vnpu_id = _vnpu_id(claim.side_effects, device.device_name)
        if vnpu_id is not None:
            data["vnpuID"] = vnpu_id
        if len(json.dumps(data)) > MAX_DATA_BYTES:  # the env is the only unbounded part
            data.pop("env", None)
        entry: dict[str, Any] = {"driver": driver_name, "pool": device.pool_name, "device": device.device_name}
        if device.share_id:
            entry["shareID"] = device.share_id
        if data:
            entry["data"] = data
        entries.append(entry)
    return entries


def apply_body(namespace: str, name: str, uid: str, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The server-side apply configuration: our entries (none removes ours), ``metadata.uid`` as a precondition."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "status": {"devices": list(entries)}}
