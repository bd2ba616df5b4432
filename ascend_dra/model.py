"""The driver's data model: devices as published, claims as allocated, devices as prepared.

Every class here is a frozen attrs class and imports nothing else of ours, so profiles, the
state machine, the publisher and the webhook all speak the same nouns (docs/architecture.md#modules-and-layering,
docs/architecture.md#names).

Units: capacities are Kubernetes Quantities held as strings exactly as they are published
(``"32Gi"`` for bytes of HBM/DDR, ``"100"`` for percent of a chip's AI cores); use
:func:`parse_quantity` to turn one into a number.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Literal

import attrs

__all__ = (
    "AllocatedDevice",
    "Capacity",
    "CapacityRequestPolicy",
    "ClaimAllocation",
    "CounterConsumption",
    "CounterSet",
    "Device",
    "DeviceReading",
    "DeviceTaint",
    "Inventory",
    "OpaqueConfig",
    "PreparedDevice",
    "Version",
    "attribute_to_api",
    "canonical_quantity",
    "in_unit",
    "parse_quantity",
    "unit_of",
)


class Version(str):
    """A device attribute of the ``version`` kind (semver 2.0.0, no leading ``v``).

    Source: ``resource.k8s.io/v1`` ``DeviceAttribute.version``. A plain ``str`` attribute is
    published as ``string``; wrap it in ``Version`` to publish it as ``version``.
    """

    __slots__ = ()


#: An attribute value as published: ``int`` -> ``int``, ``bool`` -> ``bool``, ``str`` -> ``string``,
#: :class:`Version` -> ``version``.
AttributeValue = bool | int | str | Version



def attribute_to_api(value: object) -> dict[str, object]:
    """An attribute value in the API's ``DeviceAttribute`` form, as ResourceSlices (and device
    metadata files, KEP-5304) carry it: ``{"bool": v}``, ``{"int": v}``, ``{"version": v}`` or
    ``{"string": v}``.

    :raises TypeError: ``value`` is not bool, int, str or :class:`Version`.
    """
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, Version):
        return {"version": str(value)}
    if isinstance(value, str):
        return {"string": value}
    raise TypeError(f"attribute value {value!r} is not bool, int, str or Version")


_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]|)$")
_SUFFIX = {
    "": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}


def parse_quantity(quantity: str | int) -> Decimal:
    """Return the numeric value of a Kubernetes Quantity (``"16Gi"`` -> 17179869184).

    :param quantity: a Quantity string (binary ``Ki..Ei``, decimal ``n..E`` or an exponent) or an int.
    :raises ValueError: if the text is not a Quantity.
    """
    if isinstance(quantity, int):
        return Decimal(quantity)
    match = _QUANTITY.fullmatch(quantity.strip())
    if not match:
        raise ValueError(f"invalid quantity {quantity!r}: expected a number with an optional suffix "
                         "(Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E, m)")
    number, suffix = match.groups()
    if suffix not in _SUFFIX:  # an exponent such as e3 (E alone is the exa suffix, Ei the exbi one)
        return Decimal(number) * (Decimal(10) ** int(suffix[1:]))
    return Decimal(number) * _SUFFIX[suffix]


_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


@functools.lru_cache(maxsize=1024)  # a node publishes the same few values on every device, every build
def canonical_quantity(quantity: str | int) -> str:
    """Return the form the API server stores a Quantity in, so what we publish reads back unchanged.

    Source: apimachinery ``resource.Quantity`` canonicalization: a value written with a binary
    suffix keeps binary form with the largest suffix that leaves an integer (``65536Mi`` ->
    ``64Gi``, ``21525Mi`` stays), unless it is below 1024 or not whole, which gives decimal form;
    decimal form uses the largest power-of-1000 suffix that leaves an integer (``1000`` -> ``1k``,
    ``0.5`` -> ``500m``); an exponent form keeps an exponent that is a multiple of 3.

    :raises ValueError: if the text is not a Quantity.
    """
    value = parse_quantity(quantity)
    text = str(quantity).strip()
    suffix = _QUANTITY.fullmatch(text).group(2) if isinstance(quantity, str) else ""
    if suffix in _BINARY[1:] and -1024 < value < 1024:
        suffix = ""
    if suffix in _BINARY[1:] and value == value.to_integral_value():
        whole = int(value)
        power = 0
        while power < 6 and whole % 1024 ** (power + 1) == 0:
            power += 1
        return f"{whole // 1024 ** power}{_BINARY[power]}"
    exponent_form = suffix[:1] in ("e", "E")
    value = value.quantize(Decimal("1e-9"), rounding="ROUND_CEILING") if value != 0 else Decimal(0)
    if value == 0:
        return "0"
    best = -9
    for exponent in range(18, -10, -3):
        scaled = value / (Decimal(10) ** exponent)
        if scaled == scaled.to_integral_value():
            best = exponent
            break
    mantissa = int(value / (Decimal(10) ** best))
    if exponent_form:
        return f"{mantissa}e{best}" if best else str(mantissa)
    return f"{mantissa}{_DECIMAL[best]}"


def unit_of(quantity: str | int) -> str:
    """The suffix a Quantity was written with, so that a message can state every amount in it:
    ``"8Gi"`` -> ``"Gi"``, ``"500m"`` -> ``"m"``; a plain number (``"8589934592"``, ``8``) or an
    exponent form (``"8e9"``) -> ``""``.

    :raises ValueError: if the text is not a Quantity.
    """
    if isinstance(quantity, int):
        return ""
    match = _QUANTITY.fullmatch(quantity.strip())
    if not match:
        parse_quantity(quantity)  # raises the usual message
    assert match is not None
    suffix = match.group(2)
    return suffix if suffix in _SUFFIX else ""


#: Decimals :func:`in_unit` writes out exactly; more are cut to :data:`_SIGNIFICANT` digits.
_EXACT_DECIMALS = 6
_SIGNIFICANT = 4


def in_unit(amount: Decimal | int | str, unit: str) -> str:
    """``amount`` (a number, or a Quantity string) written in ``unit`` (a suffix of :func:`unit_of`):
    ``in_unit(5390729216, "Gi")`` -> ``"~5.020Gi"``, ``in_unit("21525Mi", "Gi")`` -> ``"~21.02Gi"``,
    ``in_unit("1Mi", "Ki")`` -> ``"1024Ki"``, ``in_unit(2**20, "")`` -> ``"1048576"``.

    Exact when the value has at most 6 decimals in that unit; otherwise ``~`` and the value cut
    (towards zero, never rounded up) to 4 significant digits, so a free amount is never overstated.

    :raises ValueError: a ``unit`` that is no Quantity suffix, or an ``amount`` that is not a Quantity.
    """
    if unit not in _SUFFIX:
        raise ValueError(f"{unit!r} is not a Quantity suffix")
    value = (amount if isinstance(amount, Decimal) else parse_quantity(amount)) / Decimal(_SUFFIX[unit])
    if value == value.to_integral_value():
        return f"{int(value)}{unit}"
    exact = value.normalize()
    if -exact.as_tuple().exponent <= _EXACT_DECIMALS:  # type: ignore[operator]
        return f"{format(exact, 'f')}{unit}"
    digits = max(0, _SIGNIFICANT - 1 - value.copy_abs().adjusted())
    cut = value.quantize(Decimal(1).scaleb(-digits), rounding="ROUND_DOWN")
    return f"~{format(cut, 'f')}{unit}"


@attrs.frozen
class CapacityRequestPolicy:
    """How a consumable capacity may be requested (``DeviceCapacity.requestPolicy``, KEP-5075).

    Quantities as strings. Exactly one of ``valid_values`` / ``valid_range_*`` may be used.
    """

    default: str | None = None
    valid_values: tuple[str, ...] = ()
    valid_range_min: str | None = None
    valid_range_max: str | None = None
    valid_range_step: str | None = None


@attrs.frozen
class Capacity:
    """One capacity of a device (``DeviceCapacity``): a Quantity and an optional request policy."""

    value: str
    request_policy: CapacityRequestPolicy | None = None


@attrs.frozen
class DeviceTaint:
    """A device taint (``DeviceTaint``, gate DRADeviceTaints): effect is NoSchedule, NoExecute or None."""

    key: str
    effect: Literal["NoSchedule", "NoExecute", "None"]
    value: str = ""


@attrs.frozen
class CounterSet:
    """A shared counter set of a pool (``CounterSet``, gate DRAPartitionableDevices).

    ``counters`` maps a counter name (DNS label) to a Quantity string.
    """

    name: str
    counters: Mapping[str, str]


@attrs.frozen
class CounterConsumption:
    """What one device consumes of a counter set (``DeviceCounterConsumption``)."""

    counter_set: str
    counters: Mapping[str, str]


@attrs.frozen
class Device:
    """A device as published in a ResourceSlice (``resource.k8s.io/v1`` ``Device``).

    :ivar name: DNS label, unique in the pool, e.g. ``npu-0-0``.
    :ivar attributes: attribute name (C identifier, <= 32 chars) -> value.
    :ivar capacities: capacity name -> :class:`Capacity`.
    :ivar allow_multiple_allocations: the device may be shared by claims (gate DRAConsumableCapacity).
    """

    name: str
    attributes: Mapping[str, AttributeValue] = attrs.field(factory=dict)
    capacities: Mapping[str, Capacity] = attrs.field(factory=dict)
    allow_multiple_allocations: bool = False
    consumes_counters: tuple[CounterConsumption, ...] = ()
    taints: tuple[DeviceTaint, ...] = ()


@attrs.frozen
class Inventory:
    """Everything one profile found on the node: devices and the shared counter sets they consume.

    :ivar source: which discovery tier served it (``npu-smi``, ``devfs``, ``nvml``, ``simulated``).
    """

    devices: tuple[Device, ...] = ()
    counter_sets: tuple[CounterSet, ...] = ()
    source: str = ""

    def device(self, name: str) -> Device | None:
        """Return the device called ``name``, or None (a dict lookup: Prepare calls this per device)."""
        return self._by_name.get(name)

    @functools.cached_property
    def _by_name(self) -> dict[str, Device]:
        return {d.name: d for d in self.devices}


@attrs.frozen
class OpaqueConfig:
    """One opaque config of an allocation (``status.allocation.devices.config[]``).

    :ivar source: ``FromClass`` (lower precedence) or ``FromClaim``.
    :ivar requests: request names it applies to; empty = every request. A name ``req`` also
        applies to results of ``req/<subrequest>``.
    :ivar parameters: the ``opaque.parameters`` JSON object (with ``apiVersion`` and ``kind``).
    :ivar index: position in ``status.allocation.devices.config``, for error messages.
    """

    source: Literal["FromClass", "FromClaim"]
    requests: tuple[str, ...]
    driver: str
    parameters: Mapping[str, object]
    index: int = 0


@attrs.frozen
class AllocatedDevice:
    """One allocation result for our driver (``status.allocation.devices.results[]``).

    :ivar request: ``"<request>"`` or ``"<request>/<subrequest>"``.
    :ivar share_id: the allocation's share ID when the device allows multiple allocations.
    :ivar consumed_capacity: capacity name -> Quantity string consumed by this allocation.
    """

    request: str
    driver: str
    pool: str
    device: str
    share_id: str | None = None
    consumed_capacity: Mapping[str, str] = attrs.field(factory=dict)
    admin_access: bool = False

    @property
    def base_request(self) -> str:
        """The request name without a ``/<subrequest>`` suffix (what a pod spec can reference)."""
        return self.request.split("/", 1)[0]


@attrs.frozen
class ClaimAllocation:
    """An allocated ResourceClaim reduced to what our driver needs to prepare it.

    ``results`` and ``configs`` hold only entries for our driver; ``reserved_for`` the pod UIDs of
    ``status.reservedFor`` (empty in standalone mode when the file has none), ``reserved_pods`` the
    names of its entries that are pods (``resource: pods``; in the claim's namespace, as every
    consumer of a claim is). ``pod_claim_name`` is the annotation
    ``resource.kubernetes.io/pod-claim-name`` that the claim controller puts on a claim it makes from
    a ResourceClaimTemplate (the pod's ``spec.resourceClaims[].name``); None for a claim the pod
    names directly.
    """

    uid: str
    namespace: str
    name: str
    results: tuple[AllocatedDevice, ...]
    configs: tuple[OpaqueConfig, ...] = ()
    reserved_for: tuple[str, ...] = ()
    reserved_pods: tuple[str, ...] = ()
    pod_claim_name: str | None = None


@attrs.frozen
class DeviceReading:
    """What a device reported at its profile's last health check; None where it said nothing.

    :ivar core_percent: compute in use, percent of the device (0..100; npu-smi's ``AICore(%)``).
    :ivar memory_used_mib: memory in use, MiB (the memory the ``memory`` capacity counts).
    :ivar memory_total_mib: that memory's total as the device reports it, MiB.
    :ivar temperature_c: degrees Celsius.
    :ivar power_w: watts.
    """

    core_percent: float | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None


@attrs.frozen
class PreparedDevice:
    """A device as returned to the kubelet in ``NodePrepareResourceResponse.devices``.

    ``request_names`` are base request names (docs/architecture.md#how-the-kubelet-calls).
    """

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None
