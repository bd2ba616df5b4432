"""Claim device status (KEP-4817): ``status.devices`` of a prepared ResourceClaim carries our data.

After a successful Prepare, each device we prepared for a claim gets an entry in the claim's
``status.devices`` (``AllocatedDeviceStatus``: ``driver``, ``pool``, ``device``, ``shareID``,
``data``), written by server-side apply on the ``resourceclaims/status`` subresource under a
field manager of this node's own, ``<driver>/<pool>`` (:func:`field_manager`; a JSON merge patch
of our entries where the API server cannot apply, statusmerge.py); Unprepare
applies an empty list, which removes exactly the entries this node owns. One manager for every node
(the driver name, before 2026-12-03) let a node's late removal, for a claim since deallocated and
prepared on another node, take that node's entries too (docs/architecture.md#resourceclaim; gate
DRAResourceClaimDeviceStatus, beta/on since 1.33, GA in 1.37). So an operator reads what was prepared with::

    kubectl get resourceclaim NAME -o jsonpath='{.status.devices}'

``data`` (a JSON object of at most 10 KiB, ``AllocatedDeviceStatus.data``) holds, where known:

* ``physicalID``: the chip's physical ID (the device's ``physicalID`` attribute, what
  ``/dev/davinci<N>`` and ``ASCEND_VISIBLE_DEVICES`` use);
* ``env``: the quota and visibility variables the profile put into the device's CDI edits
  (``NPU_MEM_QUOTA`` in MiB, ``NPU_PRIORITY`` in percent, ``ASCEND_VISIBLE_DEVICES``, ...), read
  back from the claim's CDI spec files as written (CDI spec format, docs/architecture.md#cdi);
* ``vnpuID``: the vNPU a profile created for the device, when its ``prepare_side_effects`` result
  says so: ``{"devices": {"<device name>": {"vnpuID": <int>}}}`` (the contract for side effects
  that create per-device objects; docs/kubernetes-versions.md).

The writes run in one background task, in the order the RPCs finished, after the answer to the
kubelet: a slow or failing API server never delays or fails a Prepare or an Unprepare (the Go
example driver treats the status update as non-fatal too, docs/architecture.md#reference-drivers). A failure is
logged and retried a few times at once; a write that still finds no API server (down, overloaded,
a timeout) or one that refuses it for a reason an operator can fix (RBAC) is tried again later,
with a growing pause, until it is written or a newer job of the claim replaces it. A claim that is
gone (404) or replaced (a different uid, 409) is skipped; an answer that the write is invalid
(422) is final. The writes are not in the checkpoint: after start-up every claim recorded as
prepared is queued again (statushook.py), so a restart repairs what a crash or an outage left
unwritten. Standalone mode has no API server and writes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import attrs
from anyio.abc import TaskStatus

from ascend_dra.cluster.apiclient import RESOURCE_V1
from ascend_dra.cluster.statusentries import PreparedClaim, apply_body, cdi_env, device_entries, field_manager
from ascend_dra.cluster.statusmerge import merge_entries

__all__ = ("ClaimStatusWriter",)

log = logging.getLogger(__name__)

@attrs.frozen
class _Job:
    namespace: str
    name: str
    uid: str
    claim: PreparedClaim | None  # None: remove our entries
    queued: float = 0.0  # time.monotonic() when this claim's oldest job not yet taken was queued
    retry_s: float = 0.0  # the pause before this job's last deferred retry (0: never deferred)
    only_if: Callable[[], bool] | None = None  # written only while this says so (a restored status)


class ClaimStatusWriter:
    """Applies claims' ``status.devices`` in the background, a few claims at a time.

    Jobs are kept per claim: a claim's newer job replaces its older one that has not started (a
    claim prepared and unprepared before its status went out needs only the removal), and one claim
    is never written by two workers at once, so each claim's last write is its latest state.

    The writes wait for a lull: while jobs keep coming (Prepares and Unprepares under way), none
    goes out until ``quiet_s`` passed without a new one, or the oldest has waited ``max_delay_s``;
    then every pending job is written. A status write costs the API server more than the claim GET
    a Prepare waits for (an apply, an etcd write, an event to every watcher of claims), and on a
    busy node it was written while the next Prepares waited for their GETs: at one Prepare in
    flight, the Prepare p50 fell by a third to a half without it (docs/performance.md). Nobody
    waits for ``status.devices``; the kubelet waits for every Prepare.

    A flush that begins while jobs still come (the oldest waited ``max_delay_s``) is written one
    claim at a time, one write beginning at most every ``busy_interval_s``; all ``workers`` join
    once a lull begins. Four applies at once, a second after a stream of calls began, held the
    Unprepares of that second back: their p99 at one in flight was 8-10 ms, 2-3 ms without the
    status writes (docs/performance.md). A write still going after ``max_delay_s`` (a slow API
    server) no longer counts, so it holds back no other claim.

    :param api: the daemon's shared :class:`~ascend_dra.cluster.apiclient.KubeApi` (its owner closes it).
    :param pool: this node's pool (the node name): the writes' field manager is
        :func:`field_manager` of it, and only entries of this pool are ever removed or replaced.
        None (tests of one node): the driver name, and every entry of the driver is ours.
    :param attempts: tries per write before it is given up (with 0.5 s, 1 s, 2 s, ... between).
    :param workers: claims written concurrently (each write is one API request, sometimes two).
    :param max_pending: claims waiting at most; beyond, a new claim's status is dropped and logged.
    :param quiet_s: seconds without a new job after which the pending ones are written.
    :param max_delay_s: seconds the oldest pending job waits at most for a lull.
    :param busy_interval_s: while jobs still come, seconds between the beginnings of two writes at
        least (0.05: at most 20 a second, about 5 % of two cores for the API server's applies).
    :param retry_s: seconds before a write whose attempts all failed for want of an API server is
        tried again (a new round of ``attempts``); the pause doubles with each round of that claim,
        up to ``retry_max_s``. During an outage of the API server the statuses of the claims
        prepared and unprepared meanwhile are so written once it is back (they were given up after
        about 3.5 s before 2026-12-03). A daemon that stops meanwhile does not keep them; the next
        start writes the prepared claims' statuses again (statushook.py).
    :param on_result: called with ``"ok"`` for each write applied, ``"deferred"`` for each round of
        attempts that failed and will be tried again, and ``"failed"`` for each given up (invalid)
        or dropped (the daemon's ``ascend_dra_claim_status_writes_total``).
    """

    def __init__(self, api: Any, driver_name: str, *, pool: str | None = None, attempts: int = 4, workers: int = 4,
                 max_pending: int = 4096, quiet_s: float = 0.05, max_delay_s: float = 1.0,
                 busy_interval_s: float = 0.05, retry_s: float = 5.0, retry_max_s: float = 300.0,
                 on_result: Callable[[str], None] | None = None) -> None:
        self.api = api
        self.on_result = on_result
        self.driver_name = driver_name
        self.pool = pool
        self.field_manager = field_manager(driver_name, pool)
        self.attempts = attempts
        self.workers = workers
        self.max_pending = max_pending
        self.quiet_s = quiet_s
        self.max_delay_s = max_delay_s
        self.busy_interval_s = busy_interval_s
        self.retry_s = retry_s
        self.retry_max_s = retry_max_s
        self._last_begun = float("-inf")  # time.monotonic() the newest write began
        self._last_put = 0.0  # time.monotonic() of the newest job
        self._flush: set[str] | None = None  # the claims of this flush not yet taken (pending when it began)
        self._pending: dict[str, _Job] = {}  # uid -> its latest job not yet started, oldest first
        self._busy: dict[str, float] = {}  # uids a worker is writing now -> time.monotonic() it began
        self._wake = anyio.Event()
        self._deferred: dict[str, tuple[_Job, float]] = {}  # uid -> its job to try again, time.monotonic() when
        self._deferred_wake = anyio.Event()
        self._draining = False
        #: Writes applied / given up / deferred (rounds of attempts failed, tried again later), for tests and metrics.
        self.applied = 0
        self.failed = 0
        self.deferrals = 0

    @property
    def backlog(self) -> int:
        """Claims whose write waits, is under way or is to be tried again (read from the metrics
        thread: three ``len``)."""
        return len(self._pending) + len(self._busy) + len(self._deferred)

    def _count(self, result: str) -> None:
        if result == "ok":
            self.applied += 1
        elif result == "deferred":
            self.deferrals += 1
        else:
            self.failed += 1
        if self.on_result is not None:
            self.on_result(result)

    def prepared(self, claim: PreparedClaim, *, only_if: Callable[[], bool] | None = None) -> None:
        """Queue the status of a claim just prepared; never blocks, never raises. With ``only_if``
        the status is written only if it returns True just before each request (a status restored
        at start-up, statushook.py: the claim may be unprepared, or another instance start, meanwhile)."""
        self._put(_Job(claim.namespace, claim.name, claim.uid, claim, only_if=only_if))

    def unprepared(self, namespace: str, name: str, uid: str) -> None:
        """Queue the removal of our entries from a claim just unprepared; never blocks, never raises."""
        self._put(_Job(namespace, name, uid, None))

    def _put(self, job: _Job) -> None:
        if job.uid not in self._pending and len(self._pending) >= self.max_pending:
            self._count("failed")
            log.warning("claim status queue full; not writing this claim's status.devices",
                        extra={"claim_uid": job.uid})
            return
        self._last_put = time.monotonic()
        self._deferred.pop(job.uid, None)  # a newer job of the claim, or the deferred one come due
        older = self._pending.get(job.uid)
        # Replaces a job of the claim that has not started, keeping its place and its wait: the
        # first pending job is then always the one that waited longest.
        self._pending[job.uid] = attrs.evolve(job, queued=older.queued if older is not None else self._last_put)
        self._wake.set()

    def _wait_s(self) -> float:
        """Seconds until the pending jobs are due; at 0 a flush of every pending claim begins."""
        if self._flush is not None or not self._pending:
            return 0.0
        now = time.monotonic()
        oldest = next(iter(self._pending.values())).queued
        wait = min(self._last_put + self.quiet_s, oldest + self.max_delay_s) - now
        if wait > 0:
            return wait
        # What comes during the flush waits for the next lull: under a steady stream of Prepares
        # the writes then go out in one burst a second, not between every two Prepares. A claim
        # being written is left out: its newer job follows when that write ends (_work wakes).
        self._flush = {uid for uid in self._pending if uid not in self._busy} or None
        return 0.0

    def _next(self) -> _Job | None:
        """The oldest pending job of this flush's claims, or None outside a flush. A flush's claims
        are pending and not being written when it begins, and leave it as they are taken, so one
        is always at hand until the last is taken, which ends the flush."""
        if self._flush is None:
            return None
        for uid, job in self._pending.items():
            if uid in self._flush:
                del self._pending[uid]
                self._busy[uid] = self._last_begun = time.monotonic()
                self._flush.discard(uid)  # a newer job of it waits for the next lull
                if not self._flush:
                    self._flush = None
                return job
        self._flush = None  # not reached (see above); were it, the next job would begin a new flush
        return None

    def _hold_s(self) -> float:
        """Seconds this worker waits before taking a job of the current flush (0: take one now).

        Outside a lull one write at a time, and ``busy_interval_s`` after the last one began: a
        worker waits while another write began less than ``max_delay_s`` ago (until it is old
        enough to be left alone), or the last began less than ``busy_interval_s`` ago, or until the
        lull may begin, whichever comes first.
        """
        now = time.monotonic()
        lull_in = self._last_put + self.quiet_s - now
        if lull_in <= 0:
            return 0.0
        young = [began + self.max_delay_s - now for began in self._busy.values() if now - began < self.max_delay_s]
        spacing = self._last_begun + self.busy_interval_s - now
        hold = max([spacing, *young])
        return max(0.001, min(lull_in, hold)) if hold > 0 else 0.0

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Write queued statuses until cancelled (jobs queued before it started included)."""
        async with anyio.create_task_group() as tg:
            for _ in range(self.workers):
                tg.start_soon(self._work)
            tg.start_soon(self._requeue_deferred)
            task_status.started()

    def _defer(self, job: _Job) -> None:
        """Try ``job`` again after a pause (:attr:`retry_s`, doubled for each round of the claim)."""
        pause = min(self.retry_max_s, max(self.retry_s, job.retry_s * 2))
        self._deferred[job.uid] = (attrs.evolve(job, retry_s=pause), time.monotonic() + pause)
        self._deferred_wake.set()

    async def _requeue_deferred(self) -> None:
        """Queue each deferred job when its pause is over (it then waits for a lull as any job)."""
        while True:
            if self._deferred_wake.is_set():
                self._deferred_wake = anyio.Event()
            now = time.monotonic()
            for uid, (job, due) in list(self._deferred.items()):
                if due <= now:
                    del self._deferred[uid]
                    self._put(job)
            if not self._deferred:
                await self._deferred_wake.wait()
                continue
            with anyio.move_on_after(min(due for _, due in self._deferred.values()) - now):
                await self._deferred_wake.wait()  # a new deferral may be due sooner

    async def _work(self) -> None:
        while True:
            if (wait := self._wait_s()) > 0:
                await anyio.sleep(wait)  # jobs still coming: look again when a lull may have begun
                continue
            if self._flush is not None and (hold := self._hold_s()) > 0:
                await anyio.sleep(hold)  # another write is under way and calls still come
                continue
            job = self._next()
            if job is None:  # nothing pending, or only claims being written (their end wakes us)
                if self._wake.is_set():  # no await since _next(): no job can have come in between
                    self._wake = anyio.Event()
                await self._wake.wait()
                continue
            try:
                await self._write_logged(job)
            except BaseException:  # cancelled (the daemon stops): drain() writes it again, unless newer came
                self._pending.setdefault(job.uid, job)
                raise
            finally:
                self._busy.pop(job.uid, None)
                if job.uid in self._pending:
                    self._wake.set()  # a newer job of this claim waited for this one

    async def drain(self) -> None:
        """Write every pending status now, one claim at a time: at shutdown, after :meth:`run` was
        cancelled (a write it had begun is pending again), so that the statuses waiting for a lull
        or a retry are not lost. The caller bounds the time (each write retries for up to 3.5 s)."""
        self._draining = True
        for job, _ in list(self._deferred.values()):
            self._pending.setdefault(job.uid, job)
        self._deferred.clear()
        while self._pending:
            await self._write_logged(self._pending.pop(next(iter(self._pending))))

    async def _write_logged(self, job: _Job) -> None:
        """:meth:`_write`, with a bug in it logged and counted, never raised: it must not take the
        daemon's task group down."""
        try:
            await self._write(self.api, job)
        except Exception:
            self._count("failed")
            log.exception("writing the claim's status.devices raised", extra={"claim_uid": job.uid})

    async def _write(self, api: Any, job: _Job) -> None:
        from ascend_dra.cluster.apiclient import ApiError

        entries: list[dict] = []
        if job.claim is not None:
            env = cdi_env(job.claim.spec_files)  # small files on tmpfs, written on the loop too
            entries = device_entries(self.driver_name, job.claim, env)
        path = f"{RESOURCE_V1}/namespaces/{job.namespace}/resourceclaims/{job.name}/status"
        query = [("fieldManager", self.field_manager), ("force", "true")]
        delay = 0.5
        apply = True
        attempt = 0
        while attempt < self.attempts:
            attempt += 1
            if job.only_if is not None and not job.only_if():
                log.debug("restored claim status no longer due; not written", extra={"claim_uid": job.uid})
                return
            try:
                if apply:
                    stored = await api.call("PATCH", path, query=query, content_type="application/apply-patch+yaml",
                                            body=apply_body(job.namespace, job.name, job.uid, entries))
                    # Entries a fallback merge patch wrote, or an older release under the driver's
                    # name, are not this manager's to remove; the apply's answer shows any left.
                    if job.claim is None and self._ours(stored):
                        await self._merge(api, path, job, [])
                else:
                    await self._merge(api, path, job, entries)
                self._count("ok")
                log.debug("claim status written", extra={"claim_uid": job.uid, "devices": len(entries)})
                return
            except ApiError as exc:
                if exc.status == 404 or (exc.status == 409 and apply):  # gone, or replaced (uid precondition)
                    log.debug("claim status skipped", extra={"claim_uid": job.uid, "error": str(exc)})
                    return
                if exc.status == 422 and apply and "status.allocation" in str(exc):
                    apply = False  # see _merge: retry at once with a merge patch,
                    attempt -= 1  # which is not a failed attempt (with attempts=1 it was never sent)
                    continue
                if exc.status in (400, 422):  # invalid stays invalid
                    self._count("failed")
                    log.warning("writing the claim's status.devices failed; the claim stays prepared",
                                extra={"claim_uid": job.uid, "error": str(exc)})
                    return
                if attempt == self.attempts:
                    self._give_up_for_now(job, exc)
                    return
            await anyio.sleep(delay)
            delay *= 2

    def _give_up_for_now(self, job: _Job, exc: Exception) -> None:
        """The last attempt of ``job`` found no API server (or was refused): defer it, unless a newer
        job of the claim came meanwhile (it replaces this one: deferred, this one would come back
        after it and undo it) or the daemon is stopping (:meth:`drain`: nothing would retry it)."""
        if job.uid in self._pending:
            log.debug("claim status write failed; a newer one of the claim follows", extra={"claim_uid": job.uid})
            return
        if self._draining:
            self._count("failed")
            log.warning("writing the claim's status.devices failed as the daemon stops; the claim stays prepared",
                        extra={"claim_uid": job.uid, "error": str(exc)})
            return
        self._count("deferred")
        self._defer(job)
        log.warning("writing the claim's status.devices failed; trying again later, the claim stays prepared",
                    extra={"claim_uid": job.uid, "error": str(exc), "retry_in_s": self._deferred[job.uid][0].retry_s})

    def _ours(self, claim: Any) -> bool:
        """Whether ``claim`` (an object the API server returned) still has entries of our driver."""
        devices = ((claim or {}).get("status") or {}).get("devices") or [] if isinstance(claim, Mapping) else []
        return any(self._mine(d) for d in devices)

    def _mine(self, entry: Any) -> bool:
        """Whether a ``status.devices`` entry is this node's: our driver and, given one, our pool."""
        return (isinstance(entry, Mapping) and entry.get("driver") == self.driver_name
                and (self.pool is None or entry.get("pool") == self.pool))

    async def _merge(self, api: Any, path: str, job: _Job, entries: list[dict]) -> None:
        """The fallback for claims that server-side apply cannot patch (statusmerge.py)."""
        await merge_entries(api, path, job.uid, self.field_manager, self._mine, entries)
