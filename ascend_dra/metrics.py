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
- ``ascend_dra_event_loop_stall_max_seconds{phase}``: the longest time the event loop could not run
  because of our own work (the time its thread waited for a CPU taken out), ``starting`` (before the
  kubelet sockets are bound) or ``serving`` (loopstall.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from ascend_dra.model import Inventory

__all__ = ("Metrics",)

_RESULTS = ("ok", "error")


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
        self.loop_stall = Gauge("ascend_dra_event_loop_stall_max_seconds",
                                "longest time the event loop could not run, by phase (starting, serving)",
                                ["phase"], registry=r)
        for phase in ("starting", "serving"):
            self.loop_stall.labels(phase)
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

    def serve(self, port: int, address: str = "0.0.0.0") -> None:
        """Serve ``/metrics`` from a background thread (prometheus-client's own server)."""
        start_http_server(port, addr=address, registry=self.registry)
