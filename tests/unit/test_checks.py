"""checks.py: what the API server would reject in a device or an inventory
(docs/architecture.md#api-objects-and-limits)."""

from __future__ import annotations

import pytest

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
from ascend_dra.profiles.checks import device_problems, inventory_problems


def gpu(name: str = "gpu-0", **changes: object) -> Device:
    base: dict[str, object] = {
        "name": name,
        "attributes": {"type": "gpu", "index": 0, "healthy": True, "driverVersion": Version("550.54.15"),
                       "gpu.example.com/uuid": "GPU-1"},
        "capacities": {"memory": Capacity("40Gi")},
    }
    base.update(changes)
    return Device(**base)  # type: ignore[arg-type]


def test_a_valid_device_has_no_problems() -> None:
    assert device_problems(gpu()) == []


@pytest.mark.parametrize("name", ["Gpu-0", "gpu_0", "-gpu", "gpu-", "g" * 64, ""])
def test_device_name_must_be_a_dns_label(name: str) -> None:
    assert device_problems(gpu(name)) == [
        f"name: {name!r} is not a DNS label: lower-case letters, digits and '-', starting and ending with a "
        "letter or digit, at most 63 characters"
    ]


def test_device_name_of_63_characters_is_allowed() -> None:
    assert device_problems(gpu("g" * 63)) == []


def test_attribute_names_are_c_identifiers_of_at_most_32_characters() -> None:
    device = gpu(attributes={"9lives": 1, "a" * 33: 1, "a" * 32: 1, "has-dash": 1})
    assert device_problems(device) == [
        "attributes['9lives']: name '9lives' is not a C identifier (letters, digits and '_', not starting with "
        "a digit)",
        f"attributes['{'a' * 33}']: name '{'a' * 33}' is 33 characters long (at most 32)",
        "attributes['has-dash']: name 'has-dash' is not a C identifier (letters, digits and '_', not starting "
        "with a digit)",
    ]


def test_attribute_name_domains_are_dns_subdomains() -> None:
    device = gpu(attributes={"Example.COM/model": "x", "bad_domain/model": "x", "a/b/c": "x", "/model": "x"})
    assert device_problems(device) == [
        "attributes['bad_domain/model']: name domain 'bad_domain' of 'bad_domain/model' is not a DNS subdomain "
        "of at most 63 characters",
        "attributes['a/b/c']: name 'a/b/c' has more than one '/' (allowed: <id> or <domain>/<id>)",
        "attributes['/model']: name '/model' has an empty domain before '/'",
    ]


def test_capacity_names_follow_the_same_rules() -> None:
    device = gpu(capacities={"memory-bytes": Capacity("1Gi")})
    assert device_problems(device) == [
        "capacity['memory-bytes']: name 'memory-bytes' is not a C identifier (letters, digits and '_', not "
        "starting with a digit)"
    ]


def test_at_most_32_attributes_and_capacities_together() -> None:
    attributes = {f"a{i}": i for i in range(31)}
    assert device_problems(gpu(attributes=attributes)) == []  # 31 + memory = 32
    attributes["a31"] = 31
    assert device_problems(gpu(attributes=attributes)) == [
        "attributes, capacity: 33 entries together (at most 32)"
    ]


def test_attribute_values() -> None:
    device = gpu(attributes={
        "ok": "x" * 64,
        "long": "x" * 65,
        "ratio": 0.5,
        "huge": 2**63,
        "leadingV": Version("v1.0.0"),
        "leadingZero": Version("1.02.0"),
        "twoParts": Version("8.0"),
        "prerelease": Version("1.0.0-rc.1+build.5"),
    })
    assert device_problems(device) == [
        "attributes.long: string is 65 characters long (at most 64)",
        "attributes.ratio: 0.5 is a float (allowed: bool, int, str, model.Version)",
        "attributes.huge: 9223372036854775808 does not fit in a signed 64-bit integer",
        "attributes.leadingV: 'v1.0.0' is not a semver 2.0.0 version (MAJOR.MINOR.PATCH, no leading 'v')",
        "attributes.leadingZero: '1.02.0' is not a semver 2.0.0 version (MAJOR.MINOR.PATCH, no leading 'v')",
        "attributes.twoParts: '8.0' is not a semver 2.0.0 version (MAJOR.MINOR.PATCH, no leading 'v')",
    ]


def test_capacity_values_are_quantities() -> None:
    device = gpu(capacities={"memory": Capacity("40 GiB"), "cores": Capacity("100"), "raw": "1Gi"})
    assert device_problems(device) == [
        "capacity.memory.value: '40 GiB' is not a Quantity (e.g. '16Gi', '100', '500m')",
        "capacity.raw: '1Gi' is a str (allowed: model.Capacity)",
    ]


def test_request_policy_needs_allow_multiple_allocations() -> None:
    policy = CapacityRequestPolicy(default="10", valid_range_min="1", valid_range_step="1")
    device = gpu(capacities={"cores": Capacity("100", policy)})
    assert device_problems(device) == ["capacity.cores.requestPolicy: allowMultipleAllocations must be true"]
    assert device_problems(gpu(capacities={"cores": Capacity("100", policy)}, allow_multiple_allocations=True)) == []


def test_request_policy_rules() -> None:
    device = gpu(
        allow_multiple_allocations=True,
        capacities={
            "memory": Capacity("8Gi", CapacityRequestPolicy(default="1Gi", valid_values=("2Gi", "1Gi", "16Gi"))),
            "cores": Capacity("100", CapacityRequestPolicy(valid_range_min="10", valid_range_max="200",
                                                           valid_range_step="20")),
            "aicore": Capacity("8", CapacityRequestPolicy(default="3", valid_range_min="1", valid_range_step="2",
                                                          valid_values=("1",))),
        },
    )
    assert device_problems(device) == [
        "capacity.memory.requestPolicy.validValues[2]: 16Gi exceeds the capacity value",
        "capacity.memory.requestPolicy.validValues: must be strictly ascending",
        "capacity.cores.requestPolicy.default: required when validValues or validRange is set",
        "capacity.cores.requestPolicy.validRange.max: 200 exceeds the capacity value",
        "capacity.cores.requestPolicy.validRange.max: (200 - min) is not a multiple of step 20",
        "capacity.aicore.requestPolicy: validValues and validRange are mutually exclusive",
        "capacity.aicore.requestPolicy.validValues: must contain the default 3",
    ]


def test_taints() -> None:
    device = gpu(taints=(
        DeviceTaint("example.com/unhealthy", "NoSchedule", "xid-79"),
        DeviceTaint("bad key!", "Evict"),  # type: ignore[arg-type]
    ))
    assert device_problems(device) == [
        "taints[1].key: 'bad key!' is not a label name ([prefix/]name, name at most 63 characters of letters, "
        "digits, '-', '_' and '.')",
        "taints[1].effect: 'Evict' is not one of NoSchedule, NoExecute, None",
    ]
    five = tuple(DeviceTaint(f"t{i}", "None") for i in range(5))
    assert device_problems(gpu(taints=five)) == ["taints: 5 taints (at most 4)"]


def test_consumes_counters_limits() -> None:
    three = tuple(CounterConsumption("chip-0", {"cores": "10"}) for _ in range(3))
    assert device_problems(gpu(consumes_counters=three)) == ["consumesCounters: 3 entries (at most 2)"]
    bad = (CounterConsumption("Chip_0", {"AI cores": "ten"}),)
    assert device_problems(gpu(consumes_counters=bad)) == [
        "consumesCounters[0].counterSet: 'Chip_0' is not a DNS label: lower-case letters, digits and '-', "
        "starting and ending with a letter or digit, at most 63 characters",
        "consumesCounters[0].counters['AI cores']: name is not a DNS label: lower-case letters, digits and '-', "
        "starting and ending with a letter or digit, at most 63 characters",
        "consumesCounters[0].counters.AI cores: 'ten' is not a Quantity (e.g. '16Gi', '100', '500m')",
    ]


def test_a_partitioned_inventory_is_valid() -> None:
    inventory = Inventory(
        devices=(
            gpu("gpu-0-part-0", consumes_counters=(CounterConsumption("gpu-0", {"memory": "20Gi"}),)),
            gpu("gpu-0-part-1", consumes_counters=(CounterConsumption("gpu-0", {"memory": "20Gi"}),)),
        ),
        counter_sets=(CounterSet("gpu-0", {"memory": "40Gi"}),),
    )
    assert inventory_problems(inventory) == []


def test_inventory_reports_duplicates_and_unknown_counters_with_device_paths() -> None:
    inventory = Inventory(
        devices=(
            gpu("gpu-0"),
            gpu("gpu-0"),
            gpu("gpu-1", consumes_counters=(CounterConsumption("gpu-9", {"memory": "1Gi"}),)),
            gpu("gpu-2", consumes_counters=(CounterConsumption("gpu-0", {"cores": "1"}),)),
            gpu("GPU-3"),
        ),
        counter_sets=(CounterSet("gpu-0", {"memory": "40Gi"}), CounterSet("gpu-0", {"memory": "40Gi"})),
    )
    assert inventory_problems(inventory) == [
        "counterSets[1] (gpu-0).name: duplicate counter set 'gpu-0'",
        "devices[0] (gpu-0).name: duplicate device name 'gpu-0' (2 devices)",
        "devices[2] (gpu-1).consumesCounters[0].counterSet: 'gpu-9' is not a counter set of this inventory "
        "(known: gpu-0)",
        "devices[3] (gpu-2).consumesCounters[0].counters.cores: counter set 'gpu-0' has no such counter "
        "(known: memory)",
        "devices[4] (GPU-3).name: 'GPU-3' is not a DNS label: lower-case letters, digits and '-', starting and "
        "ending with a letter or digit, at most 63 characters",
    ]


def test_counter_sets_need_counters_with_quantities() -> None:
    inventory = Inventory(counter_sets=(CounterSet("empty", {}), CounterSet("chip-0", {"memory": "lots"})))
    assert inventory_problems(inventory) == [
        "counterSets[0] (empty).counters: a counter set needs at least one counter",
        "counterSets[1] (chip-0).counters.memory: 'lots' is not a Quantity (e.g. '16Gi', '100', '500m')",
    ]
