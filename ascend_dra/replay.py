"""Answering a Prepare again, for :class:`~ascend_dra.state.DeviceState`: a claim already prepared
is answered from its checkpoint record, only while that answer is still true (docs/durable-state.md).

The kubelet sends Prepare again for a claim it prepared before (its own restart, a retry after a
lost answer, every pod start of a shared claim). The record answers, after the checks every answer
passes (:meth:`ReplayMixin._check_answer`): the claim still has the same allocation, every spec
file its CDI ids need is on disk (re-created when gone) and every device node its specs name exists.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from ascend_dra import checkpoint as ckpt
from ascend_dra import guard
from ascend_dra.cdi import naming
from ascend_dra.checkpoint import ClaimRecord
from ascend_dra.claims import ClaimUnreadable, PrepareError
from ascend_dra.model import ClaimAllocation, PreparedDevice
from ascend_dra.planning import PlanError
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
                side_effects = await self._run_side_effects(plan) if rebooted else record.side_effects
                self._write_specs(plan.specs)
                self._records[record.uid] = attrs.evolve(record, boot_id=self.boot_id, side_effects=side_effects,
                                                         device_nodes=plan.device_nodes)
                try:
                    await self._save()
                except OSError as exc:  # the spec is written; it is the checkpoint that failed
                    raise checkpoint_write_failed(record.namespace, record.name, exc) from None
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
            raise PrepareError(f"{where}: device nodes {', '.join(absent)} named by its CDI spec no longer exist "
                               f"on node {self.node_name} (looked for under {self.profile_ctx.dev_root}); the "
                               "device was removed or its driver unloaded")

    def _prepared_devices(self: DeviceState, record: ClaimRecord) -> list[PreparedDevice]:
        """The answer for ``record``: each device's own CDI id first, also in records an older
        release wrote with the claim's ``common`` id first (see planning.py)."""
        common = f"={naming.COMMON_DEVICE}"
        return [
            PreparedDevice((d.request.split("/", 1)[0],), d.pool, d.device,
                           tuple(sorted(d.cdi_device_ids, key=lambda i: i.endswith(common))), d.share_id)
            for d in record.devices
        ]
