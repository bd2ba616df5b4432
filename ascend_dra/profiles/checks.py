"""What the API server would reject in a profile's inventory, checked before we publish it.

A profile's :class:`~ascend_dra.model.Inventory` becomes ResourceSlices; one bad device (an
upper-case name, a 40-character attribute name, a version with a leading ``v``) would make the
whole slice fail to publish, so the registry rejects such an inventory at discovery and names the
profile that produced it (:func:`ascend_dra.profiles.registry.discover_isolated`).

Source: ``resource.k8s.io/v1`` validation in kubernetes ``pkg/apis/resource/validation/validation.go``
(1.34/1.35), summarised in docs/architecture.md#api-objects-and-limits. Where 1.34 and 1.35
differ we check the stricter limit, so what passes here publishes on both.

Each problem is one string, ``<path>: <what is wrong> (<what is allowed>)``. The path of
:func:`device_problems` is relative to the device (``attributes.cudaVersion``); the path of
:func:`inventory_problems` starts at the inventory (``devices[3] (gpu-3).attributes.cudaVersion``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from decimal import Decimal

from ascend_dra.model import (
    Capacity,
    CapacityRequestPolicy,
    CounterSet,
    Device,
    Inventory,
    Version,
    parse_quantity,
)

__all__ = (
    "MAX_ATTRIBUTES_AND_CAPACITIES",
    "MAX_CONSUMES_COUNTERS",
    "MAX_COUNTERS",
    "MAX_ID_LENGTH",
    "MAX_TAINTS",
    "MAX_VALUE_LENGTH",
    "attribute_problem",
    "device_problems",
    "inventory_problems",
    "is_dns_label",
    "is_semver",
)

#: ``ResourceSliceMaxAttributesAndCapacitiesPerDevice``.
MAX_ATTRIBUTES_AND_CAPACITIES = 32
#: ``DeviceAttributeMaxValueLength``: string and version attribute values.
MAX_VALUE_LENGTH = 64
#: ``DeviceMaxIDLength``: the identifier part of an attribute or capacity name.
MAX_ID_LENGTH = 32
#: ``DeviceMaxDomainLength``: the domain part of an attribute or capacity name.
MAX_DOMAIN_LENGTH = 63
#: Taints per device: 4 in 1.34 (16 in 1.35).
MAX_TAINTS = 4
#: ``consumesCounters`` entries per device (1.35).
MAX_CONSUMES_COUNTERS = 2
#: Counters per counter set and per consumption.
MAX_COUNTERS = 32
#: ``validValues`` entries of a request policy.
MAX_VALID_VALUES = 10
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_N = r"(0|[1-9]\d*)"
_P = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_B = r"[0-9a-zA-Z-]+"
#: semver 2.0.0, as ``resource.k8s.io`` validates a ``version`` attribute (no leading ``v``).
_SEMVER = re.compile(rf"^{_N}\.{_N}\.{_N}(-{_P}(\.{_P})*)?(\+{_B}(\.{_B})*)?$")
_INT64 = (-(2**63), 2**63 - 1)

_DNS_LABEL_RULE = ("a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit, "
                   "at most 63 characters")


def is_dns_label(value: str) -> bool:
    """Whether ``value`` is a DNS-1123 label (device, counter set and counter names)."""
    return len(value) <= 63 and bool(_DNS_LABEL.fullmatch(value))


def is_semver(text: str) -> bool:
    """Whether ``text`` is a valid ``version`` attribute value: semver 2.0.0, at most 64 characters."""
    return len(text) <= MAX_VALUE_LENGTH and bool(_SEMVER.fullmatch(text))


def attribute_problem(name: object, value: object) -> str | None:
    """Why the API server would reject attribute ``name: value``, or None when it would accept it."""
    return _qualified_name_problem(name) or _attribute_value_problem(value)


def _qualified_name_problem(name: object) -> str | None:
    """Why ``name`` is not an attribute/capacity name ``<id>`` or ``<domain>/<id>``, or None."""
    if not isinstance(name, str):
        return f"{name!r} is not a string"
    domain, slash, ident = name.rpartition("/")
    if slash:
        if "/" in domain:
            return f"{name!r} has more than one '/' (allowed: <id> or <domain>/<id>)"
        if not domain:
            return f"{name!r} has an empty domain before '/'"
        if len(domain) > MAX_DOMAIN_LENGTH or not _DNS_SUBDOMAIN.fullmatch(domain.lower()):
            return (f"domain {domain!r} of {name!r} is not a DNS subdomain of at most "
                    f"{MAX_DOMAIN_LENGTH} characters")
    if not _C_IDENTIFIER.fullmatch(ident):
        return f"{ident!r} is not a C identifier (letters, digits and '_', not starting with a digit)"
    if len(ident) > MAX_ID_LENGTH:
        return f"{ident!r} is {len(ident)} characters long (at most {MAX_ID_LENGTH})"
    return None


def _attribute_value_problem(value: object) -> str | None:
    # Order matters: bool is an int, and Version is a str.
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            return f"{value} does not fit in a signed 64-bit integer"
        return None
    if isinstance(value, Version):
        if len(value) > MAX_VALUE_LENGTH:
            return f"version is {len(value)} characters long (at most {MAX_VALUE_LENGTH})"
        if not _SEMVER.fullmatch(value):
            return f"{str(value)!r} is not a semver 2.0.0 version (MAJOR.MINOR.PATCH, no leading 'v')"
        return None
    if isinstance(value, str):
        if len(value) > MAX_VALUE_LENGTH:
            return f"string is {len(value)} characters long (at most {MAX_VALUE_LENGTH})"
        return None
    return f"{value!r} is a {type(value).__name__} (allowed: bool, int, str, model.Version)"


def _quantity(value: object) -> Decimal | None:
    if not isinstance(value, str | int) or isinstance(value, bool):
        return None
    try:
        return parse_quantity(value)
    except (ValueError, ArithmeticError):
        return None


def _quantity_problem(value: object) -> str | None:
    if _quantity(value) is None:
        return f"{value!r} is not a Quantity (e.g. '16Gi', '100', '500m')"
    return None


def _request_policy_problems(path: str, policy: CapacityRequestPolicy, capacity: Decimal | None) -> list[str]:
    """The ``requestPolicy`` rules of KEP-5075 (docs/architecture.md#api-objects-and-limits, the requestPolicy row)."""
    found: list[str] = []
    default = _quantity(policy.default) if policy.default is not None else None
    if policy.default is not None and default is None:
        found.append(f"{path}.default: {_quantity_problem(policy.default)}")
    has_range = any(v is not None for v in (policy.valid_range_min, policy.valid_range_max, policy.valid_range_step))
    if policy.valid_values and has_range:
        found.append(f"{path}: validValues and validRange are mutually exclusive")
    if (policy.valid_values or has_range) and policy.default is None:
        found.append(f"{path}.default: required when validValues or validRange is set")
    if policy.valid_values:
        if len(policy.valid_values) > MAX_VALID_VALUES:
            found.append(f"{path}.validValues: {len(policy.valid_values)} entries (at most {MAX_VALID_VALUES})")
        values: list[Decimal] = []
        for i, text in enumerate(policy.valid_values):
            value = _quantity(text)
            if value is None:
                found.append(f"{path}.validValues[{i}]: {_quantity_problem(text)}")
                continue
            if capacity is not None and value > capacity:
                found.append(f"{path}.validValues[{i}]: {text} exceeds the capacity value")
            values.append(value)
        if values != sorted(values) or len(set(values)) != len(values):
            found.append(f"{path}.validValues: must be strictly ascending")
        if default is not None and values and default not in values:
            found.append(f"{path}.validValues: must contain the default {policy.default}")
    if has_range:
        low = _quantity(policy.valid_range_min) if policy.valid_range_min is not None else None
        high = _quantity(policy.valid_range_max) if policy.valid_range_max is not None else None
        step = _quantity(policy.valid_range_step) if policy.valid_range_step is not None else None
        for key, text, value in (("min", policy.valid_range_min, low), ("max", policy.valid_range_max, high),
                                 ("step", policy.valid_range_step, step)):
            if text is not None and value is None:
                found.append(f"{path}.validRange.{key}: {_quantity_problem(text)}")
        if policy.valid_range_min is None:
            found.append(f"{path}.validRange.min: required")
        if low is not None and capacity is not None and low > capacity:
            found.append(f"{path}.validRange.min: {policy.valid_range_min} exceeds the capacity value")
        if high is not None and capacity is not None and high > capacity:
            found.append(f"{path}.validRange.max: {policy.valid_range_max} exceeds the capacity value")
        if low is not None and high is not None and low > high:
            found.append(f"{path}.validRange: min {policy.valid_range_min} exceeds max {policy.valid_range_max}")
        if default is not None and low is not None and default < low:
            found.append(f"{path}.default: {policy.default} is below validRange.min {policy.valid_range_min}")
        if default is not None and high is not None and default > high:
            found.append(f"{path}.default: {policy.default} is above validRange.max {policy.valid_range_max}")
        if step is not None and low is not None:
            if step <= 0:
                found.append(f"{path}.validRange.step: {policy.valid_range_step} must be positive")
            else:
                if capacity is not None and low + step > capacity:
                    found.append(f"{path}.validRange.step: min + step exceeds the capacity value")
                for key, value in (("default", default), ("validRange.max", high)):
                    if value is not None and (value - low) % step != 0:
                        found.append(f"{path}.{key}: ({value} - min) is not a multiple of step {step}")
    return found


def device_problems(device: Device) -> list[str]:
    """Return every reason the API server would reject ``device`` on its own, empty if none.

    Checked: the name is a DNS label (<= 63); attribute and capacity names are ``<id>`` or
    ``<domain>/<id>`` with a C identifier of <= 32 characters; at most 32 attributes and
    capacities together; attribute values are bool, int64, str (<= 64) or
    :class:`~ascend_dra.model.Version` (semver 2.0.0, <= 64); capacity values and request
    policies are valid Quantities and follow the KEP-5075 rules, and a request policy needs
    ``allow_multiple_allocations``; at most 2 ``consumesCounters`` entries with DNS-label counter
    names and Quantity values; at most 4 taints with a label-name key, a label-value value and an
    effect of NoSchedule, NoExecute or None. References to counter sets need the inventory:
    see :func:`inventory_problems`.

    :returns: ``"<path>: <problem>"`` strings, paths relative to the device.
    """
    found: list[str] = []
    name = device.name
    if not isinstance(name, str) or not is_dns_label(name):
        found.append(f"name: {name!r} is not {_DNS_LABEL_RULE}")
    attributes: Mapping[object, object] = device.attributes
    capacities: Mapping[object, object] = device.capacities
    total = len(attributes) + len(capacities)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        found.append(f"attributes, capacity: {total} entries together (at most {MAX_ATTRIBUTES_AND_CAPACITIES})")
    for key, value in attributes.items():
        problem = _qualified_name_problem(key)
        if problem:
            found.append(f"attributes[{key!r}]: name {problem}")
        problem = _attribute_value_problem(value)
        if problem:
            found.append(f"attributes.{key}: {problem}")
    for key, capacity in capacities.items():
        problem = _qualified_name_problem(key)
        if problem:
            found.append(f"capacity[{key!r}]: name {problem}")
        if not isinstance(capacity, Capacity):
            found.append(f"capacity.{key}: {capacity!r} is a {type(capacity).__name__} (allowed: model.Capacity)")
            continue
        problem = _quantity_problem(capacity.value)
        if problem:
            found.append(f"capacity.{key}.value: {problem}")
        if capacity.request_policy is not None:
            if not device.allow_multiple_allocations:
                found.append(f"capacity.{key}.requestPolicy: allowMultipleAllocations must be true")
            found.extend(_request_policy_problems(
                f"capacity.{key}.requestPolicy", capacity.request_policy, _quantity(capacity.value)))
    if len(device.consumes_counters) > MAX_CONSUMES_COUNTERS:
        found.append(f"consumesCounters: {len(device.consumes_counters)} entries (at most {MAX_CONSUMES_COUNTERS})")
    for i, consumption in enumerate(device.consumes_counters):
        path = f"consumesCounters[{i}]"
        if not is_dns_label(consumption.counter_set):
            found.append(f"{path}.counterSet: {consumption.counter_set!r} is not {_DNS_LABEL_RULE}")
        found.extend(_counters_problems(f"{path}.counters", consumption.counters))
    if len(device.taints) > MAX_TAINTS:
        found.append(f"taints: {len(device.taints)} taints (at most {MAX_TAINTS})")
    for i, taint in enumerate(device.taints):
        path = f"taints[{i}]"
        if not _label_key_ok(taint.key):
            found.append(f"{path}.key: {taint.key!r} is not a label name ([prefix/]name, name at most 63 "
                         "characters of letters, digits, '-', '_' and '.')")
        if taint.value and (len(taint.value) > 63 or not _LABEL_NAME.fullmatch(taint.value)):
            found.append(f"{path}.value: {taint.value!r} is not a label value (at most 63 characters "
                         "of letters, digits, '-', '_' and '.')")
        if taint.effect not in TAINT_EFFECTS:
            found.append(f"{path}.effect: {taint.effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
    return found


def _label_key_ok(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and bool(_LABEL_NAME.fullmatch(name))


def _counters_problems(path: str, counters: Mapping[str, str]) -> list[str]:
    found: list[str] = []
    if len(counters) > MAX_COUNTERS:
        found.append(f"{path}: {len(counters)} counters (at most {MAX_COUNTERS})")
    for name, value in counters.items():
        if not isinstance(name, str) or not is_dns_label(name):
            found.append(f"{path}[{name!r}]: name is not {_DNS_LABEL_RULE}")
        problem = _quantity_problem(value)
        if problem:
            found.append(f"{path}.{name}: {problem}")
    return found


def _counter_set_problems(path: str, counter_set: CounterSet) -> list[str]:
    found: list[str] = []
    if not is_dns_label(counter_set.name):
        found.append(f"{path}.name: {counter_set.name!r} is not {_DNS_LABEL_RULE}")
    if not counter_set.counters:
        found.append(f"{path}.counters: a counter set needs at least one counter")
    found.extend(_counters_problems(f"{path}.counters", counter_set.counters))
    return found


def inventory_problems(inventory: Inventory) -> list[str]:
    """Return every reason the API server (or the slice controller) would reject ``inventory``.

    Everything :func:`device_problems` finds, for each device, plus: duplicate device names,
    duplicate or invalid counter sets, and ``consumesCounters`` entries naming a counter set or a
    counter that the inventory does not define.

    :returns: ``"<path>: <problem>"`` strings; device paths read ``devices[<i>] (<name>).<path>``.
    """
    found: list[str] = []
    sets: dict[str, CounterSet] = {}
    for i, counter_set in enumerate(inventory.counter_sets):
        path = f"counterSets[{i}] ({counter_set.name})"
        found.extend(_counter_set_problems(path, counter_set))
        if counter_set.name in sets:
            found.append(f"{path}.name: duplicate counter set {counter_set.name!r}")
        sets.setdefault(counter_set.name, counter_set)
    names = Counter(device.name for device in inventory.devices)
    reported: set[str] = set()
    for i, device in enumerate(inventory.devices):
        where = f"devices[{i}] ({device.name})"
        found.extend(f"{where}.{problem}" for problem in device_problems(device))
        if names[device.name] > 1 and device.name not in reported:
            reported.add(device.name)
            found.append(f"{where}.name: duplicate device name {device.name!r} ({names[device.name]} devices)")
        for j, consumption in enumerate(device.consumes_counters):
            path = f"{where}.consumesCounters[{j}]"
            counter_set = sets.get(consumption.counter_set)
            if counter_set is None:
                known = ", ".join(sorted(sets)) or "none"
                found.append(f"{path}.counterSet: {consumption.counter_set!r} is not a counter set of this "
                             f"inventory (known: {known})")
                continue
            for counter in consumption.counters:
                if counter not in counter_set.counters:
                    known = ", ".join(sorted(counter_set.counters)) or "none"
                    found.append(f"{path}.counters.{counter}: counter set {counter_set.name!r} has no such "
                                 f"counter (known: {known})")
    return found
