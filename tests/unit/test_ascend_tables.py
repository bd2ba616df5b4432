"""``npu-smi info`` when npu-smi prints one of a chip's two rows only.

``print_card_total_info_first`` and ``print_card_total_info_with_HBM_first`` (npu_info_print.c of
the open npu-smi source, verylucky01/driver @ ``e29d066f``) return before printing the row ``NPU
Name | Health | Power ...`` when ``npu_common_get_health_state_str`` refuses the chip's health
value (an index outside ``OK``, ``Warning``, ``Alarm``, ``Critical``, ``UNKNOWN``);
``print_card_total_info_second`` returns before the row ``Chip Device | Bus-Id | ...`` when
``dcmi_get_device_logic_id`` fails. No published output shows either: the inputs below are real
tables with one row taken out, **constructed** from those functions, not captures.
"""

from __future__ import annotations

import pytest

from ascend_dra.profiles.ascend.npusmi import tables
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from tests.unit.test_ascend_support import fixture


def without_line(name: str, line_no: int) -> str:
    """Fixture ``name`` without its line ``line_no`` (1-based)."""
    lines = fixture(name).splitlines(keepends=True)
    del lines[line_no - 1]
    return "".join(lines)


@pytest.mark.parametrize(
    ("name", "removed", "read", "incomplete"),
    [
        ("910B3_info.txt", 13, [(0, 0), (1, 0), (3, 0), (4, 0), (5, 0), (6, 0), (7, 0)],
         (13, 0, None, None, "0000:81:00.0")),
        ("310P3-duo_info_shared-BusId_npu-smi-25.2.0.txt", 10, [(2, 0)], (10, 1, 1, None, "0000:01:00.0")),
        ("910C_A3_info_npu-smi-26.0.rc2_first-2-dies.txt", 7, [(0, 1)], (7, 0, None, 0, "0000:9D:00.0")),
        ("950PR_info_Alarm_processes_drv25.7.rc1.txt", 10, [(0, 0), (2, 0)], (10, 0, None, None, "0000:61:00.0")),
    ],
    ids=["910b3-one-of-eight", "310p-duo-second-chip", "910c-first-die", "950-no-chip-column"],
)
def test_a_chip_printed_without_its_first_row_is_set_apart_and_the_others_are_read(
        name: str, removed: int, read: list[tuple[int, int]], incomplete: tuple[object, ...]) -> None:
    """The lone second row failed the whole table ("a chip takes two rows between separators"), and
    with it the npu-smi discovery tier and every chip's health."""
    table = tables.parse_info(without_line(name, removed))
    assert [(c.npu_id, c.chip_id) for c in table.chips] == read
    assert [(i.line_no, i.chip_id, i.device, i.phy_id, i.bus_id) for i in table.incomplete] == [incomplete]
    assert table.incomplete[0].line == without_line(name, removed).splitlines()[removed - 1]


def test_a_second_row_alone_says_what_is_known_of_its_chip() -> None:
    table = tables.parse_info(without_line("310P3-duo_info_shared-BusId_npu-smi-25.2.0.txt", 10))
    assert table.incomplete[0].reason == (
        "npu-smi info printed only its second row (line 10: chip 1, Device 1, Bus-Id 0000:01:00.0): "
        "npu-smi could not print its health, and its NPU ID and name are missing")


def test_a_first_row_alone_is_a_chip_whose_logic_id_npu_smi_could_not_read() -> None:
    """The lone first row failed the whole table (310P: ``Device`` is the logic ID DCMI gives)."""
    table = tables.parse_info(without_line("310P3-duo_info_shared-BusId_npu-smi-25.2.0.txt", 11))
    assert [(c.npu_id, c.chip_id) for c in table.chips] == [(2, 0)]
    [row] = table.incomplete
    assert (row.npu_id, row.name, row.health, row.chip_id, row.bus_id) == (2, "310P3", "OK", None, None)
    assert row.reason.startswith("npu-smi info printed only its first row (line 10: NPU 2, name 310P3, health OK)")


@pytest.mark.parametrize(
    ("text", "line_no", "reason"),
    [
        ("| npu-smi 9.9 Version: 9.9 |\n| NPU Name | Health | Power(W) |\n| Chip | Bus-Id | AICore(%) |\n"
         "+====+\n| 0 910B3 | OK |\n", 5,
         "a chip takes two rows between separators (as a second row alone: 2 cells against 3; as a first row "
         "alone: 2 cells against 3)"),
        # Either row's shape, with a value neither can hold.
        ("| npu-smi 9.9 Version: 9.9 |\n| NPU Name | Health | Power(W) Temp(C) |\n"
         "| Chip Device | Bus-Id | AICore(%) Memory-Usage(MB) |\n+====+\n| 215 310 | OK | 12.8 hot |\n", 5,
         "a chip takes two rows between separators (as a second row alone: Chip: 215 is out of range 0..5 (a "
         "chip's index in its NPU: up to 4 chips, then the MCU and the board CPU); as a first row alone: "
         "Temp(C): 'hot' is not an integer or NA)"),
        # The shape of a second row, with a health where its Bus-Id goes (a review found it accepted).
        ("| npu-smi 9.9 Version: 9.9 |\n| NPU Name | Health | Power(W) Temp(C) |\n"
         "| Chip Device | Bus-Id | AICore(%) Memory-Usage(MB) |\n+====+\n| 1 1 | OK | 0 2703 / 8192 |\n", 5,
         "a chip takes two rows between separators (as a second row alone: Bus-Id 'OK' is not a PCI address or "
         "NA; as a first row alone: Temp(C): '2703/8192' is not an integer or NA)"),
    ],
    ids=["too-few-cells", "bad-value-for-both-rows", "no-pci-address"],
)
def test_a_lone_row_that_is_neither_row_is_still_an_error(text: str, line_no: int, reason: str) -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        tables.parse_info(text, command="npu-smi info")
    assert (caught.value.line_no, caught.value.reason) == (line_no, reason)
