"""A rediscovery of an unchanged node asks npu-smi only ``info`` and ``info -m`` (discovery/stable.py).

Each case runs the real profile's discovery twice or more on the simulated Lab 18 node (labnode.py,
two 310P3 chips, every call answered), through an npu-smi that logs its arguments, as the daemon's
periodic rediscovery does.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from ascend_dra.profiles.ascend.discovery.stable import StableAnswers
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.sim import labnode
from ascend_dra.profiles.base import ProfileContext
from tests.unit.test_ascend_support import script, sys_tree
from tests.unit.test_hami_monitoring_attributes import DRIVER

pytestmark = pytest.mark.anyio

FULL = ["info", "info -m", "info -t board -i 4", "info -t board -i 5", "info -t common -i 4",
        "info -t common -i 5", "info -t board -i 4 -c 0", "info -t board -i 5 -c 0"]


class LoggedLab:
    """The lab node behind an npu-smi that appends its arguments to a log, one call a line."""

    def __init__(self, tmp_path: Path) -> None:
        self.lab = labnode.build(tmp_path / "lab")
        self.log = tmp_path / "calls.log"
        self.failing = tmp_path / "failing"  # a call named in this file exits 1
        wrapper = script(tmp_path, f'#!/bin/sh\necho "$*" >> {self.log}\n'
                                   f'grep -qxF "$*" {self.failing} 2>/dev/null && {{ echo failed >&2; exit 1; }}\n'
                                   f'exec {self.lab.npu_smi} "$@"\n')
        # sysfs names each davinci node's PCI address, so the IDs agree without phyid-remap.
        sys_root = sys_tree(tmp_path, {c.bus_id: ("0x19e5", "0xd500", 0) for c in self.lab.chips},
                            {c.physical_id: c.bus_id for c in self.lab.chips})
        self.ctx = ProfileContext(node_name="node-a", driver_name=DRIVER, npu_smi=str(wrapper),
                                  dev_root=self.lab.dev_root, sys_root=sys_root, state_dir=tmp_path / "state")

    def calls(self) -> list[str]:
        """The calls since the last look."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.unlink(missing_ok=True)
        return lines


def published(inventory) -> list:
    return [(d.name, dict(d.attributes), dict(d.capacities)) for d in inventory.devices]


@pytest.fixture
def lab(tmp_path: Path) -> LoggedLab:
    return LoggedLab(tmp_path)


async def test_a_rediscovery_of_an_unchanged_node_makes_two_calls_and_publishes_the_same(lab: LoggedLab) -> None:
    profile = Npu310PProfile()
    first = await profile.discover(lab.ctx)
    assert sorted(lab.calls()) == sorted(FULL)
    assert [d.attributes["uuid"] for d in first.devices] == [c.vdie_id for c in lab.lab.chips]
    for _ in range(3):
        again = await profile.discover(lab.ctx)
        assert lab.calls() == ["info", "info -m"]
        assert published(again) == published(first)
    # A fresh profile (a restarted daemon) remembers nothing.
    await Npu310PProfile().discover(lab.ctx)
    assert sorted(lab.calls()) == sorted(FULL)


async def test_health_and_readings_in_info_keep_the_answers(lab: LoggedLab) -> None:
    """What ``info`` prints that changes while the chip stays (health, usage, temperature) is no
    change of the node; the health check, which reads it, still sees it."""
    profile = Npu310PProfile()
    first_inventory = await profile.discover(lab.ctx)
    lab.calls()
    first, second = lab.lab.chips
    lab.lab.set_info([attrs.evolve(first, health="Alarm", aicore_percent=80, memory_used_mib=9000,
                                   temperature_c=70), second])
    again = await profile.discover(lab.ctx)
    assert lab.calls() == ["info", "info -m"]
    assert published(again) == published(first_inventory)
    assert await profile.health(lab.ctx, again) == {"npu-0-0": False, "npu-1-0": True}


@pytest.mark.parametrize("change", [
    {"bus_id": "0000:c1:00.0"},      # another chip in that slot
    {"name": "310P1"},               # another name
    {"memory_mib": 43050},           # another memory total
])
async def test_a_chip_that_info_shows_changed_makes_every_call_again(lab: LoggedLab, change: dict) -> None:
    profile = Npu310PProfile()
    await profile.discover(lab.ctx)
    lab.calls()
    first, second = lab.lab.chips
    lab.lab.set_info([attrs.evolve(first, **change), second])
    await profile.discover(lab.ctx)
    assert set(lab.calls()) >= set(FULL)  # a chip in another slot also makes the IDs be asked (phyid-remap)


async def test_a_removed_chip_makes_every_call_again(lab: LoggedLab) -> None:
    profile = Npu310PProfile()
    await profile.discover(lab.ctx)
    lab.calls()
    lab.lab.set_info([lab.lab.chips[1]])
    found = await profile.discover(lab.ctx)
    assert sorted(lab.calls()) == sorted(["info", "info -m", "info -t board -i 5", "info -t common -i 5",
                                          "info -t board -i 5 -c 0"])
    assert [d.attributes["npuID"] for d in found.devices] == [5]


async def test_a_failed_call_is_asked_again_at_the_next_discovery(lab: LoggedLab) -> None:
    profile = Npu310PProfile()
    lab.failing.write_text("info -t board -i 4 -c 0\n")
    first = await profile.discover(lab.ctx)
    assert sorted(lab.calls()) == sorted(FULL)
    assert "uuid" not in first.devices[0].attributes
    lab.failing.unlink()
    again = await profile.discover(lab.ctx)
    assert lab.calls() == ["info", "info -m", "info -t board -i 4 -c 0"]
    assert again.devices[0].attributes["uuid"] == lab.lab.chips[0].vdie_id
    await profile.discover(lab.ctx)
    assert lab.calls() == ["info", "info -m"]


async def test_after_the_maximum_age_every_call_is_made_again(lab: LoggedLab) -> None:
    now = [0.0]
    profile = Npu310PProfile()
    profile._stable = StableAnswers(max_age_s=600.0, clock=lambda: now[0])
    await profile.discover(lab.ctx)
    lab.calls()
    now[0] = 599.0
    await profile.discover(lab.ctx)
    assert lab.calls() == ["info", "info -m"]
    now[0] = 600.0
    await profile.discover(lab.ctx)
    assert sorted(lab.calls()) == sorted(FULL)
    assert profile._stable.reused == 6 and profile._stable.asked == 12


async def test_another_driver_version_in_the_header_makes_every_call_again(lab: LoggedLab) -> None:
    profile = Npu310PProfile()
    await profile.discover(lab.ctx)
    lab.calls()
    info = lab.lab.root / "npu-smi" / "info.txt"
    text = info.read_text()
    version = labnode.DRIVER_VERSION
    assert version in text.splitlines()[1]
    info.write_text(text.replace(version, "25.9.9"))  # an upgrade: npu-smi's version and the driver's
    await profile.discover(lab.ctx)
    assert sorted(lab.calls()) == sorted(FULL)
