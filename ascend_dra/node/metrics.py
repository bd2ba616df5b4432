"""Prometheus metrics of the node daemon (prometheus-client), served on ``--metrics-port``.

Names follow ``ascend_dra_<noun>_total`` / ``_seconds`` with a ``result`` label (docs/architecture.md#conventions),
zero-initialised so dashboards see every series from the start:

- ``ascend_dra_prepare_requests_total{result}``, ``ascend_dra_prepare_seconds`` (one per RPC);
- ``ascend_dra_unprepare_requests_total{result}``, ``ascend_dra_unprepare_seconds``;
- ``ascend_dra_claims_total{operation, result}``: per claim, ``result`` ``ok`` or ``error``;
- ``ascend_dra_prepared_claims``: claims in the checkpoint;
- ``ascend_dra_devices{profile, tier}``: devices discovered, by profile and discovery tier
  (``npu-smi``, ``devfs``, ``nvml``, ``simulated``);
- ``ascend_dra_unhealthy_devices{profile}``: devices the profile's health hook reports unhealthy;
- ``ascend_dra_registration_status``: 1 registered, 0 refused by the kubelet, -1 not yet told;
- ``ascend_dra_claim_status_pending``: claims whose ``status.devices`` write (claimstatus.py) waits
  for a lull, is under way or waits to be tried again, and
  ``ascend_dra_claim_status_writes_total{result}`` (``ok``; ``deferred``: a round of attempts found
  no API server, tried again later; ``failed``: invalid or dropped); cluster mode only;
- ``ascend_dra_event_loop_stall_max_seconds{phase}``: the longest time the event loop could not run
  because of our own work (the time its thread waited for a CPU taken out), ``starting`` (before the
  kubelet sockets are bound) or ``serving`` (loopstall.py);
- ``ascend_dra_build_info{version, python, implementation}``: always 1;
- per chip and per prepared claim: what each device is given, to which pod, and what it reports,
  under HAMi's names where HAMi has them (``hami_gpu_*``, ``hami_vgpu_*``, ``hami_host_gpu_*``,
  ``ascend_dra_device_*``, ``ascend_dra_claim_device_info``; usage.py, docs/monitoring.md);
- prometheus-client's process (``process_*``), platform (``python_info``) and GC collectors.

The registration and prepared-claims gauges are read when scraped (:meth:`Metrics.follow`), so they
are true from the first scrape, after a restart too, not only after the next RPC.

The HTTP server (:meth:`Metrics.serve`) answers ``/metrics``, ``/healthz`` and ``/readyz`` (the
checks the daemon hands it; 200 or 503 with the reason as text) and 404 on every other path.
"""

from __future__ import annotations

import logging
import platform
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder

from ascend_dra.model import Inventory
from ascend_dra.node.usage import Samples, UsageCollector
from ascend_dra.system.listen import ALL_ADDRESSES, describe, tcp_listener
from ascend_dra.version import version

__all__ = ("Check", "Metrics")

log = logging.getLogger(__name__)

_RESULTS = ("ok", "error")

#: A health check for the HTTP server: returns ``(healthy, text for the response body)``; blocking.
Check = Callable[[], tuple[bool, str]]



class Metrics:
    """One registry per daemon (tests create several daemons in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = {
            op: Counter(f"ascend_dra_{op}_requests", f"{op} RPCs by result (error: at least one claim failed)",
                        ["result"], registry=r)
            for op in ("prepare", "unprepare")
        }
        self.seconds = {
            op: Histogram(f"ascend_dra_{op}_seconds", f"duration of one {op} RPC, in seconds", registry=r,
                          buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 45))
            for op in ("prepare", "unprepare")
        }
        self.claims = Counter("ascend_dra_claims", "claims handled, by operation and result",
                              ["operation", "result"], registry=r)
        self.prepared = Gauge("ascend_dra_prepared_claims", "claims recorded as prepared in the checkpoint",
                              registry=r)
        self.devices = Gauge("ascend_dra_devices", "devices discovered, by profile and discovery tier",
                             ["profile", "tier"], registry=r)
        self.unhealthy = Gauge("ascend_dra_unhealthy_devices", "devices a profile reports unhealthy",
                               ["profile"], registry=r)
        self.registration = Gauge("ascend_dra_registration_status",
                                  "1 registered with the kubelet, 0 refused, -1 not yet told", registry=r)
        self.registration.set(-1)
        self.build_info = Gauge("ascend_dra_build_info", "always 1: the ascend-dra version and the Python running it",
                                ["version", "python", "implementation"], registry=r)
        self.build_info.labels(version(), platform.python_version(), platform.python_implementation()).set(1)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        if GC_COLLECTOR is not None:
            GCCollector(registry=r)
        self._server: ThreadingHTTPServer | None = None
        self.loop_stall = Gauge("ascend_dra_event_loop_stall_max_seconds",
                                "longest time the event loop could not run, by phase (starting, serving)",
                                ["phase"], registry=r)
        for phase in ("starting", "serving"):
            self.loop_stall.labels(phase)
        self.status_pending = Gauge("ascend_dra_claim_status_pending",
                                    "claims whose status.devices write waits, is under way or is to be tried again",
                                    registry=r)
        self.status_writes = Counter("ascend_dra_claim_status_writes",
                                     "status.devices writes by result (deferred: a round of attempts failed, "
                                     "tried again later; failed: invalid, or dropped from a full queue)",
                                     ["result"], registry=r)
        for result in ("ok", "deferred", "failed"):
            self.status_writes.labels(result)
        self.checkpoint_failures = Gauge(
            "ascend_dra_checkpoint_write_failures",
            "checkpoint writes that failed since the daemon started (a full, read-only or failing state disk: "
            "every Prepare and Unprepare then fails); it only grows", registry=r)
        self.publish_failing = Gauge("ascend_dra_resourceslice_publish_failing",
                                     "1 while the last attempt to publish the ResourceSlices failed: the API server "
                                     "refused or did not answer (the daemon retries with backoff, and is not ready "
                                     "meanwhile), or stored them without a disabled feature gate's fields (logged "
                                     "as an ERROR; until the next resync)", registry=r)
        self.cleanup_pending = Gauge("ascend_dra_cleanup_pending",
                                     "1 while a rollback or an orphan CDI spec removal failed and waits for its retry "
                                     "(the devices it names stay held)", registry=r)
        for op in ("prepare", "unprepare"):
            for result in _RESULTS:
                self.requests[op].labels(result)
                self.claims.labels(op, result)

    def observe(self, operation: str, seconds: float, errors: int, claims: int) -> None:
        """Record one Prepare/Unprepare RPC (``errors`` of its ``claims`` failed)."""
        self.requests[operation].labels("error" if errors else "ok").inc()
        self.seconds[operation].observe(seconds)
        self.claims.labels(operation, "ok").inc(claims - errors)
        self.claims.labels(operation, "error").inc(errors)

    def set_inventories(self, inventories: Mapping[str, Inventory]) -> None:
        self.devices.clear()
        for profile, inventory in inventories.items():
            self.devices.labels(profile, inventory.source or "unknown").set(len(inventory.devices))

    def follow(self, prepared: Callable[[], int], registered: Callable[[], bool | None]) -> None:
        """Read the prepared-claims and registration gauges from these callables at every scrape
        (from the server's thread: they must only read)."""
        self.prepared.set_function(lambda: float(prepared()))
        self.registration.set_function(lambda: -1.0 if (v := registered()) is None else float(v))

    def follow_checkpoint(self, failures: Callable[[], int], cleanup_pending: Callable[[], bool],
                          publish_failing: Callable[[], bool]) -> None:
        """Read the checkpoint and publishing gauges from these callables at every scrape (from the
        server's thread)."""
        self.checkpoint_failures.set_function(lambda: float(failures()))
        self.cleanup_pending.set_function(lambda: float(cleanup_pending()))
        self.publish_failing.set_function(lambda: float(publish_failing()))

    def follow_claim_status(self, pending: Callable[[], int]) -> None:
        """Read the claim-status backlog from ``pending`` at every scrape (from the server's thread)."""
        self.status_pending.set_function(lambda: float(pending()))

    def follow_usage(self, samples: Callable[[], Samples]) -> None:
        """Serve the usage metrics (usage.py) from what ``samples`` returns at every scrape (called
        from the server's thread)."""
        self.registry.register(UsageCollector(samples))

    def serve(self, port: int, address: str = ALL_ADDRESSES, checks: Mapping[str, Check] | None = None) -> int:
        """Serve ``/metrics`` and the ``checks`` (path -> check, e.g. ``/healthz``) from a background
        thread; any other path is 404. Return the bound port. ``address`` as
        :func:`~ascend_dra.system.listen.tcp_listener`.

        :raises OSError: the port cannot be bound.
        """
        registry, paths = self.registry, dict(checks or {})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                if path == "/metrics":
                    encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                    self._reply(200, encoder(registry), content_type)
                elif path in paths:
                    ok, text = paths[path]()
                    self._reply(200 if ok else 503, (text + "\n").encode(), "text/plain; charset=utf-8")
                else:
                    known = ", ".join(["/metrics", *paths])
                    self._reply(404, f"404 not found: {path} (served: {known})\n".encode(), "text/plain; charset=utf-8")

            def _reply(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("metrics request", extra={"request": format % args})

        listener = tcp_listener(address, port)
        server = ThreadingHTTPServer(("", 0), Handler, bind_and_activate=False)
        server.socket.close()  # the stdlib server makes an IPv4 socket; ours may be IPv6
        server.socket, server.server_address = listener, listener.getsockname()
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="ascend-dra-metrics", daemon=True).start()
        self._server = server
        bound = int(server.server_address[1])
        log.info("serving /metrics", extra={"address": describe(address), "port": bound, "paths": ",".join(paths)})
        return bound

    def close(self) -> None:
        """Stop the HTTP server (blocking, until its loop has stopped)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
