"""Who may serve a plugin data directory: ``flock`` on ``<plugin dir>/daemon.lock``.

Without ``--rolling-update-id`` one daemon serves a directory: it holds the lock exclusively. Two
such daemons would replace each other's sockets and interleave checkpoint writes, so a second
instance (a new pod starting while the old one is still terminating) waits for the lock instead,
logging who holds it, and only then touches sockets or state.

With ``--rolling-update-id UID`` (the pod UID), instances have sockets of their own names and
share the checkpoint under :class:`~ascend_dra.sharedlock.CheckpointLock`, so several may serve at
once: each holds ``daemon.lock`` *shared* (an instance without the flag still waits for all of
them, and they for it) and ``daemon-<UID>.lock`` exclusively (two instances given the same UID
would take each other's sockets; the second waits). The kernel drops a lock when its holder
exits, even by kill -9.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

from ascend_dra.sharedlock import acquire, try_lock

__all__ = ("LOCK_FILE", "hold_instance_lock")

log = logging.getLogger(__name__)

LOCK_FILE = "daemon.lock"


@contextlib.asynccontextmanager
async def _hold(path: Path, *, shared: bool, poll_s: float, pid_file: bool) -> AsyncIterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        if not try_lock(fd, shared=shared):
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            log.warning("another ascend-dra instance holds the plugin directory; waiting for it to stop",
                        extra={"lock": str(path), "holder_pid": holder})
            await acquire(fd, shared=shared, poll_max_s=poll_s)
            log.info("took over the plugin directory", extra={"lock": str(path)})
        if pid_file:  # only an exclusive holder writes: shared holders would overwrite each other
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield fd
    finally:
        os.close(fd)  # releases the lock


@contextlib.asynccontextmanager
async def hold_instance_lock(plugin_dir: Path, poll_s: float = 0.2,
                             rolling_update_id: str | None = None) -> AsyncIterator[None]:
    """Hold the plugin directory's instance lock(s) for the duration of the context, waiting for
    them if another process holds them. An exclusive holder's pid is written into the file.

    :param rolling_update_id: None: hold ``daemon.lock`` exclusively; a UID: hold it shared and
        ``daemon-<UID>.lock`` exclusively (removed again on exit).
    """
    main = plugin_dir / LOCK_FILE
    if rolling_update_id is None:
        async with _hold(main, shared=False, poll_s=poll_s, pid_file=True):
            yield
        return
    own = plugin_dir / f"daemon-{rolling_update_id}.lock"
    async with _hold(main, shared=True, poll_s=poll_s, pid_file=False), \
            _hold(own, shared=False, poll_s=poll_s, pid_file=True):
        try:
            yield
        finally:
            with contextlib.suppress(OSError):  # still held: nobody else can be using it
                own.unlink()
