"""The hard-vNPU profile with the DCMI tier loaded: vNPUs are made, listed and destroyed through DCMI,
npu-smi answers what DCMI does not (an error code, a hang), with one log line, and a create or
destroy DCMI reports as failed is read back before npu-smi is asked (docs/hard-vnpu.md#through-dcmi).

The host is the Lab 18 shape of tests/hardvnpu.py with the test libdcmi.so under its host root; npu-smi
is the simulator behind a script that logs every command line (and can be told to fail one)."""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import pytest

from ascend_dra.model import AllocatedDevice, ClaimAllocation
from ascend_dra.profiles.ascend.hardvnpu.ops import VnpuError
from ascend_dra.profiles.ascend.hardvnpu.profile import HardVnpuProfile
from ascend_dra.profiles.ascend.sim import npusmi_sim
from ascend_dra.profiles.base import ApplyContext
from tests.dcmisim import set_fault
from tests.hardvnpu import SIM, SimHost
from tests.unit.test_ascend_support import script

pytestmark = pytest.mark.anyio

DEVICE = "vnpu-0-0-vir10-3c-16g-0"  # NPU 4 chip 0, vNPU ID 100
FALLBACK = "DCMI vNPU call failed; npu-smi answers"


@attrs.define
class Bed:
    host: SimHost
    log: Path
    profile: HardVnpuProfile
    inventory: object = None

    def ctx(self):
        return attrs.evolve(self.host.ctx(), npu_smi=str(self.log.with_name("npu-smi")))

    def npu_smi_calls(self, verb: str) -> list[str]:
        """The npu-smi command lines run so far that contain ``verb`` (``create-vnpu``, ...)."""
        return [line for line in self.log.read_text().splitlines() if verb in line] if self.log.exists() else []

    def apply(self, uid: str = "uid-1", device: str = DEVICE) -> tuple[ClaimAllocation, ApplyContext]:
        c = ClaimAllocation(uid, "default", f"claim-{uid}",
                            (AllocatedDevice("r0", "ascend.project-hami.io", "node-1", device),))
        return c, ApplyContext(self.ctx(), self.inventory, c.uid, c.namespace, c.name)


@pytest.fixture
async def bed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    host = SimHost(tmp_path, dcmi=True)
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    log = tmp_path / "npu-smi.log"
    # "$FAIL_INFO_VNPU" present: info-vnpu fails (a read-back that cannot be made).
    script(tmp_path, f'#!/bin/sh\necho "$*" >> {log}\n'
                     f'case "$*" in *info-vnpu*) [ -e {tmp_path}/fail-info-vnpu ] && exit 1;; esac\n'
                     f'exec {SIM} "$@"\n')
    profile = HardVnpuProfile(timeout_s=2.0)
    made = Bed(host, log, profile)
    made.inventory = await profile.discover(made.ctx())
    assert made.inventory.source == "dcmi"
    yield made
    profile.close()


def vnpus(bed: Bed) -> list[tuple[int, int, str]]:
    return [(v["npu_id"], v["vnpu_id"], v["template"]) for v in bed.host.vnpus()]


async def test_prepare_and_unprepare_go_through_dcmi_alone(bed: Bed, caplog: pytest.LogCaptureFixture) -> None:
    c, ctx = bed.apply()
    with caplog.at_level(logging.INFO):
        effects = await bed.profile.prepare_side_effects(c, c.results, ctx)
        assert vnpus(bed) == [(4, 100, "vir10_3c_16g")] and (bed.host.vdev / "vdavinci100").exists()
        assert len(bed.host.ledger()) == 1
        await bed.profile.unprepare_side_effects(effects, ctx)
    assert vnpus(bed) == [] and bed.host.ledger() == []
    assert bed.npu_smi_calls("vnpu") == []  # no create-vnpu, destroy-vnpu nor info-vnpu
    assert [r.tier for r in caplog.records if r.message in ("created a vNPU", "destroyed a vNPU")] == [  # type: ignore[attr-defined]
        "dcmi", "dcmi"]
    assert "vNPU calls: list by dcmi, create by dcmi, destroy by dcmi" in bed.profile.discovery_notes()
    assert FALLBACK not in caplog.messages


@pytest.mark.parametrize(("fault", "npu_smi_creates", "note"), [
    ("dcmi_create_vdevice -8005", True, "dcmi_create_vdevice(4, 0, 100, vir10_3c_16g): -8005 (internal error)"),
    ("dcmi_create_vdevice hang", True,
     "dcmi_create_vdevice(4, 0, 100, vir10_3c_16g): no answer within 2 s; the DCMI worker was killed"),
    ("dcmi_create_vdevice -8005-after", False, None),
    ("dcmi_create_vdevice hang-after", False, None),
], ids=["an error code: npu-smi creates", "a hang: npu-smi creates",
        "an error code after the vNPU was made: read back, not made again",
        "a hang after the vNPU was made: read back, not made again"])
async def test_a_create_dcmi_fails_is_read_back_then_made_by_npu_smi_only_if_absent(
        bed: Bed, caplog: pytest.LogCaptureFixture, fault: str, npu_smi_creates: bool, note: str | None) -> None:
    set_fault(bed.host.sim_dir, fault)
    c, ctx = bed.apply()
    with caplog.at_level(logging.INFO):
        effects = await bed.profile.prepare_side_effects(c, c.results, ctx)
    assert [e["vnpu_id"] for e in effects["vnpus"]] == [100]
    assert vnpus(bed) == [(4, 100, "vir10_3c_16g")] and len(bed.host.ledger()) == 1
    assert len(bed.npu_smi_calls("create-vnpu")) == (1 if npu_smi_creates else 0)
    fallbacks = [r for r in caplog.records if r.message == FALLBACK]
    assert len(fallbacks) == (1 if npu_smi_creates else 0)
    notes = bed.profile.discovery_notes()
    if npu_smi_creates:
        assert fallbacks[0].error == note  # type: ignore[attr-defined]
        assert "create by npu-smi" in notes[-2] and notes[-1].startswith("vNPU calls: npu-smi answered ")
    else:
        assert any("create by dcmi" in line for line in notes)
    set_fault(bed.host.sim_dir)
    if bed.profile.dcmi.client is not None:
        bed.profile.dcmi.client.retry_after_s = 0
    await bed.profile.unprepare_side_effects(effects, ctx)
    assert vnpus(bed) == [] and bed.host.ledger() == []


@pytest.mark.parametrize(("fault", "npu_smi_destroys"), [
    ("dcmi_set_destroy_vdevice -8005", True), ("dcmi_set_destroy_vdevice -8005-after", False),
    ("dcmi_set_destroy_vdevice hang", True), ("dcmi_set_destroy_vdevice hang-after", False),
], ids=["an error code", "an error code after the destroy", "a hang", "a hang after the destroy"])
async def test_a_destroy_dcmi_fails_is_read_back_then_done_by_npu_smi_only_if_still_there(
        bed: Bed, caplog: pytest.LogCaptureFixture, fault: str, npu_smi_destroys: bool) -> None:
    c, ctx = bed.apply()
    effects = await bed.profile.prepare_side_effects(c, c.results, ctx)
    set_fault(bed.host.sim_dir, fault)
    with caplog.at_level(logging.INFO):
        await bed.profile.unprepare_side_effects(effects, ctx)
    assert vnpus(bed) == [] and bed.host.ledger() == [] and not (bed.host.vdev / "vdavinci100").exists()
    assert len(bed.npu_smi_calls("destroy-vnpu")) == (1 if npu_smi_destroys else 0)
    assert len([r for r in caplog.records if r.message == FALLBACK]) == (1 if npu_smi_destroys else 0)


async def test_a_create_whose_outcome_no_read_back_can_tell_is_not_repeated_and_its_ledger_entry_stays(
        bed: Bed, tmp_path: Path) -> None:
    """DCMI hangs (it then rests) and npu-smi cannot list the chip: nobody knows whether the vNPU was
    made, so npu-smi is not asked to make it, and the entry stays for the claim's rollback."""
    set_fault(bed.host.sim_dir, "dcmi_create_vdevice hang-after")
    (tmp_path / "fail-info-vnpu").touch()
    c, ctx = bed.apply()
    with pytest.raises(VnpuError, match=r"no answer within 2 s; the DCMI worker was killed; reading the chip's "
                                        r"vNPUs back failed .*so it is not asked again through npu-smi"):
        await bed.profile.prepare_side_effects(c, c.results, ctx)
    assert bed.npu_smi_calls("create-vnpu") == []
    assert vnpus(bed) == [(4, 100, "vir10_3c_16g")] and len(bed.host.ledger()) == 1
    (tmp_path / "fail-info-vnpu").unlink()
    await bed.profile.unprepare_side_effects(None, ctx)  # the daemon's rollback of a failed Prepare
    assert vnpus(bed) == [] and bed.host.ledger() == []


async def test_discovery_lists_vnpus_through_npu_smi_when_the_dcmi_listing_hangs(
        bed: Bed, caplog: pytest.LogCaptureFixture) -> None:
    npusmi_sim.run(["set", "-t", "create-vnpu", "-i", "4", "-c", "0", "-f", "vir05_1c_8g", "-v", "105"],
                   bed.host.sim_dir)  # not ours: the chip is left out
    set_fault(bed.host.sim_dir, "dcmi_get_device_info hang")
    with caplog.at_level(logging.INFO):
        inventory = await bed.profile.discover(bed.ctx())
    assert not any(d.name.startswith("vnpu-0-") for d in inventory.devices)
    assert "list by npu-smi" in bed.profile.discovery_notes()[-2]
    assert len([r for r in caplog.records if r.message == FALLBACK]) == 1


async def test_a_library_without_the_vnpu_calls_leaves_them_to_npu_smi_with_one_log_line(
        bed: Bed, caplog: pytest.LogCaptureFixture) -> None:
    """-99998: the library does not export the call (what the worker answers for a missing symbol)."""
    set_fault(bed.host.sim_dir, *(f"{call} -99998" for call in (
        "dcmi_create_vdevice", "dcmi_set_destroy_vdevice", "dcmi_get_device_info")))
    with caplog.at_level(logging.DEBUG):
        for uid in ("uid-1", "uid-2"):
            c, ctx = bed.apply(uid)
            effects = await bed.profile.prepare_side_effects(c, c.results, ctx)
            await bed.profile.unprepare_side_effects(effects, ctx)
    assert vnpus(bed) == [] and bed.host.ledger() == []
    assert len(bed.npu_smi_calls("create-vnpu")) == 2 and len(bed.npu_smi_calls("destroy-vnpu")) == 2
    assert [r.levelname for r in caplog.records if r.message == FALLBACK] == ["WARNING"]
    assert "vNPU calls: list by npu-smi, create by npu-smi, destroy by npu-smi" in bed.profile.discovery_notes()


async def test_the_dcmi_option_never_makes_vnpus_through_npu_smi(bed: Bed) -> None:
    c, ctx = bed.apply()
    never = {**ctx.profile.options, "hard-vNPU.dcmi": "never"}
    ctx = attrs.evolve(ctx, profile=attrs.evolve(ctx.profile, options=never))
    effects = await bed.profile.prepare_side_effects(c, c.results, ctx)
    await bed.profile.unprepare_side_effects(effects, ctx)
    assert len(bed.npu_smi_calls("create-vnpu")) == 1 and len(bed.npu_smi_calls("destroy-vnpu")) == 1
    assert bed.profile.dcmi.client is None


@pytest.mark.parametrize("recover", [True, False], ids=["vnpu-cfg-recover enabled", "disabled"])
async def test_after_a_reboot_dcmi_tells_whether_the_vnpus_came_back(bed: Bed, recover: bool) -> None:
    c, ctx = bed.apply()
    effects = await bed.profile.prepare_side_effects(c, c.results, ctx)
    if not recover:
        npusmi_sim.run(["set", "-t", "vnpu-cfg-recover", "-d", "0"], bed.host.sim_dir)
    bed.host.reboot("boot-2")
    await bed.profile.unprepare_side_effects(effects, ctx)  # a record of the earlier boot
    assert vnpus(bed) == [] and bed.host.ledger() == []
    assert bed.npu_smi_calls("vnpu-cfg-recover") == [] and bed.npu_smi_calls("destroy-vnpu") == []
    assert "vnpu-cfg-recover by dcmi" in bed.profile.discovery_notes()[-1]
