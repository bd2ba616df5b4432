"""Liveness and readiness of the node daemon: ``grpc.health.v1.Health`` on ``--healthcheck-port``,
and the checks behind ``/healthz`` and ``/readyz`` of the metrics server.

A check is true only when the kubelet could really talk to us: like dra-example-driver's
``health.go``, every check dials both unix sockets afresh and calls ``GetInfo`` on the
registration socket and an empty ``NodePrepareResources`` (v1) on the DRA socket. A removed socket
file, a server that no longer accepts, or an event loop that cannot answer within
:data:`CHECK_TIMEOUT_S` all make it fail.

Everything here runs in a thread of its own with its own asyncio loop (:class:`HealthThread`), so
a stuck daemon loop is answered ``NOT_SERVING`` (or 503) instead of not at all.

Services (``HealthCheckRequest.service``):

===============  ==============================================================================
``""``           both sockets answer (the kubelet's grpc probe asks for ``""`` unless told)
``liveness``     the same
``readiness``    both sockets answer, the kubelet's last ``NotifyRegistrationStatus`` said
                 registered (a rolling update hands over only once the new pod is registered)
                 **and** no failed publish of the ResourceSlices is being retried
anything else    ``Check``: the error ``NOT_FOUND``; ``Watch``: ``SERVICE_UNKNOWN``, stream kept open
===============  ==============================================================================
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from grpclib import GRPCError, Status
from grpclib.client import Channel
from grpclib.exceptions import StreamTerminatedError
from grpclib.server import Server

from ascend_dra.kubelet._gen.grpc.health.v1 import (
    HealthBase,
    HealthCheckRequest,
    HealthCheckResponse,
    HealthCheckResponseServingStatus,
)
from ascend_dra.kubelet._gen.k8s.io.kubelet.pkg.apis.dra import v1
from ascend_dra.kubelet._gen.pluginregistration import InfoRequest, RegistrationStub
from ascend_dra.system.listen import describe, tcp_listener

__all__ = ("CHECK_TIMEOUT_S", "SERVICES", "HealthService", "HealthThread", "SocketProbe")

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds both socket calls of one check may take together: under the kubelet's default probe
#: ``timeoutSeconds`` of 1.
CHECK_TIMEOUT_S = 0.8
#: Seconds between two checks of a ``Watch`` stream.
WATCH_INTERVAL_S = 1.0
#: Service name -> whether it is the readiness check (registration and publishing too).
SERVICES = {"": False, "liveness": False, "readiness": True}

SERVING = HealthCheckResponseServingStatus.SERVING
NOT_SERVING = HealthCheckResponseServingStatus.NOT_SERVING
SERVICE_UNKNOWN = HealthCheckResponseServingStatus.SERVICE_UNKNOWN


class SocketProbe:
    """Calls both kubelet sockets the way the kubelet does.

    :param registration_socket: the registration socket's path.
    :param dra_socket: the DRA socket's path.
    :param registered: returns the kubelet's last word: True registered, False refused, None not yet.
    :param publish_error: returns why the last attempt to publish the ResourceSlices failed, or None
        (it succeeded, or none ended yet): a node whose devices the scheduler cannot see is not ready.
    """

    def __init__(self, registration_socket: Path, dra_socket: Path, registered: Callable[[], bool | None],
                 publish_error: Callable[[], str | None] = lambda: None) -> None:
        self.registration_socket = registration_socket
        self.dra_socket = dra_socket
        self.registered = registered
        self.publish_error = publish_error
        self._last: dict[bool, tuple[str, ...]] = {}

    async def problems(self, *, readiness: bool = False, timeout_s: float = CHECK_TIMEOUT_S) -> list[str]:
        """What fails now, one line each (empty: healthy). ``readiness`` adds the registration and
        the publishing of the ResourceSlices."""
        found: list[str] = []

        async def call(what: str, path: Path, rpc: Callable[[Channel], Coroutine[Any, Any, object]]) -> None:
            channel = Channel(path=str(path))
            try:
                await rpc(channel)
            except (TimeoutError, OSError, GRPCError, StreamTerminatedError) as exc:  # reset mid-call too
                found.append(f"{what} {path} does not answer ({type(exc).__name__}: {exc})")
            finally:
                channel.close()

        await asyncio.gather(
            call("registration socket", self.registration_socket,
                 lambda ch: RegistrationStub(ch).get_info(InfoRequest(), timeout=timeout_s)),
            call("DRA socket", self.dra_socket,
                 lambda ch: v1.DraPluginStub(ch).node_prepare_resources(v1.NodePrepareResourcesRequest(),
                                                                         timeout=timeout_s)))
        if readiness:
            registered = self.registered()
            if registered is None:
                found.append("the kubelet has not registered the plugin yet (no NotifyRegistrationStatus)")
            elif not registered:
                found.append("the kubelet refused the registration (see the log and ascend_dra_registration_status)")
            error = self.publish_error()
            if error is not None:
                found.append(f"publishing the ResourceSlices failed, retrying: {error}")
        self._log_change(readiness, found)
        return found

    def _log_change(self, readiness: bool, found: list[str]) -> None:
        last = self._last.get(readiness)
        if last is not None and last == tuple(found):
            return
        self._last[readiness] = tuple(found)
        what = "readiness" if readiness else "liveness"
        if found:
            log.warning("health check failing", extra={"check": what, "problems": "; ".join(found)})
        elif last:
            log.info("health check passing again", extra={"check": what})


class HealthService(HealthBase):
    """``grpc.health.v1.Health``: ``Check`` and ``Watch`` over a :class:`SocketProbe`."""

    def __init__(self, probe: SocketProbe, watch_interval_s: float = WATCH_INTERVAL_S) -> None:
        self.probe = probe
        self.watch_interval_s = watch_interval_s

    async def _status(self, service: str) -> HealthCheckResponseServingStatus:
        problems = await self.probe.problems(readiness=SERVICES[service])
        return NOT_SERVING if problems else SERVING

    async def check(self, message: HealthCheckRequest) -> HealthCheckResponse:
        if message.service not in SERVICES:
            raise GRPCError(Status.NOT_FOUND, f"unknown service {message.service!r}; known: "
                            + ", ".join(repr(s) for s in SERVICES))
        return HealthCheckResponse(status=await self._status(message.service))

    async def watch(self, message: HealthCheckRequest) -> AsyncIterator[HealthCheckResponse]:
        if message.service not in SERVICES:
            yield HealthCheckResponse(status=SERVICE_UNKNOWN)
            await asyncio.Event().wait()  # the spec keeps the call open; the client ends it
        last = None
        while True:
            status = await self._status(message.service)
            if status != last:
                last = status
                yield HealthCheckResponse(status=status)
            await asyncio.sleep(self.watch_interval_s)


class HealthThread:
    """A daemon thread running its own asyncio loop for the health checks and the health service.

    :param probe: what the checks call.
    :param main_loop: the daemon's loop, whose liveness :meth:`loop_alive` checks.
    """

    def __init__(self, probe: SocketProbe, main_loop: asyncio.AbstractEventLoop) -> None:
        self.probe = probe
        self.main_loop = main_loop
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ascend-dra-health", daemon=True)
        self._server: Server | None = None

    def start(self) -> None:
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run ``coro`` on the health loop from another thread; wait at most ``timeout_s`` seconds.

        :raises TimeoutError: it took longer (it is cancelled).
        """
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout_s} s") from None

    def serve(self, port: int, address: str) -> int:
        """Serve :class:`HealthService` on TCP ``address:port``; return the bound port (blocking, ~ms).

        :raises OSError: the port cannot be bound.
        """
        sock = tcp_listener(address, port)

        async def start() -> None:
            server = Server([HealthService(self.probe)])
            await server.start(sock=sock)
            self._server = server
        try:
            self.run(start(), 5.0)
        except BaseException:
            sock.close()
            raise
        bound = int(sock.getsockname()[1])
        log.info("serving grpc.health.v1.Health", extra={"address": describe(address), "port": bound})
        return bound

    def loop_alive(self, timeout_s: float = 2.0) -> bool:
        """Whether the daemon's loop runs a callback within ``timeout_s`` seconds (blocking)."""
        ran = threading.Event()
        try:
            self.main_loop.call_soon_threadsafe(ran.set)
        except RuntimeError:  # the loop is closed
            return False
        return ran.wait(timeout_s)

    def healthz(self) -> tuple[bool, str]:
        """``/healthz``: the process answers and its loop runs (blocking, at most ~2 s)."""
        if self.loop_alive():
            return True, "ok"
        return False, "the event loop did not run a callback within 2 s"

    def readyz(self) -> tuple[bool, str]:
        """``/readyz``: both sockets answer and the kubelet registered the plugin (blocking, ~1 s)."""
        try:
            problems = self.run(self.probe.problems(readiness=True), CHECK_TIMEOUT_S + 1)
        except TimeoutError as exc:
            problems = [f"the check did not finish: {exc}"]
        return (not problems, "ok" if not problems else "\n".join(problems))

    def stop(self) -> None:
        """Close the health service and stop the thread (blocking, at most ~2 s)."""
        async def close() -> None:
            if self._server is not None:
                self._server.close()
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        if self._thread.is_alive():
            try:
                self.run(close(), 2.0)
            except TimeoutError:
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(2.0)
