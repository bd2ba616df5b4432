"""records.py in shared mode (--rolling-update-id): two instances' ClaimRecords over one plugin
directory see each other's changes under the checkpoint lock, whichever way they were written."""

from __future__ import annotations

import errno
import fcntl
import os

import anyio
import pytest

from ascend_dra.cdi.store import CdiStore
from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable import journal as jr
from ascend_dra.durable.checkpoint import ClaimRecord, DeviceRecord
from ascend_dra.durable.records import ClaimRecords
from ascend_dra.durable.sharedlock import CheckpointLock
from ascend_dra.profiles.base import ProfileContext
from ascend_dra.profiles.fake import FakeProfile
from ascend_dra.state.claims import StandaloneClaimSource
from ascend_dra.state.devicestate import DeviceState
from tests.claimfiles import claim_object, write_claim
from tests.unit.test_state import DRIVER, NODE, SideEffectProfile, on_disk, ref

pytestmark = pytest.mark.anyio


def rec(uid: str, device: str = "npu-0-0", state: str = ckpt.PREPARE_COMPLETED) -> ClaimRecord:
    return ClaimRecord(uid, "ns", f"c-{uid}", state, "boot",
                       (DeviceRecord("npu", "node-1", device, (f"k=x-{uid}",)),), (f"k_{uid}.yaml",))


async def opened(tmp_path, seen: dict | None = None) -> ClaimRecords:
    records = ClaimRecords(tmp_path, "boot", on_change=(lambda uid, r: seen.__setitem__(uid, r)) if seen is not None
                           else None, shared=True)
    async with records.exclusive():
        await records.load()
    return records


async def change(records: ClaimRecords, uid: str, record: ClaimRecord | None, *, compact: bool = False) -> None:
    async with records.exclusive():
        if record is None:
            del records.table[uid]
        else:
            records.table[uid] = record
        await records.save(compact=compact)


async def test_an_instance_sees_the_other_instances_appends_from_the_journal_tail(tmp_path):
    seen: dict = {}
    a, b = await opened(tmp_path), await opened(tmp_path, seen)
    await change(a, "x", rec("x"))
    await change(a, "y", rec("y", "npu-1-0"))
    async with b.exclusive():
        assert sorted(b.table) == ["x", "y"] and b.table["x"] == rec("x")
        assert not b.table.has_dirty  # on disk already: b must not write them again
    assert b.syncs == {"tail": 1, "reload": 0}
    assert seen["x"] == rec("x")  # the guard's hold index hears of it
    await change(b, "x", None)
    async with a.exclusive():
        assert sorted(a.table) == ["y"]
    await change(a, "z", rec("z"))  # a appends after b's line, not over it
    assert sorted(jr.load_state(tmp_path).claims) == ["y", "z"]
    async with b.exclusive():
        assert sorted(b.table) == ["y", "z"]
    assert seen.get("x", "absent") is None


async def test_a_snapshot_written_by_the_other_instance_is_read_again_whole(tmp_path):
    seen: dict = {}
    a, b = await opened(tmp_path), await opened(tmp_path, seen)
    await change(b, "gone", rec("gone", "npu-2-0"))
    await change(a, "x", rec("x"))
    async with a.exclusive():
        del a.table["gone"]
        await a.save(compact=True)  # new snapshot, emptied journal
    await change(a, "y", rec("y", "npu-1-0"))
    async with b.exclusive():
        assert sorted(b.table) == ["x", "y"]
    assert b.syncs["reload"] == 1
    assert seen["gone"] is None  # the dropped record leaves b's hold index too
    await change(b, "w", rec("w", "npu-3-0"))
    assert sorted(jr.load_state(tmp_path).claims) == ["w", "x", "y"]


async def test_closing_one_instance_compacts_every_instances_records(tmp_path):
    a, b = await opened(tmp_path), await opened(tmp_path)
    await change(a, "x", rec("x"))
    await change(b, "y", rec("y", "npu-1-0"))
    await a.close()  # the old instance stops while b serves on
    snapshot = ckpt.load(ckpt.checkpoint_path(tmp_path))
    assert sorted(snapshot.claims) == ["x", "y"]
    assert jr.read(tmp_path / jr.JOURNAL_FILE).changes == ()
    await change(b, "z", rec("z", "npu-2-0"))
    assert sorted(jr.load_state(tmp_path).claims) == ["x", "y", "z"]


async def test_a_torn_append_of_a_dead_instance_is_cut_off_by_the_next_holder(tmp_path):
    a, b = await opened(tmp_path), await opened(tmp_path)
    await change(a, "x", rec("x"))
    with (tmp_path / jr.JOURNAL_FILE).open("ab") as f:  # a third instance died half-way through an append
        f.write(jr.change_lines([("t", ckpt.RecordTable({"t": rec("t")}).stored("t"))])[:-7])
    await change(b, "y", rec("y", "npu-1-0"))
    assert sorted(jr.load_state(tmp_path).claims) == ["x", "y"]
    assert not jr.read(tmp_path / jr.JOURNAL_FILE).torn_tail


async def test_the_checkpoint_lock_excludes_another_process_until_it_lets_go(tmp_path):
    records = await opened(tmp_path)
    fd = os.open(tmp_path / CheckpointLock.FILE, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as another instance would hold it
    entered = anyio.Event()

    async def enter() -> None:
        async with records.exclusive():
            entered.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(enter)
        with anyio.move_on_after(0.2):
            await entered.wait()
        assert not entered.is_set()
        os.close(fd)
        with anyio.fail_after(2):
            await entered.wait()


async def test_overlapping_operations_of_one_instance_share_a_hold_and_its_writes(tmp_path, monkeypatch):
    """16 operations at once: one hold of the lock, group-committed appends as in unshared mode (each
    operation took the lock and wrote alone: 16 holds, 16 fdatasyncs)."""
    records = await opened(tmp_path)
    holds, appends = [], []
    real_acquire, real_append = records._lock.acquire, records.journal.append

    async def counting_acquire() -> None:
        holds.append(1)
        await real_acquire()

    monkeypatch.setattr(records._lock, "acquire", counting_acquire)
    monkeypatch.setattr(records.journal, "append", lambda lines: appends.append(1) or real_append(lines))
    async with anyio.create_task_group() as tg:
        for i in range(16):
            tg.start_soon(change, records, f"u{i}", rec(f"u{i}", f"npu-{i}-0"))
    assert len(holds) == 1
    assert 1 <= len(appends) < 16
    assert sorted(jr.load_state(tmp_path).claims) == sorted(f"u{i}" for i in range(16))


@pytest.mark.parametrize("gap", [0.002, 0.005, 0.02])
async def test_an_instance_always_busy_still_lets_the_other_in_within_a_turn(tmp_path, gap):
    """One instance starts a 10 ms operation every ``gap`` seconds for 2 s; the other, polling as
    sharedlock.acquire does (1 ms doubling to 20 ms), must get the lock each time within a turn or so.
    Found by review: new arrivals took the lock in the gap after each hold, and the other instance
    waited up to 15 s."""
    from ascend_dra.durable.records import SHARED_TURN_S
    from ascend_dra.durable.sharedlock import acquire

    records = await opened(tmp_path)
    other = os.open(tmp_path / CheckpointLock.FILE, os.O_RDWR)
    waits: list[float] = []

    async def operation() -> None:
        async with records.exclusive():
            await anyio.sleep(0.01)

    async def other_instance() -> None:
        for _ in range(5):
            started = anyio.current_time()
            await acquire(other)
            waits.append(anyio.current_time() - started)
            await anyio.sleep(0.005)
            fcntl.flock(other, fcntl.LOCK_UN)
            await anyio.sleep(0.05)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(other_instance)
            end = anyio.current_time() + 2.0
            while anyio.current_time() < end or len(waits) < 5:
                tg.start_soon(operation)
                await anyio.sleep(gap)
    finally:
        os.close(other)
    assert max(waits) < SHARED_TURN_S + 0.3, waits


async def test_without_shared_mode_there_is_no_lock_file(tmp_path):
    records = ClaimRecords(tmp_path, "boot")
    async with records.exclusive():
        await records.load()
    assert not (tmp_path / CheckpointLock.FILE).exists()


async def shared_state(root, profiles):
    ctx = ProfileContext(node_name=NODE, driver_name=DRIVER, fake_devices=4, state_dir=root / "state")
    (root / "plugin").mkdir(parents=True, exist_ok=True)
    state = DeviceState(driver_name=DRIVER, node_name=NODE, profiles=profiles,
                        inventories={n: await p.discover(ctx) for n, p in profiles.items()}, profile_ctx=ctx,
                        cdi=CdiStore(root / "cdi"), plugin_dir=root / "plugin", boot_id="boot-1",
                        claim_source=StandaloneClaimSource(root / "claims", DRIVER), shared=True)
    async with state.store.exclusive():
        await state.recover()
    return state


async def test_two_instances_never_book_one_device_twice_and_answer_each_others_claims(tmp_path):
    old = await shared_state(tmp_path, {"fake": FakeProfile()})
    new = await shared_state(tmp_path, {"fake": FakeProfile()})
    first = write_claim(tmp_path, claim_object("first"))  # both on npu-0-0
    second = write_claim(tmp_path, claim_object("second"))
    uid1, uid2 = first["metadata"]["uid"], second["metadata"]["uid"]
    answer = (await old.prepare([ref(first)]))[uid1]
    assert isinstance(answer, list)
    refused = (await new.prepare([ref(second)]))[uid2]
    assert "already prepared for ResourceClaim default/first" in str(refused)
    assert (await new.prepare([ref(first)]))[uid1] == answer  # a replay on the other instance
    assert (await new.unprepare([ref(first)]))[uid1] is None
    assert isinstance((await old.prepare([ref(second)]))[uid2], list)  # old sees npu-0-0 free again
    assert "already prepared" in str((await new.prepare([ref(first)]))[uid1])
    await old.close()
    assert sorted(jr.load_state(tmp_path / "plugin").claims) == [uid2]
    assert uid2 in new.prepared_claims


async def test_changes_a_cancelled_operation_never_wrote_are_dropped_before_the_next_decision(tmp_path):
    a, b = await opened(tmp_path), await opened(tmp_path)
    with anyio.move_on_after(0.05):
        async with a.exclusive():
            a.table["phantom"] = rec("phantom", state=ckpt.PREPARE_STARTED)  # reserved in memory only
            await anyio.sleep(1)  # cancelled here, before the write (a kubelet call that timed out)
    await change(b, "real", rec("real"))  # b books the same device meanwhile: it never saw the phantom
    async with a.exclusive():
        assert sorted(a.table) == ["real"]  # a reads the files again instead of writing its phantom
        await a.save()
    assert sorted(jr.load_state(tmp_path).claims) == ["real"]


async def test_a_prepare_rolled_back_after_a_failed_write_does_not_come_back_from_the_files(tmp_path, monkeypatch):
    """Its PrepareStarted record was durable; the rollback deleted it in memory only, the next hold
    read it back from the files, and nothing rolled it back again: the device stayed refused to
    every other claim until a restart (a review)."""
    state = await shared_state(tmp_path, {"effects": SideEffectProfile()})
    journal = state.store.journal
    real = journal.append
    calls = {"n": 0}

    def full_at_the_completed_write(data: bytes) -> None:  # PrepareStarted, then PrepareCompleted
        calls["n"] += 1
        if calls["n"] >= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(data)

    monkeypatch.setattr(journal, "append", full_at_the_completed_write)
    a = write_claim(tmp_path, claim_object("a", results=[("x", "hw-0")]))
    assert "No space left on device" in str((await state.prepare([ref(a)]))[a["metadata"]["uid"]])
    monkeypatch.setattr(journal, "append", real)  # the disk has room again
    b = write_claim(tmp_path, claim_object("b", results=[("x", "hw-0")]))
    await state.prepare([ref(b)])  # the hold that reads the files again
    await state.retry_cleanup()
    assert isinstance((await state.prepare([ref(b)]))[b["metadata"]["uid"]], list)
    assert sorted(r.name for r in on_disk(tmp_path).claims.values()) == ["b"]
