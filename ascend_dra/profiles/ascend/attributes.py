"""How a discovered chip is published: device name, attributes and capacities (DESIGN §5).

API limits (shared reference kubelet-dra-protocol.md §7.1): names are C identifiers of at most 32
characters; string and version values at most 64 characters; versions are semver 2.0.0; at most
32 attributes and capacities per device; device names are DNS labels of at most 63. A value that
would break a limit is omitted (and logged), never published: one odd npu-smi value must not get
the whole ResourceSlice rejected.

Common attributes: ``type`` (``npu``), ``index`` (logic ID), ``physicalID``, ``npuID``, ``chipID``,
``chipName``, ``productName`` (= chip name; what HAMi-DRA's ``hami.io/use-nputype`` matches,
reference ascend.md §11.2), ``chipFamily``, ``memoryType`` (``HBM``/``DDR``), ``numaNode``,
``pciAddress``, ``uuid`` (VDie ID), ``driverVersion`` (a version, only when the driver version is
semver, e.g. ``25.5.1``) and ``driverRelease`` (the driver version as printed, a string, always
when known, e.g. ``24.1.rc1.b030``, which is not semver). Capacities: ``memory`` (MiB as a
Quantity, ``65536Mi``) and ``aicore`` (AI cores, a count).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ascend_dra.model import AttributeValue, Capacity, Version
from ascend_dra.profiles import checks
from ascend_dra.profiles.ascend.chip import NpuChip

__all__ = (
    "MAX_ATTRIBUTES_AND_CAPACITIES",
    "MAX_NAME_LENGTH",
    "MAX_VALUE_LENGTH",
    "chip_attributes",
    "chip_capacities",
    "device_name",
    "is_attribute_name",
    "is_device_name",
    "is_semver",
    "publishable",
)

logger = logging.getLogger(__name__)

# The API limits live in profiles/checks.py; these names stay for this module's callers.
MAX_NAME_LENGTH = checks.MAX_ID_LENGTH
MAX_VALUE_LENGTH = checks.MAX_VALUE_LENGTH
MAX_ATTRIBUTES_AND_CAPACITIES = checks.MAX_ATTRIBUTES_AND_CAPACITIES
is_semver = checks.is_semver
is_device_name = checks.is_dns_label


def is_attribute_name(name: str) -> bool:
    """True when ``name`` is a C identifier of at most 32 characters (no domain: we publish in ours)."""
    return "/" not in name and checks.attribute_problem(name, True) is None


def publishable(name: str, value: object) -> bool:
    """True when the pair passes the API's attribute checks (see the module docstring)."""
    return is_attribute_name(name) and checks.attribute_problem(name, value) is None


def device_name(chip: NpuChip) -> str:
    """``npu-<logicID>-<chipID>`` (DESIGN §5; the peer driver's naming, reference ascend.md §5)."""
    return f"npu-{chip.logic_id}-{chip.chip_id}"


def chip_attributes(chip: NpuChip, extra: Mapping[str, AttributeValue] | None = None) -> dict[str, AttributeValue]:
    """The attributes of ``chip`` (see the module docstring) plus ``extra``; unknown values omitted.

    A value that fails :func:`publishable` is dropped with a WARNING naming the device and attribute.
    """
    candidates: dict[str, AttributeValue | None] = {
        "type": "npu",
        "index": chip.logic_id,
        "physicalID": chip.physical_id,
        "npuID": chip.npu_id,
        "chipID": chip.chip_id,
        "chipName": chip.chip_name,
        "productName": chip.chip_name,
        "chipFamily": chip.family.value if chip.family else None,
        "memoryType": chip.memory_kind.value if chip.memory_kind else None,
        "numaNode": chip.numa_node,
        "pciAddress": chip.pci_address,
        "uuid": chip.uuid,
        "driverVersion": Version(chip.driver_version)
        if chip.driver_version and is_semver(chip.driver_version) else None,
        "driverRelease": chip.driver_version,
        **(extra or {}),
    }
    out: dict[str, AttributeValue] = {}
    for name, value in candidates.items():
        if value is None:
            continue
        if not publishable(name, value):
            logger.warning("attribute outside the API limits; omitted",
                           extra={"device_name": device_name(chip), "attribute": name, "value": repr(value)[:100]})
            continue
        out[name] = value
    return out


def chip_capacities(chip: NpuChip) -> dict[str, Capacity]:
    """``memory`` (``<MiB>Mi``) and ``aicore`` (count), each only when known and positive."""
    out: dict[str, Capacity] = {}
    if chip.memory_mib and chip.memory_mib > 0:
        out["memory"] = Capacity(f"{chip.memory_mib}Mi")
    if chip.aicore_count and chip.aicore_count > 0:
        out["aicore"] = Capacity(str(chip.aicore_count))
    return out
