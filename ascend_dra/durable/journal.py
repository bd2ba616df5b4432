"""The append-only journal beside the checkpoint snapshot: a Prepare costs one small durable write.

``checkpoint.json`` (checkpoint.py) is a snapshot of every claim record; ``checkpoint.journal``
holds the changes since that snapshot, one line each::

    <32 hex: sha256 of the payload, truncated> <payload: orjson>\\n

The first payload is the header ``{"kind": "AscendDRACheckpointJournal", "version": 1}``; every
other one is ``{"uid": ..., "record": {...}}`` (the record as stored) or ``{"uid": ..., "deleted": true}``.

A write appends the lines of every change since the last write (group commit) and fdatasyncs once:
its cost does not grow with the number of prepared claims. The state is the snapshot with the
journal applied in order. A compaction writes a new snapshot (atomic replace) and then empties the
journal; a crash between the two replays the old journal over the new snapshot, which gives every
claim its state before that write (the journal names it) or after it (the journal does not): either
is right for a write that was never acknowledged. A journal that cannot be emptied when the
write is acknowledged gets the write's changes appended after its old lines (records.py).

Each append ends with a *commit line*, ``{"uid": "", "deleted": true, "commit": <change lines>}``: a
deletion of no claim to a release that does not know it (``""`` is never a claim uid), so older
releases read these journals unchanged.

Reading tells a torn append (a write never acknowledged: dropped, and cut off before the next
append) from damage (:class:`~ascend_dra.durable.checkpoint.CheckpointCorrupt`, start-up refuses) by what a
crash can leave. An append writes whole lines past the end of the file and fdatasyncs; a crash before
the fdatasync returns leaves a last piece without its newline, or pages of the new bytes unwritten,
which read back as NUL bytes (the file was extended, so there is no older content to show). Every
later write's fdatasync would have flushed those pages, so such a hole is only torn when it is in
the last write: when no intact line follows the first commit line after it. A hole followed by a
later write (a zeroed block on a failing disk), a complete line that fails its checksum without a NUL
in it (a flipped bit), a header that is not ours, and a line that is neither a record nor a deletion
are damage, wherever they are: dropping them would forget an acknowledged claim.
All functions block: call them from a worker thread.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import orjson

from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.checkpoint import CheckpointCorrupt
from ascend_dra.observe.faults import crash_point, disk_error, disk_fault
from ascend_dra.system.atomicfile import fsync_dir

__all__ = ("JOURNAL_FILE", "Journal", "JournalContents", "apply_journal", "change_lines", "load_state", "read",
           "read_tail")

JOURNAL_FILE = "checkpoint.journal"
_HEADER = {"kind": "AscendDRACheckpointJournal", "version": 1}


def _line(payload: bytes) -> bytes:
    return hashlib.sha256(payload).hexdigest()[:32].encode() + b" " + payload + b"\n"


_HEADER_LINE = _line(orjson.dumps(_HEADER, option=orjson.OPT_SORT_KEYS))


def _commit_line(count: int, at: int) -> bytes:
    """The line that ends an append of ``count`` change lines written from byte ``at``."""
    return _line(orjson.dumps({"uid": "", "deleted": True, "commit": count, "at": at}))


def _commit_start(line: bytes) -> int | None:
    """Where the append an intact commit line ends began (its ``at``), or None: not one."""
    payload = line[33:]
    if len(line) < 34 or _line(payload)[:32] != line[:32]:
        return None
    try:
        entry = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    if isinstance(entry, dict) and entry.get("uid") == "" and isinstance(entry.get("at"), int):
        return int(entry["at"])
    return None


def change_lines(changes: Iterable[tuple[str, Any]]) -> bytes:
    """The journal lines of ``(uid, record as stored, or None for deleted)`` changes."""
    return b"".join(_line(orjson.dumps({"uid": uid, "record": record} if record is not None
                                       else {"uid": uid, "deleted": True}))
                    for uid, record in changes)


@attrs.frozen
class JournalContents:
    """What :func:`read` found.

    :ivar changes: ``(uid, record as stored or None if deleted)`` in order.
    :ivar good_size: bytes up to the end of the last intact line (where the next append goes).
    :ivar torn_tail: the file had a torn last line past ``good_size``.
    """

    changes: tuple[tuple[str, Any], ...] = ()
    good_size: int = 0
    torn_tail: bool = False


def read(path: Path) -> JournalContents:
    """Read the journal; a missing or empty file has no changes.

    :raises CheckpointCorrupt: damage (see the module docstring), a wrong header, a link to nothing.
    """
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        if path.is_symlink():  # a link to a volume not mounted yet: the changes are somewhere
            raise CheckpointCorrupt(path, f"it is a symbolic link to {os.readlink(path)}, which does not exist "
                                    "(a volume not mounted?)") from None
        return JournalContents()
    return _parse(path, blob, 0)


def read_tail(path: Path, offset: int) -> JournalContents:
    """Read the changes appended after byte ``offset`` (the end of an intact line) by another
    instance; ``good_size`` is absolute. A torn last write is reported as by :func:`read`.

    :raises CheckpointCorrupt: damage (see the module docstring).
    """
    with open(path, "rb") as f:
        f.seek(offset)
        blob = f.read()
    return _parse(path, blob, offset)


def _parse(path: Path, blob: bytes, start: int) -> JournalContents:
    """The lines of ``blob``, which begins at byte ``start`` of the file (0: with the header)."""
    changes: list[tuple[str, Any]] = []
    offset = 0
    first = blob.split(b"\n", 1)[0]
    if start == 0 and blob and (b"\n" not in blob or _line(first[33:])[:32] != first[:32]):
        # The header is written alone, into an empty journal (a new one, or after a compaction whose
        # snapshot holds every change), so a crash can cut only the header itself short.
        if len(blob) <= len(_HEADER_LINE) and _HEADER_LINE.startswith(blob.rstrip(b"\0")):
            return JournalContents((), 0, True)
        raise CheckpointCorrupt(path, "the journal's first line is not its header (the file was modified or damaged)")
    lines = blob.split(b"\n")
    where = f" after byte {start}" if start else ""
    for number, line in enumerate(lines[:-1], start=1):  # the last piece has no newline: torn or empty
        payload = line[33:]
        if len(line) < 34 or line[32:33] != b" " or _line(payload)[:32] != line[:32]:
            if b"\0" in line and _in_last_write(start + offset, lines[number:-1]):
                # pages of the last, unacknowledged write that never reached the disk
                return JournalContents(tuple(changes), start + offset, True)
            raise CheckpointCorrupt(path, f"line {number}{where} of the journal fails its checksum (the file was "
                                    "modified or damaged)" + (", and a later write follows it" if b"\0" in line
                                                              else ""))
        entry = orjson.loads(payload)
        if number == 1 and start == 0:
            if entry != _HEADER:
                raise CheckpointCorrupt(path, f"the journal's header is {entry!r}, not {_HEADER!r}")
        elif not isinstance(entry, dict) or not isinstance(entry.get("uid"), str):
            raise CheckpointCorrupt(path, f"line {number}{where} of the journal is not a claim record change")
        elif entry["uid"] == "" and "commit" in entry:
            pass  # the end of one append
        elif entry.get("deleted") is True and "record" not in entry:
            changes.append((entry["uid"], None))
        elif isinstance(entry.get("record"), dict) and "deleted" not in entry:
            changes.append((entry["uid"], entry["record"]))
        else:
            # Not one of the two changes this release writes: another release's. Skipping it could
            # forget a claim, and reading it as a deletion would.
            raise CheckpointCorrupt(path, f"line {number}{where} of the journal is neither a record nor a deletion "
                                    f"(keys {', '.join(sorted(entry))}; written by another ascend-dra release?)")
        offset += len(line) + 1
    return JournalContents(tuple(changes), start + offset, offset != len(blob))


def _in_last_write(at: int, after: list[bytes]) -> bool:
    """Whether a damaged line at byte ``at`` is in the file's last append: the first intact commit
    line among the complete lines ``after`` it is the last line and began its append at or before
    ``at`` (a zeroed block that also took the previous commit line is not the last write's hole).
    Without a commit line after it (an older release's journal, or a hole that runs to the end)
    it cannot be told from a crash, and counts as torn."""
    for index, line in enumerate(after):
        began = _commit_start(line)
        if began is not None:
            return index == len(after) - 1 and began <= at
    return True


def apply_journal(data: ckpt.CheckpointData, contents: JournalContents) -> ckpt.CheckpointData:
    """The snapshot ``data`` with the journal's changes applied in order."""
    if not contents.changes:
        return data
    claims = dict(data.raw)
    for uid, record in contents.changes:
        if record is None:
            claims.pop(uid, None)
        else:
            claims[uid] = record
    return ckpt.decode_records(claims, boot_id=data.boot_id)


def load_state(plugin_dir: Path) -> ckpt.CheckpointData:
    """The durable state of a plugin data directory: snapshot plus journal (for tools and tests).

    :raises CheckpointCorrupt: either file is damaged.
    """
    return apply_journal(ckpt.load(ckpt.checkpoint_path(plugin_dir)), read(plugin_dir / JOURNAL_FILE))


class Journal:
    """The open journal file: appends are durable (fdatasync) when :meth:`append` returns.

    :param path: ``<plugin data dir>/checkpoint.journal``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._size = 0
        # A failed append that could not be cut off again left bytes past _size: the next append cuts
        # them first, or a shorter append would leave the end of the failed one behind its commit line.
        self._cut_pending = False
        self.lines = 0  # change lines since the last reset (drives compaction)

    def open(self, contents: JournalContents) -> None:
        """Open for appending after what :func:`read` found; a torn tail is cut off first."""
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        self._size = contents.good_size
        self.lines = len(contents.changes)
        if self._size == 0:
            try:
                self._rewrite_header()
                fsync_dir(self.path.parent)  # the file itself may be new
            except OSError:
                pass  # a full disk must not stop a start that only replays: the first append writes it
        elif contents.torn_tail:
            os.ftruncate(self._fd, self._size)
            os.fdatasync(self._fd)
        else:
            os.fdatasync(self._fd)  # see reposition: appends go only after durable lines

    def fileno(self) -> int:
        assert self._fd is not None, "journal not open"
        return self._fd

    @property
    def size(self) -> int:
        """Bytes up to the end of the last intact line this process knows of (the next append's offset)."""
        return self._size

    def reposition(self, contents: JournalContents, lines: int | None = None) -> None:
        """Continue after what :func:`read` or :func:`read_tail` found (another instance wrote
        since): the next append goes at ``contents.good_size``; a torn tail (an append a dead
        instance never confirmed) is cut off. ``lines``: the change lines now in the file
        (default: those of ``contents``)."""
        assert self._fd is not None, "journal not open"
        self._size = contents.good_size
        self._cut_pending = False  # what the file holds was just read, and a torn tail is cut below
        self.lines = len(contents.changes) if lines is None else lines
        if self._size == 0:
            self._rewrite_header()
        elif contents.torn_tail:
            os.ftruncate(self._fd, self._size)
            os.fdatasync(self._fd)
        else:
            # An instance killed between its write and its fdatasync leaves lines only in the page
            # cache; made durable now, before anything is appended after them, so that a hole in
            # them after a power loss is never followed by a later write (which reads as damage).
            # Nothing to write, and cheap, when they are on disk already.
            os.fdatasync(self._fd)

    def append(self, data: bytes) -> None:
        """Append ``data`` (whole lines) and make it durable.

        :raises OSError: nothing was appended (a partial write is cut off again; when that fails
            too, the next append cuts it off first, and fails if it cannot).
        """
        assert self._fd is not None, "journal not open"
        crash_point("journal:before-append")
        if self._cut_pending:
            os.ftruncate(self._fd, self._size)
            os.fdatasync(self._fd)
            self._cut_pending = False
        if self._size == 0:
            # Empty: a header write failed (a full or failing disk). The header goes first and alone,
            # as the torn-header rule expects (journal.read).
            self._rewrite_header()
            fsync_dir(self.path.parent)
        data += _commit_line(data.count(b"\n"), self._size)
        try:
            view = memoryview(data)
            offset = self._size
            while view:
                if (error := disk_error("journal:write")) is not None:
                    os.pwrite(self._fd, view[:len(view) // 2], offset)  # a disk that fills mid-write
                    raise error
                written = os.pwrite(self._fd, view, offset)
                view, offset = view[written:], offset + written
            disk_fault("journal:sync")
            os.fdatasync(self._fd)
            crash_point("journal:after-append")
        except OSError:
            try:  # cut off again, durably: pages already on disk must not bring it back after a crash
                disk_fault("journal:truncate")
                os.ftruncate(self._fd, self._size)
                os.fdatasync(self._fd)
            except OSError:
                self._cut_pending = True
            raise
        self._size += len(data)
        self.lines += data.count(b"\n") - 1

    def reset(self) -> None:
        """Empty the journal (after a snapshot that holds its changes was written)."""
        assert self._fd is not None, "journal not open"
        self._rewrite_header()

    def _rewrite_header(self) -> None:
        assert self._fd is not None
        disk_fault("journal:truncate")
        os.ftruncate(self._fd, 0)
        self._cut_pending = False
        # Empty now, whatever happens next: if the header write fails, the next append writes the
        # header first, instead of appending at the old size after a hole (which reads as damage).
        self._size = 0
        self.lines = 0
        if (error := disk_error("journal:header")) is not None:
            os.pwrite(self._fd, _HEADER_LINE[:len(_HEADER_LINE) // 2], 0)
            raise error
        os.pwrite(self._fd, _HEADER_LINE, 0)
        os.fdatasync(self._fd)
        self._size = len(_HEADER_LINE)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
