"""The resource health stream, ``v1alpha1.DRAResourceHealth/NodeWatchResources`` (KEP-4680).

Source: kubelet-dra-protocol.md §5. With the ``ResourceHealthStatus`` gate on, the kubelet opens
this stream for every DRA plugin; each message must carry the driver's complete device list and
be re-sent well within the kubelet's 30 s timeout, so we send one on every change and at least
every ``resend_s`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping

import anyio

from ascend_dra.kubelet._gen.v1alpha1 import (
    DeviceHealth,
    DeviceIdentifier,
    DraResourceHealthBase,
    HealthStatus,
    NodeWatchResourcesRequest,
    NodeWatchResourcesResponse,
)

__all__ = ("HealthFeed", "HealthService")


class HealthFeed:
    """The current health of every device, and an event set whenever it changes.

    ``devices`` maps device name -> True (healthy), False (unhealthy) or None (unknown).
    """

    def __init__(self, pool_name: str) -> None:
        self.pool_name = pool_name
        self.devices: dict[str, bool | None] = {}
        self._changed = anyio.Event()

    def update(self, devices: Mapping[str, bool | None]) -> None:
        """Replace the device list and wake every stream."""
        if dict(devices) != self.devices:
            self.devices = dict(devices)
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_changed(self) -> None:
        await self._changed.wait()


_STATUS = {True: HealthStatus.HEALTHY, False: HealthStatus.UNHEALTHY, None: HealthStatus.UNKNOWN}


class HealthService(DraResourceHealthBase):
    """Streams :class:`HealthFeed` to the kubelet.

    :param resend_s: the longest gap between two messages, in seconds (< the kubelet's 30 s).
    """

    def __init__(self, feed: HealthFeed, resend_s: float = 10.0, clock: Callable[[], float] = time.time) -> None:
        self.feed = feed
        self.resend_s = resend_s
        self.clock = clock

    def snapshot(self) -> NodeWatchResourcesResponse:
        now = int(self.clock())
        return NodeWatchResourcesResponse(devices=[
            DeviceHealth(device=DeviceIdentifier(pool_name=self.feed.pool_name, device_name=name),
                         health=_STATUS[healthy], last_updated_time=now,
                         # Three missed messages before the kubelet calls a device unknown, never
                         # less than its own 30 s default.
                         health_check_timeout_seconds=max(30, int(self.resend_s * 3)))
            for name, healthy in sorted(self.feed.devices.items())
        ])

    async def node_watch_resources(
        self, message: NodeWatchResourcesRequest
    ) -> AsyncIterator[NodeWatchResourcesResponse]:
        while True:
            yield self.snapshot()
            with anyio.move_on_after(self.resend_s):
                await self.feed.wait_changed()
