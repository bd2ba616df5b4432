"""The node's durable claim records: the snapshot and journal on disk, the table in memory.

:class:`ClaimRecords` loads both files (checkpoint.py, journal.py), hands out the
:class:`~ascend_dra.durable.checkpoint.RecordTable` that DeviceState changes, and makes those changes durable
with group-committed journal appends and, now and then, a new snapshot (docs/durable-state.md).

Shared mode (``--rolling-update-id``: two instances on one node serve at once) adds
:meth:`ClaimRecords.exclusive`: every read-modify-write of the records runs inside it, under a
cross-process lock, and starts by reading what the other instance wrote since (the journal's tail,
or both files again after it wrote a new snapshot), so each decision sees every instance's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio

from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.evidence import few
from ascend_dra.durable.journal import JOURNAL_FILE, Journal, JournalContents, apply_journal, change_lines, read_tail
from ascend_dra.durable.journal import read as read_journal
from ascend_dra.durable.sharedlock import POLL_MAX_S, CheckpointLock

__all__ = ("COMPACT_MIN_LINES", "SHARED_TURN_S", "ClaimRecords")

log = logging.getLogger(__name__)

#: The journal is compacted into a new snapshot when it holds more change lines than this, or than
#: twice the number of records: a write stays O(1), and compaction is amortised O(1) per write.
COMPACT_MIN_LINES = 1024

#: Shared mode: seconds one hold of the checkpoint lock admits more of this process's operations.
#: Operations that overlap share the hold and so its group-committed writes (one at a time, 16
#: Prepares in flight ran at half the unshared rate); the bound lets the other instance in.
SHARED_TURN_S = 0.2


class ClaimRecords:
    """The durable records of one plugin data directory.

    :param plugin_dir: holds ``checkpoint.json`` and ``checkpoint.journal``.
    :param boot_id: the current boot id, written into every snapshot.
    :param on_change: called with ``(uid, record or None)`` for every record loaded and changed.
    :param shared: other instances use the same files at the same time (see :meth:`exclusive`).
    :param evidence: what else on the node says claims were prepared (blocking; one line each,
        naming a file), asked only when the snapshot is damaged and names no claim (see :meth:`_read`).
    """

    def __init__(self, plugin_dir: Path, boot_id: str,
                 on_change: Callable[[str, Any], None] | None = None, *, shared: bool = False,
                 on_started: Callable[[str], None] | None = None,
                 evidence: Callable[[], list[str]] | None = None) -> None:
        self.checkpoint_path = ckpt.checkpoint_path(plugin_dir)
        self.journal = Journal(Path(plugin_dir) / JOURNAL_FILE)
        self.boot_id = boot_id
        self._on_change = on_change
        # Told of every PrepareStarted record read back from the files in shared mode: an operation
        # ends inside one hold, so such a record is never in flight; it was left by a failed or
        # killed operation (of either instance) and needs rolling back.
        self._on_started = on_started
        self._evidence = evidence or (lambda: [])
        self.table = ckpt.RecordTable(on_change=on_change)
        self._flush_lock = anyio.Lock(fast_acquire=True)  # see DeviceState._lock_claims
        # Appends and snapshots run on one thread of their own, one at a time, in order; see _on_writer.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ascend-dra-journal")
        self.write_failures = 0  # writes that failed with an OSError since start (a metric)
        # After a failed compaction the journal takes the writes, and the next compaction waits until
        # it has grown by as much again (a full disk must not cost a whole snapshot per write).
        self._compact_after = 0
        self._version = 0  # bumped by every save call
        self._durable = 0  # the highest version known to be on disk
        self.shared = shared
        self._lock = CheckpointLock(Path(plugin_dir)) if shared else None
        self._loaded = False
        self._snapshot_fd: int | None = None  # the snapshot last read or written (shared mode)
        self._stale = False  # the table may hold changes that are not on disk (shared mode)
        self._holders = 0  # tasks of this process inside exclusive() (shared mode)
        self._streak_since = 0.0  # when the current streak of holds began (see _enter)
        self._released_at = float("-inf")  # when this process last released the lock
        self._yield_until = 0.0  # no hold of ours before this (the other instance's turn)
        self._acquiring = anyio.Lock()
        self._released = anyio.Event()
        self.syncs = {"tail": 0, "reload": 0}  # how often the other instance's writes were read

    async def load(self) -> tuple[ckpt.CheckpointData, JournalContents]:
        """Read the snapshot and the journal, build :attr:`table`, open the journal for appends.

        :raises checkpoint.CheckpointCorrupt: a damaged snapshot that records claims, or a damaged journal.
        """
        data, journal = await anyio.to_thread.run_sync(self._read)
        self.table = ckpt.RecordTable.from_data(data, on_change=self._on_change)
        await anyio.to_thread.run_sync(self.journal.open, journal)
        self._loaded = True
        return data, journal

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Run a read-modify-write of the records: in shared mode, inside a hold of the checkpoint
        lock (no other instance holds it meanwhile; this process's overlapping operations share
        one hold, as they share the table when unshared), the hold starting by bringing
        :attr:`table` up to date with what other instances wrote; otherwise do nothing (this
        process is the only writer).

        Every change made inside must be saved before the context exits (the next hold, of this
        instance or another, reads the files, not this process's memory). When one is not (the
        operation was cancelled, a write failed), the table may differ from the files, and the
        next hold in this process reads both files again instead of trusting it.

        :raises checkpoint.CheckpointCorrupt: another instance left files this one cannot read.
        """
        if self._lock is None:
            yield
            return
        await self._enter()
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            self._leave(failed)

    async def _enter(self) -> None:
        """Join this process's hold of the checkpoint lock, or take it (and read the other
        instances' writes) when nobody here holds it.

        Fairness to the other instance, which polls the lock every 1 to 20 ms
        (:data:`~ascend_dra.durable.sharedlock.POLL_MAX_S`): holds that follow each other closer than one
        poll form a *streak*; a streak admits new operations for :data:`SHARED_TURN_S`, and when it
        ends, nobody here takes the lock again for two polls, so a waiting instance gets it.
        """
        while True:
            now = time.monotonic()
            if self._holders and now - self._streak_since < SHARED_TURN_S:
                self._holders += 1  # the lock is ours and the table current: group commit as unshared
                return
            if self._holders:
                await self._released.wait()
                continue
            if now < self._yield_until:
                await anyio.sleep(self._yield_until - now)
                continue
            async with self._acquiring:
                if self._holders or time.monotonic() < self._yield_until:
                    continue  # another task of ours took it, or gave it up, meanwhile: see above
                await self._lock.acquire()
                try:
                    if self._loaded:
                        await self._sync()
                except BaseException:
                    self._lock.release()
                    raise
                now = time.monotonic()
                if now - self._released_at > POLL_MAX_S:
                    self._streak_since = now  # the other instance had a chance since the last hold
                self._released = anyio.Event()
                self._holders = 1
                return

    def _leave(self, failed: bool) -> None:
        """End one task's part of the hold; the last one out releases the lock. Changes left
        unsaved then (a failed or cancelled operation) make the next hold read the files again."""
        self._stale = self._stale or failed
        self._holders -= 1
        if self._holders == 0:
            self._stale = self._stale or self.table.has_dirty
            self._lock.release()
            self._released_at = now = time.monotonic()
            if now - self._streak_since >= SHARED_TURN_S:
                self._yield_until = now + 2 * POLL_MAX_S  # the streak's turn is over: let the other in
            self._released.set()

    async def _sync(self) -> None:
        """Read what other instances wrote since this one last held the lock (lock held)."""
        journal_size = os.fstat(self.journal.fileno()).st_size
        if self._stale or self._snapshot_changed() or journal_size < self.journal.size:
            self.syncs["reload"] += 1
            old = self.table
            data, contents = await anyio.to_thread.run_sync(self._read)
            self.table = ckpt.RecordTable.from_data(data, on_change=self._on_change)
            if self._on_change is not None:
                for uid in (set(old) | set(old.unreadable)) - set(self.table) - set(self.table.unreadable):
                    self._on_change(uid, None)
            await anyio.to_thread.run_sync(self.journal.reposition, contents)
            self._stale = False
            started = [uid for uid in self.table if self.table[uid].state == ckpt.PREPARE_STARTED]
        elif journal_size > self.journal.size:
            self.syncs["tail"] += 1
            tail = await anyio.to_thread.run_sync(read_tail, self.journal.path, self.journal.size)
            for uid, stored in tail.changes:
                self.table.apply_stored(uid, stored)
            await anyio.to_thread.run_sync(self.journal.reposition, tail, self.journal.lines + len(tail.changes))
            started = [uid for uid, _ in tail.changes
                       if uid in self.table and self.table[uid].state == ckpt.PREPARE_STARTED]
        else:
            return
        if self._on_started is not None:
            for uid in started:
                self._on_started(uid)

    def _remember_snapshot(self) -> None:
        """Keep the current snapshot open (blocking), so that its inode number is not reused and a
        new snapshot (another instance's compaction) is recognised by :meth:`_snapshot_changed`."""
        if self._snapshot_fd is not None:
            os.close(self._snapshot_fd)
            self._snapshot_fd = None
        with contextlib.suppress(FileNotFoundError):
            self._snapshot_fd = os.open(self.checkpoint_path, os.O_RDONLY | os.O_CLOEXEC)

    def _snapshot_changed(self) -> bool:
        try:
            now = os.stat(self.checkpoint_path)
        except FileNotFoundError:
            return self._snapshot_fd is not None
        if self._snapshot_fd is None:
            return True
        held = os.fstat(self._snapshot_fd)
        return (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino)

    def _read(self) -> tuple[ckpt.CheckpointData, JournalContents]:
        """The snapshot with the journal applied (blocking).

        A damaged snapshot that names no claim (zero bytes, ``null``, ...: ``records_nothing``) says
        nothing about what it held. It is set aside (renamed ``checkpoint.json.corrupt-<unix time>``)
        only when nothing else says a claim was prepared: no change in the journal, nothing that
        ``evidence`` finds (our claim CDI specs, a profile's own records). Otherwise it is damage
        like any other, and start-up stops (docs/durable-state.md, "A damaged checkpoint").

        :raises checkpoint.CheckpointCorrupt: either file is damaged (see above).
        """
        try:
            data, damaged = ckpt.load(self.checkpoint_path), None
        except ckpt.CheckpointCorrupt as exc:
            if not exc.records_nothing:
                raise
            data, damaged = ckpt.CheckpointData(), exc
        journal = read_journal(self.journal.path)
        if damaged is not None:
            self._set_aside(damaged, journal)
        if journal.torn_tail:
            log.warning("the checkpoint journal ends in a torn write (an append the daemon never confirmed); "
                        "it is cut off", extra={"file": str(self.journal.path)})
        if self.shared:
            self._remember_snapshot()
        return apply_journal(data, journal), journal

    def _set_aside(self, damaged: ckpt.CheckpointCorrupt, journal: JournalContents) -> None:
        """Rename a damaged snapshot that names no claim out of the way, if nothing says a claim was
        prepared (blocking). :raises checkpoint.CheckpointCorrupt: something does; the file stays."""
        found = []
        if journal.changes:
            uids = sorted({uid for uid, _ in journal.changes})
            found.append(f"{self.journal.path} holds changes of {len(uids)} claim(s) since the snapshot ({few(uids)})")
        found.extend(self._evidence())
        if found:
            raise ckpt.CheckpointCorrupt(
                self.checkpoint_path, f"{damaged.reason}; it names no claim, but that proves nothing while this node "
                f"says claims were prepared: {'; '.join(found)}")
        aside = self.checkpoint_path.with_name(f"{self.checkpoint_path.name}.corrupt-{int(time.time())}")
        os.replace(self.checkpoint_path, aside)
        log.warning("the checkpoint is damaged but records no claim, and nothing on the node says a claim was "
                    "prepared; set it aside and starting empty", extra={"file": str(aside), "error": damaged.reason})

    async def save(self, *, compact: bool = False) -> None:
        """Return once every change made to :attr:`table` before this call is durable.

        A write appends the changed records to the journal and fdatasyncs once (group commit:
        while one write is in flight, later callers queue; the first of them writes every change
        for all, and the others find theirs already durable). Now and then, and with ``compact``,
        it writes a new snapshot instead and empties the journal; the snapshot's bytes are encoded
        in the worker thread, so a large checkpoint never stalls the loop.

        :raises OSError: the write failed; the changes stay pending for the next write.
        """
        await self.begin_save(compact=compact)

    def begin_save(self, *, compact: bool = False) -> Awaitable[None]:
        """:meth:`save` in two halves: when no write is in flight, hand every change made so far to
        the writer thread now, before returning; the awaitable returned then waits for it to be
        durable (and raises its OSError). Work the caller does in between runs on the loop while
        the writer thread wakes up and fdatasyncs (a Prepare writes its CDI specs there; each
        hand-off to the thread and back costs ~0.1 ms on 2 cores, docs/performance.md).
        When a write is in flight, nothing starts before the awaitable is awaited (it queues as
        :meth:`save` does).

        The awaitable must be awaited, with no await of the caller's before it: until then this
        store's write lock is held.
        """
        self._version += 1
        if self._flush_lock.locked():
            return self._queued_save(self._version, compact)
        self._flush_lock.acquire_nowait()
        return self._start_write(compact)

    async def _queued_save(self, wanted: int, compact: bool) -> None:
        await self._flush_lock.acquire()
        if self._durable >= wanted:
            self._flush_lock.release()
            return
        await self._start_write(compact)

    def _start_write(self, compact: bool) -> Awaitable[None]:
        """Take the table's changes (on the loop: no change can interleave), hand their write to the
        writer thread and return the wait for it (:meth:`_finish_save`). The write lock is held on
        entry; if nothing could be handed over, it is released and the error raised."""
        version = self._version
        changes = self.table.take_dirty()
        try:
            lines = self.journal.lines + len(changes)
            if compact or (lines > max(COMPACT_MIN_LINES, 2 * len(self.table)) and lines > self._compact_after):
                future = self._writer.submit(self._write_snapshot, self.table.snapshot_claims(), changes)
            elif changes:
                future = self._writer.submit(self.journal.append, change_lines(changes))
            else:
                future = None
        except BaseException:
            self.table.requeue(uid for uid, _ in changes)
            self._flush_lock.release()
            raise
        return self._finish_save(version, changes, future)

    async def _finish_save(self, version: int, changes: list[tuple[str, Any]], future: Future[None] | None) -> None:
        """Wait for the write :meth:`_start_write` started, then release the write lock (held on entry)."""
        try:
            if future is not None:
                await self._wait_writer(future)
        except BaseException as exc:
            self.table.requeue(uid for uid, _ in changes)
            if isinstance(exc, OSError):
                self.write_failures += 1
                if exc.filename is None:
                    exc.filename = str(self.journal.path)  # a write on the open fd names no file
            raise
        else:
            self._durable = max(self._durable, version)
        finally:
            self._flush_lock.release()

    async def _on_writer(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the writer thread and wait for it (see :meth:`_wait_writer`)."""
        await self._wait_writer(self._writer.submit(fn, *args))

    @staticmethod
    async def _wait_writer(future: Future[None]) -> None:
        """Wait for a job of the writer thread, shielded from cancellation: a cancelled caller still
        returns only once the write has ended, so the file is never written by two threads at once
        and a write is never reported failed while it goes on.

        The writer thread instead of anyio's pool: ``to_thread.run_sync`` passes twice more through
        the event loop for its checkpoints and capacity limiter (4 loop turns per call, this 2),
        and every Prepare and Unprepare waits for one of these writes (docs/performance.md).
        """
        with anyio.CancelScope(shield=True):
            await asyncio.wrap_future(future)

    def _write_snapshot(self, claims: Mapping[str, Any], changes: list[tuple[str, Any]]) -> None:
        """Replace the snapshot with ``claims``, then empty the journal (blocking).

        Once the snapshot is written the changes are durable, so a journal that cannot be emptied
        does not fail the write (the Prepare would be reported failed and rolled back while the
        snapshot says it completed): an emptied journal whose header failed gets it with the next
        append, and one that could not be cut at all (``ftruncate`` failed) gets ``changes``
        appended, since its old lines replay over the new snapshot and do not hold them (they would
        give back what this write changed). If that append fails too, the write fails: the state
        the files give is then the one before it, for the claims its old lines name.

        A snapshot that cannot be written (a full or failing disk; the old one is intact) does not
        fail the write either: compaction only keeps the journal short, so ``changes`` (those since
        the last write) are appended instead, which needs a few hundred bytes where the snapshot
        needs all of them. Only when that append fails too does the write fail, with its error.
        """
        try:
            ckpt.save(self.checkpoint_path, ckpt.encode_raw({"boot_id": self.boot_id, "claims": claims}))
        except OSError as exc:
            self._compact_after = self.journal.lines + len(changes) + max(COMPACT_MIN_LINES, 2 * len(claims))
            log.warning("writing the checkpoint snapshot failed; the journal takes the changes, and compaction "
                        "is tried again later", extra={"error": _describe(exc)})
            if changes:
                self.journal.append(change_lines(changes))
            return
        self._compact_after = 0
        if self.shared:
            self._remember_snapshot()
        try:
            self.journal.reset()
        except OSError as exc:
            log.warning("emptying the checkpoint journal after a compaction failed; the next write retries",
                        extra={"error": _describe(exc, self.journal.path)})
            if self.journal.size:  # not cut: its old lines follow the snapshot, then these
                self._compact_after = self.journal.lines + len(changes) + max(COMPACT_MIN_LINES, 2 * len(claims))
                if changes:
                    self.journal.append(change_lines(changes))

    async def close(self) -> None:
        """Compact into one snapshot and close the journal (clean shutdown), so an older release
        started next reads the whole state from the snapshot alone. A failure is logged."""
        try:
            async with self.exclusive():  # shared: compacts the other instances' records too
                if self.journal.lines:
                    await self.save(compact=True)
        except OSError as exc:
            log.warning("compacting the checkpoint at shutdown failed; the journal keeps the changes",
                        extra={"error": _describe(exc, self.journal.path)})
        finally:
            await self._on_writer(self.journal.close)
            self._writer.shutdown(wait=False)  # nothing is queued any more; its thread ends
            if self._snapshot_fd is not None:
                os.close(self._snapshot_fd)
                self._snapshot_fd = None
            if self._lock is not None:
                self._lock.close()


def _describe(exc: OSError, path: Path | None = None) -> str:
    """``strerror (file)`` of a failed write: the file the error names, else ``path`` (a write on
    an open descriptor names none)."""
    filename = exc.filename or path
    return f"{exc.strerror or exc} ({filename})" if filename else str(exc.strerror or exc)
