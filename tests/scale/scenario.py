"""One driver on one node kind through the bed's phases, and the figures of each phase.

Phases, in order (workloads.py says what each pod asks): the drivers start; ``idle`` (the empty
cluster for ``steady_s``); ``fill R`` for each fill rate R (90 % of the slots, as long-running
Jobs created at R a second, until all run); after the first fill, ``steady`` (the cluster at 90 %,
nothing created, for ``steady_s``), then the fill is deleted; after the last fill, ``churn`` (the
other 10 % as short Jobs of ``churn_completions`` pods of ``churn_run_s`` seconds, the Jobs created
at ``churn_rate`` a second, until every pod has succeeded), then all is deleted. For our
HAMivNPUCore nodes, then ``webhook idle`` (HAMi pods created one at a time) and ``burst`` (HAMi
pods created all at once, as a Volcano job's).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Sequence
from typing import Any

import attrs

from tests.cluster.controlplane import ADMIN_USER
from tests.scale.api import Api
from tests.scale.bed import KUBELET_USER, Bed
from tests.scale.fleet import Fleet, ProcStat, go_binary
from tests.scale.kubelet import StandIns
from tests.scale.observe import (
    DRIVER_USER,
    Observer,
    audit_requests,
    bucket_delta,
    bucket_quantile,
    parse_histogram,
    percentile,
)
from tests.scale.workloads import LABEL_PHASE, LABEL_RUN, create_at_rate, job, pod, slots_per_node, template

__all__ = ("Options", "Session")

RESOURCE = "/apis/resource.k8s.io/v1"
REVIEW = "ascend_dra_webhook_review_seconds"
#: kube-apiserver's histogram of each admission webhook call (k8s.io/apiserver, admission metrics).
ADMISSION = "apiserver_admission_webhook_admission_duration_seconds"


@attrs.define
class Options:
    """The run's shape (defaults: ClusterLoader2's DRA test on 100 nodes)."""

    nodes: int = 100
    rates: tuple[float, ...] = (10.0, 20.0)
    fill: float = 0.9
    churn_rate: float = 5.0
    churn_completions: int = 10
    churn_run_s: float = 30.0
    steady_s: float = 60.0
    burst: int = 500
    idle_reviews: int = 50
    parallel_starts: int = 8


Figures = dict[str, float]


class Session:
    """``driver`` (``ours`` or ``go``) on the bed's ``shape`` hosts; :meth:`run` returns phase -> figures.

    :param hook: the webhook (tests/cluster/webhook_process.Hook) for our HAMi pods, else None.
    """

    def __init__(self, bed: Bed, shape: str, driver: str, options: Options, hook: Any = None,
                 figures: dict[str, Figures] | None = None) -> None:
        """:param figures: filled phase by phase (what a failed run measured stays there)."""
        self.bed, self.shape, self.driver, self.o, self.hook = bed, shape, driver, options, hook
        self.run_id = uuid.uuid4().hex[:8]
        self.hosts = bed.hosts(shape)
        self.fleet = Fleet(self.hosts, driver, bed.driver_kubeconfig, go_binary=go_binary(),
                           parallel=options.parallel_starts)
        self.slots = slots_per_node(shape) * len(self.hosts)
        self.figures: dict[str, Figures] = {} if figures is None else figures
        self.standins: StandIns | None = None

    def _api(self, user: str, agent: str, limit: int = 64) -> Api:
        cp = self.bed.cp
        return Api(cp.server, cp.user_tokens[user], str(cp.ca_file), user_agent=agent, limit=limit)

    async def run(self) -> dict[str, Figures]:
        async with (self._api(ADMIN_USER, "scale-load", 128) as load, self._api(ADMIN_USER, "scale-observer") as
                    watch, self._api(KUBELET_USER, "scale-kubelet", 256) as kubelets):
            self.load = load
            self.observer = Observer(watch, f"{LABEL_RUN}={self.run_id}")
            tasks = [asyncio.create_task(self.observer.run())]
            try:
                began = time.monotonic()
                await asyncio.to_thread(self.fleet.start)
                await asyncio.to_thread(self.bed.wait_published, self.fleet.driver_name)
                started = time.monotonic() - began
                self.standins = StandIns(self.bed.names, {h.name: h.registry for h in self.hosts}.__getitem__,
                                         self.fleet.driver_name, kubelets)
                tasks.append(asyncio.create_task(self.standins.run()))
                await self.standins.wait_registered(300)
                self.figures["start"] = {"all registered s": started,
                                         "per driver p50 s": percentile(list(self.fleet.started.values()), 0.5)}
                await self._phases()
                errors = self.standins.record.errors
                if errors:
                    raise RuntimeError(f"{len(errors)} stand-in errors, e.g. {errors[:3]}")
            finally:
                for task in tasks:
                    task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.gather(*tasks, return_exceptions=True)
                await asyncio.to_thread(self.fleet.stop)
                await asyncio.to_thread(self.bed.delete_slices, self.fleet.driver_name)
        return self.figures

    async def _phases(self) -> None:
        o = self.o
        self.figures["idle"] = await self._window(o.steady_s)
        n_fill = int(self.slots * o.fill)
        for i, rate in enumerate(o.rates):
            ns = await self._namespace(f"fill{int(rate)}")
            self.figures[f"fill {rate:g}/s"] = await self._fill(ns, n_fill, rate)
            if i == 0:
                self.figures["steady 90%"] = await self._window(o.steady_s)
            if i == len(o.rates) - 1 and o.churn_completions:
                churn = await self._namespace("churn")
                self.figures["churn"] = await self._churn(churn, self.slots - n_fill)
                await self._drain([ns, churn])
            else:
                await self._drain([ns])
        if self.hook is not None and o.burst:
            await self._webhook_phases()

    # -- phases
    async def _namespace(self, phase: str) -> str:
        name = f"{self.shape}-{self.driver}-{phase}-{self.run_id}"
        if self.hook is not None:
            await asyncio.to_thread(self.hook.namespace, name)
        else:
            await self.load.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        body = template(self.shape, self.driver)
        if body is not None:
            await self.load.call("POST", f"{RESOURCE}/namespaces/{name}/resourceclaimtemplates", body)
        return name

    def _labels(self, phase: str) -> dict[str, str]:
        return {LABEL_RUN: self.run_id, LABEL_PHASE: phase.replace(" ", "-")}

    async def _fill(self, ns: str, count: int, rate: float) -> Figures:
        jobs = [job(f"long-{i}", self.shape, self.driver, self._labels("fill")) for i in range(count)]
        return await self._measured(ns, f"/apis/batch/v1/namespaces/{ns}/jobs", jobs, rate, count, "running")

    async def _churn(self, ns: str, jobs_count: int) -> Figures:
        o = self.o
        jobs = [job(f"short-{i}", self.shape, self.driver, self._labels("churn"), completions=o.churn_completions,
                    run_seconds=o.churn_run_s) for i in range(jobs_count)]
        return await self._measured(ns, f"/apis/batch/v1/namespaces/{ns}/jobs", jobs, o.churn_rate,
                                    jobs_count * o.churn_completions, "done")

    async def _measured(self, ns: str, path: str, bodies: Sequence[dict[str, Any]], rate: float | None, pods: int,
                        until: str, concurrency: int = 64, tolerate: bool = False) -> Figures:
        """Create ``bodies`` at ``rate``, wait until ``pods`` pods of ``ns`` are ``until`` (running /
        done); with ``tolerate``, pods whose create was refused are counted, not waited for."""
        before = await self._snapshot()
        load = await create_at_rate(self.load, path, bodies, rate, concurrency, tolerate=tolerate)
        pods -= len(load.refused)
        span = len(bodies) / rate if rate else 0
        await self.observer.wait(lambda: self._no_errors() and sum(
            1 for t in self.observer.pods_in([ns]) if getattr(t, until)) >= pods, span + 900,
            f"{pods} pods {until} in {ns}")
        figures = await self._figures([ns], before)
        figures["create p50 ms"] = percentile(load.latencies, 0.5) * 1e3
        figures["create p99 ms"] = percentile(load.latencies, 0.99) * 1e3
        figures["generator behind s"] = load.behind_s
        if tolerate:
            figures["creates refused"] = len(load.refused)
            if load.refused:
                print(f"{ns}: {len(load.refused)} creates refused, e.g. {load.refused[0]}", flush=True)
        return figures

    def _no_errors(self) -> bool:
        """True; raises when a stand-in failed (a bug of the bed) or a driver exited, so a run stops at once.

        :raises RuntimeError: naming the first errors.
        """
        assert self.standins is not None
        errors = self.standins.record.errors
        if errors:
            raise RuntimeError(f"{len(errors)} stand-in errors, e.g. {errors[:3]}")
        gone = [name for name, proc in self.fleet.procs.items() if proc.poll() is not None]
        if gone:
            raise RuntimeError(f"the {self.driver} driver exited on {gone[:3]}")
        return True

    async def _window(self, seconds: float) -> Figures:
        before = await self._snapshot()
        await asyncio.sleep(seconds)
        return await self._figures([], before)

    async def _drain(self, namespaces: list[str]) -> None:
        """Delete the namespaces; wait until their pods and claims are gone (each pod unprepared first)."""
        for ns in namespaces:
            await self.load.call("DELETE", f"/api/v1/namespaces/{ns}")
        obs = self.observer
        await obs.wait(lambda: all(t.deleted for t in obs.pods_in(namespaces))
                       and all(t.deleted for t in obs.claims_in(namespaces)), 900, f"{namespaces} drained")

    async def _webhook_phases(self) -> None:
        o = self.o
        for phase, count, concurrency in (("webhook idle", o.idle_reviews, 1), ("burst", o.burst, o.burst)):
            ns = await self._namespace(phase.split()[-1])
            metrics0 = await asyncio.to_thread(self.hook.proc.metrics)
            server0 = await self.load.text("/metrics")
            bodies = [pod(self.shape, self.driver, self._labels(phase), name=f"p-{i}") for i in range(count)]
            figures = await self._measured(ns, f"/api/v1/namespaces/{ns}/pods", bodies, None, count, "running",
                                           concurrency, tolerate=True)
            metrics1 = await asyncio.to_thread(self.hook.proc.metrics)
            server1 = await self.load.text("/metrics")
            labels = {"endpoint": "mutate-pods", "outcome": "converted"}
            buckets = bucket_delta(parse_histogram(metrics1, REVIEW, labels), parse_histogram(metrics0, REVIEW, labels))
            figures["review p50 ms"] = bucket_quantile(buckets, 0.5) * 1e3
            figures["review p99 ms"] = bucket_quantile(buckets, 0.99) * 1e3
            figures["reviews"] = buckets[-1][1] if buckets else 0
            # The same reviews as the API server timed them: the call, TLS and connection set-up included
            # (its buckets are coarse: 5, 25, 100, 500 ms, ...).
            admit = {"type": "admit", "operation": "CREATE", "rejected": "false"}
            buckets = bucket_delta(parse_histogram(server1, ADMISSION, admit),
                                   parse_histogram(server0, ADMISSION, admit))
            figures["apiserver webhook p50 ms"] = bucket_quantile(buckets, 0.5) * 1e3
            figures["apiserver webhook p99 ms"] = bucket_quantile(buckets, 0.99) * 1e3
            self.figures[phase] = figures
            await self._drain([ns])

    # -- figures
    async def _snapshot(self) -> tuple[float, dict[str, ProcStat]]:
        return time.time(), await asyncio.to_thread(self.fleet.stats)

    async def _figures(self, namespaces: list[str], before: tuple[float, dict[str, ProcStat]]) -> Figures:
        since, stats0 = before
        until, stats1 = await self._snapshot()
        seconds = until - since
        n = len(stats1)
        out: Figures = {"seconds": seconds}
        out["cpu ms/s per driver"] = sum(stats1[k].cpu - stats0[k].cpu for k in stats1) / n / seconds * 1e3
        out["children cpu ms/s per driver"] = (sum(stats1[k].children_cpu - stats0[k].children_cpu for k in stats1)
                                               / n / seconds * 1e3)
        out["rss MiB all drivers"] = sum(s.rss_mib for s in stats1.values())
        requests = audit_requests(self.bed.audit_log, since, until, DRIVER_USER)
        watches = sum(c for k, c in requests.items() if k.startswith("watch "))
        out["api requests /node/min"] = (sum(requests.values()) - watches) / n / seconds * 60
        out["watches /node/min"] = watches / n / seconds * 60
        assert self.standins is not None
        record = self.standins.record
        prepares, unprepares = record.of("prepare", since, until), record.of("unprepare", since, until)
        out["prepares"] = len(prepares)
        out["prepare errors"] = sum(1 for c in prepares if c.error)
        if prepares:
            out["api requests per prepare"] = (sum(requests.values()) - watches) / len(prepares)
        for name, calls in (("prepare", prepares), ("unprepare", unprepares)):
            ms = [c.seconds * 1e3 for c in calls if not c.error]
            if ms:
                out[f"{name} p50 ms"], out[f"{name} p99 ms"] = percentile(ms, 0.5), percentile(ms, 0.99)
        if namespaces:
            pods = self.observer.pods_in(namespaces)
            startup = [t.running - t.created for t in pods if t.running]
            for q in (0.5, 0.9, 0.99):
                out[f"startup p{int(q * 100)} s"] = percentile(startup, q)
            claims = [t.done - t.created for t in self.observer.claims_in(namespaces) if t.done]
            out["claim alloc p50 s"], out["claim alloc p99 s"] = percentile(claims, 0.5), percentile(claims, 0.99)
            bound = sorted(t.bound for t in pods if t.bound)
            if len(bound) > 1:
                out["scheduled pods/s"] = (len(bound) - 1) / max(bound[-1] - bound[0], 1e-9)
                per_second: dict[int, int] = {}
                for t in bound:
                    per_second[int(t)] = per_second.get(int(t), 0) + 1
                out["scheduled pods/s max"] = max(per_second.values())
        return out
