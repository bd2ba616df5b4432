"""The ``gpu`` profile: NVIDIA GPUs through NVML, or simulated GPUs when asked for.

Devices are ``gpu-<index>`` with the attributes the NVIDIA and example DRA drivers publish
(docs/architecture.md#reference-drivers): ``type`` = ``"gpu"``, ``uuid`` (``GPU-<uuid>``),
``index``, ``minor`` (of ``/dev/nvidia<minor>``), ``productName``, ``architecture``,
``driverVersion`` and ``cudaComputeCapability`` (both :class:`~ascend_dra.model.Version`), and
the capacity ``memory`` (bytes of device memory, a Quantity such as ``"40Gi"``).

Discovery has two tiers (``Inventory.source``): ``nvml``, through the ``pynvml`` module (the extra
``ascend-dra[gpu]``, package ``nvidia-ml-py``), and ``simulated`` (``ProfileContext.fake_devices``
GPUs modelled on an A100-SXM4-40GB, UUIDs derived from the node name and index). As for the Ascend
profiles, the profile option ``gpu.simulate`` (or ``simulate``) picks: ``never`` (the default: NVML
only; without pynvml the profile refuses to start, naming the extra; a node where NVML cannot
initialise publishes no GPU), ``fallback`` (simulated GPUs when pynvml is missing or NVML cannot
initialise) or ``always`` (simulated GPUs, NVML not asked). Every NVML call runs in a worker thread.

Opaque config ``kind: GpuConfig`` (apiVersion ``<driver-name>/v1alpha1``) selects how the
workloads that share a GPU are scheduled, as in the example driver's ``GpuConfig``:
time slicing with an interval (the default), or space partitioning into N partitions.
The choice reaches the container as env (``GPU_SHARING_STRATEGY``, ``GPU_TIMESLICE_INTERVAL``,
``GPU_PARTITION_COUNT``); nothing on the node is reconfigured.
"""

from __future__ import annotations

import enum
import logging
import re
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

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
    ProfileOption,
    Version,
    simulate_option,
    visible_per_request,
)

__all__ = (
    "MAX_PARTITION_COUNT",
    "GpuConfig",
    "GpuProfile",
    "GpuSharing",
    "SharingStrategy",
    "SpacePartitioningConfig",
    "TimeSliceInterval",
    "TimeSlicingConfig",
    "bytes_quantity",
    "factory",
    "semver",
)

logger = logging.getLogger(__name__)

#: uuid5 namespace of simulated GPUs (fixed, so UUIDs are reproducible and differ per node).
_UUID_NAMESPACE = uuid.UUID("0b7f5c1e-93a4-4d2b-8f61-5d0c2e7a9b34")
#: Simulated GPUs are modelled on the NVIDIA A100-SXM4-40GB (compute capability 8.0, Ampere).
SIMULATED_PRODUCT = "Simulated NVIDIA A100-SXM4-40GB"
SIMULATED_ARCHITECTURE = "Ampere"
SIMULATED_COMPUTE_CAPABILITY = Version("8.0.0")
SIMULATED_DRIVER_VERSION = Version("550.54.15")
SIMULATED_MEMORY_BYTES = 40 * 2**30
#: At most 7 partitions, the most GPU instances a MIG-capable GPU offers (A100, H100).
MAX_PARTITION_COUNT = 7


# -- allowed values -------------------------------------------------------------------------------


class SharingStrategy(enum.StrEnum):
    """``GpuConfig.sharing.strategy``: how workloads sharing one GPU are kept apart."""

    TIME_SLICING = "TimeSlicing"
    SPACE_PARTITIONING = "SpacePartitioning"


class TimeSliceInterval(enum.StrEnum):
    """``GpuConfig.sharing.timeSlicingConfig.interval``: the length of a time slice.

    The names of the example driver and of ``nvidia-smi compute-policy --set-timeslice``
    (default, short, medium, long).
    """

    DEFAULT = "Default"
    SHORT = "Short"
    MEDIUM = "Medium"
    LONG = "Long"


# -- config kinds ---------------------------------------------------------------------------------


@attrs.frozen
class TimeSlicingConfig:
    """``sharing.timeSlicingConfig``: ``interval`` (default ``Default``)."""

    interval: TimeSliceInterval = TimeSliceInterval.DEFAULT


@attrs.frozen
class SpacePartitioningConfig:
    """``sharing.spacePartitioningConfig``: ``partitionCount``, 1..:data:`MAX_PARTITION_COUNT` (default 1)."""

    partition_count: int = 1


@attrs.frozen
class GpuSharing:
    """``sharing``: a strategy and at most the sub-config that belongs to it.

    A missing sub-config means its defaults; the sub-config of the other strategy is an error
    (reported by :meth:`GpuProfile.validate`).
    """

    strategy: SharingStrategy = SharingStrategy.TIME_SLICING
    time_slicing_config: TimeSlicingConfig | None = None
    space_partitioning_config: SpacePartitioningConfig | None = None


@attrs.frozen
class GpuConfig:
    """Opaque config ``kind: GpuConfig`` (apiVersion ``<driver-name>/v1alpha1``).

    Example parameters::

        {"apiVersion": "gpu.example.com/v1alpha1", "kind": "GpuConfig",
         "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}

    The default, ``GpuConfig()``, is time slicing with interval ``Default``.
    """

    sharing: GpuSharing = attrs.Factory(GpuSharing)


# -- the profile ----------------------------------------------------------------------------------


class GpuProfile:
    """NVIDIA GPUs (NVML) or simulated GPUs; see the module docstring."""

    name = "gpu"
    cdi_class = "gpu"
    config_types: Mapping[str, type] = {"GpuConfig": GpuConfig}
    profile_options: Mapping[str, ProfileOption] = {"simulate": simulate_option()}

    def simulate_mode(self, options: Mapping[str, str]) -> str:
        """``never``, ``fallback`` or ``always`` from ``gpu.simulate`` (or ``simulate``); default ``never``.

        :raises ValueError: naming the option and the allowed values.
        """
        raw = options.get(f"{self.name}.simulate", options.get("simulate", "never"))
        problem = self.profile_options["simulate"].problem(raw)
        if problem is not None:
            raise ValueError(f"profile option {self.name}.simulate: {problem}")
        return raw

    def preflight(self, options: Mapping[str, str]) -> None:
        """Before start-up: NVML discovery needs pynvml.

        :raises RuntimeError: ``simulate`` is ``never`` and ``pynvml`` does not import; the message
            names the extra to install and the option that simulates instead.
        """
        if self.simulate_mode(options) == "never" and not _has_pynvml():
            raise RuntimeError(_MISSING_PYNVML)

    def default_config(self) -> GpuConfig:
        """Time slicing with interval ``Default``."""
        return GpuConfig()

    async def discover(self, ctx: ProfileContext) -> Inventory:
        """Return the node's GPUs from NVML, or ``ctx.fake_devices`` simulated ones (``simulate`` option).

        With ``simulate=fallback``, simulates (with an INFO log line giving the reason) when
        ``pynvml`` is not installed or NVML cannot initialise (no driver); with ``never`` the first
        is an error and the second an empty inventory (INFO line with the reason). An NVML error
        after a successful ``nvmlInit`` is raised: a node with a driver whose GPUs cannot be read is
        broken, and publishing simulated GPUs there would mislead the scheduler.

        :returns: an :class:`Inventory` with ``source`` ``"nvml"`` or ``"simulated"``.
        :raises RuntimeError: ``simulate=never`` and pynvml is not installed (names the extra).
        :raises ValueError: a ``simulate`` value that is not never, fallback or always.
        """
        mode = self.simulate_mode(ctx.options)
        if mode == "always":
            return _simulated(ctx, "profile option simulate=always")
        try:
            import pynvml  # optional extra "gpu" (nvidia-ml-py)
        except ImportError:
            if mode == "never":
                raise RuntimeError(_MISSING_PYNVML) from None
            return _simulated(ctx, "the pynvml module (extra 'ascend-dra[gpu]', package nvidia-ml-py) is not installed")
        try:
            await anyio.to_thread.run_sync(pynvml.nvmlInit, abandon_on_cancel=True)
        except pynvml.NVMLError as exc:
            if mode == "never":
                logger.info("gpu discovery found no NVIDIA driver; no GPU published",
                            extra={"profile": self.name, "tier": "nvml", "reason": f"NVML could not initialise: {exc}",
                                   "devices": 0})
                return Inventory(devices=(), source="nvml")
            return _simulated(ctx, f"NVML could not initialise: {exc}")
        try:
            devices = await anyio.to_thread.run_sync(_nvml_devices, pynvml, abandon_on_cancel=True)
        finally:
            await anyio.to_thread.run_sync(_shutdown, pynvml, abandon_on_cancel=True)
        logger.info("gpu discovery", extra={"profile": self.name, "tier": "nvml", "devices": len(devices)})
        return Inventory(devices=tuple(devices), source="nvml")

    def validate(self, config: GpuConfig) -> None:
        """Check that the sharing sub-config matches the strategy and the partition count is in range.

        :raises ConfigError: one problem per fault, e.g.
            ``sharing.timeSlicingConfig: not allowed with strategy SpacePartitioning (use
            spacePartitioningConfig)``.
        """
        sharing = config.sharing
        problems = []
        if sharing.strategy is SharingStrategy.TIME_SLICING and sharing.space_partitioning_config is not None:
            problems.append(("sharing.spacePartitioningConfig",
                             "not allowed with strategy TimeSlicing (use timeSlicingConfig)"))
        if sharing.strategy is SharingStrategy.SPACE_PARTITIONING and sharing.time_slicing_config is not None:
            problems.append(("sharing.timeSlicingConfig",
                             "not allowed with strategy SpacePartitioning (use spacePartitioningConfig)"))
        partitioning = sharing.space_partitioning_config
        if partitioning is not None and not 1 <= partitioning.partition_count <= MAX_PARTITION_COUNT:
            problems.append(("sharing.spacePartitioningConfig.partitionCount",
                             f"{partitioning.partition_count} is out of range 1..{MAX_PARTITION_COUNT} "
                             "(partitions per GPU)"))
        if problems:
            raise ConfigError(problems)

    def apply_config(
        self, config: GpuConfig, devices: Sequence[AllocatedDevice], ctx: ApplyContext
    ) -> Mapping[str, ContainerEdits]:
        """Per device: its ``/dev/nvidia<minor>`` node, ``NVIDIA_VISIBLE_DEVICES`` and the sharing env.

        ``NVIDIA_VISIBLE_DEVICES`` lists the UUIDs of every device of the same base request, by
        index, so the devices one container receives agree on it. Simulated devices get their
        node from ``/dev/null``; NVML devices also get ``/dev/nvidiactl``, which CUDA opens first.

        :returns: ``{device name: ContainerEdits}`` for every device in ``devices``.
        """
        known = {d.name: d for d in ctx.inventory.devices}
        visible = visible_per_request(devices, lambda a: known[a.device].attributes["uuid"],
                                      order=lambda a: int(known[a.device].attributes["index"]))
        sharing_env = _sharing_env(config.sharing)
        simulated = ctx.inventory.source != "nvml"
        edits = {}
        for allocated in devices:
            device = known[allocated.device]
            node_path = f"/dev/nvidia{device.attributes['minor']}"
            if simulated:
                nodes = (DeviceNode(path=node_path, host_path="/dev/null"),)
            else:
                nodes = (ctx.profile.device_node(node_path), ctx.profile.device_node("nvidiactl"))
            edits[allocated.device] = ContainerEdits(
                env=(f"NVIDIA_VISIBLE_DEVICES={visible[allocated.base_request]}", *sharing_env),
                device_nodes=nodes,
            )
        return edits


def _sharing_env(sharing: GpuSharing) -> tuple[str, ...]:
    if sharing.strategy is SharingStrategy.SPACE_PARTITIONING:
        partitioning = sharing.space_partitioning_config or SpacePartitioningConfig()
        return (f"GPU_SHARING_STRATEGY={sharing.strategy}", f"GPU_PARTITION_COUNT={partitioning.partition_count}")
    slicing = sharing.time_slicing_config or TimeSlicingConfig()
    return (f"GPU_SHARING_STRATEGY={sharing.strategy}", f"GPU_TIMESLICE_INTERVAL={slicing.interval}")


# -- discovery ------------------------------------------------------------------------------------

_MISSING_PYNVML = ("profile gpu needs the pynvml module: pip install 'ascend-dra[gpu]' (package nvidia-ml-py), or "
                   "pass --profile-option gpu.simulate=always for simulated GPUs")


def _has_pynvml() -> bool:
    import importlib.util

    if "pynvml" in sys.modules:
        return sys.modules["pynvml"] is not None
    return importlib.util.find_spec("pynvml") is not None


def _simulated(ctx: ProfileContext, reason: str) -> Inventory:
    logger.info("gpu discovery falls back to simulated GPUs",
                extra={"profile": "gpu", "tier": "simulated", "reason": reason, "devices": ctx.fake_devices})
    return Inventory(devices=tuple(_simulated_device(ctx.node_name, i) for i in range(ctx.fake_devices)),
                     source="simulated")


def _simulated_device(node_name: str, index: int) -> Device:
    return Device(
        name=f"gpu-{index}",
        attributes={
            "type": "gpu",
            "uuid": f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node_name}/{index}')}",
            "index": index,
            "minor": index,
            "productName": SIMULATED_PRODUCT,
            "architecture": SIMULATED_ARCHITECTURE,
            "driverVersion": SIMULATED_DRIVER_VERSION,
            "cudaComputeCapability": SIMULATED_COMPUTE_CAPABILITY,
        },
        capacities={"memory": Capacity(bytes_quantity(SIMULATED_MEMORY_BYTES))},
    )


#: ``nvmlDeviceGetArchitecture`` values (``NVML_DEVICE_ARCH_*`` in nvml.h) -> architecture names.
_ARCHITECTURES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere",
                  8: "Ada", 9: "Hopper", 10: "Blackwell"}


def semver(text: str) -> Version:
    """Turn an NVIDIA version string into semver 2.0.0: ``"535.104.05"`` -> ``"535.104.5"``, ``"8.0"`` -> ``"8.0.0"``.

    :raises ValueError: if ``text`` does not start with a number.
    """
    parts = re.findall(r"\d+", text.strip())
    if not parts or not text.strip()[:1].isdigit():
        raise ValueError(f"{text!r} is not a dotted version number")
    numbers = [str(int(p)) for p in parts[:3]]
    return Version(".".join(numbers + ["0"] * (3 - len(numbers))))


def bytes_quantity(memory_bytes: int) -> str:
    """Write a byte count as a Quantity with the largest exact binary suffix: 42949672960 -> ``"40Gi"``."""
    for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if memory_bytes and memory_bytes % factor == 0:
            return f"{memory_bytes // factor}{suffix}"
    return str(memory_bytes)


def _text(value: Any) -> str:
    # nvidia-ml-py returns bytes before 11.515 and str after.
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_devices(pynvml: Any) -> list[Device]:
    """Read every GPU through NVML (blocking; runs in a worker thread, after ``nvmlInit``)."""
    driver_version = semver(_text(pynvml.nvmlSystemGetDriverVersion()))
    devices = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        major, minor_cc = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        try:
            architecture = _ARCHITECTURES.get(pynvml.nvmlDeviceGetArchitecture(handle), "Unknown")
        except pynvml.NVMLError:
            architecture = "Unknown"
        devices.append(Device(
            name=f"gpu-{index}",
            attributes={
                "type": "gpu",
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "index": index,
                "minor": int(pynvml.nvmlDeviceGetMinorNumber(handle)),
                "productName": _text(pynvml.nvmlDeviceGetName(handle))[:64],
                "architecture": architecture,
                "driverVersion": driver_version,
                "cudaComputeCapability": Version(f"{int(major)}.{int(minor_cc)}.0"),
            },
            capacities={"memory": Capacity(bytes_quantity(int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)))},
        ))
    return devices


def _shutdown(pynvml: Any) -> None:
    try:
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        logger.debug("nvmlShutdown failed", exc_info=True)


def factory() -> GpuProfile:
    """Entry point ``gpu`` of group ``ascend_dra.profiles``."""
    return GpuProfile()
