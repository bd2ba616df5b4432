"""slices.py: devices and counter sets as resource.k8s.io/v1 ResourceSlice objects for the node's pool."""

from __future__ import annotations

import anyio
import pytest

from ascend_dra.cluster.slices import (
    MAX_COUNTER_SETS_PER_SLICE,
    MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS,
    build_slices,
    build_slices_stepwise,
    device_to_api,
    keep_taint_times,
    slice_content,
    slice_generate_name,
)
from ascend_dra.model import (
    Capacity,
    CapacityRequestPolicy,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceTaint,
    Inventory,
    Version,
)

DRIVER = "ascend.project-hami.io"
NODE = "node-1"


# -- device_to_api ----------------------------------------------------------------------------------


def test_a_bare_device_is_just_its_name():
    assert device_to_api(Device("npu-0-0")) == {"name": "npu-0-0"}


@pytest.mark.parametrize(
    ("value", "api"),
    [
        pytest.param(True, {"bool": True}, id="bool-true"),
        pytest.param(False, {"bool": False}, id="bool-false"),
        pytest.param(7, {"int": 7}, id="int"),
        pytest.param(0, {"int": 0}, id="int-zero"),
        pytest.param("910B3", {"string": "910B3"}, id="string"),
        pytest.param("", {"string": ""}, id="empty-string"),
        pytest.param(Version("24.1.0"), {"version": "24.1.0"}, id="version"),
        pytest.param(Version("1.0.0-rc.1+b5"), {"version": "1.0.0-rc.1+b5"}, id="version-pre-release"),
    ],
)
def test_attribute_kinds(value, api):
    assert device_to_api(Device("npu-0-0", attributes={"x": value})) == {"name": "npu-0-0", "attributes": {"x": api}}


@pytest.mark.parametrize(
    ("value", "shown"),
    [pytest.param(1.5, "1.5", id="float"), pytest.param(None, "None", id="none"),
     pytest.param(["a"], "['a']", id="list")],
)
def test_attribute_of_another_type_is_refused(value, shown):
    with pytest.raises(TypeError) as raised:
        device_to_api(Device("npu-0-0", attributes={"x": value}))
    assert str(raised.value) == f"attribute value {shown} is not bool, int, str or Version"


def test_attributes_and_capacities_are_sorted_by_name():
    device = Device("npu-0-0", attributes={"uuid": "u", "index": 0, "chipName": "910B3"},
                    capacities={"memory": Capacity("32Gi"), "cores": Capacity("100")})
    api = device_to_api(device)
    assert list(api["attributes"]) == ["chipName", "index", "uuid"]
    assert list(api["capacity"]) == ["cores", "memory"]


@pytest.mark.parametrize(
    ("policy", "api"),
    [
        pytest.param(None, {"value": "32Gi"}, id="no-policy"),
        pytest.param(CapacityRequestPolicy(), {"value": "32Gi", "requestPolicy": {"default": None}},
                     id="empty-policy-keeps-default-key"),
        pytest.param(CapacityRequestPolicy(default="1Gi"), {"value": "32Gi", "requestPolicy": {"default": "1Gi"}},
                     id="default-only"),
        pytest.param(CapacityRequestPolicy(default="8Gi", valid_values=("8Gi", "16Gi", "32Gi")),
                     {"value": "32Gi", "requestPolicy": {"default": "8Gi", "validValues": ["8Gi", "16Gi", "32Gi"]}},
                     id="valid-values"),
        pytest.param(CapacityRequestPolicy(default="1Gi", valid_range_min="1Gi", valid_range_max="32Gi",
                                           valid_range_step="1Gi"),
                     {"value": "32Gi", "requestPolicy": {"default": "1Gi",
                                                         "validRange": {"min": "1Gi", "max": "32Gi", "step": "1Gi"}}},
                     id="valid-range"),
        pytest.param(CapacityRequestPolicy(default="1Gi", valid_range_min="1Gi"),
                     {"value": "32Gi", "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi"}}},
                     id="valid-range-min-only"),
        pytest.param(CapacityRequestPolicy(default="1Gi", valid_range_max="32Gi", valid_range_step="1Gi"),
                     {"value": "32Gi", "requestPolicy": {"default": "1Gi"}},
                     id="range-without-min-is-left-out"),
    ],
)
def test_capacity_request_policies(policy, api):
    device = Device("npu-0-0", capacities={"memory": Capacity("32Gi", policy)}, allow_multiple_allocations=True)
    assert device_to_api(device) == {"name": "npu-0-0", "capacity": {"memory": api}, "allowMultipleAllocations": True}


def test_a_shared_device_with_counters_and_taints():
    device = Device(
        "vnpu-0-0-vir02",
        attributes={"type": "vnpu"},
        capacities={"cores": Capacity("100", CapacityRequestPolicy(default="10", valid_values=("10", "100")))},
        allow_multiple_allocations=True,
        consumes_counters=(CounterConsumption("npu-0-0", {"memory": "16Gi", "aicore": "8"}),),
        taints=(DeviceTaint("ascend.project-hami.io/unhealthy", "NoExecute", "hbm-ecc"),
                DeviceTaint("ascend.project-hami.io/draining", "NoSchedule")),
    )
    assert device_to_api(device) == {
        "name": "vnpu-0-0-vir02",
        "attributes": {"type": {"string": "vnpu"}},
        "capacity": {"cores": {"value": "100", "requestPolicy": {"default": "10", "validValues": ["10", "100"]}}},
        "allowMultipleAllocations": True,
        "consumesCounters": [{"counterSet": "npu-0-0",
                              "counters": {"aicore": {"value": "8"}, "memory": {"value": "16Gi"}}}],
        "taints": [{"key": "ascend.project-hami.io/unhealthy", "effect": "NoExecute", "value": "hbm-ecc"},
                   {"key": "ascend.project-hami.io/draining", "effect": "NoSchedule"}],
    }


# -- build_slices -----------------------------------------------------------------------------------


def devices(count: int, **fields) -> tuple[Device, ...]:
    return tuple(Device(f"npu-{i:04d}-0", **fields) for i in range(count))


def device_counts(resource_slices: list[dict]) -> list[int]:
    return [len(s["spec"]["devices"]) for s in resource_slices if "devices" in s["spec"]]


def test_limits_are_the_api_servers():
    assert (MAX_DEVICES_PER_SLICE, MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS, MAX_COUNTER_SETS_PER_SLICE) == (
        128, 64, 8)


def test_300_devices_split_into_128_128_44_in_name_order():
    inventory = Inventory(devices=tuple(reversed(devices(300))))
    resource_slices = build_slices(inventory, driver_name=DRIVER, node_name=NODE)
    assert device_counts(resource_slices) == [128, 128, 44]
    names = [d["name"] for s in resource_slices for d in s["spec"]["devices"]]
    assert names == [f"npu-{i:04d}-0" for i in range(300)]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in resource_slices} == {3}


@pytest.mark.parametrize(
    "special",
    [
        pytest.param(Device("npu-0150-0", taints=(DeviceTaint("k", "NoSchedule"),)), id="one-taint"),
        pytest.param(Device("npu-0150-0", consumes_counters=(CounterConsumption("chip-0", {"memory": "1Gi"}),)),
                     id="one-counter-consumer"),
    ],
)
def test_64_per_slice_when_any_device_has_taints_or_consumes_counters(special):
    inventory = Inventory(devices=(*devices(299), special))
    resource_slices = build_slices(inventory, driver_name=DRIVER, node_name=NODE)
    assert device_counts(resource_slices) == [64, 64, 64, 64, 44]


def test_exactly_128_devices_fit_one_slice():
    assert device_counts(build_slices(Inventory(devices=devices(128)), driver_name=DRIVER, node_name=NODE)) == [128]
    assert device_counts(build_slices(Inventory(devices=devices(129)), driver_name=DRIVER, node_name=NODE)) == [128, 1]


def test_counter_sets_go_into_slices_of_their_own_at_most_8_each():
    sets = tuple(CounterSet(f"chip-{i:02d}", {"memory": "64Gi", "aicore": "24"}) for i in reversed(range(20)))
    inventory = Inventory(devices=devices(3), counter_sets=sets)
    resource_slices = build_slices(inventory, driver_name=DRIVER, node_name=NODE)
    assert [sorted(s["spec"]) for s in resource_slices] == [
        ["devices", "driver", "nodeName", "pool"]] + [["driver", "nodeName", "pool", "sharedCounters"]] * 3
    counter_slices = [s["spec"]["sharedCounters"] for s in resource_slices[1:]]
    assert [len(c) for c in counter_slices] == [8, 8, 4]
    assert [c["name"] for chunk in counter_slices for c in chunk] == [f"chip-{i:02d}" for i in range(20)]
    assert counter_slices[0][0] == {"name": "chip-00", "counters": {"aicore": {"value": "24"},
                                                                    "memory": {"value": "64Gi"}}}
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in resource_slices} == {4}


def test_counter_sets_without_devices_publish_no_device_slice():
    inventory = Inventory(counter_sets=(CounterSet("chip-0", {"memory": "64Gi"}),))
    resource_slices = build_slices(inventory, driver_name=DRIVER, node_name=NODE)
    assert [s["spec"].get("devices") for s in resource_slices] == [None]
    assert resource_slices[0]["spec"]["pool"]["resourceSliceCount"] == 1


def test_empty_inventory_is_one_slice_without_devices():
    assert build_slices(Inventory(), driver_name=DRIVER, node_name=NODE, pool_generation=3) == [{
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": "node-1-ascend.project-hami.io-"},
        "spec": {"driver": DRIVER, "nodeName": NODE, "pool": {"name": NODE, "generation": 3, "resourceSliceCount": 1},
                 "devices": []},
    }]


def test_every_slice_names_the_pool_generation_and_count():
    resource_slices = build_slices(Inventory(devices=devices(200)), driver_name=DRIVER, node_name=NODE,
                                   pool_generation=42)
    assert [s["spec"]["pool"] for s in resource_slices] == [{"name": NODE, "generation": 42,
                                                             "resourceSliceCount": 2}] * 2
    assert {(s["apiVersion"], s["kind"], s["spec"]["driver"], s["spec"]["nodeName"]) for s in resource_slices} == {
        ("resource.k8s.io/v1", "ResourceSlice", DRIVER, NODE)}


def test_default_pool_generation_is_1():
    [resource_slice] = build_slices(Inventory(devices=devices(1)), driver_name=DRIVER, node_name=NODE)
    assert resource_slice["spec"]["pool"]["generation"] == 1


def test_owner_reference_is_the_node_as_controller():
    owner = {"name": NODE, "uid": "0b7a9c1e-2f3d-4e5f-8a9b-0c1d2e3f4a5b"}
    resource_slices = build_slices(Inventory(devices=devices(130)), driver_name=DRIVER, node_name=NODE, owner=owner)
    for resource_slice in resource_slices:
        assert resource_slice["metadata"] == {
            "generateName": "node-1-ascend.project-hami.io-",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": NODE,
                                 "uid": "0b7a9c1e-2f3d-4e5f-8a9b-0c1d2e3f4a5b", "controller": True}],
        }


def test_without_owner_there_is_no_owner_reference():
    [resource_slice] = build_slices(Inventory(devices=devices(1)), driver_name=DRIVER, node_name=NODE)
    assert "ownerReferences" not in resource_slice["metadata"]


def test_slices_do_not_share_mutable_parts():
    resource_slices = build_slices(Inventory(devices=devices(130)), driver_name=DRIVER, node_name=NODE,
                                   owner={"name": NODE, "uid": "u"})
    resource_slices[0]["spec"]["pool"]["generation"] = 99
    resource_slices[0]["metadata"]["generateName"] = "changed-"
    assert resource_slices[1]["spec"]["pool"]["generation"] == 1
    assert resource_slices[1]["metadata"]["generateName"] == "node-1-ascend.project-hami.io-"


def _inventories() -> list[Inventory]:
    sets = tuple(CounterSet(f"chip-{i:02d}", {"memory": "64Gi"}) for i in range(10))
    tainted = Device("x", taints=(DeviceTaint("k", "NoSchedule"),))
    return [Inventory(), Inventory(devices=devices(1)), Inventory(devices=devices(300)),
            Inventory(counter_sets=sets), Inventory(devices=(*devices(70), tainted), counter_sets=sets)]


@pytest.mark.parametrize("inventory", _inventories(), ids=["empty", "one", "300", "counters-only", "tainted+counters"])
def test_stepwise_build_gives_the_same_slices(inventory):
    owner = {"name": NODE, "uid": "u"}
    expected = build_slices(inventory, driver_name=DRIVER, node_name=NODE, pool_generation=7, owner=owner)
    got = anyio.run(lambda: build_slices_stepwise(inventory, driver_name=DRIVER, node_name=NODE, pool_generation=7,
                                                  owner=owner))
    assert got == expected


def test_stepwise_build_lets_the_loop_run_after_every_slice():
    """Other tasks run between slices: the loop is never held for the whole pool (1,024 devices took 20-55 ms)."""
    inventory = Inventory(devices=devices(1024))
    turns = 0  # how often the other task got the loop while the slices were built
    built: list[dict] = []

    async def main() -> None:
        nonlocal turns
        done = anyio.Event()

        async def build() -> None:
            built.extend(await build_slices_stepwise(inventory, driver_name=DRIVER, node_name=NODE))
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(build)
            while not done.is_set():
                turns += 1
                await anyio.lowlevel.checkpoint()

    anyio.run(main)
    assert len(built) == 8
    assert turns >= 8  # at least one turn of the other task per slice


@pytest.mark.parametrize(
    ("node", "driver", "expected"),
    [
        pytest.param("node-1", DRIVER, "node-1-ascend.project-hami.io-", id="ours"),
        pytest.param("worker.example.com", "gpu.example.com", "worker.example.com-gpu.example.com-", id="dotted"),
    ],
)
def test_generate_name_is_node_driver_dash(node, driver, expected):
    assert slice_generate_name(node, driver) == expected


# -- taint times ------------------------------------------------------------------------------------


def tainted_pool(times: dict[str, str | None]) -> list[dict]:
    """Our slices of devices npu-0-0.. with one NoSchedule taint each; ``times``: device -> timeAdded."""
    inventory = Inventory(devices=tuple(Device(name, taints=(DeviceTaint(f"{DRIVER}/unhealthy", "NoSchedule"),))
                                        for name in times))
    slices = build_slices(inventory, driver_name=DRIVER, node_name=NODE)
    for obj in slices:
        for device in obj["spec"]["devices"]:
            if times[device["name"]] is not None:
                device["taints"][0]["timeAdded"] = times[device["name"]]
    return slices


def test_the_stored_time_of_a_taint_is_kept_and_a_new_taint_gets_none():
    stored = tainted_pool({"npu-0-0": "2026-12-01T10:00:00Z", "npu-1-0": "2026-12-01T11:00:00Z"})
    desired = tainted_pool({"npu-0-0": None, "npu-1-0": None, "npu-2-0": None})
    keep_taint_times(desired, stored)
    assert {d["name"]: d["taints"][0].get("timeAdded") for d in desired[0]["spec"]["devices"]} == {
        "npu-0-0": "2026-12-01T10:00:00Z", "npu-1-0": "2026-12-01T11:00:00Z", "npu-2-0": None}


def test_a_taint_with_another_effect_or_value_is_a_new_taint():
    stored = tainted_pool({"npu-0-0": "2026-12-01T10:00:00Z"})
    desired = tainted_pool({"npu-0-0": None})
    desired[0]["spec"]["devices"][0]["taints"][0]["effect"] = "NoExecute"
    keep_taint_times(desired, stored)
    assert "timeAdded" not in desired[0]["spec"]["devices"][0]["taints"][0]
    desired[0]["spec"]["devices"][0]["taints"][0].update(effect="NoSchedule", value="ecc")
    keep_taint_times(desired, stored)
    assert "timeAdded" not in desired[0]["spec"]["devices"][0]["taints"][0]


def test_content_ignores_the_taint_time_and_the_pool_only():
    stored, sent = tainted_pool({"npu-0-0": "2026-12-01T10:00:00Z"}), tainted_pool({"npu-0-0": None})
    stored[0]["spec"]["pool"]["generation"] = 7
    assert slice_content(stored[0]["spec"]) == slice_content(sent[0]["spec"])
    sent[0]["spec"]["devices"][0]["taints"][0]["effect"] = "NoExecute"
    assert slice_content(stored[0]["spec"]) != slice_content(sent[0]["spec"])
