"""Tests of the example profile, written the way a third-party profile author would write them.

They load the profile through its installed entry point (so the packaging is tested too) and use
ascend-dra's own checks: the contract check, the isolated discovery the daemon runs, and the
opaque-config decoder the daemon and the webhook run.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest
from ascend_dra_example_profile import ExampleConfig, ExampleProfile, Mode

from ascend_dra.model import AllocatedDevice
from ascend_dra.profiles import registry
from ascend_dra.profiles.base import (
    ApplyContext,
    ConfigError,
    ContainerEdits,
    DeviceNode,
    ProfileContext,
    decode_config,
)

DRIVER = "example.com"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def loaded() -> registry.LoadedProfile:
    (ep,) = [ep for ep in entry_points(group=registry.ENTRY_POINT_GROUP) if ep.name == "example"]
    result = registry.load_one(ep, log=False)
    assert result.error is None
    return result


def test_entry_point_comes_from_this_distribution(loaded: registry.LoadedProfile) -> None:
    assert (loaded.distribution, loaded.version, loaded.target) == (
        "ascend-dra-example-profile", "0.1.0", "ascend_dra_example_profile:factory")
    assert isinstance(loaded.profile, ExampleProfile)
    assert registry.contract_problems(loaded.profile, "example") == []


@pytest.mark.anyio
async def test_discovery_passes_the_daemon_checks(loaded: registry.LoadedProfile, tmp_path) -> None:
    ctx = ProfileContext(node_name="node-a", driver_name=DRIVER, fake_devices=3, state_dir=tmp_path)
    inventory = await registry.discover_isolated(loaded, ctx, timeout_s=10)
    assert [d.name for d in inventory.devices] == ["example-0", "example-1", "example-2"]
    assert inventory.source == "simulated"
    device = inventory.devices[1]
    assert device.attributes["index"] == 1
    assert device.attributes["firmwareVersion"] == "1.2.3"
    assert device.capacities["memory"].value == "8Gi"


def test_config_decodes_with_camel_case_keys() -> None:
    parameters = {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "ExampleConfig", "mode": "Shared",
                  "memoryLimitPercent": 50}
    config = decode_config(parameters, ExampleProfile.config_types, DRIVER, ExampleProfile())
    assert config == ExampleConfig(mode=Mode.SHARED, memory_limit_percent=50)


def test_config_out_of_range_names_the_field() -> None:
    parameters = {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "ExampleConfig", "memoryLimitPercent": 0}
    with pytest.raises(ConfigError) as caught:
        decode_config(parameters, ExampleProfile.config_types, DRIVER, ExampleProfile())
    assert str(caught.value) == "parameters.memoryLimitPercent: 0 is out of range 1..100 (percent of memory)"


@pytest.mark.anyio
async def test_apply_config_lists_the_request_devices(loaded: registry.LoadedProfile, tmp_path) -> None:
    profile_ctx = ProfileContext(node_name="node-a", driver_name=DRIVER, fake_devices=3, state_dir=tmp_path)
    inventory = await registry.discover_isolated(loaded, profile_ctx, timeout_s=10)
    ctx = ApplyContext(profile=profile_ctx, inventory=inventory, claim_uid="uid-1", claim_namespace="default",
                       claim_name="claim")
    devices = [AllocatedDevice(request="accel", driver=DRIVER, pool="node-a", device=name)
               for name in ("example-2", "example-0")]
    edits = ExampleProfile().apply_config(ExampleConfig(mode=Mode.SHARED), devices, ctx)
    assert edits["example-2"] == ContainerEdits(
        env=("EXAMPLE_VISIBLE_DEVICES=0,2", "EXAMPLE_MODE=Shared", "EXAMPLE_MEMORY_LIMIT_PERCENT=100"),
        device_nodes=(DeviceNode(path="/dev/example2", host_path="/dev/null"),),
    )
    assert edits["example-0"].device_nodes == (DeviceNode(path="/dev/example0", host_path="/dev/null"),)


def test_it_declares_that_it_takes_no_profile_options() -> None:
    """A README trial: without the declaration ``--profile-option example.foo=1`` started a serving
    daemon with no word about it (docs/writing-a-profile.md: ``profile_options = {}`` takes none)."""
    from ascend_dra.profiles.options import option_problems

    assert option_problems({"example.foo": "1"}, {"example": ExampleProfile()}, source="--profile-option") == [
        "--profile-option example.foo: unknown; example takes no options"]
