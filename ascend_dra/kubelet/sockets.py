"""Unix-socket servers for the kubelet: stale-socket replacement, permissions, clean removal.

Source: the Go helper's ``endpoint.go`` (remove a stale socket before listening, remove the
socket on close), docs/architecture.md#sockets-and-directories. Our sockets are mode 0600 and their directories
0750: only root (the kubelet) may connect.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio

from ascend_dra.kubelet.corked import CorkedServer

__all__ = ("UNIX_PATH_MAX", "serve_unix")

#: ``sun_path`` is 108 bytes on Linux, including the terminating NUL.
UNIX_PATH_MAX = 107


def _prepare_path(path: Path) -> None:
    if len(os.fsencode(path)) > UNIX_PATH_MAX:
        raise OSError(errno.ENAMETOOLONG, f"socket path {path} is longer than {UNIX_PATH_MAX} bytes (a unix "
                      "socket limit); use a shorter directory")
    path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISSOCK(mode):
        path.unlink()  # a stale socket from a crash: nobody can be listening, we own this path
    else:
        raise FileExistsError(f"{path} exists and is not a socket; refusing to replace it")


def _bound_0600(path: Path) -> tuple[socket.socket, int]:
    """A unix stream socket bound at ``path``, its file created mode 0600 (never briefly wider),
    and the file's inode number (taken at once: nothing can have replaced it yet).

    Linux gives the new file the socket inode's mode less the umask (``unix_bind``), so the mode is
    set on the socket before the bind: the process-wide umask, which worker threads writing files
    at the same moment would also get, is left alone.
    """
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        os.fchmod(listener.fileno(), 0o600)
        listener.bind(os.fspath(path))
        inode = os.stat(path).st_ino
        listener.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return listener, inode


@contextlib.asynccontextmanager
async def serve_unix(handlers: Sequence[Any], path: Path) -> AsyncIterator[CorkedServer]:
    """Serve grpclib ``handlers`` on a unix socket at ``path`` until the context exits.

    :raises OSError: ENAMETOOLONG when the path is too long for a unix socket.
    :raises FileExistsError: a non-socket file is in the way.
    """
    _prepare_path(path)
    server = CorkedServer(list(handlers))
    ours: int | None = None
    try:
        listener, ours = _bound_0600(path)  # from here on the file is ours to remove (below)
        try:
            # asyncio yields once before it returns the server: cancelled there (a stop signal), it
            # would leave a listening socket that nobody closes and a file nobody removes.
            with anyio.CancelScope(shield=True):
                await server.start(sock=listener)
        except BaseException:
            listener.close()
            raise
        yield server
    finally:
        # Runs while the daemon is being cancelled: shield it, but bound it (docs/architecture.md#conventions).
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            with contextlib.suppress(RuntimeError):  # "Server is not started": start() failed
                server.close()
            with contextlib.suppress(FileNotFoundError):
                if ours is not None and (await anyio.Path(path).stat()).st_ino == ours:  # never a successor's
                    await anyio.Path(path).unlink()
            with contextlib.suppress(Exception):
                await server.wait_closed()
