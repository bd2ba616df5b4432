"""DCMI's vNPU calls, the daemon's side: create, destroy and list the hard vNPUs of one chip
through the DCMI worker (:class:`.client.DcmiClient`), each call under its deadline.

The calls npu-smi itself makes for ``set -t create-vnpu``, ``set -t destroy-vnpu`` and ``info -t
info-vnpu`` (the driver's npu-smi source, ``npu_chip_set``; facts of ``dcmi_interface_api.h``):

* ``dcmi_create_vdevice(card, device, {vdev_id, vfg_id 0, template_name}, &out)``; ascend-dra always
  names the vNPU ID (never :data:`.api.VDEV_ID_ANY`), so the driver refuses a second vNPU at that ID
  and a retried create can never make two (docs/hard-vnpu.md#through-dcmi);
* ``dcmi_set_destroy_vdevice(card, device, vdev_id)``;
* ``dcmi_get_device_info(card, device, DCMI_MAIN_CMD_VDEV_MNG, DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE)``
  for the chip's vNPU IDs, then ``..._GET_VDEV_RESOURCE`` per ID for its template name and group: two
  round trips to the worker per listing;
* ``dcmi_get_vnpu_config_recover_mode(&mode)`` for ``info -t vnpu-cfg-recover`` (1: the vNPUs outlive
  a restart).

``card`` is npu-smi's NPU ID (``-i``), ``device`` the chip ID (``-c``). Knows DCMI, not the ledger
nor npu-smi: :mod:`...hardvnpu.calls` chooses the tier and falls back.
"""

from __future__ import annotations

import attrs

from ascend_dra.profiles.ascend.dcmi.api import MAIN_CMD_VDEV_MNG, VMNG_GET_TOTAL_RESOURCE, VMNG_GET_VDEV_RESOURCE
from ascend_dra.profiles.ascend.dcmi.client import Answer, DcmiClient

__all__ = ("DcmiCallFailed", "Vdevice", "create_vdevice", "destroy_vdevice", "list_vdevices", "recover_mode")


class DcmiCallFailed(Exception):
    """Raised when a vNPU call returned an error code or no answer.

    :ivar answer: the call and what came back (``answer.code`` None: no answer, the worker was
        killed or died, so whether a create or destroy took effect is unknown).
    """

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.describe())
        self.answer = answer

    @property
    def answered(self) -> bool:
        """Whether the call returned (an error code), rather than hung or lost its worker."""
        return self.answer.code is not None


@attrs.frozen
class Vdevice:
    """One vNPU as ``dcmi_get_device_info`` gives it: ``vdev_id`` (the vNPU ID), ``template`` (the
    header's ``name``, at most 15 characters), ``vfg_id`` (its group; npu-smi's ``Vgroup ID``),
    ``status`` and ``container_id`` (npu-smi's ``Status`` and ``Container ID``)."""

    vdev_id: int
    template: str
    vfg_id: int
    status: int
    container_id: int


def _checked(answer: Answer) -> object:
    if not answer.ok:
        raise DcmiCallFailed(answer)
    return answer.value


async def create_vdevice(client: DcmiClient, card: int, device: int, vdev_id: int, template: str) -> int:
    """Create vNPU ``vdev_id`` of ``template`` on chip ``device`` of NPU ``card``.

    :return: the vNPU's group (``vfg_id``).
    :raises DcmiCallFailed: an error code, or no answer (the create may have happened).
    :raises DcmiError: DCMI cannot be asked (nothing was called).
    """
    (answer,) = await client.call([("dcmi_create_vdevice", card, device, vdev_id, template)])
    value = _checked(answer)
    assert isinstance(value, dict)
    return int(value["vfg_id"])


async def destroy_vdevice(client: DcmiClient, card: int, device: int, vdev_id: int) -> None:
    """Destroy vNPU ``vdev_id`` on chip ``device`` of NPU ``card``.

    :raises DcmiCallFailed: an error code, or no answer (the destroy may have happened).
    :raises DcmiError: DCMI cannot be asked (nothing was called).
    """
    (answer,) = await client.call([("dcmi_set_destroy_vdevice", card, device, vdev_id)])
    _checked(answer)


async def list_vdevices(client: DcmiClient, card: int, device: int) -> list[Vdevice]:
    """The vNPUs of chip ``device`` of NPU ``card``, by vNPU ID.

    :raises DcmiCallFailed: a query returned an error code (``-8255``: the chip has no vNPUs to
        give) or did not answer.
    :raises DcmiError: DCMI cannot be asked.
    """
    (total,) = await client.call([("dcmi_get_device_info", card, device, MAIN_CMD_VDEV_MNG, VMNG_GET_TOTAL_RESOURCE)])
    value = _checked(total)
    assert isinstance(value, dict)
    ids = sorted(int(i) for i in value["vdev_id"])
    answers = await client.call([("dcmi_get_device_info", card, device, MAIN_CMD_VDEV_MNG, VMNG_GET_VDEV_RESOURCE, i)
                                 for i in ids])
    found = []
    for answer in answers:
        info = _checked(answer)
        assert isinstance(info, dict)
        found.append(Vdevice(int(info["vdev_id"]), str(info["name"]), int(info["vfg_id"]), int(info["status"]),
                             int(info["container_id"])))
    return found


async def recover_mode(client: DcmiClient) -> bool:
    """Whether the node restores its vNPUs after a restart (``dcmi_get_vnpu_config_recover_mode``: 1).

    :raises DcmiCallFailed: an error code (``-8255``: not on this chip or in SMP mode) or no answer.
    :raises DcmiError: DCMI cannot be asked.
    """
    (answer,) = await client.call([("dcmi_get_vnpu_config_recover_mode",)])
    return _checked(answer) == 1
