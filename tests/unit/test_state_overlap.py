"""A Prepare without side effects writes its CDI spec while its PrepareCompleted record is being
written (state.py, records.py ``begin_save``): what that overlap must and must not change."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from ascend_dra.cdi import naming
from ascend_dra.durable.journal import JOURNAL_FILE
from ascend_dra.durable.journal import read as read_journal
from ascend_dra.profiles.fake import FakeProfile
from ascend_dra.state.devicestate import PrepareError
from tests.claimfiles import DRIVER, claim_object, write_claim
from tests.unit.test_state import SideEffectProfile, make_state, on_disk, ref

pytestmark = pytest.mark.anyio

FAKE_KIND = f"k8s.{DRIVER}/npu"


def uid(obj: dict) -> str:
    return obj["metadata"]["uid"]


async def test_the_spec_is_written_while_the_prepare_completed_write_is_in_flight(tmp_path):
    """The loop sat idle while the writer thread woke and fdatasynced, then wrote the spec: the spec
    write waited here for a journal append that only began after it (2 s, then False)."""
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    claim = write_claim(tmp_path, claim_object("c", results=[("npu", "npu-0-0")]))
    spec_file = naming.claim_spec_file(FAKE_KIND, uid(claim))
    appending = threading.Event()
    seen: list[bool] = []
    append, write = state.store.journal.append, state.cdi.write

    def watched_append(data: bytes) -> None:  # on the writer thread
        appending.set()
        append(data)

    def watched_write(filename, spec):  # on the event loop
        if filename == spec_file:
            seen.append(appending.wait(2))
        return write(filename, spec)

    state.store.journal.append = watched_append  # type: ignore[method-assign]
    state.cdi.write = watched_write  # type: ignore[method-assign]
    results = await state.prepare([ref(claim)])
    assert isinstance(results[uid(claim)], list)
    assert seen == [True]
    assert on_disk(tmp_path).claims[uid(claim)].state == "PrepareCompleted"
    assert (tmp_path / "cdi" / spec_file).is_file()


async def test_a_spec_that_fails_while_its_record_goes_out_is_rolled_back_on_disk_too(tmp_path):
    """The failed claim's record reached the disk as PrepareCompleted before its spec failed: the
    Prepare must then leave it neither on disk nor holding its device, and the other claim of the
    call is prepared."""
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    bad = write_claim(tmp_path, claim_object("bad", results=[("npu", "npu-0-0")]))
    good = write_claim(tmp_path, claim_object("good", results=[("npu", "npu-1-0")]))
    bad_file = naming.claim_spec_file(FAKE_KIND, uid(bad))
    write = state.cdi.write

    def full_for_bad(filename, spec):  # the CDI dir's tmpfs is full when the bad claim's spec comes
        if filename == bad_file:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "cdi" / filename))
        return write(filename, spec)

    state.cdi.write = full_for_bad  # type: ignore[method-assign]
    results = await state.prepare([ref(bad), ref(good)])
    assert isinstance(results[uid(bad)], PrepareError)
    assert str(results[uid(bad)]) == (f"ResourceClaim default/bad: No space left on device "
                                      f"({tmp_path / 'cdi' / bad_file})")
    assert isinstance(results[uid(good)], list)
    assert set(on_disk(tmp_path).claims) == {uid(good)}
    after = write_claim(tmp_path, claim_object("after", results=[("npu", "npu-0-0")]))
    assert isinstance((await state.prepare([ref(after)]))[uid(after)], list)  # its device is free at once
    written = read_journal(tmp_path / "plugin" / JOURNAL_FILE).changes
    assert [stored and stored["state"] for u, stored in written if u == uid(bad)] == ["PrepareCompleted", None]
    assert uid(bad) not in state.prepared_claims

    restarted = await make_state(tmp_path, {"fake": FakeProfile()})
    assert set(restarted.prepared_claims) == {uid(good), uid(after)}


class WatchesTheOtherClaim(SideEffectProfile):
    """Notes, while its side effect runs, what ``state_of()`` says (the other claim's state in memory)."""

    def __init__(self, state_of) -> None:
        super().__init__()
        self.state_of = state_of
        self.seen: list[str] = []

    async def prepare_side_effects(self, claim, devices, ctx):
        self.seen.append(self.state_of())
        return await super().prepare_side_effects(claim, devices, ctx)


async def test_in_a_mixed_batch_no_write_carries_a_claim_as_completed_before_its_spec_is_being_written(tmp_path):
    """A claim without side effects was marked PrepareCompleted before a later claim's side effects
    ran, so the write recording their result made it durable as completed, its spec not yet written
    for as long as the side effects took (seconds for a vNPU)."""
    states: dict = {}
    profile = WatchesTheOtherClaim(lambda: states["state"].prepared_claims[uid(plain)].state)
    state = states["state"] = await make_state(tmp_path, {"fake": FakeProfile(), "effects": profile})
    plain = write_claim(tmp_path, claim_object("plain", results=[("npu", "npu-0-0")]))
    effects = write_claim(tmp_path, claim_object("effects", results=[("a", "hw-0")]))
    results = await state.prepare([ref(plain), ref(effects)])
    assert all(isinstance(r, list) for r in results.values())
    assert profile.seen == ["PrepareStarted"]
    assert {u: r.state for u, r in on_disk(tmp_path).claims.items()} == {
        uid(plain): "PrepareCompleted", uid(effects): "PrepareCompleted"}


def fail_the_spec_and_then_the_deletion(state, bad: dict) -> list[bytes]:
    """Make ``bad``'s spec fail (ENOSPC) after its PrepareCompleted record went out, and the append
    after that (its deletion) fail too (EIO); return the appends tried (each one's data)."""
    bad_file = naming.claim_spec_file(FAKE_KIND, uid(bad))
    write, append = state.cdi.write, state.store.journal.append
    appends: list[bytes] = []

    def full_for_bad(filename, spec):
        if filename == bad_file:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)
        return write(filename, spec)

    def second_append_fails(data: bytes) -> None:  # the record goes out, its deletion does not
        appends.append(data)
        if len(appends) == 2:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        append(data)

    state.cdi.write = full_for_bad
    state.store.journal.append = second_append_fails
    return appends


async def test_a_failed_spec_whose_deletion_cannot_be_written_yet_goes_out_with_the_next_write(tmp_path):
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    bad = write_claim(tmp_path, claim_object("bad", results=[("npu", "npu-0-0")]))
    appends = fail_the_spec_and_then_the_deletion(state, bad)
    assert isinstance((await state.prepare([ref(bad)]))[uid(bad)], PrepareError)
    assert len(appends) == 2
    assert uid(bad) not in state.prepared_claims
    assert on_disk(tmp_path).claims[uid(bad)].state == "PrepareCompleted"  # until the next write

    after = write_claim(tmp_path, claim_object("after", results=[("npu", "npu-0-0")]))
    assert isinstance((await state.prepare([ref(after)]))[uid(after)], list)  # its device is free now
    assert set(on_disk(tmp_path).claims) == {uid(after)}
