"""The hard-vNPU calls, DCMI first: create, destroy and list a chip's vNPUs through the DCMI worker
when the DCMI tier is loaded (:mod:`...dcmi.vnpu`), through npu-smi for any answer DCMI does not give.

Each call that falls back logs one WARNING (``DCMI vNPU call failed; npu-smi answers``, with the
call and its error) and is counted in the profile's :class:`TierRecord`, which ``ascend-dra
discover`` shows (:meth:`TierRecord.notes`). A DCMI that cannot be asked at all (resting after a
hang, a library without the vNPU calls) is logged once until it answers again.

A create or destroy that DCMI reports as failed, or that got no answer, is never repeated through
npu-smi before the chip's vNPUs are read back (docs/hard-vnpu.md#through-dcmi):

* create: the vNPU at our ID with our template is there -> it was made (an error code from a call
  that took effect, or a hang after the driver made it); nothing at our ID -> npu-smi creates it;
  the read-back fails -> nobody tries again and the outcome is unknown (:attr:`VnpuCallError.unknown`).
  The vNPU ID is always named, so a create still stuck in the driver and the npu-smi one can
  never make two vNPUs: the second finds the ID taken. When DCMI's outcome was unknown and npu-smi
  then fails, the chip is read back once more (a late DCMI create is found there).
* destroy: the vNPU is gone -> it was destroyed; still there -> npu-smi destroys it.

npu-smi commands: docs/ascend-hardware.md#npu-smi-commands (``set -t create-vnpu -i -c -f -v``,
``set -t destroy-vnpu -i -c -v``, ``info -t info-vnpu -i -c``, ``info -t vnpu-cfg-recover``).
"""

from __future__ import annotations

import logging

import attrs

from ascend_dra.profiles.ascend.dcmi.api import FUNCTION_NOT_FOUND
from ascend_dra.profiles.ascend.dcmi.client import DcmiClient, DcmiError
from ascend_dra.profiles.ascend.dcmi.vnpu import (
    DcmiCallFailed,
    create_vdevice,
    destroy_vdevice,
    list_vdevices,
    recover_mode,
)
from ascend_dra.profiles.ascend.discovery.chain import TIER_DCMI, TIER_NPU_SMI  # the tier names discovery reports
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiError, NpuSmiTimeout
from ascend_dra.profiles.ascend.npusmi.runner import NpuSmi
from ascend_dra.profiles.ascend.npusmi.tables import VnpuInfo
from ascend_dra.profiles.ascend.npusmi.vnpu_tables import Vnpu

__all__ = ("TierRecord", "VnpuCallError", "VnpuCalls")

logger = logging.getLogger(__name__)

#: The kinds of call, in the order :meth:`TierRecord.notes` names them.
KINDS = ("list", "create", "destroy", "vnpu-cfg-recover")


class VnpuCallError(Exception):
    """Raised by :meth:`VnpuCalls.create` and :meth:`VnpuCalls.destroy` when no tier did it.

    :ivar unknown: whether the vNPU may have been made (or destroyed) all the same: a call that
        got no answer, whose effect no read-back could rule out.
    """

    def __init__(self, message: str, *, unknown: bool) -> None:
        super().__init__(message)
        self.unknown = unknown


@attrs.define
class TierRecord:
    """Which tier answered each kind of vNPU call last (``list``, ``create``, ``destroy``), how often
    npu-smi answered for DCMI, and DCMI's last failure; one per profile."""

    answered: dict[str, str] = attrs.field(factory=dict)
    fallbacks: int = 0
    last_failure: str | None = None
    dcmi_down: str | None = None

    def note(self, kind: str, tier: str) -> None:
        self.answered[kind] = tier

    def notes(self) -> tuple[str, ...]:
        """``vNPU calls: list by dcmi, create by dcmi, destroy by npu-smi`` and, after a fallback,
        ``vNPU calls: npu-smi answered 1 time for DCMI; last: dcmi_create_vdevice(...): -8005 (internal error)``."""
        if not self.answered:
            return ()
        lines = ["vNPU calls: " + ", ".join(f"{k} by {self.answered[k]}" for k in KINDS if k in self.answered)]
        if self.fallbacks:
            lines.append(f"vNPU calls: npu-smi answered {self.fallbacks} time{'s' if self.fallbacks != 1 else ''} "
                         f"for DCMI; last: {self.last_failure}")
        return tuple(lines)


def _find(info: VnpuInfo, vnpu_id: int) -> str | None:
    return next((v.template_name for v in info.vnpus if v.vnpu_id == vnpu_id), None)


class VnpuCalls:
    """The vNPU calls of one profile.

    :param npu_smi: the npu-smi runner (its deadline is every call's).
    :param dcmi: the DCMI client when the DCMI tier is loaded (``libdcmi.so`` found, option ``dcmi``
        not ``never``); None: npu-smi answers everything.
    :param record: the profile's :class:`TierRecord` (a fresh one by default).
    """

    def __init__(self, npu_smi: NpuSmi, dcmi: DcmiClient | None, record: TierRecord | None = None) -> None:
        self.npu_smi = npu_smi
        self.dcmi = dcmi
        self.record = record if record is not None else TierRecord()

    def _fell_back(self, what: str, exc: Exception, **fields: object) -> None:
        """The one log line of a fallback (a DCMI that cannot be asked: once until it answers again)."""
        cannot_ask = isinstance(exc, DcmiError) or (
            isinstance(exc, DcmiCallFailed) and exc.answer.code == FUNCTION_NOT_FOUND)
        self.record.fallbacks += 1
        self.record.last_failure = str(exc)
        if cannot_ask and self.record.dcmi_down is not None:
            logger.debug("DCMI vNPU call not made; npu-smi answers", extra={"call": what, "error": str(exc)})
            return
        if cannot_ask:
            self.record.dcmi_down = str(exc)
        elif isinstance(exc, DcmiCallFailed):
            self._hung(exc)
        logger.warning("DCMI vNPU call failed; npu-smi answers",
                       extra={"call": what, "error": str(exc), "tier": TIER_NPU_SMI, **fields})

    def _hung(self, exc: DcmiCallFailed) -> None:
        """A call without an answer: DCMI rests now (:mod:`...dcmi.client`); the calls not made
        meanwhile are logged at DEBUG."""
        if not exc.answered and self.record.dcmi_down is None:
            self.record.dcmi_down = str(exc)

    def _dcmi_answered(self, kind: str) -> None:
        self.record.note(kind, TIER_DCMI)
        self.record.dcmi_down = None

    async def info(self, npu_id: int, chip_id: int, *, quiet: bool = False) -> VnpuInfo:
        """The vNPUs of one chip (DCMI, else ``npu-smi info -t info-vnpu``). From DCMI the
        ``resources`` table is empty: only the vNPUs are read.

        :param quiet: a read-back inside :meth:`create` or :meth:`destroy`, whose own fallback is the
            one logged.
        :raises NpuSmiError: DCMI did not answer and npu-smi failed.
        """
        if self.dcmi is not None:
            try:
                found = await list_vdevices(self.dcmi, npu_id, chip_id)
            except (DcmiCallFailed, DcmiError) as exc:
                if not quiet:
                    self._fell_back("list", exc, npu_id=npu_id, chip_id=chip_id)
            else:
                self._dcmi_answered("list")
                return VnpuInfo(resources={}, total=len(found), vnpus=tuple(
                    Vnpu(v.vdev_id, v.vfg_id, f"{v.container_id:012x}", v.status, v.template) for v in found))
        info = await self.npu_smi.vnpu_info(npu_id, chip_id)
        self.record.note("list", TIER_NPU_SMI)
        return info

    async def recovers(self) -> bool:
        """The vnpu-cfg-recover mode (DCMI, else ``npu-smi info -t vnpu-cfg-recover``).

        :raises NpuSmiError: DCMI did not answer and npu-smi failed.
        """
        if self.dcmi is not None:
            try:
                mode = await recover_mode(self.dcmi)
            except (DcmiCallFailed, DcmiError) as exc:
                self._fell_back("vnpu-cfg-recover", exc)
            else:
                self._dcmi_answered("vnpu-cfg-recover")
                return mode
        mode = await self.npu_smi.vnpu_cfg_recover()
        self.record.note("vnpu-cfg-recover", TIER_NPU_SMI)
        return mode

    async def _read_back(self, exc: DcmiCallFailed, npu_id: int, chip_id: int, vnpu_id: int) -> str | None:
        """After a DCMI create or destroy that failed: the template at ``vnpu_id`` now, or None.

        :raises VnpuCallError: no tier could list the chip, so nobody tries again.
        """
        self._hung(exc)
        try:
            return _find(await self.info(npu_id, chip_id, quiet=True), vnpu_id)
        except NpuSmiError as read_exc:
            raise VnpuCallError(f"DCMI: {exc}; reading the chip's vNPUs back failed ({read_exc}), so it is not "
                                "asked again through npu-smi", unknown=not exc.answered) from exc

    async def create(self, npu_id: int, chip_id: int, vnpu_id: int, template: str) -> str:
        """Make vNPU ``vnpu_id`` of ``template`` (see the module docstring for the read-back).

        :return: the tier that made it (``dcmi`` also when the read-back found DCMI's vNPU).
        :raises VnpuCallError: neither tier made it; ``unknown`` when it may exist all the same.
        """
        dcmi_unknown = False
        dcmi_failure = ""
        if self.dcmi is not None:
            try:
                await create_vdevice(self.dcmi, npu_id, chip_id, vnpu_id, template)
            except DcmiError as exc:  # nothing was called
                self._fell_back("create", exc, npu_id=npu_id, chip_id=chip_id, vnpu_id=vnpu_id)
                dcmi_failure = f"; DCMI before it: {exc}"
            except DcmiCallFailed as exc:
                dcmi_failure = f"; DCMI before it: {exc}"
                present = await self._read_back(exc, npu_id, chip_id, vnpu_id)
                if present is not None:  # made, or someone's at our ID: the caller's read-back tells
                    logger.warning("DCMI reported a vNPU create as failed, but the vNPU is there",
                                   extra={"call": "create", "error": str(exc), "template": present,
                                          "vnpu_id": vnpu_id, "tier": TIER_DCMI})
                    self.record.note("create", TIER_DCMI)
                    return TIER_DCMI
                self._fell_back("create", exc, npu_id=npu_id, chip_id=chip_id, vnpu_id=vnpu_id)
                dcmi_unknown = not exc.answered
            else:
                self._dcmi_answered("create")
                return TIER_DCMI
        try:
            await self.npu_smi.run("set", "-t", "create-vnpu", "-i", str(npu_id), "-c", str(chip_id),
                                   "-f", template, "-v", str(vnpu_id))
        except NpuSmiError as exc:
            if dcmi_unknown:  # a DCMI create still under way in the driver may have taken our ID since
                try:
                    if _find(await self.info(npu_id, chip_id, quiet=True), vnpu_id) is not None:
                        self.record.note("create", TIER_DCMI)
                        return TIER_DCMI
                except NpuSmiError:
                    pass
            raise VnpuCallError(f"npu-smi could not create it: {exc}{dcmi_failure}",
                                unknown=dcmi_unknown or isinstance(exc, NpuSmiTimeout)) from exc
        self.record.note("create", TIER_NPU_SMI)
        return TIER_NPU_SMI

    async def destroy(self, npu_id: int, chip_id: int, vnpu_id: int) -> str:
        """Destroy vNPU ``vnpu_id`` (the caller checked it is ours).

        :return: the tier that destroyed it.
        :raises VnpuCallError: it is still there, or no read-back could tell.
        """
        dcmi_failure = ""
        if self.dcmi is not None:
            try:
                await destroy_vdevice(self.dcmi, npu_id, chip_id, vnpu_id)
            except DcmiError as exc:
                self._fell_back("destroy", exc, npu_id=npu_id, chip_id=chip_id, vnpu_id=vnpu_id)
                dcmi_failure = f"; DCMI before it: {exc}"
            except DcmiCallFailed as exc:
                dcmi_failure = f"; DCMI before it: {exc}"
                present = await self._read_back(exc, npu_id, chip_id, vnpu_id)
                if present is None:
                    self.record.note("destroy", TIER_DCMI)
                    return TIER_DCMI
                self._fell_back("destroy", exc, npu_id=npu_id, chip_id=chip_id, vnpu_id=vnpu_id)
            else:
                self._dcmi_answered("destroy")
                return TIER_DCMI
        try:
            await self.npu_smi.run("set", "-t", "destroy-vnpu", "-i", str(npu_id), "-c", str(chip_id),
                                   "-v", str(vnpu_id))
        except NpuSmiError as exc:
            raise VnpuCallError(f"{exc}{dcmi_failure}", unknown=isinstance(exc, NpuSmiTimeout)) from exc
        self.record.note("destroy", TIER_NPU_SMI)
        return TIER_NPU_SMI
