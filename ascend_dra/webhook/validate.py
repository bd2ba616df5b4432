"""Opaque configs of ResourceClaims and ResourceClaimTemplates, checked when they are created.

Every ``spec.devices.config[i].opaque`` whose ``driver`` is ours (templates:
``spec.spec.devices.config[i]``) is decoded with the schema of the profile that declares its
``kind`` and validated (:func:`ascend_dra.profiles.base.decode_config`); configs for other
drivers pass untouched. All problems of the object are reported at once, each naming the config
index, the field path and the allowed values, and the requests the config applies to.

Shapes (docs/architecture.md#admission and the resource.k8s.io types): in v1 and v1beta2 a
request is ``{name, exactly: {deviceClassName, ...}}`` or ``{name, firstAvailable: [{name,
deviceClassName}, ...]}``; in v1beta1 ``deviceClassName`` sits on the request itself (no
``exactly``). The config entry ``{requests: [names], opaque: {driver, parameters}}`` is the same in
all three; ``requests`` may name ``<request>/<subrequest>``; empty means every request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ascend_dra.profiles.base import ConfigError, Profile, decode_config

__all__ = ("MAX_PARAMETERS_BYTES", "VERSIONS", "claim_problems", "denial_message")

#: API versions of resource.k8s.io this webhook reads (all three are registered in the rules).
VERSIONS = ("v1", "v1beta1", "v1beta2")

#: Size limit of ``opaque.parameters`` in bytes of JSON: the API server's own
#: ``OpaqueParametersMaxLength`` (10 Ki, resource.k8s.io types), checked here as well so the message
#: names the config.
MAX_PARAMETERS_BYTES = 10 * 1024

_KINDS = {"ResourceClaim": "spec", "ResourceClaimTemplate": "spec.spec"}


def _request_classes(devices: Mapping[str, Any], version: str) -> dict[str, str]:
    """``{request or request/subrequest name: device class}`` for the messages."""
    found: dict[str, str] = {}
    for request in devices.get("requests") or ():
        if not isinstance(request, Mapping) or not isinstance(request.get("name"), str):
            continue
        name = request["name"]
        exact = request if version == "v1beta1" else request.get("exactly")
        if isinstance(exact, Mapping) and isinstance(exact.get("deviceClassName"), str):
            found[name] = exact["deviceClassName"]
        for sub in request.get("firstAvailable") or ():
            if isinstance(sub, Mapping) and isinstance(sub.get("name"), str):
                found[f"{name}/{sub['name']}"] = str(sub.get("deviceClassName", "?"))
    return found


def _for_requests(names: object, classes: Mapping[str, str]) -> str:
    if not names:
        return "for all requests"
    if not isinstance(names, list):
        return "for requests ?"
    shown = [f"{n} (class {classes[n]})" if isinstance(n, str) and n in classes else str(n) for n in names]
    return ("for request " if len(shown) == 1 else "for requests ") + ", ".join(shown)


def _kinds(profiles: Mapping[str, Profile]) -> tuple[dict[str, type], dict[str, list[Profile]]]:
    types: dict[str, type] = {}
    owners: dict[str, list[Profile]] = {}
    for profile in profiles.values():
        for kind, cls in profile.config_types.items():
            types.setdefault(kind, cls)
            owners.setdefault(kind, []).append(profile)
    return types, owners


def _config_problems(parameters: object, driver_name: str, profiles: Mapping[str, Profile]) -> list[tuple[str, str]]:
    """``(path under opaque, message)`` for one config of our driver; empty when it is valid."""
    if parameters is None:
        return [("parameters", "required field missing: a config for driver "
                 f"{driver_name} needs apiVersion {driver_name}/v1alpha1 and a kind")]
    if not isinstance(parameters, Mapping):
        kind = "an array" if isinstance(parameters, list) else type(parameters).__name__
        return [("parameters", f"must be a JSON object with apiVersion and kind, got {kind}")]
    size = len(orjson.dumps(parameters))
    if size > MAX_PARAMETERS_BYTES:
        return [("parameters", f"is {size} bytes of JSON, more than the {MAX_PARAMETERS_BYTES} allowed")]
    types, owners = _kinds(profiles)
    try:
        decode_config(parameters, types, driver_name)
    except ConfigError as exc:
        return list(exc.problems)
    # The kind is known; every profile declaring it gets its say, and one acceptance is enough
    # (npu-310P and npu-910 share NpuConfig; which one prepares the claim is the scheduler's choice).
    first: list[tuple[str, str]] = []
    for profile in owners[str(parameters["kind"])]:
        try:
            decode_config(parameters, profile.config_types, driver_name, profile)
            return []
        except ConfigError as exc:
            first = first or list(exc.problems)
    return first


def claim_problems(
    obj: Mapping[str, Any], kind: str, version: str, driver_name: str, profiles: Mapping[str, Profile]
) -> list[str]:
    """Every problem of the opaque configs for ``driver_name`` in a claim or claim template.

    :param obj: the ResourceClaim or ResourceClaimTemplate as the API server sent it.
    :param kind: ``ResourceClaim`` or ``ResourceClaimTemplate``.
    :param version: ``v1``, ``v1beta1`` or ``v1beta2`` (:data:`VERSIONS`).
    :param profiles: the loaded profiles, by name; their ``config_types`` give the known kinds.
    :returns: one line per problem, ``<field path>: <message> (<requests>)``, e.g.
        ``spec.devices.config[0].opaque.parameters.sharing.strategy: "Bogus" is not one of
        TimeSlicing, SpacePartitioning (for request gpu (class gpu.example.com))``; empty if valid.
    :raises ValueError: for a kind or version this webhook does not handle.
    """
    if kind not in _KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(_KINDS)}")
    if version not in VERSIONS:
        raise ValueError(f"resource.k8s.io version {version!r} is not one of {', '.join(VERSIONS)}")
    root = _KINDS[kind]
    spec: Any = obj
    for part in root.split("."):
        spec = spec.get(part) if isinstance(spec, Mapping) else None
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    if not isinstance(devices, Mapping):
        return []
    configs = devices.get("config") or []
    if not isinstance(configs, list):
        return [f"{root}.devices.config: must be a list, got {type(configs).__name__}"]
    classes = _request_classes(devices, version)
    lines = []
    for index, entry in enumerate(configs):
        opaque = entry.get("opaque") if isinstance(entry, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver_name:
            continue  # another driver's config, or not an opaque one: not ours to judge
        where = f"{root}.devices.config[{index}].opaque"
        context = _for_requests(entry.get("requests"), classes)
        for path, message in _config_problems(opaque.get("parameters"), driver_name, profiles):
            lines.append(f"{where}.{path}: {message} ({context})")
    return lines


def denial_message(kind: str, namespace: str, name: str, problems: Sequence[str]) -> str:
    """The admission denial's text: the object, how many problems, then each one.

    ``name`` may be empty (``generateName``); then the object reads ``ResourceClaim ns/<generated>``.
    """
    shown = f"{namespace}/{name or '<generated>'}"
    count = len(problems)
    return (f"{kind} {shown}: {count} problem{'s' if count != 1 else ''} in opaque configs for our driver: "
            + "; ".join(problems))
