"""One daemon per plugin data directory: an exclusive ``flock`` on ``<plugin dir>/daemon.lock``.

Two daemons sharing sockets and a checkpoint would replace each other's sockets and interleave
checkpoint writes. A second instance (a new pod starting while the old one is still terminating)
waits for the lock instead, logging who holds it, and only then touches sockets or state. The
kernel drops the lock when the holder exits, even by kill -9.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

__all__ = ("LOCK_FILE", "hold_instance_lock")

log = logging.getLogger(__name__)

LOCK_FILE = "daemon.lock"


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.asynccontextmanager
async def hold_instance_lock(plugin_dir: Path, poll_s: float = 0.2) -> AsyncIterator[None]:
    """Hold the plugin directory's instance lock for the duration of the context, waiting for it if
    another process holds it. The holder's pid is written into the file for operators."""
    path = plugin_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if not _try_lock(fd):
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            log.warning("another ascend-dra instance holds the plugin directory; waiting for it to stop",
                        extra={"lock": str(path), "holder_pid": holder})
            # flock has no async wake-up, and a blocked flock in a worker thread cannot be cancelled
            # safely (the fd is closed under it), so poll.
            while not _try_lock(fd):  # noqa: ASYNC110
                await anyio.sleep(poll_s)
            log.info("took over the plugin directory", extra={"lock": str(path)})
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
