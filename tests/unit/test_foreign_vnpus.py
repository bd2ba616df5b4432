"""Whole-chip profiles leave out chips that carry vNPUs made outside them (profile.py,
``AscendChipProfile.without_foreign_vnpus``), against the stateful npu-smi simulator."""

from __future__ import annotations

import json

import attrs
import pytest

from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from ascend_dra.profiles.ascend.sim import npusmi_sim
from tests.hardvnpu import SIM, SimHost

pytestmark = pytest.mark.anyio


def vnpus_in_dev(host: SimHost) -> SimHost:
    """The simulator makes its vdavinci<ID> nodes in the /dev the profiles look at, as the driver does."""
    path = host.sim_dir / "host.json"
    spec = json.loads(path.read_text())
    spec["dev_dir"] = str(host.dev)
    path.write_text(json.dumps(spec))
    return host


@pytest.mark.parametrize(("profile", "model", "template"), [
    (Npu910Profile, "910B4", "vir05_1c_8g"), (Npu310PProfile, "310P3", "vir02")])
async def test_a_chip_with_vnpus_made_by_hand_is_not_published_whole(tmp_path, monkeypatch, profile, model, template):
    """Two chips; a vNPU created by hand on the second (physical ID 2: vNPU 132). A whole-chip claim
    of it got /dev/davinci2 while the vNPU's container ran on the chip. It is left out, said why,
    and comes back once the vNPU is destroyed."""
    host = vnpus_in_dev(SimHost(tmp_path, chips=((4, 0, 0, 0, model), (5, 0, 1, 2, model))))
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    chips = profile(host_root=tmp_path)
    assert [d.name for d in (await chips.discover(host.ctx())).devices] == ["npu-0-0", "npu-1-0"]
    npusmi_sim.run(["set", "-t", "create-vnpu", "-i", "5", "-c", "0", "-f", template], host.sim_dir)
    assert (host.dev / "vdavinci132").exists()
    assert [d.name for d in (await chips.discover(host.ctx())).devices] == ["npu-0-0"]
    notes = chips.discovery_notes()
    assert "1 chip not published" in notes
    assert any(n.startswith(f"  not published: physical ID 2, logic ID 1 (NPU 5 chip 0, {model}") and n.endswith(
        "carries 1 vNPU (132) made outside this profile: a whole-chip claim would share the chip with their "
        "containers; destroy them (npu-smi set -t destroy-vnpu) or run the hard-vNPU profile on this node")
        for n in notes), notes
    npusmi_sim.run(["set", "-t", "destroy-vnpu", "-i", "5", "-c", "0", "-v", "132"], host.sim_dir)
    assert [d.name for d in (await chips.discover(host.ctx())).devices] == ["npu-0-0", "npu-1-0"]


async def test_without_vdavinci_nodes_no_chip_is_asked_about_vnpus(tmp_path, monkeypatch):
    """No vNPU node under /dev: no ``info -t info-vnpu`` call (a node without vNPUs pays one scan);
    with one, each chip is asked. The npu-smi given logs every call it gets."""
    host = vnpus_in_dev(SimHost(tmp_path, chips=((4, 0, 0, 0, "910B4"),)))
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    calls = tmp_path / "calls.log"
    logging_smi = tmp_path / "npu-smi"
    logging_smi.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {SIM} "$@"\n')
    logging_smi.chmod(0o755)
    ctx = attrs.evolve(host.ctx(), npu_smi=str(logging_smi))
    profile = Npu910Profile(host_root=tmp_path)
    assert [d.name for d in (await profile.discover(ctx)).devices] == ["npu-0-0"]
    asked = [line for line in calls.read_text().splitlines() if "info-vnpu" in line]
    assert asked == []
    (host.dev / "vdavinci999").touch()  # a vNPU node of some chip: now every chip is asked
    assert [d.name for d in (await profile.discover(ctx)).devices] == ["npu-0-0"]
    asked = [line for line in calls.read_text().splitlines() if "info-vnpu" in line]
    assert asked == ["info -t info-vnpu -i 4 -c 0"]


async def test_an_npu_smi_that_hangs_on_info_vnpu_costs_one_timeout_and_keeps_the_chips(tmp_path, monkeypatch):
    """Four chips, a vNPU node present, an npu-smi that hangs on info-vnpu: each chip waited its own
    timeout in turn (chips x timeout, past --discovery-timeout on a full node, which then lost the
    whole profile). One timeout now, and every chip is published."""
    host = vnpus_in_dev(SimHost(tmp_path, chips=tuple((i, 0, i, i, "910B4") for i in range(4))))
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    (host.dev / "vdavinci999").touch()
    calls = tmp_path / "calls.log"
    hanging = tmp_path / "npu-smi"
    hanging.write_text(f'#!/bin/sh\necho "$*" >> {calls}\ncase "$*" in *info-vnpu*) exec sleep 120;; esac\n'
                       f'exec {SIM} "$@"\n')
    hanging.chmod(0o755)
    # The other calls exec the Python simulator, whose start alone took over 0.5 s on a loaded CI
    # machine (npu-smi info timed out and the devfs tier answered): a timeout they always meet.
    profile = Npu910Profile(host_root=tmp_path, timeout_s=5)
    inventory = await profile.discover(attrs.evolve(host.ctx(), npu_smi=str(hanging)))
    assert [line for line in calls.read_text().splitlines() if "info-vnpu" in line] == [
        "info -t info-vnpu -i 0 -c 0"]  # one timeout, not one per chip
    assert [d.name for d in inventory.devices] == ["npu-0-0", "npu-1-0", "npu-2-0", "npu-3-0"]
