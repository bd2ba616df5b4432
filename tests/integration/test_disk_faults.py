"""ENOSPC and EIO at every durable write of a running daemon, one write at a time.

Each fault is armed in a running daemon through ``ASCEND_DRA_DISK_FAULTS`` (ascend_dra/observe/faults.py,
:data:`~ascend_dra.observe.faults.DISK_POINTS`) and disarmed again, and every time: the claim being
prepared fails with an error that names the file and the cause; a claim prepared before it is
untouched (its record, its spec, its answer); no answer names a spec that is not on disk; and once
the fault is gone the same daemon, never restarted, prepares and unprepares again, and a restart
reads the files it left back whole. tests/integration/test_disk_full.py fills real file systems.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.observe.faults import DISK_POINTS
from ascend_dra.profiles.ascend.sim import labnode
from tests.claimfiles import claim_object, write_claim
from tests.hardvnpu import SimHost, daemon_args, vnpu_keys, vnpus_of_records
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

FAULTS = (errno.ENOSPC, errno.EIO)
LAB_NODE = "aio-node74-arm"


class Node:
    """A daemon of one profile whose disk faults a test arms, with claims on devices of its own.

    Claim 0 is prepared before any fault and must stay prepared; claim 1 is prepared too and is
    unprepared under the fault; claims 2 and 3 are the ones prepared under a fault; claim 4 wants
    claim 1's device (or its chip's last room).
    """

    def __init__(self, root: Path, profile: str) -> None:
        self.profile = profile
        self.faults = root / "disk-faults"
        env = {"ASCEND_DRA_DISK_FAULTS": str(self.faults)}
        self.host: Any = None
        self.lab: Any = None
        if profile == "fake":
            self.d = DaemonProcess(root / "sa", env=env, fake_devices=16)
        elif profile == "HAMivNPUCore":
            self.lab = labnode.build(root / "lab")
            self.d = DaemonProcess(root / "sa", node=LAB_NODE, profiles=profile, env=env,
                                   extra_args=self.lab.flags())
        else:
            self.host = SimHost(root / "sa")
            self.host.state_dir = root / "sa" / "plugins" / DRIVER / "profiles"
            self.d = DaemonProcess(root / "sa", profiles="hard-vNPU", env={**env, **self.host.env},
                                   extra_args=daemon_args(self.host))
        self.claims = [write_claim(self.d.root, self._claim(i)) for i in range(16 if profile == "fake" else 5)]

    def _claim(self, i: int) -> dict[str, Any]:
        if self.profile == "HAMivNPUCore":  # two 8Gi shares fit a chip: kept and released on chip 0
            result = {"request": "npu", "driver": DRIVER, "pool": LAB_NODE, "device": f"npu-{int(i in (2, 3))}-0",
                      "shareID": f"share-{i}", "consumedCapacity": {"memory": "8Gi", "cores": "30", "containers": "1"}}
            return claim_object(f"c{i}", node=LAB_NODE, results=[result])
        device = (0, 1, 2, 3, 1)[i] if i < 5 else i
        if self.profile == "hard-vNPU":  # four vir05_1c_8g fit the chip
            return claim_object(f"c{i}", results=[("npu", f"vnpu-0-0-vir05-1c-8g-{device}")])
        return claim_object(f"c{i}", results=[("npu", f"npu-{device}-0")])

    def arm(self, *entries: str) -> None:
        self.faults.write_text(" ".join(entries) + "\n")

    def disarm(self) -> None:
        self.faults.unlink(missing_ok=True)

    @property
    def plugin_dir(self) -> Path:
        return self.d.checkpoint.parent

    def specs(self) -> dict[str, bytes]:
        """Every CDI spec on disk: file name -> bytes."""
        return {p.name: p.read_bytes() for p in self.d.cdi_dir.iterdir() if p.suffix == ".yaml"}

    def claim_spec(self, claim: dict[str, Any]) -> Path | None:
        found = list(self.d.cdi_dir.glob(f"*_{uid(claim)}.yaml"))
        return found[0] if found else None

    def temp_files(self) -> list[Path]:
        """Temp files write_atomic left behind (it must remove them when a write fails)."""
        return [p for p in self.d.root.rglob(".*.tmp")]

    def local_dir(self, claim: dict[str, Any]) -> Path:
        return self.lab.host_root / "usr/local/hami-vnpu-core/containers" / uid(claim)


def uid(claim: dict[str, Any]) -> str:
    return claim["metadata"]["uid"]


def ids(reply, claim: dict[str, Any]) -> list[str]:
    return [i for device in reply.claims[uid(claim)].devices for i in device.cdi_device_ids]


def resolves(node: Node, answered: list[str]) -> bool:
    """Whether every answered CDI id names a device of a spec file on disk."""
    known = set()
    for blob in node.specs().values():
        spec = yaml.safe_load(blob)
        known.update(f"{spec['kind']}={dev['name']}" for dev in spec.get("devices") or ())
    return bool(answered) and set(answered) <= known


def _journal(node: Node, claim: dict[str, Any]) -> str:
    return re.escape(str(node.plugin_dir / "checkpoint.journal"))


def _claim_spec(node: Node, claim: dict[str, Any]) -> str:
    return re.escape(str(node.d.cdi_dir / f"k8s.{DRIVER}-npu_{uid(claim)}.yaml"))


def _common_spec(node: Node, claim: dict[str, Any]) -> str:
    return re.escape(str(node.d.cdi_dir / f"k8s.{DRIVER}-npu_common.yaml"))


def _metadata_file(node: Node, claim: dict[str, Any]) -> str:
    return re.escape(str(node.plugin_dir / "device-metadata" / uid(claim) / "npu" / "metadata.json"))


def _local_dir(node: Node, claim: dict[str, Any]) -> str:
    return re.escape(str(node.local_dir(claim) / "npu"))


def _preload(node: Node, claim: dict[str, Any]) -> str:
    return re.escape(str(node.local_dir(claim) / "ld.so.preload"))


def _ledger(node: Node, claim: dict[str, Any]) -> str:
    return re.escape(str(node.host.state_dir / "hard-vNPU")) + r"/vnpu-\d+-\d+-\d+\.json"


#: Per case: the profile that reaches its points, the points armed together, and the file the
#: claim's error must name (a pattern, from the node and the claim being prepared).
CASES: dict[str, tuple[str, tuple[str, ...], Callable[[Node, dict[str, Any]], str]]] = {
    "journal:header": ("fake", ("journal:header",), _journal),
    "journal:write": ("fake", ("journal:write",), _journal),
    "journal:sync": ("fake", ("journal:sync",), _journal),
    "journal:sync+truncate": ("fake", ("journal:sync", "journal:truncate"), _journal),
    "journal:write+truncate": ("fake", ("journal:write", "journal:truncate"), _journal),
    "cdi-common:write": ("fake", ("cdi-common:write",), _common_spec),
    "cdi-claim:write": ("fake", ("cdi-claim:write",), _claim_spec),
    "device-metadata:write": ("fake", ("device-metadata:write",), _metadata_file),
    "vnpu-core-dir:mkdir": ("HAMivNPUCore", ("vnpu-core-dir:mkdir",), _local_dir),
    "vnpu-core-preload:write": ("HAMivNPUCore", ("vnpu-core-preload:write",), _preload),
    "journal:sync/side-effects": ("HAMivNPUCore", ("journal:sync",), _journal),
    "hard-vnpu-ledger:write": ("hard-vNPU", ("hard-vnpu-ledger:write",), _ledger),
    "hard-vnpu-ledger:sync": ("hard-vNPU", ("hard-vnpu-ledger:sync",), _ledger),
    "journal:write/hard-vnpu": ("hard-vNPU", ("journal:write",), _journal),
}


def test_every_disk_point_but_the_snapshot_is_covered_here():
    """The snapshot's points fail no claim (test_compaction_under_disk_faults_fails_no_claim)."""
    armed = {p for _, points, _ in CASES.values() for p in points}
    assert armed == set(DISK_POINTS) - {"snapshot:write", "snapshot:sync"}


def reach(node: Node, points: tuple[str, ...]) -> None:
    """Make the next Prepare pass ``points`` (most are on every Prepare's way).

    The journal's header is written only into an empty journal: a clean stop compacts and empties it
    (its header write fails now), and the start after it finds no header (a torn one) and fails to
    write it again, so the first append must. The common spec is written when it is missing.
    """
    if "journal:header" in points:
        assert node.d.stop() == 0
        node.d.start()
    if "cdi-common:write" in points:
        (node.d.cdi_dir / f"k8s.{DRIVER}-npu_common.yaml").unlink()


@pytest.mark.parametrize("case", list(CASES))
def test_a_disk_fault_fails_only_the_claim_being_prepared_and_the_daemon_recovers_without_a_restart(
        short_tmp, case):
    profile, points, named = CASES[case]
    node = Node(short_tmp, profile)
    d = node.d
    d.start()
    k = Kubelet(d)
    try:
        kept, released = node.claims[0], node.claims[1]
        first = k.prepare(kept, released)
        assert all(first.claims[uid(c)].error == "" for c in (kept, released)), first
        kept_spec = node.claim_spec(kept).read_bytes()
        prepared = [kept, released]
        for round_, code in enumerate(FAULTS):
            victim = node.claims[2 + round_]
            node.arm(*(f"{p}={errno.errorcode[code]}" for p in points))
            reach(node, points)
            k.close()
            k = Kubelet(d)
            pid = d.proc.pid

            error = k.prepare(victim).claims[uid(victim)].error
            assert re.search(rf"{os.strerror(code)} \({named(node, victim)}\)", error), error
            assert error.startswith(f"ResourceClaim default/{victim['metadata']['name']}: "), error
            assert node.claim_spec(victim) is None  # nothing of it answers, nothing of it stays
            assert not (node.plugin_dir / "device-metadata" / uid(victim)).exists()
            if node.lab is not None:
                assert not node.local_dir(victim).exists()
            if node.host is not None:  # no vNPU made for it, none left behind
                records = d.records()
                assert vnpu_keys(node.host.vnpus()) == vnpus_of_records({u: records[u] for u in map(uid, prepared)})
            # the claim prepared before is untouched, and answered again while the fault lasts
            replay = k.prepare(kept)
            if "cdi-common:write" in points:  # its answer names the common spec, which cannot be written now
                assert re.search(rf"{os.strerror(code)} \({_common_spec(node, kept)}\)",
                                 replay.claims[uid(kept)].error), replay
            else:
                assert replay.claims[uid(kept)].error == "" and ids(replay, kept) == ids(first, kept)
                assert resolves(node, ids(replay, kept))
            assert node.claim_spec(kept).read_bytes() == kept_spec
            if uid(released) in map(uid, prepared) and all(p.startswith("journal:") for p in points):
                error = k.unprepare(released).claims[uid(released)].error  # an Unprepare needs the write too
                assert re.search(rf"{os.strerror(code)} \({_journal(node, released)}\)", error), error
                intruder = node.claims[4]  # its devices stay held
                assert k.prepare(intruder).claims[uid(intruder)].error  # refused (a share: no room left)
                if "journal:truncate" not in points:  # else the failed append is in the file until the next
                    assert uid(released) in d.records()
                node.disarm()
                assert k.unprepare(released).claims[uid(released)].error == ""
                prepared.remove(released)

            node.disarm()  # the disk has room again: the same process serves as before
            answer = k.prepare(victim)
            assert answer.claims[uid(victim)].error == "", answer
            assert resolves(node, ids(answer, victim))
            assert k.unprepare(victim).claims[uid(victim)].error == ""
            assert d.proc.pid == pid and d.proc.poll() is None
            assert uid(victim) not in d.records() and node.claim_spec(victim) is None

        assert k.unprepare(released).claims[uid(released)].error == ""
        assert set(d.records()) == {uid(kept)}
        assert d.records()[uid(kept)]["state"] == "PrepareCompleted"
        assert not node.temp_files()
        if node.host is not None:
            assert vnpu_keys(node.host.vnpus()) == vnpus_of_records(d.records())
            assert len(node.host.ledger()) == 1
        if node.lab is not None:
            assert {p.name for p in node.local_dir(kept).parent.iterdir()} == {uid(kept)}
        k.close()
        assert d.stop() == 0
        d.start()  # the files it left read back whole: the same state, the same answer
        k = Kubelet(d)
        assert set(d.records()) == {uid(kept)}
        again = k.prepare(kept)
        assert again.claims[uid(kept)].error == "" and ids(again, kept) == ids(first, kept)
    finally:
        k.close()
        d.stop()


@pytest.mark.parametrize("point", ["snapshot:write", "snapshot:sync"])
@pytest.mark.parametrize("code", FAULTS, ids=errno.errorcode.get)
def test_compaction_under_disk_faults_fails_no_claim(short_tmp, point, code):
    """The snapshot is written at start-up, at a clean stop and when the journal grows long
    (tests/unit/test_disk_faults.py): a failure there is logged with the file and the cause, the
    journal keeps every change, and no claim fails for it."""
    node = Node(short_tmp, "fake")
    d = node.d
    d.start()
    k = Kubelet(d)
    kept = node.claims[0]
    assert k.prepare(kept).claims[uid(kept)].error == ""
    k.close()
    snapshot = d.checkpoint
    before = snapshot.read_bytes() if snapshot.exists() else None
    node.arm(f"{point}={errno.errorcode[code]}")
    assert d.stop() == 0  # the clean stop's compaction fails
    d.start()  # and so does the start-up's
    k = Kubelet(d)
    try:
        assert (snapshot.read_bytes() if snapshot.exists() else None) == before
        log = d.log_text()
        assert log.count(f"{os.strerror(code)} ({snapshot})") >= 2, log[-3000:]
        answers = k.prepare(*node.claims[:4])
        assert all(answers.claims[uid(c)].error == "" for c in node.claims[:4]), answers
        assert k.unprepare(node.claims[3]).claims[uid(node.claims[3])].error == ""
        node.disarm()
        assert k.prepare(node.claims[5]).claims[uid(node.claims[5])].error == ""
        k.close()
        assert d.stop() == 0  # compacts now
        assert set(d.records()) == {uid(c) for c in (*node.claims[:3], node.claims[5])}
        assert d.records() == dict(ckpt.load(snapshot).raw)  # the journal holds nothing more
        assert not node.temp_files()
    finally:
        k.close()
        d.stop()
