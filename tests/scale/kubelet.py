"""Kubelet stand-ins: what the kubelet does for DRA, for many simulated nodes, in one asyncio process.

Real kubelets cannot run a hundred times on one machine (each wants its own container runtime,
cgroups and ports), and kwok, which plays a hundred nodes in one process, never calls a DRA driver:
it would mark pods Running without any ``NodePrepareResources``, so neither a driver's latency nor
its API traffic would be in the figures. Each :class:`NodeAgent` does, over the driver's real unix
sockets and against the real API server, what the kubelet of 1.35 does (pkg/kubelet/cm/dra,
pluginmanager; docs/architecture.md keeps the real kubelet as the reference, tests/kubelet proves it):

* registration: waits for a socket in its node's plugin registry dir, calls ``GetInfo`` (1 s
  deadline), checks the type, the driver name and that ``v1.DRAPlugin`` is offered, then
  ``NotifyRegistrationStatus(registered=true)``; the DRA endpoint is the one ``GetInfo`` named;
* the device health stream (``NodeWatchResources``) when the driver advertises it, read for as
  long as the agent runs;
* pods: LIST and WATCH of the pods bound to its node (field selector ``spec.nodeName``), as the
  kubelet's pod informer; for a new pod, a GET of each ResourceClaim it uses (the name from
  ``status.resourceClaimStatuses`` for a claim made from a template), a check that the claim is
  allocated and reserved for the pod, then one ``NodePrepareResources`` with the claims' namespace,
  name and UID; a failed Prepare is retried with back-off, as the pod worker does; then the pod's
  status is written Running;
* a pod whose ``scale.ascend-dra/run-seconds`` annotation says it ends (a Job's pod) is, after that
  long, unprepared (``NodeUnprepareResources``) and then written Succeeded: the kubelet unprepares
  after the containers stop and *before* the terminal status reaches the API server
  (``SyncTerminatingPod``), so the claim is not given to another pod while it is still prepared here;
* a pod being deleted (``deletionTimestamp``) is unprepared and then deleted with grace period 0,
  as the kubelet's status manager finishes a graceful deletion.

Every call's latency and the claims it carried are recorded (:class:`Record`), for the report and
for the smoke test's checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import grpc

from tests.kubelet_pb.dra.v1 import api_pb2 as dra_pb2
from tests.kubelet_pb.dra.v1 import api_pb2_grpc as dra_grpc
from tests.kubelet_pb.dra_health.v1 import api_pb2 as health_v1_pb2
from tests.kubelet_pb.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from tests.kubelet_pb.dra_health.v1alpha1 import api_pb2 as health_pb2
from tests.kubelet_pb.dra_health.v1alpha1 import api_pb2_grpc as health_grpc
from tests.kubelet_pb.pluginregistration import api_pb2 as reg_pb2
from tests.kubelet_pb.pluginregistration import api_pb2_grpc as reg_grpc
from tests.scale.api import Api, ApiError

__all__ = ("RUN_SECONDS", "Call", "NodeAgent", "Record", "StandIns")

#: Annotation of a pod that ends by itself after this many seconds (a Job's pod); without it, a pod
#: runs until it is deleted.
RUN_SECONDS = "scale.ascend-dra/run-seconds"
RESOURCE = "/apis/resource.k8s.io/v1"
#: The kubelet's deadline for Prepare and Unprepare (defaultClientCallTimeout).
CALL_TIMEOUT_S = 45.0
#: Back-off of a failed Prepare: first pause, longest pause (the pod worker's back-off is of this order).
RETRY_S = (0.5, 8.0)
#: Failed Prepares in a row of one pod that make it an error of the run (a driver that cannot
#: prepare what the scheduler gave it; a few retries are the normal lot of a busy node).
PERSISTENT_FAILURES = 5


@attrs.define
class Call:
    """One ``NodePrepareResources`` or ``NodeUnprepareResources``: when it ended (``time.time()``),
    how long it took (seconds), the claims it carried as ``(namespace, name, uid)``, and its error
    (the gRPC error, or the first claim's error; "" when it succeeded)."""

    node: str
    kind: str  # "prepare" | "unprepare"
    at: float
    seconds: float
    claims: tuple[tuple[str, str, str], ...]
    error: str = ""


@attrs.define
class Record:
    """What the stand-ins did, for the report and the smoke test (appended to, never trimmed)."""

    calls: list[Call] = attrs.Factory(list)
    #: node -> seconds from the agent's start to NotifyRegistrationStatus answered.
    registered: dict[str, float] = attrs.Factory(dict)
    #: node -> health stream messages read.
    health_messages: dict[str, int] = attrs.Factory(dict)
    #: node -> what GetInfo offered (the supported versions).
    services: dict[str, list[str]] = attrs.Factory(dict)
    errors: list[str] = attrs.Factory(list)

    def of(self, kind: str, since: float = 0.0, until: float = float("inf")) -> list[Call]:
        return [c for c in self.calls if c.kind == kind and since <= c.at < until]


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _claim_names(pod: dict[str, Any]) -> list[str] | None:
    """The names of the ResourceClaims a pod uses, or None while one made from a template has no
    name in the pod's status yet."""
    statuses = {s["name"]: s.get("resourceClaimName") for s in (pod.get("status") or {}).get(
        "resourceClaimStatuses") or []}
    names = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        if ref.get("resourceClaimName"):
            names.append(ref["resourceClaimName"])
        elif ref["name"] in statuses:
            if statuses[ref["name"]]:  # None: the template's claim is not needed (a request was dropped)
                names.append(statuses[ref["name"]])
        else:
            return None
    return names


class NodeAgent:
    """The kubelet of one node: its plugin registry dir, the driver it expects, its pods."""

    def __init__(self, node: str, registry: Path, driver: str, api: Api, record: Record) -> None:
        self.node, self.registry, self.driver, self.api, self.record = node, registry, driver, api, record
        self.dra: dra_grpc.DRAPluginStub | None = None
        self._channels: list[grpc.aio.Channel] = []
        self._pods: dict[str, asyncio.Task[None]] = {}  # pod uid -> its worker
        self._prepared: dict[str, list[dra_pb2.Claim]] = {}  # pod uid -> its claims, while prepared
        self._deleting: set[str] = set()
        self.registered = asyncio.Event()

    async def run(self) -> None:
        """Register, read the health stream, work the node's pods; until cancelled."""
        started = time.monotonic()
        try:
            await self._register()
            self.record.registered[self.node] = time.monotonic() - started
            self.registered.set()
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._health())
                tg.create_task(self._pods_loop())
        finally:
            for task in self._pods.values():
                task.cancel()
            for channel in self._channels:
                await channel.close()

    async def _register(self) -> None:
        """The plugin watcher's part: a socket appears, GetInfo, checks, NotifyRegistrationStatus."""
        while True:  # the kubelet watches the dir with fsnotify; at this scale a look every 50 ms serves
            sockets = sorted(p for p in self.registry.glob("*.sock") if not p.name.startswith("."))
            if sockets:
                break
            await asyncio.sleep(0.05)
        channel = grpc.aio.insecure_channel(f"unix://{sockets[0]}")
        self._channels.append(channel)
        registration = reg_grpc.RegistrationStub(channel)
        while True:
            try:
                info = await registration.GetInfo(reg_pb2.InfoRequest(), timeout=1)
                break
            except grpc.aio.AioRpcError:  # not serving yet (the file came first): the watcher retries
                await asyncio.sleep(0.2)
        versions = list(info.supported_versions)
        problem = ("" if info.type == "DRAPlugin" and info.name == self.driver and "v1.DRAPlugin" in versions
                   else f"unexpected plugin: type {info.type!r}, name {info.name!r}, services {versions}")
        await registration.NotifyRegistrationStatus(
            reg_pb2.RegistrationStatus(plugin_registered=not problem, error=problem), timeout=5)
        if problem:
            raise RuntimeError(f"{self.node}: {problem}")
        self.record.services[self.node] = versions
        endpoint = info.endpoint or str(sockets[0])
        dra_channel = grpc.aio.insecure_channel(f"unix://{endpoint}")
        self._channels.append(dra_channel)
        self.dra = dra_grpc.DRAPluginStub(dra_channel)
        self._versions = versions

    async def _health(self) -> None:
        """Read the health stream, as the kubelet's health info cache does, if the driver offers it."""
        if "v1alpha1.DRAResourceHealth" in self._versions:
            stub, request = (health_grpc.DRAResourceHealthStub(self._channels[-1]),
                             health_pb2.NodeWatchResourcesRequest())
        elif "v1.DRAResourceHealth" in self._versions:
            stub, request = (health_v1_grpc.DRAResourceHealthStub(self._channels[-1]),
                             health_v1_pb2.NodeWatchResourcesRequest())
        else:
            return
        self.record.health_messages[self.node] = 0
        while True:
            try:
                async for _ in stub.NodeWatchResources(request):
                    self.record.health_messages[self.node] += 1
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.CANCELLED:
                    raise asyncio.CancelledError from None
            await asyncio.sleep(1)  # the stream ended: open it again

    async def _pods_loop(self) -> None:
        async for kind, pod in self.api.informer("/api/v1/pods", {"fieldSelector": f"spec.nodeName={self.node}"}):
            self._on_pod(kind, pod)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        phase = (pod.get("status") or {}).get("phase")
        if kind == "DELETED":
            task = self._pods.pop(uid, None)
            if task is not None:
                task.cancel()
            if uid in self._prepared:  # deleted with grace 0 by someone else: the pod worker still cleans up
                self._spawn(f"{uid}-gone", self._unprepare_pod(pod))
            return
        if meta.get("deletionTimestamp"):
            if uid not in self._deleting:
                self._deleting.add(uid)
                task = self._pods.pop(uid, None)
                if task is not None:
                    task.cancel()
                self._spawn(f"{uid}-delete", self._finish_deletion(pod))
            return
        if uid not in self._pods and phase not in ("Succeeded", "Failed"):
            self._pods[uid] = asyncio.get_running_loop().create_task(self._start(pod))

    def _spawn(self, name: str, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        task.add_done_callback(self._check)

    def _check(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.record.errors.append(f"{self.node} {task.get_name()}: {task.exception()!r}")

    async def _start(self, pod: dict[str, Any]) -> None:
        """Prepare the pod's claims (retried), report it Running, and end it if it is a job's pod."""
        try:
            meta = pod["metadata"]
            ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
            claims = await self._claims(pod)
            if claims is None:  # not all claim names known yet: the next event of the pod brings them
                self._pods.pop(uid, None)
                return
            if claims:  # before the call, as the kubelet's claim cache: a deletion meanwhile unprepares them
                self._prepared[uid] = claims
            pause, failures = RETRY_S[0], 0
            while not await self._call("prepare", claims):
                failures += 1
                if failures == PERSISTENT_FAILURES:  # still retried; the run is told
                    self.record.errors.append(f"{self.node} pod {ns}/{name}: Prepare failed {failures} times: "
                                              f"{self.record.calls[-1].error}")
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_S[1])
            started = _now_rfc3339()
            await self._status(ns, name, uid, "Running", started)
            seconds = (meta.get("annotations") or {}).get(RUN_SECONDS)
            if seconds is None:
                return
            await asyncio.sleep(float(seconds))
            await self._unprepare_uid(uid)
            await self._status(ns, name, uid, "Succeeded", started)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.record.errors.append(f"{self.node} pod {pod['metadata'].get('name')}: {exc!r}")

    async def _claims(self, pod: dict[str, Any]) -> list[dra_pb2.Claim] | None:
        """The pod's claims as the kubelet sends them, after a GET of each and the kubelet's checks.

        :raises RuntimeError: a claim not allocated, not reserved for the pod, or of another driver.
        """
        names = _claim_names(pod)
        if names is None:
            return None
        meta = pod["metadata"]
        claims = []
        for claim_name in names:
            obj = await self.api.call("GET", f"{RESOURCE}/namespaces/{meta['namespace']}/resourceclaims/{claim_name}")
            status = obj.get("status") or {}
            if not any(r.get("uid") == meta["uid"] for r in status.get("reservedFor") or []):
                raise RuntimeError(f"claim {claim_name} is not reserved for pod {meta['name']}")
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            if not results:
                raise RuntimeError(f"claim {claim_name} is not allocated")
            drivers = {r["driver"] for r in results}
            if drivers != {self.driver}:
                raise RuntimeError(f"claim {claim_name} is allocated by {sorted(drivers)}, this node runs "
                                   f"{self.driver}")
            claims.append(dra_pb2.Claim(namespace=meta["namespace"], name=claim_name, uid=obj["metadata"]["uid"]))
        return claims

    async def _call(self, kind: str, claims: list[dra_pb2.Claim]) -> bool:
        """One Prepare or Unprepare of ``claims`` (none: nothing to call); recorded. True if every claim succeeded."""
        if not claims:
            return True
        assert self.dra is not None
        keys = tuple((c.namespace, c.name, c.uid) for c in claims)
        started = time.perf_counter()
        error = ""
        try:
            if kind == "prepare":
                reply = await self.dra.NodePrepareResources(dra_pb2.NodePrepareResourcesRequest(claims=claims),
                                                            timeout=CALL_TIMEOUT_S)
                answers = {uid: (a.error or ("" if a.devices else "no devices")) for uid, a in reply.claims.items()}
            else:
                reply = await self.dra.NodeUnprepareResources(dra_pb2.NodeUnprepareResourcesRequest(claims=claims),
                                                              timeout=CALL_TIMEOUT_S)
                answers = {uid: a.error for uid, a in reply.claims.items()}
            missing = [c.uid for c in claims if c.uid not in answers]
            error = next((f"{uid}: {e}" for uid, e in answers.items() if e), "") or (
                f"no answer for {missing}" if missing else "")
        except grpc.aio.AioRpcError as exc:
            error = f"{exc.code().name}: {exc.details()}"
        self.record.calls.append(Call(self.node, kind, time.time(), time.perf_counter() - started, keys, error))
        return not error

    async def _unprepare_uid(self, uid: str) -> None:
        claims = self._prepared.get(uid)
        if not claims:
            return
        pause = RETRY_S[0]
        while not await self._call("unprepare", claims):
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_S[1])
        self._prepared.pop(uid, None)

    async def _unprepare_pod(self, pod: dict[str, Any]) -> None:
        await self._unprepare_uid(pod["metadata"]["uid"])

    async def _finish_deletion(self, pod: dict[str, Any]) -> None:
        """A graceful deletion: the containers stop, the claims are unprepared, the pod object goes."""
        meta = pod["metadata"]
        await self._unprepare_uid(meta["uid"])
        with contextlib.suppress(ApiError):  # already gone (its namespace went first)
            await self.api.call("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}, ok=(404, 409))
        self._deleting.discard(meta["uid"])

    async def _status(self, ns: str, name: str, uid: str, phase: str, started: str) -> None:
        """Write the pod's status as the kubelet's status manager would (merge patch of ``status``)."""
        now = _now_rfc3339()
        running = phase == "Running"
        state = ({"running": {"startedAt": started}} if running else
                 {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": now}})
        ready = "True" if running else "False"
        conditions = [{"type": t, "status": s, "lastTransitionTime": now} for t, s in (
            ("PodReadyToStartContainers", "True"), ("Initialized", "True"), ("Ready", ready),
            ("ContainersReady", ready), ("PodScheduled", "True"))]
        status = {"phase": phase, "conditions": conditions, "hostIP": "127.0.0.1", "podIP": "10.0.0.1",
                  "startTime": started, "containerStatuses": [{
                      "name": "c", "image": "registry.k8s.io/pause:3.10", "imageID": "", "ready": running,
                      "restartCount": 0, "started": running, "state": state}]}
        with contextlib.suppress(ApiError):  # the pod went meanwhile
            await self.api.call("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", {
                "metadata": {"uid": uid}, "status": status}, content_type="application/merge-patch+json")


class StandIns:
    """One :class:`NodeAgent` per node, all on one event loop; :meth:`run` until cancelled.

    :param registry_of: node name -> that node's plugin registry dir.
    """

    def __init__(self, nodes: list[str], registry_of: Callable[[str], Path], driver: str, api: Api) -> None:
        self.record = Record()
        self.agents = {n: NodeAgent(n, registry_of(n), driver, api, self.record) for n in nodes}

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            for agent in self.agents.values():
                tg.create_task(agent.run())

    async def wait_registered(self, within: float) -> None:
        """:raises TimeoutError: a node's driver did not register within ``within`` seconds."""
        async with asyncio.timeout(within):
            for agent in self.agents.values():
                await agent.registered.wait()
