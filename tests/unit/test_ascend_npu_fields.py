"""npu-smi fields of the 310/310B and the 950 that the parsers once missed (issue: 310/310B
``Memory Capacity(MB)``, ``Capacity(MB)``/``Clock Speed(MHz)``; 950 ``DDie ID``; ``NPU Utilization(%)``).

The fixtures are Huawei documentation examples (provenance in ``tests/fixtures/npu-smi/SOURCES.md``);
tests marked "source only" follow the npu-smi printing code, for layouts no published sample shows.
"""

from __future__ import annotations

import pytest

from ascend_dra.profiles.ascend.npusmi import keyvalue, readings
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.npusmi.readings import ChipCommon, ChipMemory, ChipUsages
from tests.unit.test_ascend_support import fixture

DDIE = "870408E3-2120D518-77936EE6-80B40A0A-D4100003"


def _kv(key: str, value: object) -> str:
    """One line as npu-smi prints it (``\\t%-30s : %s``)."""
    return f"\t{key:<30} : {value}\n"


# -- 310/310B: Memory Capacity(MB), Capacity(MB), Clock Speed(MHz); Chip ID first -----------------


def test_usages_310b_chip_id_starts_the_block_and_memory_capacity_is_read() -> None:
    usages = readings.parse_usages(fixture("310B_info_-t_usages_-i_0.txt"))
    assert (usages.npu_id, usages.chip_count) == (0, 1)
    assert usages.chips == (ChipUsages(chip_id=0, ddr_capacity_mib=10810, hbm_capacity_mib=None, rates={
        "Memory": 35, "Hugepages": 0, "Aicore": 0, "Aicpu": 0, "Ctrlcpu": 1, "Memory Bandwidth": 0}),)


def test_memory_310b_capacity_and_clock_speed() -> None:
    memory = readings.parse_memory(fixture("310B_info_-t_memory_-i_0.txt"))
    assert memory.npu_id == 0
    assert memory.chips == (ChipMemory(chip_id=0, ddr_capacity_mib=10810, ddr_clock_mhz=2131, hbm_capacity_mib=None,
                                       hbm_clock_mhz=None, hbm_temperature_c=None, hbm_manufacturer_id=None),)


def test_usages_310b_two_chips_each_block_led_by_chip_id() -> None:
    """Source only (``show_ascend_card_info``: on 310/310B ``Chip ID`` precedes each chip's lines)."""
    chip = _kv("Memory Capacity(MB)", 3072) + _kv("Memory Usage Rate(%)", 10)
    text = (_kv("NPU ID", 6) + _kv("Chip Count", 2) + "\n" + _kv("Chip ID", 0) + chip + "\n"
            + _kv("Chip ID", 1) + chip + "\n")
    usages = readings.parse_usages(text)
    assert [(c.chip_id, c.ddr_capacity_mib, c.rates["Memory"]) for c in usages.chips] == [(0, 3072, 10), (1, 3072, 10)]


def test_usages_chip_block_without_chip_id_at_either_end_is_an_error() -> None:
    text = "NPU ID : 0\nChip Count : 1\n\nMemory Capacity(MB) : 1\nChip ID : 0\nAicore Usage Rate(%) : 0\n"
    with pytest.raises(NpuSmiParseError, match="a chip block must start or end with 'Chip ID'"):
        readings.parse_usages(text)


def test_bad_memory_capacity_names_the_field() -> None:
    text = fixture("310B_info_-t_usages_-i_0.txt").replace(": 10810", ": 10 GB")
    with pytest.raises(NpuSmiParseError) as caught:
        readings.parse_usages(text)
    assert (caught.value.line_no, caught.value.reason) == (5, "Memory Capacity(MB): '10 GB' is not an integer or NA")


def test_bad_memory_clock_speed_names_the_field() -> None:
    text = fixture("310B_info_-t_memory_-i_0.txt").replace(": 2131", ": fast")
    with pytest.raises(NpuSmiParseError, match=r"Clock Speed\(MHz\): 'fast' is not an integer or NA"):
        readings.parse_memory(text)


def test_memory_capacity_8255_is_dcmi_not_supported() -> None:
    usages = readings.parse_usages(fixture("310B_info_-t_usages_-i_0.txt").replace(": 10810", ": 8255"))
    memory = readings.parse_memory(fixture("310B_info_-t_memory_-i_0.txt").replace(": 10810", ": 8255"))
    assert (usages.chips[0].ddr_capacity_mib, memory.chips[0].ddr_capacity_mib) == (None, None)


# -- 950: one usages block, NPU Utilization(%), DDie ID -------------------------------------------


def test_usages_950_one_block_with_npu_utilization() -> None:
    usages = readings.parse_usages(fixture("950_info_-t_usages_-i_0.txt"))
    assert (usages.npu_id, usages.chip_count) == (0, None)
    assert usages.chips == (ChipUsages(chip_id=None, ddr_capacity_mib=0, hbm_capacity_mib=131072, rates={
        "DDR": 0, "DDR Hugepages": 0, "HBM": 3, "Aicore": 0, "Aivector": 0, "Aicpu": 0, "Ctrlcpu": 40,
        "DDR Bandwidth": 0, "HBM Bandwidth": 3, "NPU Utilization": 0, "Aicube": 0}),)


def test_bad_npu_utilization_names_the_field() -> None:
    text = fixture("950_info_-t_usages_-i_0.txt").replace("NPU Utilization(%)             : 0",
                                                           "NPU Utilization(%)             : 0.5")
    with pytest.raises(NpuSmiParseError) as caught:
        readings.parse_usages(text)
    assert (caught.value.line_no, caught.value.reason) == (14, "NPU Utilization(%): '0.5' is not an integer or NA")


def test_board_950_card_level_ddie_id() -> None:
    board = keyvalue.parse_board(fixture("950_info_-t_board_-i.txt"))
    assert (board.npu_id, board.pci_device_id, board.chip_count, board.ddie_id) == (0, "0xd806", 1, DDIE)
    assert board.fields["Main Board ID"] == "0x68(1P)"


def test_board_without_ddie_id() -> None:
    assert keyvalue.parse_board(fixture("910A_info_-t_board_-i.txt")).ddie_id is None


def test_board_malformed_ddie_id_is_an_error() -> None:
    text = fixture("950_info_-t_board_-i.txt").replace("D4100003", "D41")
    with pytest.raises(NpuSmiParseError) as caught:
        keyvalue.parse_board(text)
    assert caught.value.line_no == 24
    assert caught.value.reason == "DDie ID: '870408E3 2120D518 77936EE6 80B40A0A D41' is not five 8-digit hex groups"


def test_chip_board_ddie_id_is_the_uuid() -> None:
    """Source only: ``print_die_id_info`` prints ``DDie Count`` and ``DDie ID`` (five ``%08X``) where
    other chips print ``VDie ID``; no published chip-level 950 sample exists (its npu-smi takes no ``-c``)."""
    text = (_kv("NPU ID", 0) + _kv("Chip ID", 0) + _kv("Chip Name", "Ascend950PR") + _kv("DDie Count", 1)
            + _kv("DDie ID", DDIE.replace("-", " ")) + _kv("Chip Position ID", 0))
    chip = keyvalue.parse_chip_board(text)
    assert (chip.vdie_id, chip.ndie_id, chip.fields["DDie Count"]) == (DDIE, None, "1")


# -- 950: -t common prints one block (no Chip Count / Chip ID) ------------------------------------


def test_common_950_one_block_is_one_chip_with_its_aicore_count() -> None:
    """The 950's ``-t common -i N`` names one device: ``NPU ID`` and the readings in one block,
    no ``Chip Count``, no ``Chip ID``, no ``mcu`` block (Huawei's Ascend 950 npu-smi manual)."""
    common = readings.parse_common(fixture("950_info_-t_common_-i_0.txt"))
    assert (common.npu_id, common.chip_count, common.mcu) == (0, None, None)
    assert common.chips == (ChipCommon(chip_id=None, memory_usage_percent=0, hbm_usage_percent=3,
                                       aicore_usage_percent=0, aicore_freq_mhz=1650, aicore_cur_freq_mhz=100,
                                       aicore_count=32, temperature_c=65, power_w=298.6),)


def test_common_head_block_with_chip_count_and_no_chip_blocks_is_no_chip() -> None:
    """A head that says ``Chip Count`` keeps the per-chip layout: its own lines are no chip's readings."""
    with pytest.raises(NpuSmiParseError) as caught:
        readings.parse_common(_kv("NPU ID", 0) + _kv("Chip Count", 1))
    assert caught.value.reason == "says 1 chips but 0 are printed"


# -- 950: -t health says Health, not Health Status ----------------------------------------------


def test_health_950_reads_the_health_key() -> None:
    """The 950's ``-t health -i N`` (no ``-c``) prints ``Health`` where the others print ``Health Status``."""
    health = readings.parse_health(fixture("950_info_-t_health_-i_0.txt"))
    assert (health.status, health.error_code, health.error_information) == ("OK", None, None)


def test_health_without_either_key_names_both() -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        readings.parse_health(_kv("NPU ID", 0) + _kv("Error Code", "NA"))
    assert caught.value.reason == "missing 'Health Status' (950: 'Health')"
