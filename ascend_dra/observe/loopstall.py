"""How long the event loop could not run anything: the longest stall, for the benchmark and metrics.

The kubelet gives ``GetInfo`` one second and every RPC waits behind whatever holds the loop, so
nothing may block it for more than a few milliseconds (an import, a parse, an encode). A task
sleeps ``period`` seconds in a loop; the time it wakes late is a stall. The longest one since the
sockets were bound is ``ascend_dra_event_loop_stall_max_seconds{phase="serving"}``; before that,
``phase="starting"`` (discovery, checkpoint load: nobody waits on the loop yet, but it is shown).

A late wake-up has two causes: our own code held the loop (a long callback, many ready ones, a
blocking call), or the loop's thread was runnable but the kernel ran something else (a busy
node). Only the first is ours to fix, so the time the thread spent waiting for a CPU is taken out:
the kernel counts it per thread (``/proc/thread-self/schedstat``, second field, nanoseconds; Linux
``CONFIG_SCHED_INFO``). Where that file is missing the stall is the whole lateness.

Looking costs a wake-up, so the monitor looks often only while the loop works: a 5 ms timer, 200
wake-ups a second, was 3.5 % of a CPU in an idle daemon, on every node. After a look at which the
loop's thread had used less than :attr:`LoopStallMonitor.busy_share` of the time since the last
one (its own CPU, ``time.thread_time``), the next look comes twice as late, up to
``idle_period`` (2 s); after a busy interval, at once ``period`` again. Work that arrives on a
socket (an RPC of the kubelet: the daemon calls :meth:`LoopStallMonitor.wake` from grpclib's
``RecvRequest`` event) cuts a long sleep short, so the looks are frequent as soon as a call is
under way. A stall is work, so the looks are frequent when one can happen; a stall of work that
did not come through an RPC (a rediscovery, a watch event) after a long idle spell may be seen
shorter than it was, or missed, until the look after it finds the loop busy.

The idle period was 250 ms until 2026-12-07: four looks a second were 0.6-0.75 ms of CPU a second
of an idle standalone daemon (0.0-0.25 ms/s with 2 s), 1.3 ms/s on the hundred-node bed, where
the target is 1 ms/s for everything a daemon does while idle (docs/performance.md).
"""

from __future__ import annotations

import os
import time

import anyio

__all__ = ("LoopStallMonitor", "RunQueueClock")


class RunQueueClock:
    """Seconds the calling thread has waited on a run queue so far (the kernel's schedstat).

    Open it on the thread to measure. :meth:`read` is None where the kernel does not offer it.
    """

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None

    def read(self) -> float | None:
        if self._fd is None:
            return None
        try:
            return int(os.pread(self._fd, 128, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LoopStallMonitor:
    """Measures the event loop's stalls; :meth:`run` is the task.

    :ivar longest: phase (``starting``, ``serving``) -> the longest stall seen, in seconds, without
        the time the loop's thread waited for a CPU.
    :ivar longest_late: the same for the whole lateness (CPU wait included), for comparison.
    """

    def __init__(self, period: float = 0.005, idle_period: float = 2.0, busy_share: float = 0.05) -> None:
        """:param period: seconds between looks while the loop works.
        :param idle_period: the longest time between looks while it does not.
        :param busy_share: the share of an interval's time the loop's thread must have run (CPU)
            for the interval to count as work."""
        self.period = period
        self.idle_period = idle_period
        self.busy_share = busy_share
        self.looks = 0  # for tests: how often the monitor woke the loop
        self.phase = "starting"
        self.longest: dict[str, float] = {"starting": 0.0, "serving": 0.0}
        self.longest_late: dict[str, float] = {"starting": 0.0, "serving": 0.0}
        self.on_stall = lambda phase, seconds: None  # set by the daemon: feeds the metric
        self._idle_wake: anyio.Event | None = None  # set while the monitor sleeps a long sleep
        self._woken: tuple[float, float | None] = (0.0, None)  # when wake() ended it; the run-queue clock then
        self._clock: RunQueueClock | None = None

    def wake(self) -> None:
        """Work has arrived: if the monitor sleeps a long sleep, look now and often from then on.
        Cheap (nothing to do unless it sleeps long); call it on the loop's thread. The look is due
        at once: the time until it runs (the call holding the loop before its first await) is a stall."""
        if self._idle_wake is not None and not self._idle_wake.is_set():
            self._woken = (time.perf_counter(), self._clock.read() if self._clock is not None else None)
            self._idle_wake.set()

    async def call_arrived(self, _event: object) -> None:
        """:meth:`wake`, as a listener of grpclib's ``RecvRequest`` event (the daemon's two sockets)."""
        self.wake()

    async def _sleep(self, period: float) -> bool:
        """Sleep ``period`` s; a sleep longer than ``4 * self.period`` ends early at :meth:`wake`.
        :return: whether :meth:`wake` ended it."""
        if period <= 4 * self.period:  # the looks while working: the cheapest sleep there is
            await anyio.sleep(period)
            return False
        self._idle_wake = event = anyio.Event()
        try:
            with anyio.move_on_after(period):
                await event.wait()
        finally:
            self._idle_wake = None
        return event.is_set()

    async def run(self) -> None:
        self._clock = clock = RunQueueClock()  # on the loop's thread: the one whose waiting counts
        period = self.period
        try:
            while True:
                started, waited, ran = time.perf_counter(), clock.read(), time.thread_time()
                woken = await self._sleep(period)
                now = time.perf_counter()
                self.looks += 1
                due = started + period
                if woken:  # due when the call arrived
                    due, waited = self._woken
                late = max(0.0, now - due)
                busy = woken or time.thread_time() - ran > self.busy_share * (now - started)
                period = self.period if busy else min(period * 2, self.idle_period)
                now_waited = clock.read()
                cpu_wait = now_waited - waited if waited is not None and now_waited is not None else 0.0
                own = max(0.0, late - cpu_wait)
                self.longest_late[self.phase] = max(self.longest_late[self.phase], late)
                if own > self.longest[self.phase]:
                    self.longest[self.phase] = own
                    self.on_stall(self.phase, own)
        finally:
            self._clock = None
            clock.close()
