"""Between the DRA service and the claim-status writer (claimstatus.py): what each Prepare and
Unprepare queues, and the statuses a restarted daemon writes again.

:class:`StatusHook` builds a :class:`~ascend_dra.cluster.statusentries.PreparedClaim` from the state's records
and inventories after each Prepare, and queues the removal after each Unprepare. A status is written
after the answer and is not in the checkpoint, so one still queued, waiting for its lull or deferred
by an API outage when the daemon stopped (a crash, a kill -9, a node drain), was lost with it, and a
claim prepared while ``--claim-status`` was off has none: :meth:`StatusHook.restore` queues the
status of every claim still prepared once after start-up (docs/operations.md#7-troubleshooting, the
claim status metrics).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from ascend_dra.cluster.claimstatus import ClaimStatusWriter
from ascend_dra.cluster.statusentries import PreparedClaim
from ascend_dra.model import PreparedDevice

__all__ = ("RESTORE_BACKLOG", "StatusHook")

log = logging.getLogger(__name__)

#: Restored statuses queue only while fewer than this many claims wait for the writer: a new
#: Prepare's status waits behind at most this many of them (about 3 s at the 20 writes a second of
#: ClaimStatusWriter while calls come, less in a lull), and thousands never fill the writer's queue.
RESTORE_BACKLOG = 64


class StatusHook:
    """What the DRA service calls after each Prepare/Unprepare: builds :class:`PreparedClaim` from
    the state's records and inventories and queues it on the writer. Never raises.

    :param state: the daemon's DeviceState (``prepared_claims``, ``inventories``, ``restorable``).
    :param cdi_root: where the claims' CDI spec files are.
    """

    def __init__(self, writer: ClaimStatusWriter, state: Any, cdi_root: Path) -> None:
        self.writer = writer
        self.state = state
        self.cdi_root = cdi_root

    def after_prepare(self, namespace: str, name: str, uid: str, devices: Sequence[PreparedDevice], *,
                      only_if: Callable[[], bool] | None = None) -> None:
        """Queue the status of a claim just prepared (``only_if``: see ClaimStatusWriter.prepared)."""
        try:
            record = self.state.prepared_claims.get(uid)
            names = {d.device_name for d in devices}
            attributes = {n: dict(d.attributes) for inv in self.state.inventories.values()  # by index, not
                          for n in names if (d := inv.device(n)) is not None}  # a walk of every device
            self.writer.prepared(PreparedClaim(
                namespace, name, uid, tuple(devices), attributes,
                tuple(self.cdi_root / f for f in getattr(record, "cdi_specs", ())),
                dict(getattr(record, "side_effects", None) or {})), only_if=only_if)
        except Exception:  # the status is a courtesy; the Prepare answer is what matters
            log.exception("queueing the claim status failed", extra={"claim_uid": uid})

    def after_unprepare(self, namespace: str, name: str, uid: str) -> None:
        """Queue the removal of this node's entries from a claim just unprepared."""
        self.writer.unprepared(namespace, name, uid)

    async def restore(self, uids: Iterable[str], *, alone: Callable[[], bool] = lambda: True, step: int = 64,
                      poll_s: float = 0.5) -> int:
        """Queue again the status of each claim of ``uids`` that is still prepared; returns how many.

        Each claim is looked up just before it is queued (``state.restorable``: prepared in this
        boot, its CDI specs in place, its devices discovered), and again just before each request
        that would write it, with ``alone()``: an Unprepare meanwhile, or a newer instance of the driver that
        started on the node (a rolling update: it serves the kubelet now and writes these statuses
        itself once this one is gone), drops it unwritten, so it never puts entries back on a claim
        no longer prepared. Applying entries the claim already has changes nothing stored
        (server-side apply).

        :param alone: True while no other instance of the driver serves the node (blocking, cheap).
        :param step: claims queued per loop step (thousands must not hold the loop).
        :param poll_s: seconds between two looks while :data:`RESTORE_BACKLOG` claims wait.
        """
        queued = 0
        for i, uid in enumerate(uids):
            if i % step == 0:
                await anyio.lowlevel.checkpoint()
            while self.writer.backlog >= RESTORE_BACKLOG:  # noqa: ASYNC110 (polls the queue)
                await anyio.sleep(poll_s)
            answer = self.state.restorable(uid)
            if answer is not None:
                record, devices = answer
                self.after_prepare(record.namespace, record.name, record.uid, devices,
                                   only_if=lambda uid=uid: self._still_due(uid, alone))
                queued += 1
        return queued

    def _still_due(self, uid: str, alone: Callable[[], bool]) -> bool:
        """Whether the restored status of ``uid`` may still be written; no when in doubt (a lock
        file that cannot be read): leaving a status unwritten is the harmless mistake."""
        try:
            return alone() and self.state.restorable(uid) is not None
        except OSError as exc:
            log.debug("cannot tell whether a restored claim status is still due; not written",
                      extra={"claim_uid": uid, "error": str(exc)})
            return False
