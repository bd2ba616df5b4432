"""Crash-safe file replacement: write a temp file, fsync it, rename it over the target, fsync the dir.

A reader (the container runtime reading CDI specs, the daemon reading its checkpoint after a
kill -9) sees either the old file or the new one, never a torn one. The temp name starts with a
dot and ends in ``.tmp``, so neither the CDI library (which reads only ``*.yaml``/``*.json``) nor
the kubelet's plugin watcher (which skips dot files) ever picks it up.
"""

from __future__ import annotations

import os
from pathlib import Path

from ascend_dra.observe.faults import disk_error, disk_fault

__all__ = ("fsync_dir", "remove_durably", "write_atomic")


def fsync_dir(directory: Path) -> None:
    """fsync a directory so that a rename or unlink inside it survives a power loss."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True, fault: str = "") -> None:
    """Replace ``path`` with ``data`` atomically, and durably unless ``durable`` is False.

    :param durable: fsync the file before the rename and the directory after it, so the new file
        survives a power loss. Without it the replacement is still atomic for every reader (the
        rename), which is all a file on tmpfs, or one re-created after every reboot, needs.
    :param fault: the file's name among :data:`ascend_dra.observe.faults.DISK_POINTS` (``snapshot`` for the
        points ``snapshot:write`` and ``snapshot:sync``), where the tests inject disk faults.
    :raises OSError: on any failure (disk full, read-only file system, ...); the old file is then
        untouched and the temp file is removed.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            view = memoryview(data)
            if fault and (error := disk_error(f"{fault}:write")) is not None:
                os.write(fd, view[:len(view) // 2])  # a disk that fills mid-write
                raise error
            while view:
                view = view[os.write(fd, view):]
            if durable:
                if fault:
                    disk_fault(f"{fault}:sync")
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename in (None, os.fspath(tmp)):
            # name the file the caller asked for, not our temp file; a write or fsync names none
            exc.filename = os.fspath(path)
        raise
    if durable:
        fsync_dir(path.parent)


def remove_durably(path: Path, *, durable: bool = True) -> bool:
    """Unlink ``path`` and (unless ``durable`` is False) fsync its directory; return False if it
    did not exist.

    :raises OSError: the file exists but cannot be removed (e.g. a read-only file system).
    """
    if not os.path.lexists(path):  # unlink on a read-only mount fails with EROFS even for no file
        return False
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    if durable:
        fsync_dir(path.parent)
    return True
