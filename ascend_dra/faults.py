"""Named crash points for the crash-safety tests (like etcd's failpoints).

``ASCEND_DRA_CRASH_AT=prepare:after-started-write`` makes the daemon kill itself with SIGKILL
when it reaches that point, so tests can check that a restart repairs every state a crash can
leave (docs/architecture.md#durable-state). Unset in production: :func:`crash_point` is then one set lookup.
"""

from __future__ import annotations

import os
import signal

__all__ = ("POINTS", "crash_point")

#: Every point, in the order a Prepare / Unprepare passes them.
POINTS = (
    "prepare:before-started-write",
    "prepare:after-started-write",
    "prepare:side-effects-done-unrecorded",
    "prepare:after-side-effects",
    "prepare:after-cdi-write",
    "prepare:after-completed-write",
    "unprepare:before-checkpoint-write",
    "unprepare:after-checkpoint-write",
    "unprepare:after-cdi-remove",
)

_ARMED = frozenset(filter(None, os.environ.get("ASCEND_DRA_CRASH_AT", "").split(",")))


def crash_point(name: str) -> None:
    """Die by SIGKILL here if ``name`` is armed in ``ASCEND_DRA_CRASH_AT``."""
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
