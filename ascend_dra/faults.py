"""Named crash points for the crash-safety tests (like etcd's failpoints).

``ASCEND_DRA_CRASH_AT=prepare:after-started-write`` makes the daemon kill itself with SIGKILL
when it reaches that point, so tests can check that a restart repairs every state a crash can
leave (docs/architecture.md#durable-state). ``ASCEND_DRA_STALL_AT=prepare:after-cdi-write@2.5`` instead blocks the
event loop
for 2.5 seconds there (``time.sleep`` on the loop), so tests can see what a stuck loop looks like from
outside (the health checks). Unset in production: :func:`crash_point` is then two dict lookups.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ("POINTS", "WRITE_POINTS", "crash_point")

#: Every point, in the order a Prepare / a replay after a reboot / an Unprepare passes them.
POINTS = (
    "prepare:before-started-write",
    "prepare:after-started-write",
    "prepare:side-effects-done-unrecorded",
    "prepare:after-side-effects",
    "prepare:after-cdi-write",
    "prepare:after-completed-write",
    # A Prepare of a claim prepared before a reboot whose profiles have side effects (replay.py):
    # the same steps as a first Prepare's.
    "replay:before-started-write",
    "replay:after-started-write",
    "replay:side-effects-done-unrecorded",
    "replay:after-side-effects",
    "replay:after-cdi-write",
    "replay:after-completed-write",
    "unprepare:before-checkpoint-write",
    "unprepare:after-checkpoint-write",
    "unprepare:after-cdi-remove",
)

#: Points of a Prepare without side effects whose spec is written while its PrepareCompleted record
#: goes out (state.py): after the write was handed to the writer thread, before the spec; and on that
#: thread, before an append and after it is durable (journal.py). Which of the two threads gets
#: where first is a race, so the tests stall one of them at one point and kill at another.
WRITE_POINTS = ("prepare:completed-write-submitted", "journal:before-append", "journal:after-append")

_ARMED = frozenset(filter(None, os.environ.get("ASCEND_DRA_CRASH_AT", "").split(",")))
#: point -> seconds to block the loop there (``ASCEND_DRA_STALL_AT=point@seconds,...``).
_STALLS = {point: float(seconds) for point, _, seconds in
           (entry.rpartition("@") for entry in os.environ.get("ASCEND_DRA_STALL_AT", "").split(",") if "@" in entry)}


def crash_point(name: str) -> None:
    """Die by SIGKILL here if ``name`` is armed in ``ASCEND_DRA_CRASH_AT``; block the calling
    thread (the event loop) if it is armed in ``ASCEND_DRA_STALL_AT``."""
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
    stall = _STALLS.get(name)
    if stall is not None:
        time.sleep(stall)  # on purpose: the test wants the loop stuck
