"""Health of Ascend chips from the Health column of `npu-smi info`, through a real subprocess."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiFailed
from tests.unit.test_ascend_profiles import host_root, lab_310p3
from tests.unit.test_ascend_support import FIXTURES, fake_npu_smi, script


def health_script(tmp_path: Path, first: str, second: str) -> Path:
    """An npu-smi whose `info` is the 310P3 lab table with the two chips' Health set as given."""
    text = (FIXTURES / "310P3_info.txt").read_text()
    rows = text.split("| OK              |")
    assert len(rows) == 3, "the fixture has two chips, both OK"
    table = rows[0] + f"| {first:<16}|" + rows[1] + f"| {second:<16}|" + rows[2]
    (tmp_path / "table.txt").write_text(table)
    return script(tmp_path, f'#!/bin/sh\n[ "$*" = "info" ] && exec cat {tmp_path / "table.txt"}\nexit 1\n',
                  name="npu-smi-health")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ("OK", "OK", {"npu-0-0": True, "npu-1-0": True}),
        ("Warning", "Alarm", {"npu-0-0": True, "npu-1-0": False}),
        ("Critical", "Bogus", {"npu-0-0": False, "npu-1-0": None}),
    ],
    ids=["all-ok", "warning-is-usable-alarm-is-not", "critical-and-unknown"],
)
async def test_health_follows_the_health_column(tmp_path: Path, first, second, expected) -> None:
    profile = Npu310PProfile(host_root=host_root(tmp_path))
    ctx = lab_310p3(tmp_path)
    inventory = await profile.discover(ctx)
    exe = health_script(tmp_path, first, second)
    assert await profile.health(attrs.evolve(ctx, npu_smi=str(exe)), inventory) == expected


@pytest.mark.anyio
@pytest.mark.parametrize("cut", [3, 1], ids=["chip left out", "first row left out"])
async def test_a_chip_missing_from_the_table_or_printed_without_its_health_row_is_unknown(
        tmp_path: Path, cut: int) -> None:
    """A chip gone from the table is unknown. npu-smi also leaves out a chip's first row (NPU, Name,
    Health) when it cannot turn the chip's health into text (``print_card_total_info_first``,
    npu_info_print.c; that input is constructed from it, not a capture): that failed the whole
    table, so every chip's health was unknown."""
    profile = Npu310PProfile(host_root=host_root(tmp_path))
    ctx = lab_310p3(tmp_path)
    inventory = await profile.discover(ctx)
    lines = (FIXTURES / "310P3_info.txt").read_text().splitlines()
    second = next(i for i, line in enumerate(lines) if line.startswith("| 5 "))
    (tmp_path / "cut.txt").write_text("\n".join(lines[:second] + lines[second + cut:]) + "\n")
    exe = script(tmp_path, f'#!/bin/sh\nexec cat {tmp_path / "cut.txt"}\n', name="npu-smi-cut")
    assert await profile.health(attrs.evolve(ctx, npu_smi=str(exe)), inventory) == {"npu-0-0": True,
                                                                                   "npu-1-0": None}


@pytest.mark.anyio
async def test_an_unknown_layout_or_a_failing_npu_smi_raises(tmp_path: Path) -> None:
    profile = Npu310PProfile(host_root=host_root(tmp_path))
    ctx = lab_310p3(tmp_path)
    inventory = await profile.discover(ctx)
    one_chip = tmp_path / "one"
    one_chip.mkdir()
    single = fake_npu_smi(one_chip, {"info": "310P3-duo_info_-t_common_-i_1_2chips.txt"})  # a different layout
    with pytest.raises(Exception) as raised:
        await profile.health(attrs.evolve(ctx, npu_smi=str(single)), inventory)
    assert "npu-smi info" in str(raised.value)
    failing = tmp_path / "failing"
    failing.mkdir()
    broken = fake_npu_smi(failing, {"info": (3, "dcmi module initialize failed")})
    with pytest.raises(NpuSmiFailed):
        await profile.health(attrs.evolve(ctx, npu_smi=str(broken)), inventory)


@pytest.mark.anyio
async def test_simulated_chips_have_no_health_source(tmp_path: Path) -> None:
    profile = Npu310PProfile(host_root=host_root(tmp_path))
    ctx = lab_310p3(tmp_path)
    simulated = attrs.evolve(ctx, npu_smi=str(tmp_path / "missing"), options={"simulate": "always"})
    inventory = await profile.discover(simulated)
    assert inventory.source == "simulated" and inventory.devices
    assert await profile.health(simulated, inventory) == {}
