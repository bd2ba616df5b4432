"""Processes and namespaces of a node known by pid: what tests/kubelet/node.py needs to wire a node's
network namespace up, to stop a node another process started, and to read files as a process of the
node (or one of its containers) sees them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Protocol


def zombie(pid: int) -> bool:
    """True when ``pid`` has exited but is not reaped yet, or is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class NodeNetwork(Protocol):
    """A network namespace of the node's own (tests/e2e/network.py): the node gets ``node_ip`` there,
    its pods the CNI network of ``cni_config``."""

    node_ip: str

    def attach(self, pid: int) -> None:
        """Wire the network namespace of process ``pid`` (the node's namespace holder) up."""

    def cni_config(self) -> str:
        """The CNI conflist (JSON) containerd gives its pods."""


class PidProcess:
    """A process known by pid only (a node that another process started, :meth:`Node.attach`), with the
    part of ``subprocess.Popen``'s interface :meth:`Node.stop` uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and (not Path(f"/proc/{self.pid}").exists() or zombie(self.pid)):
            self.returncode = -1
        return self.returncode

    def send_signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.05)
        return -1


def path_in(pid: int, path: Path | str) -> Path:
    """``path`` as process ``pid`` sees it, reached through ``/proc/<pid>/root``. Symbolic links on
    the way are followed in that process's file system: the kernel would resolve an absolute one
    (``/var/run`` -> ``/run``) in ours."""
    root = Path(f"/proc/{pid}/root")
    parts, done, hops = list(Path(path).relative_to("/").parts), Path("/"), 0
    while parts:
        part = parts.pop(0)
        candidate = done.parent if part == ".." else done / part
        link = root / candidate.relative_to("/")
        if link.is_symlink() and hops < 40:
            hops += 1
            target = Path(os.readlink(link))
            parts = [*(target.relative_to("/").parts if target.is_absolute() else target.parts), *parts]
            done = Path("/") if target.is_absolute() else done
            continue
        done = candidate
    return root / done.relative_to("/")
