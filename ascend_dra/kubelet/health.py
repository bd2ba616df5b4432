"""The resource health stream, ``NodeWatchResources`` of ``v1alpha1`` and ``v1.DRAResourceHealth`` (KEP-4680).

Source: docs/architecture.md#health-stream. With the ``ResourceHealthStatus`` gate on (alpha/off in 1.34
and 1.35, beta/on from 1.36), the kubelet opens this stream for every DRA plugin. Kubelets up to
1.36 call ``v1alpha1``; the 1.37 kubelet calls ``v1`` when the plugin lists it in
``supported_versions`` (the newest version both sides list). Both have the same wire schema, so
one :class:`HealthFeed` feeds two gRPC services built from the same snapshot.

Timing and size, from the same section:

* each message carries the driver's **complete** device list (1.34/1.35 require it; 1.37 accepts
  subsets, full lists stay correct) and is re-sent at least every :data:`MAX_RESEND_S` seconds, a
  third of the kubelet's 30 s staleness window (``DefaultHealthTimeout``), because 1.34 ignores
  ``health_check_timeout_seconds``;
* ``message`` is cut to :data:`MAX_HEALTH_MESSAGE` characters (the kubelet truncates longer ones);
* one stream message stays under gRPC's default 4 MiB receive limit (:data:`MAX_STREAM_MESSAGE_BYTES`;
  the kubelet sets no ``MaxCallRecvMsgSize``): an entry is ~60 bytes plus its names, so even 10,000
  devices fit; :meth:`HealthService.snapshot` drops messages first and raises if it still does not fit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from types import ModuleType
from typing import Any

import anyio

from ascend_dra.kubelet._gen import v1 as health_v1
from ascend_dra.kubelet._gen import v1alpha1 as health_v1alpha1

__all__ = (
    "HEALTH_SERVICES",
    "MAX_HEALTH_MESSAGE",
    "MAX_RESEND_S",
    "MAX_STREAM_MESSAGE_BYTES",
    "HealthFeed",
    "HealthService",
    "HealthServiceV1",
    "health_services",
)

log = logging.getLogger(__name__)

#: Registration strings of the health services we serve, newest first (docs/architecture.md#health-stream).
HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
#: The kubelet's ``DefaultHealthTimeout``, seconds: a device not reported within it becomes Unknown.
KUBELET_HEALTH_TIMEOUT_S = 30
#: The longest gap between two stream messages, seconds: a third of the kubelet's window.
MAX_RESEND_S = 10.0
#: ``DeviceHealth.message`` length the kubelet keeps (longer ones become 1021 characters + ``...``).
MAX_HEALTH_MESSAGE = 1024
#: gRPC's default receive limit (4 MiB), which the kubelet does not raise.
MAX_STREAM_MESSAGE_BYTES = 4 * 1024 * 1024


class HealthFeed:
    """The current health of every device, and an event set whenever it changes.

    ``devices`` maps device name -> True (healthy), False (unhealthy) or None (unknown);
    ``messages`` maps a device name to an operator-facing reason (optional).
    """

    def __init__(self, pool_name: str) -> None:
        self.pool_name = pool_name
        self.devices: dict[str, bool | None] = {}
        self.messages: dict[str, str] = {}
        self._changed = anyio.Event()

    def update(self, devices: Mapping[str, bool | None], messages: Mapping[str, str] | None = None) -> None:
        """Replace the device list (and their messages) and wake every stream."""
        messages = dict(messages or {})
        if dict(devices) != self.devices or messages != self.messages:
            self.devices = dict(devices)
            self.messages = messages
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_changed(self) -> None:
        await self._changed.wait()


def _status(pb: ModuleType, healthy: bool | None) -> Any:
    return {True: pb.HealthStatus.HEALTHY, False: pb.HealthStatus.UNHEALTHY, None: pb.HealthStatus.UNKNOWN}[healthy]


def _cut(text: str) -> str:
    return text if len(text) <= MAX_HEALTH_MESSAGE else text[:MAX_HEALTH_MESSAGE - 3] + "..."


class _HealthStream:
    """The stream logic shared by both versions; ``_pb`` is the generated module of one version."""

    _pb: ModuleType

    def __init__(self, feed: HealthFeed, resend_s: float = MAX_RESEND_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.feed = feed
        #: Never longer than :data:`MAX_RESEND_S`, whatever the health-check interval.
        self.resend_s = min(resend_s, MAX_RESEND_S)
        self.clock = clock

    def snapshot(self) -> Any:
        """One ``NodeWatchResourcesResponse`` with every device of the feed.

        :raises ValueError: the message would exceed :data:`MAX_STREAM_MESSAGE_BYTES` even without
            device messages.
        """
        pb = self._pb
        now = int(self.clock())
        # Three missed messages before the kubelet calls a device unknown, never below its own 30 s.
        timeout_s = max(KUBELET_HEALTH_TIMEOUT_S, int(self.resend_s * 3))

        def build(with_messages: bool) -> Any:
            return pb.NodeWatchResourcesResponse(devices=[
                pb.DeviceHealth(device=pb.DeviceIdentifier(pool_name=self.feed.pool_name, device_name=name),
                                health=_status(pb, healthy), last_updated_time=now,
                                health_check_timeout_seconds=timeout_s,
                                message=_cut(self.feed.messages.get(name, "")) if with_messages else "")
                for name, healthy in sorted(self.feed.devices.items())
            ])

        response = build(True)
        if len(bytes(response)) > MAX_STREAM_MESSAGE_BYTES:
            log.warning("health stream message over 4 MiB; sending it without device messages",
                        extra={"devices": len(self.feed.devices)})
            response = build(False)
            size = len(bytes(response))
            if size > MAX_STREAM_MESSAGE_BYTES:
                raise ValueError(f"health stream: {len(self.feed.devices)} devices need {size} bytes, over the "
                                 f"kubelet's {MAX_STREAM_MESSAGE_BYTES}-byte gRPC message limit")
        return response

    async def node_watch_resources(self, message: Any) -> AsyncIterator[Any]:
        while True:
            yield self.snapshot()
            with anyio.move_on_after(self.resend_s):
                await self.feed.wait_changed()


class HealthService(_HealthStream, health_v1alpha1.DraResourceHealthBase):
    """``v1alpha1.DRAResourceHealth`` (kubelets 1.34 to 1.36, and 1.37 for drivers listing only it).

    :param resend_s: the longest gap between two messages, seconds; capped at :data:`MAX_RESEND_S`.
    """

    _pb = health_v1alpha1


class HealthServiceV1(_HealthStream, health_v1.DraResourceHealthBase):
    """``v1.DRAResourceHealth`` (kubelet 1.37+); the same stream as :class:`HealthService`."""

    _pb = health_v1


def health_services(feed: HealthFeed, resend_s: float = MAX_RESEND_S) -> list[object]:
    """Both health service versions over one feed, ready for the DRA socket's grpclib server."""
    return [HealthServiceV1(feed, resend_s), HealthService(feed, resend_s)]
