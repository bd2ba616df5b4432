"""Disk faults (ENOSPC, EIO) at the durable writes, in-process: the injection points of
ascend_dra/observe/faults.py, the journal and the snapshot under them. A running daemon under each point is
in tests/integration/test_disk_faults.py; real full file systems in tests/integration/test_disk_full.py."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import anyio
import pytest

from ascend_dra.cdi import naming
from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.journal import JOURNAL_FILE, Journal, change_lines
from ascend_dra.durable.journal import read as read_journal
from ascend_dra.observe import faults
from ascend_dra.profiles.fake import FakeProfile
from ascend_dra.state.devicestate import PrepareError
from ascend_dra.system.atomicfile import write_atomic
from tests.claimfiles import claim_object, write_claim
from tests.unit.test_state import SideEffectProfile, make_state, on_disk, ref
from tests.unit.test_state_overlap import fail_the_spec_and_then_the_deletion


@pytest.fixture
def arm(tmp_path, monkeypatch):
    """``arm("journal:sync=EIO", ...)`` arms faults in this process; ``arm()`` disarms them."""
    path = tmp_path / "disk-faults"
    monkeypatch.setattr(faults, "_DISK_FAULTS", str(path))

    def arm(*entries: str) -> None:
        path.write_text(" ".join(entries))
    return arm


def test_the_fault_file_is_point_equals_errno_name():
    assert faults.read_disk_faults("journal:sync=EIO\n*=ENOSPC  cdi-claim:write=EROFS") == {
        "journal:sync": errno.EIO, "*": errno.ENOSPC, "cdi-claim:write": errno.EROFS}
    assert faults.read_disk_faults(" \n") == {}


@pytest.mark.parametrize(("text", "says"), [
    ("journal:sync", "expected POINT=ERRNO"),
    ("journal:fsync=EIO", "expected POINT=ERRNO, POINT * or one of journal:header, journal:write"),
    ("journal:sync=28", "'28' is not an errno name"),
    ("journal:sync=errorcode", "'errorcode' is not an errno name"),
    ("journal:sync=ENOSUCH", "'ENOSUCH' is not an errno name"),
])
def test_a_bad_fault_entry_is_refused_with_what_is_allowed(text, says):
    with pytest.raises(ValueError, match=f"disk fault {text!r}: .*"):
        faults.read_disk_faults(text)
    with pytest.raises(ValueError) as raised:
        faults.read_disk_faults(text)
    assert says in str(raised.value)


def test_a_point_raises_what_its_system_call_would(arm, monkeypatch):
    assert faults.disk_error("journal:sync") is None  # no file: nothing armed
    arm("journal:sync=EIO")
    error = faults.disk_error("journal:sync")
    assert (error.errno, error.strerror, error.filename) == (errno.EIO, "Input/output error", None)
    assert faults.disk_error("journal:write") is None
    arm("*=ENOSPC")
    with pytest.raises(OSError) as raised:
        faults.disk_fault("vnpu-core-dir:mkdir", "/x/y")
    assert str(raised.value) == "[Errno 28] No space left on device: '/x/y'"
    monkeypatch.setattr(faults, "_DISK_FAULTS", None)  # production: the environment variable unset
    assert faults.disk_error("journal:sync") is None


@pytest.mark.parametrize("entry", ["snapshot:write=ENOSPC", "snapshot:sync=EIO"])
def test_a_failed_snapshot_write_names_the_file_keeps_the_old_one_and_leaves_no_temp_file(tmp_path, arm, entry):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    write_atomic(path, b"old", fault="snapshot")
    arm(entry)
    with pytest.raises(OSError) as raised:
        write_atomic(path, b"new" * 1000, fault="snapshot")
    assert raised.value.filename == str(path)
    assert raised.value.errno == faults.read_disk_faults(entry)[entry.partition("=")[0]]
    assert path.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == [ckpt.CHECKPOINT_FILE, "disk-faults"]


def open_journal(path: Path) -> Journal:
    journal = Journal(path)
    journal.open(read_journal(path))
    return journal


RECORD = {"uid": "a", "state": "PrepareCompleted", "devices": [{"device": "npu-0-0"}] * 20}


@pytest.mark.parametrize("points", [("journal:write",), ("journal:sync",), ("journal:write", "journal:truncate"),
                                    ("journal:sync", "journal:truncate")], ids="+".join)
@pytest.mark.parametrize("code", ["ENOSPC", "EIO"])
def test_a_failed_append_leaves_nothing_that_a_later_append_or_read_takes_for_a_record(tmp_path, arm, points, code):
    """With the cut-off failing too (journal:truncate), the failed append's lines stayed in the file
    and the next, shorter append went over their start: its commit line was followed by the end of
    the failed append, and the journal read as damaged (start-up refused) or gave back the record
    whose write had failed."""
    path = tmp_path / JOURNAL_FILE
    journal = open_journal(path)
    journal.append(change_lines([("kept", {"uid": "kept"})]))
    size = journal.size
    arm(*(f"{p}={code}" for p in points))
    with pytest.raises(OSError) as raised:
        journal.append(change_lines([("a", RECORD)]))
    assert raised.value.errno == getattr(errno, code)
    assert journal.size == size
    arm()  # room again
    journal.append(change_lines([("a", None)]))  # shorter than the failed append
    assert read_journal(path).changes == (("kept", {"uid": "kept"}), ("a", None))
    assert not read_journal(path).torn_tail
    journal.append(change_lines([("b", {"uid": "b"})]))
    assert [uid for uid, _ in read_journal(path).changes] == ["kept", "a", "b"]


@pytest.mark.parametrize("code", ["ENOSPC", "EIO"])
def test_a_header_that_fails_after_a_compaction_is_written_by_the_next_append(tmp_path, arm, code):
    path = tmp_path / JOURNAL_FILE
    journal = open_journal(path)
    journal.append(change_lines([("kept", {"uid": "kept"})]))
    arm(f"journal:header={code}")
    with pytest.raises(OSError):
        journal.reset()
    assert read_journal(path).changes == () and read_journal(path).torn_tail  # half a header: torn
    with pytest.raises(OSError):
        journal.append(change_lines([("a", RECORD)]))  # the header goes first, and fails again
    arm()
    journal.append(change_lines([("a", RECORD)]))
    assert read_journal(path).changes == (("a", RECORD),)
    assert open_journal(path).size == path.stat().st_size  # a restart appends where this one ended


@pytest.mark.anyio
@pytest.mark.parametrize("entry", ["snapshot:write=ENOSPC", "snapshot:sync=EIO"])
async def test_a_compaction_that_cannot_write_the_snapshot_fails_no_prepare(tmp_path, arm, monkeypatch, entry):
    """A Prepare whose write was due for compaction failed with the snapshot's error ("writing the
    checkpoint: No space left on device (.../checkpoint.json)") although its record, a few hundred
    bytes, could be appended; every later write tried the whole snapshot again, and failed."""
    monkeypatch.setattr("ascend_dra.durable.records.COMPACT_MIN_LINES", 0)
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    snapshot = tmp_path / "plugin" / ckpt.CHECKPOINT_FILE
    before = snapshot.read_bytes() if snapshot.exists() else None
    saves = []
    save = ckpt.save
    monkeypatch.setattr(ckpt, "save", lambda path, data: (saves.append(path), save(path, data)))
    arm(entry)
    claims = [write_claim(tmp_path, claim_object(f"c{i}", results=[("npu", f"npu-{i}-0")])) for i in range(4)]
    for claim in claims:  # the journal grows faster than the records: compaction is due
        for again in (False, True):
            if again:
                assert (await state.unprepare([ref(claim)]))[claim["metadata"]["uid"]] is None
            assert isinstance((await state.prepare([ref(claim)]))[claim["metadata"]["uid"]], list)
    assert (snapshot.read_bytes() if snapshot.exists() else None) == before
    assert set(on_disk(tmp_path).claims) == {c["metadata"]["uid"] for c in claims}
    assert 0 < 2 * len(saves) < 3 * len(claims)  # tried, but not a whole snapshot for each of the writes
    arm()
    failed = len(saves)
    for claim in claims:
        assert (await state.unprepare([ref(claim)]))[claim["metadata"]["uid"]] is None
        assert isinstance((await state.prepare([ref(claim)]))[claim["metadata"]["uid"]], list)
    assert len(saves) > failed and snapshot.read_bytes() != before  # compacted again
    assert set(on_disk(tmp_path).claims) == {c["metadata"]["uid"] for c in claims}
    await state.close()


@pytest.mark.anyio
async def test_a_common_spec_that_cannot_be_written_fails_only_the_claims_that_name_it(tmp_path, arm):
    """The common spec of every loaded profile was re-created before any claim's spec, so another
    profile's common spec that could not be written (removed, then the disk full) failed claims whose
    answer does not name it."""
    state = await make_state(tmp_path, {"fake": FakeProfile(), "effects": SideEffectProfile()})
    hw_common = tmp_path / "cdi" / naming.common_spec_file(state.cdi_kind("effects"))
    hw_common.unlink()
    arm("cdi-common:write=ENOSPC")
    plain = write_claim(tmp_path, claim_object("plain", results=[("npu", "npu-0-0")]))
    hw = write_claim(tmp_path, claim_object("hw", results=[("a", "hw-0")]))
    results = await state.prepare([ref(plain), ref(hw)])
    assert isinstance(results[plain["metadata"]["uid"]], list)
    assert str(results[hw["metadata"]["uid"]]) == f"ResourceClaim default/hw: No space left on device ({hw_common})"
    assert set(on_disk(tmp_path).claims) == {plain["metadata"]["uid"]}
    arm()
    assert isinstance((await state.prepare([ref(hw)]))[hw["metadata"]["uid"]], list)
    assert hw_common.is_file()


@pytest.mark.anyio
async def test_a_device_whose_unprepare_is_being_written_is_not_given_to_another_claim(tmp_path, monkeypatch):
    """Unprepare dropped the record (so its device looked free) before writing the deletion, and put
    it back when the write failed (ENOSPC): a claim of the same device planned during that write was
    prepared too, and both records were on disk, holding one exclusive device (a storm with disk
    faults found it)."""
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    old = write_claim(tmp_path, claim_object("old", results=[("npu", "npu-0-0")]))
    new = write_claim(tmp_path, claim_object("new", results=[("npu", "npu-0-0")]))
    assert isinstance((await state.prepare([ref(old)]))[old["metadata"]["uid"]], list)
    writing, room = threading.Event(), threading.Event()
    append = state.store.journal.append

    def full_once(data: bytes) -> None:  # the deletion's append waits, then finds the disk full
        if not writing.is_set():
            writing.set()
            room.wait()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        append(data)

    monkeypatch.setattr(state.store.journal, "append", full_once)
    results: dict = {}
    planned = anyio.Event()
    begin_save = state.store.begin_save

    def noting_begin_save(**kwargs):  # the new claim got as far as a write of its own
        if writing.is_set():
            planned.set()
        return begin_save(**kwargs)

    monkeypatch.setattr(state.store, "begin_save", noting_begin_save)

    async def prepare_new() -> None:
        await anyio.to_thread.run_sync(writing.wait)  # the old claim's deletion is being written
        results.update(await state.prepare([ref(new)]))
        planned.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(prepare_new)
        tg.start_soon(lambda: _store(results, state.unprepare([ref(old)])))
        await planned.wait()
        room.set()
    assert "ResourceClaim default/old: writing the checkpoint: No space left on device" in str(
        results[old["metadata"]["uid"]])
    assert "is already prepared for ResourceClaim default/old" in str(results[new["metadata"]["uid"]])
    assert set(on_disk(tmp_path).claims) == {old["metadata"]["uid"]}
    assert (await state.unprepare([ref(old)]))[old["metadata"]["uid"]] is None  # the kubelet's retry
    assert isinstance((await state.prepare([ref(new)]))[new["metadata"]["uid"]], list)
    assert set(on_disk(tmp_path).claims) == {new["metadata"]["uid"]}


async def _store(results: dict, operation) -> None:
    results.update(await operation)


@pytest.mark.anyio
async def test_a_journal_that_cannot_be_emptied_after_a_compaction_does_not_bring_back_what_the_write_changed(
        tmp_path, arm, monkeypatch):
    """The compaction wrote its snapshot, then emptying the journal failed at its ftruncate (EIO):
    the write was acknowledged, but the journal's old lines replay over the snapshot, and they
    said the claim the write had unprepared was still prepared."""
    monkeypatch.setattr("ascend_dra.durable.records.COMPACT_MIN_LINES", 0)
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    x = write_claim(tmp_path, claim_object("x", results=[("npu", "npu-1-0")]))
    assert isinstance((await state.prepare([ref(x)]))[x["metadata"]["uid"]], list)
    arm("journal:truncate=EIO")
    assert (await state.unprepare([ref(x)]))[x["metadata"]["uid"]] is None  # a compaction: nothing left
    assert x["metadata"]["uid"] not in ckpt.load(tmp_path / "plugin" / ckpt.CHECKPOINT_FILE).claims
    assert on_disk(tmp_path).claims == {}
    arm()
    y = write_claim(tmp_path, claim_object("y", results=[("npu", "npu-1-0")]))
    assert isinstance((await state.prepare([ref(y)]))[y["metadata"]["uid"]], list)
    assert set(on_disk(tmp_path).claims) == {y["metadata"]["uid"]}


@pytest.mark.anyio
async def test_an_unprepare_is_acknowledged_only_once_a_deletion_still_pending_is_durable(tmp_path):
    """A claim's record went out as PrepareCompleted, its spec then failed (ENOSPC) and so did the
    write of its deletion (EIO): the claim was gone in memory, still prepared on disk. The kubelet's
    Unprepare of it found nothing to do and was acknowledged with no write, and after a restart
    the record held its device for a claim the kubelet had released."""
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    bad = write_claim(tmp_path, claim_object("bad", results=[("npu", "npu-0-0")]))
    append = state.store.journal.append
    fail_the_spec_and_then_the_deletion(state, bad)
    assert isinstance((await state.prepare([ref(bad)]))[bad["metadata"]["uid"]], PrepareError)
    assert bad["metadata"]["uid"] in on_disk(tmp_path).claims  # its deletion could not be written

    def eio(data: bytes) -> None:  # and the disk still fails
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    state.store.journal.append = eio
    error = (await state.unprepare([ref(bad)]))[bad["metadata"]["uid"]]
    assert str(error).startswith("ResourceClaim default/bad: writing the checkpoint: Input/output error")
    state.store.journal.append = append  # the disk works again
    assert (await state.unprepare([ref(bad)]))[bad["metadata"]["uid"]] is None
    assert on_disk(tmp_path).claims == {}


@pytest.mark.anyio
async def test_a_replay_is_answered_only_once_its_record_as_answered_is_on_disk(tmp_path, arm):
    """An Unprepare's first write (the claim back to PrepareStarted) failed at its fdatasync, and so
    did cutting it off again: the record was put back as PrepareCompleted in memory, the file held
    PrepareStarted. The kubelet's next Prepare was answered from memory with no write, and a restart
    then rolled the claim back: an acknowledged Prepare was lost (a storm with disk faults found it)."""
    state = await make_state(tmp_path, {"effects": SideEffectProfile()})
    x = write_claim(tmp_path, claim_object("x", results=[("a", "hw-0")]))
    uid = x["metadata"]["uid"]
    answer = (await state.prepare([ref(x)]))[uid]
    arm("journal:sync=EIO", "journal:truncate=EIO")
    assert "writing the checkpoint: Input/output error" in str((await state.unprepare([ref(x)]))[uid])
    assert "writing the checkpoint: Input/output error" in str((await state.prepare([ref(x)]))[uid])
    arm()
    assert (await state.prepare([ref(x)]))[uid] == answer
    assert on_disk(tmp_path).claims[uid].state == "PrepareCompleted"
    restarted = await make_state(tmp_path, {"effects": SideEffectProfile()})
    assert restarted.prepared_claims[uid].state == "PrepareCompleted"
