"""instancelock.remove_dead_instances when an instance stops in the middle of the check (found by review)."""

from __future__ import annotations

import fcntl
import os

from ascend_dra import instancelock


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
