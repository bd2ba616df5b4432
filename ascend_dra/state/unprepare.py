"""Unprepare (:class:`Unpreparer`, held by :class:`~ascend_dra.state.devicestate.DeviceState`): releasing
claims, durably and in order (docs/durable-state.md).

A device is released (its record dropped) only after the claim's CDI specs and node side effects
are gone, so a device we report free is free; a claim we do not know succeeds, after its stray
specs are removed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import attrs

from ascend_dra.cdi import naming
from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.checkpoint import ClaimRecord
from ascend_dra.observe.faults import crash_point
from ascend_dra.state.claims import ClaimError, ClaimRef, PrepareError, check_claim_ref, unique_refs
from ascend_dra.state.prepared import PreparedClaims, checkpoint_write_failed, describe_error

__all__ = ("Unpreparer",)

log = logging.getLogger("ascend_dra.state")


class Unpreparer:
    """Releases claims: their specs and side effects removed, then their records dropped.

    :param claims: the prepared claims (shared with the DeviceState that holds this object).
    """

    def __init__(self, claims: PreparedClaims) -> None:
        self.claims = claims

    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, Exception | None]:
        """Unprepare a batch of claims; return ``{claim uid: None or the claim's error}``.

        A claim we do not know succeeds (its stray CDI specs, if any, are removed). A device is
        released (its record dropped) only after the claim's specs and side effects are gone: a
        spec that cannot be removed fails the claim and keeps the record, so the device stays
        held until the kubelet's retry succeeds. A claim with node side effects first goes back to
        ``PrepareStarted`` durably, so a crash half-way leaves a record that start-up rolls back;
        a claim without them needs one durable write, after its specs are removed (a crash before
        it leaves a completed record whose spec is gone: the restarted daemon re-creates the spec,
        as for any spec lost in this boot (recovery.py, ``repair_specs``), and the retried
        Unprepare removes both).
        """
        refs = unique_refs(refs)
        results: dict[str, Exception | None] = {}
        async with self.claims.lock_claims(ref.uid for ref in refs), self.claims.store.exclusive():
            targets: list[ClaimRecord] = []
            for ref in refs:
                try:
                    record = self.claims.records.get(ref.uid)
                    # A recorded uid was accepted when it was prepared, by this release's rule or an
                    # older one: refused now, its claim would keep its devices forever.
                    check_claim_ref(ref.namespace, ref.name, ref.uid,
                                    uid_recorded=record is not None or ref.uid in self.claims.records.unreadable)
                    if ref.uid in self.claims.records.unreadable:
                        await self._unprepare_unreadable(ref.uid)
                    elif record is None:
                        await self._remove_stray_specs(ref.uid)
                        if self.claims.records.is_dirty(ref.uid):  # its deletion waits for a write that failed
                            await self._save_or_fail(ref)
                    else:
                        targets.append(record)
                    results[ref.uid] = None
                except Exception as exc:
                    results[ref.uid] = exc if isinstance(exc, (ClaimError, PrepareError)) else PrepareError(
                        f"ResourceClaim {ref.namespace}/{ref.name}: {describe_error(exc)}")
            if not targets:
                return results
            with_effects = [r for r in targets if r.side_effects]
            for record in with_effects:
                self.claims.records[record.uid] = attrs.evolve(record, state=ckpt.PREPARE_STARTED)
            crash_point("unprepare:before-checkpoint-write")
            if with_effects:
                try:
                    await self.claims.save()
                except OSError as exc:
                    for record in with_effects:
                        self.claims.records[record.uid] = record
                        results[record.uid] = checkpoint_write_failed(record.namespace, record.name, exc)
                    targets = [r for r in targets if not r.side_effects]
            crash_point("unprepare:after-checkpoint-write")
            undone = []
            for record in targets:
                try:
                    await self.claims.rollback(record)
                    undone.append(record)
                except Exception as exc:
                    log.warning("unprepare failed; the claim's devices stay held until a retry succeeds",
                                extra={"claim_uid": record.uid, "error": str(exc)})
                    results[record.uid] = PrepareError(
                        f"ResourceClaim {record.namespace}/{record.name}: {describe_error(exc)}; its devices stay "
                        "held until Unprepare succeeds")
            crash_point("unprepare:after-cdi-remove")
            if not undone:
                return results
            for record in undone:
                del self.claims.records[record.uid]
                self.claims.pending_rollback.discard(record.uid)
                # Its devices stay held until the deletion is durable: a failed write puts the record
                # back, and a claim planned meanwhile would then hold the same device.
                self.claims.holds.update(record.uid, record)
            try:
                await self.claims.save()
            except OSError as exc:
                # Specs and side effects are gone but the disk still holds the records: keep them in
                # memory too (as they are on disk) and let the kubelet retry.
                for record in undone:
                    self.claims.records[record.uid] = record if not record.side_effects else \
                        attrs.evolve(record, state=ckpt.PREPARE_STARTED)
                    results[record.uid] = checkpoint_write_failed(record.namespace, record.name, exc)
            finally:
                for record in undone:
                    if record.uid not in self.claims.records:  # deleted for good (or cancelled: the next write)
                        self.claims.holds.update(record.uid, None)
        return results

    async def _save_or_fail(self, ref: ClaimRef) -> None:
        """Write the pending changes before ``ref`` is answered as unprepared.

        :raises PrepareError: the write failed (naming the file and the cause).
        """
        try:
            await self.claims.save()
        except OSError as exc:
            raise checkpoint_write_failed(ref.namespace, ref.name, exc) from None

    async def _unprepare_unreadable(self, uid: str) -> None:
        """Drop a record another release wrote, after removing the specs it names.

        :raises PrepareError: it records side effects, which only a profile that understands the
            record can undo.
        """
        bad = self.claims.records.unreadable[uid]
        if isinstance(bad.raw, Mapping) and bad.raw.get("side_effects"):
            raise PrepareError(f"claim uid {uid}: its checkpoint record (written by another release) records node "
                               "side effects this release cannot undo; run the release that wrote it to unprepare "
                               "the claim")
        for file in bad.cdi_specs:
            if _is_our_spec_file(file):
                self.claims.cdi.remove(file)  # on the loop, as the writes: see PreparedClaims.write_specs
        await self.claims.remove_metadata(uid)
        self.claims.records.drop_unreadable(uid)
        await self.claims.save()

    async def _remove_stray_specs(self, uid: str) -> None:
        for profile_name in self.claims.profiles:
            file = naming.claim_spec_file(self.claims.cdi_kind(profile_name), uid)
            self.claims.cdi.remove(file)  # on the loop, as the writes: see PreparedClaims.write_specs
        await self.claims.remove_metadata(uid)  # device metadata files (KEP-5304)


def _is_our_spec_file(name: str) -> bool:
    """A plain ``*.yaml`` file name (no directory part): safe to remove under the CDI root."""
    return name.endswith(".yaml") and "/" not in name and not name.startswith(".")
