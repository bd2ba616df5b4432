"""The node's prepared claims and the steps every operation on them shares (docs/durable-state.md).

:class:`PreparedClaims` holds the records (:mod:`ascend_dra.durable.records`), the guard's index of
held devices, the per-claim locks and the CDI store, and does what Prepare, Unprepare, a replayed
Prepare and start-up recovery all do: write a claim's specs (re-creating the common spec), check
what an answer names, roll one claim back. :class:`~ascend_dra.state.devicestate.DeviceState` and
its collaborators (:mod:`.unprepare`, :mod:`.replay`, :mod:`.recovery`) each hold the same instance.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import anyio

from ascend_dra.cdi import naming
from ascend_dra.cdi.devicemetadata import HOST_DIR, MetadataStore
from ascend_dra.cdi.spec import CdiDevice, ContainerEdits, Spec
from ascend_dra.cdi.store import CdiStore
from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.checkpoint import ClaimRecord
from ascend_dra.durable.evidence import prepared_claims_evidence
from ascend_dra.durable.journal import Journal
from ascend_dra.durable.records import ClaimRecords
from ascend_dra.model import Inventory, PreparedDevice
from ascend_dra.profiles.base import ApplyContext, Profile, ProfileContext
from ascend_dra.state import guard
from ascend_dra.state.claims import ClaimSource, PrepareError
from ascend_dra.state.metadataplan import metadata_requests
from ascend_dra.state.planning import Plan, Planner

__all__ = ("PreparedClaims", "checkpoint_write_failed", "describe_error")

log = logging.getLogger("ascend_dra.state")


class PreparedClaims:
    """The records of the node's claims, the devices they hold, and the steps on one claim.

    :param profiles: profile name -> loaded profile.
    :param inventories: profile name -> its last discovered inventory.
    :param plugin_dir: the plugin data directory (holds ``checkpoint.json``).
    :param boot_id: the current boot id (``/proc/sys/kernel/random/boot_id``).
    :param shared: the checkpoint is shared with other instances of the node (records.py).
    :param device_metadata: give new claims device metadata files (KEP-5304, ``--device-metadata``);
        files a record names are kept, re-made and removed whatever this is.
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
        self.driver_name = driver_name
        #: ``<plugin dir>/device-metadata``: the claims' device metadata files (KEP-5304).
        self.metadata = MetadataStore(plugin_dir / HOST_DIR)
        self.node_name = node_name
        self.profiles = dict(profiles)
        self.cdi = cdi
        self.boot_id = boot_id
        self.claim_source = claim_source
        #: Which devices the records hold, for the guard (kept up to date by the records' changes).
        self.holds = guard.HoldIndex()
        #: PrepareStarted claims whose rollback failed, retried by Recovery.retry_cleanup.
        self.pending_rollback: set[str] = set()
        self.store = ClaimRecords(plugin_dir, boot_id, on_change=self.holds.update, shared=shared,
                                  on_started=self.pending_rollback.add,
                                  evidence=lambda: prepared_claims_evidence(
                                      self.cdi, {self.cdi_kind(p) for p in self.profiles}, self.profiles,
                                      self.profile_ctx, self.metadata))
        self._claim_locks: dict[str, anyio.Lock] = {}
        self.planner = Planner(driver_name=driver_name, node_name=node_name, profiles=profiles,
                               profile_ctx=profile_ctx, metadata_store=self.metadata,
                               device_metadata=device_metadata)
        self.planner.set_inventories(inventories)

    @property
    def inventories(self) -> Mapping[str, Inventory]:
        """Profile name -> its last discovered inventory."""
        return self.planner.inventories

    @property
    def profile_ctx(self) -> ProfileContext:
        """The node context the profiles get (``dev_root``: where device nodes are checked)."""
        return self.planner.profile_ctx

    def cdi_kind(self, profile_name: str) -> str:
        return self.planner.cdi_kind(profile_name)

    @property
    def records(self) -> ckpt.RecordTable:
        """Claim uid -> its record (the checkpoint's table, records.py)."""
        return self.store.table

    @property
    def journal(self) -> Journal:
        """The checkpoint journal (records.py)."""
        return self.store.journal

    async def save(self, *, compact: bool = False) -> None:
        """Write the checkpoint. :raises OSError: the write failed (records.py)."""
        await self.store.save(compact=compact)

    async def save_for(self, record: ClaimRecord) -> None:
        """Write the checkpoint for ``record``'s claim. :raises PrepareError: naming the file and the cause."""
        try:
            await self.save()
        except OSError as exc:
            raise checkpoint_write_failed(record.namespace, record.name, exc) from None

    @contextlib.asynccontextmanager
    async def lock_claims(self, uids: Iterable[str]) -> AsyncIterator[None]:
        """Serialize operations on the same claims (the kubelet may retry a claim while its first
        call still runs); other claims go on concurrently. Locks are taken in sorted order, so
        two batches that share claims cannot deadlock."""
        held: list[tuple[str, anyio.Lock]] = []
        try:
            for uid in sorted(set(uids)):
                # fast_acquire: a free lock is taken without a trip through the event loop (one
                # loop turn less per claim); a contended one still waits and can be cancelled.
                lock = self._claim_locks.setdefault(uid, anyio.Lock(fast_acquire=True))
                await lock.acquire()
                held.append((uid, lock))
            yield
        finally:
            for uid, lock in reversed(held):
                lock.release()
                if not lock.locked() and not lock.statistics().tasks_waiting and self._claim_locks.get(uid) is lock:
                    del self._claim_locks[uid]

    # -- profile hooks ---------------------------------------------------------------------------

    def hook(self, profile_name: str, name: str) -> Any:
        """The profile's optional hook ``name`` (``prepare_side_effects``, ...), or None."""
        return getattr(self.profiles.get(profile_name), name, None)

    def has_side_effects(self, plan: Plan) -> bool:
        return any(self.hook(p, "prepare_side_effects") is not None for p in plan.groups)

    async def run_side_effects(self, plan: Plan) -> dict[str, Any]:
        """Run the ``prepare_side_effects`` hook of each of ``plan``'s profiles that has one; return
        profile name -> the hook's result (what its ``unprepare_side_effects`` is given back)."""
        done: dict[str, Any] = {}
        for profile_name, devices in plan.groups.items():
            hook = getattr(self.profiles[profile_name], "prepare_side_effects", None)
            if hook is not None:
                c = plan.claim
                ctx = ApplyContext(self.profile_ctx, self.inventories[profile_name], c.uid, c.namespace, c.name)
                done[profile_name] = await hook(c, devices, ctx)
        return done

    # -- CDI specs and device metadata files ------------------------------------------------------

    def write_plan(self, plan: Plan) -> None:
        """Write ``plan``'s device metadata files, then its specs (:meth:`write_specs`), which mount them.

        :raises OSError: naming the file that could not be written.
        """
        self.write_metadata(plan)
        self.write_specs(plan.specs)

    def write_metadata(self, plan: Plan) -> None:
        """Write ``plan``'s device metadata files (KEP-5304), on the loop as the specs (:meth:`write_specs`).

        :raises OSError: naming the file that could not be written.
        """
        for request, data in plan.metadata.items():
            self.metadata.write(plan.claim.uid, request, data)

    def write_specs(self, specs: Mapping[str, Spec], kinds: Iterable[str] = ()) -> None:
        """Write a claim's specs, first re-creating the CDI dir and the common spec of each of their
        kinds and of ``kinds`` (those the claim's answer names) if someone removed them: another
        kind's common spec that cannot be written now (a full disk) fails the claims that name it,
        not this one.

        Called on the event loop: a spec is a few KiB written to the page cache (tmpfs on real
        nodes) and renamed, with no fsync, which costs tens of microseconds; the YAML encoding
        holds the GIL wherever it runs, so a worker thread would add a hand-off and save nothing.
        """
        for kind in sorted({spec.kind for spec in specs.values()}.union(kinds)):
            self.ensure_common_spec(kind)
        for file, spec in specs.items():
            self.cdi.write(file, spec)

    def ensure_common_spec(self, kind: str, rewrite: bool = False) -> None:
        """Make sure the CDI dir and ``kind``'s common spec exist (blocking). ``rewrite`` writes it
        even when present (start-up: node name or driver name may have changed)."""
        self.cdi.ensure_root()
        file = naming.common_spec_file(kind)
        if rewrite or not self.cdi.path(file).is_file():
            edits = ContainerEdits(env=(f"ASCEND_DRA_NODE_NAME={self.node_name}",
                                        f"ASCEND_DRA_DRIVER_NAME={self.driver_name}"))
            self.cdi.write(file, Spec(kind, (CdiDevice(naming.COMMON_DEVICE, edits),)))

    def kinds_of(self, record: ClaimRecord) -> set[str]:
        """The CDI kinds ``record``'s CDI ids name."""
        return {cdi_id.partition("=")[0] for d in record.devices for cdi_id in d.cdi_device_ids}

    def metadata_requests(self, record: ClaimRecord) -> list[str]:
        """The requests whose device metadata files ``record``'s answer mounts (its CDI ids name them)."""
        return metadata_requests(record.uid, [i for d in record.devices for i in d.cdi_device_ids])

    def missing_metadata_files(self, record: ClaimRecord) -> list[str]:
        """Host paths of the device metadata files the record's answer mounts that are not on disk (blocking)."""
        requests = self.metadata_requests(record)
        return self.metadata.missing(record.uid, requests) if requests else []

    def missing_spec_files(self, record: ClaimRecord) -> list[str]:
        """Spec files that the record's CDI ids need and that are not on disk as files, then the host
        paths of the device metadata files its specs mount that are not (blocking)."""
        return self._missing_specs(record) + self.missing_metadata_files(record)

    def _missing_specs(self, record: ClaimRecord) -> list[str]:
        files = [*record.cdi_specs, *(naming.common_spec_file(k) for k in sorted(self.kinds_of(record)))]
        return [f for f in files if not self.cdi.path(f).is_file()]  # a directory there resolves nothing

    def check_answer(self, record: ClaimRecord) -> None:
        """The last check before an answer: every spec file its CDI ids need is on disk and every
        device node its specs name exists.

        :raises PrepareError: naming what is missing.
        """
        where = f"ResourceClaim {record.namespace}/{record.name}"
        metadata = self.missing_metadata_files(record)
        if metadata:
            raise PrepareError(f"{where}: device metadata files {', '.join(metadata)} are missing (or are not regular "
                               "files) right after they were written (is something removing them?)")
        missing = self._missing_specs(record)
        if missing:
            raise PrepareError(f"{where}: CDI spec files {', '.join(missing)} are missing under {self.cdi.root} (or "
                               "are not regular files) right after they were written (is something removing them?)")
        absent = self.planner.absent_nodes(record.device_nodes)
        if absent:
            raise PrepareError(f"{where}: device nodes {self.planner.seen_at(absent)} named by its CDI spec no "
                               f"longer exist on node {self.node_name}; the device was removed or its driver unloaded")

    def prepared_devices(self, record: ClaimRecord) -> list[PreparedDevice]:
        """The answer for ``record``: each device's own CDI id first, also in records an older
        release wrote with the claim's ``common`` id first (see planning.py)."""
        common = f"={naming.COMMON_DEVICE}"
        return [
            PreparedDevice((d.request.split("/", 1)[0],), d.pool, d.device,
                           tuple(sorted(d.cdi_device_ids, key=lambda i: i.endswith(common))), d.share_id)
            for d in record.devices
        ]

    # -- rollback --------------------------------------------------------------------------------

    async def rollback(self, record: ClaimRecord) -> None:
        """Undo a claim's node side effects and remove its CDI specs and device metadata files (idempotent)."""
        for profile_name, side_effects in record.side_effects.items():
            profile = self.profiles.get(profile_name)
            hook = getattr(profile, "unprepare_side_effects", None)
            if hook is None:
                raise PrepareError(f"profile {profile_name} is not loaded; cannot undo its side effects")
            ctx = ApplyContext(self.profile_ctx, self.inventories.get(profile_name, Inventory()), record.uid,
                               record.namespace, record.name)
            await hook(side_effects, ctx)
        for file in record.cdi_specs:
            self.cdi.remove(file)  # on the loop, as the writes: see write_specs
        await self.remove_metadata(record.uid)

    async def remove_metadata(self, claim_uid: str) -> None:
        """Remove the claim's device metadata directory (KEP-5304), in a worker thread: unlike a spec's
        unlink, removing two directories took 0.4 to 3 ms on ext4 (measured on a loaded 2-core VM), too
        long to hold the loop. :raises OSError: it cannot be removed."""
        if self.metadata.holds(claim_uid):  # without metadata: one lstat, no thread hand-off
            await anyio.to_thread.run_sync(self.metadata.remove_claim, claim_uid)

    async def try_rollback(self, record: ClaimRecord) -> bool:
        """Roll back a ``PrepareStarted`` record and drop it; return whether it was dropped. On
        failure the record stays (its devices held) and is queued in :attr:`pending_rollback` for
        Recovery.retry_cleanup."""
        try:
            await self.rollback(record)
        except Exception as exc:
            log.warning("rolling back an interrupted Prepare failed; its devices stay held, will retry",
                        extra={"claim_uid": record.uid, "error": describe_error(exc)})
            self.pending_rollback.add(record.uid)
            return False
        del self.records[record.uid]
        self.pending_rollback.discard(record.uid)
        return True


def describe_error(exc: BaseException) -> str:
    """An OSError as ``strerror (file)``, anything else as its message (for a claim's error)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    return str(exc)


def checkpoint_write_failed(namespace: str, name: str, exc: OSError) -> PrepareError:
    """A claim's error when the checkpoint write its operation needed failed (names the file)."""
    return PrepareError(f"ResourceClaim {namespace}/{name}: writing the checkpoint: {describe_error(exc)}")
