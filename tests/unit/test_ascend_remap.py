"""``npu-smi info -t phyid-remap -p <physical ID>``: ``key:value`` lines with no space (constructed fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_dra.profiles.ascend.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.npusmi import NpuSmi
from ascend_dra.profiles.ascend.remap import PhyIdRemap, parse_phyid_remap
from tests.unit.test_ascend_support import fake_npu_smi, fixture


def test_remap_of_die_1() -> None:
    remap = parse_phyid_remap(fixture("910C_A3_info_-t_phyid-remap_-p_1_constructed.txt"), physical_id=1)
    assert (remap.physical_id, remap.logic_id, remap.npu_id, remap.chip_id) == (1, 1, 0, 1)
    assert dict(remap.fields) == {"Chip Phy-ID": "1", "Chip Logic ID": "1", "NPU ID": "0", "Chip ID": "1"}


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
        ("Chip Logic ID:NA\nNPU ID:5\nChip ID:0\n", 1,
         "no logic ID (keys printed: Chip Logic ID, NPU ID, Chip ID)"),
        ("Chip Logic ID:x3\nNPU ID:5\nChip ID:0\n", 1, "Chip Logic ID: 'x3' is not an integer or NA"),
        ("Chip Phy-ID:7\nChip Logic ID:3\nNPU ID:5\nChip ID:0\n", 1, "physical ID 7 printed for -p 2"),
        ("Error: the physical id is invalid\n", 0, "no logic ID (keys printed: Error)"),
        ("Segmentation fault\n", 1, "expected 'key:value'"),
    ],
    ids=["missing-logic-id", "logic-id-na", "not-a-number", "other-physical-id", "error-text", "garbage"],
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
