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


def _holder(path, started_ns: int, *, alive: bool) -> int | None:
    """An instance's lock file with its stamp; held (a live instance) if ``alive``: returns the fd."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.pwrite(fd, f"{os.getpid()}\n{started_ns}\n".encode(), 0)
    if not alive:
        os.close(fd)
        return None
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_only_a_live_instance_that_started_later_makes_this_one_stand_by(tmp_path):
    held = [_holder(tmp_path / "daemon-me.lock", 200, alive=True),
            _holder(tmp_path / "daemon-older.lock", 100, alive=True),
            _holder(tmp_path / "daemon-dead.lock", 300, alive=False)]  # killed: its file stayed
    try:
        assert instancelock.newer_live_instance(tmp_path, "me") is None
        (tmp_path / "daemon-starting.lock").write_text("")  # took its lock, has not written its stamp yet
        assert instancelock.newer_live_instance(tmp_path, "me") is None
        held.append(_holder(tmp_path / "daemon-newer.lock", 250, alive=True))
        assert instancelock.newer_live_instance(tmp_path, "me") == "newer"
        assert instancelock.newer_live_instance(tmp_path, "newer") is None
        assert instancelock.newer_live_instance(tmp_path, "older") in ("me", "newer")
    finally:
        for fd in held:
            if fd is not None:
                os.close(fd)
    assert instancelock.newer_live_instance(tmp_path, "me") is None  # every one of them gone
