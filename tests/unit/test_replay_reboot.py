"""A Prepare of a claim prepared before a reboot, whose profile has node side effects, runs them again
as a first Prepare does: ``PrepareStarted`` durable first, the result, the spec, ``PrepareCompleted``
(replay.py; docs/durable-state.md, "Reboot"). A kill at each step is tested with the daemon as a
process (tests/integration/test_replay_crash.py, test_hard_vnpu_crash.py); here, what a failure
in each step leaves.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from ascend_dra.cdi import naming
from tests.claimfiles import DRIVER, claim_object, write_claim
from tests.unit.test_state import SideEffectProfile, make_state, on_disk, ref

pytestmark = pytest.mark.anyio


class Watching(SideEffectProfile):
    """Records what the checkpoint on disk says while its hook runs; fails while told to."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.seen: list[tuple[str, Any]] = []
        self.fail = False

    async def prepare_side_effects(self, claim: Any, devices: Any, ctx: Any) -> dict[str, Any]:
        record = on_disk(self.root).claims[claim.uid]
        self.seen.append((record.state, dict(record.side_effects)))
        if self.fail:
            raise RuntimeError("vNPU create failed: no free AI cores")
        return await super().prepare_side_effects(claim, devices, ctx)


async def rebooted(root: Path) -> tuple[Watching, Any, dict]:
    """A claim prepared in boot-1, its spec gone with the reboot; the state of boot-2."""
    first = await make_state(root, {"effects": SideEffectProfile()}, boot_id="boot-1")
    claim = write_claim(root, claim_object("c", results=[("a", "hw-1")]))
    assert isinstance((await first.prepare([ref(claim)]))[claim["metadata"]["uid"]], list)
    await first.close()
    for spec in (root / "cdi").iterdir():
        spec.unlink()
    profile = Watching(root)
    return profile, await make_state(root, {"effects": profile}, boot_id="boot-2"), claim


def spec_of(root: Path, uid: str) -> Path:
    return root / "cdi" / naming.claim_spec_file(f"k8s.{DRIVER}/hw", uid)


async def test_the_replay_is_recorded_started_before_its_side_effects_run(tmp_path):
    profile, state, claim = await rebooted(tmp_path)
    uid = claim["metadata"]["uid"]
    assert isinstance((await state.prepare([ref(claim)]))[uid], list)
    # Before: the hook ran under the PrepareCompleted record of boot-1, which a kill then kept.
    assert profile.seen == [("PrepareStarted", {"effects": None})]
    record = on_disk(tmp_path).claims[uid]
    assert (record.state, record.boot_id, dict(record.side_effects)) == (
        "PrepareCompleted", "boot-2", {"effects": {"created": ["hw-1"]}})
    assert spec_of(tmp_path, uid).exists()


async def test_a_replay_whose_side_effects_fail_is_rolled_back_as_a_first_prepare(tmp_path):
    profile, state, claim = await rebooted(tmp_path)
    uid = claim["metadata"]["uid"]
    profile.fail = True
    error = (await state.prepare([ref(claim)]))[uid]
    assert str(error) == "ResourceClaim default/c: vNPU create failed: no free AI cores"
    assert profile.calls == [("unprepare", uid, None)]  # whatever the claim's side effects left
    assert uid not in on_disk(tmp_path).claims and not spec_of(tmp_path, uid).exists()
    profile.fail = False  # the kubelet's retry is a first Prepare
    assert isinstance((await state.prepare([ref(claim)]))[uid], list)
    assert on_disk(tmp_path).claims[uid].boot_id == "boot-2"


def fail_append(state: Any, monkeypatch: Any, which: set[int]) -> list[int]:
    """Make the journal's appends numbered ``which`` (from 1) fail with ENOSPC; return the count."""
    journal = state.store.journal
    real, count = journal.append, [0]

    def append(data: bytes) -> None:
        count[0] += 1
        if count[0] in which:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(data)

    monkeypatch.setattr(journal, "append", append)
    return count


async def test_a_replay_whose_started_record_cannot_be_written_runs_nothing(tmp_path, monkeypatch):
    profile, state, claim = await rebooted(tmp_path)
    uid = claim["metadata"]["uid"]
    fail_append(state, monkeypatch, {1})
    error = (await state.prepare([ref(claim)]))[uid]
    assert str(error) == (f"ResourceClaim default/c: writing the checkpoint: No space left on device "
                          f"({tmp_path}/plugin/checkpoint.journal)")
    assert profile.seen == [] and profile.calls == []
    record = on_disk(tmp_path).claims[uid]
    assert (record.state, record.boot_id) == ("PrepareCompleted", "boot-1")  # as it was
    assert isinstance((await state.prepare([ref(claim)]))[uid], list)  # the disk has room again
    assert profile.seen == [("PrepareStarted", {"effects": None})]


async def test_a_replay_whose_completed_record_cannot_be_written_is_rolled_back(tmp_path, monkeypatch):
    profile, state, claim = await rebooted(tmp_path)
    uid = claim["metadata"]["uid"]
    fail_append(state, monkeypatch, {2})  # PrepareStarted, then PrepareCompleted with the result
    error = (await state.prepare([ref(claim)]))[uid]
    assert str(error) == (f"ResourceClaim default/c: writing the checkpoint: No space left on device "
                          f"({tmp_path}/plugin/checkpoint.journal)")
    assert profile.calls == [("prepare", uid, uid, ["hw-1"]), ("unprepare", uid, {"created": ["hw-1"]})]
    assert uid not in on_disk(tmp_path).claims and not spec_of(tmp_path, uid).exists()
