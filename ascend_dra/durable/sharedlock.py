"""Cross-process ``flock`` locks that an asyncio task can wait for without blocking the loop.

Two daemon instances of one node (a rolling update, ``--rolling-update-id``) share the plugin data
directory; these locks are how they take turns (docs/durable-state.md, "Two instances at once").
The kernel drops a lock when its holder exits, even by kill -9.

``flock`` has no async wake-up, and a blocked ``flock`` in a worker thread cannot be cancelled (the
thread would go on and take the lock after its caller gave up), so a waiter polls with a short,
growing pause (:data:`POLL_MIN_S` to :data:`POLL_MAX_S`).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import anyio

__all__ = ("POLL_MAX_S", "POLL_MIN_S", "CheckpointLock", "acquire", "try_lock")

#: Shortest and longest pause between two attempts at a held lock, in seconds.
POLL_MIN_S = 0.001
POLL_MAX_S = 0.02


def try_lock(fd: int, *, shared: bool = False) -> bool:
    """Try once to take ``fd``'s lock (exclusive, or shared with ``shared``); return whether it was taken."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


async def acquire(fd: int, *, shared: bool = False, poll_max_s: float = POLL_MAX_S) -> None:
    """Wait until ``fd``'s lock is taken (polling; cancellable at every pause)."""
    pause = POLL_MIN_S
    while not try_lock(fd, shared=shared):
        await anyio.sleep(pause)
        pause = min(pause * 2, poll_max_s)


class CheckpointLock:
    """An exclusive lock on ``<plugin dir>/checkpoint.lock`` between the instances of the node: while
    this process holds it, no other instance does.

    :param plugin_dir: the plugin data directory.
    """

    FILE = "checkpoint.lock"

    def __init__(self, plugin_dir: Path) -> None:
        self.path = Path(plugin_dir) / self.FILE
        self._fd: int | None = None

    async def acquire(self) -> None:
        """Wait until this process holds the lock. The caller coordinates its own tasks
        (records.ClaimRecords.exclusive: one acquisition serves every task that joins it)."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        await acquire(self._fd)

    def release(self) -> None:
        """Release the lock this process holds (a no-op when the file is closed)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the lock file (releasing the lock if it is held)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
