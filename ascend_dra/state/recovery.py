"""Start-up and cleanup of the prepared claims (:class:`Recovery`, held by
:class:`~ascend_dra.state.devicestate.DeviceState`): recovery from the checkpoint, orphan specs, the
retries of what could not be cleaned up, and missing specs of prepared claims put back
(docs/durable-state.md).

Nothing here is fatal but an unreadable checkpoint (records.py says when one that names no claim is
set aside instead): a rollback or a spec removal that fails (an immutable file, a read-only CDI
dir) is logged, its claim's record stays (its devices stay held), and
:meth:`Recovery.retry_cleanup` tries again later.
"""

from __future__ import annotations

import logging
import time

import anyio

from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.checkpoint import ClaimRecord
from ascend_dra.state.claims import ClaimGone, ClaimUnreadable
from ascend_dra.state.prepared import PreparedClaims, describe_error
from ascend_dra.state.replay import Replayer

__all__ = ("REPAIR_RETRY_FIRST_S", "REPAIR_RETRY_MAX_S", "Recovery")

log = logging.getLogger("ascend_dra.state")

#: Seconds before a claim whose spec could not be re-created is tried again (repair_specs),
#: doubling after each failure up to REPAIR_RETRY_MAX_S: one GET a claim, not one every look.
REPAIR_RETRY_FIRST_S = 10.0
REPAIR_RETRY_MAX_S = 300.0


class Recovery:
    """Start-up recovery, the retries of what could not be cleaned up, and the repair of missing specs.

    :param claims: the prepared claims (shared with the DeviceState that holds this object).
    :param replayer: answers a completed claim again (a repaired spec is re-created as a replay does it).
    """

    def __init__(self, claims: PreparedClaims, replayer: Replayer) -> None:
        self.claims = claims
        self.replayer = replayer
        self.stray: set[str] = set()  # orphan spec files that could not be removed
        #: claim uid -> (reason, time.monotonic() of the next try, delay) of a failed spec repair
        self.repair_waits: dict[str, tuple[str, float, float]] = {}

    async def recover(self) -> None:
        """Load the checkpoint, roll back ``PrepareStarted`` claims, remove orphan CDI specs, write
        the common specs.

        Nothing here is fatal but an unreadable checkpoint (one that names no claim only while the
        node says claims were prepared: records.py): a rollback or a spec removal that fails (an
        immutable file, a read-only CDI dir) is logged, its claim's record stays (its devices stay
        held), and :meth:`retry_cleanup` tries again later.

        :raises checkpoint.CheckpointCorrupt: the daemon must not start over an unreadable checkpoint.
        """
        data, journal = await self.claims.store.load()
        for uid, bad in self.claims.records.unreadable.items():
            log.error("a checkpoint record cannot be read by this release; its claim will be refused and its "
                      "devices stay held until it is unprepared", extra={"claim_uid": uid, "error": bad.reason})
        for record in self.claims.records.values():
            if record.state not in ckpt.KNOWN_STATES:
                log.error("a checkpoint record is in a state this release does not know; its claim will be "
                          "refused until it is unprepared", extra={"claim_uid": record.uid, "state": record.state})
        for record in list(self.claims.records.values()):
            if record.state == ckpt.PREPARE_STARTED:
                log.warning("rolling back a claim whose Prepare was interrupted",
                            extra={"claim_uid": record.uid, "claim": f"{record.namespace}/{record.name}"})
                await self.claims.try_rollback(record)
        if data.boot_id and data.boot_id != self.claims.boot_id:
            log.info("node rebooted since the last checkpoint; CDI specs are re-created as the kubelet "
                     "prepares claims again", extra={"old_boot_id": data.boot_id, "boot_id": self.claims.boot_id})
        await self._remove_orphan_specs()
        for profile_name in self.claims.profiles:
            try:
                await anyio.to_thread.run_sync(self.claims.ensure_common_spec, self.claims.cdi_kind(profile_name), True)
            except OSError as exc:  # every Prepare tries again, and fails its claim clearly meanwhile
                log.warning("cannot write the common CDI spec; Prepare will retry",
                            extra={"profile": profile_name, "error": describe_error(exc)})
        # Start from a fresh snapshot when anything changed (journal entries, rollbacks, a reboot),
        # so an older release that reads only the snapshot sees this state too.
        if journal.changes or self.claims.records.has_dirty or data.boot_id != self.claims.boot_id:
            try:
                await self.claims.save(compact=True)
            except OSError as exc:
                # A full state disk must not keep the node from serving the claims the files hold
                # (replays need no write); the changes stay pending for the next write (in shared
                # mode, records rolled back here come back from the files at the next hold, and
                # records.py queues them for retry_cleanup).
                log.warning("compacting the checkpoint at start-up failed; serving from the snapshot and "
                            "the journal, the next write retries", extra={"error": describe_error(exc)})

    async def _remove_orphan_specs(self) -> None:
        """Remove per-claim specs of our kinds, and device metadata directories, that no record names;
        a failure is retried later.

        The kinds are the loaded profiles' and every kind a record's CDI ids name (a profile no
        longer loaded), so that each file is read with its own kind's stem (``CdiStore.claim_specs``).
        """
        kinds = {self.claims.cdi_kind(p) for p in self.claims.profiles}
        kinds.update(k for r in self.claims.records.values() for k in self.claims.kinds_of(r))
        live = {name for r in self.claims.records.values() for name in r.cdi_specs}
        live.update(name for r in self.claims.records.unreadable.values() for name in r.cdi_specs)
        found = await anyio.to_thread.run_sync(self.claims.cdi.claim_specs, kinds)
        for uid, files in found.items():
            for file in files:
                if file in live:
                    continue
                try:
                    await anyio.to_thread.run_sync(self.claims.cdi.remove, file)
                    log.info("removed orphan CDI spec", extra={"file": file, "claim_uid": uid})
                    self.stray.discard(file)
                except OSError as exc:
                    log.warning("cannot remove an orphan CDI spec; will retry",
                                extra={"file": file, "claim_uid": uid, "error": describe_error(exc)})
                    self.stray.add(file)
        # Device metadata files (KEP-5304) of claims no record names: left by a crash between their
        # write and the record's, or by an Unprepare whose record was dropped before they went.
        owners = set(self.claims.records) | set(self.claims.records.unreadable)
        store = self.claims.metadata
        for uid in await anyio.to_thread.run_sync(store.claim_uids):
            if uid in owners:
                continue
            where = str(store.root / uid)
            try:
                await anyio.to_thread.run_sync(store.remove_claim, uid)
                log.info("removed orphan device metadata", extra={"file": where, "claim_uid": uid})
                self.stray.discard(where)
            except (OSError, ValueError) as exc:
                log.warning("cannot remove orphan device metadata; will retry",
                            extra={"file": where, "claim_uid": uid, "error": describe_error(exc)})
                self.stray.add(where)

    @property
    def cleanup_pending(self) -> bool:
        """Whether a rollback or a stray spec removal failed and waits for :meth:`retry_cleanup`."""
        return bool(self.claims.pending_rollback or self.stray)

    async def retry_cleanup(self) -> None:
        """Retry what failed earlier: rolling back interrupted Prepares, removing orphan specs.

        Called periodically by the daemon; each claim under its own lock, so it never races a
        Prepare or Unprepare of the same claim. Never raises for a file that still resists.
        """
        for uid in sorted(self.claims.pending_rollback):
            async with self.claims.lock_claims((uid,)), self.claims.store.exclusive():
                record = self.claims.records.get(uid)
                if record is None or record.state != ckpt.PREPARE_STARTED:
                    self.claims.pending_rollback.discard(uid)
                    continue
                if await self.claims.try_rollback(record):
                    log.info("rolled back an interrupted Prepare on retry", extra={"claim_uid": uid})
                    try:
                        await self.claims.save()
                    except OSError as exc:  # the record is gone in memory; the next write carries it
                        log.warning("writing the checkpoint failed", extra={"error": describe_error(exc)})
        if self.stray:
            async with self.claims.store.exclusive():  # shared: another instance's specs are live, not orphans
                await self._remove_orphan_specs()

    async def repair_specs(self) -> list[str]:
        """Re-create the CDI specs of claims prepared in this boot whose spec files are gone (a
        restart of the daemon, a removal by hand); return the uids of the claims repaired.

        The kubelet asks again only after its own restart or a reboot: while it runs, a claim it prepared is
        prepared for it, and every container it starts (again) for that claim needs the spec, which a Prepare
        would otherwise never write back (kubernetes/kubernetes#141433). Each spec is re-created as a replayed
        Prepare does it (:meth:`Replayer.replay <ascend_dra.state.replay.Replayer.replay>`: the claim read
        again, refused if it now holds other devices), under the claim's lock, and only while its record is
        still completed in this boot. Claims of an earlier boot wait for the kubelet's Prepare (their side
        effects must run again). A claim that cannot be repaired is tried again after
        :data:`REPAIR_RETRY_FIRST_S`, doubling up to :data:`REPAIR_RETRY_MAX_S`, and logged once per reason
        (then at DEBUG). Called by the daemon at start and periodically; never raises.
        """
        candidates = [r for r in list(self.claims.records.values())
                      if r.state == ckpt.PREPARE_COMPLETED and r.boot_id == self.claims.boot_id]
        for uid in set(self.repair_waits) - {r.uid for r in candidates}:
            del self.repair_waits[uid]  # unprepared, or repaired by a replay
        now = time.monotonic()
        due = [r for r in candidates if self.repair_waits.get(r.uid, ("", 0.0, 0.0))[1] <= now]
        if not due:
            return []
        try:
            missing = await anyio.to_thread.run_sync(lambda: [r for r in due if self.claims.missing_spec_files(r)])
        except OSError as exc:  # the CDI dir unreadable: the next look tries again
            log.warning("cannot look for missing CDI specs of prepared claims", extra={"error": describe_error(exc)})
            return []
        for uid in {r.uid for r in due} - {r.uid for r in missing}:
            self.repair_waits.pop(uid, None)  # whole again (a replay re-created its spec)
        repaired: list[str] = []
        for seen in missing:
            try:
                claim = await self.claims.claim_source.get(seen.namespace, seen.name, seen.uid, uid_recorded=True)
                async with self.claims.lock_claims((seen.uid,)), self.claims.store.exclusive():
                    record = self.claims.records.get(seen.uid)
                    if record is None or record.state != ckpt.PREPARE_COMPLETED \
                            or record.boot_id != self.claims.boot_id or not self.claims.missing_spec_files(record):
                        self.repair_waits.pop(seen.uid, None)
                        continue  # unprepared, replayed or repaired meanwhile
                    result = await self.replayer.replay(record, claim)
            except Exception as exc:
                result = exc
            if isinstance(result, Exception):
                self._repair_failed(seen, result)
            else:
                self.repair_waits.pop(seen.uid, None)
                repaired.append(seen.uid)
        return repaired

    def _repair_failed(self, record: ClaimRecord, error: Exception) -> None:
        """Log why ``record``'s spec could not be re-created (once per reason) and when to try again."""
        # An outage's messages differ by the request's details; the reason is "unreadable" for all.
        reason = "the claim could not be read" if isinstance(error, ClaimUnreadable) else describe_error(error)
        before = self.repair_waits.get(record.uid)
        again = before is not None and before[0] == reason  # a new reason starts the waits over
        delay = min(REPAIR_RETRY_MAX_S, before[2] * 2) if again and before is not None else REPAIR_RETRY_FIRST_S
        self.repair_waits[record.uid] = (reason, time.monotonic() + delay, delay)
        extra = {"claim_uid": record.uid, "claim": f"{record.namespace}/{record.name}",
                 "error": describe_error(error), "retry_in_s": delay}
        if again:
            log.debug("a prepared claim's CDI spec is still missing", extra=extra)
        elif isinstance(error, ClaimGone):
            log.info("a prepared claim's CDI spec is missing and the claim is gone, replaced or no longer "
                     "allocated; its Unprepare is likely on the way", extra=extra)
        else:
            log.warning("a prepared claim's CDI spec is missing and re-creating it failed; containers of that "
                        "claim cannot start until it is re-created or the claim is prepared again", extra=extra)
