"""The npu-310P and npu-910 profiles: devices from the fixtures through a real npu-smi subprocess,
container edits, and the NpuConfig opaque config."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from ascend_dra.model import AllocatedDevice, Capacity, Inventory, Version
from ascend_dra.profiles.ascend.config import LogLevel, NpuConfig
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from ascend_dra.profiles.base import (
    ApplyContext,
    ConfigError,
    ContainerEdits,
    DeviceNode,
    Mount,
    ProfileContext,
    decode_config,
)
from ascend_dra.profiles.registry import load_profiles
from tests.unit.test_ascend_discovery import ANSWERS_910A, SHARED, tree_910a
from tests.unit.test_ascend_support import dev_tree, fake_npu_smi, sys_tree

DRIVER = "ascend.project-hami.io"


def context(tmp_path: Path, exe: Path | str, dev: Path, sys_root: Path, **options: str) -> ProfileContext:
    return ProfileContext(node_name="node-a", driver_name=DRIVER, dev_root=dev, sys_root=sys_root,
                          npu_smi=str(exe), state_dir=tmp_path / "state", options=options, fake_devices=2)


def host_root(tmp_path: Path) -> Path:
    """A host tree where every driver path of docs/ascend-hardware.md#driver-paths exists."""
    root = tmp_path / "host"
    (root / "usr/local/Ascend/driver/lib64").mkdir(parents=True)
    (root / "usr/local/Ascend/driver/version.info").write_text("Version=25.5.1\n")
    (root / "usr/local/dcmi").mkdir(parents=True)
    (root / "usr/local/bin").mkdir(parents=True)
    (root / "usr/local/bin/npu-smi").write_text("")
    return root


def lab_310p3(tmp_path: Path) -> ProfileContext:
    exe = fake_npu_smi(tmp_path, {"info": "310P3_info.txt"})
    dev = dev_tree(tmp_path, ["davinci0", "davinci2", *SHARED])
    sys_root = sys_tree(tmp_path, {"0000:81:00.0": ("0x19e5", "0xd500", 0), "0000:85:00.0": ("0x19e5", "0xd500", 1)})
    return context(tmp_path, exe, dev, sys_root)


@pytest.mark.anyio
async def test_310p_profile_publishes_the_lab_host(tmp_path: Path) -> None:
    inventory = await Npu310PProfile(host_root=host_root(tmp_path)).discover(lab_310p3(tmp_path))
    assert inventory.source == "npu-smi"
    assert [d.name for d in inventory.devices] == ["npu-0-0", "npu-1-0"]
    first = inventory.devices[0]
    assert dict(first.attributes) == {
        "type": "npu", "index": 0, "physicalID": 0, "npuID": 4, "chipID": 0, "chipName": "310P3",
        "productName": "310P3", "chipFamily": "Ascend310P", "memoryType": "DDR", "numaNode": 0,
        "architecture": "Ascend310P", "brand": "Huawei",
        "pciAddress": "0000:81:00.0", "driverVersion": "25.5.1", "driverRelease": "25.5.1",
        "dvppVpc": 12, "dvppVdec": 12, "dvppJpegd": 16, "dvppJpege": 8, "dvppVenc": 3,
        "resource.kubernetes.io/numaNode": 0, "resource.kubernetes.io/pciBusID": "0000:81:00.0",
        "resource.kubernetes.io/pcieRoot": "pci0000:00",
    }
    assert type(first.attributes["driverVersion"]) is Version
    assert type(first.attributes["driverRelease"]) is str
    assert dict(first.capacities) == {"memory": Capacity("21525Mi"), "aicore": Capacity("8"), "cores": Capacity("100")}
    assert (inventory.devices[1].attributes["physicalID"], inventory.devices[1].attributes["npuID"]) == (2, 5)
    assert first.allow_multiple_allocations is False


@pytest.mark.anyio
async def test_910_profile_ignores_310p_chips(tmp_path: Path) -> None:
    inventory = await Npu910Profile().discover(lab_310p3(tmp_path))
    assert inventory == Inventory(devices=(), source="npu-smi")


@pytest.mark.anyio
async def test_910_profile_publishes_the_atlas_800_9010(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, ANSWERS_910A)
    dev, sys_root = tree_910a(tmp_path)
    inventory = await Npu910Profile().discover(context(tmp_path, exe, dev, sys_root))
    assert [d.name for d in inventory.devices] == [f"npu-{i}-0" for i in range(8)]
    assert dict(inventory.devices[0].attributes) == {
        "type": "npu", "index": 0, "physicalID": 3, "npuID": 0, "chipID": 0, "chipName": "910A",
        "productName": "910A", "chipFamily": "Ascend910", "memoryType": "HBM", "numaNode": 0,
        "architecture": "Ascend910", "brand": "Huawei",
        "pciAddress": "0000:61:00.0", "uuid": "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003",
        "driverVersion": "23.0.5", "driverRelease": "23.0.5", "hccs": True, "topologyGroup": "hccs-0",
        "cpuAffinity": "144-167",
        "resource.kubernetes.io/numaNode": 0, "resource.kubernetes.io/pciBusID": "0000:61:00.0",
        "resource.kubernetes.io/pcieRoot": "pci0000:00",
    }
    assert dict(inventory.devices[0].capacities) == {"memory": Capacity("32768Mi"), "aicore": Capacity("32"),
                                                     "cores": Capacity("100")}
    # 22.0.3.1 is not semver: published as driverRelease only, and no aicore where npu-smi did not say.
    assert "driverVersion" not in inventory.devices[1].attributes
    assert inventory.devices[1].attributes["driverRelease"] == "22.0.3.1"
    assert dict(inventory.devices[1].capacities) == {"memory": Capacity("32768Mi"), "cores": Capacity("100")}


@pytest.mark.anyio
async def test_310_four_chips_per_card_use_logic_ids_of_info_m(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, {"info": "310_info_atlas800-3000_4chips-per-card_npu-smi-21.0.4.txt",
                                  "info -m": "310_info_-m_atlas800-3000_MiniD_Mcu.txt"})
    dev = dev_tree(tmp_path, ["davinci3", "davinci4", "davinci5", "davinci6", *SHARED])
    inventory = await Npu310PProfile().discover(context(tmp_path, exe, dev, sys_tree(tmp_path, {})))
    # Names are npu-<logicID>-0 (docs/ascend-discovery.md): the chip ID is the chipID attribute.
    assert [(d.name, d.attributes["index"], d.attributes["physicalID"], d.attributes["npuID"],
             d.attributes["chipID"], d.attributes["chipFamily"], d.capacities["memory"].value)
            for d in inventory.devices] == [
        ("npu-0-0", 0, 3, 6, 0, "Ascend310", "8192Mi"), ("npu-1-0", 1, 4, 6, 1, "Ascend310", "8192Mi"),
        ("npu-2-0", 2, 5, 6, 2, "Ascend310", "8192Mi"), ("npu-3-0", 3, 6, 6, 3, "Ascend310", "8192Mi"),
    ]
    assert "aicore" not in inventory.devices[0].capacities
    assert inventory.devices[0].attributes["driverRelease"] == "21.0.4.B030"
    assert "driverVersion" not in inventory.devices[0].attributes


@pytest.mark.anyio
async def test_simulate_option_always(tmp_path: Path) -> None:
    ctx = context(tmp_path, tmp_path / "none", dev_tree(tmp_path, []), sys_tree(tmp_path, {}),
                  **{"npu-910.simulate": "always"})
    inventory = await Npu910Profile().discover(ctx)
    assert inventory.source == "simulated"
    assert [(d.name, d.attributes["chipName"], d.capacities["memory"].value) for d in inventory.devices] == [
        ("npu-0-0", "910B3", "65536Mi"), ("npu-1-0", "910B3", "65536Mi")]


@pytest.mark.anyio
async def test_bad_simulate_option_names_the_allowed_values(tmp_path: Path) -> None:
    ctx = context(tmp_path, tmp_path / "none", dev_tree(tmp_path, []), sys_tree(tmp_path, {}), simulate="yes")
    with pytest.raises(ValueError, match=r"profile option npu-310P.simulate: 'yes' is not one of never, "
                                         r"fallback, always"):
        await Npu310PProfile().discover(ctx)


# -- apply_config ---------------------------------------------------------------------------------


async def lab_inventory(tmp_path: Path) -> tuple[Npu310PProfile, ApplyContext]:
    profile = Npu310PProfile(host_root=host_root(tmp_path))
    # A daemon that sees the host's /dev at tmp_path/dev: the specs name the host's /dev/... paths.
    ctx = attrs.evolve(lab_310p3(tmp_path), dev_root_on_host=Path("/dev"))
    inventory = await profile.discover(ctx)
    return profile, ApplyContext(profile=ctx, inventory=inventory, claim_uid="uid-1", claim_namespace="ns",
                                 claim_name="claim")


def allocated(device: str, request: str = "npu") -> AllocatedDevice:
    return AllocatedDevice(request=request, driver=DRIVER, pool="node-a", device=device)


MOUNTS = (
    Mount("/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/lib64"),
    Mount("/usr/local/Ascend/driver/version.info", "/usr/local/Ascend/driver/version.info"),
)
TOOLS = (Mount("/usr/local/dcmi", "/usr/local/dcmi"), Mount("/usr/local/bin/npu-smi", "/usr/local/bin/npu-smi"))
SHARED_NODES = (DeviceNode("/dev/davinci_manager"), DeviceNode("/dev/devmm_svm"), DeviceNode("/dev/hisi_hdc"))


@pytest.mark.anyio
async def test_apply_config_two_chips_in_one_request_see_physical_ids(tmp_path: Path) -> None:
    profile, ctx = await lab_inventory(tmp_path)
    edits = profile.apply_config(None, [allocated("npu-0-0"), allocated("npu-1-0")], ctx)
    assert edits == {
        "npu-0-0": ContainerEdits(env=("ASCEND_VISIBLE_DEVICES=0,2",),
                                  device_nodes=(DeviceNode("/dev/davinci0"), *SHARED_NODES), mounts=MOUNTS + TOOLS),
        "npu-1-0": ContainerEdits(env=("ASCEND_VISIBLE_DEVICES=0,2",),
                                  device_nodes=(DeviceNode("/dev/davinci2"), *SHARED_NODES), mounts=MOUNTS + TOOLS),
    }


@pytest.mark.anyio
async def test_apply_config_separate_requests_and_config(tmp_path: Path) -> None:
    profile, ctx = await lab_inventory(tmp_path)
    config = NpuConfig(log_level=LogLevel.WARNING, log_to_stdout=True, mount_tools=False)
    edits = profile.apply_config(config, [allocated("npu-0-0", "a"), allocated("npu-1-0", "b/sub")], ctx)
    assert edits["npu-0-0"].env == ("ASCEND_VISIBLE_DEVICES=0", "ASCEND_GLOBAL_LOG_LEVEL=2",
                                    "ASCEND_SLOG_PRINT_TO_STDOUT=1")
    assert edits["npu-1-0"].env == ("ASCEND_VISIBLE_DEVICES=2", "ASCEND_GLOBAL_LOG_LEVEL=2",
                                    "ASCEND_SLOG_PRINT_TO_STDOUT=1")
    assert edits["npu-1-0"].mounts == MOUNTS


@pytest.mark.anyio
async def test_apply_config_names_mandatory_nodes_even_when_missing_and_only_present_optional_ones(
        tmp_path: Path) -> None:
    # A missing mandatory node stays in the edits: DeviceState then refuses the Prepare naming it
    # (tests/unit/test_state_answers.py), instead of a spec that silently lacks it.
    profile = Npu310PProfile(host_root=tmp_path / "empty-host")
    ctx = attrs.evolve(lab_310p3(tmp_path), dev_root_on_host=Path("/dev"))
    (ctx.dev_root / "hisi_hdc").unlink()
    (ctx.dev_root / "dvpp_cmdlist").touch()
    inventory = await profile.discover(ctx)
    apply_ctx = ApplyContext(profile=ctx, inventory=inventory, claim_uid="u", claim_namespace="n", claim_name="c")
    edits = profile.apply_config(None, [allocated("npu-1-0")], apply_ctx)
    assert edits["npu-1-0"] == ContainerEdits(
        env=("ASCEND_VISIBLE_DEVICES=2",),
        device_nodes=(DeviceNode("/dev/davinci2"), DeviceNode("/dev/davinci_manager"), DeviceNode("/dev/devmm_svm"),
                      DeviceNode("/dev/hisi_hdc"), DeviceNode("/dev/dvpp_cmdlist")))


@pytest.mark.anyio
async def test_apply_config_simulated_chip_is_backed_by_dev_null(tmp_path: Path) -> None:
    profile = Npu910Profile(host_root=tmp_path / "empty-host")
    ctx = context(tmp_path, tmp_path / "none", dev_tree(tmp_path, []), sys_tree(tmp_path, {}), simulate="always")
    inventory = await profile.discover(ctx)
    apply_ctx = ApplyContext(profile=ctx, inventory=inventory, claim_uid="u", claim_namespace="n", claim_name="c")
    edits = profile.apply_config(None, [allocated("npu-1-0")], apply_ctx)
    assert edits["npu-1-0"] == ContainerEdits(env=("ASCEND_VISIBLE_DEVICES=1",),
                                              device_nodes=(DeviceNode("/dev/davinci1", host_path="/dev/null"),))


@pytest.mark.anyio
async def test_apply_config_unknown_device_is_an_error(tmp_path: Path) -> None:
    profile, ctx = await lab_inventory(tmp_path)
    with pytest.raises(ValueError, match="device npu-9-0 is not in the inventory"):
        profile.apply_config(None, [allocated("npu-9-0")], ctx)


# -- NpuConfig ------------------------------------------------------------------------------------


def test_npu_config_decodes_camel_case() -> None:
    profile = Npu910Profile()
    config = decode_config({"apiVersion": f"{DRIVER}/v1alpha1", "kind": "NpuConfig", "logLevel": "debug",
                            "logToStdout": True, "mountTools": False}, profile.config_types, DRIVER, profile)
    assert config == NpuConfig(log_level=LogLevel.DEBUG, log_to_stdout=True, mount_tools=False)
    empty = decode_config({"apiVersion": f"{DRIVER}/v1alpha1", "kind": "NpuConfig"}, profile.config_types,
                          DRIVER, profile)
    assert empty == profile.default_config() == NpuConfig(log_level=LogLevel.INHERIT, log_to_stdout=False,
                                                          mount_tools=True)


def test_npu_config_rejects_unknown_fields_and_values() -> None:
    profile = Npu310PProfile()
    with pytest.raises(ConfigError) as caught:
        decode_config({"apiVersion": f"{DRIVER}/v1alpha1", "kind": "NpuConfig", "mountTool": True},
                      profile.config_types, DRIVER, profile)
    assert caught.value.problems == (
        ("parameters", "unknown field(s) mountTool; allowed fields: logLevel, logToStdout, mountTools"),)
    with pytest.raises(ConfigError) as caught:
        decode_config({"apiVersion": f"{DRIVER}/v1alpha1", "kind": "NpuConfig", "logLevel": "verbose"},
                      profile.config_types, DRIVER, profile)
    assert caught.value.problems == (
        ("parameters.logLevel", "'verbose' is not one of inherit, debug, info, warning, error, null"),)


def test_validate_names_every_wrong_field() -> None:
    with pytest.raises(ConfigError) as caught:
        Npu910Profile().validate(NpuConfig(log_level="loud", log_to_stdout="yes", mount_tools=1))  # type: ignore[arg-type]
    assert caught.value.problems == (
        ("logLevel", "'loud' is not one of inherit, debug, info, warning, error, null"),
        ("logToStdout", "'yes' is not true or false"),
        ("mountTools", "1 is not true or false"),
    )


def test_entry_points_load_both_profiles() -> None:
    loaded = load_profiles(["npu-310P", "npu-910"], log=False)
    assert [(entry.name, type(entry.profile).__name__, entry.error) for entry in loaded] == [
        ("npu-310P", "Npu310PProfile", None), ("npu-910", "Npu910Profile", None)]
