"""The resource.kubernetes.io attributes: published where known, within the 32-per-device limit."""

from __future__ import annotations

from pathlib import Path

from ascend_dra.profiles.ascend.attributes import chip_attributes, pcie_root, standard_attributes
from ascend_dra.profiles.ascend.chip import NpuChip
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from tests.unit.test_ascend_support import sys_tree


def test_pcie_root_is_the_root_complex_of_the_sysfs_path(tmp_path: Path):
    sys_root = sys_tree(tmp_path, {"0000:81:00.0": ("0x19e5", "0xd500", 1)})
    # A function behind a bridge: the root is the first pci<domain>:<bus> component, not the parent.
    bridged = sys_root / "devices" / "pci0000:80" / "0000:80:01.0" / "0000:82:00.0"
    bridged.mkdir(parents=True)
    (sys_root / "bus/pci/devices/0000:82:00.0").symlink_to(bridged)
    assert pcie_root(sys_root, "0000:81:00.0") == "pci0000:00"
    assert pcie_root(sys_root, "0000:82:00.0") == "pci0000:80"
    assert pcie_root(sys_root, "0000:99:00.0") is None
    assert pcie_root(sys_root, None) is None


def test_unknown_values_are_not_published():
    chip = NpuChip(logic_id=0, physical_id=0, numa_node=-1)
    assert standard_attributes(chip, None, room=32) == {}
    known = NpuChip(logic_id=0, physical_id=0, numa_node=1, pci_address="0000:81:00.0")
    assert standard_attributes(known, "pci0000:80", room=32) == {
        "resource.kubernetes.io/numaNode": 1, "resource.kubernetes.io/pciBusID": "0000:81:00.0",
        "resource.kubernetes.io/pcieRoot": "pci0000:80"}


def test_standard_attributes_never_push_a_device_over_32():
    chip = NpuChip(logic_id=0, physical_id=0, numa_node=0, pci_address="0000:81:00.0", chip_name="310P3",
                   memory_mib=21525, aicore_count=8)
    ours = len(chip_attributes(chip)) + 3  # + memory, aicore and cores

    class Crowded(Npu310PProfile):
        def extra_attributes(self, chip):  # leaves room for exactly one more attribute
            return {f"extra{i}": i for i in range(32 - ours - 1)}

    device = Crowded().device(chip, "pci0000:80")
    assert len(device.attributes) + len(device.capacities) == 32
    assert "resource.kubernetes.io/numaNode" in device.attributes  # numaNode first: it is what alignment uses
    assert "resource.kubernetes.io/pcieRoot" not in device.attributes
