"""Whatever arrives, the webhook answers with a review or a clear error, never an exception (hypothesis)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_dra.hami.convert import ConversionError, Mode, convert_pod
from ascend_dra.profiles import fake, gpu
from ascend_dra.profiles.ascend import npu310p
from ascend_dra.webhook.review import ReviewError, parse_review
from ascend_dra.webhook.validate import claim_problems

DRIVER = "ascend.project-hami.io"
PROFILES = {"gpu": gpu.factory(), "fake": fake.factory(), "npu-310P": npu310p.factory()}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20)
keys = st.sampled_from(["apiVersion", "kind", "sharing", "strategy", "timeSlicingConfig", "interval", "logLevel",
                        "aicoreLimit", "mountTools", "partitionCount", "spacePartitioningConfig"])
parameters = st.one_of(
    json_values,
    st.fixed_dictionaries({"apiVersion": st.just(f"{DRIVER}/v1alpha1"),
                           "kind": st.sampled_from(["GpuConfig", "FakeConfig", "NpuConfig", "Other"])},
                          optional={k: json_values for k in ("sharing", "logLevel", "aicoreLimit", "mountTools")}),
    st.dictionaries(keys, json_values, max_size=5),
)


@settings(max_examples=300, deadline=None)
@given(parameters=parameters, version=st.sampled_from(["v1", "v1beta1", "v1beta2"]),
       requests=st.one_of(st.none(), st.lists(st.text(max_size=5), max_size=2), json_values))
def test_any_parameters_give_problem_lines_or_none(parameters: Any, version: str, requests: Any):
    obj = {"spec": {"devices": {"requests": [{"name": "gpu"}], "config": [
        {"requests": requests, "opaque": {"driver": DRIVER, "parameters": parameters}}]}}}
    problems = claim_problems(obj, "ResourceClaim", version, DRIVER, PROFILES)
    assert all(isinstance(p, str) and p.startswith("spec.devices.config[0].opaque.parameters") for p in problems)


@settings(max_examples=300, deadline=None)
@given(body=st.one_of(st.binary(max_size=64), json_values.map(orjson.dumps),
                      st.fixed_dictionaries({"apiVersion": st.just("admission.k8s.io/v1"),
                                             "kind": st.just("AdmissionReview"),
                                             "request": json_values}).map(orjson.dumps)))
def test_any_body_is_a_review_or_a_review_error(body: bytes):
    try:
        parse_review(body)
    except ReviewError as exc:
        assert exc.message


@settings(max_examples=300, deadline=None)
@given(pod=st.fixed_dictionaries({"metadata": st.one_of(json_values, st.fixed_dictionaries(
    {"name": st.text(max_size=10), "annotations": st.dictionaries(st.sampled_from(
        ["hami.io/use-Ascend310P-uuid", "hami.io/use-nputype", "x"]), st.text(max_size=8))})),
    "spec": st.fixed_dictionaries({"containers": st.lists(st.fixed_dictionaries({
        "name": st.text(max_size=8), "resources": st.fixed_dictionaries({"limits": st.dictionaries(
            st.sampled_from(["huawei.com/Ascend310P", "huawei.com/Ascend310P-memory", "huawei.com/Ascend310P-core",
                             "cpu"]), st.one_of(st.text(max_size=6), st.integers(-5, 10**6), st.none()))})}),
        max_size=3)})}), mode=st.sampled_from(list(Mode)))
def test_any_pod_converts_or_is_refused_with_problems(pod: dict[str, Any], mode: Mode):
    if not isinstance(pod["metadata"], dict):
        pod["metadata"] = {}
    try:
        convert_pod(pod, "ns", mode=mode)
    except ConversionError as exc:
        assert exc.problems and all(path and message for path, message in exc.problems)
