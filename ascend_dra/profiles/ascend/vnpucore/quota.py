"""A HAMivNPUCore allocation's share of a chip, from its ``consumedCapacity``, and the limiter's env.

Inputs (KEP-5075, gate ``DRAConsumableCapacity``): the scheduler writes, for every result on a
device with ``allowMultipleAllocations``, ``consumedCapacity`` = what the claim asked for rounded up
to the request policy's step, or the policy's default for a capacity it did not ask for. So
``memory`` is bytes (a Quantity; ``8Gi`` for HAMi's ``-memory: 8192``) and ``cores`` percent.

Env of the limiter (docs/ascend-hardware.md#vnpu-core-environment):

* ``NPU_MEM_QUOTA`` -- **MiB**, ``floor(bytes / 2**20)`` (the peer's integer division). With a
  ``1Mi`` step the scheduler only books whole MiB, so flooring never gives the container more
  than was booked. A share below 1 MiB is refused: ``0`` means *unlimited* to hami-vnpu-core.
* ``NPU_PRIORITY`` -- the ``cores`` share in percent, as a decimal number (the limiter parses a float).
* ``ASCEND_VISIBLE_DEVICES`` -- physical IDs in allocation order; ``NPU_GLOBAL_SHM_PATH`` --
  ``/hami-shared-region/<first physical ID>_global_registry`` (identical for every container on
  that chip); ``NPU_LOCAL_SHM_PATH`` -- ``/hami-vnpu-shmem/vnpu_local_shmem``.

The limiter takes **one** quota per container. When the devices of one request consume different
amounts, ``NPU_MEM_QUOTA`` and ``NPU_PRIORITY`` are the smallest share among them (no chip is
allowed more than the scheduler booked on it), and ``ASCEND_DRA_NPU_MEM_QUOTAS`` /
``ASCEND_DRA_NPU_PRIORITIES`` list every device's share in ``ASCEND_VISIBLE_DEVICES`` order.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

import attrs

from ascend_dra.model import AllocatedDevice, in_unit, parse_quantity, unit_of
from ascend_dra.profiles.ascend.vnpucore.host import CONTAINER_LOCAL_DIR, CONTAINER_SHARED_REGION

__all__ = ("GATE", "REQUIRED_CAPACITIES", "Share", "limiter_env", "metadata_attributes", "share_of")

#: The feature gate that makes the scheduler write ``consumedCapacity``.
GATE = "DRAConsumableCapacity"
#: Capacities a result must carry in ``consumedCapacity``.
REQUIRED_CAPACITIES = ("memory", "cores")
_MIB = 2**20


@attrs.frozen
class Share:
    """One allocation's share of one chip: memory in **MiB**, cores in **percent**."""

    memory_mib: int
    cores_percent: Decimal


def share_of(device: AllocatedDevice) -> Share:
    """Read ``device.consumed_capacity``.

    :raises ValueError: naming the feature gate when ``memory`` or ``cores`` is missing (the
        scheduler or API server runs without it), or naming the capacity when a value is not a
        Quantity or the memory share is below 1 MiB.
    """
    consumed = device.consumed_capacity
    missing = [name for name in REQUIRED_CAPACITIES if name not in consumed]
    if missing:
        raise ValueError(
            f"device {device.device} (request {device.request}) was allocated without consumedCapacity "
            f"{', '.join(missing)}: enable the feature gate {GATE} on kube-apiserver, kube-scheduler, "
            "kube-controller-manager and the kubelet, then recreate the claim")
    values = {}
    for name in REQUIRED_CAPACITIES:
        try:
            values[name] = parse_quantity(consumed[name])
        except ValueError as exc:
            raise ValueError(f"device {device.device}: consumedCapacity {name}: {exc}") from None
    memory_mib = int(values["memory"] // _MIB)
    if memory_mib < 1:
        below = in_unit(_MIB, unit_of(consumed["memory"]))  # in the unit the allocation gave
        raise ValueError(f"device {device.device}: consumedCapacity memory {consumed['memory']} is below {below}; "
                         "NPU_MEM_QUOTA=0 would mean unlimited to hami-vnpu-core")
    if values["cores"] <= 0:
        raise ValueError(f"device {device.device}: consumedCapacity cores {consumed['cores']} must be above 0 "
                         "(percent of the chip)")
    return Share(memory_mib=memory_mib, cores_percent=values["cores"])


def _number(value: Decimal) -> str:
    """``Decimal("50")`` -> ``"50"``, ``Decimal("12.5")`` -> ``"12.5"`` (no exponent)."""
    return format(value.normalize(), "f")


def limiter_env(devices: Sequence[AllocatedDevice], physical_ids: Sequence[int]) -> tuple[str, ...]:
    """The env of one request's container: see the module docstring.

    :param devices: the request's results, in allocation order.
    :param physical_ids: their chips' physical IDs, same order.
    :raises ValueError: from :func:`share_of`.
    """
    shares = [share_of(d) for d in devices]
    env = [
        f"ASCEND_VISIBLE_DEVICES={','.join(str(p) for p in physical_ids)}",
        f"NPU_MEM_QUOTA={min(s.memory_mib for s in shares)}",
        f"NPU_PRIORITY={_number(min(s.cores_percent for s in shares))}",
        f"NPU_GLOBAL_SHM_PATH={CONTAINER_SHARED_REGION}/{physical_ids[0]}_global_registry",
        f"NPU_LOCAL_SHM_PATH={CONTAINER_LOCAL_DIR}/vnpu_local_shmem",
    ]
    if len(shares) > 1:
        env.append(f"ASCEND_DRA_NPU_MEM_QUOTAS={','.join(str(s.memory_mib) for s in shares)}")
        env.append(f"ASCEND_DRA_NPU_PRIORITIES={','.join(_number(s.cores_percent) for s in shares)}")
    return tuple(env)


def metadata_attributes(device: AllocatedDevice) -> dict[str, int | str]:
    """What a share tells its container in the device metadata file (KEP-5304): ``memoryQuotaMiB``, the
    MiB booked on this chip (``NPU_MEM_QUOTA`` when the request has one chip), and ``coresQuotaPercent``,
    the percent of its AI cores (``NPU_PRIORITY``): an int, or the decimal as a string when the booking
    is not whole (a ``cores`` step other than 1).

    :raises ValueError: from :func:`share_of`.
    """
    share = share_of(device)
    cores = share.cores_percent
    return {"memoryQuotaMiB": share.memory_mib,
            "coresQuotaPercent": int(cores) if cores == cores.to_integral_value() else _number(cores)}
