"""The ``fake`` profile: simulated Ascend NPUs, so the whole chain runs on a laptop with no NPU.

Devices ``npu-<index>-0`` (one chip per simulated card) with the attributes of a real chip
(``type``, ``uuid``, ``index``, ``productName``, ``chipName``) and capacities ``memory`` (bytes
of HBM, a Quantity) and ``cores`` (percent of the chip's AI cores). UUIDs are derived from the
node name and the index, so they are stable across restarts and differ between nodes.

Container edits mirror what the ``npu-910`` profile injects, pointed at harmless host files:
device node ``/dev/davinci<index>`` backed by ``/dev/null``, the simulated driver directory
mounted read-only at ``/usr/local/Ascend/driver``, and ``ASCEND_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
import attrs

from ascend_dra.profiles.base import (
    AllocatedDevice,
    ApplyContext,
    Capacity,
    ConfigError,
    ContainerEdits,
    Device,
    DeviceNode,
    Inventory,
    Mount,
    ProfileContext,
    visible_per_request,
)

__all__ = ("FakeConfig", "FakeProfile", "LogLevel", "factory")

#: uuid5 namespace of simulated devices (fixed, so UUIDs are reproducible).
_UUID_NAMESPACE = uuid.UUID("6f0d8a52-7c1e-4c43-9d0e-2b9a3c1f5e10")
#: 64 GiB of HBM per simulated chip, as on an Ascend 910B3 (``npu-smi info``: 65536 MB of HBM per chip).
FAKE_MEMORY_BYTES = 64 * 2**30
DRIVER_MOUNT = "/usr/local/Ascend/driver"

log = logging.getLogger(__name__)


class LogLevel(enum.StrEnum):
    """Allowed ``FakeConfig.logLevel`` values, mapped to CANN's ``ASCEND_GLOBAL_LOG_LEVEL`` 0..3."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


_LOG_LEVEL_NUMBER = {LogLevel.DEBUG: 0, LogLevel.INFO: 1, LogLevel.WARNING: 2, LogLevel.ERROR: 3}


@attrs.frozen
class FakeConfig:
    """Opaque config ``kind: FakeConfig`` (apiVersion ``<driver-name>/v1alpha1``).

    :ivar aicore_limit: percent of the chip's AI cores the workload may use, 1..100
        (env ``FAKE_NPU_AICORE_LIMIT``).
    :ivar log_level: CANN log level for the container (env ``ASCEND_GLOBAL_LOG_LEVEL``).
    """

    aicore_limit: int = 100
    log_level: LogLevel = LogLevel.INFO


class FakeProfile:
    """Simulated NPUs; see the module docstring."""

    name = "fake"
    cdi_class = "npu"
    config_types: Mapping[str, type] = {"FakeConfig": FakeConfig}
    #: The fake profile reads no ``--profile-option`` (its device count is ``--fake-devices``).
    profile_options: Mapping[str, object] = {}

    def default_config(self) -> FakeConfig:
        return FakeConfig()

    async def discover(self, ctx: ProfileContext) -> Inventory:
        """Return ``ctx.fake_devices`` simulated chips and create the simulated driver directory."""
        driver_dir = ctx.state_dir / "fake-driver"
        await anyio.to_thread.run_sync(_write_driver_dir, driver_dir)
        # Built off the loop: a benchmark's 1,300 devices took 10-20 ms of CPU, each rediscovery.
        devices = await anyio.to_thread.run_sync(
            lambda: tuple(_device(ctx.node_name, i) for i in range(ctx.fake_devices)), abandon_on_cancel=True)
        return Inventory(devices=devices, source="simulated")

    async def health(self, ctx: ProfileContext, inventory: Inventory) -> Mapping[str, bool | None]:
        """Simulated health: a file ``<state dir>/fake-health/<device>`` holding ``unhealthy`` or
        ``unknown`` (any case) marks that device so, ``healthy`` or nothing clears it; any other word
        marks it unknown, with a WARNING naming the file. A device without a file is healthy."""
        # (mark file, word) already named in a WARNING; made here, so a subclass's __init__ need not
        warned: set[tuple[str, str]] = self.__dict__.setdefault("_warned", set())
        return await anyio.to_thread.run_sync(_read_health, ctx.state_dir / "fake-health", inventory, warned)

    def validate(self, config: FakeConfig) -> None:
        """:raises ConfigError: if ``aicoreLimit`` is outside 1..100."""
        if not 1 <= config.aicore_limit <= 100:
            raise ConfigError.at("aicoreLimit", f"{config.aicore_limit} is outside the allowed range 1..100 (percent)")

    def apply_config(
        self, config: FakeConfig, devices: Sequence[AllocatedDevice], ctx: ApplyContext
    ) -> Mapping[str, ContainerEdits]:
        """Per device: its davinci node, the driver mount, and the env of its request.

        ``ASCEND_VISIBLE_DEVICES`` lists every device of the same request, so the devices a
        container receives together agree on it.
        """
        index = {d.device: int(ctx.inventory.device(d.device).attributes["index"]) for d in devices}
        visible = visible_per_request(devices, lambda d: index[d.device])
        driver = Mount(host_path=str(ctx.profile.state_dir / "fake-driver"), container_path=DRIVER_MOUNT)
        edits = {}
        for device in devices:
            edits[device.device] = ContainerEdits(
                env=(
                    f"ASCEND_VISIBLE_DEVICES={visible[device.base_request]}",
                    f"FAKE_NPU_AICORE_LIMIT={config.aicore_limit}",
                    f"ASCEND_GLOBAL_LOG_LEVEL={_LOG_LEVEL_NUMBER[config.log_level]}",
                ),
                device_nodes=(DeviceNode(path=f"/dev/davinci{index[device.device]}", host_path="/dev/null"),),
                mounts=(driver,),
            )
        return edits


def _device(node_name: str, index: int) -> Device:
    return Device(
        name=f"npu-{index}-0",
        attributes={
            "type": "npu",
            "uuid": str(uuid.uuid5(_UUID_NAMESPACE, f"{node_name}/{index}")),
            "index": index,
            "productName": "Simulated Ascend 910B3",
            "chipName": "910B3",
        },
        capacities={"memory": Capacity(f"{FAKE_MEMORY_BYTES // 2**30}Gi"), "cores": Capacity("100")},
    )


#: The words of a fake-health mark, read in any case; an empty mark is ``healthy``.
_MARKS: Mapping[str, bool | None] = {"healthy": True, "unhealthy": False, "unknown": None}


def _read_health(directory: Path, inventory: Inventory, warned: set[tuple[str, str]]) -> dict[str, bool | None]:
    """Each device's mark; a word not in :data:`_MARKS` is unknown (a typo must not read as
    healthy), named in one WARNING per file and word (``warned`` remembers which)."""
    health: dict[str, bool | None] = {}
    for device in inventory.devices:
        path = directory / device.name
        try:
            word = path.read_text().strip().lower() or "healthy"
        except FileNotFoundError:
            health[device.name] = True
            continue
        if word not in _MARKS and (str(path), word) not in warned:
            warned.add((str(path), word))
            log.warning("a fake-health mark holds a word it does not know; the device is reported unknown",
                        extra={"file": str(path), "word": word, "allowed": ", ".join(_MARKS)})
        health[device.name] = _MARKS.get(word)
    return health


def _write_driver_dir(driver_dir: Path) -> None:
    driver_dir.mkdir(parents=True, exist_ok=True)
    version = driver_dir / "version.info"
    if not version.exists():
        version.write_text("Version=simulated\n")


def factory() -> FakeProfile:
    """Entry point ``fake`` of group ``ascend_dra.profiles``."""
    return FakeProfile()
