"""Answering a Prepare again (:class:`Replayer`, held by :class:`~ascend_dra.state.devicestate.DeviceState`): a
claim already prepared is answered from its checkpoint record, only while that answer is still true
(docs/durable-state.md).

The kubelet sends Prepare again for a claim it prepared before (its own restart, a retry after a
lost answer, every pod start of a shared claim). The record answers, after the checks every answer
passes (:meth:`~ascend_dra.state.prepared.PreparedClaims.check_answer`): the claim still has the same
allocation, every spec file its CDI ids need is on disk (re-created when gone) and every device node
its specs name exists.
After a reboot, a claim whose profiles have node side effects is prepared again in the durable steps
of a first Prepare (:meth:`Replayer._replay_side_effects`), with the same crash points and repair.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter

import attrs

from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.checkpoint import ClaimRecord
from ascend_dra.model import ClaimAllocation, PreparedDevice
from ascend_dra.observe.faults import crash_point
from ascend_dra.state import guard
from ascend_dra.state.claims import ClaimUnreadable, PrepareError
from ascend_dra.state.planning import Plan, PlanError
from ascend_dra.state.prepared import PreparedClaims, checkpoint_write_failed, describe_error

__all__ = ("Replayer", "reallocation")

log = logging.getLogger("ascend_dra.state")


class Replayer:
    """Answers a Prepare of a claim already prepared, from its record, while that answer is true.

    :param claims: the prepared claims (shared with the DeviceState that holds this object).
    """

    def __init__(self, claims: PreparedClaims) -> None:
        self.claims = claims

    def foreign_record_error(self, uid: str, where: str) -> PrepareError | None:
        """The error for a claim whose record another release wrote in a way we cannot honour."""
        bad = self.claims.records.unreadable.get(uid)
        if bad is not None:
            return PrepareError(f"{where}: its checkpoint record was written by another ascend-dra release and "
                                f"cannot be read by this one ({bad.reason}); unprepare the claim (delete its pod) "
                                "or run the release that wrote it")
        record = self.claims.records.get(uid)
        if record is not None and record.state not in ckpt.KNOWN_STATES:
            return PrepareError(f"{where}: its checkpoint record is in state {record.state!r}, which this release "
                                f"does not know (it knows {', '.join(sorted(ckpt.KNOWN_STATES))}); unprepare the "
                                "claim or run the release that wrote it")
        return None

    async def replay(self, record: ClaimRecord,
                      claim: ClaimAllocation | ClaimUnreadable) -> list[PreparedDevice] | Exception:
        """Answer a Prepare for a completed claim again, only if the answer is still true.

        ``claim`` is the claim as read now: allocated other devices than the record holds (it was
        deallocated and allocated again without an Unprepare), it fails, naming both. When the API
        server could not give it (``ClaimUnreadable``: an outage), the record answers, as it did when
        it was written: a kubelet restarted during an outage finds its running pods' claims
        prepared; only a spec that must be re-created from the claim then fails. The claim's
        spec is re-created (with side effects, after a reboot) when it is gone; the CDI dir and the
        common spec when they are gone; a record that cannot give the same answer (no CDI ids: an
        incompatible release wrote it) or whose device nodes vanished fails loudly.
        """
        where = f"ResourceClaim {record.namespace}/{record.name}"
        if not record.devices or not record.cdi_specs or any(not d.cdi_device_ids for d in record.devices):
            return PrepareError(f"{where}: its checkpoint record names no CDI device ids or spec files (written by "
                                "an incompatible release), so the answer cannot be given again; unprepare the "
                                "claim (delete its pod) and prepare it again")
        reallocated = None if isinstance(claim, ClaimUnreadable) else reallocation(record, claim)
        if reallocated is not None:
            return PrepareError(f"{where}: {reallocated}")
        if self.claims.records.is_dirty(record.uid):
            # A failed write left the record as it is here unwritten (put back after an Unprepare whose
            # write failed, say): the files may say otherwise, so nothing is answered until it is on disk.
            try:
                await self.claims.save()
            except OSError as exc:
                return checkpoint_write_failed(record.namespace, record.name, exc)
        rebooted = record.boot_id != self.claims.boot_id
        try:
            missing = self.claims.missing_spec_files(record)
            # A claim's own spec or device metadata file is made from the claim; a common spec is not.
            remade = [f for f in missing if f in record.cdi_specs or f.startswith("/")]
            if rebooted or remade:
                if isinstance(claim, ClaimUnreadable):
                    return claim  # its spec must be made from the claim
                # Device metadata as the record's answer has it, whatever --device-metadata says now:
                # the kubelet holds that answer, and every id in it must resolve.
                plan = self.claims.planner.plan(claim, self.claims.holds, exclude=record.uid,
                                                device_metadata=bool(self.claims.metadata_requests(record)))
                if rebooted and self.claims.has_side_effects(plan):
                    return await self._replay_side_effects(record, plan)
                side_effects = {} if rebooted else record.side_effects  # no profile of the claim has any
                self.claims.write_plan(plan)
                self.claims.records[record.uid] = attrs.evolve(record, boot_id=self.claims.boot_id,
                                                               side_effects=side_effects,
                                                               device_nodes=plan.device_nodes)
                await self.claims.save_for(record)  # the spec is written; only the checkpoint can fail here
                # What was missing, by name: a device metadata file alone is not "the CDI spec".
                log.info("re-created the files of a prepared claim", extra={
                    "claim_uid": record.uid, "rebooted": rebooted, "missing": remade})
            elif missing:  # only common specs (or the whole dir) went away
                self.claims.write_specs({}, self.claims.kinds_of(record))
                log.info("re-created the common CDI spec", extra={"files": missing})
            self.claims.check_answer(self.claims.records[record.uid])
        except (guard.GuardError, PlanError) as exc:
            return PrepareError(str(exc))
        except PrepareError as exc:
            return exc
        except Exception as exc:
            return PrepareError(f"{where}: re-creating its CDI spec: {describe_error(exc)}")
        if isinstance(claim, ClaimUnreadable):
            log.info("a prepared claim is answered from its record; the claim could not be read to check its "
                     "allocation", extra={"claim_uid": record.uid, "error": str(claim)})
        return self.claims.prepared_devices(self.claims.records[record.uid])

    async def _replay_side_effects(self, record: ClaimRecord,
                                   plan: Plan) -> list[PreparedDevice] | Exception:
        """Answer a claim prepared in an earlier boot whose profiles have node side effects: run them
        again in the order of a first Prepare (docs/durable-state.md, "Reboot"): ``PrepareStarted``
        durable before they run, their result and ``PrepareCompleted`` in one write after the spec.

        The record goes back to ``PrepareStarted`` with no side-effect result before a hook runs, so
        a crash from then on is rolled back at start-up as an interrupted first Prepare is (through
        ``unprepare_side_effects(None, ctx)``, which undoes whatever the claim's side effects left, of
        this boot or an earlier one), and the kubelet's retry prepares it anew. A failure is rolled
        back the same way at once and fails the claim; a checkpoint that cannot be written first
        leaves the record as it was, and nothing runs.
        """
        uid, where = record.uid, f"ResourceClaim {record.namespace}/{record.name}"
        pending = {p: None for p in plan.groups if self.claims.hook(p, "prepare_side_effects") is not None}
        crash_point("replay:before-started-write")
        self.claims.records[uid] = attrs.evolve(record, state=ckpt.PREPARE_STARTED, boot_id=self.claims.boot_id,
                                          side_effects=pending, device_nodes=plan.device_nodes)
        try:
            await self.claims.save_for(record)
        except PrepareError as exc:  # nothing was done: the durable record is still the completed one
            self.claims.records[uid] = record
            return exc
        crash_point("replay:after-started-write")
        try:
            side_effects = await self.claims.run_side_effects(plan)
            crash_point("replay:side-effects-done-unrecorded")  # the node changed, the record does not say how
            # Durable with PrepareCompleted, as in a first Prepare (devicestate.py): None undoes it till then.
            self.claims.records[uid] = attrs.evolve(self.claims.records[uid], side_effects=side_effects)
            crash_point("replay:after-side-effects")
            self.claims.write_metadata(plan)
            crash_point("replay:after-metadata-write")
            self.claims.write_specs(plan.specs)
            crash_point("replay:after-cdi-write")
            self.claims.check_answer(self.claims.records[uid])
            self.claims.records[uid] = attrs.evolve(self.claims.records[uid], state=ckpt.PREPARE_COMPLETED)
            try:
                await self.claims.save_for(record)
            except PrepareError:  # not completed on disk: the kubelet is told it failed, so roll it back
                self.claims.records[uid] = attrs.evolve(self.claims.records[uid], state=ckpt.PREPARE_STARTED)
                raise
            crash_point("replay:after-completed-write")
        except Exception as exc:
            log.warning("prepare failed; rolling back", extra={"claim_uid": uid, "error": describe_error(exc)})
            if await self.claims.try_rollback(self.claims.records[uid]):
                with contextlib.suppress(OSError):  # still PrepareStarted on disk: rolled back at start-up
                    await self.claims.save()
            return exc if isinstance(exc, PrepareError) else PrepareError(f"{where}: {describe_error(exc)}")
        log.info("re-created the side effects and CDI spec of a claim prepared before a reboot",
                 extra={"claim_uid": uid})
        return self.claims.prepared_devices(self.claims.records[uid])


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
