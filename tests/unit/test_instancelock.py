"""instancelock.remove_dead_instances when an instance stops in the middle of the check (found by review)."""

from __future__ import annotations

import errno
import fcntl
import os
import time

import pytest

from ascend_dra.node import instancelock


def test_an_instance_that_stops_while_being_checked_is_skipped_not_a_crash(tmp_path, monkeypatch):
    lock = tmp_path / "daemon-x.lock"
    alive = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(alive, fcntl.LOCK_EX)
    socket = tmp_path / "x.sock"
    real_try_lock = instancelock.try_lock

    def stops_first(fd: int, **kwargs) -> bool:
        lock.unlink()  # x stops cleanly between our open and our try: its file goes, then its lock
        os.close(alive)
        return real_try_lock(fd, **kwargs)

    monkeypatch.setattr(instancelock, "try_lock", stops_first)
    assert instancelock.remove_dead_instances(tmp_path, lambda uid: [socket], own="y") == []
    assert not lock.exists()


def test_a_dead_instance_loses_its_sockets_and_its_lock_file(tmp_path):
    import socket as sockets

    lock = tmp_path / "daemon-x.lock"
    lock.touch()
    path = tmp_path / "x.sock"
    with sockets.socket(sockets.AF_UNIX) as s:
        s.bind(str(path))
    assert instancelock.remove_dead_instances(tmp_path, lambda uid: [path], own="y") == ["x"]
    assert not path.exists() and not lock.exists()


def _holder(path, started_ns: int | None, *, alive: bool) -> int | None:
    """An instance's lock file with its stamp (none: a release from before stamps); held (a live
    instance) if ``alive``: returns the fd."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.pwrite(fd, f"{os.getpid()}\n".encode() + (b"" if started_ns is None else f"{started_ns}\n".encode()), 0)
    if not alive:
        os.close(fd)
        return None
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _now() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def test_only_a_live_instance_that_started_later_makes_this_one_stand_by(tmp_path):
    now = _now()
    held = [_holder(tmp_path / "daemon-me.lock", now - 20_000, alive=True),
            _holder(tmp_path / "daemon-older.lock", now - 30_000, alive=True),
            _holder(tmp_path / "daemon-dead.lock", now - 10_000, alive=False)]  # killed: its file stayed
    try:
        assert instancelock.newer_live_instance(tmp_path, "me") is None
        (tmp_path / "daemon-starting.lock").write_text("")  # not locked yet, nothing written yet
        assert instancelock.newer_live_instance(tmp_path, "me") is None
        held.append(_holder(tmp_path / "daemon-newer.lock", now - 15_000, alive=True))
        assert instancelock.newer_live_instance(tmp_path, "me") == "newer"
        assert instancelock.newer_live_instance(tmp_path, "newer") is None
        assert instancelock.newer_live_instance(tmp_path, "older") in ("me", "newer")
    finally:
        for fd in held:
            if fd is not None:
                os.close(fd)
    assert instancelock.newer_live_instance(tmp_path, "me") is None  # every one of them gone


def test_a_newer_instance_that_stopped_publishing_no_longer_keeps_this_one_standing_by(tmp_path):
    """Alive but failing every write (its release lacks an RBAC rule, say): after
    PUBLISHING_FRESH_S the older instance publishes again, until the newer one succeeds again."""
    fresh_s = instancelock.PUBLISHING_FRESH_S
    stale = _now() - int((fresh_s + 60) * 1e9)
    held = [_holder(tmp_path / "daemon-me.lock", stale - 10**9, alive=True),
            _holder(tmp_path / "daemon-newer.lock", stale, alive=True)]
    try:
        assert instancelock.newer_live_instance(tmp_path, "me") is None  # started long ago, never published
        instancelock.mark_published(tmp_path, "newer")
        assert instancelock.newer_live_instance(tmp_path, "me") == "newer"
        instancelock.mark_published(tmp_path, "newer")  # in place: the file keeps its shape
        assert (tmp_path / "daemon-newer.lock").read_text().count("\n") == 3
    finally:
        for fd in held:
            os.close(fd)


def test_a_live_instance_of_a_release_without_stamps_is_left_to_publish(tmp_path):
    """An older release always publishes; two publishers of different inventories fight."""
    held = [_holder(tmp_path / "daemon-me.lock", _now(), alive=True),
            _holder(tmp_path / "daemon-old-release.lock", None, alive=True)]
    try:
        assert instancelock.newer_live_instance(tmp_path, "me") == "old-release"
    finally:
        for fd in held:
            os.close(fd)
    assert instancelock.newer_live_instance(tmp_path, "me") is None


def test_a_lock_file_removed_under_a_starting_instance_is_locked_again_at_its_path(tmp_path, monkeypatch):
    """Locking a file another instance unlinked (remove_dead_instances) would hide this one."""
    import anyio

    path = tmp_path / "daemon-x.lock"
    real_try_lock = instancelock.try_lock
    removed = []

    def removed_first(fd: int, **kwargs) -> bool:
        if not removed:
            removed.append(path)
            path.unlink()  # another instance found it free and removed it between our open and lock
        return real_try_lock(fd, **kwargs)

    monkeypatch.setattr(instancelock, "try_lock", removed_first)

    async def main() -> None:
        async with instancelock._hold(path, shared=False, poll_s=0.01, pid_file=True) as fd:
            assert os.fstat(fd).st_ino == path.stat().st_ino
            assert path.read_text().startswith(f"{os.getpid()}\n")

    anyio.run(main)


@pytest.mark.anyio
async def test_a_full_state_disk_does_not_keep_the_instance_lock_from_being_taken(tmp_path, monkeypatch):
    """Writing the pid into the lock file failed with ENOSPC and the daemon stopped at start ("stopped:
    [Errno 28] No space left on device", naming no file); the lock is the flock (an audit of faults)."""
    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(instancelock.os, "pwrite", full)
    async with instancelock.hold_instance_lock(tmp_path, rolling_update_id=None):
        other = os.open(tmp_path / "daemon.lock", os.O_RDWR)
        with pytest.raises(BlockingIOError):  # held all the same
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(other)

