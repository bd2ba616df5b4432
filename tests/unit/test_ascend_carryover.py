"""A rediscovery whose npu-smi calls fail keeps the hardware facts of the last answer (carryover.py).

Each case runs the real discovery chain twice on one profile (as the daemon's periodic rediscovery
does): first with every call answering from the real fixtures, then with some calls failing. A
fresh profile given the same failing npu-smi shows what would have been published without the
memory of the first answer.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from ascend_dra.profiles.ascend.chip import NpuChip
from ascend_dra.profiles.ascend.chips import ChipFamily
from ascend_dra.profiles.ascend.discovery.carryover import carry, same_chip
from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from ascend_dra.profiles.base import ProfileContext
from tests.unit.test_ascend_discovery import ANSWERS_910A, tree_910a
from tests.unit.test_ascend_profiles import context
from tests.unit.test_ascend_support import fake_npu_smi, fixture

pytestmark = pytest.mark.anyio

UUID_NPU0 = "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"  # 910A_info_-t_board_-i_-c_VDieID.txt


def npu_smi(tmp_path: Path, name: str, answers: dict) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    return fake_npu_smi(directory, answers)


def full_answers(tmp_path: Path) -> dict:
    """ANSWERS_910A with NPU 0's ``-t common`` reporting 30 AI cores (a 910A variant) instead of 32."""
    common = tmp_path / "common-30.txt"
    common.write_text(fixture("910A_info_-t_common_-i_0_with_mcu.txt").replace(": 32", ": 30"))
    return {**ANSWERS_910A, "info -t common -i 0": str(common)}


def full_and_failing(tmp_path: Path, *failed: str) -> tuple[Npu910Profile, ProfileContext, ProfileContext]:
    """A fresh profile on the 910A tree; a context whose npu-smi answers every call of
    :func:`full_answers`, and one whose npu-smi fails the calls ``failed`` (e.g. ``"info -m"``)."""
    dev, sys_root = tree_910a(tmp_path)
    answers = full_answers(tmp_path)
    failing = {k: v for k, v in answers.items() if k not in failed}
    ctx = context(tmp_path, npu_smi(tmp_path, "full", answers), dev, sys_root)
    return Npu910Profile(), ctx, attrs.evolve(ctx, npu_smi=str(npu_smi(tmp_path, "broken", failing)))


def by_physical(inventory) -> dict:
    return {d.attributes["physicalID"]: d for d in inventory.devices}


async def test_failed_board_common_and_topo_calls_keep_uuid_aicore_and_topology(tmp_path: Path) -> None:
    profile, ctx, broken = full_and_failing(tmp_path, "info -t board -i 0 -c 0", "info -t common -i 0",
                                            "info -t topo")
    before = await profile.discover(ctx)
    after = await profile.discover(broken)
    cold = await Npu910Profile().discover(broken)

    npu0 = next(d for d in before.devices if d.attributes.get("npuID") == 0)
    assert npu0.attributes["uuid"] == UUID_NPU0 and npu0.capacities["aicore"].value == "30"
    assert any("hccs" in d.attributes for d in before.devices)
    # Without the first answer: no uuid, no AI core count (this chip name is not in the catalogue), no topology.
    cold0 = by_physical(cold)[npu0.attributes["physicalID"]]
    assert "uuid" not in cold0.attributes and "aicore" not in cold0.capacities
    assert not any("hccs" in d.attributes for d in cold.devices)
    # With it: every device is published exactly as before.
    assert after.source == "npu-smi"
    assert [(d.name, dict(d.attributes), dict(d.capacities)) for d in after.devices] == [
        (d.name, dict(d.attributes), dict(d.capacities)) for d in before.devices]
    note = next(n for n in profile.discovery_notes() if "kept from the last npu-smi answer" in n)
    assert note.startswith("npu-smi calls failed; kept from the last npu-smi answer: ")
    assert "uuid (1 chip)" in note and "aicore (1 chip)" in note and "hccs (8 chips)" in note


async def test_a_second_failing_rediscovery_still_keeps_them(tmp_path: Path) -> None:
    profile, ctx, broken = full_and_failing(tmp_path, "info -t board -i 0 -c 0")
    await profile.discover(ctx)
    await profile.discover(broken)
    again = await profile.discover(broken)
    assert [d.attributes.get("uuid") for d in again.devices if d.attributes.get("npuID") == 0] == [UUID_NPU0]


async def test_the_devfs_tier_keeps_memory_uuid_and_model_of_the_same_chips(tmp_path: Path) -> None:
    """npu-smi stops answering at all: before, the devfs tier republished every chip without its
    HBM capacity (a consumable capacity gone from the slice) and without its uuid."""
    dev, sys_root = tree_910a(tmp_path)
    ctx = context(tmp_path, npu_smi(tmp_path, "full", full_answers(tmp_path)), dev, sys_root)
    gone = attrs.evolve(ctx, npu_smi=str(tmp_path / "gone"))
    profile = Npu910Profile()
    before = by_physical(await profile.discover(ctx))
    after_inventory = await profile.discover(gone)
    after = by_physical(after_inventory)
    cold = by_physical(await Npu910Profile().discover(gone))
    assert after_inventory.source == "devfs"
    assert all("memory" not in d.capacities for d in cold.values())
    assert {p: (d.name, d.capacities.get("memory"), d.attributes.get("uuid"), d.attributes.get("model"))
            for p, d in after.items()} == {
        p: (d.name, d.capacities.get("memory"), d.attributes.get("uuid"), d.attributes.get("model"))
        for p, d in before.items()}
    assert all(d.capacities["memory"].value for d in after.values())
    # The driver version is the installed software's, which an upgrade changes: not kept.
    assert any("driverVersion" in d.attributes for d in before.values())
    assert all("driverVersion" not in d.attributes for d in after.values())
    assert any("devfs tier; kept from the last npu-smi answer: " in n for n in profile.discovery_notes())


def chip(**fields: object) -> NpuChip:
    base = {"logic_id": 0, "physical_id": 3, "npu_id": 0, "chip_id": 0, "pci_address": "0000:61:00.0",
            "family": ChipFamily.ASCEND910}
    return NpuChip(**{**base, **fields})  # type: ignore[arg-type]


def test_only_the_same_chip_in_the_same_slot_gives_its_facts() -> None:
    old = chip(uuid="A-B-C-D-E", memory_mib=32768, aicore_count=30, health="OK", driver_version="23.0.3")
    assert same_chip(chip(), old)
    assert same_chip(chip(npu_id=None, chip_id=None), old)  # the devfs tier knows neither
    for other in (chip(pci_address="0000:62:00.0"), chip(physical_id=4), chip(npu_id=1), chip(chip_id=1),
                  chip(family=ChipFamily.ASCEND910B)):
        assert not same_chip(other, old)
        assert carry(other, {other.physical_id: old}, ["uuid"]) == (other, ())
    taken, names = carry(chip(), {3: old}, ["uuid", "memory_mib", "aicore_count"])
    assert names == ("uuid", "memory_mib", "aicore_count")
    assert (taken.uuid, taken.memory_mib, taken.aicore_count) == ("A-B-C-D-E", 32768, 30)
    assert (taken.health, taken.driver_version) == (None, None)
    # Only the fields named are taken: what this discovery read (or chose to omit) stays.
    kept, names = carry(chip(uuid=None, aicore_count=32), {3: old}, ["uuid"])
    assert (kept.uuid, kept.aicore_count, names) == ("A-B-C-D-E", 32, ("uuid",))
    assert carry(chip(), {}, ["uuid"]) == (chip(), ())
    assert carry(chip(), None, ["uuid"]) == (chip(), ())


async def test_a_failing_info_m_keeps_the_logic_ids_so_no_device_is_renamed(tmp_path: Path) -> None:
    """910A 9010: logic IDs are not in physical order, so the rank rule alone would rename devices
    under allocated claims when ``-m`` (and ``phyid-remap``) fail during a rediscovery."""
    profile, ctx, broken = full_and_failing(tmp_path, "info -m")
    before = {d.name: d.attributes["physicalID"] for d in (await profile.discover(ctx)).devices}
    after = {d.name: d.attributes["physicalID"] for d in (await profile.discover(broken)).devices}
    cold = {d.name: d.attributes["physicalID"] for d in (await Npu910Profile().discover(broken)).devices}
    assert after == before
    assert cold != before  # what the rank rule gives on this host
    assert any(n.startswith("npu-smi info -m failed: logic IDs kept from the last npu-smi answer")
               for n in profile.discovery_notes())
