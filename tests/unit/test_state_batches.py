"""One call, several claims: a bad one never fails another, and a failed one leaves nothing held
(from an audit of bad claims and of disk faults)."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import Any

import pytest

from ascend_dra.model import ClaimAllocation
from ascend_dra.profiles.base import AllocatedDevice, ApplyContext
from ascend_dra.profiles.fake import FakeProfile
from ascend_dra.state.devicestate import PrepareError
from tests.claimfiles import claim_object, write_claim
from tests.unit.test_state import SideEffectProfile, make_state, on_disk, ref

pytestmark = pytest.mark.anyio


class FailsForBad(SideEffectProfile):
    """Its side effect fails for the claim named ``bad`` (a vNPU that cannot be created)."""

    async def prepare_side_effects(self, claim: ClaimAllocation, devices: Sequence[AllocatedDevice],
                                   ctx: ApplyContext) -> dict[str, Any]:
        if claim.name == "bad":
            raise RuntimeError("creating the vNPU failed: the chip is busy")
        return await super().prepare_side_effects(claim, devices, ctx)


def uid(obj: dict) -> str:
    return obj["metadata"]["uid"]


async def test_a_uid_named_twice_in_one_unprepare_is_unprepared_once(tmp_path):
    """x, x, y: the second x failed the whole call with "internal error" and the checkpoint was never
    written, though both specs were gone."""
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    x = write_claim(tmp_path, claim_object("x", results=[("npu", "npu-0-0")]))
    y = write_claim(tmp_path, claim_object("y", results=[("npu", "npu-1-0")]))
    assert all(isinstance(r, list) for r in (await state.prepare([ref(x), ref(y)])).values())
    assert await state.unprepare([ref(x), ref(x), ref(y)]) == {uid(x): None, uid(y): None}
    assert on_disk(tmp_path).claims == {}
    assert sorted(p.name for p in (tmp_path / "cdi").iterdir()) == ["k8s.ascend.project-hami.io-npu_common.yaml"]


async def test_a_uid_named_twice_in_one_prepare_is_prepared_once(tmp_path):
    profile = SideEffectProfile()
    state = await make_state(tmp_path, {"effects": profile})
    c = write_claim(tmp_path, claim_object("c", results=[("a", "hw-0")]))
    results = await state.prepare([ref(c), ref(c)])
    assert list(results) == [uid(c)] and isinstance(results[uid(c)], list)
    assert [call[0] for call in profile.calls] == ["prepare"]


async def test_a_claim_whose_side_effects_fail_gives_its_devices_back_to_the_next_claim_of_the_call(tmp_path):
    """bad reserved hw-0, then failed creating its vNPU; good, planned after it in the same call,
    was refused as "already prepared for bad", which then held nothing."""
    profile = FailsForBad()
    state = await make_state(tmp_path, {"effects": profile})
    bad = write_claim(tmp_path, claim_object("bad", results=[("a", "hw-0")]))
    good = write_claim(tmp_path, claim_object("good", results=[("a", "hw-0")]))
    other = write_claim(tmp_path, claim_object("other", results=[("a", "hw-1")]))
    results = await state.prepare([ref(bad), ref(good), ref(other)])
    assert str(results[uid(bad)]) == "ResourceClaim default/bad: creating the vNPU failed: the chip is busy"
    assert isinstance(results[uid(good)], list) and isinstance(results[uid(other)], list)
    assert sorted(r.name for r in on_disk(tmp_path).claims.values()) == ["good", "other"]


async def test_a_refusal_stands_when_the_claim_planned_before_it_succeeded(tmp_path):
    profile = FailsForBad()
    state = await make_state(tmp_path, {"effects": profile})
    first = write_claim(tmp_path, claim_object("first", results=[("a", "hw-0")]))
    second = write_claim(tmp_path, claim_object("second", results=[("a", "hw-0")]))
    bad = write_claim(tmp_path, claim_object("bad", results=[("a", "hw-1")]))
    results = await state.prepare([ref(first), ref(second), ref(bad)])
    assert isinstance(results[uid(first)], list) and isinstance(results[uid(bad)], PrepareError)
    assert "device hw-0 is already prepared for ResourceClaim default/first" in str(results[uid(second)])


async def test_a_prepare_whose_completed_record_cannot_be_written_holds_nothing_afterwards(tmp_path, monkeypatch):
    """The disk filled at the PrepareCompleted write: the claim failed, but its reservation stayed in
    memory (and its spec on disk), refusing the device to every other claim until a restart."""
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    journal = state.store.journal
    real_append = journal.append

    def full(data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(journal, "append", full)
    a = write_claim(tmp_path, claim_object("a", results=[("npu", "npu-0-0")]))
    error = (await state.prepare([ref(a)]))[uid(a)]
    assert str(error) == (f"ResourceClaim default/a: writing the checkpoint: No space left on device "
                          f"({tmp_path}/plugin/checkpoint.journal)")
    assert not list((tmp_path / "cdi").glob(f"*{uid(a)}*"))  # its spec is gone with it
    monkeypatch.setattr(journal, "append", real_append)  # the disk has room again
    b = write_claim(tmp_path, claim_object("b", results=[("npu", "npu-0-0")]))
    assert isinstance((await state.prepare([ref(b)]))[uid(b)], list)
    assert sorted(r.name for r in on_disk(tmp_path).claims.values()) == ["b"]


async def test_a_full_state_disk_at_start_up_does_not_keep_the_node_from_serving(tmp_path, monkeypatch):
    """The start-up compaction failed with ENOSPC and stopped the daemon ("stopped: [Errno 28] No
    space left on device"), though the checkpoint was readable and replays need no write."""
    first = await make_state(tmp_path, {"fake": FakeProfile()})
    a = write_claim(tmp_path, claim_object("a", results=[("npu", "npu-0-0")]))
    answer = (await first.prepare([ref(a)]))[uid(a)]
    assert isinstance(answer, list)  # then a crash: the journal holds the record, the snapshot does not

    def full(path, data, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("ascend_dra.durable.checkpoint.write_atomic", full)
    again = await make_state(tmp_path, {"fake": FakeProfile()}, boot_id="boot-1")
    assert (await again.prepare([ref(a)]))[uid(a)] == answer
    b = write_claim(tmp_path, claim_object("b", results=[("npu", "npu-0-0")]))
    assert "already prepared for ResourceClaim default/a" in str((await again.prepare([ref(b)]))[uid(b)])


async def test_a_directory_where_the_common_spec_belongs_fails_the_claim_instead_of_an_id_that_resolves_nothing(
        tmp_path):
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    common = tmp_path / "cdi" / "k8s.ascend.project-hami.io-npu_common.yaml"
    common.unlink()
    common.mkdir()
    a = write_claim(tmp_path, claim_object("a", results=[("npu", "npu-0-0")]))
    error = (await state.prepare([ref(a)]))[uid(a)]
    assert isinstance(error, PrepareError)
    assert "k8s.ascend.project-hami.io-npu_common.yaml" in str(error)
    assert on_disk(tmp_path).claims == {}


async def test_a_journal_that_cannot_be_emptied_after_a_compaction_does_not_fail_the_prepare(tmp_path, monkeypatch):
    """The snapshot was written (the claim durably completed), then emptying the journal failed: the
    Prepare was reported failed and rolled back while the snapshot said it was prepared (a second
    review)."""
    state = await make_state(tmp_path, {"fake": FakeProfile()})

    def eio() -> None:
        raise OSError(errno.EIO, "Input/output error")

    x = write_claim(tmp_path, claim_object("x", results=[("npu", "npu-1-0")]))
    await state.prepare([ref(x)])
    await state.unprepare([ref(x)])  # two change lines, no record: the next write compacts
    monkeypatch.setattr("ascend_dra.durable.records.COMPACT_MIN_LINES", 0)
    monkeypatch.setattr(state.store.journal, "reset", eio)
    snapshot = tmp_path / "plugin" / "checkpoint.json"
    before = snapshot.stat().st_mtime_ns if snapshot.exists() else None
    a = write_claim(tmp_path, claim_object("a", results=[("npu", "npu-0-0")]))
    assert isinstance((await state.prepare([ref(a)]))[uid(a)], list)
    assert snapshot.stat().st_mtime_ns != before  # it did compact
    assert on_disk(tmp_path).claims[uid(a)].state == "PrepareCompleted"
