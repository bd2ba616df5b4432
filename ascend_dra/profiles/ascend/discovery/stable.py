"""The npu-smi answers a rediscovery need not ask again while the node's chips stay the same.

A running daemon rediscovers every ``--rediscover-interval`` (60 s) and on hot-plug. Of the calls
one npu-smi discovery makes (docs/ascend-discovery.md), ``info`` (health, presence) and ``info -m``
(logic IDs) are asked every time; the per-card and per-chip ones (``-t board -i N``, ``-t board -i
N -c C``, ``-t common -i N``) and ``-t topo`` tell what the hardware in its slot is: generation,
VDie ID, AI core count, HCCS wiring, and the driver's version. On a node of 8 chips they are 24 of
the 26 calls, each a process that talks to the driver.

:class:`StableAnswers` keeps their last successful answers for as long as ``npu-smi info`` shows
the same chips: every chip's NPU ID, chip ID, name, Bus-Id, Phy-ID and Device column, the memory
totals and the rows printed alone (never health or readings), the header's driver version (an
upgrade of the driver, which ships npu-smi, changes it), and the same npu-smi command. Any change
drops them all, and so does age: after :data:`MAX_AGE_S` every call is made again, so a change
that ``info`` cannot show is still seen within that time. A call that failed is never kept: the
next discovery asks again (and :mod:`.carryover` fills in meanwhile).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from ascend_dra.profiles.ascend.npusmi.tables import InfoTable

__all__ = ("MAX_AGE_S", "StableAnswers", "info_fingerprint")

#: Seconds after which every answer is asked for again, whatever ``info`` shows.
MAX_AGE_S = 600.0

T = TypeVar("T")


def info_fingerprint(command: str, info: InfoTable) -> tuple[Any, ...]:
    """What must stay the same for kept answers to still describe the node: the npu-smi command,
    the header's driver version, and each chip's identity and memory totals as ``info`` prints them
    (rows in printed order; health, usage, power and temperature left out)."""
    chips = tuple((c.npu_id, c.chip_id, c.name, (c.bus_id or "").lower(), c.phy_id, c.device, c.memory_total_mib,
                   c.hbm_total_mib) for c in info.chips)
    alone = tuple((r.npu_id, r.chip_id, r.name, (r.bus_id or "").lower(), r.phy_id, r.device)
                  for r in info.incomplete)
    return command, info.driver_version, chips, alone


class StableAnswers:
    """Answers of npu-smi calls kept across rediscoveries while :func:`info_fingerprint` is unchanged.

    One instance per profile (it lives as long as the daemon); not shared between tasks that
    discover at once (a profile's discoveries run one at a time).

    :param max_age_s: seconds after which everything kept is dropped (:data:`MAX_AGE_S`).
    :param clock: seconds, monotonic (tests pass their own).
    """

    def __init__(self, *, max_age_s: float = MAX_AGE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self._clock = clock
        self._fingerprint: tuple[Any, ...] | None = None
        self._since = 0.0
        self._answers: dict[Hashable, Any] = {}
        #: Calls answered from memory and calls made, since start (read by the tests).
        self.reused = 0
        self.asked = 0

    def begin(self, fingerprint: tuple[Any, ...]) -> bool:
        """Start a discovery whose ``info`` gave ``fingerprint``; return whether kept answers still
        hold (False: they were dropped, every call is made)."""
        now = self._clock()
        if fingerprint != self._fingerprint or now - self._since >= self.max_age_s:
            self._answers.clear()
            self._fingerprint = fingerprint
            self._since = now
            return False
        return True

    async def get(self, key: Hashable, call: Callable[[], Awaitable[T | None]]) -> T | None:
        """The kept answer for ``key``, else ``call()``'s, kept when it is not None (None: the call
        failed, and is made again next time)."""
        if key in self._answers:
            self.reused += 1
            return self._answers[key]  # type: ignore[no-any-return]
        self.asked += 1
        answer = await call()
        if answer is not None:
            self._answers[key] = answer
        return answer
