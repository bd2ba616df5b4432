"""Who may serve a plugin data directory: ``flock`` on ``<plugin dir>/daemon.lock``.

Without ``--rolling-update-id`` one daemon serves a directory: it holds the lock exclusively. Two
such daemons would replace each other's sockets and interleave checkpoint writes, so a second
instance (a new pod starting while the old one is still terminating) waits for the lock instead,
logging who holds it, and only then touches sockets or state.

With ``--rolling-update-id UID`` (the pod UID), instances have sockets of their own names and
share the checkpoint under :class:`~ascend_dra.durable.sharedlock.CheckpointLock`, so several may serve at
once: each holds ``daemon.lock`` *shared* (an instance without the flag still waits for all of
them, and they for it) and ``daemon-<UID>.lock`` exclusively (two instances given the same UID
would take each other's sockets; the second waits). The kernel drops a lock when its holder
exits, even by kill -9.

Each exclusive holder writes its pid and the time it took the lock (``CLOCK_BOOTTIME``, ns: one
clock for every container of the node) into the file, and a publisher the time of its last
successful publish (:func:`mark_published`). While several instances overlap, only the one that
started last publishes ResourceSlices, as long as it does (:func:`newer_live_instance`): two
releases whose inventories differ would otherwise rewrite each other's slices without end.

An instance that stops removes its sockets and its ``daemon-<UID>.lock``. One that was killed
leaves both, and no other instance may remove another's sockets blindly: at start-up an instance
takes each other ``daemon-<UID>.lock`` it finds, and only if nobody holds it (its owner is dead)
removes that UID's sockets and the lock file (:func:`remove_dead_instances`). A lock file that is
missing means its owner stopped cleanly or has not started: its sockets are left alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

from ascend_dra.durable.sharedlock import acquire, try_lock

__all__ = ("LOCK_FILE", "PUBLISHING_FRESH_S", "hold_instance_lock", "mark_published", "newer_live_instance",
           "other_live_instances", "remove_dead_instances")

log = logging.getLogger(__name__)

LOCK_FILE = "daemon.lock"


@contextlib.asynccontextmanager
async def _hold(path: Path, *, shared: bool, poll_s: float, pid_file: bool) -> AsyncIterator[int]:
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if not try_lock(fd, shared=shared):
                holder = os.pread(fd, 32, 0).decode(errors="replace").split("\n")[0].strip() or "unknown"
                log.warning("another ascend-dra instance holds the plugin directory; waiting for it to stop",
                            extra={"lock": str(path), "holder_pid": holder})
                await acquire(fd, shared=shared, poll_max_s=poll_s)
                log.info("took over the plugin directory", extra={"lock": str(path)})
            if _same_file(fd, path):
                break
        except BaseException:
            os.close(fd)
            raise
        # Removed (remove_dead_instances) or replaced between our open and our lock: a lock on
        # that inode would hide us from every other instance. Lock what is at the path now.
        os.close(fd)
    try:
        if pid_file:  # only an exclusive holder writes: shared holders would overwrite each other
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n{time.clock_gettime_ns(time.CLOCK_BOOTTIME)}\n".encode(), 0)
            except OSError as exc:
                # The lock is the flock, not these lines: a full state disk must not stop a start
                # that can still serve (the pid is for messages; without the start stamp a rolling
                # update's older instance lets this one publish, as for an older release).
                log.warning("cannot write the pid into the lock file", extra={"lock": str(path),
                                                                              "error": exc.strerror})
        yield fd
    finally:
        os.close(fd)  # releases the lock


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def remove_dead_instances(plugin_dir: Path, sockets_of: Callable[[str], Sequence[Path]], own: str) -> list[str]:
    """Remove the sockets and lock files of rolling-update instances that died without stopping
    (blocking; a few files). Return their ids.

    :param sockets_of: rolling-update id -> that instance's socket paths.
    :param own: this instance's id (skipped).
    """
    dead = []
    for uid, lock, fd in _other_instances(plugin_dir, own):
        if not try_lock(fd):
            continue  # alive
        try:
            if os.fstat(fd).st_ino != lock.lstat().st_ino:
                continue  # it stopped meanwhile: its file was removed (and maybe made anew)
        except FileNotFoundError:
            continue
        for path in sockets_of(uid):
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()
        with contextlib.suppress(FileNotFoundError):  # another starting instance removed it first
            lock.unlink()
        dead.append(uid)
        log.warning("removed the sockets of an instance that died without stopping",
                    extra={"rolling_update_id": uid})
    return dead


def _other_instances(plugin_dir: Path, own: str) -> Iterator[tuple[str, Path, int]]:
    """(rolling-update id, lock file, open read-write fd) of every instance's lock file but
    ``own``'s, in id order; each fd is closed when the next is taken (a file gone meanwhile is
    skipped: its instance stopped)."""
    for lock in sorted(plugin_dir.glob("daemon-*.lock")):
        uid = lock.name.removeprefix("daemon-").removesuffix(".lock")
        if uid == own:
            continue
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            yield uid, lock, fd
        finally:
            os.close(fd)


#: Seconds after its start or its last successful publish during which a newer instance counts as
#: publishing: an older one stands by meanwhile. A publisher that is current syncs every 60 s
#: (``ApiPublisher.resync_interval``); a newer instance alive but failing to write (an RBAC or a
#: schema error of its release) for longer no longer keeps the older one from publishing.
PUBLISHING_FRESH_S = 150.0


def _stamps(fd: int) -> tuple[int | None, int | None]:
    """(started, last published) stamps an exclusive holder wrote (lines 2 and 3), None where absent."""
    lines = os.pread(fd, 96, 0).split(b"\n")

    def field(i: int) -> int | None:
        try:
            return int(lines[i])
        except (IndexError, ValueError):
            return None

    return field(1), field(2)


def mark_published(plugin_dir: Path, own: str) -> None:
    """Record in ``daemon-<own>.lock`` that this instance published (or found its slices current)
    just now (blocking; one small write). :func:`newer_live_instance` of older instances reads it."""
    path = plugin_dir / f"daemon-{own}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        lines = os.pread(fd, 96, 0).split(b"\n")
        if len(lines) >= 3:  # pid and start stamp written
            head = lines[0] + b"\n" + lines[1] + b"\n"
            # Fixed width, written in place: a reader never sees a shorter or truncated number.
            os.pwrite(fd, f"{time.clock_gettime_ns(time.CLOCK_BOOTTIME):020d}\n".encode(), len(head))
    finally:
        os.close(fd)


def newer_live_instance(plugin_dir: Path, own: str) -> str | None:
    """The rolling-update id of a live instance that publishes in this one's stead, or None
    (blocking; a few small files). That is one that took its lock after ``own`` did (the one the
    DaemonSet is rolling to; ties go to the larger id) and started or published within
    :data:`PUBLISHING_FRESH_S`, or a live one whose file has no start stamp (a release from before
    this rule, which always publishes: two publishers with different inventories would rewrite
    each other's slices without end).
    """
    try:
        fd = os.open(plugin_dir / f"daemon-{own}.lock", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        mine, _ = _stamps(fd)
    finally:
        os.close(fd)
    if mine is None:
        return None
    now = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    for uid, _, fd in _other_instances(plugin_dir, own):
        started, published = _stamps(fd)
        if started is not None:
            if (started, uid) < (mine, own):
                continue
            if now - max(started, published or 0) > PUBLISHING_FRESH_S * 1e9:
                continue  # alive or not, it has not published for too long
        if try_lock(fd):  # nobody holds it: that instance is dead (closing the fd lets go)
            continue
        return uid
    return None


def other_live_instances(plugin_dir: Path, own: str) -> list[str]:
    """The rolling-update ids of the other instances alive on this plugin directory (whose
    ``daemon-<UID>.lock`` someone holds), in id order (blocking; a few small files)."""
    alive = []
    for uid, _, fd in _other_instances(plugin_dir, own):
        if not try_lock(fd):  # held: its owner lives (a lock taken here goes with the fd's close)
            alive.append(uid)
    return alive


@contextlib.asynccontextmanager
async def hold_instance_lock(plugin_dir: Path, poll_s: float = 0.2, rolling_update_id: str | None = None,
                             sockets_of: Callable[[str], Sequence[Path]] | None = None) -> AsyncIterator[None]:
    """Hold the plugin directory's instance lock(s) for the duration of the context, waiting for
    them if another process holds them. An exclusive holder's pid is written into the file.

    :param rolling_update_id: None: hold ``daemon.lock`` exclusively; a UID: hold it shared and
        ``daemon-<UID>.lock`` exclusively (removed again on exit).
    :param sockets_of: with a UID, rolling-update id -> socket paths: dead instances' sockets are
        removed once the locks are held (:func:`remove_dead_instances`).
    """
    main = plugin_dir / LOCK_FILE
    if rolling_update_id is None:
        async with _hold(main, shared=False, poll_s=poll_s, pid_file=True):
            yield
        return
    own = plugin_dir / f"daemon-{rolling_update_id}.lock"
    async with _hold(main, shared=True, poll_s=poll_s, pid_file=False), \
            _hold(own, shared=False, poll_s=poll_s, pid_file=True):
        if sockets_of is not None:
            remove_dead_instances(plugin_dir, sockets_of, rolling_update_id)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):  # still held: nobody else can be using it
                own.unlink()
