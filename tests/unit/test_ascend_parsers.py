"""Every npu-smi fixture parsed, with the expected values written out (not computed by the parser)."""

from __future__ import annotations

import pytest

from ascend_dra.profiles.ascend.npusmi import keyvalue, readings, tables
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.npusmi.keyvalue import DeviceShare, ListedNpu
from ascend_dra.profiles.ascend.npusmi.readings import ChipCommon, ChipMemory, HealthInfo, McuCommon
from ascend_dra.profiles.ascend.npusmi.tables import InfoChip, InfoProcess, MappingRow
from tests.unit.test_ascend_support import fixture, parts

# -- npu-smi info ---------------------------------------------------------------------------------


def test_info_310p3_lab13_two_chips_with_device_column_and_separator_typo() -> None:
    table = tables.parse_info(fixture("310P3_info.txt"))
    assert (table.tool_version, table.driver_version) == ("25.5.1", "25.5.1")
    assert table.chips == (
        InfoChip(npu_id=4, name="310P3", health="OK", chip_id=0, device=0, bus_id="0000:81:00.0", power_w=None,
                 temperature_c=37, hugepages_used=0, hugepages_total=0, aicore_percent=0,
                 memory_used_mib=1848, memory_total_mib=21525),
        InfoChip(npu_id=5, name="310P3", health="OK", chip_id=0, device=1, bus_id="0000:85:00.0", power_w=None,
                 temperature_c=40, hugepages_used=0, hugepages_total=0, aicore_percent=0,
                 memory_used_mib=1849, memory_total_mib=21525),
    )
    assert table.processes == () and table.skipped == ()


def test_info_anonymised_310p_class_with_bus_id_na() -> None:
    table = tables.parse_info(fixture("310P-class_info_xxx_BusId-NA.txt"))
    assert (table.tool_version, table.driver_version) == ("xxx", "xxx")
    assert table.chips == (
        InfoChip(npu_id=0, name="xxx", health="OK", chip_id=0, device=0, bus_id=None, power_w=10.4,
                 temperature_c=66, hugepages_used=0, hugepages_total=0, aicore_percent=0,
                 memory_used_mib=957, memory_total_mib=10810),
    )


def test_info_host_and_hard_vnpu_container_parts() -> None:
    host, container = parts("310P3_info_host_and_hard-vnpu_in_container_drv22.0.4.txt")
    host_table = tables.parse_info(host)
    assert host_table.driver_version == "22.0.4"
    assert host_table.chips == (
        InfoChip(npu_id=7, name="310P3", health="OK", chip_id=0, device=0, bus_id="0000:00:07.0", power_w=None,
                 temperature_c=28, hugepages_used=0, hugepages_total=0, aicore_percent=0,
                 memory_used_mib=1805, memory_total_mib=21527),
    )
    vnpu = tables.parse_info(container).chips
    assert [(c.name, c.memory_used_mib, c.memory_total_mib) for c in vnpu] == [("310Pvir01", 249, 2690)]


def test_info_inside_hami_vnpu_core_container_skips_limiter_log_lines() -> None:
    table = tables.parse_info(fixture("310P3_info_in_container_hami-vnpu-core.txt"))
    assert [line_no for line_no, _ in table.skipped] == [1, 2, 3, 4, 5]
    assert table.skipped[0][1] == "[INFO limiter::supervisor] [Supervisor PID:10] won manager election"
    assert table.chips == (
        InfoChip(npu_id=32768, name="310P3", health="OK", chip_id=0, device=0, bus_id="0000:81:00.0",
                 power_w=None, temperature_c=38, hugepages_used=0, hugepages_total=0, aicore_percent=0,
                 memory_used_mib=0, memory_total_mib=8192),
    )


def test_info_310_four_chips_per_card() -> None:
    table = tables.parse_info(fixture("310_info_atlas800-3000_4chips-per-card_npu-smi-21.0.4.txt"))
    assert (table.tool_version, table.driver_version) == ("21.0.4", "21.0.4.B030")
    assert [(c.npu_id, c.chip_id, c.device, c.bus_id, c.temperature_c, c.memory_used_mib, c.memory_total_mib,
             c.hugepages_total) for c in table.chips] == [
        (6, 0, 3, "0000:89:00.0", 73, 2703, 8192, 970),
        (6, 1, 4, "0000:8A:00.0", 74, 2867, 8192, 970),
        (6, 2, 5, "0000:8B:00.0", 70, 2867, 8192, 970),
        (6, 3, 6, "0000:8C:00.0", 65, 2867, 8192, 970),
    ]


def test_info_20_2_0_narrow_table_without_hugepages() -> None:
    table = tables.parse_info(fixture("310_info_atlas800-3000_npu-smi-20.2.0_no-hugepages.txt"))
    assert table.driver_version == "20.2.0"
    assert [(c.npu_id, c.chip_id, c.device, c.bus_id, c.hugepages_total, c.memory_total_mib)
            for c in table.chips] == [
        (215, 0, 0, "0000:DA:00.0", None, 8192),
        (215, 1, 1, "0000:DC:00.0", None, 8192),
        (215, 2, 2, "0000:DD:00.0", None, 8192),
        (215, 3, 3, "0000:DB:00.0", None, 8192),
    ]


def test_info_910a_hbm_column_and_no_device_column() -> None:
    table = tables.parse_info(fixture("910A_info_atlas800-9010_npu-smi-22.0.3.1.txt"))
    assert table.driver_version == "22.0.3.1"
    assert table.chips[0] == InfoChip(
        npu_id=0, name="910A", health="OK", chip_id=0, device=None, bus_id="0000:61:00.0", power_w=67.2,
        temperature_c=43, hugepages_used=15, hugepages_total=15, aicore_percent=0, memory_used_mib=1867,
        memory_total_mib=15077, hbm_used_mib=0, hbm_total_mib=32768)
    assert [(c.npu_id, c.bus_id, c.power_w) for c in table.chips] == [
        (0, "0000:61:00.0", 67.2), (1, "0000:DB:00.0", 63.3), (2, "0000:B2:00.0", 64.8),
        (3, "0000:3E:00.0", 191.7), (4, "0000:60:00.0", 66.4), (5, "0000:DA:00.0", 62.7),
        (6, "0000:B1:00.0", 64.5), (7, "0000:3D:00.0", 191.4),
    ]


def test_info_910b1_elided_rows_are_skipped_not_misread() -> None:
    table = tables.parse_info(fixture("910B1_info_elided.txt"))
    assert table.driver_version == "23.0.rc2"
    assert table.skipped == ((13, "..."),)
    assert [(c.npu_id, c.bus_id, c.hbm_used_mib, c.hbm_total_mib, c.memory_total_mib) for c in table.chips] == [
        (0, "0000:C1:00.0", 4175, 65536, 0), (1, "0000:01:00.0", 4175, 65536, 0),
        (7, "0000:42:00.0", 4174, 65536, 0),
    ]


def test_info_910b3_eight_chips() -> None:
    table = tables.parse_info(fixture("910B3_info.txt"))
    assert table.driver_version == "24.1.rc1.b030"
    assert [(c.npu_id, c.chip_id, c.name, c.bus_id, c.power_w, c.temperature_c, c.hbm_used_mib, c.hbm_total_mib)
            for c in table.chips] == [
        (0, 0, "910B3", "0000:C1:00.0", 101.8, 43, 3318, 65536),
        (1, 0, "910B3", "0000:C2:00.0", 92.0, 39, 3314, 65536),
        (2, 0, "910B3", "0000:81:00.0", 102.0, 40, 3314, 65536),
        (3, 0, "910B3", "0000:82:00.0", 99.8, 40, 3314, 65536),
        (4, 0, "910B3", "0000:01:00.0", 98.6, 45, 3314, 65536),
        (5, 0, "910B3", "0000:02:00.0", 99.7, 44, 3314, 65536),
        (6, 0, "910B3", "0000:41:00.0", 103.8, 45, 3314, 65536),
        (7, 0, "910B3", "0000:42:00.0", 98.2, 44, 3315, 65536),
    ]


def test_info_910b3_process_table_and_used_total_without_space() -> None:
    table = tables.parse_info(fixture("910B3_info_with_process.txt"))
    assert [(c.npu_id, c.aicore_percent, c.hbm_used_mib, c.hbm_total_mib) for c in table.chips] == [
        (0, 0, 3445, 65536), (5, 12, 60156, 65536)]
    assert table.processes == (
        InfoProcess(npu_id=5, chip_id=0, pid=2290156, name="VLLMEngineCore", memory_mib=56630),)


def test_info_910c_two_dies_phy_id_column_and_dash_power() -> None:
    table = tables.parse_info(fixture("910C_A3_info_in_container_vcann-rt_anonymised.txt"))
    assert table.driver_version == "xxx.xxx.xxx"
    assert table.chips == (
        InfoChip(npu_id=0, name="xxx", health="OK", chip_id=0, phy_id=0, bus_id="0000:9D:00.0", power_w=157.3,
                 temperature_c=32, hugepages_used=0, hugepages_total=0, aicore_percent=0, memory_used_mib=0,
                 memory_total_mib=0, hbm_used_mib=3130, hbm_total_mib=65536),
        InfoChip(npu_id=0, name="xxx", health="OK", chip_id=1, phy_id=0, bus_id="0000:9D:00.0", power_w=None,
                 temperature_c=32, hugepages_used=0, hugepages_total=0, aicore_percent=0, memory_used_mib=0,
                 memory_total_mib=0, hbm_used_mib=3130, hbm_total_mib=65536),
    )
    assert table.processes == ()


def test_info_950_npu_id_table_without_chip_column_and_npu_id_process_rows() -> None:
    """The 950 (A5): ``NPU ID`` and ``NPU Util(%)`` headers, one chip per NPU ID, process rows by NPU ID."""
    table = tables.parse_info(fixture("950PR_info_Alarm_processes_drv25.7.rc1.txt"))
    assert (table.tool_version, table.driver_version) == ("25.7.rc1", "25.7.rc1")
    assert table.chips[0] == InfoChip(
        npu_id=0, name="Ascend950PR", health="Alarm", chip_id=0, bus_id="0000:71:00.0", power_w=205.7,
        temperature_c=71, hugepages_used=0, hugepages_total=0, npu_util_percent=100, memory_used_mib=0,
        memory_total_mib=0, hbm_used_mib=90633, hbm_total_mib=114688)
    assert [(c.npu_id, c.chip_id, c.health, c.hbm_total_mib) for c in table.chips] == [
        (0, 0, "Alarm", 114688), (1, 0, "Alarm", 114688), (2, 0, "OK", 131072)]
    assert table.processes == (
        InfoProcess(npu_id=0, chip_id=0, pid=1530715, name="python", memory_mib=4724),
        InfoProcess(npu_id=0, chip_id=0, pid=1655234, name="python", memory_mib=4728),
    )


def test_info_950dt_bus_id_na_and_process_names_wider_than_their_column() -> None:
    table = tables.parse_info(fixture("950DT_info_BusId-NA_long_process_names_drv25.6.rc1.txt"))
    assert [(c.npu_id, c.bus_id, c.npu_util_percent, c.hbm_used_mib) for c in table.chips] == [
        (0, None, 0, 6632), (1, None, 5, 6711), (6, None, 0, 66466), (7, None, 0, 66461)]
    assert [(p.npu_id, p.chip_id, p.pid, p.name, p.memory_mib, p.pid_in_container) for p in table.processes] == [
        (6, 0, 3621066, "/home/lp/sglang/worker.py", 40000, None),
        (6, 0, 3624823, "/home/rjw/sglang-k3/worker.py", 61140, None),
        (6, 0, 3624824, "/home/rjw/sglang-k3/helper.py", 20000, None),
    ]


@pytest.mark.parametrize(("name", "hbm"), [("950_info_anonymised.txt", (4439, 86016)),
                                           ("950PR_info_process_header_cut_drv25.7.rc1.6.txt", (5239, 131072))])
def test_info_950_one_npu_without_processes(name: str, hbm: tuple[int, int]) -> None:
    """The second sample's publisher cut the process table's header: its ``No running processes``
    line follows the chips directly."""
    table = tables.parse_info(fixture(name))
    assert [(c.npu_id, c.chip_id, c.health, (c.hbm_used_mib, c.hbm_total_mib)) for c in table.chips] == [
        (0, 0, "OK", hbm)]
    assert table.processes == ()


@pytest.mark.parametrize(("text", "line_no", "reason"), [
    ("hello world\n", 0, "no 'npu-smi ... Version:' table found"),
    ("", 0, "no 'npu-smi ... Version:' table found"),
    ("| npu-smi 9.9 Version: 9.9 |\n| NPU Name | Health | Power(W) Watts(X) |\n| Chip | Bus-Id | AICore(%) |\n"
     "+====+\n| 0 910B3 | OK | 1 2 |\n| 0 | 0000:01:00.0 | 3 |\n", 2, "unknown column 'Watts(X)'"),
    # The header that has it is named, also with no chip under it (it passed as no chips; an audit).
    ("| npu-smi 9.9 Version: 9.9 |\n| NPU Name | Health | Power(W) |\n| Chip | Bus-Id | HBM-Usage(GB) |\n"
     "+====+\n", 3, "unknown column 'HBM-Usage(GB)'"),
    # One row that is neither a first nor a second row (a first row alone is a chip npu-smi could not
    # read the logic ID of: tests/unit/test_ascend_tables.py).
    ("| npu-smi 9.9 Version: 9.9 |\n| NPU Name | Health | Power(W) |\n| Chip | Bus-Id | AICore(%) |\n"
     "+====+\n| 0 910B3 OK | NA |\n", 5, "a chip takes two rows between separators (as a second row alone: 2 "
     "cells against 3; as a first row alone: 2 cells against 3)"),
    ("| npu-smi 9.9 Version: 9.9 |\n| NPU Name | Health | Power(W) |\n| Chip | Bus-Id | AICore(%) |\n"
     "+====+\n| 0 910B3 | OK | not-a-number |\n| 0 | 0000:01:00.0 | 3 |\n", 5,
     "Power(W): 'not-a-number' is not a number or NA"),
])
def test_info_unknown_layouts_name_the_line(text: str, line_no: int, reason: str) -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        tables.parse_info(text, command="npu-smi info")
    assert (caught.value.command, caught.value.line_no, caught.value.reason) == ("npu-smi info", line_no, reason)


# -- npu-smi info -m ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["910A_info_-m_atlas800-9010.txt", "910A_info_-m_npu-smi-24.1.RC2.txt"])
def test_mapping_910a_eight_chips(name: str) -> None:
    assert tables.parse_mapping(fixture(name)) == tuple(
        MappingRow(npu_id=i, chip_id=0, logic_id=i, chip_name="Ascend 910A") for i in range(8))


def test_mapping_910b4_with_mcu_rows_and_padding() -> None:
    rows = tables.parse_mapping(fixture("910B4_info_-m_8cards_with_Mcu.txt"))
    assert len(rows) == 16
    assert rows[0] == MappingRow(npu_id=0, chip_id=0, logic_id=0, chip_name="Ascend 910B4")
    assert rows[1] == MappingRow(npu_id=0, chip_id=1, logic_id=None, chip_name="Mcu")
    assert rows[1].is_mcu and not rows[0].is_mcu
    assert [(r.npu_id, r.logic_id) for r in rows if not r.is_mcu] == [(i, i) for i in range(8)]


def test_mapping_910b4_two_npus_last_row_cut() -> None:
    assert tables.parse_mapping(fixture("910B4_info_-m_with_Mcu.txt")) == (
        MappingRow(0, 0, 0, "Ascend 910B4"), MappingRow(0, 1, None, "Mcu"),
        MappingRow(1, 0, 1, "Ascend 910B4"), MappingRow(1, 1, None, "Mcu"),
    )


def test_mapping_310_minid() -> None:
    assert tables.parse_mapping(fixture("310_info_-m_atlas800-3000_MiniD_Mcu.txt")) == (
        MappingRow(6, 0, 0, "MiniD"), MappingRow(6, 1, 1, "MiniD"), MappingRow(6, 2, 2, "MiniD"),
        MappingRow(6, 3, 3, "MiniD"), MappingRow(6, 4, None, "Mcu"),
    )


def test_mapping_950_slot_and_physical_ids_without_logic_id() -> None:
    assert tables.parse_mapping(fixture("950PR_info_-m_spaces_compressed.txt")) == (
        MappingRow(npu_id=0, chip_id=0, logic_id=None, chip_name="Ascend950PR", physical_id=0, slot_id=1),
        MappingRow(npu_id=1, chip_id=0, logic_id=None, chip_name="Ascend950PR", physical_id=1, slot_id=2),
    )


def test_mapping_unknown_column_is_an_error() -> None:
    text = "NPU ID    Chip ID    Die Count    Chip Logic ID    Chip Name\n0   0   3   0   Ascend 999\n"
    with pytest.raises(NpuSmiParseError) as caught:
        tables.parse_mapping(text)
    assert (caught.value.line_no, caught.value.reason) == (1, "unknown header (columns Die Count)")


# -- npu-smi info -l ------------------------------------------------------------------------------


def test_list_910b4_eight_cards() -> None:
    listing = keyvalue.parse_list(fixture("910B4_info_-l_8cards.txt"))
    assert listing.total_count == 8
    assert listing.npus == tuple(ListedNpu(npu_id=i, chip_count=1) for i in range(8))


def test_list_950_with_product_name_and_serial() -> None:
    listing = keyvalue.parse_list(fixture("950_info_-l.txt"))
    assert listing.total_count == 1
    assert listing.npus == (ListedNpu(npu_id=0, chip_count=None, product_name="A5 PCIe Card",
                                      serial_number="IT23HMDA0502FAA"),)


def test_list_count_mismatch_is_a_cut_off_output() -> None:
    with pytest.raises(NpuSmiParseError, match="count says 2 NPUs but 1 are listed"):
        keyvalue.parse_list("Total Count : 2\n\nNPU ID : 0\nChip Count : 1\n")


# -- npu-smi info -t board ------------------------------------------------------------------------


def test_board_card_level_910a() -> None:
    board = keyvalue.parse_board(fixture("910A_info_-t_board_-i.txt"))
    assert (board.npu_id, board.software_version, board.firmware_version, board.board_id, board.pcie_bus_info,
            board.slot_id, board.pci_vendor_id, board.pci_device_id, board.chip_count) == (
        0, "23.0.5", "7.1.0.7.220", "0x02", "0000:61:00.0", 0, "0x19e5", "0xd801", 1)
    assert board.fields["Compatibility"] == "OK"
    assert board.fields["Class ID"] == "NA"


def test_chip_board_910a_vdie_and_ndie() -> None:
    chip = keyvalue.parse_chip_board(fixture("910A_info_-t_board_-i_-c_VDieID.txt"))
    assert (chip.npu_id, chip.chip_id, chip.chip_type, chip.chip_name, chip.chip_version, chip.board_id) == (
        0, 0, "Ascend", "xxx", "V1", "0x02")
    assert chip.vdie_id == "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"
    assert chip.ndie_id == "27216594-20401010-4E10C8D4-14CC040A-A4102003"
    assert (chip.chip_position_id, chip.pcie_bus_info, chip.firmware_version) == (0, "0000:61:00.0", "7.1.0.7.220")


def test_chip_board_910_gpustack_sample() -> None:
    chip = keyvalue.parse_chip_board(fixture("910_info_-t_board_-i_-c_VDie_NDie_gpustack.txt"))
    assert chip.vdie_id == "901421D4-02103514-1711E613-6DA7040A-00102001"
    assert chip.ndie_id == "05821994-20902110-1B11E613-6DA7040A-70102001"
    assert (chip.chip_position_id, chip.pcie_bus_info, chip.firmware_version, chip.fields["PCB ID"]) == (
        1, "0000:81:00.0", "7.1.0.4.218", "NA")


def test_chip_board_310p_die_id() -> None:
    chip = keyvalue.parse_chip_board(fixture("310P_info_-t_board_-i_-c_DieID.txt"))
    assert (chip.npu_id, chip.chip_id, chip.board_id, chip.ndie_id) == (1, 0, "0x64", None)
    assert chip.vdie_id == "409921D4-2140A100-E54BDDD4-07CC040A-9B00301F"


#: Chip-level board of a 310 in the order and format of npu-smi's ``print_ascend_chip_info`` for
#: ``NPU_CHIP_310`` (no published sample): ``Die ID`` is ``"%s,"`` with the chip version, then the groups.
CHIP_BOARD_310 = """\
\tNPU ID                         : 2
\tChip ID                        : 1
\tChip Type                      : Ascend
\tChip Name                      : 310
\tChip Version                   : V1
\tBoard ID                       : 0x02
\tPCB ID                         : NA
\tBOM ID                         : 1
\tDie ID                         : V1, 409921D4 2140A100 E54BDDD4 07CC040A 9B00301F
\tChip Position ID               : 1
\tPCIe Bus Info                  : 0000:03:00.0
\tFirmware Version               : 1.73.5.0.b050
"""


def test_chip_board_310_die_id_after_the_chip_version() -> None:
    chip = keyvalue.parse_chip_board(CHIP_BOARD_310)
    assert (chip.npu_id, chip.chip_id, chip.chip_version, chip.chip_position_id) == (2, 1, "V1", 1)
    assert chip.vdie_id == "409921D4-2140A100-E54BDDD4-07CC040A-9B00301F"
    # The board MCU's block prints `Die ID : NA` on 310: absent, not an error.
    assert keyvalue.parse_chip_board("NPU ID : 2\nChip ID : 4\nChip Name : mcu\nDie ID : NA\n").vdie_id is None


def test_chip_board_die_id_with_more_than_a_version_before_a_comma_is_an_error() -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        keyvalue.parse_chip_board(
            "NPU ID : 0\nChip ID : 0\nDie ID : V1 V2, 409921D4 2140A100 E54BDDD4 07CC040A 9B00301F\n")
    assert caught.value.line_no == 3 and "is not five 8-digit hex groups" in caught.value.reason


def test_chip_board_910b4_truncated() -> None:
    chip = keyvalue.parse_chip_board(fixture("910B4_A2_info_-t_board_-i_0_-c_0.txt"))
    assert (chip.npu_id, chip.chip_id, chip.chip_type, chip.chip_name, chip.npu_name, chip.vdie_id) == (
        0, 0, "Ascend", "910B4", None, None)


def test_chip_board_910c_npu_name() -> None:
    chip = keyvalue.parse_chip_board(fixture("910C_A3_info_-t_board_-i_0_-c_0.txt"))
    assert (chip.npu_id, chip.chip_id, chip.chip_name, chip.npu_name) == (0, 0, "Ascend910", "9392")


def test_chip_board_malformed_die_id_is_an_error() -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        keyvalue.parse_chip_board("NPU ID : 0\nChip ID : 0\nVDie ID : 1234 ZZZZ\n")
    assert (caught.value.line_no, caught.value.reason) == (3, "VDie ID: '1234 ZZZZ' is not five 8-digit hex groups")


@pytest.mark.parametrize("value", ["00000000 00000000 00000000 00000000 00000000",
                                   "FFFFFFFF FFFFFFFF FFFFFFFF FFFFFFFF FFFFFFFF"])
def test_chip_board_die_id_that_identifies_nothing_is_absent(value: str) -> None:
    # All zeros (or all ones) is a die ID the chip never had: published as the uuid attribute, it
    # named one chip of a node by a value any chip may print. A single chip went unnoticed by the
    # check for uuids shared between chips.
    chip = keyvalue.parse_chip_board(f"NPU ID : 0\nChip ID : 0\nVDie ID : {value}\nNDie ID : {value}\n")
    assert (chip.vdie_id, chip.ndie_id) == (None, None)


# -- npu-smi info -t common / usages / memory / health / ecc --------------------------------------


def test_common_910a_with_mcu() -> None:
    common = readings.parse_common(fixture("910A_info_-t_common_-i_0_with_mcu.txt"))
    assert (common.npu_id, common.chip_count) == (0, 1)
    assert common.chips == (ChipCommon(chip_id=0, memory_usage_percent=6, hbm_usage_percent=0,
                                       aicore_usage_percent=0, aicore_freq_mhz=1000, aicore_cur_freq_mhz=1000,
                                       aicore_count=32, temperature_c=46, power_w=69.0),)
    assert common.mcu == McuCommon(temperature_c=48, power_w=45.2)


def test_common_without_a_blank_line_before_chip_id() -> None:
    """Huawei's fault-diagnosis document prints the head and the chip as one block; it was refused
    ("says 1 chips but 0 are printed") and the chip's AI core count was lost."""
    common = readings.parse_common(fixture("910A_info_-t_common_-i_0_no-blank-line.txt"))
    assert (common.npu_id, common.chip_count, common.mcu) == (0, 1, None)
    assert common.chips == (ChipCommon(chip_id=0, memory_usage_percent=6, hbm_usage_percent=0,
                                       aicore_usage_percent=0, aicore_freq_mhz=900, aicore_cur_freq_mhz=900,
                                       aicore_count=30, temperature_c=41, power_w=71.7),)


def test_common_910b1_indented() -> None:
    common = readings.parse_common(fixture("910B1_info_-t_common_-i_1.txt"))
    assert (common.npu_id, common.chip_count) == (1, 1)
    assert common.chips == (ChipCommon(chip_id=0, memory_usage_percent=0, hbm_usage_percent=4,
                                       aicore_usage_percent=0, aicore_freq_mhz=1800, aicore_cur_freq_mhz=800,
                                       aicore_count=24, temperature_c=46, power_w=93.4),)
    assert common.mcu == McuCommon(temperature_c=38, power_w=None)


def test_common_310p_duo_two_chips_without_aicore_count() -> None:
    common = readings.parse_common(fixture("310P-duo_info_-t_common_-i_1_2chips.txt"))
    assert (common.npu_id, common.chip_count) == (1, 2)
    assert common.chips == (
        ChipCommon(0, 3, None, 0, 1080, 960, None, 60, None),
        ChipCommon(1, 3, None, 0, 1080, 960, None, 59, None),
    )
    assert common.mcu == McuCommon(temperature_c=48, power_w=45.2)


def test_usages_910a() -> None:
    usages = readings.parse_usages(fixture("910A_info_-t_usages.txt"))
    assert (usages.npu_id, usages.chip_count, len(usages.chips)) == (0, 1, 1)
    chip = usages.chips[0]
    assert (chip.chip_id, chip.ddr_capacity_mib, chip.hbm_capacity_mib) == (0, 13553, 32768)
    assert dict(chip.rates) == {"DDR": 6, "DDR Hugepages": 0, "HBM": 0, "Aicore": 0, "Aicpu": 0, "Ctrlcpu": 0,
                                "DDR Bandwidth": 0, "HBM Bandwidth": 0}


def test_usages_910b1_aivector() -> None:
    chip = readings.parse_usages(fixture("910B1_info_-t_usages_-i_0.txt")).chips[0]
    assert (chip.chip_id, chip.ddr_capacity_mib, chip.hbm_capacity_mib, chip.rates["HBM"],
            chip.rates["Aivector"]) == (0, 0, 65536, 4, 0)


def test_usages_310p_duo_chip_id_ends_each_block() -> None:
    usages = readings.parse_usages(fixture("310P-duo_info_-t_usages_-i_1_2chips_DDR.txt"))
    assert (usages.npu_id, usages.chip_count) == (1, 2)
    assert [(c.chip_id, c.ddr_capacity_mib, c.hbm_capacity_mib, c.rates["Ctrlcpu"], c.rates["DVPP JPEGD"])
            for c in usages.chips] == [(0, 44280, None, 2, 0), (1, 43693, None, 3, 0)]


def test_usages_chip_count_mismatch_is_an_error() -> None:
    text = "NPU ID : 1\nChip Count : 2\n\nDDR Capacity(MB) : 1\nChip ID : 0\n"
    with pytest.raises(NpuSmiParseError, match="says 2 chips but 1 are printed"):
        readings.parse_usages(text)


def test_memory_950() -> None:
    memory = readings.parse_memory(fixture("950_info_-t_memory.txt"))
    assert memory.npu_id == 0
    assert memory.chips == (ChipMemory(chip_id=None, ddr_capacity_mib=0, ddr_clock_mhz=0, hbm_capacity_mib=131072,
                                       hbm_clock_mhz=3200, hbm_temperature_c=63, hbm_manufacturer_id="0x5a"),)


def test_health_910a() -> None:
    assert readings.parse_health(fixture("910A_info_-t_health.txt")) == HealthInfo(
        status="OK", error_code=None, error_information=None)


def test_ecc_910a_generic_key_values() -> None:
    head, chip = keyvalue.parse_key_values(fixture("910A_info_-t_ecc.txt"))
    assert head.as_dict() == {"NPU ID": "0", "Chip Count": "1"}
    values = chip.as_dict()
    assert len(values) == 13
    assert values["HBM Double Bit Isolated Pages Count"] == "0"
    assert values["Chip ID"] == "0"


def test_not_supported_sentinel_is_none_not_a_number() -> None:
    common = readings.parse_common("NPU ID : 3\nChip Count : 1\n\nChip ID : 0\nAicore Count : NA\n"
                                   "Temperature(C) : not supported\n")
    assert (common.chips[0].aicore_count, common.chips[0].temperature_c) == (None, None)


def test_garbage_value_is_an_error_naming_the_key() -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        readings.parse_common("NPU ID : 3\nChip Count : 1\n\nChip ID : 0\nAicore Count : 8255x\n",
                              command="npu-smi info -t common -i 3")
    assert str(caught.value) == ("parse 'npu-smi info -t common -i 3': line 5 'Aicore Count : 8255x': "
                                 "Aicore Count: '8255x' is not an integer or NA")


def test_key_value_line_without_colon_is_an_error() -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        keyvalue.parse_key_values("NPU ID : 1\ndcmi module initialize failed. ret is -8005\n", command="x")
    assert (caught.value.line_no, caught.value.reason) == (2, "expected 'key : value'")


# -- npu-smi info -t device-share -----------------------------------------------------------------


def test_device_share_310p3_two_npus() -> None:
    assert keyvalue.parse_device_share(fixture("310P3_info_-t_device-share.txt")) == (
        DeviceShare(npu_id=4, chip_id=0, enabled=True), DeviceShare(npu_id=5, chip_id=0, enabled=True))


# -- npu-smi info -t topo -------------------------------------------------------------------------


def test_topo_910b3_all_hccs() -> None:
    topo = tables.parse_topo(fixture("910B3_info_-t_topo.txt"))
    assert topo.ids == tuple(range(8))
    assert topo.links[0] == ("X", "HCCS", "HCCS", "HCCS", "HCCS", "HCCS", "HCCS", "HCCS")
    assert topo.link(3, 6) == "HCCS" and topo.link(5, 5) == "X"
    assert topo.cpu_affinity == ("144-167", "144-167", "96-119", "96-119", "0-23", "0-23", "48-71", "48-71")


def test_topo_unknown_link_kind_is_an_error() -> None:
    text = "   NPU0   NPU1   CPU Affinity\nNPU0   X   NVLINK   0-3\nNPU1   NVLINK   X   4-7\n"
    with pytest.raises(NpuSmiParseError) as caught:
        tables.parse_topo(text)
    assert caught.value.line_no == 2
    assert caught.value.reason.startswith("unknown link kind 'NVLINK'")


# -- DCMI "not supported" (8255) reads as unknown, like NA ----------------------------------------


@pytest.mark.parametrize("sentinel", ["8255", "-8255"], ids=["8255", "negative-8255"])
def test_dcmi_not_supported_is_unknown_in_counts_and_capacities(sentinel: str) -> None:
    common = readings.parse_common(fixture("910B1_info_-t_common_-i_1.txt").replace(": 24", f": {sentinel}"))
    assert common.chips[0].aicore_count is None
    usages = readings.parse_usages(fixture("910B1_info_-t_usages_-i_0.txt").replace(": 65536", f": {sentinel}"))
    assert usages.chips[0].hbm_capacity_mib is None
    info = tables.parse_info(fixture("910B3_info.txt").replace("3318 / 65536", f"3318 / {sentinel}", 1))
    assert (info.chips[0].hbm_used_mib, info.chips[0].hbm_total_mib) == (3318, None)
    assert info.chips[1].hbm_total_mib == 65536


def test_8255_in_use_is_a_reading_not_a_sentinel() -> None:
    """Only totals and counts are amounts; 8255 MiB in use is plausible and kept."""
    info = tables.parse_info(fixture("910B3_info.txt").replace("3318 / 65536", "8255 / 65536", 1))
    assert (info.chips[0].hbm_used_mib, info.chips[0].hbm_total_mib) == (8255, 65536)


@pytest.mark.anyio
async def test_the_fake_profiles_910b3_has_the_hbm_npu_smi_shows_for_one() -> None:
    """The fake profile simulates a 910B3 chip; it published 32Gi where ``npu-smi info`` of a
    910B3 shows 65536 MB of HBM (and the npu-910 profile, fed that output, publishes 64Gi)."""
    from ascend_dra.model import canonical_quantity
    from ascend_dra.profiles.base import ProfileContext
    from ascend_dra.profiles.fake import FakeProfile

    [chip, *_] = tables.parse_info(fixture("910B3_info.txt")).chips
    inventory = await FakeProfile().discover(ProfileContext(node_name="n", driver_name="d", fake_devices=1))
    [device] = inventory.devices
    assert device.attributes["chipName"] == chip.name
    assert canonical_quantity(device.capacities["memory"].value) == canonical_quantity(f"{chip.hbm_total_mib}Mi")
