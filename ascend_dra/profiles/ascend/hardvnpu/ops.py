"""Creating, destroying and repairing hard vNPUs, with the ledger as proof of ownership.

The calls go through DCMI when the DCMI tier is loaded and through npu-smi for any answer DCMI does
not give (:mod:`.calls`); the rules below are the same whichever tier answers. npu-smi commands
(docs/ascend-hardware.md#npu-smi-commands; NPU ID and chip ID, never the logic ID,
docs/ascend-hardware.md#the-ids):

* ``npu-smi set -t create-vnpu -i <NPU ID> -c <chip ID> -f <template> -v <vNPU ID>``
  (``Status : OK`` / ``Message : Create vnpu success``, ``910B4*_info-vnpu_*`` part 3);
* ``npu-smi set -t destroy-vnpu -i <NPU ID> -c <chip ID> -v <vNPU ID>``;
* ``npu-smi info -t info-vnpu -i <NPU ID> -c <chip ID>`` to read back what exists;
* ``npu-smi info -t vnpu-cfg-recover`` (``VNPU config recover mode : Enable``): whether the device
  restores its vNPUs after a restart. Enabled is npu-smi's default (MindCluster "Creating vNPUs",
  https://www.hiascend.com/document/detail/en/mindcluster/730/clustersched/schedulingug/cpaug_0011.html),
  so by default vNPUs outlive a reboot.

Ownership rules: a vNPU is ours only when a ledger entry names it, for the same template, and the
entry is of **this boot** or vnpu-cfg-recover restored the vNPUs of earlier boots; before a create,
the entry is durable (:mod:`.vnpu_ledger`). A vNPU at our ID that the ledger does not name is
someone else's: the Prepare fails, naming it, and nothing is touched.

Crash points (``ASCEND_DRA_CRASH_AT``, :mod:`ascend_dra.observe.faults`): :data:`CRASH_POINTS`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio

from ascend_dra.observe.faults import crash_point
from ascend_dra.profiles.ascend.hardvnpu.calls import VnpuCallError, VnpuCalls
from ascend_dra.profiles.ascend.hardvnpu.ledger import LEDGER_DIR, Ledger, LedgerEntry
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiError
from ascend_dra.profiles.ascend.npusmi.runner import NpuSmi
from ascend_dra.profiles.ascend.npusmi.tables import VnpuInfo

__all__ = ("CRASH_POINTS", "VnpuError", "VnpuOps")

logger = logging.getLogger(__name__)

#: In the order a Prepare then an Unprepare pass them.
CRASH_POINTS = (
    "hard-vnpu:after-ledger-write",
    "hard-vnpu:after-create",
    "hard-vnpu:before-destroy",
    "hard-vnpu:after-destroy",
)


class VnpuError(Exception):
    """Raised by :class:`VnpuOps` when a vNPU cannot be created, found or destroyed; the message
    names the chip (NPU ID, chip ID), the vNPU ID and the template."""


class VnpuOps:
    """vNPU operations for one daemon.

    :param state_dir: ``ProfileContext.state_dir``; the ledger lives in ``<state_dir>/hard-vNPU``.
    :param boot_id_file: the node's boot id (the daemon's ``--boot-id-file``).
    :param calls: the tiers that make the calls (default: npu-smi alone).
    """

    def __init__(self, npu_smi: NpuSmi, state_dir: Path, boot_id_file: Path, calls: VnpuCalls | None = None) -> None:
        self.npu_smi = npu_smi
        self.calls = calls if calls is not None else VnpuCalls(npu_smi, None)
        self.ledger = Ledger(state_dir / LEDGER_DIR)
        self.boot_id_file = boot_id_file
        self._recovers: bool | None = None

    async def boot_id(self) -> str:
        """The current boot id (a changed one means a reboot; whether the vNPUs of the last boot exist
        again is :meth:`recovers`)."""
        text = await anyio.to_thread.run_sync(self.boot_id_file.read_text)
        return text.strip()

    async def recovers(self) -> bool:
        """Whether the vNPUs of an earlier boot exist again: the vnpu-cfg-recover mode is enabled
        (``dcmi_get_vnpu_config_recover_mode``, else ``npu-smi info -t vnpu-cfg-recover`` says
        ``Enable``). Asked once, and only when a ledger entry of an earlier boot is met.

        When neither answers, npu-smi's documented default (``Enable``) is assumed and logged:
        assuming the opposite would refuse every restored vNPU's claim and leave the vNPU behind.
        """
        if self._recovers is None:
            try:
                self._recovers = await self.calls.recovers()
            except NpuSmiError as exc:
                logger.warning("npu-smi info -t vnpu-cfg-recover did not answer; assuming its default, Enable "
                               "(vNPUs outlive a reboot)", extra={"error": str(exc)})
                self._recovers = True
        return self._recovers

    async def _may_exist(self, entry: LedgerEntry, boot: str) -> bool:
        """Whether ``entry``'s vNPU can still be the one we made: made in this boot, or in an earlier
        one while the device restores vNPUs after a restart (:meth:`recovers`)."""
        return entry.boot_id == boot or await self.recovers()

    async def info(self, npu_id: int, chip_id: int) -> VnpuInfo:
        """The vNPUs of one chip (DCMI, else ``info -t info-vnpu``). :raises VnpuError: no tier answered."""
        try:
            return await self.calls.info(npu_id, chip_id)
        except NpuSmiError as exc:
            raise VnpuError(f"reading the vNPUs of NPU {npu_id} chip {chip_id}: {exc}") from exc

    async def check_no_vnpus(self, device: str, npu_id: int, chip_id: int) -> None:
        """:raises VnpuError: the chip holds vNPUs, so it cannot be given out whole."""
        info = await self.info(npu_id, chip_id)
        if info.vnpus:
            listed = ", ".join(f"{v.vnpu_id} ({v.template_name})" for v in info.vnpus)
            raise VnpuError(f"device {device}: NPU {npu_id} chip {chip_id} holds vNPUs {listed} that ascend-dra did "
                            "not make for this claim; a whole chip is given out only without vNPUs")

    async def create_all(self, claim_uid: str, wanted: Iterable[tuple[str, Any, Any, Any, Any]]) -> list[LedgerEntry]:
        """Create one vNPU per ``(device, npu ID, chip ID, vNPU ID, template)``; all or none.

        A vNPU that an earlier attempt of the same claim made (its ledger entry says so) is reused.
        On any failure, every vNPU this call made or reused is destroyed before the error is raised
        (a multi-device claim failing half-way leaves nothing behind).

        :raises VnpuError: naming the device, the chip and the reason.
        """
        boot = await self.boot_id()
        made: list[LedgerEntry] = []
        try:
            for device, npu_id, chip_id, vnpu_id, template in wanted:
                if not all(isinstance(v, int) and not isinstance(v, bool) for v in (npu_id, chip_id, vnpu_id)):
                    raise VnpuError(f"device {device}: no NPU ID / chip ID / vNPU ID attribute (discovered without "
                                    "npu-smi?); a vNPU can only be made on a chip npu-smi knows")
                entry = LedgerEntry(npu_id, chip_id, vnpu_id, str(template), claim_uid, device, boot)
                made.append(await self._create(entry))
        except BaseException:
            with anyio.CancelScope(shield=True):
                for entry in reversed(made):
                    try:
                        await self._destroy(entry)
                    except VnpuError as exc:  # the ledger keeps it; start-up repair retries
                        logger.error("rolling back a vNPU failed; start-up repair will retry",
                                     extra={"claim_uid": claim_uid, "vnpu_id": entry.vnpu_id, "error": str(exc)})
            raise
        return made

    async def _create(self, entry: LedgerEntry) -> LedgerEntry:
        where = (f"device {entry.device}: vNPU {entry.vnpu_id} ({entry.template}) on NPU {entry.npu_id} "
                 f"chip {entry.chip_id}")
        previous = await anyio.to_thread.run_sync(self.ledger.read, entry.npu_id, entry.chip_id, entry.vnpu_id)
        ours = previous is not None and previous.template == entry.template \
            and await self._may_exist(previous, entry.boot_id)
        if previous is not None and ours and previous.claim_uid != entry.claim_uid:
            raise VnpuError(f"{where}: the vNPU ID is held by claim {previous.claim_uid}")
        existing = self._find(await self.info(entry.npu_id, entry.chip_id), entry.vnpu_id)
        if existing is not None:
            if ours and existing == entry.template:
                logger.info("reusing a vNPU an interrupted Prepare made, or one the device restored after a reboot",
                            extra={"claim_uid": entry.claim_uid, "vnpu_id": entry.vnpu_id,
                                   "made_in_boot": previous.boot_id if previous else None})
                await anyio.to_thread.run_sync(self.ledger.write, entry)
                return entry
            raise VnpuError(f"{where}: a vNPU with that ID already exists (template {existing}) and was not "
                            "created by ascend-dra; it is left alone. Destroy it with npu-smi set -t destroy-vnpu, "
                            "or the claim stays unprepared")
        await anyio.to_thread.run_sync(self.ledger.write, entry)
        crash_point("hard-vnpu:after-ledger-write")
        try:
            tier = await self.calls.create(entry.npu_id, entry.chip_id, entry.vnpu_id, entry.template)
        except VnpuCallError as exc:
            if exc.unknown:  # it may exist: the entry stays, and the claim's rollback reads the chip back
                logger.warning("a vNPU create may have taken effect; its ledger entry is kept",
                               extra={"claim_uid": entry.claim_uid, "vnpu_id": entry.vnpu_id, "error": str(exc)})
            else:
                await anyio.to_thread.run_sync(self.ledger.remove, entry)
            raise VnpuError(f"{where}: {exc}") from exc
        crash_point("hard-vnpu:after-create")
        found = self._find(await self.info(entry.npu_id, entry.chip_id), entry.vnpu_id)
        if found != entry.template:
            raise VnpuError(f"{where}: {tier} said it was created, but the chip lists "
                            f"{'no such vNPU' if found is None else f'template {found}'}")
        logger.info("created a vNPU", extra={"claim_uid": entry.claim_uid, "vnpu_id": entry.vnpu_id,
                                             "template": entry.template, "npu_id": entry.npu_id, "tier": tier})
        return entry

    @staticmethod
    def _find(info: VnpuInfo, vnpu_id: int) -> str | None:
        """The template of vNPU ``vnpu_id`` in ``info``, or None."""
        return next((v.template_name for v in info.vnpus if v.vnpu_id == vnpu_id), None)

    async def _destroy(self, entry: LedgerEntry) -> None:
        """Destroy ``entry``'s vNPU if it exists with its template and can be ours (made in this boot,
        or restored after a reboot: :meth:`_may_exist`); drop the ledger entry.

        The ledger's own entry for that vNPU is what counts when it names the same claim: a replay
        after a reboot writes a new one before it creates the vNPU again, and the record passed in
        still holds the earlier boot's until the replay completes (a replay that failed or was
        killed after the create never updates it).
        """
        current = await anyio.to_thread.run_sync(self.ledger.read, entry.npu_id, entry.chip_id, entry.vnpu_id)
        if current is not None and current.claim_uid == entry.claim_uid:
            entry = current
        if await self._may_exist(entry, await self.boot_id()):
            found = self._find(await self.info(entry.npu_id, entry.chip_id), entry.vnpu_id)
            if found == entry.template:
                crash_point("hard-vnpu:before-destroy")
                try:
                    tier = await self.calls.destroy(entry.npu_id, entry.chip_id, entry.vnpu_id)
                except VnpuCallError as exc:
                    raise VnpuError(f"destroying vNPU {entry.vnpu_id} on NPU {entry.npu_id} chip {entry.chip_id}: "
                                    f"{exc}") from exc
                crash_point("hard-vnpu:after-destroy")
                logger.info("destroyed a vNPU", extra={"claim_uid": entry.claim_uid, "vnpu_id": entry.vnpu_id,
                                                       "tier": tier})
            elif found is not None:
                logger.warning("a vNPU with our ID but another template exists; left alone",
                               extra={"vnpu_id": entry.vnpu_id, "template": found, "claim_uid": entry.claim_uid})
        await anyio.to_thread.run_sync(self.ledger.remove, entry)

    async def destroy_claim(self, claim_uid: str) -> None:
        """Destroy every vNPU the ledger names for ``claim_uid`` (a Prepare interrupted inside
        ``prepare_side_effects``, whose record holds ``None``; idempotent).

        :raises VnpuError: npu-smi failing (the claim stays held; the rollback is retried).
        """
        for entry in await anyio.to_thread.run_sync(self.ledger.entries):
            if entry.claim_uid == claim_uid:
                await self._destroy(entry)

    async def destroy_all(self, side_effects: Any) -> None:
        """Destroy every vNPU of a ``prepare_side_effects`` record (idempotent).

        :raises VnpuError: a record that does not decode, or npu-smi failing (the claim stays held).
        """
        records = side_effects.get("vnpus", []) if isinstance(side_effects, dict) else None
        if not isinstance(records, list):
            raise VnpuError(f"hard-vNPU side effects must be {{'vnpus': [...]}}, got {side_effects!r}")
        try:
            entries = [LedgerEntry.from_json(r) for r in records]
        except ValueError as exc:
            raise VnpuError(f"hard-vNPU side effects: {exc}") from exc
        for entry in reversed(entries):
            await self._destroy(entry)

    async def reconcile(self, live: Sequence[Any]) -> None:
        """Destroy the vNPUs the ledger names that no ``live`` record names, and drop their entries.
        Entries of earlier boots are dropped without a destroy only while vnpu-cfg-recover is disabled
        (their vNPUs died with the boot); enabled, the device restored them and they are destroyed too.
        A failure is logged; the next start retries."""
        keep = set()
        for side_effects in live:
            for record in side_effects.get("vnpus", []) if isinstance(side_effects, dict) else []:
                try:
                    e = LedgerEntry.from_json(record)
                except ValueError:
                    continue
                keep.add((e.npu_id, e.chip_id, e.vnpu_id, e.claim_uid))
        for entry in await anyio.to_thread.run_sync(self.ledger.entries):
            if (entry.npu_id, entry.chip_id, entry.vnpu_id, entry.claim_uid) in keep:
                continue
            logger.warning("destroying an orphan vNPU our ledger names", extra={
                "claim_uid": entry.claim_uid, "vnpu_id": entry.vnpu_id, "npu_id": entry.npu_id})
            try:
                await self._destroy(entry)
            except VnpuError as exc:
                logger.error("orphan vNPU could not be destroyed; will retry at the next start",
                             extra={"vnpu_id": entry.vnpu_id, "error": str(exc)})
