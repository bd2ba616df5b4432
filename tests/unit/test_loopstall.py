"""LoopStallMonitor: our own blocking counts as a stall, the kernel running another process does not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import anyio
import pytest

from ascend_dra.observe.loopstall import LoopStallMonitor, RunQueueClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def watch(monitor: LoopStallMonitor, body) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(monitor.run)
        await anyio.sleep(0.05)
        await body()
        tg.cancel_scope.cancel()


async def work(seconds: float) -> None:
    """Keep the loop busy about half the time, in 1 ms callbacks, as a stream of RPCs does."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        burst = time.monotonic() + 0.001
        while time.monotonic() < burst:
            pass
        await anyio.sleep(0.001)


async def test_a_callback_that_holds_the_loop_while_it_works_is_a_stall_in_full():
    monitor = LoopStallMonitor()

    async def block() -> None:
        await work(0.1)
        time.sleep(0.08)  # noqa: ASYNC251 (on purpose: what an import or a big encode on the loop does)
        await anyio.sleep(0.02)

    await watch(monitor, block)
    assert monitor.longest["starting"] >= 0.07


async def test_an_idle_loop_is_looked_at_rarely_and_a_working_one_often():
    """A 5 ms timer woke an idle daemon 200 times a second (3.5 % of a CPU)."""
    monitor = LoopStallMonitor(period=0.005, idle_period=0.25)
    async with anyio.create_task_group() as tg:
        tg.start_soon(monitor.run)
        await anyio.sleep(1.0)
        idle_looks = monitor.looks
        await work(1.5)
        busy_looks = monitor.looks - idle_looks
        tg.cancel_scope.cancel()
    assert idle_looks <= 12  # 5, 10, 20, ... 250 ms apart: 8 in the first second
    # Every 5 ms or so while it works (~250), from at most 250 ms into the work; 60 leaves room for
    # a loaded machine, and is still five times the idle rate.
    assert busy_looks >= 60


async def test_an_idle_daemon_looks_every_two_seconds_at_most():
    """Four looks a second were most of an idle daemon's CPU (0.6-0.75 ms/s of 1 ms/s)."""
    monitor = LoopStallMonitor()
    async with anyio.create_task_group() as tg:
        tg.start_soon(monitor.run)
        await anyio.sleep(3.0)
        first = monitor.looks  # 5, 10, ... 1280 ms, then 2 s: 9 or 10 in the first 3 s
        await anyio.sleep(4.0)
        later = monitor.looks - first
        tg.cancel_scope.cancel()
    assert first <= 11
    assert later <= 3


async def test_a_call_that_arrives_while_idle_is_watched_from_its_start():
    """Woken by the call (the daemon's grpclib RecvRequest listener), the monitor looks every few
    ms at once: a stall in the call's first second is seen in full, not after the 2 s sleep."""
    monitor = LoopStallMonitor()
    async with anyio.create_task_group() as tg:
        tg.start_soon(monitor.run)
        await anyio.sleep(3.0)  # long asleep now
        before = monitor.looks
        monitor.wake()
        time.sleep(0.08)  # noqa: ASYNC251 (on purpose: the call holds the loop before its first await)
        await work(0.2)
        time.sleep(0.04)  # noqa: ASYNC251 (and again later, while the looks are frequent)
        await anyio.sleep(0.05)
        looks = monitor.looks - before
        tg.cancel_scope.cancel()
    assert looks >= 10  # every 5 ms or so during 0.25 s (never asleep 2 s again)
    assert monitor.longest["starting"] >= 0.07  # counted from the wake, not from the look's run


HOG = """
import os, time
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))  # above every normal task on its CPU
for _ in range(3):
    end = time.monotonic() + 0.25
    while time.monotonic() < end:
        pass
    time.sleep(0.2)
"""

CHILD = """
import os, subprocess, sys
import anyio
from ascend_dra.observe.loopstall import LoopStallMonitor
os.sched_setaffinity(0, {int(sys.argv[1])})
async def main():
    monitor = LoopStallMonitor()
    async with anyio.create_task_group() as tg:
        tg.start_soon(monitor.run)
        await anyio.sleep(0.2)
        hog = subprocess.Popen([sys.executable, "-c", sys.argv[2]])  # same CPU (inherited affinity)
        await anyio.to_thread.run_sync(hog.wait)
        tg.cancel_scope.cancel()
    print(monitor.longest["starting"], monitor.longest_late["starting"])
anyio.run(main)
"""


def _can_run_realtime() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (PermissionError, OSError):
        return False
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return True


@pytest.mark.skipif(RunQueueClock().read() is None, reason="this kernel has no /proc/thread-self/schedstat")
@pytest.mark.skipif(not _can_run_realtime(), reason="needs CAP_SYS_NICE for a SCHED_FIFO process (CI runs as root)")
def test_waiting_for_a_cpu_another_process_holds_is_not_our_stall():
    """A real-time process busy on the loop's CPU for 0.25 s at a time: the loop wakes late by about
    that much, but it was runnable all that time, so it is no stall of ours."""
    cpu = min(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", CHILD, str(cpu), HOG], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    own, late = (float(x) for x in out.split())
    assert late > 0.05  # the hog is visible as lateness...
    assert own < late / 4  # ...but it is not the loop's own work
