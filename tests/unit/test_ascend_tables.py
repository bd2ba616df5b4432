"""``npu-smi info`` when npu-smi cannot print a chip's health: the chip's first row is missing.

``print_card_total_info_first`` and ``print_card_total_info_with_HBM_first`` (npu_info_print.c of
the open npu-smi source, verylucky01/driver @ ``e29d066f``) return before printing the row ``NPU
Name | Health | Power ...`` when ``npu_common_get_health_state_str`` refuses the chip's health
value (an index outside ``OK``, ``Warning``, ``Alarm``, ``Critical``, ``UNKNOWN``); the second row
(``Chip [Device|Phy-ID] | Bus-Id | ...``) is printed as usual. No published output shows it: the
inputs below are real tables with that one row taken out, **constructed** from those functions, not
captures.
"""

from __future__ import annotations

import pytest

from ascend_dra.profiles.ascend import tables
from ascend_dra.profiles.ascend.errors import NpuSmiParseError
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


@pytest.mark.parametrize(
    ("text", "line_no", "reason"),
    [
        # A first row alone: not a second row, so still no layout we know.
        ("| npu-smi 9.9 Version: 9.9 |\n| NPU Name | Health | Power(W) |\n| Chip | Bus-Id | AICore(%) |\n"
         "+====+\n| 0 910B3 | OK | NA |\n", 5, "a chip takes two rows between separators"),
        # The shape of a second row with a value it cannot hold (the 20.2.0 310 table's first row, say).
        ("| npu-smi 9.9 Version: 9.9 |\n| NPU Name | Health | Power(W) Temp(C) |\n"
         "| Chip Device | Bus-Id | AICore(%) Memory-Usage(MB) |\n+====+\n| 215 310 | OK | 12.8 45 |\n", 5,
         "a chip takes two rows between separators (as a second row alone: AICore(%): '12.8' is not an integer or NA)"),
    ],
    ids=["first-row-alone", "second-row-shape-bad-value"],
)
def test_a_lone_row_that_is_no_second_row_is_still_an_error(text: str, line_no: int, reason: str) -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        tables.parse_info(text, command="npu-smi info")
    assert (caught.value.line_no, caught.value.reason) == (line_no, reason)
