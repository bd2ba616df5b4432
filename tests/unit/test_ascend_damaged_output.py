"""Real npu-smi outputs damaged the ways issue 40 item 6 found them broken: a title line after a
chip's rows, a chip printed twice, numbers out of any real range or in other scripts' digits,
numbers longer than ``int()`` reads, a repeated key, and a huge cell. Each is refused with an
:class:`NpuSmiParseError` naming the command and the line (docs/ascend-discovery.md#damaged-or-repeated-output),
and discovery publishes nothing it read from such output. ``test_ascend_mutations.py`` mutates
every sample the same ways at random."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from ascend_dra.profiles.ascend.npusmi import _text, keyvalue, readings, remap, tables, topo, vnpu_tables
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.vnpucore.versioninfo import VersionInfoError, parse_version_info
from tests.unit.test_ascend_discovery import ANSWERS_910A, SHARED, run_chain, tree_910a
from tests.unit.test_ascend_profiles import context
from tests.unit.test_ascend_support import dev_tree, fake_npu_smi, fixture, sys_tree

A3_INFO = "910C_A3_info_2npus_4dies_constructed.txt"
# Digits of other scripts, which str.isdigit() and a regex's \\d accept and int() reads as numbers.
FULLWIDTH_15077 = "\uff11\uff15\uff10\uff17\uff17"
FULLWIDTH_25 = "\uff12\uff15"
ARABIC_INDIC_4 = "\u0664"
INFO_910A = "910A_info_atlas800-9010_npu-smi-22.0.3.1.txt"


def written(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def lines_of(name: str) -> list[str]:
    return fixture(name).splitlines(keepends=True)


def refused(parse: Callable[[str], object], text: str) -> NpuSmiParseError:
    with pytest.raises(NpuSmiParseError) as caught:
        parse(text)
    return caught.value


# -- a title line after a chip's rows ----------------------------------------------------------------


def a3_with_title_after_the_last_die() -> str:
    """The 4-die A3 table with its title and header printed again straight under die 3's rows
    (lines 16-17), as output that npu-smi repeated, or two outputs run together, has it."""
    lines = lines_of(A3_INFO)
    return "".join(lines[:17] + lines[1:6] + lines[17:])


def test_a_title_line_after_a_chips_rows_is_refused_not_the_chip_dropped() -> None:
    """Before: the title reset the reader, die 3's rows were thrown away, and 3 of 4 dies were read."""
    error = refused(tables.parse_info, a3_with_title_after_the_last_die())
    assert (error.command, error.line_no, error.reason) == (
        "npu-smi info", 18, "a second 'npu-smi ... Version:' title (the first is on line 2)")
    assert error.line == lines_of(A3_INFO)[1].rstrip("\n")


def test_an_output_printed_twice_is_refused_at_its_second_title() -> None:
    text = fixture(A3_INFO)
    error = refused(tables.parse_info, text + text)
    assert (error.line_no, error.reason) == (
        len(lines_of(A3_INFO)) + 2, "a second 'npu-smi ... Version:' title (the first is on line 2)")


@pytest.mark.anyio
async def test_a_910c_host_whose_info_repeats_its_title_publishes_every_die_from_devfs(tmp_path: Path) -> None:
    """Before: the npu-smi tier answered with 3 of the 4 dies and said nothing."""
    exe = fake_npu_smi(tmp_path, {"info": written(tmp_path, "info.txt", a3_with_title_after_the_last_die())})
    dev = dev_tree(tmp_path, [f"davinci{i}" for i in range(4)] + SHARED)
    found = await run_chain(tmp_path, exe, dev, sys_tree(tmp_path, {}))
    assert found.source == "devfs"
    assert [c.physical_id for c in found.chips] == [0, 1, 2, 3]
    assert len(found.failures) == 1
    assert found.failures[0].endswith("a second 'npu-smi ... Version:' title (the first is on line 2)")


# -- one chip printed twice ----------------------------------------------------------------------------


def info_910a_with_npu0_twice() -> str:
    """The 8-chip 910A table with NPU 7's rows (lines 28-29) replaced by NPU 0's (lines 7-8)."""
    lines = lines_of(INFO_910A)
    return "".join(lines[:27] + lines[6:8] + lines[29:])


def test_a_chip_printed_twice_is_refused() -> None:
    error = refused(tables.parse_info, info_910a_with_npu0_twice())
    assert (error.line_no, error.reason) == (28, "a second chip NPU 0 chip 0 (the first is on line 7)")


@pytest.mark.anyio
async def test_a_chip_printed_twice_with_info_m_failing_is_not_published_under_another_node(
        tmp_path: Path) -> None:
    """Before: with ``-m`` failing, davinci0 (NPU 7's node) was published as NPU 0 chip 0 with NPU 0's
    PCI address, next to the real NPU 0 on davinci3."""
    answers = {**ANSWERS_910A, "info": written(tmp_path, "info.txt", info_910a_with_npu0_twice()),
               "info -m": (1, "dcmi module initialize failed")}
    dev, sys_root = tree_910a(tmp_path)
    found = await run_chain(tmp_path, fake_npu_smi(tmp_path, answers), dev, sys_root)
    assert found.source == "devfs"
    assert [c.npu_id for c in found.chips] == [None] * 8
    assert found.failures[0].endswith("a second chip NPU 0 chip 0 (the first is on line 7)")


def m_row(npu: object, chip: object, logic: object) -> str:
    """A row of ``910A_info_-m_atlas800-9010.txt`` (columns 31 characters wide)."""
    return f"{npu!s:<30} {chip!s:<30} {logic!s:<30} Ascend 910A"


@pytest.mark.parametrize(("row", "new", "line_no", "reason"), [
    (m_row(1, 0, 1), m_row(2, 0, 1), 4, "a second row for NPU 2 chip 0 (the first is on line 3)"),
    (m_row(2, 0, 2), m_row(2, 0, 1), 4, "a second logic ID 1 (the first is on line 3)"),
    (m_row(1, 0, 1), m_row(1, 0, -3), 3,
     "Chip Logic ID: -3 is out of range 0..128 (a logic ID, 0..n-1 over the node's chips)"),
], ids=["chip-twice", "logic-id-twice", "negative-logic-id"])
def test_info_m_refuses_a_chip_or_a_logic_id_printed_twice_and_negative_ids(
        row: str, new: str, line_no: int, reason: str) -> None:
    text = fixture("910A_info_-m_atlas800-9010.txt")
    assert row in text
    error = refused(tables.parse_mapping, text.replace(row, new, 1))
    assert (error.command, error.line_no, error.reason) == ("npu-smi info -m", line_no, reason)


@pytest.mark.anyio
async def test_a_negative_logic_id_in_info_m_names_no_device_npu_minus_3(tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    """Before: ``Chip Logic ID -3`` named a device ``npu--3-0``. Now ``-m`` fails alone (a WARNING
    names it) and the logic IDs come from the physical order."""
    mapping = fixture("910A_info_-m_atlas800-9010.txt").replace(m_row(1, 0, 1), m_row(1, 0, -3), 1)
    answers = {**ANSWERS_910A, "info -m": written(tmp_path, "m.txt", mapping)}
    dev, sys_root = tree_910a(tmp_path)
    ctx = context(tmp_path, fake_npu_smi(tmp_path, answers), dev, sys_root)
    with caplog.at_level(logging.WARNING):
        inventory = await Npu910Profile().discover(ctx)
    assert inventory.source == "npu-smi"
    assert sorted(d.name for d in inventory.devices) == sorted(f"npu-{n}-0" for n in range(8))
    failed = [r for r in caplog.records if getattr(r, "what", None) == "npu-smi info -m"]
    assert "Chip Logic ID: -3 is out of range 0..128" in failed[0].error  # type: ignore[attr-defined]


# -- numbers out of any real range, and digits of other scripts --------------------------------------------


@pytest.mark.parametrize(("old", "new", "line_no", "reason"), [
    ("0    / 32768 ", "0    / 9223372036854775807 ", 8,
     "HBM-Usage(MB): 9223372036854775807 is out of range 0..131072 (MiB of one chip: 131072 on a 950, the most of "
     "any chip)"),
    ("1867 / 15077 ", f"1867 / {FULLWIDTH_15077} ", 8,
     f"Memory-Usage(MB): '{FULLWIDTH_15077}' is not an integer or NA"),
    ("| 0     910A ", f"| {ARABIC_INDIC_4}     910A ", 7, f"NPU: '{ARABIC_INDIC_4}' is not an integer or NA"),
    ("| 0     910A ", "| -1    910A ", 7, "NPU: -1 is out of range 0..2147483647 (an NPU ID, a DCMI card ID)"),
    ("1867 / 15077 ", "15078 / 15077", 8, "Memory-Usage(MB): 15078 is more than the total 15077"),
    ("43                15   / 15 ", "430               15   / 15 ", 7,
     "Temp(C): 430 is out of range -55..150 (degrees Celsius)"),
    ("0000:61:00.0", "../../../..", 8, "Bus-Id '../../../..' is not a PCI address (dddd:bb:dd.f) or NA"),
], ids=["hbm-2^63-1", "fullwidth-digits", "arabic-indic-digit", "negative-npu-id", "used-over-total",
        "temperature", "bus-id-path"])
def test_info_refuses_numbers_out_of_range_other_digits_and_a_bus_id_that_is_a_path(
        old: str, new: str, line_no: int, reason: str) -> None:
    text = fixture(INFO_910A)
    assert old in text
    error = refused(tables.parse_info, text.replace(old, new, 1))
    assert (error.line_no, error.reason) == (line_no, reason)


@pytest.mark.anyio
async def test_an_hbm_total_of_2_63_is_not_published_as_memory(tmp_path: Path) -> None:
    """Before: ``memory: 9223372036854775807Mi``."""
    info = fixture(INFO_910A).replace("0    / 32768 ", "0    / 9223372036854775807 ", 1)
    answers = {**ANSWERS_910A, "info": written(tmp_path, "info.txt", info)}
    dev, sys_root = tree_910a(tmp_path)
    inventory = await Npu910Profile().discover(context(tmp_path, fake_npu_smi(tmp_path, answers), dev, sys_root))
    assert inventory.source == "devfs"
    assert all("memory" not in d.capacities for d in inventory.devices)


@pytest.mark.parametrize(("parse", "name", "old", "new", "reason"), [
    (readings.parse_common, "910B1_info_-t_common_-i_1.txt", ": 24", ": 48",
     "Aicore Count: 48 is out of range 1..32 (AI cores of one chip: 32 on a 910A or 950, the most of any chip)"),
    (vnpu_tables.parse_vnpu_info, "910B4_A2-inference_info_-t_info-vnpu_empty_and_2vnpus.txt", "| 20/20", "| 21/20",
     "AICORE: 21 is more than the total 20"),
    (vnpu_tables.parse_template_info, "310P3_info_-t_template-info_drv22.0.4.txt", "vir01               1 ",
     "vir01               -1",
     "AICORE: -1 is out of range 1..32 (AI cores of one chip: 32 on a 910A or 950, the most of any chip)"),
    (keyvalue.parse_chip_board, "910A_info_-t_board_-i_-c_VDieID.txt", "0000:61:00.0", "../../../..",
     "PCIe Bus Info: '../../../..' is not a PCI address (dddd:bb:dd.f) or NA"),
    (keyvalue.parse_device_share, "310P3_info_-t_device-share.txt", ": 4", ": -4",
     "NPU ID: -4 is out of range 0..2147483647 (an NPU ID, a DCMI card ID)"),
    (lambda text: remap.parse_phyid_remap(text, physical_id=0), "950_info_-t_phyid-remap_-p_0.txt",
     "NPU ID                        :0", "NPU ID                        :8255",
     "NPU ID, the 950's logic ID: 8255 is out of range 0..128 (a logic ID, 0..n-1 over the node's chips)"),
], ids=["aicore-48", "vnpu-free-over-total", "template-negative-aicore", "board-bus-path", "negative-npu-id",
        "950-remap-logic-id"])
def test_other_outputs_refuse_numbers_out_of_range(parse: Callable[[str], object], name: str, old: str, new: str,
                                                    reason: str) -> None:
    text = fixture(name)
    assert old in text, old
    assert refused(parse, text.replace(old, new, 1)).reason == reason


# -- numbers longer than int() reads, and errors that escaped the fallbacks ------------------------------

HUGE = "9" * 5000


@pytest.mark.parametrize(("parse", "name", "old", "new"), [
    (tables.parse_info, INFO_910A, "/ 32768 ", f"/ {HUGE} "),
    (tables.parse_mapping, "910A_info_-m_atlas800-9010.txt", m_row(0, 0, 0), m_row(0, 0, HUGE)),
    (keyvalue.parse_list, "910B4_info_-l_8cards.txt", ": 8", f": {HUGE}"),
    (keyvalue.parse_board, "910A_info_-t_board_-i.txt", ": 0", f": {HUGE}"),
    (keyvalue.parse_chip_board, "910A_info_-t_board_-i_-c_VDieID.txt", ": 0", f": {HUGE}"),
    (keyvalue.parse_device_share, "310P3_info_-t_device-share.txt", ": 4", f": {HUGE}"),
    (readings.parse_memory, "950_info_-t_memory.txt", ": 131072", f": {HUGE}"),
    (readings.parse_usages, "910A_info_-t_usages.txt", ": 0", f": {HUGE}"),
    (readings.parse_common, "910B1_info_-t_common_-i_1.txt", ": 24", f": {HUGE}"),
    (topo.parse_topo, "910B3_info_-t_topo.txt", "NPU0 ", f"NPU{HUGE} "),
    (lambda text: remap.parse_phyid_remap(text, physical_id=0), "950_info_-t_phyid-remap_-p_0.txt", ":0", f":{HUGE}"),
    (vnpu_tables.parse_template_info, "310P3_info_-t_template-info_drv22.0.4.txt", "vir01               1 ",
     f"vir01               {HUGE} "),
    (vnpu_tables.parse_vnpu_info, "910B4_A2-inference_info_-t_info-vnpu_empty_and_2vnpus.txt", "vnpu: 0",
     f"vnpu: {HUGE}"),
], ids=["info", "m", "l", "board", "chip-board", "device-share", "memory", "usages", "common", "topo",
        "phyid-remap", "template-info", "info-vnpu"])
def test_a_5000_digit_number_is_a_parse_error_in_every_integer_parser(parse: Callable[[str], object], name: str,
                                                                      old: str, new: str) -> None:
    """Before: ``int()`` raised a bare ValueError (more than 4300 digits), which no fallback catches."""
    text = fixture(name)
    assert old in text, old
    error = refused(parse, text.replace(old, new, 1))
    assert error.line_no > 0 and error.line in text.replace(old, new, 1).splitlines()
    assert "(5000 digits) is out of range" in error.reason


def test_a_5000_digit_driver_release_is_a_version_info_error() -> None:
    with pytest.raises(VersionInfoError) as caught:
        parse_version_info(f"Version={HUGE}.1\n")
    assert caught.value.reason.endswith("... is 5002 characters long; a release has at most 64")
    with pytest.raises(VersionInfoError) as caught:
        parse_version_info(f"Version={FULLWIDTH_25}.5.1\n")
    assert caught.value.reason == f"release '{FULLWIDTH_25}.5.1' does not start with <major>.<minor>"


def test_common_with_a_second_chip_id_in_its_first_block_is_a_parse_error() -> None:
    """Before: an IndexError (an empty head block), and the profile failed as an ExceptionGroup."""
    text = "Chip ID : 0\nNPU ID : 0\nChip Count : 1\nChip ID : 0\nAicore Count : 32\n"
    error = refused(readings.parse_common, text)
    assert (error.line_no, error.reason) == (4, "a second 'Chip ID' line (the first is on line 1)")


@pytest.mark.anyio
async def test_failing_enrichments_lose_only_their_own_fields(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """``-m`` with a 5000-digit number and ``-t common`` with a second ``Chip ID``: before, a
    ValueError and an IndexError failed the whole profile; now each call fails alone."""
    mapping = fixture("910A_info_-m_atlas800-9010.txt").replace(m_row(0, 0, 0), m_row(0, 0, HUGE), 1)
    common = "Chip ID : 0\nNPU ID : 0\nChip Count : 1\nChip ID : 0\nAicore Count : 32\n"
    answers = {**ANSWERS_910A, "info -m": written(tmp_path, "m.txt", mapping),
               "info -t common -i 0": written(tmp_path, "common.txt", common)}
    dev, sys_root = tree_910a(tmp_path)
    with caplog.at_level(logging.WARNING):
        inventory = await Npu910Profile().discover(context(tmp_path, fake_npu_smi(tmp_path, answers), dev, sys_root))
    assert inventory.source == "npu-smi" and len(inventory.devices) == 8
    failed = {r.what for r in caplog.records if r.getMessage().startswith("npu-smi enrichment failed")}  # type: ignore[attr-defined]
    assert {"npu-smi info -m", "common -i 0"} <= failed
    first = next(d for d in inventory.devices if d.attributes["npuID"] == 0)
    # -t common's 32 is not read from the damaged block, and the catalogue has no count for a 910A (30 or 32).
    assert "aicore" not in first.capacities
    assert first.capacities["memory"].value == "32768Mi" and first.attributes["uuid"]


# -- a huge cell -----------------------------------------------------------------------------------------


def test_a_32000_character_cell_is_refused_by_its_length() -> None:
    """Before: a regex that tried every start and end of the word took ~10 s on it. The line
    length is bounded in the one line reader every parser uses, so no parser sees such a line."""
    text = fixture(INFO_910A).replace("910A ", "910A " + "x" * 32_000, 1)
    error = refused(tables.parse_info, text)
    assert (error.line_no, error.reason) == (7, f"a line of {len(error.line)} characters; npu-smi prints at most "
                                                f"{_text.MAX_LINE}")
    assert len(str(error)) < 400  # the message shows the start of the line, not all of it


@pytest.mark.parametrize(("parse", "text"), [
    (tables.parse_mapping, "NPU ID  Chip ID  " + "  ".join(f"X{i}" for i in range(1200)) + "  Chip Name\n"),
    (topo.parse_topo, " ".join(f"NPU{i}" for i in range(1000)) + "\n"),
    (lambda text: remap.parse_phyid_remap(text, physical_id=0), "".join(f"K{i}:1\n" for i in range(2000))),
], ids=["m-unknown-columns", "topo-rows-and-columns", "remap-keys-printed"])
def test_an_error_message_shows_the_start_of_what_it_lists(parse: Callable[[str], object], text: str) -> None:
    """Found by test_ascend_mutations.py: a reason that lists what a damaged line holds (columns,
    labels, keys) was as long as the output, and went whole into logs and notes."""
    assert len(str(refused(parse, text))) < 2000


def test_a_topo_label_out_of_range_is_named_by_its_kind_not_repeated() -> None:
    """Found by the 20,000-example run: the reason repeated the 5003-character label it refused."""
    text = fixture("910B3_info_-t_topo.txt").replace("NPU0 ", f"NPU{HUGE} ", 1)
    assert refused(topo.parse_topo, text).reason == (
        f"NPU<k> label: {'9' * 20}... (5000 digits) is out of range 0..2147483647 (an NPU ID, a DCMI card ID)")


@pytest.mark.parametrize(("old", "new", "reason"), [
    ("NIC0       NIC1", "NIC1       NIC1", "a second column NIC1 (the first is on line 1)"),
    ("Phy-ID0    Phy-ID1", "Phy-ID1    Phy-ID1", "a second column Phy-ID1 (the first is on line 1)"),
], ids=["nic", "phy-id"])
def test_a_topo_column_printed_twice_in_its_header_is_refused(old: str, new: str, reason: str) -> None:
    """Found by the 20,000-example run: a label printed twice on one line was taken (NICs [1, 1, 2, 3]),
    since the once-each rule only looked at other lines."""
    text = fixture("910C_A3_info_-t_topo_Phy-ID_NIC_constructed.txt")
    assert old in text
    error = refused(topo.parse_topo, text.replace(old, new, 1))
    assert (error.line_no, error.reason) == (1, reason)
