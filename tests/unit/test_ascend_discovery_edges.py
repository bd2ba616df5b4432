"""Discovery edge cases of issue 8 item 6 (and the discovery half of item 1), each through a real npu-smi
stand-in fed real (or documented-format constructed) outputs and a fake /dev and sysfs tree."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import attrs
import pytest

from ascend_dra.cli.discover import run
from ascend_dra.model import Capacity, Inventory
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from tests.unit.test_ascend_discovery import ANSWERS_910A, SHARED, run_chain, tree_910a
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
    assert dict(first.capacities) == {"aicore": Capacity("20"), "cores": Capacity("100")}
    assert dict(second.capacities) == {"memory": Capacity("65536Mi"), "aicore": Capacity("20"),
                                       "cores": Capacity("100")}


# -- device names do not depend on the tier -------------------------------------------------------


async def test_310_four_chip_card_keeps_its_device_names_when_npu_smi_goes_away(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, {"info": "310_info_atlas800-3000_4chips-per-card_npu-smi-21.0.4.txt",
                                  "info -m": "310_info_-m_atlas800-3000_MiniD_Mcu.txt"})
    dev = dev_tree(tmp_path, ["davinci3", "davinci4", "davinci5", "davinci6", *SHARED])
    # One Atlas 300 card (PCI device 0xd100, docs/ascend-hardware.md#chip-families): the devfs tier learns the family.
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


async def test_logic_ids_that_disagree_without_a_phyid_remap_answer_are_said_in_discover(tmp_path: Path) -> None:
    """npu-smi info prints Device 3..6, -m logic IDs 0..3, and this npu-smi has no phyid-remap: the
    -m IDs name the devices, which was said at INFO only (an audit of public npu-smi layouts)."""
    exe = fake_npu_smi(tmp_path, {"info": "310_info_atlas800-3000_4chips-per-card_npu-smi-21.0.4.txt",
                                  "info -m": "310_info_-m_atlas800-3000_MiniD_Mcu.txt"})
    dev = dev_tree(tmp_path, ["davinci3", "davinci4", "davinci5", "davinci6", *SHARED])
    functions = {f"0000:0{i}:00.0": ("0x19e5", "0xd100", 0) for i in range(4)}
    profile = Npu310PProfile()
    await profile.discover(context(tmp_path, exe, dev, sys_tree(tmp_path, functions)))
    notes = profile.discovery_notes()
    assert any("logic ID 0 from npu-smi info -m, not Device 3 of npu-smi info (phyid-remap did not answer)" in n
               for n in notes), notes


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


# -- a chip whose health npu-smi cannot print --------------------------------------------------------

BUSES_910B3 = ["0000:c1:00.0", "0000:c2:00.0", "0000:81:00.0", "0000:82:00.0", "0000:01:00.0", "0000:02:00.0",
               "0000:41:00.0", "0000:42:00.0"]


@pytest.mark.parametrize(("cut", "reason", "ids"), [
    (12, "npu-smi info printed only its second row (line 13: chip 0, Bus-Id 0000:81:00.0): "
         "npu-smi could not print its health, and its NPU ID and name are missing", (2, None, 0)),
    (13, "npu-smi info printed only its first row (line 13: NPU 2, name 910B3, health OK): npu-smi could not "
         "read its logic ID, and its chip ID and bus ID are missing", (None, 2, None)),
], ids=["first row left out", "second row left out"])
async def test_a_chip_printed_with_one_row_only_is_not_published_and_the_others_are(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, cut: int, reason: str, ids: tuple) -> None:
    """npu-smi prints only the second row of a chip whose health it cannot turn into text
    (``print_card_total_info_with_HBM_first``, npu_info_print.c), only the first of one whose logic ID
    DCMI cannot give (``print_card_total_info_second``); the table is ``910B3_info.txt`` without one of
    NPU 2's rows, constructed from those functions, not a capture. That failed the npu-smi tier, and
    the devfs tier then published all eight chips, this one as healthy. Now the other seven are read,
    and this one is left out with a warning naming what its row says."""
    lines = fixture("910B3_info.txt").splitlines(keepends=True)
    assert lines[12].startswith("| 2     910B3")
    exe = fake_npu_smi(tmp_path, {"info": written(tmp_path, "info.txt", "".join(lines[:cut] + lines[cut + 1:]))})
    dev = dev_tree(tmp_path, [f"davinci{i}" for i in range(8)] + SHARED)
    sys_root = sys_tree(tmp_path, {bus: ("0x19e5", "0xd802", 0) for bus in BUSES_910B3}, dict(enumerate(BUSES_910B3)))
    profile = Npu910Profile()
    with caplog.at_level(logging.WARNING):
        inventory = await profile.discover(context(tmp_path, exe, dev, sys_root))
    assert inventory.source == "npu-smi"
    # Logic IDs by the devfs rule (rank among all eight davinci nodes), so the names stay those of the devfs tier.
    assert [(d.name, d.attributes["physicalID"], d.attributes["npuID"]) for d in inventory.devices] == [
        ("npu-0-0", 0, 0), ("npu-1-0", 1, 1), ("npu-3-0", 3, 3), ("npu-4-0", 4, 4), ("npu-5-0", 5, 5),
        ("npu-6-0", 6, 6), ("npu-7-0", 7, 7)]
    assert [(r.physical_id, r.npu_id, r.chip_id, r.reason) for r in dropped_records(caplog)] == [  # type: ignore[attr-defined]
        (*ids, reason)]
    assert any(line.startswith("  not published: ") and line.endswith(reason) for line in profile.discovery_notes())


# -- the 950's phyid-remap names the logic ID NPU ID ----------------------------------------------


async def test_950_logic_ids_come_from_its_phyid_remap_npu_id(tmp_path: Path) -> None:
    """The 950 prints no logic ID in ``npu-smi info`` or ``-m``, so ``phyid-remap`` is asked; its answer
    (``NPU ID`` = the DCMI device ID, no ``Chip Logic ID``) was refused, and the logic IDs came from the
    devfs rule, which here differs. ``-p 0`` is the 950 manual's example; ``-p 1``/``-p 2`` are constructed
    from the format strings of ``show_ascend_chip_phyid_remap_info`` (npu_chip_info.c), not captures."""
    def remap(physical: int, npu: int) -> str:
        return written(tmp_path, f"remap{physical}.txt", "".join(
            f"\t{key:<30}:{value}\n" for key, value in (("Chip Phy-ID", physical), ("NPU ID", npu), ("Slot ID", npu),
                                                         ("Chip ID", 0))))

    exe = fake_npu_smi(tmp_path, {"info": "950PR_info_Alarm_processes_drv25.7.rc1.txt",
                                  "info -t phyid-remap -p 0": "950_info_-t_phyid-remap_-p_0.txt",
                                  "info -t phyid-remap -p 1": remap(1, 2), "info -t phyid-remap -p 2": remap(2, 1)})
    dev = dev_tree(tmp_path, ["davinci0", "davinci1", "davinci2", *SHARED])
    davinci = {0: "0000:71:00.0", 1: "0000:81:00.0", 2: "0000:61:00.0"}  # NPU 0, 2, 1 of the table
    sys_root = sys_tree(tmp_path, {bus: ("0x19e5", "0xd806", 0) for bus in davinci.values()}, davinci)
    found = await run_chain(tmp_path, exe, dev, sys_root)
    assert found.source == "npu-smi"
    assert [(c.logic_id, c.physical_id, c.npu_id, c.chip_id) for c in found.chips] == [
        (0, 0, 0, 0), (1, 2, 1, 0), (2, 1, 2, 0)]
    assert "phyid-remap used (no logic ID for NPU 0 chip 0): answered for 3 of 3 davinci nodes" in found.notes


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
    # Before: "... and no known PCI device ID (npu-smi -t board, sysfs)", though sysfs was never read.
    reason = ("chip family unknown: chip name 'xxx' matches no family; npu-smi info -t board -i 0 gave no answer; "
              "npu-smi info -t board -i 0 -c 0 gave no answer; npu-smi info -m gave no answer; "
              "sysfs not read: npu-smi gave no PCI address (Bus-Id NA)")
    assert record.reason == reason  # type: ignore[attr-defined]
    assert profile.discovery_notes()[-2:] == (
        "1 chip not published", f"  not published: physical ID 0, logic ID 0 (NPU 0 chip 0, xxx): {reason}")


def anonymised_910a(tmp_path: Path) -> Path:
    """The 910A Atlas 800 9010 ``npu-smi info`` with its chip names anonymised (``xxx``, as the public
    310P-class sample prints them), and no other npu-smi call answering."""
    info = re.sub(r"^(\| \d+ +)910A", r"\g<1>xxx ", fixture("910A_info_atlas800-9010_npu-smi-22.0.3.1.txt"),
                  flags=re.MULTILINE)
    assert "910A" not in info
    return fake_npu_smi(tmp_path, {"info": written(tmp_path, "info.txt", info)})


async def test_a_910a_host_whose_chips_npu_smi_does_not_name_is_told_by_sysfs(tmp_path: Path) -> None:
    """Issue 40: such a host published no chip, and the reason said sysfs was read when it was not.
    sysfs holds PCI device ID 0xd801 (910) for each Bus-Id, as on a real 910A host."""
    dev, sys_root = tree_910a(tmp_path)
    profile = Npu910Profile()
    inventory = await profile.discover(context(tmp_path, anonymised_910a(tmp_path), dev, sys_root))
    assert inventory.source == "npu-smi"
    assert [(d.name, d.attributes["npuID"], d.capacities["memory"].value) for d in inventory.devices] == [
        (f"npu-{i}-0", n, "32768Mi") for i, n in enumerate([7, 3, 4, 0, 6, 2, 5, 1])]  # by physical ID
    assert not any("not published" in n for n in profile.discovery_notes())


@pytest.mark.parametrize(("functions", "said"), [
    ({}, "sysfs {sys}/bus/pci/devices/0000:61:00.0/device cannot be read"),
    ({"0000:61:00.0": ("0x19e5", "0xd999", 0)}, "sysfs {sys}/bus/pci/devices/0000:61:00.0/device says 0xd999, "
                                                 "no Ascend chip's"),
], ids=["sysfs-without-the-function", "sysfs-unknown-device-id"])
async def test_the_reason_a_chip_has_no_family_names_what_was_read(tmp_path: Path, functions: dict,
                                                                    said: str) -> None:
    dev = dev_tree(tmp_path, [f"davinci{i}" for i in range(8)] + SHARED)
    sys_root = sys_tree(tmp_path, functions)
    profile = Npu910Profile()
    inventory = await profile.discover(context(tmp_path, anonymised_910a(tmp_path), dev, sys_root))
    assert inventory.devices == ()
    first = next(n for n in profile.discovery_notes() if n.startswith("  not published") and "NPU 0 chip 0" in n)
    assert first == (
        "  not published: physical ID 0, logic ID 0 (NPU 0 chip 0, xxx): chip family unknown: chip name 'xxx' "
        "matches no family; npu-smi info -t board -i 0 gave no answer; npu-smi info -t board -i 0 -c 0 gave no "
        f"answer; npu-smi info -m gave no answer; {said.format(sys=sys_root)}")


async def test_the_devfs_tier_says_which_sysfs_entries_told_no_family(tmp_path: Path) -> None:
    dev = dev_tree(tmp_path, ["davinci0", "davinci1", *SHARED])
    sys_root = sys_tree(tmp_path, {"0000:61:00.0": ("0x19e5", "0xd999", 0)}, {0: "0000:61:00.0"})
    profile = Npu910Profile()
    inventory = await profile.discover(context(tmp_path, str(tmp_path / "no-npu-smi"), dev, sys_root))
    assert (inventory.source, inventory.devices) == ("devfs", ())
    notes = [n for n in profile.discovery_notes() if "not published" in n]
    assert notes[1:] == [
        f"  not published: physical ID 0, logic ID 0: chip family unknown: sysfs {sys_root}/bus/pci/devices/"
        f"0000:61:00.0/device says 0xd999, no Ascend chip's; {sys_root}/bus/pci/devices holds no Ascend PCI function",
        f"  not published: physical ID 1, logic ID 1: chip family unknown: sysfs has no PCI address for davinci1 "
        f"(no {sys_root}/class/*/davinci1/device link); {sys_root}/bus/pci/devices holds no Ascend PCI function"]


# -- a failing npu-smi info -m degrades per field -------------------------------------------------


async def test_910_host_with_a_failing_info_m_keeps_what_info_gave(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Before: the whole npu-smi tier failed with a 'parse' error and devfs lost memory, AI cores and uuid."""
    exe = fake_npu_smi(tmp_path, {"info": "910B3_info.txt",
                                  "info -m": (1, "dcmi module initialize failed. ret is -8005"),
                                  "info -t board -i 0 -c 0": "910A_info_-t_board_-i_-c_VDieID.txt"})
    dev = dev_tree(tmp_path, [f"davinci{i}" for i in range(8)] + SHARED)
    profile = Npu910Profile()
    with caplog.at_level(logging.INFO):
        inventory = await profile.discover(context(tmp_path, exe, dev, sys_tree(tmp_path, {})))
    assert inventory.source == "npu-smi"
    assert [(d.name, d.attributes["physicalID"], d.attributes["npuID"], d.capacities["memory"].value,
             d.capacities["aicore"].value) for d in inventory.devices] == [
        (f"npu-{i}-0", i, i, "65536Mi", "20") for i in range(8)]
    assert inventory.devices[0].attributes["uuid"] == "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"
    lost = [r for r in caplog.records if r.getMessage() == "npu-smi enrichment failed; its attributes are omitted"]
    assert [r.what for r in lost if r.what == "npu-smi info -m"] == ["npu-smi info -m"]  # type: ignore[attr-defined]
    assert any(r.getMessage() == "npu-smi info -m failed; logic IDs come from phyid-remap or the physical order"
               for r in caplog.records)
    assert any(r.getMessage() == "logic IDs not reported by npu-smi; inferred from physical order"
               for r in caplog.records)
    assert any(n.startswith("logic IDs not reported by npu-smi; inferred from physical order (the devfs rule): "
                            "NPU 0 chip 0 -> 0, NPU 1 chip 0 -> 1") for n in profile.discovery_notes())


# -- phyid-remap where the other sources disagree or are missing ----------------------------------


async def test_phyid_remap_settles_910c_dies_that_print_the_same_phy_id(tmp_path: Path) -> None:
    """The in-container 910C sample prints Phy-ID 0 for both dies; phyid-remap maps davinci1 to die 1.
    (Its chip name is anonymised ``xxx``; it is put back to ``Ascend910``, the A3 name of
    docs/ascend-hardware.md#chip-families.)"""
    info = fixture("910C_A3_info_in_container_vcann-rt_anonymised.txt").replace("| 0     xxx          |",
                                                                                  "| 0     Ascend910    |")
    exe = fake_npu_smi(tmp_path, {"info": written(tmp_path, "info.txt", info),
                                  "info -t phyid-remap -p 0": "910C_A3_info_-t_phyid-remap_-p_0_constructed.txt",
                                  "info -t phyid-remap -p 1": "910C_A3_info_-t_phyid-remap_-p_1_constructed.txt"})
    dev = dev_tree(tmp_path, ["davinci0", "davinci1", *SHARED])
    profile = Npu910Profile()
    inventory = await profile.discover(context(tmp_path, exe, dev, sys_tree(tmp_path, {})))
    assert inventory.source == "npu-smi"
    assert [(d.name, d.attributes["index"], d.attributes["physicalID"], d.attributes["npuID"], d.attributes["chipID"])
            for d in inventory.devices] == [("npu-0-0", 0, 0, 0, 0), ("npu-1-0", 1, 1, 0, 1)]
    assert "NPU 0 chip 1: physical ID 1 from phyid-remap, not 0" in profile.discovery_notes()


async def discover_duo(tmp_path: Path, info: str, remap: bool) -> tuple[Inventory, Npu310PProfile]:
    """One Atlas 300I Duo card (NPU 2, chips 0 and 1) printing ``info``; davinci0 is the PCI function
    npu-smi prints for both chips, davinci1 the card's other one; with ``remap``, phyid-remap answers."""
    answers = {"info": info}
    if remap:
        for k in (0, 1):
            answers[f"info -t phyid-remap -p {k}"] = written(
                tmp_path, f"remap{k}.txt", f"\tChip Physical ID:{k}\n\tChip Logic ID:{k}\n\tNPU ID:2\n\tChip ID:{k}\n")
    exe = fake_npu_smi(tmp_path, answers)
    dev = dev_tree(tmp_path, ["davinci0", "davinci1", *SHARED])
    sys_root = sys_tree(tmp_path, {"0000:01:00.0": ("0x19e5", "0xd500", 0), "0000:02:00.0": ("0x19e5", "0xd500", 0)},
                        {0: "0000:01:00.0", 1: "0000:02:00.0"})
    profile = Npu310PProfile()
    return await profile.discover(context(tmp_path, exe, dev, sys_root)), profile


@pytest.mark.parametrize("remap", [True, False], ids=["phyid-remap-answers", "by-rank"])
async def test_300i_duo_chips_printing_one_bus_id_are_both_published(tmp_path: Path, remap: bool) -> None:
    """An Atlas 300I Duo prints one Bus-Id for both chips of a card (a real output, SOURCES.md S23).
    Read through sysfs, that address gave both chips one physical ID and the whole npu-smi tier failed
    ("share physical ID"), falling back to devfs; an address two chips print now identifies neither."""
    inventory, profile = await discover_duo(tmp_path, "310P3-duo_info_shared-BusId_npu-smi-25.2.0.txt", remap)
    assert inventory.source == "npu-smi"
    assert [(d.name, d.attributes["physicalID"], d.attributes["npuID"], d.attributes["chipID"])
            for d in inventory.devices] == [("npu-0-0", 0, 2, 0), ("npu-1-0", 1, 2, 1)]
    assert [d.capacities["memory"].value for d in inventory.devices] == ["44280Mi", "43693Mi"]
    if not remap:
        assert any(n.startswith("physical IDs by rank") for n in profile.discovery_notes())


@pytest.mark.parametrize("remap", [True, False], ids=["phyid-remap answers", "no phyid-remap"])
async def test_the_sibling_of_a_one_row_duo_chip_never_takes_its_device_node(tmp_path: Path, remap: bool) -> None:
    """Both chips of a 300I Duo print the card's one Bus-Id, which sysfs gives to davinci0 (chip 0).
    With chip 0 printed without its first row and set apart, the address looked chip 1's alone, and
    chip 1 was published with /dev/davinci0: the chip whose health npu-smi could not print. (The
    table is the Duo fixture without line 7, constructed from npu_info_print.c, not a capture.)"""
    lines = fixture("310P3-duo_info_shared-BusId_npu-smi-25.2.0.txt").splitlines(keepends=True)
    assert lines[6].startswith("| 2       310P3")
    inventory, _ = await discover_duo(tmp_path, written(tmp_path, "info.txt", "".join(lines[:6] + lines[7:])), remap)
    published = [(d.name, d.attributes["physicalID"]) for d in inventory.devices]
    if remap:
        assert inventory.source == "npu-smi" and published == [("npu-1-0", 1)]
    else:  # no way to tell which node is chip 1's: the npu-smi tier gives up (the device-node tier answers)
        assert inventory.source != "npu-smi" and ("npu-1-0", 0) not in published


# -- npu-smi info -t topo: NPU IDs, Phy-ID labels, NIC columns ------------------------------------


def topo_npu_labels(affinities: list[str], link: str = "HCCS") -> str:
    """An older-npu-smi ``-t topo`` (``NPU<k>`` labels) for len(affinities) NPUs, as in 910B3_info_-t_topo.txt."""
    n = len(affinities)
    header = "\t   " + "".join(f"NPU{k}".ljust(11) for k in range(n)) + "CPU Affinity"
    rows = ["".join([f"NPU{a}".ljust(11), *(("X" if a == b else link).ljust(11) for b in range(n)), affinities[a]])
            for a in range(n)]
    return "\n".join([header, *rows, "", "Legend:", "", "  X    = Self", ""])


async def test_topo_npu_labels_are_npu_ids_so_both_dies_of_a_card_share_its_row(tmp_path: Path) -> None:
    """Before: NPU<k> was taken as logic ID k, so die 1 of NPU 0 got NPU 1's row and NPU 1's dies got none."""
    topo = written(tmp_path, "topo.txt", topo_npu_labels(["0-39", "40-79"]))
    exe = fake_npu_smi(tmp_path, {"info": A3_INFO, "info -t topo": topo})
    dev = dev_tree(tmp_path, [f"davinci{i}" for i in range(4)] + SHARED)
    inventory = await Npu910Profile().discover(context(tmp_path, exe, dev, sys_tree(tmp_path, {})))
    assert [(d.name, d.attributes["npuID"], d.attributes["cpuAffinity"], d.attributes["topologyGroup"])
            for d in inventory.devices] == [
        ("npu-0-0", 0, "0-39", "hccs-0"), ("npu-1-0", 0, "0-39", "hccs-0"),
        ("npu-2-0", 1, "40-79", "hccs-0"), ("npu-3-0", 1, "40-79", "hccs-0")]


async def test_a3_topo_with_phy_id_labels_and_nic_columns(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, {"info": A3_INFO, "info -t topo": "910C_A3_info_-t_topo_Phy-ID_NIC_constructed.txt"})
    dev = dev_tree(tmp_path, [f"davinci{i}" for i in range(4)] + SHARED)
    inventory = await Npu910Profile().discover(context(tmp_path, exe, dev, sys_tree(tmp_path, {})))
    assert [(d.attributes["physicalID"], d.attributes["hccs"], d.attributes["topologyGroup"],
             d.attributes["cpuAffinity"]) for d in inventory.devices] == [
        (0, True, "hccs-0", "0-39"), (1, True, "hccs-0", "0-39"), (2, True, "hccs-0", "40-79"),
        (3, True, "hccs-0", "40-79")]


async def test_910b_topo_with_nic_columns_keeps_topology(tmp_path: Path) -> None:
    """Before: the NIC0..NIC3 columns of current npu-smi were a parse error and topology was dropped."""
    exe = fake_npu_smi(tmp_path, {"info": "910B3_info.txt", "info -m": "910A_info_-m_atlas800-9010.txt",
                                  "info -t topo": "910B3_info_-t_topo_NIC_constructed.txt"})
    dev = dev_tree(tmp_path, [f"davinci{i}" for i in range(8)] + SHARED)
    inventory = await Npu910Profile().discover(context(tmp_path, exe, dev, sys_tree(tmp_path, {})))
    assert [d.attributes["cpuAffinity"] for d in inventory.devices] == [
        "144-167", "144-167", "96-119", "96-119", "0-23", "0-23", "48-71", "48-71"]
    assert {d.attributes["topologyGroup"] for d in inventory.devices} == {"hccs-0"}


async def test_topo_labels_that_match_no_chip_are_reported_not_silently_dropped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    topo = written(tmp_path, "topo.txt", topo_npu_labels([f"{k}-{k}" for k in range(10)]))
    exe = fake_npu_smi(tmp_path, {"info": "910B3_info.txt", "info -m": "910A_info_-m_atlas800-9010.txt",
                                  "info -t topo": topo})
    dev = dev_tree(tmp_path, [f"davinci{i}" for i in range(8)] + SHARED)
    profile = Npu910Profile()
    with caplog.at_level(logging.WARNING):
        inventory = await profile.discover(context(tmp_path, exe, dev, sys_tree(tmp_path, {})))
    # The chips that match keep their rows (before: the whole topology was dropped).
    assert [d.attributes["cpuAffinity"] for d in inventory.devices] == [f"{k}-{k}" for k in range(8)]
    assert ("npu-smi info -t topo: labels [8, 9] name no chip of this node; 0 chips have no row "
            "(labels are NPU IDs)") in profile.discovery_notes()
    assert any(r.getMessage().startswith("npu-smi info -t topo does not match the chips") for r in caplog.records)
