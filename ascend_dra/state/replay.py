"""Answering a Prepare again, for :class:`~ascend_dra.state.DeviceState`: a claim already prepared
is answered from its checkpoint record, only while that answer is still true (docs/durable-state.md).

The kubelet sends Prepare again for a claim it prepared before (its own restart, a retry after a
lost answer, every pod start of a shared claim). The record answers, after the checks every answer
passes (:meth:`ReplayMixin._check_answer`): the claim still has the same allocation, every spec
file its CDI ids need is on disk (re-created when gone) and every device node its specs name exists.
After a reboot, a claim whose profiles have node side effects is prepared again in the durable steps
of a first Prepare (:meth:`ReplayMixin._replay_side_effects`), with the same crash points and repair.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

import attrs

from ascend_dra import checkpoint as ckpt
from ascend_dra import guard
from ascend_dra.cdi import naming
from ascend_dra.checkpoint import ClaimRecord
from ascend_dra.claims import ClaimUnreadable, PrepareError
from ascend_dra.faults import crash_point
from ascend_dra.model import ClaimAllocation, PreparedDevice
from ascend_dra.planning import Plan, PlanError
from ascend_dra.recovery import checkpoint_write_failed, describe_error, reallocation

if TYPE_CHECKING:
    from ascend_dra.state import DeviceState

__all__ = ("ReplayMixin",)

log = logging.getLogger("ascend_dra.state")


class ReplayMixin:
    """The replay half of DeviceState (it only runs as part of one)."""

    def _foreign_record_error(self: DeviceState, uid: str, where: str) -> PrepareError | None:
        """The error for a claim whose record another release wrote in a way we cannot honour."""
        bad = self._records.unreadable.get(uid)
        if bad is not None:
            return PrepareError(f"{where}: its checkpoint record was written by another ascend-dra release and "
                                f"cannot be read by this one ({bad.reason}); unprepare the claim (delete its pod) "
                                "or run the release that wrote it")
        record = self._records.get(uid)
        if record is not None and record.state not in ckpt.KNOWN_STATES:
            return PrepareError(f"{where}: its checkpoint record is in state {record.state!r}, which this release "
                                f"does not know (it knows {', '.join(sorted(ckpt.KNOWN_STATES))}); unprepare the "
                                "claim or run the release that wrote it")
        return None

    async def _replay(self: DeviceState, record: ClaimRecord,
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
        if self._records.is_dirty(record.uid):
            # A failed write left the record as it is here unwritten (put back after an Unprepare whose
            # write failed, say): the files may say otherwise, so nothing is answered until it is on disk.
            try:
                await self._save()
            except OSError as exc:
                return checkpoint_write_failed(record.namespace, record.name, exc)
        rebooted = record.boot_id != self.boot_id
        try:
            missing = self._missing_spec_files(record)
            if rebooted or any(f in record.cdi_specs for f in missing):
                if isinstance(claim, ClaimUnreadable):
                    return claim  # its spec must be made from the claim
                plan = self.planner.plan(claim, self._holds, exclude=record.uid)
                if rebooted and self._has_side_effects(plan):
                    return await self._replay_side_effects(record, plan)
                side_effects = {} if rebooted else record.side_effects  # no profile of the claim has any
                self._write_specs(plan.specs)
                self._records[record.uid] = attrs.evolve(record, boot_id=self.boot_id, side_effects=side_effects,
                                                         device_nodes=plan.device_nodes)
                await self._save_for(record)  # the spec is written; only the checkpoint can fail here
                log.info("re-created the CDI spec of a prepared claim", extra={"claim_uid": record.uid,
                                                                               "rebooted": rebooted})
            elif missing:  # only common specs (or the whole dir) went away
                self._write_specs({}, self._kinds_of(record))
                log.info("re-created the common CDI spec", extra={"files": missing})
            self._check_answer(self._records[record.uid])
        except (guard.GuardError, PlanError) as exc:
            return PrepareError(str(exc))
        except PrepareError as exc:
            return exc
        except Exception as exc:
            return PrepareError(f"{where}: re-creating its CDI spec: {describe_error(exc)}")
        if isinstance(claim, ClaimUnreadable):
            log.info("a prepared claim is answered from its record; the claim could not be read to check its "
                     "allocation", extra={"claim_uid": record.uid, "error": str(claim)})
        return self._prepared_devices(self._records[record.uid])

    async def _replay_side_effects(self: DeviceState, record: ClaimRecord,
                                   plan: Plan) -> list[PreparedDevice] | Exception:
        """Answer a claim prepared in an earlier boot whose profiles have node side effects: run them
        again in the order of a first Prepare, each step durable before the next
        (docs/durable-state.md, "Reboot").

        The record goes back to ``PrepareStarted`` with no side-effect result before a hook runs, so
        a crash from then on is rolled back at start-up as an interrupted first Prepare is (through
        ``unprepare_side_effects(None, ctx)``, which undoes whatever the claim's side effects left, of
        this boot or an earlier one), and the kubelet's retry prepares it anew. A failure is rolled
        back the same way at once and fails the claim; a checkpoint that cannot be written first
        leaves the record as it was, and nothing runs.
        """
        uid, where = record.uid, f"ResourceClaim {record.namespace}/{record.name}"
        pending = {p: None for p in plan.groups if self._hook(p, "prepare_side_effects") is not None}
        crash_point("replay:before-started-write")
        self._records[uid] = attrs.evolve(record, state=ckpt.PREPARE_STARTED, boot_id=self.boot_id,
                                          side_effects=pending, device_nodes=plan.device_nodes)
        try:
            await self._save_for(record)
        except PrepareError as exc:  # nothing was done: the durable record is still the completed one
            self._records[uid] = record
            return exc
        crash_point("replay:after-started-write")
        try:
            side_effects = await self._run_side_effects(plan)
            crash_point("replay:side-effects-done-unrecorded")  # the node changed, the record does not say how
            self._records[uid] = attrs.evolve(self._records[uid], side_effects=side_effects)
            await self._save_for(record)
            crash_point("replay:after-side-effects")
            self._write_specs(plan.specs)
            crash_point("replay:after-cdi-write")
            self._check_answer(self._records[uid])
            self._records[uid] = attrs.evolve(self._records[uid], state=ckpt.PREPARE_COMPLETED)
            try:
                await self._save_for(record)
            except PrepareError:  # not completed on disk: the kubelet is told it failed, so roll it back
                self._records[uid] = attrs.evolve(self._records[uid], state=ckpt.PREPARE_STARTED)
                raise
            crash_point("replay:after-completed-write")
        except Exception as exc:
            log.warning("prepare failed; rolling back", extra={"claim_uid": uid, "error": describe_error(exc)})
            if await self._try_rollback(self._records[uid]):
                with contextlib.suppress(OSError):  # still PrepareStarted on disk: rolled back at start-up
                    await self._save()
            return exc if isinstance(exc, PrepareError) else PrepareError(f"{where}: {describe_error(exc)}")
        log.info("re-created the side effects and CDI spec of a claim prepared before a reboot",
                 extra={"claim_uid": uid})
        return self._prepared_devices(self._records[uid])

    async def _save_for(self: DeviceState, record: ClaimRecord) -> None:
        """Write the checkpoint for ``record``'s claim. :raises PrepareError: naming the file and the cause."""
        try:
            await self._save()
        except OSError as exc:
            raise checkpoint_write_failed(record.namespace, record.name, exc) from None

    def _kinds_of(self: DeviceState, record: ClaimRecord) -> set[str]:
        return {cdi_id.partition("=")[0] for d in record.devices for cdi_id in d.cdi_device_ids}

    def _missing_spec_files(self: DeviceState, record: ClaimRecord) -> list[str]:
        """Spec files that the record's CDI ids need and that are not on disk as files (blocking)."""
        files = [*record.cdi_specs, *(naming.common_spec_file(k) for k in sorted(self._kinds_of(record)))]
        return [f for f in files if not self.cdi.path(f).is_file()]  # a directory there resolves nothing

    def _check_answer(self: DeviceState, record: ClaimRecord) -> None:
        """The last check before an answer: every spec file its CDI ids need is on disk and every
        device node its specs name exists.

        :raises PrepareError: naming what is missing.
        """
        where = f"ResourceClaim {record.namespace}/{record.name}"
        missing = self._missing_spec_files(record)
        if missing:
            raise PrepareError(f"{where}: CDI spec files {', '.join(missing)} are missing under {self.cdi.root} (or "
                               "are not regular files) right after they were written (is something removing them?)")
        absent = self.planner.absent_nodes(record.device_nodes)
        if absent:
            raise PrepareError(f"{where}: device nodes {self.planner.seen_at(absent)} named by its CDI spec no "
                               f"longer exist on node {self.node_name}; the device was removed or its driver unloaded")

    def _prepared_devices(self: DeviceState, record: ClaimRecord) -> list[PreparedDevice]:
        """The answer for ``record``: each device's own CDI id first, also in records an older
        release wrote with the claim's ``common`` id first (see planning.py)."""
        common = f"={naming.COMMON_DEVICE}"
        return [
            PreparedDevice((d.request.split("/", 1)[0],), d.pool, d.device,
                           tuple(sorted(d.cdi_device_ids, key=lambda i: i.endswith(common))), d.share_id)
            for d in record.devices
        ]
