"""The node's durable claim records: the snapshot and journal on disk, the table in memory.

:class:`ClaimRecords` loads both files (checkpoint.py, journal.py), hands out the
:class:`~ascend_dra.checkpoint.RecordTable` that DeviceState changes, and makes those changes durable
with group-committed journal appends and, now and then, a new snapshot (docs/durable-state.md).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio

from ascend_dra import checkpoint as ckpt
from ascend_dra.journal import JOURNAL_FILE, Journal, JournalContents, apply_journal, change_lines
from ascend_dra.journal import read as read_journal

__all__ = ("COMPACT_MIN_LINES", "ClaimRecords")

log = logging.getLogger(__name__)

#: The journal is compacted into a new snapshot when it holds more change lines than this, or than
#: twice the number of records: a write stays O(1), and compaction is amortised O(1) per write.
COMPACT_MIN_LINES = 1024


class ClaimRecords:
    """The durable records of one plugin data directory.

    :param plugin_dir: holds ``checkpoint.json`` and ``checkpoint.journal``.
    :param boot_id: the current boot id, written into every snapshot.
    :param on_change: called with ``(uid, record or None)`` for every record loaded and changed.
    """

    def __init__(self, plugin_dir: Path, boot_id: str,
                 on_change: Callable[[str, Any], None] | None = None) -> None:
        self.checkpoint_path = ckpt.checkpoint_path(plugin_dir)
        self.journal = Journal(Path(plugin_dir) / JOURNAL_FILE)
        self.boot_id = boot_id
        self._on_change = on_change
        self.table = ckpt.RecordTable(on_change=on_change)
        self._flush_lock = anyio.Lock()
        self._version = 0  # bumped by every save call
        self._durable = 0  # the highest version known to be on disk

    async def load(self) -> tuple[ckpt.CheckpointData, JournalContents]:
        """Read the snapshot and the journal, build :attr:`table`, open the journal for appends.

        :raises checkpoint.CheckpointCorrupt: a damaged snapshot that records claims, or a damaged journal.
        """
        data, journal = await anyio.to_thread.run_sync(self._read)
        self.table = ckpt.RecordTable.from_data(data, on_change=self._on_change)
        await anyio.to_thread.run_sync(self.journal.open, journal)
        return data, journal

    def _read(self) -> tuple[ckpt.CheckpointData, JournalContents]:
        """The snapshot with the journal applied (blocking). A damaged snapshot that records no
        claim is set aside (renamed ``checkpoint.json.corrupt-<unix time>``): nothing is lost by it."""
        try:
            data = ckpt.load(self.checkpoint_path)
        except ckpt.CheckpointCorrupt as exc:
            if not exc.records_nothing:
                raise
            aside = self.checkpoint_path.with_name(f"{self.checkpoint_path.name}.corrupt-{int(time.time())}")
            os.replace(self.checkpoint_path, aside)
            log.warning("the checkpoint is damaged but records no claim; set it aside and starting empty",
                        extra={"file": str(aside), "error": exc.reason})
            data = ckpt.CheckpointData()
        journal = read_journal(self.journal.path)
        if journal.torn_tail:
            log.warning("the checkpoint journal ends in a torn write (an append the daemon never confirmed); "
                        "it is cut off", extra={"file": str(self.journal.path)})
        return apply_journal(data, journal), journal

    async def save(self, *, compact: bool = False) -> None:
        """Return once every change made to :attr:`table` before this call is durable.

        A write appends the changed records to the journal and fdatasyncs once (group commit:
        while one write is in flight, later callers queue; the first of them writes every change
        for all, and the others find theirs already durable). Now and then, and with ``compact``,
        it writes a new snapshot instead and empties the journal; the snapshot's bytes are encoded
        in the worker thread, so a large checkpoint never stalls the loop.

        :raises OSError: the write failed; the changes stay pending for the next write.
        """
        self._version += 1
        wanted = self._version
        async with self._flush_lock:
            if self._durable >= wanted:
                return
            version = self._version
            changes = self.table.take_dirty()  # on the loop: no change can interleave
            try:
                if compact or self.journal.lines + len(changes) > max(COMPACT_MIN_LINES, 2 * len(self.table)):
                    await anyio.to_thread.run_sync(self._write_snapshot, self.table.snapshot_claims())
                elif changes:
                    await anyio.to_thread.run_sync(self.journal.append, change_lines(changes))
            except BaseException:
                self.table.requeue(uid for uid, _ in changes)
                raise
            self._durable = max(self._durable, version)

    def _write_snapshot(self, claims: Mapping[str, Any]) -> None:
        """Replace the snapshot with ``claims``, then empty the journal (blocking)."""
        ckpt.save(self.checkpoint_path, ckpt.encode_raw({"boot_id": self.boot_id, "claims": claims}))
        self.journal.reset()

    async def close(self) -> None:
        """Compact into one snapshot and close the journal (clean shutdown), so an older release
        started next reads the whole state from the snapshot alone. A failure is logged."""
        try:
            if self.journal.lines:
                await self.save(compact=True)
        except OSError as exc:
            log.warning("compacting the checkpoint at shutdown failed; the journal keeps the changes",
                        extra={"error": exc.strerror or str(exc)})
        finally:
            await anyio.to_thread.run_sync(self.journal.close)
