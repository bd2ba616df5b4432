"""The devfs/sysfs discovery tier, and the sysfs look-ups the npu-smi tier shares.

Used when npu-smi is missing or broken (the chain of docs/ascend-discovery.md: npu-smi -> ``/dev/davinci*`` +
sysfs -> simulated). What it can know:

* physical IDs: one ``/dev/davinci<N>`` per chip, N = physical ID (docs/ascend-hardware.md#device-nodes;
  ``910B1_dev_layout.txt`` shows ``davinci0``..``davinci7`` beside ``davinci_manager``);
* logic IDs: the rank of N among the node's davinci numbers. DCMI numbers logic IDs 0..n-1 in
  physical order (Lab 18: physical 0, 2 -> logic 0, 1) **[U: inferred from one host]**;
* PCI address, family and NUMA node: through the device's sysfs class entry
  ``<sys>/class/<class>/davinci<N>/device`` (the kernel links a class device to its parent) when the
  driver provides one **[U: class name not documented]**, else the family alone when every Huawei
  PCI function of the node has the same device ID (``<sys>/bus/pci/devices/*/vendor|device``);
  NUMA from ``<sys>/bus/pci/devices/<address>/numa_node`` (mind-cluster device plugin, reference
  docs/ascend-hardware.md#chip-families; ``-1`` means none).

It does not know the chip model, memory, AI cores, NPU ID or UUID; those attributes are omitted.
All file reads here are blocking and meant to run in a worker thread (:func:`scan`).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import anyio
import attrs

from ascend_dra.profiles.ascend.chip import NpuChip
from ascend_dra.profiles.ascend.chips import HUAWEI_PCI_VENDOR, PCI_DEVICE_FAMILY, ChipFamily, memory_kind

__all__ = ("PciFunction", "davinci_numbers", "discover_devfs", "numa_node", "pci_function", "scan")

logger = logging.getLogger(__name__)

_DAVINCI = re.compile(r"^davinci(\d+)$")
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@attrs.frozen
class PciFunction:
    """A PCI function as sysfs shows it: lower-case address and IDs, NUMA node (None when -1 or absent)."""

    address: str
    vendor: str | None
    device: str | None
    numa_node: int | None


def davinci_numbers(dev_root: Path) -> list[int]:
    """The N of every ``<dev_root>/davinci<N>`` (``davinci_manager`` excluded), ascending."""
    try:
        names = [p.name for p in dev_root.iterdir()]
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in map(_DAVINCI.match, names) if m)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def numa_node(sys_root: Path, pci_address: str) -> int | None:
    """NUMA node of a PCI function from ``<sys>/bus/pci/devices/<address>/numa_node``; None if -1 or unreadable."""
    raw = _read(sys_root / "bus" / "pci" / "devices" / pci_address.lower() / "numa_node")
    if raw is None or not re.fullmatch(r"-?\d+", raw):
        return None
    value = int(raw)
    return value if value >= 0 else None


def pci_function(sys_root: Path, pci_address: str) -> PciFunction:
    """Read vendor, device and NUMA node of one PCI function from sysfs (missing files give None)."""
    base = sys_root / "bus" / "pci" / "devices" / pci_address.lower()
    vendor, device = _read(base / "vendor"), _read(base / "device")
    return PciFunction(
        address=pci_address.lower(),
        vendor=vendor.lower() if vendor else None,
        device=device.lower() if device else None,
        numa_node=numa_node(sys_root, pci_address),
    )


def _huawei_functions(sys_root: Path) -> list[PciFunction]:
    base = sys_root / "bus" / "pci" / "devices"
    try:
        addresses = sorted(p.name for p in base.iterdir())
    except OSError:
        return []
    functions = [pci_function(sys_root, a) for a in addresses if _PCI_ADDRESS.fullmatch(a.lower())]
    return [f for f in functions if f.vendor == HUAWEI_PCI_VENDOR and f.device in PCI_DEVICE_FAMILY]


def davinci_pci_address(sys_root: Path, number: int) -> str | None:
    """PCI address behind ``davinci<number>`` through ``<sys>/class/*/davinci<number>/device``; None if no link."""
    for entry in sorted((sys_root / "class").glob(f"*/davinci{number}/device")):
        try:
            target = entry.resolve(strict=True).name.lower()
        except OSError:
            continue
        if _PCI_ADDRESS.fullmatch(target):
            return target
    return None


def scan(dev_root: Path, sys_root: Path) -> tuple[NpuChip, ...]:
    """Build chips from ``/dev/davinci<N>`` and sysfs (blocking; see the module docstring).

    :return: one chip per davinci node, logic IDs 0..n-1 in physical-ID order; empty when there is
        no davinci node.
    """
    numbers = davinci_numbers(dev_root)
    if not numbers:
        return ()
    functions = _huawei_functions(sys_root)
    node_families = {PCI_DEVICE_FAMILY[f.device] for f in functions if f.device}
    node_family = next(iter(node_families)) if len(node_families) == 1 else None
    chips = []
    for logic_id, number in enumerate(numbers):
        address = davinci_pci_address(sys_root, number)
        family: ChipFamily | None = node_family
        numa = None
        said: tuple[str, ...] = ()
        if address is not None:
            function = pci_function(sys_root, address)
            family = PCI_DEVICE_FAMILY.get(function.device or "", node_family)
            numa = function.numa_node
            if family is None:
                where = sys_root / "bus" / "pci" / "devices" / address / "device"
                said = (f"sysfs {where} cannot be read" if function.device is None
                        else f"sysfs {where} says {function.device}, no Ascend chip's",)
        if family is None:
            logger.warning("chip family unknown from sysfs", extra={"physical_id": number, "tier": "devfs"})
            said = said or (f"sysfs has no PCI address for davinci{number} (no {sys_root}/class/*/davinci{number}"
                            "/device link)",)
            said += (f"{sys_root}/bus/pci/devices holds "
                     + (f"Ascend functions of {len(node_families)} families" if node_families
                        else "no Ascend PCI function"),)
        chips.append(NpuChip(
            logic_id=logic_id,
            physical_id=number,
            family=family,
            pci_address=address,
            numa_node=numa,
            memory_kind=memory_kind(family) if family else None,
            family_said=said,
        ))
    return tuple(chips)


async def discover_devfs(dev_root: Path, sys_root: Path) -> tuple[NpuChip, ...]:
    """:func:`scan` in a worker thread (file reads must not block the event loop)."""
    return await anyio.to_thread.run_sync(scan, dev_root, sys_root)
