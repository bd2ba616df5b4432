"""``npu-smi info`` tables published by users of other projects (issues, docs), read as they were
printed; SOURCES.md in tests/fixtures/npu-smi says where each comes from. Expected values are
read off each sample by eye, not from our parser."""

from __future__ import annotations

import pytest

from ascend_dra.profiles.ascend.npusmi import tables
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.profile import CHIP_HEALTH
from tests.unit.test_ascend_support import fixture


@pytest.mark.parametrize(("name", "chips"), [
    # (npu_id, chip_id, name, health, DDR total MiB, HBM total MiB)
    ("910B4_info_npu-smi-24.1.1.txt", [(0, 0, "910B4", "OK", 0, 32768), (1, 0, "910B4", "OK", 0, 32768)]),
    ("910B4-1_info_npu-smi-25.2.0_busid-anonymised.txt",
     [(0, 0, "910B4-1", "OK", 0, 65536), (1, 0, "910B4-1", "OK", 0, 65536)]),
    ("910C_A3_info_npu-smi-26.0.rc2_first-2-dies.txt",
     [(0, 0, "Ascend910", "OK", 0, 65536), (0, 1, "Ascend910", "OK", 0, 65536)]),
    ("910A_info_npu-smi-1.9.3_drv21.0.rc1_no-hugepages.txt",
     [(4, 0, "910A", "OK", 15171, 32768), (5, 0, "910A", "OK", 15171, 32768), (6, 0, "910A", "OK", 15171, 32768),
      (7, 0, "910A", "OK", 15078, 32768)]),
    ("310_info_npu-smi-23.0.0_one-chip_processes.txt", [(0, 0, "310", "OK", 7759, None)]),
    ("310P3_info_npu-smi-25.3.rc1_npu6.txt", [(6, 0, "310P3", "OK", 21525, None)]),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_published_table_reads_as_printed(name, chips):
    # The reporter of the 910B4-1 sample wrote "xx" over the bus numbers; npu-smi prints hex there.
    info = tables.parse_info(fixture(name).replace("0000:xx:00.0", "0000:c1:00.0"))
    assert [(c.npu_id, c.chip_id, c.name, c.health, c.memory_total_mib, c.hbm_total_mib) for c in info.chips] == chips


def test_a_bus_id_anonymised_by_its_publisher_is_no_pci_address_and_is_refused():
    """``0000:xx:00.0`` names no PCI function: it would be joined into a sysfs path and published
    (as ``../../../..`` was, mutated real output), so the table is refused, naming the line."""
    with pytest.raises(NpuSmiParseError) as caught:
        tables.parse_info(fixture("910B4-1_info_npu-smi-25.2.0_busid-anonymised.txt"))
    assert (caught.value.line_no, caught.value.reason) == (
        8, "Bus-Id '0000:xx:00.0' is not a PCI address (dddd:bb:dd.f) or NA")


def test_the_a3_second_die_has_its_physical_id_and_no_power():
    first, second = tables.parse_info(fixture("910C_A3_info_npu-smi-26.0.rc2_first-2-dies.txt")).chips
    assert (first.phy_id, first.power_w, second.phy_id, second.power_w) == (0, 162.6, 1, None)


@pytest.mark.parametrize("health", ["NA", "Unknown", "-", "N/A"])
def test_a_chip_whose_health_npu_smi_cannot_tell_is_read_with_that_health_not_refused(health):
    """``Health`` is one of npu-smi's no-value words for one chip: the whole table was refused ("no
    value for health"), the npu-smi tier failed for every chip and the health probe marked every
    device unknown (an audit of public npu-smi layouts)."""
    text = fixture("910B4_info_npu-smi-24.1.1.txt").replace(
        "| 1     910B4               | OK           ", f"| 1     910B4               | {health:<13}")
    first, second = tables.parse_info(text).chips
    assert (first.health, second.health) == ("OK", health)
    assert CHIP_HEALTH.get(second.health) is None  # neither healthy nor unhealthy: unknown
