"""The profile author's API: ascend_dra.profiles.base. Its __all__ is pinned so the contract cannot
grow or shrink by accident; change this list only with docs/writing-a-profile.md."""

from ascend_dra.model import AllocatedDevice
from ascend_dra.profiles import base

PUBLIC = (
    "API_VERSION_SUFFIX", "AllocatedDevice", "ApplyContext", "Capacity", "CapacityRequestPolicy", "ConfigError",
    "ContainerEdits", "CounterConsumption", "CounterSet", "Device", "DeviceNode", "DeviceReading", "DeviceTaint",
    "Inventory",
    "Mount", "Profile", "ProfileContext", "ProfileOption", "Version", "absolute_path", "config_converter",
    "decode_config", "parse_quantity", "path_option", "simulate_option", "visible_per_request",
)


def test_the_public_names_are_exactly_the_documented_ones():
    assert tuple(base.__all__) == PUBLIC
    assert all(hasattr(base, name) for name in PUBLIC)


def result(request: str, device: str) -> AllocatedDevice:
    return AllocatedDevice(request=request, driver="d", pool="p", device=device)


def test_visible_per_request_groups_by_base_request_and_sorts():
    devices = [result("a", "npu-3-0"), result("b/small", "npu-0-0"), result("a", "npu-1-0"), result("b/big", "npu-2-0")]
    physical = {"npu-3-0": 7, "npu-0-0": 4, "npu-1-0": 5, "npu-2-0": 0}
    assert base.visible_per_request(devices, lambda d: physical[d.device]) == {"a": "5,7", "b": "0,4"}
    by_name = base.visible_per_request(devices, lambda d: f"uuid-{d.device}", order=lambda d: physical[d.device])
    assert by_name == {"a": "uuid-npu-1-0,uuid-npu-3-0", "b": "uuid-npu-2-0,uuid-npu-0-0"}
