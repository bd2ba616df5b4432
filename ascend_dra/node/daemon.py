"""The node daemon: one anyio task group wiring profiles, state, gRPC servers and the publisher.

Start-up order (each step ready before the next, docs/architecture.md#start-up-order): load
profiles -> discover -> recover the checkpoint -> DRA socket -> publish (the first attempt, waited
for at most :data:`FIRST_PUBLISH_WAIT_S`) -> registration socket (from here on the kubelet may call
us). The metrics server (``/metrics``, ``/healthz``, ``/readyz``) and the
``grpc.health.v1`` service (kubelet/grpc_health.py) start first, answering "not ready" until both
sockets answer. Then rediscovery runs every ``--rediscover-interval`` seconds and at once when
device nodes appear or vanish (hotplug.py); a changed inventory is republished. SIGTERM, SIGINT
and SIGHUP cancel the group; sockets are removed on the way out.

With ``--rolling-update-id`` the sockets carry the id and the checkpoint is shared with the other
instances of the node (instancelock.py, records.py; docs/durable-state.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import anyio
from anyio.abc import TaskStatus
from grpclib.events import RecvRequest, listen

from ascend_dra.cdi.store import CdiStore
from ascend_dra.cluster.poolview import PoolView
from ascend_dra.durable.checkpoint import CheckpointCorrupt, read_boot_id
from ascend_dra.kubelet import dra
from ascend_dra.kubelet.grpc_health import HealthThread, SocketProbe
from ascend_dra.kubelet.health import HEALTH_SERVICES, HealthFeed, health_services
from ascend_dra.kubelet.registration import RegistrationServer, RegistrationState, supported_services
from ascend_dra.kubelet.sockets import serve_unix
from ascend_dra.model import Inventory
from ascend_dra.node.hotplug import watch_device_nodes
from ascend_dra.node.instancelock import hold_instance_lock, mark_published, newer_live_instance
from ascend_dra.node.inventories import discover_all, profile_context
from ascend_dra.node.metrics import Metrics
from ascend_dra.node.settings import Settings
from ascend_dra.node.upkeep import Upkeep
from ascend_dra.node.usage import (
    ConsumerLog,
    LoggingClaimSource,
    LoopSamples,
    Samples,
    refresh_consumers,
    usage_samples,
)
from ascend_dra.observe.logs import setup_logging
from ascend_dra.observe.loopstall import LoopStallMonitor
from ascend_dra.profiles.ascend import splits
from ascend_dra.profiles.base import Profile
from ascend_dra.profiles.registry import LoadedProfile, load_profiles
from ascend_dra.state.claims import ClaimSource, StandaloneClaimSource
from ascend_dra.state.devicestate import DeviceState
from ascend_dra.system.listen import bind_problem
from ascend_dra.system.signals import run_until_signal

__all__ = ("Daemon", "main")

log = logging.getLogger(__name__)


#: Worker threads for blocking work, at most (see :meth:`Daemon.run`).
WORKER_THREADS = 8

#: Seconds the registration socket waits, at most, for the first publish attempt to end (an API
#: server that is slow or down delays registration by this much, never more).
FIRST_PUBLISH_WAIT_S = 2.0

#: Seconds a stopping daemon spends, at most, writing the claim statuses that were waiting for a
#: lull in the Prepares (claimstatus.py); a status not written by then stays unwritten.
STATUS_DRAIN_S = 2.0

@contextlib.contextmanager
def _port_flag(flag: str, port: int, address: str) -> Iterator[None]:
    """Turn a failed bind into a start-up error that names the flag (and the usual cause)."""
    try:
        yield
    except OSError as exc:
        hint = (" (another process on this host holds it: during a rolling update with hostNetwork the old "
                "and the new pod share the node's ports; run the DaemonSet without hostNetwork, which the "
                "daemon does not need)") if exc.errno == errno.EADDRINUSE else ""
        raise RuntimeError(bind_problem(flag, port, address, exc) + hint) from exc


class Daemon:
    """The running node side. Built by :func:`main`; tests may drive it directly."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ctx = profile_context(settings)
        self.registration = RegistrationState()
        self.health = HealthFeed(pool_name=settings.node_name)
        self.loaded: dict[str, LoadedProfile] = {}
        self.state: DeviceState | None = None
        self.publisher: Any = None
        self.api: Any = None  # cluster mode: the one KubeApi the claim source, publisher and writer share
        self._rediscover = anyio.Event()
        self.metrics = Metrics()
        self.stalls = LoopStallMonitor()
        self.stalls.on_stall = lambda phase, seconds: self.metrics.loop_stall.labels(phase).set(seconds)
        #: What the slices show of the devices: unhealthy ones tainted or left out, gates' fallbacks.
        self.pool = PoolView(settings.driver_name, settings.unhealthy_devices)
        #: The pods of each claim read for a Prepare, for the usage metrics (usage.py).
        self.consumers = ConsumerLog()

    def load(self) -> dict[str, Profile]:
        """Load the configured profiles; broken ones are logged and skipped.

        :raises RuntimeError: if no profile could be loaded.
        """
        entries = load_profiles(self.settings.profiles)  # failures are logged there, with the traceback
        unknown = [e for e in entries if e.error is not None and not e.target]  # no entry point at all
        if unknown:  # a typo in --profiles is a configuration error, not a broken third-party profile
            raise RuntimeError(f"--profiles names {', '.join(e.name for e in unknown)}: "
                               f"{unknown[0].error.reason if unknown[0].error else ''}")
        for entry in entries:
            if entry.error is None:
                self.loaded[entry.name] = entry
        if not self.loaded:
            raise RuntimeError(f"none of the profiles {', '.join(self.settings.profiles)} could be loaded")
        return {name: entry.profile for name, entry in self.loaded.items() if entry.profile is not None}

    def claim_source(self) -> ClaimSource:
        """The claims' source (a file tree or the API server); the pods of every claim read are noted."""
        if self.settings.claims_dir is not None:
            source: ClaimSource = StandaloneClaimSource(self.settings.claims_dir, self.settings.driver_name)
        else:
            from ascend_dra.cluster.apiserver import ApiClaimSource

            source = ApiClaimSource(self.settings.kubeconfig, self.settings.driver_name, api=self.api)
        return LoggingClaimSource(source, self.consumers)

    def usage(self) -> Samples:
        """The usage metrics' samples now (usage.py); on the event loop, at each scrape."""
        if self.state is None:
            return {}
        readings = {name: reading for profile in self.state.profiles.values()
                    for name, reading in (getattr(profile, "readings", dict)() or {}).items()}
        return usage_samples(self.settings.node_name, self.state.inventories, self.state.prepared_claims,
                             self.health.devices, readings, self.consumers.pods)

    def make_publisher(self) -> Any:
        if self.settings.slices_dir is not None:
            from ascend_dra.cluster.publish import FilePublisher

            return FilePublisher(self.settings.slices_dir, driver_name=self.settings.driver_name,
                                 node_name=self.settings.node_name)
        from ascend_dra.cluster.apiserver import ApiPublisher

        s = self.settings
        newer = published = None
        if s.rolling_update_id is not None:  # only the newest instance publishes (instancelock.py)
            uid = s.rolling_update_id
            newer = lambda: newer_live_instance(s.plugin_dir, uid)  # noqa: E731
            published = lambda: mark_published(s.plugin_dir, uid)  # noqa: E731
        return ApiPublisher(s.kubeconfig, driver_name=s.driver_name, node_name=s.node_name, api=self.api,
                            newer_instance=newer, published=published, dropped=self._on_dropped_fields)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled. ``task_status.started()`` fires once the kubelet may register us."""
        s = self.settings
        # Blocking work (journal appends, profile hooks) runs in at most this many
        # worker threads (anyio's default: 40). 64 Unprepares in flight had started 40, each with
        # its own malloc arena; the journal is written by one at a time anyway.
        anyio.to_thread.current_default_thread_limiter().total_tokens = WORKER_THREADS
        s.plugin_dir.mkdir(mode=0o750, parents=True, exist_ok=True)  # our socket and checkpoint: root only
        s.plugin_dir.chmod(0o750)
        # The kubelet's plugins_registry, shared by every CSI and DRA plugin of the node: made as the
        # kubelet's plugin watcher makes it (0755) if missing, its mode never narrowed (our socket is 0600).
        s.registrar_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        async with hold_instance_lock(s.plugin_dir, rolling_update_id=s.rolling_update_id,
                                      sockets_of=s.rolling_update_sockets):
            await self._run_locked(task_status=task_status)

    async def _run_locked(self, *, task_status: TaskStatus[None]) -> None:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.stalls.run)
                await self._start_and_serve(task_status=task_status)
                tg.cancel_scope.cancel()
        finally:
            # A start-up refusal (nothing measured yet) is said alone, in one line.
            if self.stalls.phase == "serving" or any(self.stalls.longest.values()):
                log.info("longest event-loop stalls (late wake-ups, and the same with the CPU wait included)", extra={
                    **{f"{phase}_ms": round(seconds * 1000, 2) for phase, seconds in self.stalls.longest.items()},
                    **{f"{phase}_late_ms": round(seconds * 1000, 2)
                       for phase, seconds in self.stalls.longest_late.items()}})

    async def _start_and_serve(self, *, task_status: TaskStatus[None]) -> None:
        s = self.settings
        if s.standalone is None:
            from ascend_dra.cluster.apiclient import check_cluster_access, connect_api  # dependencies: see main()

            await check_cluster_access(s.kubeconfig)
            self.api = await connect_api(s.kubeconfig)  # one client for claims, slices and status
        try:
            await self._start(task_status=task_status)
        finally:
            if self.api is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                    await self.api.client.close()

    def _publish_error(self) -> str | None:
        """Why the last attempt to publish the ResourceSlices failed while it is retried, or None
        (cluster.ApiPublisher.retrying; read by the health thread: one attribute read, no lock)."""
        error = getattr(self.publisher, "retrying", None)
        return None if error is None else f"{type(error).__name__}: {error}"

    async def _start(self, *, task_status: TaskStatus[None]) -> None:
        s = self.settings
        checks = HealthThread(SocketProbe(s.registration_socket, s.dra_socket, lambda: self.registration.registered,
                                          self._publish_error), asyncio.get_running_loop())
        checks.start()
        try:
            self.metrics.follow(lambda: len(self.state.prepared_claims) if self.state is not None else 0,
                                lambda: self.registration.registered)
            self.metrics.follow_usage(LoopSamples(asyncio.get_running_loop(), self.usage))
            self.metrics.follow_checkpoint(
                lambda: self.state.store.write_failures if self.state is not None else 0,
                lambda: self.state.cleanup_pending if self.state is not None else False,
                lambda: getattr(self.publisher, "last_error", None) is not None)
            with _port_flag("--metrics-port", s.metrics_port, s.metrics_address):
                if s.metrics_port:
                    self.metrics.serve(s.metrics_port, s.metrics_address,
                                       {"/healthz": checks.healthz, "/readyz": checks.readyz})
            with _port_flag("--healthcheck-port", s.healthcheck_port, s.healthcheck_address):
                if s.healthcheck_port:
                    checks.serve(s.healthcheck_port, s.healthcheck_address)
            await self._start_checked(task_status)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await anyio.to_thread.run_sync(checks.stop)
                await anyio.to_thread.run_sync(self.metrics.close)

    async def _start_checked(self, task_status: TaskStatus[None]) -> None:
        s = self.settings
        profiles = self.load()
        if self.api is not None and splits.both_loaded(self.loaded):  # the scheduler keeps the splits apart
            refused = splits.refusal(await self.api.call("GET", "/version"))
            if refused is not None:
                raise RuntimeError(refused)
        failed: dict[str, str] = {}
        inventories = await discover_all(self.loaded, self.ctx, s.discovery_timeout, errors=failed)
        if not inventories:  # nothing to serve is a broken node, not an idle one: let it be seen
            raise RuntimeError("no profile discovered its devices ("
                               + "; ".join(f"{name}: {reason}" for name, reason in failed.items()) + ")")
        if not any(inventory.devices for inventory in inventories.values()):
            log.warning("no devices found; the pool is empty until a rediscovery finds some",
                        extra={"profiles": ",".join(inventories)})
        boot_id = await anyio.to_thread.run_sync(read_boot_id, s.boot_id_file)
        self.state = DeviceState(
            driver_name=s.driver_name, node_name=s.node_name,
            profiles=profiles,  # all loaded ones: a profile that failed to discover may succeed later
            inventories=inventories, profile_ctx=self.ctx, cdi=CdiStore(s.cdi_root),
            plugin_dir=s.plugin_dir, boot_id=boot_id, claim_source=self.claim_source(),
            shared=s.rolling_update_id is not None, device_metadata=s.device_metadata,
        )
        async with self.state.store.exclusive():  # shared: no other instance is half-way through a claim
            await self.state.recover()
            await self.reconcile_side_effects()
        self.metrics.set_inventories(inventories)
        await self.check_health()
        self.publisher = self.make_publisher()
        try:
            await self._serve(task_status=task_status)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self.state.close()  # one snapshot for an older release to read
            close = getattr(self.state.claim_source, "aclose", None)
            if close is not None:  # the API claim source's HTTP session
                with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                    await close()

    async def reconcile_side_effects(self) -> None:
        """Call each profile's optional ``reconcile_side_effects(live, ctx)`` once, after recovery,
        with the side effects of every claim record the state keeps, so the profile can undo what
        a crash left that no record names (hard vNPU: orphan vNPUs). A failure is logged, never fatal."""
        assert self.state is not None
        for name, profile in self.state.profiles.items():
            hook = getattr(profile, "reconcile_side_effects", None)
            if hook is None:
                continue
            live = [r.side_effects[name] for r in self.state.prepared_claims.values() if name in r.side_effects]
            try:
                await hook(live, self.ctx)
            except Exception:
                log.exception("reconciling a profile's side effects failed", extra={"profile": name})

    async def _serve(self, *, task_status: TaskStatus[None]) -> None:
        s = self.settings
        assert self.state is not None
        # Everything start-up made (the imported modules above all: kubernetes-asyncio's models are
        # hundreds of thousands of objects) lives as long as the process; left in the collected
        # generations, each full collection walks them all on the loop.
        gc.collect()
        gc.freeze()
        health = health_services(self.health, resend_s=s.health_interval) if s.health_service else []
        advertised = supported_services(HEALTH_SERVICES if s.health_service else ())
        writer, status = None, None
        if s.standalone is None and s.claim_status:  # standalone has no claims to write to
            from ascend_dra.cluster.claimstatus import ClaimStatusWriter
            from ascend_dra.cluster.statushook import StatusHook

            writer = ClaimStatusWriter(self.api, s.driver_name, pool=s.node_name,
                                       on_result=lambda result: self.metrics.status_writes.labels(result).inc())
            self.metrics.follow_claim_status(lambda: writer.backlog)
            status = StatusHook(writer, self.state, s.cdi_root)
        try:
            await self._serve_with(writer, status, health, advertised, task_status=task_status)
        finally:
            if writer is not None:  # the statuses still waiting for a lull (the API client is open yet)
                with anyio.CancelScope(shield=True), anyio.move_on_after(STATUS_DRAIN_S):
                    await writer.drain()

    async def _serve_with(self, writer: Any, status: Any, health: list, advertised: Any, *,
                          task_status: TaskStatus[None]) -> None:
        s = self.settings
        async with (
            serve_unix([*dra.services(self.state, self, status), *health], s.dra_socket) as dra_server,
            anyio.create_task_group() as tg,
        ):
            listen(dra_server, RecvRequest, self.stalls.call_arrived)
            if writer is not None:
                await tg.start(writer.run)
            await tg.start(self._publish_loop)
            # The first publish (TLS handshakes, the node GET, the slice writes) is the busiest
            # stretch of the loop after start-up: the kubelet's GetInfo must not wait behind it.
            first = getattr(self.publisher, "first_attempt", None)
            if first is not None:
                with anyio.move_on_after(FIRST_PUBLISH_WAIT_S):
                    await first.wait()
            registrar = RegistrationServer(s.driver_name, str(s.dra_socket.absolute()), self.registration, advertised)
            async with serve_unix([registrar], s.registration_socket) as registration_server:
                listen(registration_server, RecvRequest, self.stalls.call_arrived)
                self.stalls.phase = "serving"
                log.info("serving the kubelet", extra={"registration_socket": str(s.registration_socket),
                                                       "dra_socket": str(s.dra_socket), "node": s.node_name,
                                                       "driver": s.driver_name,
                                                       "rolling_update_id": s.rolling_update_id or "none"})
                task_status.started()
                upkeep = Upkeep(self.state, s, pool=self.pool, api=self.api, publisher=self.publisher,
                                desired=self._desired)
                tg.start_soon(upkeep.repair_loop, status, tg)
                tg.start_soon(self._rediscover_loop)
                tg.start_soon(self._health_loop)
                tg.start_soon(upkeep.gate_probe_loop)
                tg.start_soon(watch_device_nodes, s.dev_root, self.request_rediscovery)
                await anyio.sleep_forever()

    async def check_health(self) -> None:
        """Ask every profile with a ``health`` hook about its devices and feed the kubelet's health
        stream. A hook that raises or hangs makes its devices ``unknown``, never takes the daemon down."""
        assert self.state is not None
        health: dict[str, bool | None] = {}
        for name, inventory in self.state.inventories.items():
            devices = {d.name: True for d in inventory.devices}
            hook = getattr(self.state.profiles.get(name), "health", None)
            if hook is not None:
                try:
                    with anyio.fail_after(self.settings.discovery_timeout):
                        reported = await hook(self.ctx, inventory)
                    devices.update({k: v for k, v in reported.items() if k in devices})
                except Exception as exc:
                    log.warning("profile health check failed; its devices are unknown",
                                extra={"profile": name, "error": f"{type(exc).__name__}: {exc}"})
                    devices = dict.fromkeys(devices)
            self.metrics.unhealthy.labels(name).set(sum(1 for v in devices.values() if v is False))
            health.update(devices)
        changed = {k for k, v in health.items() if self.health.devices.get(k, True) != v}
        if changed:
            log.info("device health changed", extra={"devices": ",".join(
                f"{k}={'healthy' if health[k] else 'unknown' if health[k] is None else 'unhealthy'}"
                for k in sorted(changed))})
        self.health.update(health)
        if self.pool.mark_unhealthy(self.health.devices) and self.publisher is not None:
            await self._republish()

    def _on_dropped_fields(self, exc: Any) -> None:
        """The publisher's report of fields the API server dropped (cluster.DroppedFieldsError):
        the pool view makes up for them (poolview.py) and the slices are written again."""
        if self.pool.on_dropped(exc.gates) and self.publisher is not None:
            self.publisher.update(self._desired())

    def _desired(self) -> Inventory:
        """The pool to publish (:meth:`PoolView.desired`)."""
        assert self.state is not None
        return self.pool.desired(self.state.inventories)

    async def _health_loop(self) -> None:
        assert self.state is not None
        while True:
            await anyio.sleep(self.settings.health_interval)
            await self.check_health()
            await refresh_consumers(self.consumers, self.state.prepared_claims, self.state.claim_source,
                                    self.settings.discovery_timeout)
            # Same cadence: retry rollbacks and spec removals that failed (an immutable file, a
            # read-only CDI dir); their devices stay held meanwhile.
            if self.state.cleanup_pending:
                await self.state.retry_cleanup()

    def observe(self, operation: str, seconds: float, errors: int, claims: int) -> None:
        """Called by the DRA service after each RPC (the gauges follow the state by themselves)."""
        self.metrics.observe(operation, seconds, errors, claims)

    def unhealthy_devices(self, names: Iterable[str]) -> list[str]:
        """Which of ``names`` are held unhealthy (poolview.PoolView.unhealthy; for the DRA service's log)."""
        return self.pool.unhealthy(names)

    async def _publish_loop(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        assert self.state is not None
        runner = getattr(self.publisher, "run", None)
        if runner is not None:  # the API publisher keeps its own reconcile loop
            await runner(self._desired(), task_status=task_status)
            return
        await self.publisher.publish(self._desired())
        task_status.started()

    def request_rediscovery(self) -> None:
        """Wake the rediscovery loop now (hot-plug, an operator's request)."""
        self._rediscover.set()

    async def _rediscover_loop(self) -> None:
        assert self.state is not None
        while True:
            with anyio.move_on_after(self.settings.rediscover_interval):
                await self._rediscover.wait()
            self._rediscover = anyio.Event()
            fresh = await discover_all(self.loaded, self.ctx, self.settings.discovery_timeout, level=logging.DEBUG)
            # A profile whose rediscovery failed keeps its last inventory: a flaky npu-smi must not
            # withdraw devices from the scheduler (and from claims prepared on them).
            inventories = {name: fresh[name] if name in fresh else self.state.inventories[name]
                           for name in self.loaded if name in fresh or name in self.state.inventories}
            if inventories != self.state.inventories:
                log.info("inventory changed; republishing")
                self.state.set_inventories(inventories)
                self.metrics.set_inventories(inventories)
                await self.check_health()
                await self._republish()

    async def _republish(self) -> None:
        assert self.state is not None
        update = getattr(self.publisher, "update", None)
        if update is not None:
            update(self._desired())
        else:
            await self.publisher.publish(self._desired())


async def _run_until_signal(daemon: Daemon) -> None:
    await run_until_signal(daemon.run, log)


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    """The exceptions inside nested task-group exception groups."""
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


def _one_line(exc: BaseException) -> str:
    """An error's text on one line (a YAML parser's message spans three: what, where, the mark)."""
    return " ".join(str(exc).split())


def _import_cluster_side() -> None:
    """Import cluster mode's modules and their dependencies before the event loop starts
    (:func:`~ascend_dra.cluster.apiclient.import_client_modules` says why)."""
    from ascend_dra.cluster import apiclient, apiserver, claimstatus, statushook  # noqa: F401

    apiclient.import_client_modules()


def main(settings: Settings) -> int:
    """Run the daemon in the foreground; return the process exit code."""
    setup_logging(settings.log_level, settings.log_format)
    for line in settings.warnings:
        log.warning(line)
    if settings.standalone is None:
        _import_cluster_side()
    code = 0
    try:
        anyio.run(_run_until_signal, Daemon(settings), backend="asyncio")
    except* (CheckpointCorrupt, RuntimeError) as group:
        for exc in _leaves(group):  # the traceback only at debug level: the message says what to do
            log.error("refusing to start: %s", _one_line(exc),
                      exc_info=exc if log.isEnabledFor(logging.DEBUG) else None)
        code = 1
    except* OSError as group:
        for exc in _leaves(group):
            log.error("stopped: %s", _one_line(exc), exc_info=exc if log.isEnabledFor(logging.DEBUG) else None)
        code = 1
    log.info("stopped", extra={"exit_code": code})
    return code
