"""What the chart's pods use on the bed, the figures its requests, limits and probes come from.

:func:`snapshot` reads, for every running daemon and webhook pod, its process's RSS (now and its
peak, ``VmHWM``) and CPU time from /proc, with the container's requests and limits; between two
snapshots of the same container it also gives the CPU used per second of the interval (the tier's
work: claims, Lab 18, the roll). :func:`startup` gives a daemon pod's start: container started →
the kubelet registered the plugin → the pod Ready. Everything is kept in :data:`RECORD`, written to
``${ASCEND_DRA_CACHE:-~/.cache/ascend-dra}/e2e-usage.json`` and printed at the end of the session.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.e2e.nodeview import Usage, condition_time, container_id, klog_time, kube_time, kubelet_lines, task_pid
from tests.e2e.release import FAKE_RELEASE, LAB_RELEASE, daemon_pods, webhook_pods

#: stage -> pod name -> figures; "startup" -> pod name -> seconds.
RECORD: dict[str, dict[str, dict[str, Any]]] = {}
_LAST: dict[str, tuple[float, float]] = {}  # container ID -> (time, CPU seconds) at its last snapshot


def mib(quantity: str) -> float:
    """A memory quantity as the chart writes them (``512Mi``, ``1Gi``, bytes) in MiB."""
    for suffix, factor in (("Ki", 1 / 1024), ("Mi", 1.0), ("Gi", 1024.0)):
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity) / 2**20


def _pods(cp: Any) -> list[tuple[str, dict[str, Any]]]:
    pods = [(r, p) for r in (FAKE_RELEASE, LAB_RELEASE) for p in daemon_pods(cp, r)] + [
        ("webhook", p) for p in webhook_pods(cp)]
    return [(c, p) for c, p in pods
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def snapshot(bed: Any, stage: str) -> dict[str, dict[str, Any]]:
    """The figures of every running daemon and webhook pod, recorded under ``stage``."""
    figures = {}
    for component, pod in _pods(bed.cp):
        [container] = pod["spec"]["containers"]
        cid = container_id(pod, container["name"])
        usage = Usage.of(task_pid(bed.nodes[pod["spec"]["nodeName"]], cid))
        now = time.monotonic()
        entry: dict[str, Any] = {
            "component": component, "node": pod["spec"]["nodeName"], "rss_mib": round(usage.rss_mib, 1),
            "peak_rss_mib": round(usage.peak_rss_mib, 1), "cpu_seconds": round(usage.cpu_seconds, 2),
            "age_seconds": round(usage.age_seconds),
            "resources": container["resources"]}
        if cid in _LAST:
            then, cpu = _LAST[cid]
            entry["cpu_millicores_since_last"] = round(1000 * (usage.cpu_seconds - cpu) / (now - then))
            entry["seconds_since_last"] = round(now - then)
        _LAST[cid] = (now, usage.cpu_seconds)
        figures[pod["metadata"]["name"]] = entry
    RECORD[stage] = figures
    return figures


def startup(bed: Any, pod: dict[str, Any]) -> dict[str, float]:
    """Seconds from the daemon container's start to the kubelet's registration of it, and to Ready."""
    node = bed.nodes[pod["spec"]["nodeName"]]
    [status] = pod["status"]["containerStatuses"]
    started = kube_time(status["state"]["running"]["startedAt"])
    [line] = [ln for ln in kubelet_lines(node, "Registered DRA plugin") if pod["metadata"]["uid"] in ln]
    ready = condition_time(pod, "Ready")
    assert ready is not None
    figures = {"registered_after_s": round(klog_time(line) - started, 1), "ready_after_s": round(ready - started, 1)}
    RECORD.setdefault("startup", {})[pod["metadata"]["name"]] = figures
    return figures


def outgrown(figures: dict[str, dict[str, Any]]) -> list[str]:
    """The pods whose RSS passed their memory request, or whose peak reached their limit: the chart's
    defaults no longer fit what the run measures."""
    out = []
    for name, f in figures.items():
        request, limit = (mib(f["resources"][k]["memory"]) for k in ("requests", "limits"))
        if f["rss_mib"] > request or f["peak_rss_mib"] >= limit:
            out.append(f"{name}: RSS {f['rss_mib']} MiB (request {request:.0f}), peak {f['peak_rss_mib']} "
                       f"(limit {limit:.0f})")
    return out


def write(path: Path) -> list[str]:
    """Write :data:`RECORD` as JSON to ``path``; the lines of a short summary."""
    path.write_text(json.dumps(RECORD, indent=2) + "\n")
    lines = []
    for stage, pods in RECORD.items():
        for name, f in pods.items():
            if stage == "startup":
                lines.append(f"{stage:<22} {name}: registered {f['registered_after_s']} s, "
                             f"Ready {f['ready_after_s']} s after the container started")
                continue
            rate = (f", {f['cpu_millicores_since_last']}m CPU over the last {f['seconds_since_last']} s"
                    if "cpu_millicores_since_last" in f else "")
            lines.append(f"{stage:<22} {name}: RSS {f['rss_mib']} MiB (peak {f['peak_rss_mib']}), "
                         f"{f['cpu_seconds']} CPU-s in {f['age_seconds']} s{rate}")
    return lines

