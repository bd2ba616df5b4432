"""What held the daemon's event loop: the longest single callbacks and the stacks seen inside them.

A benchmark aid, never loaded by the product. Python imports ``sitecustomize`` at start-up from
the path; ``bench_matrix.py --loopwatch`` puts this directory on ``PYTHONPATH`` and sets
``ASCEND_DRA_LOOPWATCH`` to a report path, so the daemon it starts (``python -m ascend_dra.cli
run``) loads this module unchanged.

How: every asyncio callback runs through ``asyncio.events.Handle._run`` (ready callbacks, timers,
socket readiness, task steps). The wrapper times each one; a sampler thread looks every
millisecond and, while one callback of the main thread's loop (the daemon's; its health checker
runs a loop of its own, not watched) has run longer than ``ASCEND_DRA_LOOPWATCH_MS`` (default 5),
records the loop thread's stack (``sys._current_frames``). The loop's lateness that
``loopstall.py`` reports is the sum of every callback run in one turn; this separates one long
callback (a blocking step, ours to split) from many short ones queued behind each other (load).

Durations are the loop thread's own CPU time (``time.thread_time``), so time the kernel gave to
other processes is not counted; the sampled stacks are taken on wall time and may show a thread
that waits for a CPU. Report (JSON, written at exit): ``longest``: the 25 longest callbacks,
``[CPU ms, wall ms, what]``; ``histogram``: callbacks per CPU-time bucket; ``stacks``: the 25 stacks sampled most often,
``[samples, what, frames]`` (one sample is about a millisecond of a long callback).
"""

from __future__ import annotations

import atexit
import collections
import heapq
import os
import sys
import threading
import time

_REPORT = os.environ.get("ASCEND_DRA_LOOPWATCH")


def _describe(handle) -> str:
    callback = handle._callback
    owner = getattr(callback, "__self__", None)
    get_coro = getattr(owner, "get_coro", None)
    if get_coro is not None:  # a task step: name the coroutine and where it is suspended
        coro = get_coro()
        frame = getattr(coro, "cr_frame", None)
        where = f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno}" if frame else "done"
        return f"task {getattr(coro, '__qualname__', coro)} @ {where}"
    name = getattr(callback, "__qualname__", repr(callback))
    protocol = getattr(owner, "_protocol", None)  # socket readiness: whose protocol reads
    return f"{name} ({type(protocol).__qualname__})" if protocol is not None else name


def _install(report: str) -> None:
    import asyncio.events

    threshold = float(os.environ.get("ASCEND_DRA_LOOPWATCH_MS", "5")) / 1000
    original = asyncio.events.Handle._run
    longest: list[tuple[float, float, str]] = []  # a min-heap of the 25 longest: (CPU s, wall s, what)
    buckets = collections.Counter()
    stacks: collections.Counter = collections.Counter()
    running: dict[str, object] = {}  # "since", "thread", "handle" of the callback now running
    edges = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05)

    main = threading.main_thread().ident  # the daemon's loop; the health checker runs one of its own

    def timed_run(self):
        if threading.get_ident() != main:
            return original(self)
        started, cpu_started = time.perf_counter(), time.thread_time()
        running.update(since=started, thread=main, handle=self)
        try:
            return original(self)
        finally:
            running.clear()
            took = time.thread_time() - cpu_started  # the loop thread's own CPU: a busy node is not ours
            buckets[next((f"<{e * 1000:g} ms" for e in edges if took < e), ">=50 ms")] += 1
            if len(longest) < 25 or took > longest[0][0]:
                entry = (took, time.perf_counter() - started, _describe(self))
                heapq.heappush(longest, entry) if len(longest) < 25 else heapq.heapreplace(longest, entry)

    def sample() -> None:
        while True:
            time.sleep(0.001)
            since, thread, handle = running.get("since"), running.get("thread"), running.get("handle")
            if since is None or time.perf_counter() - since < threshold:
                continue
            frame = sys._current_frames().get(thread)
            frames = []
            while frame is not None and len(frames) < 14:
                code = frame.f_code
                frames.append(f"{code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno} {code.co_name}")
                frame = frame.f_back
            try:
                stacks[(_describe(handle), tuple(frames))] += 1
            except Exception:  # the handle finished under us
                pass

    def write() -> None:
        import json

        data = {"threshold_ms": threshold * 1000,
                "longest": [[round(cpu * 1000, 2), round(wall * 1000, 2), what]
                            for cpu, wall, what in sorted(longest, reverse=True)],
                "histogram": dict(buckets),
                "stacks": [[n, what, list(frames)] for (what, frames), n in stacks.most_common(25)]}
        with open(report, "w") as f:
            json.dump(data, f, indent=1)

    asyncio.events.Handle._run = timed_run
    threading.Thread(target=sample, name="loopwatch", daemon=True).start()
    atexit.register(write)


if _REPORT:
    _install(_REPORT)
