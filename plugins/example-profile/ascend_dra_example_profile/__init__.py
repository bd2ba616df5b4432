"""An example third-party ascend-dra profile: simulated "Example X1" accelerators.

Read it beside ``docs/writing-a-profile.md`` in the ascend-dra repository. It is registered in
this distribution's ``pyproject.toml``::

    [project.entry-points."ascend_dra.profiles"]
    example = "ascend_dra_example_profile:factory"

Devices: ``ctx.fake_devices`` accelerators named ``example-<index>``, with attributes ``type``
(``"example"``), ``uuid``, ``index``, ``model`` and ``firmwareVersion`` (a Version), and the
capacity ``memory`` (8 GiB each, in bytes as a Quantity). Opaque config ``kind: ExampleConfig``
(``mode``, ``memoryLimitPercent``) becomes container env; each device also gets a device node
``/dev/example<index>`` backed by ``/dev/null``.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence

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
    ProfileContext,
    Version,
    visible_per_request,
)

__all__ = ("ExampleConfig", "ExampleProfile", "Mode", "factory")

__version__ = "0.1.0"

_UUID_NAMESPACE = uuid.UUID("c3d2a6f4-1b8e-4f7a-9e35-7a41d9b0e2c8")
MEMORY_BYTES = 8 * 2**30
FIRMWARE_VERSION = Version("1.2.3")


class Mode(enum.StrEnum):
    """``ExampleConfig.mode``: whether the container may share the accelerator."""

    EXCLUSIVE = "Exclusive"
    SHARED = "Shared"


@attrs.frozen
class ExampleConfig:
    """Opaque config ``kind: ExampleConfig`` (apiVersion ``<driver-name>/v1alpha1``).

    :ivar mode: env ``EXAMPLE_MODE``.
    :ivar memory_limit_percent: percent of the device memory the container may use, 1..100
        (wire name ``memoryLimitPercent``; env ``EXAMPLE_MEMORY_LIMIT_PERCENT``).
    """

    mode: Mode = Mode.EXCLUSIVE
    memory_limit_percent: int = 100


class ExampleProfile:
    """Simulated Example X1 accelerators; see the module docstring."""

    name = "example"
    cdi_class = "example"
    config_types: Mapping[str, type] = {"ExampleConfig": ExampleConfig}
    #: It reads no ``--profile-option``: an empty map says so, and ``example.<key>=...`` then stops
    #: start-up naming the key (docs/writing-a-profile.md, section 3), instead of being ignored.
    profile_options: Mapping[str, object] = {}

    def default_config(self) -> ExampleConfig:
        """Exclusive use of the whole memory."""
        return ExampleConfig()

    async def discover(self, ctx: ProfileContext) -> Inventory:
        """Return ``ctx.fake_devices`` simulated accelerators.

        A real profile reads sysfs or runs a tool here; blocking work goes to a worker thread
        (``abandon_on_cancel=True``, so the daemon's discovery timeout can give up on it).
        """
        devices = await anyio.to_thread.run_sync(_devices, ctx.node_name, ctx.fake_devices, abandon_on_cancel=True)
        return Inventory(devices=devices, source="simulated")

    def validate(self, config: ExampleConfig) -> None:
        """:raises ConfigError: if ``memoryLimitPercent`` is outside 1..100."""
        if not 1 <= config.memory_limit_percent <= 100:
            raise ConfigError.at(
                "memoryLimitPercent", f"{config.memory_limit_percent} is out of range 1..100 (percent of memory)"
            )

    def apply_config(
        self, config: ExampleConfig, devices: Sequence[AllocatedDevice], ctx: ApplyContext
    ) -> Mapping[str, ContainerEdits]:
        """Per device: its device node and env; ``EXAMPLE_VISIBLE_DEVICES`` lists the request's indices."""
        index = {d.name: int(d.attributes["index"]) for d in ctx.inventory.devices}
        visible = visible_per_request(devices, lambda d: index[d.device])
        edits = {}
        for device in devices:
            edits[device.device] = ContainerEdits(
                env=(
                    f"EXAMPLE_VISIBLE_DEVICES={visible[device.base_request]}",
                    f"EXAMPLE_MODE={config.mode}",
                    f"EXAMPLE_MEMORY_LIMIT_PERCENT={config.memory_limit_percent}",
                ),
                device_nodes=(DeviceNode(path=f"/dev/example{index[device.device]}", host_path="/dev/null"),),
            )
        return edits


def _devices(node_name: str, count: int) -> tuple[Device, ...]:
    return tuple(
        Device(
            name=f"example-{i}",
            attributes={
                "type": "example",
                "uuid": str(uuid.uuid5(_UUID_NAMESPACE, f"{node_name}/{i}")),
                "index": i,
                "model": "Example X1",
                "firmwareVersion": FIRMWARE_VERSION,
            },
            capacities={"memory": Capacity(f"{MEMORY_BYTES // 2**30}Gi")},
        )
        for i in range(count)
    )


def factory() -> ExampleProfile:
    """Entry point ``example`` of group ``ascend_dra.profiles``."""
    return ExampleProfile()
