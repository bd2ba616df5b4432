"""kubelet/sockets.py: a cancellation (a stop signal) at any await of start-up leaves no socket file."""

from __future__ import annotations

import socket

import anyio
import pytest

from ascend_dra.kubelet.registration import RegistrationServer
from ascend_dra.kubelet.sockets import serve_unix

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_a_cancellation_right_after_the_bind_removes_the_socket_file(short_tmp):
    path = short_tmp / "reg.sock"
    with anyio.CancelScope() as scope:
        scope.cancel()  # delivered at the first await that yields: asyncio's, just after bind()
        async with serve_unix([RegistrationServer("d.example.com", "/x")], path):
            await anyio.sleep(10)
    assert scope.cancelled_caught
    assert not path.exists()  # and no listening socket left open (a ResourceWarning fails the test)


async def test_a_socket_is_removed_on_exit_but_never_a_successors(short_tmp):
    path = short_tmp / "reg.sock"
    async with serve_unix([RegistrationServer("d.example.com", "/x")], path):
        assert path.is_socket()
    assert not path.exists()
    with socket.socket(socket.AF_UNIX) as successor:
        async with serve_unix([RegistrationServer("d.example.com", "/x")], path):
            path.unlink()
            successor.bind(str(path))  # another server took the name meanwhile
        assert path.is_socket()  # ours went away, the successor's stays


async def test_the_socket_is_created_0600_without_touching_the_process_umask(short_tmp, monkeypatch):
    """The umask is process-wide: setting it around the bind (as before) also narrowed every file a
    worker thread created meanwhile (a CDI spec the runtime must read, a vNPU-core dir)."""
    import os
    import stat

    calls: list[int] = []
    real_umask = os.umask
    monkeypatch.setattr(os, "umask", lambda mask: calls.append(mask) or real_umask(mask))
    previous = real_umask(0)  # the widest umask: the mode must come from the socket itself
    try:
        path = short_tmp / "reg.sock"
        async with serve_unix([RegistrationServer("d.example.com", "/x")], path):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(str(path))  # it listens
    finally:
        real_umask(previous)
    assert calls == []
