"""The daemon's upkeep after it serves the kubelet: CDI specs of prepared claims put back when they
are gone (recovery.py, ``repair_specs``), the claim statuses of prepared claims written again once
after start-up (statushook.py), and, while a feature gate's fields are dropped, asking now and then
whether the API server keeps them again (gateprobe.py). :class:`Upkeep` is an object the daemon
(:class:`~ascend_dra.node.daemon.Daemon`) holds once it serves, passed what it needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ascend_dra.cluster.apiclient import ApiError
from ascend_dra.cluster.gateprobe import gates_still_dropped
from ascend_dra.cluster.poolview import PoolView
from ascend_dra.cluster.statushook import StatusHook
from ascend_dra.durable.checkpoint import CheckpointCorrupt
from ascend_dra.model import Inventory
from ascend_dra.node.instancelock import other_live_instances
from ascend_dra.node.settings import Settings
from ascend_dra.state.devicestate import DeviceState

__all__ = ("RESTORE_WAIT_POLL_S", "Upkeep")

log = logging.getLogger("ascend_dra.node.daemon")

#: Seconds between two looks, at start-up during a rolling update, for the older instance to be
#: gone before the claim statuses are written again (:meth:`Upkeep.restore_claim_status`).
RESTORE_WAIT_POLL_S = 2.0


class Upkeep:
    """What the daemon does once it serves, besides answering the kubelet.

    :param state: the node's prepared claims (``repair_specs``, ``inventories``, ``store``,
        ``prepared_claims``).
    :param settings: the daemon's settings (``health_interval``, ``rediscover_interval``,
        ``rolling_update_id``, ``plugin_dir``, ``driver_name``, ``node_name``).
    :param pool: what the slices show (poolview.PoolView), for the gate probes; None: no probes.
    :param api: the API client (cluster mode), for the gate probes; None: no probes.
    :param publisher: the slice publisher; ``publisher.update(desired())`` republishes.
    :param desired: the pool to publish now (``Daemon._desired``).
    """

    def __init__(self, state: DeviceState, settings: Settings, *, pool: PoolView | None = None, api: Any = None,
                 publisher: Any = None, desired: Callable[[], Inventory] | None = None) -> None:
        self.state = state
        self.settings = settings
        self.pool = pool
        self.api = api
        self.publisher = publisher
        self.desired = desired
        self._gate_probe_refused: str | None = None  # the last refusal of a gate probe, said once

    async def repair_loop(self, status: StatusHook | None, tg: TaskGroup) -> None:
        """Put back the CDI specs of prepared claims that are gone, at start and every
        ``--health-interval`` (recovery.py, ``repair_specs``): the kubelet will not ask again, and a
        container it (re)starts needs them. Its own task: a pass that waits on the API server holds
        back no health check. The claim statuses are restored after the first pass, which decides
        which claims are whole again (``DeviceState.restorable`` needs their specs); a claim repaired
        only in a later pass (the API server was down at start) gets its status restored then."""
        first = True
        while True:
            repaired: list[str] = []
            try:
                repaired = await self.state.repair_specs()
            except Exception:  # never expected (repair_specs logs its failures); the daemon serves on
                log.exception("looking for missing CDI specs failed")
            if status is not None and (first or repaired):
                tg.start_soon(self.restore_claim_status, status, None if first else repaired)
            first = False
            await anyio.sleep(self.settings.health_interval)

    async def gate_probe_loop(self) -> None:
        """Every ``--rediscover-interval``, :meth:`probe_gates` (nothing while no fallback is on):
        a gate turned on is a change of the node's surroundings, looked for as often as new devices."""
        while True:
            await anyio.sleep(self.settings.rediscover_interval)
            await self.probe_gates()

    async def probe_gates(self) -> list[str]:
        """Ask the API server, with dry-run creates, whether it keeps the fields of the gates whose
        fallback is on (poolview.PoolView.dropped_gates); end the fallback of each it kept in enough
        answers in a row (poolview.PoolView.on_probe) and republish. Returns the gates whose fallback
        ended. Never raises: an API server that does not answer is asked again next time. Not while a
        newer instance publishes (a rolling update)."""
        if self.pool is None:
            return []
        gates = self.pool.dropped_gates
        if not gates or self.api is None or getattr(self.publisher, "standing_by_for", None):
            return []
        try:
            still = await gates_still_dropped(self.api, self.pool.full(self.state.inventories), gates,
                                              driver_name=self.settings.driver_name, node_name=self.settings.node_name)
        except ApiError as exc:
            # A refusal (403 without RBAC for dry runs, 400 from a webhook with side effects) stays:
            # said once at WARNING, the fallback staying on; no answer is only for the DEBUG log.
            refused = 400 <= exc.status < 500
            reason = f"{exc.status}: {exc}" if refused else None
            (log.warning if refused and reason != self._gate_probe_refused else log.debug)(
                "asking whether the API server keeps the dropped ResourceSlice fields again failed; the fallback "
                "stays on", extra={"gates": ",".join(gates), "error": str(exc)})
            self._gate_probe_refused = reason
            return []
        except Exception:  # a bug here must not stop a daemon that serves the kubelet
            log.exception("asking whether the API server keeps the dropped ResourceSlice fields again raised")
            return []
        self._gate_probe_refused = None
        before = self.pool.dropped_gates
        if self.pool.on_probe(gates, [g for g in gates if g not in still]) and self.publisher is not None \
                and self.desired is not None:
            self.publisher.update(self.desired())
        return [g for g in before if g not in self.pool.dropped_gates]

    async def restore_claim_status(self, status: StatusHook, only: list[str] | None = None) -> None:
        """Write the claim status of the prepared claims (or of the claims ``only``) again
        (statushook.StatusHook.restore), once this instance is the only one on the node: during a
        rolling update the older instance still serves calls the kubelet began with it, and a claim
        it unprepares after this one read the records would get its entries back from here; a newer
        one, once started, does this itself. The records are read fresh (shared checkpoint) when the
        older instance is gone. A failure is logged: the statuses are a courtesy, the daemon serves on."""
        s = self.settings
        uid = s.rolling_update_id
        seen = [0.0, True]  # time.monotonic() of the last look at the lock files, what it found

        def alone() -> bool:
            # At most one look a second: each takes, for an instant, the lock of any dead instance it
            # finds, and another instance's start-up clean-up then takes that one for alive.
            if uid is None:
                return True
            if time.monotonic() - seen[0] >= 1.0:
                seen[:] = [time.monotonic(), not other_live_instances(s.plugin_dir, uid)]
            return bool(seen[1])

        try:
            # Polled (ASYNC110): the other instances are processes; nothing here could set an Event for them
            while not await anyio.to_thread.run_sync(alone):  # noqa: ASYNC110
                await anyio.sleep(RESTORE_WAIT_POLL_S)
            async with self.state.store.exclusive():
                uids = list(self.state.prepared_claims) if only is None else only
            if uids and (restored := await status.restore(uids, alone=alone)):
                log.info("writing the claim status of the prepared claims again", extra={"claims": restored})
        except (OSError, CheckpointCorrupt) as exc:
            log.warning("writing the claim status of the prepared claims again failed",
                        extra={"error": f"{type(exc).__name__}: {exc}"})
        except Exception:  # a bug here must not stop a daemon that serves the kubelet
            log.exception("writing the claim status of the prepared claims again raised")
