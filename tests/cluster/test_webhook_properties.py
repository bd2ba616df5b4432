"""Property: every pod the HAMi conversion accepts yields claims, templates and a pod the API server accepts.

Hypothesis builds pods with HAMi resources (every Ascend commonWord, counts, memory in MiB, with
fractions and with byte units, cores, init containers, dotted and generated names, and annotations
of arbitrary text, quotes and non-ASCII included); for each pod :func:`convert_pod` accepts, the
real kube-apiserver must accept a server-side dry-run create of every planned object (this compiles
the CEL selectors) and return its spec unchanged, and accept the patched pod.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ascend_dra.hami.convert import COMMON_WORDS, ConversionError, Mode, convert_pod
from tests.cluster.test_publish import ok
from tests.jsonpatch import apply_patch

pytestmark = pytest.mark.cluster

LABEL = r"[a-z0-9]([a-z0-9-]{0,12}[a-z0-9])?"
quantity_mib = st.one_of(st.integers(1, 65536).map(str), st.sampled_from(["1.5", "0.25", "8Gi", "512Mi", "500M",
                                                                          "1e3", "3k"]))
cores = st.one_of(st.integers(0, 100).map(str), st.sampled_from(["12.5", "0.5", "99.9"]))
annotation_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@st.composite
def container(draw: Any, name: str) -> dict[str, Any]:
    limits: dict[str, str] = {}
    for word in draw(st.lists(st.sampled_from(COMMON_WORDS), max_size=3, unique=True)):
        limits[f"huawei.com/{word}"] = str(draw(st.integers(1, 8)))
        if draw(st.booleans()):
            limits[f"huawei.com/{word}-memory"] = draw(quantity_mib)
        if draw(st.booleans()):
            limits[f"huawei.com/{word}-core"] = draw(cores)
    if draw(st.booleans()):
        limits["cpu"] = "1"
    resources: dict[str, Any] = {"limits": limits} if limits else {}
    if limits and draw(st.booleans()):
        resources["requests"] = dict(limits)
    return {"name": name, "image": "x", "resources": resources}


@st.composite
def pods(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(st.from_regex(r"[a-z]([a-z0-9-]{0,40}[a-z0-9])?", fullmatch=True), min_size=1, max_size=4,
                          unique=True))
    split = draw(st.integers(0, len(names) - 1))
    spec: dict[str, Any] = {"containers": [draw(container(n)) for n in names[split:]]}
    if split:
        spec["initContainers"] = [draw(container(n)) for n in names[:split]]
    metadata: dict[str, Any] = {}
    if draw(st.booleans()):
        metadata["name"] = draw(st.from_regex(rf"{LABEL}(\.{LABEL}){{0,2}}", fullmatch=True))
    else:
        metadata["generateName"] = "g-"
    annotations = {}
    for word in draw(st.lists(st.sampled_from(COMMON_WORDS), max_size=2, unique=True)):
        key = draw(st.sampled_from([f"hami.io/use-{word}-uuid", f"hami.io/no-use-{word}-uuid"]))
        annotations[key] = ",".join(draw(st.lists(annotation_text, min_size=1, max_size=3)))
    if draw(st.booleans()):
        annotations[draw(st.sampled_from(["hami.io/use-nputype", "hami.io/no-use-nputype"]))] = draw(annotation_text)
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@pytest.fixture(scope="module")
def namespace(control_plane) -> str:
    name = f"prop-{uuid.uuid4().hex[:8]}"
    ok(control_plane, "POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    return name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(pod=pods(), mode=st.sampled_from(list(Mode)))
def test_accepted_pods_yield_objects_the_api_server_accepts_unchanged(control_plane, namespace, pod, mode):
    try:
        conversion = convert_pod(pod, namespace, mode=mode)
    except ConversionError:
        event("refused")
        return  # refused with a message (asserted in the unit tests); nothing would be created
    if conversion is None:
        event("no HAMi resources")
        return
    count = len(conversion.claims)
    event(f"converted into {'3 or more' if count >= 3 else count} object(s)")
    cp = control_plane
    for planned in conversion.claims:
        if mode is Mode.CLAIM:
            body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": planned.object_name}, "spec": planned.spec}
            stored = ok(cp, "POST", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims?dryRun=All", body)
            assert stored["spec"] == planned.spec
        else:
            body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": planned.object_name}, "spec": {"spec": planned.spec}}
            stored = ok(cp, "POST", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates"
                                    "?dryRun=All", body)
            assert stored["spec"]["spec"] == planned.spec
    patched = apply_patch(pod, conversion.patch)
    stored_pod = ok(cp, "POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", patched)
    assert [c["name"] for c in stored_pod["spec"]["resourceClaims"]] == [c.pod_claim_name for c in conversion.claims]
