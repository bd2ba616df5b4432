"""What HAMi accepts, the conversion accepts; what nothing could satisfy, it refuses naming the field
(ascend_dra/hami/request.py, hamiannotations.py, hami.py; docs/webhook.md#conversion-of-hami-syntax)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ascend_dra.hami.annotations import HAMI_CHIP_NAMES
from ascend_dra.hami.chips import CHIP_SELECTORS, COMMON_WORDS, DeviceConfigError, load_device_config
from ascend_dra.hami.convert import ConversionError, Mode, convert_pod
from tests.jsonpatch import apply_patch

DRIVER = "ascend.project-hami.io"
LIMITS = 'spec.containers[0].resources.limits'


def pod_with(limits: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


def exactly(conversion: Any, index: int = 0) -> dict[str, Any]:
    return conversion.claims[index].spec["devices"]["requests"][0]["exactly"]


def selectors(conversion: Any, index: int = 0) -> list[str]:
    return [s["cel"]["expression"] for s in exactly(conversion, index)["selectors"]]


@pytest.mark.parametrize("cores", ["150", "100.5", "1k"])
def test_cores_above_100_are_capped_with_a_warning_as_hami_caps_them(cores):
    """HAMi's scheduler caps a -core above 100 to 100 (``Fit``, "core limit can't exceed 100"), so a pod
    that ran there was refused here: a migrating workload that ran yesterday stopped at admission."""
    conversion = convert_pod(pod_with({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-core": cores}), "ns")
    assert exactly(conversion)["capacity"] == {"requests": {"cores": "100"}}
    assert conversion.warnings == ((f'{LIMITS}["huawei.com/Ascend310P-core"]',
                                    f"{cores!r} is more than 100 percent of a chip: capped to 100, the whole chip's "
                                    "cores, as HAMi caps it"),)
    assert convert_pod(pod_with({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-core": "100"}),
                       "ns").warnings == ()


@pytest.mark.parametrize(("resources", "path"), [
    ({"limits": {"huawei.com/Ascend310P-memory": "4096"}}, f'{LIMITS}["huawei.com/Ascend310P-memory"]'),
    ({"limits": {"huawei.com/Ascend910B3-core": "50", "cpu": "1"}}, f'{LIMITS}["huawei.com/Ascend910B3-core"]'),
    ({"limits": {"cpu": "1"}, "requests": {"huawei.com/Ascend310P-memory": "4096"}},
     'spec.containers[0].resources.requests["huawei.com/Ascend310P-memory"]'),
], ids=["memory alone", "cores alone", "memory in requests alone"])
def test_memory_or_cores_without_their_count_are_refused_naming_the_entry(resources, path):
    """Such an entry was passed on, and the pod waited forever for an extended resource no node has."""
    count = path.split('"')[1].rsplit("-", 1)[0]
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": resources}]}}
    with pytest.raises(ConversionError) as caught:
        convert_pod(pod, "ns")
    assert caught.value.problems == ((path, (
        f"asks for no chip without {count} in limits (HAMi reads it only beside the count and gives the container "
        "no chip for it; no node advertises it as a resource, so the pod would wait forever): add "
        f"{count} or remove it")),)


def test_memory_and_cores_beside_a_count_in_another_container_are_still_refused():
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "resources": {"limits": {"huawei.com/Ascend310P": "1"}}},
        {"name": "b", "resources": {"limits": {"huawei.com/Ascend310P-memory": "1024"}}}]}}
    with pytest.raises(ConversionError) as caught:
        convert_pod(pod, "ns")
    assert [path for path, _ in caught.value.problems] == [
        'spec.containers[1].resources.limits["huawei.com/Ascend310P-memory"]']


@pytest.mark.parametrize(("limits", "nputype"), [
    ({"huawei.com/Ascend310P": "1"}, "910B3"),
    ({"huawei.com/Ascend910B3": "1"}, "310P3, 910B4"),
    ({"huawei.com/Ascend910C": "2"}, "910B2"),
], ids=["910B3 on 310P", "others on 910B3", "910B2 on 910C"])
def test_use_nputype_naming_only_chips_of_another_kind_is_refused(limits, nputype):
    """The claim selected the chip kind and a productName of another: nothing could be allocated, and
    the pod stayed pending with the scheduler's 'cannot allocate all claims', which names no field."""
    with pytest.raises(ConversionError) as caught:
        convert_pod(pod_with(limits, {"hami.io/use-nputype": nputype}), "ns")
    [(path, message)] = caught.value.problems
    assert path == 'metadata.annotations["hami.io/use-nputype"]'
    assert message.startswith(f"{', '.join(v.strip() for v in nputype.split(','))} names no chip that "
                              f"{next(iter(limits))} can be given")
    assert "HAMi's scheduler does not read hami.io/use-nputype for Ascend chips" in message


def test_hamis_chip_names_are_those_of_its_common_words():
    """Each chipName of HAMi's default config names a commonWord of the table, and a chipName
    selector of the table selects that name (docs/ascend-hardware.md#hami-resource-names)."""
    assert set(HAMI_CHIP_NAMES.values()) <= set(COMMON_WORDS)
    for name, word in HAMI_CHIP_NAMES.items():
        attribute, value = CHIP_SELECTORS[word]
        assert attribute == "chipFamily" or value == name, (name, word)


@pytest.mark.parametrize(("limits", "nputype"), [
    ({"huawei.com/Ascend310P": "1"}, "310P3"),
    ({"huawei.com/Ascend310P": "1"}, "310P1"),  # not a chip name HAMi gives another word: may be a 310P
    ({"huawei.com/Ascend910B3": "1"}, "910B4,910B3"),
    ({"huawei.com/Ascend910C": "1"}, "Ascend910"),
], ids=["310P3", "unknown 310P", "one of two", "910C"])
def test_use_nputype_naming_a_chip_of_the_kind_converts(limits, nputype):
    conversion = convert_pod(pod_with(limits, {"hami.io/use-nputype": nputype}), "ns")
    assert selectors(conversion)[-1].startswith(f'device.attributes["{DRIVER}"].productName in [')


def test_no_use_nputype_excluding_every_chip_of_the_kind_is_refused_and_a_family_is_never():
    with pytest.raises(ConversionError) as caught:
        convert_pod(pod_with({"huawei.com/Ascend910B3": "1"}, {"hami.io/no-use-nputype": "910B3"}), "ns")
    [(path, message)] = caught.value.problems
    assert (path, message.split(" (")[0]) == (
        'metadata.annotations["hami.io/no-use-nputype"]',
        "910B3 excludes every chip that huawei.com/Ascend910B3 can be given")
    # A family selector takes chip names unknown here: excluding 310P3 leaves the others.
    conversion = convert_pod(pod_with({"huawei.com/Ascend310P": "1"}, {"hami.io/no-use-nputype": "310P3"}), "ns")
    assert selectors(conversion)[-1] == f'!(device.attributes["{DRIVER}"].productName in ["310P3"])'


@pytest.mark.parametrize(("key", "value"), [
    ("hami.io/use-Ascend310P-uuid", ""),
    ("hami.io/use-Ascend310P-uuid", "   "),
    ("hami.io/no-use-Ascend310P-uuid", ""),
    ("hami.io/no-use-Ascend310P-uuid", " , "),
    ("hami.io/use-nputype", " "),
    ("hami.io/no-use-nputype", ",,"),
], ids=["use empty", "use blank", "no-use empty", "no-use separators", "nputype blank", "no-use-nputype separators"])
def test_an_annotation_that_names_nothing_is_no_constraint_as_in_hami(key, value):
    """HAMi reads an empty value as no constraint (``CheckUUID``), and a no-use list of separators
    excludes nothing; HAMi-DRA refused such pods, and so did we."""
    conversion = convert_pod(pod_with({"huawei.com/Ascend310P": "1"}, {key: value}), "ns")
    assert len(selectors(conversion)) == 2  # the type and the chip model only
    assert conversion.warnings == ((f'metadata.annotations["{key}"]',
                                    f'"{value}" names nothing: no constraint, as HAMi reads it'),)


def test_a_use_annotation_of_separators_only_matches_no_chip_and_is_refused():
    with pytest.raises(ConversionError) as caught:
        convert_pod(pod_with({"huawei.com/Ascend310P": "1"}, {"hami.io/use-Ascend310P-uuid": " , "}), "ns")
    assert caught.value.problems == (('metadata.annotations["hami.io/use-Ascend310P-uuid"]', (
        'annotation hami.io/use-Ascend310P-uuid has no usable value: " , " (HAMi matches no chip with it, so the '
        "pod would wait forever; name one or remove it)")),)


def test_memory_zero_without_a_device_config_is_refused_naming_what_hami_does():
    with pytest.raises(ConversionError) as caught:
        convert_pod(pod_with({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "0"}), "ns")
    assert caught.value.problems == ((f'{LIMITS}["huawei.com/Ascend310P-memory"]', (
        "'0': HAMi reads 0 as the chip's whole memory, which this webhook knows only from a HAMi device config "
        "(--hami-device-config, its memoryAllocatable); write the memory in MiB instead")),)


CONFIG = """\
vnpus:
  hamiVnpuCore: true
  configs:
  - {chipName: 310P3, commonWord: Ascend310P, resourceName: huawei.com/Ascend310P,
     resourceMemoryName: huawei.com/Ascend310P-memory, resourceCoreName: huawei.com/Ascend310P-core,
     memoryAllocatable: 21525, runtimeClassName: ascend, overwriteEnv: true}
  - {chipName: 910B3, commonWord: Ascend910B3, resourceName: huawei.com/Ascend910B3,
     resourceMemoryName: huawei.com/Ascend910B3-memory, memoryAllocatable: 65536, runtimeClassName: "",
     overwriteEnv: false}
"""


@pytest.fixture
def chips(tmp_path: Path) -> Any:
    path = tmp_path / "device-config.yaml"
    path.write_text(CONFIG)
    return load_device_config(path)


def test_a_count_alone_asks_for_memory_allocatable_as_hami_writes_it(chips):
    """HAMi's webhook gives a count without -memory the config's memoryAllocatable (the whole chip);
    the key was read but not applied, so the pod got the class's 1/64 share instead."""
    conversion = convert_pod(pod_with({"huawei.com/Ascend310P": "1"}), "ns", chips=chips)
    assert exactly(conversion)["capacity"] == {"requests": {"memory": str(21525 << 20)}}
    zero = convert_pod(pod_with({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "0"}), "ns",
                       chips=chips)
    assert exactly(zero)["capacity"] == {"requests": {"memory": str(21525 << 20)}}
    given = convert_pod(pod_with({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "4096"}), "ns",
                        chips=chips)
    assert exactly(given)["capacity"] == {"requests": {"memory": str(4096 << 20)}}


def test_runtime_class_name_is_set_on_a_pod_that_asks_for_the_chip_and_names_none(chips):
    """HAMi sets the config's runtimeClassName on such a pod; it was read but not applied."""
    pod = pod_with({"huawei.com/Ascend310P": "1"})
    assert apply_patch(pod, convert_pod(pod, "ns", chips=chips).patch)["spec"]["runtimeClassName"] == "ascend"
    own = pod_with({"huawei.com/Ascend310P": "1"})
    own["spec"]["runtimeClassName"] = "kata"
    assert apply_patch(own, convert_pod(own, "ns", chips=chips).patch)["spec"]["runtimeClassName"] == "kata"
    other = pod_with({"huawei.com/Ascend910B3": "1"})  # its entry names none ("")
    assert "runtimeClassName" not in apply_patch(other, convert_pod(other, "ns", chips=chips).patch)["spec"]


def test_overwrite_env_empties_the_visible_devices_of_containers_that_ask_for_no_chip(chips):
    """HAMi's overwriteEnv gives every container without the chip's count ASCEND_VISIBLE_DEVICES="",
    so an Ascend runtime hands it none; read but not applied, an image that sets the variable itself
    got chips nobody booked."""
    pod = {"metadata": {"name": "p"}, "spec": {
        "initContainers": [{"name": "init", "env": [{"name": "ASCEND_VISIBLE_DEVICES", "value": "0,1"},
                                                    {"name": "A", "value": "1"}]}],
        "containers": [{"name": "npu", "resources": {"limits": {"huawei.com/Ascend310P": "1"}}},
                       {"name": "side"},
                       {"name": "zero", "resources": {"limits": {"huawei.com/Ascend310P": "0"}}}]}}
    patched = apply_patch(pod, convert_pod(pod, "ns", mode=Mode.CLAIM, chips=chips).patch)
    empty = {"name": "ASCEND_VISIBLE_DEVICES", "value": ""}
    assert patched["spec"]["initContainers"][0]["env"] == [{"name": "A", "value": "1"}, empty]
    assert "env" not in patched["spec"]["containers"][0]  # holds a claim: its CDI spec sets the variable
    assert patched["spec"]["containers"][1]["env"] == [empty]
    # A count of 0 names the 310P entry (HAMi: no variable from it) but not the 910B3 one, whose
    # overwriteEnv is false: no variable.
    assert "env" not in patched["spec"]["containers"][2]


@pytest.mark.parametrize(("entry", "message"), [
    ("memoryAllocatable: lots", "vnpus[0].memoryAllocatable must be a whole number of MiB from 1 to 2147483647, "
                                "not 'lots'"),
    ("memoryAllocatable: 0", "vnpus[0].memoryAllocatable must be a whole number of MiB"),
    ("overwriteEnv: 'yes'", "vnpus[0].overwriteEnv must be true or false, not 'yes'"),
    ("runtimeClassName: Ascend_RT", "vnpus[0].runtimeClassName 'Ascend_RT' is not a RuntimeClass name"),
], ids=["memory text", "memory zero", "overwriteEnv text", "bad runtime class"])
def test_an_applied_key_of_the_wrong_kind_stops_start_up_naming_it(tmp_path, entry, message):
    path = tmp_path / "device-config.yaml"
    path.write_text(f"vnpus:\n- {{chipName: 310P3, commonWord: Ascend310P, resourceName: huawei.com/Ascend310P, "
                    f"{entry}}}\n")
    with pytest.raises(DeviceConfigError) as caught:
        load_device_config(path)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_entries_of_one_common_word_keep_the_smaller_memory_and_either_overwrite_env(tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text("vnpus:\n"
                    "- {chipName: 910B4, commonWord: Ascend910B4, resourceName: huawei.com/Ascend910B4,\n"
                    "   memoryAllocatable: 32768}\n"
                    "- {chipName: 910B4-1, commonWord: Ascend910B4, resourceName: huawei.com/Ascend910B4,\n"
                    "   memoryAllocatable: 65536, overwriteEnv: true}\n")
    [chip] = load_device_config(path)
    assert (chip.values, chip.memory_allocatable_mib, chip.overwrite_env) == (("910B4", "910B4-1"), 32768, True)
    path.write_text("vnpus:\n"
                    "- {chipName: 910B4, commonWord: Ascend910B4, resourceName: huawei.com/Ascend910B4,\n"
                    "   runtimeClassName: ascend}\n"
                    "- {chipName: 910B4-1, commonWord: Ascend910B4, resourceName: huawei.com/Ascend910B4}\n")
    with pytest.raises(DeviceConfigError, match=r"vnpus\[1\] and vnpus\[0\] share commonWord Ascend910B4 but name "
                                                r"different runtimeClassName"):
        load_device_config(path)
