"""DeviceState: what the kubelet side calls, Prepare and Unprepare of the node's claims
(docs/architecture.md#durable-state). Prepare's steps are here; the object holds its collaborators,
each passed the shared :class:`~ascend_dra.state.prepared.PreparedClaims`: an
:class:`~ascend_dra.state.unprepare.Unpreparer`, a :class:`~ascend_dra.state.replay.Replayer` (the
answer given again for a claim already prepared) and a :class:`~ascend_dra.state.recovery.Recovery`
(start-up, retries, repair of missing specs).

A Prepare of a batch of claims runs in this order, each step durable before the next:

1. fetch every claim from the claim source (before any lock, as the Go helper does);
2. holding the claims' own locks, plan each claim: find its devices, resolve and decode its
   opaque configs, compute its container edits (pure), check that no device is double-booked
   and reserve them with an in-memory ``PrepareStarted`` record, with no await in between;
3. write the checkpoint (group commit: concurrent calls share one write);
4. run profile side effects, then write each claim's device metadata files (KEP-5304) and CDI spec;
5. write the checkpoint with those claims as ``PrepareCompleted`` (a claim without side effects
   has its spec written while this write is in flight; the answer waits for both).

A crash anywhere leaves ``PrepareStarted`` records (rolled back on restart or on a retried
Prepare) or ``PrepareCompleted`` ones (answered again from the record, once the claim read again
shows the same allocation; a missing spec is re-created). One claim's error is
reported in its own entry and never fails the others.

Every answer is true when it is given (docs/durable-state.md): a CDI id we return names a spec
file on disk (the CDI dir and the common spec are re-created when someone removed them), every
device node a spec names exists (checked at Prepare and again on every replay), and a device is
released only after its spec and side effects are gone. What cannot be cleaned up now (an
undeletable spec, a failed rollback) is logged and retried by :meth:`DeviceState.retry_cleanup`,
never fatal.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs

from ascend_dra.cdi.store import CdiStore
from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.checkpoint import ClaimRecord
from ascend_dra.durable.journal import Journal
from ascend_dra.durable.records import ClaimRecords
from ascend_dra.model import ClaimAllocation, Inventory, PreparedDevice
from ascend_dra.observe.faults import crash_point
from ascend_dra.profiles.base import ConfigError, Profile, ProfileContext
from ascend_dra.state import guard
from ascend_dra.state.claims import (
    ClaimError,
    ClaimRef,
    ClaimSource,
    ClaimUnreadable,
    PrepareError,
    check_claim_ref,
    unique_refs,
)
from ascend_dra.state.guardnotes import GuardRefusal, name_gone_holders
from ascend_dra.state.planning import Plan, PlanError, Planner, resolve_configs
from ascend_dra.state.prepared import PreparedClaims, checkpoint_write_failed, describe_error
from ascend_dra.state.recovery import Recovery
from ascend_dra.state.replay import Replayer
from ascend_dra.state.unprepare import Unpreparer

__all__ = ("ClaimRef", "DeviceState", "PrepareError", "resolve_configs")

log = logging.getLogger("ascend_dra.state")


async def _write_error(write: Awaitable[None]) -> OSError | None:
    """Wait for ``write`` (:meth:`ClaimRecords.begin_save`); return its OSError, or None."""
    try:
        await write
    except OSError as exc:
        return exc
    return None


class DeviceState:
    """The node's prepared claims and the operations on them.

    :param profiles: profile name -> loaded profile.
    :param inventories: profile name -> its last discovered inventory.
    :param plugin_dir: the plugin data directory (holds ``checkpoint.json``).
    :param boot_id: the current boot id (``/proc/sys/kernel/random/boot_id``).
    :param device_metadata: give new claims device metadata files (KEP-5304, ``--device-metadata``).
    """

    def __init__(
        self,
        *,
        driver_name: str,
        node_name: str,
        profiles: Mapping[str, Profile],
        inventories: Mapping[str, Inventory],
        profile_ctx: ProfileContext,
        cdi: CdiStore,
        plugin_dir: Path,
        boot_id: str,
        claim_source: ClaimSource,
        shared: bool = False,
        device_metadata: bool = False,
    ) -> None:
        self.claims = PreparedClaims(driver_name=driver_name, node_name=node_name, profiles=profiles,
                                     inventories=inventories, profile_ctx=profile_ctx, cdi=cdi,
                                     plugin_dir=plugin_dir, boot_id=boot_id, claim_source=claim_source,
                                     shared=shared, device_metadata=device_metadata)
        self.replayer = Replayer(self.claims)
        self.unpreparer = Unpreparer(self.claims)
        self.recovery = Recovery(self.claims, self.replayer)

    # -- what the daemon, health and metrics read -----------------------------------------------

    @property
    def driver_name(self) -> str:
        return self.claims.driver_name

    @property
    def node_name(self) -> str:
        return self.claims.node_name

    @property
    def profiles(self) -> dict[str, Profile]:
        """Profile name -> loaded profile."""
        return self.claims.profiles

    @property
    def cdi(self) -> CdiStore:
        return self.claims.cdi

    @property
    def boot_id(self) -> str:
        return self.claims.boot_id

    @property
    def claim_source(self) -> ClaimSource:
        return self.claims.claim_source

    @property
    def store(self) -> ClaimRecords:
        """The checkpoint's records and their writes (records.py)."""
        return self.claims.store

    @property
    def planner(self) -> Planner:
        return self.claims.planner

    @property
    def journal(self) -> Journal:
        """The checkpoint journal (records.py)."""
        return self.claims.journal

    def set_inventories(self, inventories: Mapping[str, Inventory]) -> None:
        """Replace the known devices (after a rediscovery). Prepared claims are not touched."""
        self.claims.planner.set_inventories(inventories)

    @property
    def inventories(self) -> Mapping[str, Inventory]:
        """Profile name -> its last discovered inventory."""
        return self.claims.inventories

    @property
    def profile_ctx(self) -> ProfileContext:
        """The node context the profiles get (``dev_root``: where device nodes are checked)."""
        return self.claims.profile_ctx

    @profile_ctx.setter
    def profile_ctx(self, ctx: ProfileContext) -> None:
        self.claims.planner.profile_ctx = ctx

    def cdi_kind(self, profile_name: str) -> str:
        return self.claims.cdi_kind(profile_name)

    @property
    def prepared_claims(self) -> Mapping[str, ClaimRecord]:
        """Claim records by UID (read-only view for health and metrics)."""
        return self.claims.records

    @property
    def _records(self) -> ckpt.RecordTable:  # tests reach into the table
        return self.claims.records

    async def _save(self, *, compact: bool = False) -> None:
        await self.claims.save(compact=compact)

    @property
    def _repair_waits(self) -> dict[str, tuple[str, float, float]]:
        return self.recovery.repair_waits

    async def close(self) -> None:
        """Compact the checkpoint into its snapshot and close it (clean shutdown; records.py)."""
        await self.claims.store.close()

    def restorable(self, uid: str) -> tuple[ClaimRecord, list[PreparedDevice]] | None:
        """The record of ``uid`` and the devices a Prepare of it answers, if it is recorded
        ``PrepareCompleted`` in this boot with each of its CDI spec files in place and each device
        in an inventory: what a restarted daemon writes its claim status again from
        (statushook.StatusHook.restore). Otherwise None: the status would lose its ``env`` or
        ``physicalID``, and the kubelet's next Prepare of the claim writes it anyway."""
        record = self.claims.records.get(uid)
        if record is None or record.state != ckpt.PREPARE_COMPLETED or record.boot_id != self.boot_id:
            return None
        if not all((self.cdi.root / name).is_file() for name in record.cdi_specs):
            return None
        if not all(any(inv.device(d.device) is not None for inv in self.inventories.values()) for d in record.devices):
            return None
        return record, self.claims.prepared_devices(record)

    # -- start-up, cleanup, Unprepare: the collaborators ----------------------------------------

    async def recover(self) -> None:
        """Start-up recovery (:meth:`Recovery.recover <ascend_dra.state.recovery.Recovery.recover>`).

        :raises checkpoint.CheckpointCorrupt: the daemon must not start over an unreadable checkpoint.
        """
        await self.recovery.recover()

    @property
    def cleanup_pending(self) -> bool:
        """Whether a rollback or a stray spec removal failed and waits for :meth:`retry_cleanup`."""
        return self.recovery.cleanup_pending

    async def retry_cleanup(self) -> None:
        """Retry what failed earlier: interrupted Prepares rolled back, orphan specs removed
        (:meth:`Recovery.retry_cleanup <ascend_dra.state.recovery.Recovery.retry_cleanup>`)."""
        await self.recovery.retry_cleanup()

    async def repair_specs(self) -> list[str]:
        """Re-create missing specs of prepared claims; return the uids repaired
        (:meth:`Recovery.repair_specs <ascend_dra.state.recovery.Recovery.repair_specs>`)."""
        return await self.recovery.repair_specs()

    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, Exception | None]:
        """Unprepare a batch of claims; return ``{claim uid: None or the claim's error}``
        (:meth:`Unpreparer.unprepare <ascend_dra.state.unprepare.Unpreparer.unprepare>`)."""
        return await self.unpreparer.unprepare(refs)

    # -- Prepare --------------------------------------------------------------------------------

    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, list[PreparedDevice] | Exception]:
        """Prepare a batch of claims; return ``{claim uid: devices or the claim's error}``.

        Never raises for one claim's problem; every requested uid gets an entry (a uid named twice
        is prepared once). A claim refused by the guard while a claim planned before it in this call
        held the device is planned again if that claim's Prepare then failed: one bad claim does not
        fail another by a reservation it no longer has.
        """
        refs = unique_refs(refs)
        results: dict[str, list[PreparedDevice] | Exception] = {}
        fetched: dict[str, ClaimAllocation] = {}
        unread: dict[str, ClaimUnreadable] = {}  # completed claims the API server could not give now

        async def fetch(ref: ClaimRef) -> None:
            # A recorded uid was accepted when it was prepared (see unprepare.py). A completed
            # claim is read too: its allocation must still be the one recorded (Replayer.replay).
            recorded = ref.uid in self.claims.records and self.claims.records[ref.uid].state == ckpt.PREPARE_COMPLETED
            try:
                fetched[ref.uid] = await self.claims.claim_source.get(ref.namespace, ref.name, ref.uid,
                                                               uid_recorded=recorded)
            except ClaimUnreadable as exc:
                (unread if recorded else results)[ref.uid] = exc  # a replay may still answer (Replayer.replay)
            except (ClaimError, PrepareError) as exc:
                results[ref.uid] = exc
            except Exception as exc:  # an API server hiccup fails this claim only
                log.exception("fetching a claim failed", extra={"claim_uid": ref.uid})
                results[ref.uid] = PrepareError(f"fetching ResourceClaim {ref.namespace}/{ref.name}: {exc}")

        if len(refs) == 1:  # the usual call (one claim per pod): no task group to set up and tear down
            await fetch(refs[0])
        else:
            async with anyio.create_task_group() as tg:
                for ref in refs:
                    tg.start_soon(fetch, ref)

        # shared (records.py): the table now holds every instance's records, which may differ from
        # what fetch() saw; every claim was read either way, so each is judged on its record now.
        async with (self.claims.lock_claims(ref.uid for ref in refs if ref.uid not in results),
                    self.claims.store.exclusive()):
            plans: list[Plan] = []
            refused: list[ClaimRef] = []  # by the guard, while claims of this call held devices
            for ref in refs:
                if ref.uid in results:
                    continue
                record = self.claims.records.get(ref.uid)
                where = f"ResourceClaim {ref.namespace}/{ref.name}"
                foreign = self.replayer.foreign_record_error(ref.uid, where)
                if foreign is not None:
                    results[ref.uid] = foreign
                    continue
                if record is not None and record.state == ckpt.PREPARE_COMPLETED:
                    results[ref.uid] = await self.replayer.replay(record, fetched.get(ref.uid) or unread[ref.uid])
                    continue
                if ref.uid in unread:  # unprepared meanwhile: a new Prepare needs the claim
                    results[ref.uid] = unread[ref.uid]
                    continue
                try:  # read as a recorded uid, unprepared since: a new Prepare takes today's rule
                    check_claim_ref(ref.namespace, ref.name, ref.uid)
                except ClaimError as exc:
                    results[ref.uid] = exc
                    continue
                if record is not None:  # PrepareStarted by an earlier, failed or crashed attempt
                    try:
                        await self.claims.rollback(record)
                    except Exception as exc:
                        results[ref.uid] = PrepareError(f"{where}: rolling back an interrupted Prepare: "
                                                        f"{describe_error(exc)}")
                        continue
                    del self.claims.records[ref.uid]
                    self.claims.pending_rollback.discard(ref.uid)
                plan = self._reserve(fetched[ref.uid], results)
                if plan is not None:
                    plans.append(plan)
                elif plans and isinstance(results[ref.uid], GuardRefusal):
                    refused.append(ref)
            if plans and await self._prepare_plans(plans, results) and refused:
                again = []
                for ref in refused:
                    del results[ref.uid]
                    plan = self._reserve(fetched[ref.uid], results)
                    if plan is not None:
                        again.append(plan)
                if again:
                    await self._prepare_plans(again, results)
        await name_gone_holders(results, self.claims.records, self.claims.claim_source)
        return results

    def _reserve(self, claim: ClaimAllocation, results: dict[str, Any]) -> Plan | None:
        """Plan ``claim`` and reserve its devices (a PrepareStarted record, in memory); or put the
        claim's error in ``results`` (a :class:`GuardRefusal` when the guard refused it) and return None.

        Nothing awaits here: the guard's view of which devices are taken and this claim's
        reservation are one atomic step for the loop.
        """
        where = f"ResourceClaim {claim.namespace}/{claim.name}"
        try:
            plan = self.claims.planner.plan(claim, self.claims.holds)
        except guard.GuardError as exc:
            results[claim.uid] = GuardRefusal(str(exc), exc.holders)
            return None
        except PlanError as exc:
            results[claim.uid] = PrepareError(str(exc))
            return None
        except ConfigError as exc:
            results[claim.uid] = PrepareError(f"{where}: invalid opaque config: {exc}")
            return None
        except (PrepareError, ClaimError) as exc:
            results[claim.uid] = exc
            return None
        except Exception as exc:  # a bug in a profile or in us: this claim fails, not the batch
            log.exception("planning a claim failed", extra={"claim_uid": claim.uid})
            results[claim.uid] = PrepareError(f"{where}: {type(exc).__name__}: {exc}")
            return None
        c = plan.claim
        # A profile whose side effects will run is recorded first with no result: a crash
        # inside its hook then still rolls back through unprepare_side_effects(None, ctx).
        pending = {p: None for p in plan.groups if self.claims.hook(p, "prepare_side_effects") is not None}
        self.claims.records[c.uid] = ClaimRecord(c.uid, c.namespace, c.name, ckpt.PREPARE_STARTED, self.claims.boot_id,
                                           plan.devices, tuple(plan.specs), side_effects=pending,
                                           device_nodes=plan.device_nodes)
        return plan

    async def _prepare_plans(self, plans: list[Plan], results: dict[str, Any]) -> bool:
        """Make the reserved (PrepareStarted, in memory) claims of ``plans`` durable, then prepared;
        return whether any of them failed (and so gave its devices back)."""
        crash_point("prepare:before-started-write")
        try:
            # The reservation must be durable before a side effect changes the node, so that a
            # crash is rolled back; without side effects a crash leaves at most an orphan spec,
            # which start-up removes, so the only durable write is the PrepareCompleted one.
            if any(self.claims.has_side_effects(plan) for plan in plans):
                await self.claims.save()
        except OSError as exc:
            for plan in plans:
                c = plan.claim
                del self.claims.records[c.uid]
                results[c.uid] = checkpoint_write_failed(c.namespace, c.name, exc)
            return True
        crash_point("prepare:after-started-write")
        done: list[Plan] = []
        failed = False
        for plan in plans:
            c = plan.claim
            try:
                side_effects = await self.claims.run_side_effects(plan)
                crash_point("prepare:side-effects-done-unrecorded")  # the node changed, the record does not say how
                # The result becomes durable with PrepareCompleted, not in a write of its own: until
                # then a crash is rolled back with unprepare_side_effects(None, ctx), which the
                # profile contract makes undo whatever a Prepare of the claim did (base.py).
                if side_effects:
                    self.claims.records[c.uid] = attrs.evolve(self.claims.records[c.uid], side_effects=side_effects)
                crash_point("prepare:after-side-effects")
                if self.claims.has_side_effects(plan):  # the strict order: its spec, then its record
                    self._write_specs_and_check(plan)
                    self.claims.records[c.uid] = attrs.evolve(self.claims.records[c.uid], state=ckpt.PREPARE_COMPLETED)
            except Exception as exc:
                await self._prepare_failed(c, exc, results)
                failed = True
                continue
            done.append(plan)
        # A claim without side effects has its spec written while its PrepareCompleted record is
        # being written: the loop would otherwise sit idle while the writer thread wakes up and
        # fdatasyncs. A crash in between leaves a spec no record backs (start-up removes it) or a
        # record whose spec is missing (re-created by repair_specs or the kubelet's retried
        # Prepare, as after any restart); the answer waits for both. It is marked completed only
        # here, with no await before the write begins, so no earlier write carries it.
        overlapped = [plan for plan in done if not self.claims.has_side_effects(plan)]
        for plan in overlapped:
            uid = plan.claim.uid
            self.claims.records[uid] = attrs.evolve(self.claims.records[uid], state=ckpt.PREPARE_COMPLETED)
        saving = self.claims.store.begin_save()
        spec_failures: dict[str, Exception] = {}
        try:
            crash_point("prepare:completed-write-submitted")
            for plan in overlapped:
                try:
                    self._write_specs_and_check(plan)
                except Exception as exc:
                    spec_failures[plan.claim.uid] = exc
        finally:  # the write must be waited for whatever happens: until then it holds the store's lock
            write_error = await _write_error(saving)
        if write_error is not None:
            # The checkpoint does not say PrepareCompleted, so the kubelet is told the Prepare failed:
            # then nothing of it may stay behind holding the devices (a reservation kept in memory
            # refused other claims while the disk was full, and after). Roll each back now; one
            # that resists stays PrepareStarted and is retried by retry_cleanup.
            for uid, exc in spec_failures.items():
                log.warning("prepare failed; rolling back", extra={"claim_uid": uid, "error": str(exc)})
            for plan in done:  # all of them before the first await: a concurrent write must not
                c = plan.claim  # make one durable as completed while it is being rolled back
                results[c.uid] = checkpoint_write_failed(c.namespace, c.name, write_error)
                self.claims.records[c.uid] = attrs.evolve(self.claims.records[c.uid], state=ckpt.PREPARE_STARTED)
            for plan in done:
                await self.claims.try_rollback(self.claims.records[plan.claim.uid])
            return True
        crash_point("prepare:after-completed-write")
        if spec_failures:
            for uid in spec_failures:  # all of them before the first await, as above
                self.claims.records[uid] = attrs.evolve(self.claims.records[uid], state=ckpt.PREPARE_STARTED)
            for uid, exc in spec_failures.items():
                await self._prepare_failed(self.claims.records[uid], exc, results)
            with contextlib.suppress(OSError):  # still PrepareCompleted on disk: the next write drops it
                await self.claims.save()
        for plan in done:
            if plan.claim.uid not in spec_failures:
                results[plan.claim.uid] = self.claims.prepared_devices(self.claims.records[plan.claim.uid])
        return failed or bool(spec_failures)

    async def _prepare_failed(self, claim: Any, exc: Exception, results: dict[str, Any]) -> None:
        """Report ``exc`` as ``claim``'s error and roll its Prepare back (its record PrepareStarted).

        On failure the record stays PrepareStarted (its devices held) and retry_cleanup, the
        claim's next Prepare or the next start-up rolls it back again."""
        log.warning("prepare failed; rolling back", extra={"claim_uid": claim.uid, "error": str(exc)})
        results[claim.uid] = PrepareError(f"ResourceClaim {claim.namespace}/{claim.name}: {describe_error(exc)}")
        await self.claims.try_rollback(self.claims.records[claim.uid])

    def _write_specs_and_check(self, plan: Plan) -> None:
        """Write ``plan``'s device metadata files and CDI specs and check what its answer will name (the
        crash point between)."""
        self.claims.write_metadata(plan)  # on the loop: see PreparedClaims.write_specs
        crash_point("prepare:after-metadata-write")
        self.claims.write_specs(plan.specs)
        crash_point("prepare:after-cdi-write")
        self.claims.check_answer(self.claims.records[plan.claim.uid])
