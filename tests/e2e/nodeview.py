"""What the tier reads on the nodes themselves: a container's process (through containerd), the files
a running container sees, its memory and CPU, the kubelet's log lines.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.kubelet.hostns import path_in
from tests.kubelet.node import Node

#: klog's header: ``I1207 11:40:01.123456    1234 file.go:12] "message" key="value" ...``
_KLOG = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6})\s")


def container_id(pod: dict[str, Any], container: str) -> str:
    """The containerd ID of ``container`` in ``pod``'s status (``containerd://<id>``)."""
    [status] = [s for s in pod["status"]["containerStatuses"] if s["name"] == container]
    return status["containerID"].split("://", 1)[1]


def task_pid(node: Node, cid: str) -> int:
    """The host PID of container ``cid``'s first process (``ctr tasks ls``)."""
    for line in node.ctr("tasks", "ls").stdout.splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == cid:
            return int(pid)
    raise LookupError(f"no task {cid} in {node.node_name}'s containerd")


def in_container(pid: int, path: str) -> Path:
    """``path`` as the container whose process is ``pid`` sees it (its mount namespace)."""
    return path_in(pid, path)


@dataclass(frozen=True)
class Usage:
    """A process's memory (MiB: ``VmRSS`` now, ``VmHWM`` its peak) and CPU time (seconds, its own and
    its waited-for children's), from /proc."""

    rss_mib: float
    peak_rss_mib: float
    cpu_seconds: float
    age_seconds: float

    @classmethod
    def of(cls, pid: int) -> Usage:
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
        start = int(fields[19]) / tick
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return cls(rss_mib=int(status["VmRSS"].split()[0]) / 1024, peak_rss_mib=int(status["VmHWM"].split()[0]) / 1024,
                   cpu_seconds=(utime + stime + cutime + cstime) / tick, age_seconds=uptime - start)


def klog_time(line: str, year: int | None = None) -> float:
    """The Unix time of a klog line (local time, the year is not in the line: this one by default)."""
    m = _KLOG.match(line)
    if not m:
        raise ValueError(f"not a klog line: {line[:80]!r}")
    month, day, hh, mm, ss, us = (int(g) for g in m.groups())
    year = year or dt.datetime.now().year
    return dt.datetime(year, month, day, hh, mm, ss, us).timestamp()


def kube_time(stamp: str) -> float:
    """The Unix time of an API timestamp (``2026-12-07T11:40:01Z``)."""
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def kubelet_lines(node: Node, needle: str, since: float = 0.0) -> list[str]:
    """The kubelet log lines holding ``needle``, logged at or after Unix time ``since``."""
    return [line for line in node.kubelet_log.read_text(errors="replace").splitlines()
            if needle in line and _KLOG.match(line) and klog_time(line) >= since]


def condition_time(pod: dict[str, Any], kind: str) -> float | None:
    """When ``pod``'s condition ``kind`` last turned True; None while it is not True."""
    for c in pod.get("status", {}).get("conditions") or []:
        if c["type"] == kind and c["status"] == "True":
            return kube_time(c["lastTransitionTime"])
    return None
