"""What one container asks of each HAMi chip: its count, memory and cores (pure; no API calls).

Read as HAMi reads them (Project-HAMi/HAMi ``pkg/device/ascend/device.go``, ``MutateAdmission`` and
``GenerateResourceRequests``; docs/ascend-hardware.md#hami-device-plugin-conventions), with the
differences docs/webhook.md#conversion-of-hami-syntax lists:

* the count ``huawei.com/<commonWord>`` from ``limits``: a whole number from 0 to :data:`MAX_CHIPS`;
* ``-memory`` in MiB (``1.5`` rounds up to 2 MiB, as ``Quantity.Value()``; ``4k`` is how a plain
  ``4000`` reaches a webhook), or bytes when written with a unit (``8Gi``, ``500M``); ``0`` is the
  whole chip in HAMi, so it is the config's ``memoryAllocatable`` when the webhook has one, else
  refused; a count without ``-memory`` asks for ``memoryAllocatable`` too (HAMi writes it into the
  pod), else for the device class's default share;
* ``-core`` in percent of a chip, above 100 capped to 100 with a warning (HAMi's scheduler caps it in
  ``Fit``);
* ``-memory`` and ``-core`` from ``limits``, else from ``requests`` (HAMi's webhook reads ``limits``);
* a ``-memory`` or ``-core`` without its count in ``limits`` is refused: HAMi reads them only beside
  the count, and such an entry left in the pod asks for an extended resource no node has.

Each problem and warning is a ``(field path, message)`` pair, the path naming the entry as
``spec.containers[0].resources.limits["huawei.com/Ascend310P-memory"]``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import attrs
import orjson

from ascend_dra.hami.chips import HamiChip
from ascend_dra.model import canonical_quantity, in_unit, parse_quantity, unit_of

__all__ = ("MAX_CHIPS", "MAX_MEMORY_MIB", "ChipRequest", "Problems", "memory_bytes", "quantity", "read_requests")

#: ``(field path, message)`` pairs, every problem (or warning) of an object.
Problems = list[tuple[str, str]]

#: The largest ``-memory`` in MiB: HAMi keeps it as an int32 of MiB and refuses more as a wrong unit
#: ("memory unit is treated as MB not Byte"; Project-HAMi/HAMi pkg/device/ascend/device.go
#: ``GenerateResourceRequests``, docs/ascend-hardware.md#hami-device-plugin-conventions).
MAX_MEMORY_MIB = 2**31 - 1
#: A claim holds at most this many devices (resource.k8s.io/v1 ``AllocationResultsMaxSize``, 32 in
#: 1.35-1.37): a larger HAMi count could never be allocated.
MAX_CHIPS = 32
_SUFFIX = re.compile(r"[+-]?[0-9.]+([a-zA-Z]*|[eE][+-]?[0-9]+)")
#: Suffixes read as bytes. Not ``k``: the API server hands a webhook every quantity in canonical
#: form, so a plain ``4000`` (MiB) arrives as ``4k``. A decimal suffix from ``M`` up read as MiB
#: would be at least 10^6 MiB, more than any chip; as bytes it is what the user meant.
_BYTE_UNITS = frozenset(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "M", "G", "T", "P", "E"))


def quantity(value: object) -> Decimal:
    """A Kubernetes quantity (a string or an int) as a finite Decimal.

    :raises ValueError: not a quantity, or not finite.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"{orjson.dumps(value).decode()} is not a quantity")
    number = parse_quantity(value)
    if not number.is_finite():
        raise ValueError(f"{value!r} is not a finite quantity")
    return number


def memory_bytes(value: object) -> int:
    """``-memory`` in bytes: a plain number is MiB (rounded up, as ``Quantity.Value()``), and so is
    one with the suffix ``k`` (``4k`` is how a ``4000`` written in the pod reaches the webhook); a
    value with a binary unit (``8Gi``) or a decimal one from ``M`` up (``500M``) is bytes (rounded up).

    :raises ValueError: not a quantity, below 0, 0 (the caller decides what 0 means), a value with
        a byte unit under 1 MiB (``1023Ki``, ``1M``: no share is that small, so it is a unit slip),
        or more than :data:`MAX_MEMORY_MIB` MiB (HAMi's int32 bound, also a unit slip: bytes
        written without a unit, ``8589934592`` for 8 GiB).
    """
    number = quantity(value)
    text = str(value).strip()
    match = _SUFFIX.fullmatch(text)
    has_unit = bool(match) and match.group(1) in _BYTE_UNITS
    if number <= 0:
        raise ValueError(f"{text!r} must be more than 0 (MiB, or bytes with a unit such as 8Gi)")
    # A bound is stated in the unit the value was written with (issue 40): bytes in its suffix, or
    # MiB in the plain number's own notation (4k is 4000 MiB here).
    unit = unit_of(text)
    if has_unit and number < 1024 * 1024:
        raise ValueError(f"{text!r} is less than {in_unit(1024 * 1024, unit)}, the smallest share: {_UNIT_RULE}")
    memory = math.ceil(number) if has_unit else math.ceil(number) * 1024 * 1024
    if memory > MAX_MEMORY_MIB * 1024 * 1024:
        most = in_unit(MAX_MEMORY_MIB * 1024 * 1024, unit) if has_unit else f"{in_unit(MAX_MEMORY_MIB, unit)} MiB"
        raise ValueError(f"{text!r} is more than {most}, the most HAMi accepts: {_UNIT_RULE}")
    return memory


#: How HAMi reads a ``-memory`` value; said with each refusal of one, since most are a unit slip.
_UNIT_RULE = "a plain number is MiB, a value with a byte unit (Ki, Mi, Gi, M, G, ...) is bytes"


@attrs.frozen
class ChipRequest:
    """One container's request of one chip.

    :ivar hami: the chip (its resource names, commonWord and selector).
    :ivar count: chips asked for (0: none).
    :ivar memory_bytes: the memory of each share in bytes; None: the device class's default.
    :ivar cores: the cores of each share, percent of a chip as a canonical Quantity (``12500m``); None:
        the device class's default.
    """

    hami: HamiChip
    count: int
    memory_bytes: int | None
    cores: str | None

    @property
    def common_word(self) -> str:
        return self.hami.common_word


def _path(path: str, section: str, key: str) -> str:
    return f'{path}.resources.{section}["{key}"]'


def _count(value: object) -> int:
    number = quantity(value)
    if number != number.to_integral_value() or number < 0:
        raise ValueError(f"{value!r} must be a whole number of chips (0 for none)")
    if number > MAX_CHIPS:
        raise ValueError(f"{value!r} is more chips than one claim can hold (at most {MAX_CHIPS}, "
                         "the API's AllocationResultsMaxSize)")
    return int(number)


def _memory(hami: HamiChip, value: object) -> int:
    """``-memory`` in bytes; 0 is the whole chip, as in HAMi. :raises ValueError: as :func:`memory_bytes`."""
    if str(value).strip() and quantity(value) == 0:
        if hami.memory_allocatable_mib is not None:
            return hami.memory_allocatable_mib * 1024 * 1024  # HAMi's whole chip: the config's figure
        raise ValueError(f"{value!r}: HAMi reads 0 as the chip's whole memory, which this webhook knows only "
                         "from a HAMi device config (--hami-device-config, its memoryAllocatable); write the "
                         "memory in MiB instead")
    return memory_bytes(value)


def _cores(value: object, where: str, warnings: Problems) -> str:
    number = quantity(value)
    if number < 0:
        raise ValueError(f"{value!r} must be 0 or more (percent of a chip)")
    if number > 100:
        warnings.append((where, f"{value!r} is more than 100 percent of a chip: capped to 100, the whole chip's "
                                "cores, as HAMi caps it"))
        return "100"
    return canonical_quantity(str(value))


def read_requests(container: Mapping[str, Any], path: str, table: Sequence[HamiChip], problems: Problems,
                  warnings: Problems) -> list[ChipRequest]:
    """The container's request of each chip of ``table`` whose count is in ``limits``, in table order.

    :param path: the container's field path, ``spec.containers[0]``.
    :param problems: refusals are appended here, each naming its entry.
    :param warnings: what the user is told but that does not refuse the pod (a ``-core`` capped).
    """
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}

    def entry(key: str) -> tuple[str, object] | None:
        """``(section, value)`` of ``key``: ``limits`` first, then ``requests`` (HAMi's webhook
        reads ``limits`` only; a value the user wrote in ``requests`` is kept, not dropped); the
        entry leaves both sections either way."""
        for section, values in (("limits", limits), ("requests", requests)):
            if key in values:
                return section, values[key]
        return None

    present = limits.keys() | requests.keys()
    found = []
    for hami in table:
        if hami.count_name not in limits:
            for key in (hami.memory_name, hami.core_name):
                if key in present and (alone := entry(key)) is not None:
                    problems.append((_path(path, alone[0], key),
                                     f"asks for no chip without {hami.count_name} in limits (HAMi reads it only "
                                     "beside the count and gives the container no chip for it; no node advertises "
                                     f"it as a resource, so the pod would wait forever): add {hami.count_name} "
                                     "or remove it"))
            continue
        count = memory = cores = None
        try:
            count = _count(limits[hami.count_name])
        except ValueError as exc:
            problems.append((_path(path, "limits", hami.count_name), str(exc)))
        if hami.memory_name is not None and (found_memory := entry(hami.memory_name)) is not None:
            section, value = found_memory
            try:
                memory = _memory(hami, value)
            except ValueError as exc:
                problems.append((_path(path, section, hami.memory_name), str(exc)))
        elif hami.memory_allocatable_mib is not None:
            memory = hami.memory_allocatable_mib * 1024 * 1024  # a count alone: HAMi writes memoryAllocatable
        if hami.core_name is not None and (found_cores := entry(hami.core_name)) is not None:
            section, value = found_cores
            try:
                cores = _cores(value, _path(path, section, hami.core_name), warnings)
            except ValueError as exc:
                problems.append((_path(path, section, hami.core_name), str(exc)))
        if count is not None:
            found.append(ChipRequest(hami, count, memory, cores))
    return found
