"""HAMi syntax -> claim specs and pod patch (ascend_dra/hami/convert.py), against
docs/ascend-hardware.md#hami-dra-conversion and the lab."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from ascend_dra.hami.convert import (
    COMMON_WORDS,
    ConversionError,
    Mode,
    claim_name,
    convert_pod,
    go_quote,
    truncate_dns_label,
    unconverted_resources,
)
from tests.jsonpatch import apply_patch

UUID = "68496E64-20E05477-92C31323-6E78030A-BD003019"
TYPE = ('device.driver == "ascend.project-hami.io" && '
        'device.attributes["ascend.project-hami.io"].type == "HAMivNPUCore"')
#: The chip model, which HAMi-DRA's claims lack (hami.py CHIP_SELECTORS).
MODEL_310P = 'device.attributes["ascend.project-hami.io"].?chipFamily.orValue("") == "Ascend310P"'
MODEL_910B3 = 'device.attributes["ascend.project-hami.io"].?chipName.orValue("") == "910B3"'


def lab_pod() -> dict[str, Any]:
    """Lab 18's step-4 manifest, as the API server sends it (quantities as strings)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "ascend-share-a", "namespace": "dra-ascend-e2e",
                         "labels": {"hami.io/webhook": "ignore"},
                         "annotations": {"hami.io/use-Ascend310P-uuid": UUID}},
            "spec": {"runtimeClassName": "ascend", "containers": [{
                "name": "app", "image": "quay.io/ascend/vllm-ascend:v0.23.0-310p",
                "command": ["sh", "-c", "sleep 3600"],
                "resources": {"limits": {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "8192",
                                         "huawei.com/Ascend310P-core": "50"}}}]}}


def pod_with(limits: dict[str, str], annotations: dict[str, str] | None = None, name: str = "p") -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


def test_lab_pod_converts_to_the_labs_claim_and_pod_in_claim_mode():
    conversion = convert_pod(lab_pod(), "dra-ascend-e2e", mode=Mode.CLAIM)
    [planned] = conversion.claims
    name = "dra-ascend-e2e-ascend-share-a-app-ascend310p"
    assert (planned.object_name, planned.pod_claim_name) == (name, name)
    assert planned.spec == {"devices": {"requests": [{"name": "npu", "exactly": {
        "allocationMode": "ExactCount", "count": 1, "deviceClassName": "hami-vnpu-core.project-hami.io",
        "capacity": {"requests": {"cores": "50", "memory": "8589934592"}},
        "selectors": [{"cel": {"expression": TYPE}}, {"cel": {"expression": MODEL_310P}},
                      {"cel": {"expression": f'device.attributes["ascend.project-hami.io"].uuid in ["{UUID}"]'}}]}}]}}
    pod = apply_patch(lab_pod(), conversion.patch)
    assert pod["metadata"]["labels"] == {"hami.io/dra": "true", "hami.io/webhook": "ignore"}
    assert pod["spec"]["containers"][0]["resources"] == {"claims": [{"name": name}]}
    assert pod["spec"]["resourceClaims"] == [{"name": name, "resourceClaimName": name}]


def test_template_mode_references_a_content_named_template_shared_by_equal_requests():
    pod = lab_pod()
    pod["spec"]["containers"].append(copy.deepcopy(pod["spec"]["containers"][0]) | {"name": "side"})
    conversion = convert_pod(pod, "dra-ascend-e2e", mode=Mode.TEMPLATE)
    first, second = conversion.claims
    assert first.object_name == second.object_name
    assert first.object_name.startswith("hami-ascend310p-") and len(first.object_name) == len("hami-ascend310p-") + 10
    assert (first.pod_claim_name, second.pod_claim_name) == ("app-ascend310p", "side-ascend310p")
    patched = apply_patch(pod, conversion.patch)
    assert patched["spec"]["resourceClaims"] == [
        {"name": "app-ascend310p", "resourceClaimTemplateName": first.object_name},
        {"name": "side-ascend310p", "resourceClaimTemplateName": first.object_name}]


def test_long_name_is_truncated_with_the_sha256_suffix():
    long = "n" * 50
    raw = f"ns-{long}-app-ascend910b4-1"
    expected = raw[:54].rstrip("-") + "-" + hashlib.sha256(raw.encode()).hexdigest()[:8]
    assert claim_name("ns", long, "app", "Ascend910B4-1") == expected
    assert len(expected) <= 63 and not expected[:-9].endswith("-")
    assert truncate_dns_label("-" * 70) == hashlib.sha256(("-" * 70).encode()).hexdigest()[:8]


def test_generate_name_uses_five_random_characters_and_dotted_names_become_labels():
    pod = pod_with({"huawei.com/Ascend310P": "1"}, name="")
    pod["metadata"]["generateName"] = "job-"
    [planned] = convert_pod(pod, "ns", mode=Mode.CLAIM, random5=lambda: "bcd42").claims
    assert planned.object_name == "ns-bcd42-c-ascend310p"
    [dotted] = convert_pod(pod_with({"huawei.com/Ascend310P": "1"}, name="infer.v1.replica-0"), "ns",
                           mode=Mode.CLAIM).claims
    assert dotted.pod_claim_name == "ns-infer-v1-replica-0-c-ascend310p"


def test_two_chips_in_one_container_follow_device_config_order_and_share_nputype():
    pod = pod_with({"huawei.com/Ascend310P": "1", "huawei.com/Ascend910B3": "2"},
                   {"hami.io/use-nputype": "310P3, 910B3", "hami.io/no-use-Ascend910B3-uuid": "X,,Y",
                    "hami.io/use-Ascend910A-uuid": "not requested: ignored"})
    first, second = convert_pod(pod, "ns", mode=Mode.CLAIM).claims
    assert (first.common_word, second.common_word) == ("Ascend910B3", "Ascend310P")
    attr = 'device.attributes["ascend.project-hami.io"]'
    assert [s["cel"]["expression"] for s in first.spec["devices"]["requests"][0]["exactly"]["selectors"]] == [
        TYPE, MODEL_910B3, f'!({attr}.uuid in ["X","Y"])', f'{attr}.productName in ["310P3","910B3"]']
    assert first.spec["devices"]["requests"][0]["exactly"]["count"] == 2
    assert "capacity" not in first.spec["devices"]["requests"][0]["exactly"]
    assert [s["cel"]["expression"] for s in second.spec["devices"]["requests"][0]["exactly"]["selectors"]] == [
        TYPE, MODEL_310P, f'{attr}.productName in ["310P3","910B3"]']


def test_a_count_above_one_asks_for_that_many_distinct_chips():
    """HAMi's ``huawei.com/Ascend310P: 2`` is two chips; a HAMivNPUCore device may be allocated more
    than once, so the claim says the devices' physical IDs differ. A count of 1 needs no constraint
    (and keeps the lab's claim, and HAMi-DRA's template hash, as they were)."""
    two = convert_pod(pod_with({"huawei.com/Ascend310P": "2", "huawei.com/Ascend310P-memory": "1024"}), "ns",
                      driver_name="npu.example.com").claims[0].spec["devices"]
    assert two["constraints"] == [{"requests": ["npu"], "distinctAttribute": "npu.example.com/physicalID"}]
    assert two["requests"][0]["name"] == "npu"
    one = convert_pod(pod_with({"huawei.com/Ascend310P": "1"}), "ns").claims[0].spec["devices"]
    assert "constraints" not in one


@pytest.mark.parametrize(("memory", "expected"), [
    ("8192", "8589934592"), ("1.5", "2097152"), ("8Gi", "8589934592"), ("500M", "500M"), ("1e3", "1048576k"),
    ("4k", "4194304k"), ("4000", "4194304k"), ("21k", "22020096k"),
], ids=["MiB", "fraction rounds up", "binary unit is bytes", "decimal unit is bytes", "exponent is MiB",
        "4000 as the API server sends it", "4000 as written", "21000 as the API server sends it"])
def test_memory_units(memory, expected):
    [planned] = convert_pod(pod_with({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": memory}),
                            "ns").claims
    assert planned.spec["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] == expected


@pytest.mark.parametrize("memory", ["1023Ki", "1M"])
def test_memory_with_a_unit_under_one_mib_is_refused_as_a_unit_slip(memory):
    """As bytes, ``1023Ki`` or ``1M`` would be a share of less than 1 MiB: refused, naming both readings."""
    with pytest.raises(ConversionError) as caught:
        convert_pod(pod_with({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": memory}), "ns")
    [(field, reason)] = caught.value.problems
    assert field == 'spec.containers[0].resources.limits["huawei.com/Ascend310P-memory"]'
    assert "the smallest share: a plain number is MiB" in reason


def test_memory_and_cores_only_in_requests_are_read_from_there():
    """The count in ``limits``, memory and cores in ``requests`` (HAMi reads them there too): they
    were dropped from the pod without reaching the claim, so the pod got the default share."""
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {
        "limits": {"huawei.com/Ascend310P": "1"},
        "requests": {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "2048",
                     "huawei.com/Ascend310P-core": "25"}}}]}}
    conversion = convert_pod(pod, "ns", mode=Mode.CLAIM)
    [planned] = conversion.claims
    assert planned.spec["devices"]["requests"][0]["exactly"]["capacity"]["requests"] == {
        "memory": str(2048 * 1024 * 1024), "cores": "25"}
    assert "limits" not in apply_patch(pod, conversion.patch)["spec"]["containers"][0]["resources"]
    both = copy.deepcopy(pod)  # limits win over requests, as HAMi's
    both["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend310P-memory"] = "4096"
    [planned] = convert_pod(both, "ns", mode=Mode.CLAIM).claims
    assert planned.spec["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] == str(4 << 30)
    bad = copy.deepcopy(pod)
    bad["spec"]["containers"][0]["resources"]["requests"]["huawei.com/Ascend310P-core"] = "-5"
    with pytest.raises(ConversionError) as caught:
        convert_pod(bad, "ns")
    assert caught.value.problems == (
        ('spec.containers[0].resources.requests["huawei.com/Ascend310P-core"]',
         "'-5' must be 0 or more (percent of a chip)"),)


def test_cores_are_copied_as_a_quantity():
    [planned] = convert_pod(pod_with({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-core": "12.5"}),
                            "ns").claims
    assert planned.spec["devices"]["requests"][0]["exactly"]["capacity"]["requests"] == {"cores": "12500m"}


def test_every_problem_is_refused_at_once_naming_its_field():
    pod = pod_with({"huawei.com/Ascend310P": "1.5", "huawei.com/Ascend910A": "1",
                    "huawei.com/Ascend910A-memory": "lots", "huawei.com/Ascend910A-core": "-1"},
                   {"hami.io/use-Ascend910A-uuid": " , ", "hami.io/use-nputype": "910B3"})
    with pytest.raises(ConversionError) as caught:
        convert_pod(pod, "ns")
    limits = 'spec.containers[0].resources.limits'
    assert caught.value.problems == (
        (f'{limits}["huawei.com/Ascend910A-memory"]', "invalid quantity 'lots': expected a number with an optional "
         "suffix (Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E, m)"),
        (f'{limits}["huawei.com/Ascend910A-core"]', "'-1' must be 0 or more (percent of a chip)"),
        (f'{limits}["huawei.com/Ascend310P"]', "'1.5' must be a whole number of chips (0 for none)"),
        ('metadata.annotations["hami.io/use-Ascend910A-uuid"]',
         'annotation hami.io/use-Ascend910A-uuid has no usable value: " , " (HAMi matches no chip with it, so the '
         "pod would wait forever; name one or remove it)"),
        ('metadata.annotations["hami.io/use-nputype"]',
         "910B3 names no chip that huawei.com/Ascend910A can be given (its chips: chipName 910A), so its claim could "
         "never be allocated; name one of them or remove the annotation (HAMi's scheduler does not read "
         "hami.io/use-nputype for Ascend chips; HAMi-DRA turns it into a selector, as here)"),
    )


@pytest.mark.parametrize("pod", [
    pod_with({"nvidia.com/gpu": "1"}),
    {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {
        "requests": {"huawei.com/Ascend310P": "1"}}}]}},
    {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}},
], ids=["other vendor", "count only in requests", "no resources"])
def test_pods_without_an_ascend_count_in_limits_pass_untouched(pod):
    assert convert_pod(pod, "ns") is None


def test_only_converted_entries_leave_limits_and_requests_and_init_containers_convert_too():
    pod = {"metadata": {"name": "p", "labels": {}}, "spec": {
        "resourceClaims": [{"name": "mine", "resourceClaimName": "mine"}],
        "initContainers": [{"name": "warm", "resources": {"limits": {"huawei.com/Ascend310P": "1"}}}],
        "containers": [{"name": "c", "resources": {
            "limits": {"huawei.com/Ascend310P": "1", "cpu": "2", "huawei.com/Ascend310P-memory": "1024"},
            "requests": {"huawei.com/Ascend310P": "1", "cpu": "1"}, "claims": [{"name": "mine"}]}}]}}
    conversion = convert_pod(pod, "ns", mode=Mode.CLAIM)
    patched = apply_patch(pod, conversion.patch)
    assert patched["spec"]["initContainers"][0]["resources"] == {"claims": [{"name": "ns-p-warm-ascend310p"}]}
    assert patched["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "2"}, "requests": {"cpu": "1"}, "claims": [{"name": "mine"}, {"name": "ns-p-c-ascend310p"}]}
    assert [c["name"] for c in patched["spec"]["resourceClaims"]] == ["mine", "ns-p-warm-ascend310p",
                                                                       "ns-p-c-ascend310p"]
    assert patched["metadata"]["labels"] == {"hami.io/dra": "true"}


def _init_and_app(init: dict[str, str], app: dict[str, str], **init_fields: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {
        "initContainers": [{"name": "warm", "resources": {"limits": init}, **init_fields}],
        "containers": [{"name": "c", "resources": {"limits": app}}]}}


SMALL = {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "8192", "huawei.com/Ascend310P-core": "25"}
LARGE = {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "12288", "huawei.com/Ascend310P-core": "50"}


@pytest.mark.parametrize("mode", [Mode.CLAIM, Mode.TEMPLATE])
def test_an_init_container_whose_request_an_app_container_covers_uses_its_claim(mode):
    """Each init container had a claim of its own, held for the pod's life beside the app containers':
    8192 + 12288 MiB of one 310P3 (21525) did not fit, where HAMi books the larger of the two
    (CollapseInitContainerUsage) and runs the pod. The init container ends before the app starts."""
    conversion = convert_pod(_init_and_app(SMALL, LARGE), "ns", mode=mode)
    [claim] = conversion.claims
    assert claim.container == "spec.containers[0]"
    assert claim.spec["devices"]["requests"][0]["exactly"]["capacity"]["requests"] == {
        "cores": "50", "memory": "12884901888"}  # the app container's
    patched = apply_patch(_init_and_app(SMALL, LARGE), conversion.patch)
    assert patched["spec"]["initContainers"][0]["resources"] == {"claims": [{"name": claim.pod_claim_name}]}
    assert patched["spec"]["containers"][0]["resources"] == {"claims": [{"name": claim.pod_claim_name}]}
    assert [c["name"] for c in patched["spec"]["resourceClaims"]] == [claim.pod_claim_name]


@pytest.mark.parametrize(("init", "app", "fields"), [
    (LARGE, SMALL, {}),  # asks for more memory and cores
    ({**SMALL, "huawei.com/Ascend310P-core": "60"}, LARGE, {}),  # more cores only
    ({"huawei.com/Ascend310P": "1"}, LARGE, {}),  # no memory given: the class default, unknown here
    ({**SMALL, "huawei.com/Ascend310P": "2"}, {**LARGE, "huawei.com/Ascend310P": "1"}, {}),  # another count
    ({"huawei.com/Ascend910B4": "1"}, LARGE, {}),  # another chip family
    (SMALL, LARGE, {"restartPolicy": "Always"}),  # a sidecar runs beside the app containers
], ids=["larger", "more-cores", "memory-unset", "other-count", "other-family", "sidecar"])
def test_an_init_container_the_app_containers_do_not_cover_keeps_a_claim_of_its_own(init, app, fields):
    conversion = convert_pod(_init_and_app(init, app, **fields), "ns", mode=Mode.CLAIM)
    assert [c.container for c in conversion.claims] == ["spec.initContainers[0]", "spec.containers[0]"]


def test_huawei_resources_no_common_word_converts_are_named_for_a_warning():
    pod = {"spec": {"initContainers": [{"name": "i", "resources": {"requests": {"huawei.com/npu-310p": "1"}}}],
                    "containers": [{"name": "c", "resources": {
                        "limits": {"huawei.com/Ascend910B1": "1", "huawei.com/Ascend310P": "1", "cpu": "1",
                                   "huawei.com/Ascend310P-core": "5"},
                        "requests": {"huawei.com/Ascend910B1": "1"}}}, {"name": "plain"}]}}
    assert unconverted_resources(pod) == ["spec.initContainers[0]: huawei.com/npu-310p",
                                          "spec.containers[0]: huawei.com/Ascend910B1"]
    assert unconverted_resources({"spec": {"containers": [{"resources": None}, "junk"]}}) == []


def test_reinvocation_on_the_converted_pod_changes_nothing():
    conversion = convert_pod(lab_pod(), "dra-ascend-e2e", mode=Mode.CLAIM)
    assert convert_pod(apply_patch(lab_pod(), conversion.patch), "dra-ascend-e2e", mode=Mode.CLAIM) is None


def test_a_users_claim_with_our_name_is_refused():
    pod = pod_with({"huawei.com/Ascend310P": "1"})
    pod["spec"]["resourceClaims"] = [{"name": "c-ascend310p", "resourceClaimName": "x"}]
    with pytest.raises(ConversionError, match="already has a resource claim named 'c-ascend310p'"):
        convert_pod(pod, "ns", mode=Mode.TEMPLATE)


def test_driver_name_goes_into_the_selectors():
    [planned] = convert_pod(pod_with({"huawei.com/Ascend910C": "2"}, {"hami.io/use-Ascend910C-uuid": "u"}), "ns",
                            driver_name="npu.example.com").claims
    assert [s["cel"]["expression"] for s in planned.spec["devices"]["requests"][0]["exactly"]["selectors"]] == [
        'device.driver == "npu.example.com" && device.attributes["npu.example.com"].type == "HAMivNPUCore"',
        'device.attributes["npu.example.com"].?chipFamily.orValue("") == "Ascend910C"',
        'device.attributes["npu.example.com"].uuid in ["u"]']


@pytest.mark.parametrize(("text", "quoted"), [
    ("abc", '"abc"'), ('a"b\\c', r'"a\"b\\c"'), ("tab\tnl\n", r'"tab\tnl\n"'), ("\x01\x7f", r'"\x01\x7f"'),
    ("中文", '"中文"'), ("\u200b", r'"\u200b"'), ("\U000e0001", r'"\U000e0001"'),
], ids=["plain", "quote and backslash", "named escapes", "control bytes", "printable unicode", "format char",
        "astral format char"])
def test_go_quote_matches_strconv_quote(text, quoted):
    assert go_quote(text) == quoted


def test_every_common_word_is_converted():
    for word in COMMON_WORDS:
        [planned] = convert_pod(pod_with({f"huawei.com/{word}": "1"}), "ns", mode=Mode.CLAIM).claims
        assert planned.object_name == f"ns-p-c-{word.lower()}"


@pytest.mark.parametrize("memory", ["2147483648", "8589934592", "2Pi"],
                         ids=["int32 + 1 MiB", "8 GiB written as bytes", "unit over the bound"])
def test_memory_above_hamis_int32_mib_is_refused_as_a_unit_slip(memory):
    """HAMi keeps ``-memory`` as an int32 of MiB and refuses more than 2147483647 as a wrong unit
    (Project-HAMi/HAMi pkg/device/ascend/device.go ``GenerateResourceRequests``); such a claim
    would otherwise stay pending with no message (2 PiB fits no chip)."""
    with pytest.raises(ConversionError) as caught:
        convert_pod(pod_with({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": memory}), "ns")
    [(field, reason)] = caught.value.problems
    assert field == 'spec.containers[0].resources.limits["huawei.com/Ascend310P-memory"]'
    most = "~1.999Pi" if memory == "2Pi" else "2147483647 MiB"  # in the unit the value was written in
    assert f"more than {most}, the most HAMi accepts" in reason and "plain number is MiB" in reason
    [planned] = convert_pod(pod_with({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "2147483647"}),
                            "ns").claims
    assert planned.spec["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] == str(
        2147483647 * 1024 * 1024)


def test_a_privileged_container_in_a_pod_with_hami_resources_is_refused():
    """HAMi's webhook denies a pod with device resources when any container, init containers
    included, is privileged (Project-HAMi/HAMi pkg/scheduler/webhook.go, #2139): a privileged
    container gets every device node of the host, so no share of a chip can be enforced."""
    pod = pod_with({"huawei.com/Ascend310P": "1"})
    pod["spec"]["initContainers"] = [{"name": "setup", "securityContext": {"privileged": True}}]
    with pytest.raises(ConversionError) as caught:
        convert_pod(pod, "ns")
    assert caught.value.problems == (
        ("spec.initContainers[0].securityContext.privileged",
         "a privileged container sees every NPU of the node, so the pod's NPU share cannot be enforced; "
         "remove privileged: true (HAMi refuses such pods too)"),)
    pod["spec"]["initContainers"][0]["securityContext"]["privileged"] = False
    assert convert_pod(pod, "ns") is not None
    plain = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "securityContext": {"privileged": True}}]}}
    assert convert_pod(plain, "ns") is None  # no HAMi resources: not ours to judge


def test_a_pod_bound_to_a_node_at_creation_is_refused():
    """HAMi's webhook denies a pod with device resources whose ``spec.nodeName`` is set ("pod has
    node assigned", Project-HAMi/HAMi pkg/scheduler/webhook.go). Under DRA nothing would allocate
    its claims: the scheduler never sees the pod and the kubelet waits for them forever."""
    pod = pod_with({"huawei.com/Ascend310P": "1"})
    pod["spec"]["nodeName"] = "node-1"
    with pytest.raises(ConversionError) as caught:
        convert_pod(pod, "ns")
    assert caught.value.problems == (
        ("spec.nodeName",
         "'node-1': a pod bound to a node at creation bypasses the scheduler, so its ResourceClaims are never "
         "allocated; use nodeSelector kubernetes.io/hostname: node-1 instead (HAMi refuses such pods too)"),)
    plain = {"metadata": {"name": "p"}, "spec": {"nodeName": "node-1", "containers": [{"name": "c"}]}}
    assert convert_pod(plain, "ns") is None


def test_a_count_of_0_asks_for_no_chip_its_entries_leave_and_no_claim_is_made():
    """HAMi runs a pod with `huawei.com/Ascend310P: 0` (a chart's `npu: 0`) without an NPU; it was refused."""
    pod = pod_with({"huawei.com/Ascend310P": "0", "huawei.com/Ascend310P-memory": "1024", "cpu": "1"})
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}  # refused only with a chip
    conversion = convert_pod(pod, "ns")
    assert conversion is not None and conversion.claims == ()
    assert conversion.patch == ({"op": "replace", "path": "/spec/containers/0/resources",
                                 "value": {"limits": {"cpu": "1"}}},)
    both = convert_pod(pod_with({"huawei.com/Ascend310P": "0", "huawei.com/Ascend910B3": "1"}), "ns")
    assert [c.common_word for c in both.claims] == ["Ascend910B3"]
    with pytest.raises(ConversionError, match="must be a whole number of chips"):
        convert_pod(pod_with({"huawei.com/Ascend310P": "-1"}), "ns")


def test_a_count_above_what_a_claim_can_hold_is_refused():
    """``100E`` chips (found by the fuzz test) reached the template's name hash as an integer orjson
    cannot encode, and the review failed with a TypeError instead of naming the field."""
    assert [c.spec["devices"]["requests"][0]["exactly"]["count"]
            for c in convert_pod(pod_with({"huawei.com/Ascend910B3": "32"}), "ns").claims] == [32]
    for count in ("33", "100E"):
        with pytest.raises(ConversionError) as caught:
            convert_pod(pod_with({"huawei.com/Ascend910B3": count}), "ns")
        assert caught.value.problems == (('spec.containers[0].resources.limits["huawei.com/Ascend910B3"]',
                                          f"{count!r} is more chips than one claim can hold (at most 32, the API's "
                                          "AllocationResultsMaxSize)"),)
