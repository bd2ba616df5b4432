"""``npu-smi info -t phyid-remap -p <physical ID>``: ``key:value`` lines with no space (constructed
fixtures, and the Ascend 950 manual's example)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.npusmi.remap import PhyIdRemap, parse_phyid_remap
from ascend_dra.profiles.ascend.npusmi.runner import NpuSmi
from tests.unit.test_ascend_support import fake_npu_smi, fixture


def test_remap_of_die_1() -> None:
    remap = parse_phyid_remap(fixture("910C_A3_info_-t_phyid-remap_-p_1_constructed.txt"), physical_id=1)
    assert (remap.physical_id, remap.logic_id, remap.npu_id, remap.chip_id) == (1, 1, 0, 1)
    assert dict(remap.fields) == {"Chip Phy-ID": "1", "Chip Logic ID": "1", "NPU ID": "0", "Chip ID": "1"}


def test_950_npu_id_is_the_logic_id() -> None:
    """The 950's npu-smi (``NPU_SMI_V2`` in ``show_ascend_chip_phyid_remap_info``, npu_chip_info.c)
    prints ``Chip Phy-ID``, ``NPU ID`` (the DCMI device ID, "Logical ID of the software" in the
    manual), ``Slot ID`` and ``Chip ID``, and no logic-ID line: it was refused for the missing logic ID."""
    remap = parse_phyid_remap(fixture("950_info_-t_phyid-remap_-p_0.txt"), physical_id=0)
    assert remap == PhyIdRemap(physical_id=0, logic_id=0, npu_id=0, chip_id=0, fields=remap.fields, slot_id=0)


def test_950_layout_with_ids_that_differ() -> None:
    """Constructed from the format strings at npu_chip_info.c (``"\\t%-30s:%d\\n"``), not a capture:
    physical ID 5 is device (NPU ID) 3 in slot 4."""
    text = "".join(f"\t{key:<30}:{value}\n" for key, value in (
        ("Chip Phy-ID", 5), ("NPU ID", 3), ("Slot ID", 4), ("Chip ID", 0)))
    remap = parse_phyid_remap(text, physical_id=5)
    assert (remap.physical_id, remap.logic_id, remap.npu_id, remap.chip_id, remap.slot_id) == (5, 3, 3, 0, 4)


def test_the_other_generations_print_chip_physical_id_and_chip_logic_id() -> None:
    """Constructed from the format strings of the non-950 branch at npu_chip_info.c (``"\\t%-30s:%lu\\n"``
    ``Chip Physical ID``, then ``Chip Logic ID``, ``NPU ID``, ``Chip ID``), not a capture."""
    text = "".join(f"\t{key:<30}:{value}\n" for key, value in (
        ("Chip Physical ID", 6), ("Chip Logic ID", 6), ("NPU ID", 3), ("Chip ID", 0)))
    remap = parse_phyid_remap(text, physical_id=6)
    assert (remap.physical_id, remap.logic_id, remap.npu_id, remap.chip_id, remap.slot_id) == (6, 6, 3, 0, None)


@pytest.mark.parametrize(
    "text",
    ["Logic ID:3\nCard ID:5\nChip ID:0\n", "\tPhysical ID:2\n\tLogicID:3\n\tNPU-ID:5\n\tChip ID:0\n",
     "phy id:2\nchip logic id:3\nnpu id:5\nchip id:0\n"],
    ids=["no-physical-line-card-id", "tab-indented-squeezed-keys", "lower-case"],
)
def test_key_spellings_are_matched_loosely(text: str) -> None:
    remap = parse_phyid_remap(text, physical_id=2)
    assert (remap.logic_id, remap.npu_id, remap.chip_id) == (3, 5, 0)


@pytest.mark.parametrize(
    ("text", "line_no", "reason"),
    [
        ("Chip Phy-ID:2\nNPU ID:5\nChip ID:0\n", 0, "no logic ID (keys printed: Chip Phy-ID, NPU ID, Chip ID)"),
        # The 950 layout says Slot ID; with a logic-ID line as well it is neither layout.
        ("Chip Phy-ID:2\nNPU ID:5\nSlot ID:1\nChip Logic ID:4\nChip ID:0\n", 4,
         "a logic ID and a Slot ID: neither npu-smi's layout (the 950 prints NPU ID as the logic ID)"),
        ("Chip Phy-ID:2\nSlot ID:1\nChip ID:0\n", 0, "no NPU ID (keys printed: Chip Phy-ID, Slot ID, Chip ID)"),
        ("Chip Logic ID:NA\nNPU ID:5\nChip ID:0\n", 1,
         "no logic ID (keys printed: Chip Logic ID, NPU ID, Chip ID)"),
        ("Chip Logic ID:x3\nNPU ID:5\nChip ID:0\n", 1, "Chip Logic ID: 'x3' is not an integer or NA"),
        ("Chip Phy-ID:7\nChip Logic ID:3\nNPU ID:5\nChip ID:0\n", 1, "physical ID 7 printed for -p 2"),
        ("Error: the physical id is invalid\n", 0, "no logic ID (keys printed: Error)"),
        ("Segmentation fault\n", 1, "expected 'key:value'"),
    ],
    ids=["missing-logic-id", "950-layout-with-a-logic-id", "950-layout-without-npu-id", "logic-id-na", "not-a-number",
         "other-physical-id", "error-text", "garbage"],
)
def test_bad_output_names_the_field(text: str, line_no: int, reason: str) -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        parse_phyid_remap(text, physical_id=2)
    assert (caught.value.line_no, caught.value.reason) == (line_no, reason)


@pytest.mark.anyio
async def test_the_runner_passes_the_physical_id(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, {"info -t phyid-remap -p 0": "910C_A3_info_-t_phyid-remap_-p_0_constructed.txt"})
    remap = await NpuSmi(str(exe)).phyid_remap(0)
    assert remap == PhyIdRemap(physical_id=0, logic_id=0, npu_id=0, chip_id=0, fields=remap.fields)


def test_the_lab_node_prints_phyid_remap_as_npu_smi_does_before_the_950():
    """The lab's npu-smi stand-in printed the 950's ``Chip Phy-ID`` key, unpadded, for a 310P3; npu-smi
    prints ``"\\t%-30s:%lu\\n"`` with ``Chip Physical ID`` there (npu_chip_info.c)."""
    from ascend_dra.profiles.ascend.sim.labnode import LabChip, render_phyid_remap

    chip = LabChip(npu_id=6, chip_id=0, logic_id=1, physical_id=4, bus_id="0000:82:00.0", vdie_id="x")
    text = render_phyid_remap(chip)
    assert text.splitlines()[0] == "\t" + "Chip Physical ID".ljust(30) + ":4"
    remap = parse_phyid_remap(text, physical_id=4)
    assert (remap.logic_id, remap.npu_id, remap.chip_id, remap.slot_id) == (1, 6, 0, None)
