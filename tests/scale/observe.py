"""What the bed measures from outside the drivers: pod and claim times from watches, the drivers'
API requests from the API server's audit log, percentiles and histogram quantiles.

Times are the watching process's wall clock when an event arrived (``time.time()``, the same clock
the stand-ins and the load generator use), not the objects' timestamps: those have one-second
resolution. A pod's start-up is creation (its ADDED event) to Running (the first event with that
phase), as ClusterLoader2's PodStartupLatency; a claim's allocation latency is its creation to the
first event with ``status.allocation``.

API requests by user agent: ``apiserver_request_total`` has no user or user-agent label, and
``--profiling`` shows CPU, not callers. The API server's audit log records every request with its
user, user agent, verb and resource, so the bed runs kube-apiserver with an audit policy that logs
(level Metadata, stage RequestReceived omitted) only the requests of the user the drivers
authenticate as, and nobody else's: the log stays small and costs the API server nothing for the
scheduler's, the controllers' or the stand-ins' requests. A request counts once (a watch at
ResponseStarted, when it begins; any other at ResponseComplete), by the time the API server
received it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path

import attrs

from tests.scale.api import Api

__all__ = ("AUDIT_POLICY", "DRIVER_USER", "Observer", "Times", "audit_requests", "bucket_delta", "bucket_quantile",
           "parse_histogram", "percentile")

#: The user the drivers' kubeconfig names (both drivers, never at the same time).
DRIVER_USER = "scale-drivers"
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"], "rules": [
    {"level": "Metadata", "users": [DRIVER_USER]}, {"level": "None"}]}


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) by the nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def bucket_quantile(buckets: Sequence[tuple[float, float]], q: float) -> float:
    """A quantile from cumulative histogram buckets ``(upper bound, count)``, sorted by bound, by
    linear interpolation inside the bucket (as Prometheus' ``histogram_quantile``); NaN for none."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 0)
        lower, below = bound, count
    return lower


@attrs.define
class Times:
    """When the observer saw one object's events (``time.time()``); None: not yet."""

    namespace: str
    created: float
    bound: float | None = None
    running: float | None = None
    done: float | None = None  # Succeeded or Failed (pods); allocated (claims)
    deleted: float | None = None


class Observer:
    """Cluster-wide informers on the bed's pods (label ``selector``) and on all ResourceClaims."""

    def __init__(self, api: Api, selector: str) -> None:
        self.api, self.selector = api, selector
        self.pods: dict[str, Times] = {}
        self.claims: dict[str, Times] = {}
        self._changed = asyncio.Event()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._pods())
            tg.create_task(self._claims())

    async def _pods(self) -> None:
        async for kind, pod in self.api.informer("/api/v1/pods", {"labelSelector": self.selector}):
            now = time.time()
            meta = pod["metadata"]
            t = self.pods.setdefault(meta["uid"], Times(meta["namespace"], now))
            if kind == "DELETED":
                t.deleted = t.deleted or now
            if (pod.get("spec") or {}).get("nodeName") and t.bound is None:
                t.bound = now
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Running" and t.running is None:
                t.running = now
            if phase in ("Succeeded", "Failed") and t.done is None:
                t.done = now
            self._changed.set()

    async def _claims(self) -> None:
        async for kind, claim in self.api.informer("/apis/resource.k8s.io/v1/resourceclaims", {}):
            now = time.time()
            meta = claim["metadata"]
            t = self.claims.setdefault(meta["uid"], Times(meta["namespace"], now))
            if kind == "DELETED":
                t.deleted = t.deleted or now
            if (claim.get("status") or {}).get("allocation") and t.done is None:
                t.done = now
            self._changed.set()

    async def wait(self, condition: Callable[[], bool], within: float, what: str) -> None:
        """Wait until ``condition()`` holds, looked at after each event. :raises TimeoutError: naming ``what``."""
        deadline = time.monotonic() + within
        while not condition():
            self._changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what}: not within {within:.0f} s")
            try:
                async with asyncio.timeout(min(left, 5.0)):
                    await self._changed.wait()
            except TimeoutError:
                continue

    def pods_in(self, namespaces: Iterable[str]) -> list[Times]:
        wanted = set(namespaces)
        return [t for t in self.pods.values() if t.namespace in wanted]

    def claims_in(self, namespaces: Iterable[str]) -> list[Times]:
        wanted = set(namespaces)
        return [t for t in self.claims.values() if t.namespace in wanted]


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def audit_requests(log: Path, since: float, until: float, user: str = DRIVER_USER) -> Counter[str]:
    """The requests ``user`` made with ``since <= received < until``, counted by ``"verb resource[/sub]"``
    (a watch once, when it began). The whole file is read: it holds only the drivers' requests."""
    counts: Counter[str] = Counter()
    if not log.exists():
        return counts
    with open(log) as f:
        for line in f:
            event = json.loads(line)
            if (event.get("user") or {}).get("username") != user:
                continue
            verb = event.get("verb", "")
            if event.get("stage") != ("ResponseStarted" if verb == "watch" else "ResponseComplete"):
                continue
            received = _stamp(event["requestReceivedTimestamp"])
            if not since <= received < until:
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", event.get("requestURI", "?"))
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            counts[f"{verb} {resource}"] += 1
    return counts


def parse_histogram(metrics_text: str, name: str, labels: dict[str, str]) -> list[tuple[float, float]]:
    """The cumulative buckets ``(le, count)`` of one Prometheus histogram series in a /metrics text."""
    out = []
    want = [f'{k}="{v}"' for k, v in labels.items()]
    for line in metrics_text.splitlines():
        if not line.startswith(f"{name}_bucket{{") or not all(w in line for w in want):
            continue
        le = line.split('le="', 1)[1].split('"', 1)[0]
        out.append((math.inf if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
    return sorted(out)


def bucket_delta(after: list[tuple[float, float]], before: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``after - before`` bucket by bucket (the observations between two scrapes)."""
    earlier = dict(before)
    return [(le, count - earlier.get(le, 0.0)) for le, count in after]
