"""LoopStallMonitor: our own blocking counts as a stall, the kernel running another process does not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import anyio
import pytest

from ascend_dra.loopstall import LoopStallMonitor, RunQueueClock

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


async def test_a_callback_that_holds_the_loop_is_a_stall():
    monitor = LoopStallMonitor()

    async def block() -> None:
        time.sleep(0.08)  # noqa: ASYNC251 (on purpose: what an import or a big encode on the loop does)
        await anyio.sleep(0.02)

    await watch(monitor, block)
    assert monitor.longest["starting"] >= 0.07


CHILD = """
import os, subprocess, sys
import anyio
from ascend_dra.loopstall import LoopStallMonitor
os.sched_setaffinity(0, {int(sys.argv[1])})
hog = subprocess.Popen([sys.executable, "-c", "import time\\nend = time.time() + 4\\nwhile time.time() < end: pass"])
os.nice(19)  # after the hog started (it keeps nice 0): the loop gets a small share of the CPU
async def main():
    monitor = LoopStallMonitor()
    async with anyio.create_task_group() as tg:
        tg.start_soon(monitor.run)
        await anyio.sleep(1.5)
        tg.cancel_scope.cancel()
    print(monitor.longest["starting"], monitor.longest_late["starting"])
try:
    anyio.run(main)
finally:
    hog.kill()
"""


@pytest.mark.skipif(RunQueueClock().read() is None, reason="this kernel has no /proc/thread-self/schedstat")
def test_waiting_for_a_cpu_another_process_holds_is_not_our_stall():
    """A child's loop at nice 19 shares one CPU with a busy process at nice 0: it wakes late, but it
    was runnable all that time (the child's own process, so nothing here changes priority)."""
    cpu = min(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", CHILD, str(cpu)], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    own, late = (float(x) for x in out.split())
    assert late > 0.01  # the sharing is visible as lateness...
    assert own < late / 2  # ...but it is not the loop's own work
