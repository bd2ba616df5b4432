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
``idle_period``; after a busy interval, at once ``period`` again. A stall is work, so the looks
are frequent when one can happen; the first stall after a long idle spell may be seen shorter
than it was, or missed.
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

    def __init__(self, period: float = 0.005, idle_period: float = 0.25, busy_share: float = 0.05) -> None:
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

    async def run(self) -> None:
        clock = RunQueueClock()  # on the loop's thread: the one whose waiting counts
        period = self.period
        try:
            while True:
                started, waited, ran = time.perf_counter(), clock.read(), time.thread_time()
                await anyio.sleep(period)
                self.looks += 1
                elapsed = time.perf_counter() - started
                late = elapsed - period
                busy = time.thread_time() - ran > self.busy_share * elapsed
                period = self.period if busy else min(period * 2, self.idle_period)
                now_waited = clock.read()
                cpu_wait = now_waited - waited if waited is not None and now_waited is not None else 0.0
                own = max(0.0, late - cpu_wait)
                self.longest_late[self.phase] = max(self.longest_late[self.phase], late)
                if own > self.longest[self.phase]:
                    self.longest[self.phase] = own
                    self.on_stall(self.phase, own)
        finally:
            clock.close()
