"""A kill -9 storm (tests/storm.py) over the hard-vNPU profile and the stateful npu-smi simulator:
besides the storm's own tallies (no lost claim, no orphan spec, no device held twice, every answered
CDI id resolves, replays succeed), after every restart (``orphan_side_effects``):

* every vNPU the simulator holds is named by a durable claim record (none is left behind);
* every vNPU a ``PrepareCompleted`` record names exists (a prepared claim's device is real).

A ``PrepareStarted`` record is a rollback not yet finished (docs/durable-state.md): its vNPUs may be
gone already, destroyed by a start-up whose deletion of the record met a full disk; the next start
or the kubelet's retry drops it, and destroying a vNPU that is gone only drops its ledger entry."""

from __future__ import annotations

import random
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests import storm
from tests.claimfiles import claim_object, write_claim
from tests.hardvnpu import TIERS, SimHost, daemon_args, vnpu_keys, vnpus_of_records
from tests.integration.daemon import DRIVER, DaemonProcess

#: Claims go in pairs on the same vNPU device (contention, as the storm's fake claims do); the four
#: vir05_1c_8g instances of a 910B4 fit the chip together (docs/ascend-hardware.md#910b-and-a3-templates).
DEVICES = [f"vnpu-0-0-vir05-1c-8g-{k}" for k in range(4)]


class HardVnpuStorm(storm.Storm):
    def __init__(self, root: Path, *, claims: int = 8, seed: int = 0, disk_faults: bool = False,
                 dcmi: bool = False) -> None:
        self.root = root
        self.faults = root / "disk-faults" if disk_faults else None
        env = {"ASCEND_DRA_DISK_FAULTS": str(self.faults)} if self.faults else {}
        self.profile = "hard-vNPU"
        self.rng = random.Random(seed)
        self.tallies: Counter[str] = Counter({t: 0 for t in storm.TALLIES})
        self.details: list[str] = []
        self.lab = None
        node = root / "node"
        self.host = SimHost(node, dcmi=dcmi)
        self.host.state_dir = node / "plugins" / DRIVER / "profiles"
        self.daemon = DaemonProcess(node, node=storm.LAB_NODE, profiles="hard-vNPU", env={**self.host.env, **env},
                                    extra_args=daemon_args(self.host))
        self.claims = [write_claim(self.daemon.root, self._claim(i)) for i in range(claims)]
        self.asked: dict[str, str] = {}
        self.acked: dict[str, str] = {}
        self.lock = threading.Lock()

    def _claim(self, i: int) -> dict[str, Any]:
        return claim_object(f"c{i}", namespace="storm", node=storm.LAB_NODE,
                            results=[("npu", DEVICES[(i // 2) % len(DEVICES)])])

    def _check_after_restart(self) -> None:
        super()._check_after_restart()
        records = self.daemon.records()
        recorded = vnpus_of_records(records)
        completed = vnpus_of_records({uid: r for uid, r in records.items() if r.get("state") == "PrepareCompleted"})
        present = vnpu_keys(self.host.vnpus())
        for key in sorted(present - recorded):
            self._fail("orphan_side_effects", f"vNPU {key} exists and no record names it")
        for key in sorted(completed - present):
            self._fail("orphan_side_effects", f"vNPU {key} is recorded as prepared and does not exist")


@pytest.mark.parametrize("tier", TIERS)
def test_a_kill9_storm_over_hard_vnpus_loses_nothing_and_leaves_no_orphan_vnpu(short_tmp, tier):
    """Over npu-smi, and over DCMI (a kill -9 then also ends the DCMI worker, mid-call or not)."""
    s = HardVnpuStorm(short_tmp, seed=11, dcmi=tier == "dcmi")
    for _ in range(8):
        s.trial()
    assert dict(s.tallies) == dict.fromkeys(storm.TALLIES, 0), "\n".join(s.details)
    assert s.acked  # the storm did prepare and unprepare claims


def test_a_kill9_storm_over_hard_vnpus_with_disk_faults_leaves_no_orphan_vnpu(short_tmp):
    """The same with ENOSPC and EIO at random durable writes (the ledger's among them) all through
    each trial (tests/storm.py --disk-faults)."""
    s = HardVnpuStorm(short_tmp, seed=12, disk_faults=True)
    for _ in range(4):
        s.trial()
    assert dict(s.tallies) == dict.fromkeys(storm.TALLIES, 0), "\n".join(s.details)
    assert s.disk_errors > 0
