"""How a discovered chip is published: device name, attributes and capacities (docs/architecture.md#names).

API limits (docs/architecture.md#api-objects-and-limits): names are C identifiers of at most 32
characters; string and version values at most 64 characters; versions are semver 2.0.0; at most
32 attributes and capacities per device; device names are DNS labels of at most 63. A value that
would break a limit is omitted (and logged), never published: one odd npu-smi value must not get
the whole ResourceSlice rejected.

Common attributes: ``type`` (``npu``), ``index`` (logic ID), ``physicalID``, ``npuID``, ``chipID``,
``chipName``, ``productName`` (= chip name; what HAMi-DRA's ``hami.io/use-nputype`` matches,
docs/ascend-hardware.md#peer-attributes), ``chipFamily``, ``memoryType`` (``HBM``/``DDR``), ``numaNode``,
``pciAddress``, ``uuid`` (VDie ID), ``driverVersion`` (a version, only when the driver version is
semver, e.g. ``25.5.1``) and ``driverRelease`` (the driver version as printed, a string, always
when known, e.g. ``24.1.rc1.b030``, which is not semver). Capacities: ``memory`` (MiB as a
Quantity, ``65536Mi``), ``aicore`` (AI cores, a count) and ``cores`` (``100``: percent of the chip).

What HAMi's monitoring reads (HAMi-DRA ``pkg/cache/nodedevices.go``, ``ParseNodeDevice``: the
unqualified keys below, strings read with ``StringValue``, capacities with ``Quantity.Value()``;
its ``pkg/metrics`` divides ``memory`` by 1024*1024 for MB, so the Quantity must be bytes-valued,
which ``65536Mi`` is): ``uuid``, ``brand`` (``Huawei``, the value Project-HAMi's Ascend DRA driver
gives, docs/ascend-hardware.md#the-hami-ascend-dra-driver), ``productName``, ``architecture`` (the
chip family, ``Ascend310P``: the chip generation, as ``sm_80`` is a GPU's in HAMi-DRA's own
tests) and capacities ``cores`` (percent,
HAMi's unit for a device's compute: 100 is the whole chip) and ``memory``.

Standard attributes (domain ``resource.kubernetes.io``, the names Kubernetes defines so that devices
of different drivers can be aligned with ``matchAttribute``), beside ours and only when known:
``numaNode`` (int; stable in 1.37), ``pciBusID`` (the PCI address, ``0000:81:00.0``) and ``pcieRoot``
(the PCIe root complex the chip hangs off, ``pci0000:80``, from the sysfs path of the function).
They are added last and only while the device stays within the 32 attributes + capacities limit.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

from ascend_dra.model import AttributeValue, Capacity, Version
from ascend_dra.profiles import checks
from ascend_dra.profiles.ascend.chip import NpuChip
from ascend_dra.profiles.ascend.npusmi import _text

__all__ = (
    "BRAND",
    "MAX_ATTRIBUTES_AND_CAPACITIES",
    "MAX_NAME_LENGTH",
    "MAX_VALUE_LENGTH",
    "WHOLE_CHIP",
    "WHOLE_CHIP_CORES",
    "chip_attributes",
    "chip_capacities",
    "device_name",
    "is_attribute_name",
    "is_device_name",
    "is_semver",
    "pcie_root",
    "publishable",
    "standard_attributes",
)

#: Domain of the attributes Kubernetes standardises (``resource.kubernetes.io/<name>``).
STANDARD_DOMAIN = "resource.kubernetes.io"
_PCI_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")

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


#: ``brand`` of every Ascend chip (what HAMi-DRA's cache and metrics read; see the module docstring).
BRAND = "Huawei"
#: ``cores`` of a whole chip: HAMi counts a device's compute in percent.
WHOLE_CHIP_CORES = 100

#: The partition suffix of a whole chip's device name (``npu-<logicID>-0``).
WHOLE_CHIP = 0


def device_name(chip: NpuChip) -> str:
    """``npu-<logicID>-0``: the logic ID and the partition index (0 = the whole chip).

    This is the name Project-HAMi's ascend-dra-driver gives a whole chip
    (docs/ascend-hardware.md#the-hami-ascend-dra-driver). It is built only from what every discovery tier knows the
    same way, so a switch from
    the npu-smi tier to the devfs tier does not rename a device: the chip ID (``-c``) is known
    only to npu-smi and is published as the ``chipID`` attribute instead
    (docs/ascend-discovery.md, "Device names").
    """
    return f"npu-{chip.logic_id}-{WHOLE_CHIP}"


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
        "architecture": chip.family.value if chip.family else None,
        "brand": BRAND,
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
    """``memory`` (``<MiB>Mi``) and ``aicore`` (count), each only when known and positive, and
    ``cores`` (:data:`WHOLE_CHIP_CORES`, always).

    DCMI's "not supported" code 8255 is not an amount (:data:`._text.DCMI_NOT_SUPPORTED`): the
    parsers already read it as unknown; a tier that still hands it over gets it omitted here,
    with a WARNING, rather than published as ``8255Mi`` / ``8255`` AI cores.
    """
    out: dict[str, Capacity] = {}
    for name, amount, unit in (("memory", chip.memory_mib, "Mi"), ("aicore", chip.aicore_count, "")):
        if not amount or amount <= 0:
            continue
        if _text.is_not_supported(amount):
            logger.warning("capacity is DCMI's 'not supported' code; omitted",
                           extra={"device_name": device_name(chip), "capacity": name, "value": amount})
            continue
        out[name] = Capacity(f"{amount}{unit}")
    out["cores"] = Capacity(str(WHOLE_CHIP_CORES))
    return out


def pcie_root(sys_root: Path, pci_address: str | None) -> str | None:
    """The PCIe root of a PCI function, e.g. ``pci0000:80``, or None when sysfs does not tell.

    ``<sys>/bus/pci/devices/<address>`` links to ``<sys>/devices/pci<domain>:<bus>/.../<address>``;
    the first component of that form is the root complex. Blocking (sysfs reads).
    """
    if not pci_address:
        return None
    try:
        target = os.path.realpath(sys_root / "bus" / "pci" / "devices" / pci_address.lower(), strict=True)
    except OSError:
        return None
    return next((part for part in Path(target).parts if _PCI_ROOT.match(part)), None)


def standard_attributes(chip: NpuChip, pcie_root: str | None, room: int) -> dict[str, AttributeValue]:
    """The ``resource.kubernetes.io`` attributes of ``chip`` that are known, at most ``room`` of them.

    :param room: how many more attributes the device may carry (32 minus what it has).
    """
    candidates: dict[str, AttributeValue | None] = {
        "numaNode": chip.numa_node if chip.numa_node is not None and chip.numa_node >= 0 else None,
        "pciBusID": chip.pci_address,
        "pcieRoot": pcie_root,
    }
    out: dict[str, AttributeValue] = {}
    for name, value in candidates.items():
        key = f"{STANDARD_DOMAIN}/{name}"
        if value is None or len(out) >= room or checks.attribute_problem(key, value) is not None:
            continue
        out[key] = value
    return out
