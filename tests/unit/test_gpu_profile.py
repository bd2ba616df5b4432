"""The gpu profile: simulated and NVML discovery, GpuConfig decoding and validation, container edits."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from ascend_dra.model import AllocatedDevice, ClaimAllocation, OpaqueConfig
from ascend_dra.profiles import gpu
from ascend_dra.profiles.base import (
    ApplyContext,
    Capacity,
    ConfigError,
    ContainerEdits,
    DeviceNode,
    Inventory,
    ProfileContext,
    Version,
    decode_config,
)
from ascend_dra.profiles.checks import inventory_problems
from ascend_dra.profiles.gpu import (
    GpuConfig,
    GpuSharing,
    SharingStrategy,
    SpacePartitioningConfig,
    TimeSliceInterval,
    TimeSlicingConfig,
)

DRIVER = "gpu.example.com"
API_VERSION = f"{DRIVER}/v1alpha1"


@pytest.fixture
def ctx(tmp_path: Path) -> ProfileContext:
    """Simulation allowed as a fallback (``gpu.simulate=fallback``)."""
    return ProfileContext(node_name="node-a", driver_name=DRIVER, fake_devices=3, state_dir=tmp_path,
                          options={"gpu.simulate": "fallback"})


@pytest.fixture
def never(ctx: ProfileContext) -> ProfileContext:
    """No ``simulate`` option: the default, never."""
    return attrs.evolve(ctx, options={})


@pytest.fixture
def no_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError


class FakeNVMLError(Exception):
    pass


def fake_pynvml(init: Callable[[], None] | None = None) -> types.ModuleType:
    """A pynvml stand-in with two GPUs (an A100 80GB and an H100), as nvidia-ml-py 12 returns them."""
    gpus = [
        {"uuid": "GPU-4a1c0a2e-0c7e-6d8b-2f6a-5f3d9d6a1b01", "name": "NVIDIA A100-SXM4-80GB", "minor": 2,
         "cc": (8, 0), "arch": 7, "memory": 80 * 2**30},
        {"uuid": "GPU-9b2d1c3f-1d8f-7e9c-3a7b-6a4e0e7b2c02", "name": "NVIDIA H100 80GB HBM3", "minor": 3,
         "cc": (9, 0), "arch": 42, "memory": 85899345920 + 2**20},
    ]
    module = types.ModuleType("pynvml")
    module.NVMLError = FakeNVMLError  # type: ignore[attr-defined]
    calls: list[str] = []
    module.calls = calls  # type: ignore[attr-defined]

    def nvml_init() -> None:
        calls.append("init")
        if init is not None:
            init()

    module.nvmlInit = nvml_init  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    module.nvmlSystemGetDriverVersion = lambda: "535.104.05"  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: len(gpus)  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]  # type: ignore[attr-defined]
    module.nvmlDeviceGetUUID = lambda h: h["uuid"]  # type: ignore[attr-defined]
    module.nvmlDeviceGetName = lambda h: h["name"].encode()  # bytes, as nvidia-ml-py < 11.515 returns
    module.nvmlDeviceGetMinorNumber = lambda h: h["minor"]  # type: ignore[attr-defined]
    module.nvmlDeviceGetCudaComputeCapability = lambda h: h["cc"]  # type: ignore[attr-defined]
    module.nvmlDeviceGetArchitecture = lambda h: h["arch"]  # type: ignore[attr-defined]
    module.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=h["memory"], free=0, used=0)
    return module


def apply_ctx(profile_ctx: ProfileContext, inventory: Inventory) -> ApplyContext:
    return ApplyContext(profile=profile_ctx, inventory=inventory, claim_uid="3f1c", claim_namespace="default",
                        claim_name="train")


def allocated(request: str, device: str) -> AllocatedDevice:
    return AllocatedDevice(request=request, driver=DRIVER, pool="node-a", device=device)


def decode(parameters: dict[str, Any]) -> Any:
    profile = gpu.factory()
    return decode_config(parameters, profile.config_types, DRIVER, profile)


def decode_error(parameters: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        decode(parameters)
    return str(caught.value)


# -- discovery ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_without_pynvml_discovery_simulates_gpus_and_says_why(ctx, no_pynvml, caplog) -> None:
    caplog.set_level("INFO", logger="ascend_dra.profiles.gpu")
    inventory = await gpu.factory().discover(ctx)
    assert inventory.source == "simulated"
    assert [d.name for d in inventory.devices] == ["gpu-0", "gpu-1", "gpu-2"]
    device = inventory.devices[1]
    uuid = device.attributes["uuid"]
    assert isinstance(uuid, str) and uuid.startswith("GPU-") and len(uuid) == 40
    assert {k: v for k, v in device.attributes.items() if k != "uuid"} == {
        "type": "gpu", "index": 1, "minor": 1, "productName": "Simulated NVIDIA A100-SXM4-40GB",
        "architecture": "Ampere", "driverVersion": "550.54.15", "cudaComputeCapability": "8.0.0",
    }
    assert isinstance(device.attributes["driverVersion"], Version)
    assert isinstance(device.attributes["cudaComputeCapability"], Version)
    assert device.capacities == {"memory": Capacity("40Gi")}
    assert inventory_problems(inventory) == []
    (record,) = [r for r in caplog.records if r.name == "ascend_dra.profiles.gpu"]
    assert record.getMessage() == "gpu discovery falls back to simulated GPUs"
    assert (record.tier, record.devices, record.reason) == (
        "simulated", 3, "the pynvml module (extra 'ascend-dra[gpu]', package nvidia-ml-py) is not installed")


@pytest.mark.anyio
async def test_by_default_no_gpu_is_simulated_and_a_missing_pynvml_names_the_extra(never, no_pynvml) -> None:
    profile = gpu.factory()
    assert profile.profile_options["simulate"].choices == ("never", "fallback", "always")
    with pytest.raises(RuntimeError) as raised:
        await profile.discover(never)
    assert str(raised.value) == (
        "profile gpu needs the pynvml module: pip install 'ascend-dra[gpu]' (package nvidia-ml-py), or pass "
        "--profile-option gpu.simulate=always for simulated GPUs")
    with pytest.raises(RuntimeError, match=r"ascend-dra\[gpu\]"):
        profile.preflight({})
    profile.preflight({"gpu.simulate": "fallback"})  # asked for: simulated GPUs need no pynvml
    profile.preflight({"simulate": "always"})


@pytest.mark.anyio
async def test_by_default_a_node_without_an_nvidia_driver_publishes_no_gpu(never, monkeypatch, caplog) -> None:
    def fail() -> None:
        raise FakeNVMLError("Driver Not Loaded")

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init=fail))
    caplog.set_level("INFO", logger="ascend_dra.profiles.gpu")
    inventory = await gpu.factory().discover(never)
    assert (inventory.source, inventory.devices) == ("nvml", ())
    (record,) = [r for r in caplog.records if r.name == "ascend_dra.profiles.gpu"]
    assert record.reason == "NVML could not initialise: Driver Not Loaded"
    gpu.factory().preflight({})  # pynvml imports: the driver is looked for at discovery


@pytest.mark.anyio
async def test_simulate_always_ignores_nvml(ctx, monkeypatch) -> None:
    module = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    inventory = await gpu.factory().discover(attrs.evolve(ctx, options={"gpu.simulate": "always"}))
    assert (inventory.source, len(inventory.devices)) == ("simulated", 3)
    assert module.calls == []


@pytest.mark.anyio
async def test_simulated_uuids_are_stable_per_node_and_differ_between_nodes(ctx, no_pynvml) -> None:
    profile = gpu.factory()
    first = await profile.discover(ctx)
    again = await profile.discover(ctx)
    other = await profile.discover(attrs.evolve(ctx, node_name="node-b"))
    uuids = [d.attributes["uuid"] for d in first.devices]
    assert uuids == [d.attributes["uuid"] for d in again.devices]
    assert set(uuids).isdisjoint(d.attributes["uuid"] for d in other.devices)
    assert len(set(uuids)) == 3


@pytest.mark.anyio
async def test_nvml_without_a_driver_falls_back_to_simulation(ctx, monkeypatch, caplog) -> None:
    def fail() -> None:
        raise FakeNVMLError("Driver Not Loaded")

    module = fake_pynvml(init=fail)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    caplog.set_level("INFO", logger="ascend_dra.profiles.gpu")
    inventory = await gpu.factory().discover(ctx)
    assert (inventory.source, len(inventory.devices)) == ("simulated", 3)
    (record,) = [r for r in caplog.records if r.name == "ascend_dra.profiles.gpu"]
    assert record.reason == "NVML could not initialise: Driver Not Loaded"
    assert module.calls == ["init"]


@pytest.mark.anyio
async def test_nvml_discovery_reads_every_gpu(ctx, monkeypatch) -> None:
    module = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    inventory = await gpu.factory().discover(ctx)
    assert inventory.source == "nvml"
    assert [(d.name, dict(d.attributes), dict(d.capacities)) for d in inventory.devices] == [
        ("gpu-0", {"type": "gpu", "uuid": "GPU-4a1c0a2e-0c7e-6d8b-2f6a-5f3d9d6a1b01", "index": 0, "minor": 2,
                   "productName": "NVIDIA A100-SXM4-80GB", "architecture": "Ampere", "driverVersion": "535.104.5",
                   "cudaComputeCapability": "8.0.0"},
         {"memory": Capacity("80Gi")}),
        ("gpu-1", {"type": "gpu", "uuid": "GPU-9b2d1c3f-1d8f-7e9c-3a7b-6a4e0e7b2c02", "index": 1, "minor": 3,
                   "productName": "NVIDIA H100 80GB HBM3", "architecture": "Unknown", "driverVersion": "535.104.5",
                   "cudaComputeCapability": "9.0.0"},
         {"memory": Capacity("81921Mi")}),
    ]
    assert inventory_problems(inventory) == []
    assert module.calls == ["init", "shutdown"]


@pytest.mark.parametrize(("text", "expected"), [
    ("535.104.05", "535.104.5"), ("550.54.15", "550.54.15"), ("470.82", "470.82.0"), ("8.0", "8.0.0"),
    ("12", "12.0.0"),
])
def test_nvidia_versions_become_semver(text: str, expected: str) -> None:
    assert gpu.semver(text) == expected


def test_a_version_without_a_number_is_refused() -> None:
    with pytest.raises(ValueError, match="'N/A' is not a dotted version number"):
        gpu.semver("N/A")


@pytest.mark.parametrize(("memory_bytes", "expected"), [
    (40 * 2**30, "40Gi"), (2**40, "1Ti"), (81921 * 2**20, "81921Mi"), (1000, "1000"), (0, "0"),
])
def test_memory_is_written_with_the_largest_exact_binary_suffix(memory_bytes: int, expected: str) -> None:
    assert gpu.bytes_quantity(memory_bytes) == expected


# -- GpuConfig decoding and validation ------------------------------------------------------------


def test_the_default_config_is_time_slicing_with_the_default_interval() -> None:
    assert gpu.factory().default_config() == GpuConfig(GpuSharing(SharingStrategy.TIME_SLICING))
    assert decode({"apiVersion": API_VERSION, "kind": "GpuConfig"}) == GpuConfig()


def test_time_slicing_decodes() -> None:
    config = decode({"apiVersion": API_VERSION, "kind": "GpuConfig",
                     "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}})
    assert config == GpuConfig(GpuSharing(SharingStrategy.TIME_SLICING, TimeSlicingConfig(TimeSliceInterval.LONG)))


def test_space_partitioning_decodes() -> None:
    config = decode({"apiVersion": API_VERSION, "kind": "GpuConfig",
                     "sharing": {"strategy": "SpacePartitioning", "spacePartitioningConfig": {"partitionCount": 4}}})
    assert config == GpuConfig(GpuSharing(SharingStrategy.SPACE_PARTITIONING,
                                          space_partitioning_config=SpacePartitioningConfig(4)))


def test_an_unknown_field_names_the_allowed_fields() -> None:
    assert decode_error({"apiVersion": API_VERSION, "kind": "GpuConfig",
                         "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"intervall": "Long"}}}) == (
        "parameters.sharing.timeSlicingConfig: unknown field(s) intervall; allowed fields: interval")
    assert decode_error({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"mode": "x"}}) == (
        "parameters.sharing: unknown field(s) mode; allowed fields: strategy, timeSlicingConfig, "
        "spacePartitioningConfig")


def test_a_wrong_kind_lists_the_known_kinds() -> None:
    assert decode_error({"apiVersion": API_VERSION, "kind": "NpuConfig"}) == (
        "parameters.kind: 'NpuConfig' is not one of GpuConfig")


def test_a_wrong_api_version_names_ours() -> None:
    assert decode_error({"apiVersion": "gpu.resource.example.com/v1alpha1", "kind": "GpuConfig"}) == (
        "parameters.apiVersion: 'gpu.resource.example.com/v1alpha1' is not 'gpu.example.com/v1alpha1'")


def test_a_bad_interval_lists_the_intervals() -> None:
    assert decode_error({"apiVersion": API_VERSION, "kind": "GpuConfig",
                         "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Fast"}}}) == (
        "parameters.sharing.timeSlicingConfig.interval: 'Fast' is not one of Default, Short, Medium, Long")


def test_a_bad_strategy_lists_the_strategies() -> None:
    assert decode_error({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "MPS"}}) == (
        "parameters.sharing.strategy: 'MPS' is not one of TimeSlicing, SpacePartitioning")


def test_the_sub_config_of_the_other_strategy_is_refused() -> None:
    assert decode_error({"apiVersion": API_VERSION, "kind": "GpuConfig",
                         "sharing": {"strategy": "SpacePartitioning",
                                     "timeSlicingConfig": {"interval": "Short"}}}) == (
        "parameters.sharing.timeSlicingConfig: not allowed with strategy SpacePartitioning "
        "(use spacePartitioningConfig)")
    assert decode_error({"apiVersion": API_VERSION, "kind": "GpuConfig",
                         "sharing": {"spacePartitioningConfig": {"partitionCount": 2}}}) == (
        "parameters.sharing.spacePartitioningConfig: not allowed with strategy TimeSlicing (use timeSlicingConfig)")


@pytest.mark.parametrize("count", [0, 8, -1])
def test_the_partition_count_is_bounded(count: int) -> None:
    assert decode_error({"apiVersion": API_VERSION, "kind": "GpuConfig",
                         "sharing": {"strategy": "SpacePartitioning",
                                     "spacePartitioningConfig": {"partitionCount": count}}}) == (
        f"parameters.sharing.spacePartitioningConfig.partitionCount: {count} is out of range 1..7 "
        "(partitions per GPU)")


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        decode({"apiVersion": API_VERSION, "kind": "GpuConfig",
                "sharing": {"strategy": "SpacePartitioning", "timeSlicingConfig": {},
                            "spacePartitioningConfig": {"partitionCount": 9}}})
    assert caught.value.problems == (
        ("parameters.sharing.timeSlicingConfig",
         "not allowed with strategy SpacePartitioning (use spacePartitioningConfig)"),
        ("parameters.sharing.spacePartitioningConfig.partitionCount", "9 is out of range 1..7 (partitions per GPU)"),
    )


# -- container edits ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_simulated_edits_use_dev_null_and_group_uuids_by_request(ctx, no_pynvml) -> None:
    inventory = await gpu.factory().discover(ctx)
    uuid = {d.name: d.attributes["uuid"] for d in inventory.devices}
    devices = [allocated("train/big", "gpu-2"), allocated("train/small", "gpu-0"), allocated("eval", "gpu-1")]
    edits = gpu.factory().apply_config(GpuConfig(), devices, apply_ctx(ctx, inventory))
    assert edits == {
        "gpu-2": ContainerEdits(
            env=(f"NVIDIA_VISIBLE_DEVICES={uuid['gpu-0']},{uuid['gpu-2']}", "GPU_SHARING_STRATEGY=TimeSlicing",
                 "GPU_TIMESLICE_INTERVAL=Default"),
            device_nodes=(DeviceNode(path="/dev/nvidia2", host_path="/dev/null"),)),
        "gpu-0": ContainerEdits(
            env=(f"NVIDIA_VISIBLE_DEVICES={uuid['gpu-0']},{uuid['gpu-2']}", "GPU_SHARING_STRATEGY=TimeSlicing",
                 "GPU_TIMESLICE_INTERVAL=Default"),
            device_nodes=(DeviceNode(path="/dev/nvidia0", host_path="/dev/null"),)),
        "gpu-1": ContainerEdits(
            env=(f"NVIDIA_VISIBLE_DEVICES={uuid['gpu-1']}", "GPU_SHARING_STRATEGY=TimeSlicing",
                 "GPU_TIMESLICE_INTERVAL=Default"),
            device_nodes=(DeviceNode(path="/dev/nvidia1", host_path="/dev/null"),)),
    }
    for name, device_edits in edits.items():
        assert device_edits.problems(name) == []


@pytest.mark.anyio
async def test_nvml_edits_use_the_real_minor_and_nvidiactl(ctx, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    inventory = await gpu.factory().discover(ctx)
    config = GpuConfig(GpuSharing(SharingStrategy.SPACE_PARTITIONING,
                                  space_partitioning_config=SpacePartitioningConfig(3)))
    edits = gpu.factory().apply_config(config, [allocated("gpu", "gpu-1")], apply_ctx(ctx, inventory))
    assert edits == {"gpu-1": ContainerEdits(
        env=("NVIDIA_VISIBLE_DEVICES=GPU-9b2d1c3f-1d8f-7e9c-3a7b-6a4e0e7b2c02",
             "GPU_SHARING_STRATEGY=SpacePartitioning", "GPU_PARTITION_COUNT=3"),
        device_nodes=(DeviceNode(path="/dev/nvidia3"), DeviceNode(path="/dev/nvidiactl")))}


@pytest.mark.parametrize(("sharing", "env"), [
    ({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Medium"}},
     ("GPU_SHARING_STRATEGY=TimeSlicing", "GPU_TIMESLICE_INTERVAL=Medium")),
    ({"strategy": "TimeSlicing"}, ("GPU_SHARING_STRATEGY=TimeSlicing", "GPU_TIMESLICE_INTERVAL=Default")),
    ({"strategy": "SpacePartitioning"}, ("GPU_SHARING_STRATEGY=SpacePartitioning", "GPU_PARTITION_COUNT=1")),
])
def test_sharing_env_follows_the_config(ctx, sharing: dict[str, Any], env: tuple[str, ...]) -> None:
    inventory = Inventory(devices=(gpu._simulated_device("node-a", 0),), source="simulated")
    config = decode({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": sharing})
    edits = gpu.factory().apply_config(config, [allocated("gpu", "gpu-0")], apply_ctx(ctx, inventory))
    assert edits["gpu-0"].env[1:] == env


# -- precedence: the claim's config wins over the class's (state.resolve_configs) -----------------


def test_a_claim_config_wins_over_a_class_config(ctx) -> None:
    from ascend_dra.state.devicestate import resolve_configs

    class_config = OpaqueConfig(source="FromClass", requests=(), driver=DRIVER, index=1, parameters={
        "apiVersion": API_VERSION, "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}})
    claim_config = OpaqueConfig(source="FromClaim", requests=("train",), driver=DRIVER, index=0, parameters={
        "apiVersion": API_VERSION, "kind": "GpuConfig",
        "sharing": {"strategy": "SpacePartitioning", "spacePartitioningConfig": {"partitionCount": 2}}})
    results = (allocated("train", "gpu-0"), allocated("eval", "gpu-1"))
    # The claim config comes first in status.allocation.devices.config and still wins.
    claim = ClaimAllocation("3f1c", "default", "train", results, (claim_config, class_config))
    profile = gpu.factory()
    inventory = Inventory(devices=tuple(gpu._simulated_device("node-a", i) for i in range(2)), source="simulated")
    env = {}
    for result in results:
        chosen = resolve_configs(claim, result, profile.config_types)
        assert chosen is not None
        config = decode_config(chosen.parameters, profile.config_types, DRIVER, profile)
        env[result.device] = profile.apply_config(config, [result], apply_ctx(ctx, inventory))[result.device].env[1:]
    assert env == {
        "gpu-0": ("GPU_SHARING_STRATEGY=SpacePartitioning", "GPU_PARTITION_COUNT=2"),  # claim config, for "train"
        "gpu-1": ("GPU_SHARING_STRATEGY=TimeSlicing", "GPU_TIMESLICE_INTERVAL=Long"),  # class config only
    }
