"""Named crash points for the crash-safety tests (like etcd's failpoints).

``ASCEND_DRA_CRASH_AT=prepare:after-started-write`` makes the daemon kill itself with SIGKILL
when it reaches that point, so tests can check that a restart repairs every state a crash can
leave (docs/architecture.md#durable-state). ``ASCEND_DRA_STALL_AT=prepare:after-cdi-write@2.5`` instead blocks the
event loop
for 2.5 seconds there (``time.sleep`` on the loop), so tests can see what a stuck loop looks like from
outside (the health checks). Unset in production: :func:`crash_point` is then two dict lookups.

Disk faults (:func:`disk_fault`, :data:`DISK_POINTS`): ``ASCEND_DRA_DISK_FAULTS=<file>`` names a file
of ``point=ERRNO`` entries (``journal:sync=EIO``, ``*=ENOSPC`` for every point), read again at every
point reached, so a test arms and disarms faults in a running daemon by rewriting it (a missing or
empty file arms nothing). A point then raises the :class:`OSError` the system call it stands for
would raise (``[Errno 28] No space left on device``, no file name where the call names none). Unset
in production: :func:`disk_fault` is then one global lookup.
"""

from __future__ import annotations

import errno
import os
import signal
import time

__all__ = ("DISK_POINTS", "POINTS", "WRITE_POINTS", "crash_point", "disk_error", "disk_fault", "read_disk_faults")

#: Every point, in the order a Prepare / a replay after a reboot / an Unprepare passes them.
POINTS = (
    "prepare:before-started-write",
    "prepare:after-started-write",
    "prepare:side-effects-done-unrecorded",
    "prepare:after-side-effects",
    "prepare:after-metadata-write",
    "prepare:after-cdi-write",
    "prepare:after-completed-write",
    # A Prepare of a claim prepared before a reboot whose profiles have side effects (replay.py):
    # the same steps as a first Prepare's.
    "replay:before-started-write",
    "replay:after-started-write",
    "replay:side-effects-done-unrecorded",
    "replay:after-side-effects",
    "replay:after-metadata-write",
    "replay:after-cdi-write",
    "replay:after-completed-write",
    "unprepare:before-checkpoint-write",
    "unprepare:after-checkpoint-write",
    "unprepare:after-cdi-remove",
)

#: Points of a Prepare without side effects whose spec is written while its PrepareCompleted record
#: goes out (state/devicestate.py): after the write was handed to the writer thread, before the spec; and on that
#: thread, before an append and after it is durable (journal.py). Which of the two threads gets
#: where first is a race, so the tests stall one of them at one point and kill at another.
WRITE_POINTS = ("prepare:completed-write-submitted", "journal:before-append", "journal:after-append")

#: Every durable write a disk fault can be injected at (``<file>:<step>``): the journal's header
#: (written alone into an empty journal), an append's ``pwrite`` (half of it lands first, as on a
#: disk that fills mid-write), its ``fdatasync``, and the ``ftruncate`` that cuts a failed append off
#: again or empties the journal after a compaction; a snapshot's temp file and its ``fsync``
#: (compaction); HAMivNPUCore's per-claim local dir (``mkdir`` of a request's subdir, the claim's dir
#: made) and its ``ld.so.preload``; a hard-vNPU ledger entry and its ``fsync``; a profile's common
#: CDI spec and a claim's spec (written, never fsynced: docs/durable-state.md), and a claim's device
#: metadata file (KEP-5304; likewise).
DISK_POINTS = (
    "journal:header",
    "journal:write",
    "journal:sync",
    "journal:truncate",
    "snapshot:write",
    "snapshot:sync",
    "vnpu-core-dir:mkdir",
    "vnpu-core-preload:write",
    "hard-vnpu-ledger:write",
    "hard-vnpu-ledger:sync",
    "cdi-common:write",
    "cdi-claim:write",
    "device-metadata:write",
)

_ARMED = frozenset(filter(None, os.environ.get("ASCEND_DRA_CRASH_AT", "").split(",")))
#: point -> seconds to block the loop there (``ASCEND_DRA_STALL_AT=point@seconds,...``).
_STALLS = {point: float(seconds) for point, _, seconds in
           (entry.rpartition("@") for entry in os.environ.get("ASCEND_DRA_STALL_AT", "").split(",") if "@" in entry)}


def crash_point(name: str) -> None:
    """Die by SIGKILL here if ``name`` is armed in ``ASCEND_DRA_CRASH_AT``; block the calling
    thread (the event loop) if it is armed in ``ASCEND_DRA_STALL_AT``."""
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
    stall = _STALLS.get(name)
    if stall is not None:
        time.sleep(stall)  # on purpose: the test wants the loop stuck


#: The file of armed disk faults, or None (production): see the module docstring.
_DISK_FAULTS = os.environ.get("ASCEND_DRA_DISK_FAULTS") or None


def read_disk_faults(text: str) -> dict[str, int]:
    """Parse a disk-fault file: ``point=ERRNO`` entries separated by white space -> ``{point: errno}``.

    :raises ValueError: an entry without ``=``, a point not in :data:`DISK_POINTS` (nor ``*``), or a
        name that is not an errno (``errno.ENOSPC``'s ``ENOSPC``, ``EIO``, ``EROFS``, ``EDQUOT``, ...).
    """
    armed: dict[str, int] = {}
    for entry in text.split():
        point, equals, name = entry.partition("=")
        if not equals or (point != "*" and point not in DISK_POINTS):
            raise ValueError(f"disk fault {entry!r}: expected POINT=ERRNO, POINT * or one of "
                             f"{', '.join(DISK_POINTS)}")
        code = getattr(errno, name, None)
        if not name.startswith("E") or not isinstance(code, int):
            raise ValueError(f"disk fault {entry!r}: {name!r} is not an errno name (ENOSPC, EIO, ...)")
        armed[point] = code
    return armed


def disk_error(point: str, filename: str | None = None) -> OSError | None:
    """The error armed at ``point`` (one of :data:`DISK_POINTS`), or None: for a caller that does
    part of the write first (a disk that fills mid-write); :func:`disk_fault` raises it at once.

    :param filename: what the real call's error names (``mkdir`` names its path; ``write`` and
        ``fsync`` on a file descriptor name nothing, and the caller must say which file failed).
    """
    if _DISK_FAULTS is None:
        return None
    try:
        with open(_DISK_FAULTS, encoding="utf-8") as f:
            armed = read_disk_faults(f.read())
    except FileNotFoundError:
        return None
    code = armed.get(point, armed.get("*"))
    if code is None:
        return None
    return OSError(code, os.strerror(code)) if filename is None else OSError(code, os.strerror(code), filename)


def disk_fault(point: str, filename: str | None = None) -> None:
    """Raise the error armed at ``point`` (see :func:`disk_error`), if any."""
    error = disk_error(point, filename)
    if error is not None:
        raise error
