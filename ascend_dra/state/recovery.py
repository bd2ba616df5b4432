"""Start-up and cleanup of :class:`~ascend_dra.state.DeviceState`: recovery from the checkpoint,
orphan specs, and the retries of what could not be cleaned up (docs/durable-state.md).

Nothing here is fatal but an unreadable checkpoint (records.py says when one that names no claim is
set aside instead): a rollback or a spec removal that fails (an immutable file, a read-only CDI
dir) is logged, its claim's record stays (its devices stay held), and
:meth:`RecoveryMixin.retry_cleanup` tries again later.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING

import anyio

from ascend_dra import checkpoint as ckpt
from ascend_dra.cdi import naming
from ascend_dra.cdi.spec import CdiDevice, ContainerEdits, Spec
from ascend_dra.checkpoint import ClaimRecord
from ascend_dra.claims import ClaimGone, ClaimUnreadable, PrepareError
from ascend_dra.model import ClaimAllocation

if TYPE_CHECKING:
    from ascend_dra.state import DeviceState

__all__ = ("RecoveryMixin", "checkpoint_write_failed", "describe_error", "reallocation")

log = logging.getLogger("ascend_dra.state")

#: Seconds before a claim whose spec could not be re-created is tried again (repair_specs),
#: doubling after each failure up to REPAIR_RETRY_MAX_S: one GET a claim, not one every look.
REPAIR_RETRY_FIRST_S = 10.0
REPAIR_RETRY_MAX_S = 300.0


class RecoveryMixin:
    """The start-up and cleanup half of DeviceState (it only runs as part of one)."""

    async def recover(self: DeviceState) -> None:
        """Load the checkpoint, roll back ``PrepareStarted`` claims, remove orphan CDI specs, write
        the common specs.

        Nothing here is fatal but an unreadable checkpoint (one that names no claim only while the
        node says claims were prepared: records.py): a rollback or a spec removal that fails (an
        immutable file, a read-only CDI dir) is logged, its claim's record stays (its devices stay
        held), and :meth:`retry_cleanup` tries again later.

        :raises checkpoint.CheckpointCorrupt: the daemon must not start over an unreadable checkpoint.
        """
        data, journal = await self.store.load()
        for uid, bad in self._records.unreadable.items():
            log.error("a checkpoint record cannot be read by this release; its claim will be refused and its "
                      "devices stay held until it is unprepared", extra={"claim_uid": uid, "error": bad.reason})
        for record in self._records.values():
            if record.state not in ckpt.KNOWN_STATES:
                log.error("a checkpoint record is in a state this release does not know; its claim will be "
                          "refused until it is unprepared", extra={"claim_uid": record.uid, "state": record.state})
        for record in list(self._records.values()):
            if record.state == ckpt.PREPARE_STARTED:
                log.warning("rolling back a claim whose Prepare was interrupted",
                            extra={"claim_uid": record.uid, "claim": f"{record.namespace}/{record.name}"})
                await self._try_rollback(record)
        if data.boot_id and data.boot_id != self.boot_id:
            log.info("node rebooted since the last checkpoint; CDI specs are re-created as the kubelet "
                     "prepares claims again", extra={"old_boot_id": data.boot_id, "boot_id": self.boot_id})
        await self._remove_orphan_specs()
        for profile_name in self.profiles:
            try:
                await anyio.to_thread.run_sync(self._ensure_common_spec, self.cdi_kind(profile_name), True)
            except OSError as exc:  # every Prepare tries again, and fails its claim clearly meanwhile
                log.warning("cannot write the common CDI spec; Prepare will retry",
                            extra={"profile": profile_name, "error": describe_error(exc)})
        # Start from a fresh snapshot when anything changed (journal entries, rollbacks, a reboot),
        # so an older release that reads only the snapshot sees this state too.
        if journal.changes or self._records.has_dirty or data.boot_id != self.boot_id:
            try:
                await self._save(compact=True)
            except OSError as exc:
                # A full state disk must not keep the node from serving the claims the files hold
                # (replays need no write); the changes stay pending for the next write (in shared
                # mode, records rolled back here come back from the files at the next hold, and
                # records.py queues them for retry_cleanup).
                log.warning("compacting the checkpoint at start-up failed; serving from the snapshot and "
                            "the journal, the next write retries", extra={"error": describe_error(exc)})

    async def _remove_orphan_specs(self: DeviceState) -> None:
        """Remove per-claim specs of our kinds that no record names; a failure is retried later.

        The kinds are the loaded profiles' and every kind a record's CDI ids name (a profile no
        longer loaded), so that each file is read with its own kind's stem (``CdiStore.claim_specs``).
        """
        kinds = {self.cdi_kind(p) for p in self.profiles}
        kinds.update(k for r in self._records.values() for k in self._kinds_of(r))
        live = {name for r in self._records.values() for name in r.cdi_specs}
        live.update(name for r in self._records.unreadable.values() for name in r.cdi_specs)
        found = await anyio.to_thread.run_sync(self.cdi.claim_specs, kinds)
        for uid, files in found.items():
            for file in files:
                if file in live:
                    continue
                try:
                    await anyio.to_thread.run_sync(self.cdi.remove, file)
                    log.info("removed orphan CDI spec", extra={"file": file, "claim_uid": uid})
                    self._stray.discard(file)
                except OSError as exc:
                    log.warning("cannot remove an orphan CDI spec; will retry",
                                extra={"file": file, "claim_uid": uid, "error": describe_error(exc)})
                    self._stray.add(file)

    async def _try_rollback(self: DeviceState, record: ClaimRecord) -> bool:
        """Roll back a ``PrepareStarted`` record and drop it; return whether it was dropped. On
        failure the record stays (its devices held) and is queued for :meth:`retry_cleanup`."""
        try:
            await self._rollback(record)
        except Exception as exc:
            log.warning("rolling back an interrupted Prepare failed; its devices stay held, will retry",
                        extra={"claim_uid": record.uid, "error": describe_error(exc)})
            self._pending_rollback.add(record.uid)
            return False
        del self._records[record.uid]
        self._pending_rollback.discard(record.uid)
        return True

    @property
    def cleanup_pending(self: DeviceState) -> bool:
        """Whether a rollback or a stray spec removal failed and waits for :meth:`retry_cleanup`."""
        return bool(self._pending_rollback or self._stray)

    async def retry_cleanup(self: DeviceState) -> None:
        """Retry what failed earlier: rolling back interrupted Prepares, removing orphan specs.

        Called periodically by the daemon; each claim under its own lock, so it never races a
        Prepare or Unprepare of the same claim. Never raises for a file that still resists.
        """
        for uid in sorted(self._pending_rollback):
            async with self._lock_claims((uid,)), self.store.exclusive():
                record = self._records.get(uid)
                if record is None or record.state != ckpt.PREPARE_STARTED:
                    self._pending_rollback.discard(uid)
                    continue
                if await self._try_rollback(record):
                    log.info("rolled back an interrupted Prepare on retry", extra={"claim_uid": uid})
                    try:
                        await self._save()
                    except OSError as exc:  # the record is gone in memory; the next write carries it
                        log.warning("writing the checkpoint failed", extra={"error": describe_error(exc)})
        if self._stray:
            async with self.store.exclusive():  # shared: another instance's specs are live, not orphans
                await self._remove_orphan_specs()

    async def repair_specs(self: DeviceState) -> list[str]:
        """Re-create the CDI specs of claims prepared in this boot whose spec files are gone (a
        restart of the daemon, a removal by hand); return the uids of the claims repaired.

        The kubelet asks again only after its own restart or a reboot: while it runs, a claim it
        prepared is prepared for it, and every container it starts (again) for that claim needs the
        spec, which a Prepare would otherwise never write back (kubernetes/kubernetes#141433). Each
        spec is re-created as a replayed Prepare does it (:meth:`DeviceState._replay`: the claim read
        again, refused if it now holds other devices), under the claim's lock, and only while its
        record is still completed in this boot. Claims of an earlier boot wait for the kubelet's
        Prepare (their side effects must run again). A claim that cannot be repaired is tried again
        after :data:`REPAIR_RETRY_FIRST_S`, doubling up to :data:`REPAIR_RETRY_MAX_S`, and logged
        once per reason (then at DEBUG). Called by the daemon at start and periodically; never raises.
        """
        candidates = [r for r in list(self._records.values())
                      if r.state == ckpt.PREPARE_COMPLETED and r.boot_id == self.boot_id]
        for uid in set(self._repair_waits) - {r.uid for r in candidates}:
            del self._repair_waits[uid]  # unprepared, or repaired by a replay
        now = time.monotonic()
        due = [r for r in candidates if self._repair_waits.get(r.uid, ("", 0.0, 0.0))[1] <= now]
        if not due:
            return []
        try:
            missing = await anyio.to_thread.run_sync(lambda: [r for r in due if self._missing_spec_files(r)])
        except OSError as exc:  # the CDI dir unreadable: the next look tries again
            log.warning("cannot look for missing CDI specs of prepared claims", extra={"error": describe_error(exc)})
            return []
        for uid in {r.uid for r in due} - {r.uid for r in missing}:
            self._repair_waits.pop(uid, None)  # whole again (a replay re-created its spec)
        repaired: list[str] = []
        for seen in missing:
            try:
                claim = await self.claim_source.get(seen.namespace, seen.name, seen.uid, uid_recorded=True)
                async with self._lock_claims((seen.uid,)), self.store.exclusive():
                    record = self._records.get(seen.uid)
                    if record is None or record.state != ckpt.PREPARE_COMPLETED or record.boot_id != self.boot_id \
                            or not self._missing_spec_files(record):
                        self._repair_waits.pop(seen.uid, None)
                        continue  # unprepared, replayed or repaired meanwhile
                    result = await self._replay(record, claim)
            except Exception as exc:
                result = exc
            if isinstance(result, Exception):
                self._repair_failed(seen, result)
            else:
                self._repair_waits.pop(seen.uid, None)
                repaired.append(seen.uid)
        return repaired

    def _repair_failed(self: DeviceState, record: ClaimRecord, error: Exception) -> None:
        """Log why ``record``'s spec could not be re-created (once per reason) and when to try again."""
        # An outage's messages differ by the request's details; the reason is "unreadable" for all.
        reason = "the claim could not be read" if isinstance(error, ClaimUnreadable) else describe_error(error)
        before = self._repair_waits.get(record.uid)
        again = before is not None and before[0] == reason  # a new reason starts the waits over
        delay = min(REPAIR_RETRY_MAX_S, before[2] * 2) if again and before is not None else REPAIR_RETRY_FIRST_S
        self._repair_waits[record.uid] = (reason, time.monotonic() + delay, delay)
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

    def _ensure_common_spec(self: DeviceState, kind: str, rewrite: bool = False) -> None:
        """Make sure the CDI dir and ``kind``'s common spec exist (blocking). ``rewrite`` writes it
        even when present (start-up: node name or driver name may have changed)."""
        self.cdi.ensure_root()
        file = naming.common_spec_file(kind)
        if rewrite or not self.cdi.path(file).is_file():
            edits = ContainerEdits(env=(f"ASCEND_DRA_NODE_NAME={self.node_name}",
                                        f"ASCEND_DRA_DRIVER_NAME={self.driver_name}"))
            self.cdi.write(file, Spec(kind, (CdiDevice(naming.COMMON_DEVICE, edits),)))


def describe_error(exc: BaseException) -> str:
    """An OSError as ``strerror (file)``, anything else as its message (for a claim's error)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    return str(exc)


def checkpoint_write_failed(namespace: str, name: str, exc: OSError) -> PrepareError:
    """A claim's error when the checkpoint write its operation needed failed (names the file)."""
    return PrepareError(f"ResourceClaim {namespace}/{name}: writing the checkpoint: {describe_error(exc)}")


def reallocation(record: ClaimRecord, claim: ClaimAllocation) -> str | None:
    """Why the prepared ``record`` no longer answers for ``claim`` (the claim as read now), or None.

    A claim deallocated and allocated again under the same uid without an Unprepare (its pod
    force-deleted, the kubelet's state lost) is allocated other devices than the record holds, and
    the scheduler counts the recorded ones free. Answering from the record would give the pod devices
    the claim does not hold. Its results and the record's devices are compared as multisets of
    (request, pool, device, share ID): one device may be held by several shares of a claim (KEP-5075).
    """
    held = Counter((d.request, d.pool, d.device, d.share_id or "") for d in record.devices)
    now = Counter((r.request, r.pool, r.device, r.share_id or "") for r in claim.results)
    if held == now:
        return None
    return (f"it was prepared with {_devices(held)} and is now allocated {_devices(now)}: it was allocated again "
            "without an Unprepare on this node. If no pod on this node uses its earlier devices any more, release "
            f"them with `ascend-dra call unprepare {record.namespace}/{record.name} --uid {record.uid}`, and the "
            "kubelet's next Prepare prepares the new allocation")


def _devices(devices: Counter[tuple[str, str, str, str]]) -> str:
    return ", ".join(f"{request}: {pool}/{device}" + (f" (share {share})" if share else "")
                     for request, pool, device, share in sorted(devices.elements())) or "no devices"
