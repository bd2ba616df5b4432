"""Recognising the claims HAMi-DRA made before the switch (ascend_dra/hami/hamidra.py)."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_dra.hami.chips import DEFAULT_CHIPS
from ascend_dra.hami.hamidra import follows_hami_dra_rule, made_by_hami_dra, users_of

LAB = Path(__file__).resolve().parents[2] / "examples" / "hami-lab" / "ascend-share-a.yaml"


def lab() -> tuple[dict[str, Any], dict[str, Any]]:
    """Lab 18's claim as HAMi-DRA's webhook creates it, and the pod it mutated."""
    claim, pod = yaml.safe_load_all(LAB.read_text())
    return claim, pod


def test_the_labs_claim_is_recognised_and_ours_or_a_users_are_not():
    claim, _ = lab()
    assert made_by_hami_dra(claim)
    owned = copy.deepcopy(claim)
    owned["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "x", "uid": "u"}]
    ours = copy.deepcopy(claim)
    ours["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "ascend-dra-webhook"}
    users = copy.deepcopy(claim)
    users["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.example.com"
    prioritised = copy.deepcopy(claim)
    prioritised["spec"]["devices"]["requests"] = [{"name": "npu", "firstAvailable": []}]
    assert not any(made_by_hami_dra(c) for c in (owned, ours, users, prioritised, {"metadata": {}}))


def test_the_name_follows_the_rule_for_one_of_the_pods_containers():
    claim, pod = lab()
    name = claim["metadata"]["name"]
    assert follows_hami_dra_rule(name, pod, "dra-ascend-e2e", DEFAULT_CHIPS)
    assert not follows_hami_dra_rule(name, pod, "other-ns", DEFAULT_CHIPS)
    assert not follows_hami_dra_rule("dra-ascend-e2e-ascend-share-a-app-ascend910b3-x", pod, "dra-ascend-e2e",
                                     DEFAULT_CHIPS)
    renamed = copy.deepcopy(pod)
    renamed["metadata"]["name"] = "ascend-share-b"
    assert not follows_hami_dra_rule(name, renamed, "dra-ascend-e2e", DEFAULT_CHIPS)


def test_long_and_dotted_and_generated_names_follow_it_too():
    pod = {"metadata": {"name": "p.v1"}, "spec": {"containers": [{"name": "c" * 50}]}}
    full = f"ns-p.v1-{'c' * 50}-ascend310p"  # HAMi-DRA keeps the dot
    cut = full[:54].rstrip("-") + "-" + hashlib.sha256(full.encode()).hexdigest()[:8]
    assert len(full) > 63 and follows_hami_dra_rule(cut, pod, "ns", DEFAULT_CHIPS)
    assert follows_hami_dra_rule("ns-p-v1-c-ascend310p", {**pod, "spec": {"containers": [{"name": "c"}]}}, "ns",
                                 DEFAULT_CHIPS)  # as this webhook writes it
    generated = {"metadata": {"name": "job-7x2kq", "generateName": "job-"}, "spec": {"containers": [{"name": "c"}]}}
    assert follows_hami_dra_rule("ns-b4z9q-c-ascend310p", generated, "ns", DEFAULT_CHIPS)
    assert not follows_hami_dra_rule("ns-b4z9-c-ascend310p", generated, "ns", DEFAULT_CHIPS)
    assert not follows_hami_dra_rule("ns-b4z9q-c-ascend310p", pod, "ns", DEFAULT_CHIPS)  # not generated
    long_ns = "n" * 50
    generated_long = f"{long_ns}-b4z9q-c-ascend310p"
    cut_long = generated_long[:54] + "-" + hashlib.sha256(generated_long.encode()).hexdigest()[:8]
    assert follows_hami_dra_rule(cut_long, generated, long_ns, DEFAULT_CHIPS)


@pytest.mark.parametrize(("status", "pods", "expected"), [
    ({}, [], {}),
    ({"reservedFor": [{"resource": "pods", "name": "old", "uid": "u-old"}]}, [], {"u-old": "pod old"}),
    ({}, [{"metadata": {"name": "b", "uid": "u-b"}, "spec": {"resourceClaims": [
        {"name": "x", "resourceClaimName": "CLAIM"}]}},
          {"metadata": {"name": "c", "uid": "u-c"}, "spec": {"resourceClaims": [
              {"name": "x", "resourceClaimTemplateName": "CLAIM"}]}}], {"u-b": "pod b"}),
], ids=["unused", "reserved", "named by a pod"])
def test_users_are_the_reserved_consumers_and_the_pods_that_name_it(status, pods, expected):
    claim = {"metadata": {"name": "CLAIM"}, "status": status}
    assert users_of(claim, pods) == expected
