"""journal.py and its use by DeviceState: one small durable append per change, torn tails, compaction."""

from __future__ import annotations

import asyncio
import errno
import subprocess
import threading

import anyio
import attrs
import orjson
import pytest

from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable import journal as jr
from ascend_dra.durable import records as records_module
from ascend_dra.durable.checkpoint import CheckpointCorrupt
from ascend_dra.profiles.fake import FakeProfile
from tests.claimfiles import claim_object, write_claim
from tests.unit.test_state import make_state, on_disk, ref


def record(uid: str, state: str = "PrepareCompleted") -> dict:
    return {"uid": uid, "namespace": "ns", "name": f"c-{uid}", "state": state, "boot_id": "b",
            "devices": [{"request": "npu", "pool": "node-1", "device": "npu-0-0", "cdi_device_ids": ["k=x"]}],
            "cdi_specs": [f"k_{uid}.yaml"]}


def opened(path) -> jr.Journal:
    journal = jr.Journal(path)
    journal.open(jr.read(path))
    return journal


def test_appended_changes_read_back_in_order_and_apply_over_the_snapshot(tmp_path):
    path = tmp_path / jr.JOURNAL_FILE
    journal = opened(path)
    journal.append(jr.change_lines([("a", record("a")), ("b", record("b"))]))
    journal.append(jr.change_lines([("a", None), ("b", record("b", "PrepareStarted"))]))
    contents = jr.read(path)
    assert [(uid, r and r["state"]) for uid, r in contents.changes] == [
        ("a", "PrepareCompleted"), ("b", "PrepareCompleted"), ("a", None), ("b", "PrepareStarted")]
    assert contents.good_size == path.stat().st_size and not contents.torn_tail
    snapshot = ckpt.decode_records({"c": record("c"), "a": record("a")}, boot_id="b")
    state = jr.apply_journal(snapshot, contents)
    assert sorted(state.claims) == ["b", "c"]
    assert state.claims["b"].state == "PrepareStarted"


def test_a_torn_last_line_is_dropped_and_cut_off_before_the_next_append(tmp_path):
    path = tmp_path / jr.JOURNAL_FILE
    journal = opened(path)
    journal.append(jr.change_lines([("a", record("a"))]))
    good = path.stat().st_size
    journal.close()
    for torn in (jr.change_lines([("b", record("b"))])[:-5], jr.change_lines([("b", record("b"))])[:-1]):
        with path.open("r+b") as f:
            f.truncate(good)
            f.seek(good)
            f.write(torn)
        contents = jr.read(path)
        assert [uid for uid, _ in contents.changes] == ["a"]
        assert (contents.good_size, contents.torn_tail) == (good, True)
    journal = opened(path)
    assert path.stat().st_size == good
    journal.append(jr.change_lines([("c", record("c"))]))
    assert [uid for uid, _ in jr.read(path).changes] == ["a", "c"]


def test_a_damaged_line_before_the_last_is_corrupt(tmp_path):
    path = tmp_path / jr.JOURNAL_FILE
    journal = opened(path)
    journal.append(jr.change_lines([("a", record("a")), ("b", record("b"))]))
    blob = path.read_bytes()
    path.write_bytes(blob.replace(b'"c-a"', b'"c-z"'))
    with pytest.raises(CheckpointCorrupt) as raised:
        jr.read(path)
    assert raised.value.reason == "line 2 of the journal fails its checksum (the file was modified or damaged)"


def _two_appends(path) -> tuple[bytes, int]:
    journal = opened(path)
    journal.append(jr.change_lines([("a", record("a"))]))
    good = path.stat().st_size
    journal.append(jr.change_lines([("b", record("b")), ("c", record("c"))]))
    journal.close()
    return path.read_bytes(), good


def test_a_flipped_bit_in_the_last_acknowledged_line_is_damage_not_a_torn_append(tmp_path):
    """The last line of the last append was fdatasynced and answered: cutting it off as torn forgot
    a prepared claim, whose spec start-up then removed and whose device it gave away (an audit of
    faults)."""
    path = tmp_path / jr.JOURNAL_FILE
    blob, _ = _two_appends(path)
    path.write_bytes(blob[:-20] + bytes([blob[-20] ^ 0x01]) + blob[-19:])
    with pytest.raises(CheckpointCorrupt) as raised:
        jr.read(path)
    assert raised.value.reason == "line 6 of the journal fails its checksum (the file was modified or damaged)"


def test_a_hole_of_nul_bytes_in_the_last_append_drops_it_from_the_hole_on(tmp_path):
    """A crash before the fdatasync returned may leave pages of the new bytes unwritten (NULs), also
    before the append's last line: that append was never acknowledged."""
    path = tmp_path / jr.JOURNAL_FILE
    blob, good = _two_appends(path)
    hole = good + 40  # inside b's line; c's line after it is intact
    path.write_bytes(blob[:hole] + b"\0" * 30 + blob[hole + 30:])
    contents = jr.read(path)
    assert [uid for uid, _ in contents.changes] == ["a"]
    assert (contents.good_size, contents.torn_tail) == (good, True)


def test_a_hole_of_nul_bytes_followed_by_a_later_write_is_damage(tmp_path):
    """A zeroed block on a failing disk, not a crash: the write after it was acknowledged, so the
    hole's was too. Read as torn, every acknowledged line after it was dropped and cut off (a review)."""
    path = tmp_path / jr.JOURNAL_FILE
    blob, _ = _two_appends(path)
    hole = len(jr._HEADER_LINE) + 40  # inside a's line; b's append follows
    path.write_bytes(blob[:hole] + b"\0" * 30 + blob[hole + 30:])
    with pytest.raises(CheckpointCorrupt) as raised:
        jr.read(path)
    assert raised.value.reason == ("line 2 of the journal fails its checksum (the file was modified or damaged), "
                                   "and a later write follows it")


def test_a_zeroed_block_that_took_the_previous_commit_line_is_damage_not_the_last_write_torn(tmp_path):
    """The first intact commit after the hole was the last append's own, so the hole read as torn
    and two acknowledged appends were dropped (a second review): the commit line names where its
    append began."""
    path = tmp_path / jr.JOURNAL_FILE
    journal = opened(path)
    ends = []
    for uid in ("c0", "c1", "c2"):
        journal.append(jr.change_lines([(uid, record(uid))]))
        ends.append(path.stat().st_size)
    blob = path.read_bytes()
    start, stop = ends[1] - 120, ends[1] + 50  # c1's tail, its commit line, the start of c2's append
    path.write_bytes(blob[:start] + b"\0" * (stop - start) + blob[stop:])
    with pytest.raises(CheckpointCorrupt, match="and a later write follows it"):
        jr.read(path)


def test_lines_another_instance_left_unsynced_are_made_durable_before_an_append_follows_them(tmp_path,
                                                                                           monkeypatch):
    """An instance killed between its write and its fdatasync leaves its lines in the page cache;
    appended after without a sync, a power loss could leave a hole in them followed by a later
    write, which start-up refuses as damage (a second review)."""
    path = tmp_path / jr.JOURNAL_FILE
    mine, theirs = opened(path), opened(path)
    theirs.append(jr.change_lines([("a", record("a"))]))
    synced = []
    monkeypatch.setattr(jr.os, "fdatasync", lambda fd, real=jr.os.fdatasync: (synced.append(fd), real(fd)))
    mine.reposition(jr.read_tail(path, mine.size), mine.lines + 1)
    assert synced == [mine.fileno()]


def test_each_append_ends_with_a_commit_line_an_older_release_reads_as_a_deletion_of_no_claim(tmp_path):
    path = tmp_path / jr.JOURNAL_FILE
    journal = opened(path)
    journal.append(jr.change_lines([("a", record("a")), ("b", record("b"))]))
    last = path.read_bytes().splitlines()[-1]
    assert orjson.loads(last[33:]) == {"uid": "", "deleted": True, "commit": 2, "at": len(jr._HEADER_LINE)}
    assert [uid for uid, _ in jr.read(path).changes] == ["a", "b"] and journal.lines == 2


@pytest.mark.parametrize("damage", ["zeroed", "garbage"])
def test_a_journal_whose_header_is_gone_is_damage_unless_only_the_header_was_being_written(tmp_path, damage):
    path = tmp_path / jr.JOURNAL_FILE
    blob, _ = _two_appends(path)
    path.write_bytes(b"\0" * len(blob) if damage == "zeroed" else b"x" + blob[1:])
    with pytest.raises(CheckpointCorrupt, match="the journal's first line is not its header"):
        jr.read(path)
    for torn in (jr._HEADER_LINE[:10], b"\0" * len(jr._HEADER_LINE), jr._HEADER_LINE[:20] + b"\0" * 5):
        path.write_bytes(torn)  # a crash while a new or just emptied journal got its header: nothing in it
        assert jr.read(path) == jr.JournalContents((), 0, True)


@pytest.mark.parametrize("entry", [{"uid": "a", "annotate": {"x": 1}}, {"uid": "a", "record": None},
                                   {"uid": "a", "record": ["x"]}, {"uid": "a", "deleted": True, "record": {}}],
                         ids=["another kind", "null record", "record not an object", "both"])
def test_a_line_that_is_neither_a_record_nor_a_deletion_is_damage_not_a_deletion(tmp_path, entry):
    """Any line without ``record`` was read as "claim deleted": a newer release's line kind made an
    older one forget claim a and give its device away (an audit of faults)."""
    path = tmp_path / jr.JOURNAL_FILE
    _two_appends(path)
    with path.open("ab") as f:
        f.write(jr._line(orjson.dumps(entry)))
    with pytest.raises(CheckpointCorrupt, match="line 7 of the journal is neither a record nor a deletion"):
        jr.read(path)


def test_a_compaction_whose_header_write_fails_leaves_a_journal_the_next_start_reads(tmp_path, monkeypatch):
    """EIO at the fdatasync of the emptied journal's header: later appends went at the old size,
    after a hole, and the next start-up refused the journal as damaged (an audit of faults)."""
    path = tmp_path / jr.JOURNAL_FILE
    journal = opened(path)
    journal.append(jr.change_lines([("a", record("a")), ("b", record("b"))]))
    real = jr.os.fdatasync

    def eio(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(jr.os, "fdatasync", eio)
    with pytest.raises(OSError):
        journal.reset()
    monkeypatch.setattr(jr.os, "fdatasync", real)
    journal.append(jr.change_lines([("c", record("c"))]))
    contents = jr.read(path)
    assert [uid for uid, _ in contents.changes] == ["c"] and not contents.torn_tail
    assert journal.lines == 1 and journal.size == path.stat().st_size


def test_a_journal_that_links_to_nothing_is_not_an_empty_journal(tmp_path):
    """It read as no changes, and opening it for appends created the link's target (a review)."""
    path = tmp_path / jr.JOURNAL_FILE
    path.symlink_to(tmp_path / "unmounted" / jr.JOURNAL_FILE)
    with pytest.raises(CheckpointCorrupt, match=r"it is a symbolic link to .*, which does not exist"):
        jr.read(path)


def test_a_journal_with_another_header_is_corrupt(tmp_path):
    path = tmp_path / jr.JOURNAL_FILE
    path.write_bytes(jr._line(b'{"kind":"Other","version":1}') + jr.change_lines([("a", record("a"))]))
    with pytest.raises(CheckpointCorrupt, match="the journal's header is"):
        jr.read(path)


def test_replaying_the_journal_over_the_snapshot_it_was_compacted_into_gives_the_same_state(tmp_path):
    # A crash between writing the new snapshot and emptying the journal.
    changes = [("a", record("a")), ("b", record("b")), ("a", None), ("c", record("c", "PrepareStarted"))]
    contents = jr.JournalContents(tuple(changes), 1, False)
    once = jr.apply_journal(ckpt.decode_records({"x": record("x")}), contents)
    twice = jr.apply_journal(ckpt.decode_records(dict(once.raw)), contents)
    assert twice.claims == once.claims and sorted(once.claims) == ["b", "c", "x"]


@pytest.fixture
def tiny_tmpfs(short_tmp):
    mountpoint = short_tmp / "tmpfs"
    mountpoint.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mountpoint)], check=True)
    yield mountpoint
    subprocess.run(["umount", str(mountpoint)], check=True)


def test_a_failed_append_leaves_no_partial_line(tiny_tmpfs):
    path = tiny_tmpfs / jr.JOURNAL_FILE
    journal = opened(path)
    journal.append(jr.change_lines([("a", record("a"))]))
    before = path.read_bytes()
    with pytest.raises(OSError) as raised:
        journal.append(jr.change_lines([(f"u{i}", record(f"u{i}")) for i in range(200)]))  # > 16 KiB
    assert raised.value.errno == errno.ENOSPC
    assert path.read_bytes() == before
    journal.append(jr.change_lines([("b", record("b"))]))
    assert [uid for uid, _ in jr.read(path).changes] == ["a", "b"]
    journal.close()


# -- DeviceState on the journal ---------------------------------------------------------------------


async def prepared(root, n: int):
    state = await make_state(root, {"fake": FakeProfile()})
    claims = [write_claim(root, claim_object(f"c{i}", results=[("npu", f"npu-{i}-0")])) for i in range(n)]
    if claims:
        await state.prepare([ref(c) for c in claims])
    return state


@pytest.mark.anyio
@pytest.mark.parametrize("held", [0, 200])
async def test_a_prepare_appends_one_line_whatever_the_number_of_prepared_claims(tmp_path, held):
    state = await prepared(tmp_path, 0)
    state.profile_ctx = attrs.evolve(state.profile_ctx, fake_devices=256)
    profile = state.profiles["fake"]
    state.set_inventories({"fake": await profile.discover(state.profile_ctx)})
    claims = [write_claim(tmp_path, claim_object(f"c{i}", results=[("npu", f"npu-{i}-0")])) for i in range(held)]
    for i in range(0, held, 50):
        await state.prepare([ref(c) for c in claims[i:i + 50]])
    snapshot = tmp_path / "plugin" / ckpt.CHECKPOINT_FILE
    snapshot_before = snapshot.stat().st_ino if snapshot.exists() else None
    journal = tmp_path / "plugin" / jr.JOURNAL_FILE
    size = journal.stat().st_size
    last = write_claim(tmp_path, claim_object("last", results=[("npu", "npu-250-0")]))
    await state.prepare([ref(last)])
    grown = journal.read_bytes()[size:]
    # The PrepareCompleted record (no side effects: no PrepareStarted) and the append's commit line.
    assert grown.count(b"\n") == 2
    assert len(grown) < 1024
    assert (snapshot.stat().st_ino if snapshot.exists() else None) == snapshot_before  # not rewritten
    assert on_disk(tmp_path).claims[last["metadata"]["uid"]].state == "PrepareCompleted"


@pytest.mark.anyio
async def test_the_journal_is_compacted_into_a_snapshot_past_its_threshold(tmp_path, monkeypatch):
    monkeypatch.setattr(records_module, "COMPACT_MIN_LINES", 4)
    state = await prepared(tmp_path, 1)
    held = next(iter(state.prepared_claims))
    churn = write_claim(tmp_path, claim_object("churn", results=[("npu", "npu-3-0")]))
    for _ in range(10):  # 20 changes over 1-2 records: past max(4, 2 x records) lines, it compacts
        await state.prepare([ref(churn)])
        await state.unprepare([ref(churn)])
        assert state.journal.lines <= 4
    assert held in ckpt.load(tmp_path / "plugin" / ckpt.CHECKPOINT_FILE).claims  # folded into the snapshot
    assert list(on_disk(tmp_path).claims) == [held]


@pytest.mark.anyio
async def test_a_clean_close_leaves_the_whole_state_in_the_snapshot_for_an_older_release(tmp_path):
    state = await prepared(tmp_path, 3)
    uids = sorted(state.prepared_claims)
    await state.close()
    assert sorted(ckpt.load(tmp_path / "plugin" / ckpt.CHECKPOINT_FILE).claims) == uids  # the snapshot alone
    assert jr.read(tmp_path / "plugin" / jr.JOURNAL_FILE).changes == ()


@pytest.mark.anyio
async def test_start_up_applies_the_journal_and_compacts_it(tmp_path):
    state = await prepared(tmp_path, 2)
    uids = sorted(state.prepared_claims)
    state.journal.close()  # a kill -9: no compaction
    assert jr.read(tmp_path / "plugin" / jr.JOURNAL_FILE).changes
    restarted = await make_state(tmp_path, {"fake": FakeProfile()})
    assert sorted(restarted.prepared_claims) == uids
    assert sorted(ckpt.load(tmp_path / "plugin" / ckpt.CHECKPOINT_FILE).claims) == uids
    assert jr.read(tmp_path / "plugin" / jr.JOURNAL_FILE).changes == ()


@pytest.mark.anyio
async def test_a_prepare_and_an_unprepare_pass_through_the_event_loop_at_most_three_times(tmp_path):
    # Each loop turn is an epoll_wait and a pass over the ready callbacks, on the path every Prepare
    # waits on; the floor is the durable write's hand-off to the writer thread and back (2 turns).
    # With anyio's thread pool, locks and a task group per call it was 9 per Prepare, 6 per Unprepare.
    state = await prepared(tmp_path, 0)
    loop = asyncio.get_running_loop()
    turns = 0
    run_once = loop._run_once

    def counted() -> None:
        nonlocal turns
        turns += 1
        run_once()

    loop._run_once = counted
    try:
        for i in range(3):
            claim = write_claim(tmp_path, claim_object(f"t{i}", results=[("npu", f"npu-{i}-0")]))
            turns = 0
            result = await state.prepare([ref(claim)])
            prepare_turns = turns
            assert isinstance(result[claim["metadata"]["uid"]], list)
            turns = 0
            assert await state.unprepare([ref(claim)]) == {claim["metadata"]["uid"]: None}
            assert prepare_turns <= 3 and turns <= 3, (prepare_turns, turns)
    finally:
        del loop._run_once


@pytest.mark.anyio
async def test_a_cancelled_save_returns_only_after_its_append_has_ended(tmp_path, monkeypatch):
    # The append runs on the writer thread; a caller cancelled meanwhile must not go on (and let
    # another save append at the same offset from elsewhere) before the append has ended.
    state = await prepared(tmp_path, 0)
    started, release = threading.Event(), threading.Event()
    append = state.journal.append

    def slow_append(data: bytes) -> None:
        started.set()
        release.wait(10)
        append(data)

    monkeypatch.setattr(state.journal, "append", slow_append)
    claim = write_claim(tmp_path, claim_object("slow", results=[("npu", "npu-1-0")]))
    ended_before_return: list[bool] = []
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            try:
                await state.prepare([ref(claim)])
            finally:
                ended_before_return.append(release.is_set())

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.to_thread.run_sync(started.wait, 10)
        scope.cancel()
        await anyio.sleep(0.05)  # the cancelled Prepare would have returned by now if it could
        assert ended_before_return == []
        release.set()
    assert ended_before_return == [True]
    # The append went through whole: the claim is durable and the journal reads back intact.
    assert on_disk(tmp_path).claims[claim["metadata"]["uid"]].state == "PrepareCompleted"
