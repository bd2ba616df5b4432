"""How long the event loop could not run anything: the longest stall, for the benchmark and metrics.

The kubelet gives ``GetInfo`` one second and every RPC waits behind whatever holds the loop, so
nothing may block it for more than a few milliseconds (an import, a parse, an encode). A task
sleeps ``period`` seconds in a loop; the time it wakes late is a stall. The longest one since the
sockets were bound is ``ascend_dra_event_loop_stall_max_seconds{phase="serving"}``; before that,
``phase="starting"`` (discovery, checkpoint load: nobody waits on the loop yet, but it is shown).
"""

from __future__ import annotations

import time

import anyio

__all__ = ("LoopStallMonitor",)


class LoopStallMonitor:
    """Measures the event loop's stalls; :meth:`run` is the task.

    :ivar longest: phase (``starting``, ``serving``) -> the longest stall seen, in seconds.
    """

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.phase = "starting"
        self.longest: dict[str, float] = {"starting": 0.0, "serving": 0.0}
        self.on_stall = lambda phase, seconds: None  # set by the daemon: feeds the metric

    async def run(self) -> None:
        while True:
            started = time.perf_counter()
            await anyio.sleep(self.period)
            late = time.perf_counter() - started - self.period
            if late > self.longest[self.phase]:
                self.longest[self.phase] = late
                self.on_stall(self.phase, late)
