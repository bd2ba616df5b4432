"""Discovery edge cases of issue 8 item 6 (and the discovery half of item 1), each through a real npu-smi
stand-in fed real (or documented-format constructed) outputs and a fake /dev and sysfs tree."""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import pytest

from ascend_dra.commands.discover import run
from ascend_dra.model import Capacity
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from tests.unit.test_ascend_discovery import ANSWERS_910A, SHARED, tree_910a
from tests.unit.test_ascend_profiles import context
from tests.unit.test_ascend_support import dev_tree, fake_npu_smi, fixture, sys_tree

pytestmark = pytest.mark.anyio

A3_INFO = "910C_A3_info_2npus_4dies_constructed.txt"


def written(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def dropped_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "chip not published"]


# -- DCMI "not supported" 8255 --------------------------------------------------------------------


async def test_dcmi_not_supported_8255_is_never_published_as_memory_or_aicore(tmp_path: Path) -> None:
    info = fixture("910B3_info.txt").replace("3318 / 65536", "3318 / 8255", 1)
    common = fixture("910B1_info_-t_common_-i_1.txt").replace(": 24", ": 8255")
    common = common.replace("NPU ID                         : 1", "NPU ID                         : 0")
    exe = fake_npu_smi(tmp_path, {"info": written(tmp_path, "info.txt", info),
                                  "info -m": "910A_info_-m_atlas800-9010.txt",  # logic IDs 0..7 of NPUs 0..7
                                  "info -t common -i 0": written(tmp_path, "common.txt", common)})
    dev = dev_tree(tmp_path, [f"davinci{i}" for i in range(8)] + SHARED)
    inventory = await Npu910Profile().discover(context(tmp_path, exe, dev, sys_tree(tmp_path, {})))
    first, second = inventory.devices[0], inventory.devices[1]
    # Memory unknown (no 8255Mi); AI cores from the catalogue (910B3: 20), not 8255.
    assert dict(first.capacities) == {"aicore": Capacity("20")}
    assert dict(second.capacities) == {"memory": Capacity("65536Mi"), "aicore": Capacity("20")}


# -- device names do not depend on the tier -------------------------------------------------------


async def test_310_four_chip_card_keeps_its_device_names_when_npu_smi_goes_away(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, {"info": "310_info_atlas800-3000_4chips-per-card_npu-smi-21.0.4.txt",
                                  "info -m": "310_info_-m_atlas800-3000_MiniD_Mcu.txt"})
    dev = dev_tree(tmp_path, ["davinci3", "davinci4", "davinci5", "davinci6", *SHARED])
    # One Atlas 300 card (PCI device 0xd100, reference ascend.md §1): the devfs tier learns the family.
    functions = {f"0000:0{i}:00.0": ("0x19e5", "0xd100", 0) for i in range(4)}
    ctx = context(tmp_path, exe, dev, sys_tree(tmp_path, functions))
    by_npu_smi = await Npu310PProfile().discover(ctx)
    # A fresh daemon on a node whose npu-smi is gone: the devfs tier.
    cold = Npu310PProfile()
    by_devfs = await cold.discover(attrs.evolve(ctx, npu_smi=str(tmp_path / "gone")))
    assert (by_npu_smi.source, by_devfs.source) == ("npu-smi", "devfs")
    assert [d.name for d in by_devfs.devices] == [d.name for d in by_npu_smi.devices] == [
        "npu-0-0", "npu-1-0", "npu-2-0", "npu-3-0"]
    assert [d.attributes["physicalID"] for d in by_devfs.devices] == [3, 4, 5, 6]
    # The devfs tier does not know chip IDs, and says so.
    assert all("chipID" not in d.attributes for d in by_devfs.devices)
    assert [d.attributes["chipID"] for d in by_npu_smi.devices] == [0, 1, 2, 3]
    assert any("chip IDs and NPU IDs unknown" in note for note in cold.discovery_notes())


async def test_a_running_daemon_keeps_names_when_npu_smi_stops_answering(tmp_path: Path) -> None:
    """910A 9010: logic IDs are not in physical order here, so the devfs rule alone would rename."""
    dev, sys_root = tree_910a(tmp_path)
    ctx = context(tmp_path, fake_npu_smi(tmp_path, ANSWERS_910A), dev, sys_root)
    profile = Npu910Profile()
    before = await profile.discover(ctx)
    after = await profile.discover(attrs.evolve(ctx, npu_smi=str(tmp_path / "gone")))
    assert after.source == "devfs"
    assert [(d.name, d.attributes["physicalID"]) for d in after.devices] == sorted(
        ((d.name, d.attributes["physicalID"]) for d in before.devices), key=lambda p: p[1])
    assert {d.name: d.attributes["physicalID"] for d in after.devices} == {
        d.name: d.attributes["physicalID"] for d in before.devices}
    assert "devfs tier: logic, chip and NPU IDs kept from the last npu-smi answer" in profile.discovery_notes()


# -- a chip whose device node is absent is not published ------------------------------------------


async def test_910c_dies_without_a_davinci_node_are_not_published(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    exe = fake_npu_smi(tmp_path, {"info": A3_INFO})
    dev = dev_tree(tmp_path, ["davinci0", "davinci1", *SHARED])
    ctx = context(tmp_path, exe, dev, sys_tree(tmp_path, {}))
    profile = Npu910Profile()
    with caplog.at_level(logging.WARNING):
        inventory = await profile.discover(ctx)
    assert [(d.name, d.attributes["physicalID"], d.attributes["npuID"], d.attributes["chipID"])
            for d in inventory.devices] == [("npu-0-0", 0, 0, 0), ("npu-1-0", 1, 0, 1)]
    records = dropped_records(caplog)
    assert [(r.physical_id, r.npu_id, r.chip_id, r.reason) for r in records] == [  # type: ignore[attr-defined]
        (2, 1, 0, f"no device node {dev / 'davinci2'}"), (3, 1, 1, f"no device node {dev / 'davinci3'}")]
    table = (await run([Npu910Profile()], ctx, "table")).splitlines()
    assert "npu-910: 2 chips not published" in table
    assert (f"npu-910:   not published: physical ID 3 (NPU 1 chip 1, Ascend910): no device node "
            f"{dev / 'davinci3'}") in table
    yaml_text = await run([Npu910Profile()], ctx, "yaml")
    assert "# npu-910: 2 chips not published\n" in yaml_text


# -- a chip of unknown family is logged and counted -----------------------------------------------


async def test_a_chip_of_unknown_family_is_logged_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The anonymised 310P-class sample: name ``xxx``, Bus-Id ``NA``, so no name, PCI or sysfs family."""
    exe = fake_npu_smi(tmp_path, {"info": "310P-class_info_xxx_BusId-NA.txt"})
    ctx = context(tmp_path, exe, dev_tree(tmp_path, ["davinci0", *SHARED]), sys_tree(tmp_path, {}))
    profile = Npu310PProfile()
    with caplog.at_level(logging.WARNING):
        inventory = await profile.discover(ctx)
    assert inventory.devices == ()
    (record,) = dropped_records(caplog)
    assert (record.physical_id, record.npu_id, record.chip_name, record.profile) == (  # type: ignore[attr-defined]
        0, 0, "xxx", "npu-310P")
    assert record.reason.startswith("chip family unknown")  # type: ignore[attr-defined]
    assert profile.discovery_notes()[-2:] == (
        "1 chip not published",
        "  not published: physical ID 0, logic ID 0 (NPU 0 chip 0, xxx): chip family unknown "
        "(chip name, PCI device ID and sysfs name none)")
