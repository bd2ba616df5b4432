"""The webhook against a real kube-apiserver that calls it over TLS on loopback.

Its own control plane serves resource.k8s.io v1, v1beta1 and v1beta2 (1.35 serves only v1 by
default). The webhook configurations are deployments/webhook/webhook-configurations.yaml with a
``url`` + ``caBundle`` clientConfig, selecting only this run's namespaces.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.controlplane import ControlPlane, default_bin_dir, pid_alive
from tests.cluster.test_publish import ok, wait_until
from tests.cluster.webhook_process import STATE, Hook, installed_hook
from tests.webhook_certs import issue

pytestmark = pytest.mark.cluster

DRIVER = "ascend.project-hami.io"
RUNTIME_CONFIG = "--runtime-config=resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"
VALIDATING = "resourceclaimparameters.ascend.project-hami.io"
MUTATING = "pods.hami.ascend.project-hami.io"

# Lab 18, step 4, verbatim.
LAB_POD = yaml.safe_load('''
apiVersion: v1
kind: Pod
metadata:
  name: ascend-share-a
  namespace: dra-ascend-e2e
  labels:
    hami.io/webhook: ignore
  annotations:
    hami.io/use-Ascend310P-uuid: "68496E64-20E05477-92C31323-6E78030A-BD003019" # 固定到 npu-0-0
spec:
  runtimeClassName: ascend
  containers:
    - name: app
      image: quay.io/ascend/vllm-ascend:v0.23.0-310p
      command: ["sh", "-c", "sleep 3600"]
      resources:
        limits:
          huawei.com/Ascend310P: 1
          huawei.com/Ascend310P-memory: "8192"
          huawei.com/Ascend310P-core: "50"
''')
# Lab 18, step 5: the stored claim's spec, and the chip-model selector HAMi-DRA leaves out (hami.py
# CHIP_SELECTORS: without it a 910B3 request could be given a 310P3 share).
LAB_CLAIM_SPEC = yaml.safe_load('''
devices:
  requests:
    - name: npu
      exactly:
        allocationMode: ExactCount
        count: 1
        deviceClassName: hami-vnpu-core.project-hami.io
        capacity:
          requests:
            cores: "50"
            memory: "8589934592"
        selectors:
          - cel:
              expression: device.driver == "ascend.project-hami.io" && device.attributes["ascend.project-hami.io"].type == "HAMivNPUCore"
          - cel:
              expression: device.attributes["ascend.project-hami.io"].?chipFamily.orValue("") == "Ascend310P"
          - cel:
              expression: device.attributes["ascend.project-hami.io"].uuid in ["68496E64-20E05477-92C31323-6E78030A-BD003019"]
''')  # noqa: E501
LAB_NAME = "dra-ascend-e2e-ascend-share-a-app-ascend310p"


@pytest.fixture(scope="module")
def cp(tmp_path_factory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("webhook-cp"), default_bin_dir(),
                         extra_apiserver_args=[RUNTIME_CONFIG])
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def hook(cp, tmp_path_factory) -> Iterator[Hook]:
    with installed_hook(cp, tmp_path_factory.mktemp("webhook")) as h:
        yield h


def claim(name: str, parameters: Any, version: str = "v1") -> dict[str, Any]:
    request = ({"name": "gpu", "deviceClassName": "gpu.example.com"} if version == "v1beta1"
               else {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}})
    return {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [request], "config": [
                {"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": parameters}}]}}}


BAD_GPU = {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "Bogus"}}
GOOD_GPU = {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_bad_config_is_refused_with_our_message_and_a_good_one_stored(cp, hook, version):
    ns = hook.namespace()
    base = f"/apis/resource.k8s.io/{version}/namespaces/{ns}/resourceclaims"
    status, reply = cp.api("POST", base, claim("bad", BAD_GPU, version))
    assert status == 422, reply
    assert reply["message"] == (
        f'admission webhook "{VALIDATING}" denied the request: ResourceClaim {ns}/bad: 1 problem in opaque configs '
        "for our driver: spec.devices.config[0].opaque.parameters.sharing.strategy: 'Bogus' is not one of "
        "TimeSlicing, SpacePartitioning (for request gpu (class gpu.example.com))")
    stored = ok(cp, "POST", base, claim("good", GOOD_GPU, version))
    assert stored["spec"]["devices"]["config"][0]["opaque"]["parameters"] == GOOD_GPU
    assert ok(cp, "GET", f"{base}/good")["metadata"]["name"] == "good"
    metrics = hook.proc.metrics()
    assert 'ascend_dra_webhook_reviews_total{endpoint="validate-resource-claim-parameters",outcome="denied"}' in metrics
    assert 'ascend_dra_webhook_review_seconds_count{endpoint="validate-resource-claim-parameters",outcome="allowed"}' \
        in metrics


def test_template_with_a_bad_config_is_refused_and_other_drivers_pass(cp, hook):
    ns = hook.namespace()
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "t"},
                "spec": {"spec": claim("x", {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "FakeConfig",
                                             "aicoreLimit": "lots"})["spec"]}}
    status, reply = cp.api("POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates", template)
    assert status == 422, reply
    assert "ResourceClaimTemplate " + ns + "/t: 1 problem" in reply["message"]
    assert "spec.spec.devices.config[0].opaque.parameters.aicoreLimit: must be an integer, got a string" in \
        reply["message"]
    other = claim("other", {"kind": "NotOurs", "whatever": [1, 2, 3]})
    other["spec"]["devices"]["config"][0]["opaque"]["driver"] = "gpu.example.com"
    ok(cp, "POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", other)


def _lab_namespace(hook: Hook) -> str:
    ns = hook.namespace("dra-ascend-e2e")
    cp = hook.cp
    for pod in ok(cp, "GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
        cp.api("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}?gracePeriodSeconds=0")
    wait_until(lambda: not ok(cp, "GET", f"/api/v1/namespaces/{ns}/pods")["items"], "lab namespace empty", 30)
    wait_until(lambda: not ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims")["items"],
               "lab claims gone", 30)
    return ns


def test_lab_pod_is_stored_converted_as_the_lab_shows_in_claim_mode(cp, hook):
    hook.use("claim")
    ns = _lab_namespace(hook)
    pod = ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", LAB_POD)
    stored = ok(cp, "GET", f"/api/v1/namespaces/{ns}/pods/ascend-share-a")
    for got in (pod, stored):
        assert got["metadata"]["labels"] == {"hami.io/dra": "true", "hami.io/webhook": "ignore"}
        assert got["metadata"]["annotations"] == {
            "hami.io/use-Ascend310P-uuid": "68496E64-20E05477-92C31323-6E78030A-BD003019"}
        assert got["spec"]["runtimeClassName"] == "ascend"
        [container] = got["spec"]["containers"]
        assert (container["name"], container["image"]) == ("app", "quay.io/ascend/vllm-ascend:v0.23.0-310p")
        assert container["resources"] == {"claims": [{"name": LAB_NAME}]}
        assert got["spec"]["resourceClaims"] == [{"name": LAB_NAME, "resourceClaimName": LAB_NAME}]
    claim_obj = ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{LAB_NAME}")
    assert (claim_obj["metadata"]["name"], claim_obj["metadata"]["namespace"]) == (LAB_NAME, ns)
    assert claim_obj["spec"] == LAB_CLAIM_SPEC
    # The owner loop makes the pod the claim's owner as soon as the pod exists.
    owners = wait_until(lambda: ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{LAB_NAME}")[
        "metadata"].get("ownerReferences"), "owned by the pod")
    assert owners == [{"apiVersion": "v1", "kind": "Pod", "name": "ascend-share-a", "uid": stored["metadata"]["uid"],
                       "controller": True, "blockOwnerDeletion": True}]


def test_lab_pod_in_template_mode_gets_the_same_claim_from_a_shared_template(cp, hook):
    hook.use("template")
    ns = _lab_namespace(hook)
    ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", LAB_POD)
    stored = ok(cp, "GET", f"/api/v1/namespaces/{ns}/pods/ascend-share-a")
    [reference] = stored["spec"]["resourceClaims"]
    assert reference["name"] == "app-ascend310p"
    template = ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates/"
                             f"{reference['resourceClaimTemplateName']}")
    assert template["spec"]["spec"] == LAB_CLAIM_SPEC
    assert stored["spec"]["containers"][0]["resources"] == {"claims": [{"name": "app-ascend310p"}]}
    # The claim controller makes the pod's claim from the template, owned by the pod.
    wait_until(lambda: ok(cp, "GET", f"/api/v1/namespaces/{ns}/pods/ascend-share-a").get(
        "status", {}).get("resourceClaimStatuses"), "claim generated", within=20)
    # Its name, and the command that finds it, as docs/webhook.md says for the lab in template mode.
    doc = (Path(__file__).resolve().parents[2] / "docs" / "webhook.md").read_text()
    assert "claim as `ascend-share-a-app-ascend310p-<5 random>`" in doc
    [jsonpath] = re.findall(r"kubectl get pod ascend-share-a -n dra-ascend-e2e -o jsonpath='\{([^}]*)\}'", doc)
    name = _jsonpath(ok(cp, "GET", f"/api/v1/namespaces/{ns}/pods/ascend-share-a"), jsonpath)
    assert re.fullmatch(r"ascend-share-a-app-ascend310p-[a-z0-9]{5}", name), name
    claim_obj = ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}")
    assert claim_obj["spec"] == LAB_CLAIM_SPEC
    assert claim_obj["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"]


def _jsonpath(obj: Any, path: str) -> Any:
    """kubectl's jsonpath for a plain path of fields and indexes (``.status.items[0].name``)."""
    for field, index in re.findall(r"\.([A-Za-z]+)(?:\[(\d+)\])?", path):
        obj = obj[field] if not index else obj[field][int(index)]
    return obj


@pytest.mark.parametrize("mode", ["claim", "template"])
def test_deleting_the_pod_removes_its_claim_also_with_the_webhook_stopped(cp, hook, mode):
    hook.use(mode)
    ns = hook.namespace()
    user_claim = ok(cp, "POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", {
        "metadata": {"name": "users-own"}, "spec": {"devices": {"requests": [
            {"name": "x", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})
    pod = {"metadata": {"name": "p"}, "spec": {
        "resourceClaims": [{"name": "mine", "resourceClaimName": "users-own"}],
        "containers": [{"name": "c", "image": "x", "resources": {
            "claims": [{"name": "mine"}], "limits": {"huawei.com/Ascend910B3": "1"}}}]}}
    ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", pod)
    claims_path = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"

    def ours() -> list[dict[str, Any]]:
        return [c for c in ok(cp, "GET", claims_path)["items"] if c["metadata"]["name"] != "users-own"]

    [owned] = wait_until(lambda: [c for c in ours() if c["metadata"].get("ownerReferences")], "claim owned by pod",
                         within=20)
    hook.stop()
    try:
        ok(cp, "DELETE", f"/api/v1/namespaces/{ns}/pods/p?gracePeriodSeconds=0")
        wait_until(lambda: not ours(), f"claim {owned['metadata']['name']} garbage-collected", within=30)
        # A user's own claim that the pod referenced is kept.
        assert ok(cp, "GET", f"{claims_path}/users-own")["metadata"]["uid"] == user_claim["metadata"]["uid"]
    finally:
        hook.use(mode)


def test_with_the_webhook_down_only_pods_asking_for_huawei_resources_are_refused(cp, hook):
    """The pod webhook fails closed (a HAMi pod stored unconverted could never run), so without its
    matchConditions a webhook that was down, or had no certificate yet, refused every pod created in
    every selected namespace."""
    ns = hook.namespace()
    hook.stop()
    try:
        plain = {"metadata": {"name": "plain"}, "spec": {"containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"cpu": "1"}}}]}}
        status, reply = cp.api("POST", f"/api/v1/namespaces/{ns}/pods", plain)
        assert status == 201, reply
        hami = {"metadata": {"name": "hami"}, "spec": {
            "initContainers": [{"name": "i", "image": "x", "resources": {"limits": {"huawei.com/Ascend310P": "1"}}}],
            "containers": [{"name": "c", "image": "x"}]}}
        status, reply = cp.api("POST", f"/api/v1/namespaces/{ns}/pods", hami)
        assert status >= 500 and "pods.hami.ascend.project-hami.io" in reply["message"], reply
    finally:
        hook.use("claim")


def test_dry_run_creates_nothing_and_still_returns_the_converted_pod(cp, hook):
    hook.use("claim")
    ns = hook.namespace()
    pod = {"metadata": {"name": "dry"}, "spec": {"containers": [{"name": "c", "image": "x", "resources": {
        "limits": {"huawei.com/Ascend310P": "1"}}}]}}
    reply = ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod)
    assert reply["spec"]["resourceClaims"] == [{"name": f"{ns}-dry-c-ascend310p",
                                                "resourceClaimName": f"{ns}-dry-c-ascend310p"}]
    assert ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims")["items"] == []
    assert cp.api("GET", f"/api/v1/namespaces/{ns}/pods/dry")[0] == 404


def test_failure_half_way_leaves_no_claim_and_names_the_conflict(cp, hook):
    hook.use("claim")
    ns = hook.namespace()
    base = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"
    # The second planned claim's name is taken by a user's claim: the first one must be rolled back.
    ok(cp, "POST", base, {"metadata": {"name": f"{ns}-p-c-ascend310p"}, "spec": {"devices": {"requests": [
        {"name": "x", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x", "resources": {
        "limits": {"huawei.com/Ascend910A": "1", "huawei.com/Ascend310P": "1"}}}]}}
    status, reply = cp.api("POST", f"/api/v1/namespaces/{ns}/pods", pod)
    assert status == 409, reply
    assert reply["message"] == (
        f'admission webhook "{MUTATING}" denied the request: pod {ns}/p: ResourceClaim {ns}/{ns}-p-c-ascend310p '
        "(for spec.containers[0]) already exists and was not made by this webhook; delete or rename it")
    assert [c["metadata"]["name"] for c in ok(cp, "GET", base)["items"]] == [f"{ns}-p-c-ascend310p"]


def test_refused_conversion_names_the_field(cp, hook):
    hook.use("claim")
    ns = hook.namespace()
    pod = {"metadata": {"name": "p", "annotations": {"hami.io/use-Ascend310P-uuid": " , "}}, "spec": {
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {
            "huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "-1024",
            "huawei.com/Ascend310P-core": "150"}}},
                       {"name": "d", "image": "x", "resources": {"limits": {"huawei.com/Ascend310P-memory": "512"}}}]}}
    status, reply = cp.api("POST", f"/api/v1/namespaces/{ns}/pods", pod)
    assert status == 422, reply
    assert reply["message"] == (
        f'admission webhook "{MUTATING}" denied the request: pod {ns}/p: cannot convert its HAMi resources: '
        'spec.containers[0].resources.limits["huawei.com/Ascend310P-memory"]: \'-1024\' must be more than 0 (MiB, or '
        "bytes with a unit such as 8Gi); "
        'spec.containers[1].resources.limits["huawei.com/Ascend310P-memory"]: asks for no chip without '
        "huawei.com/Ascend310P in limits (HAMi reads it only beside the count and gives the container no chip for it; "
        "no node advertises it as a resource, so the pod would wait forever): add huawei.com/Ascend310P or remove it; "
        'metadata.annotations["hami.io/use-Ascend310P-uuid"]: annotation hami.io/use-Ascend310P-uuid has no usable '
        'value: " , " (HAMi matches no chip with it, so the pod would wait forever; name one or remove it)')
    assert ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims")["items"] == []


def test_what_hami_runs_is_converted_with_warnings_and_an_impossible_nputype_refused(cp, hook):
    """docs/webhook.md#conversion-of-hami-syntax: a -core above 100 (HAMi caps it) and an empty
    annotation (no constraint in HAMi) were refused here, stopping workloads that ran under HAMi; a
    use-nputype of another chip kind was passed on as a claim nothing could satisfy."""
    proc = hook.use("claim")
    ns = hook.namespace()
    answer = dry_run_review(hook, proc, ns, {"metadata": {"name": "p", "annotations": {
        "hami.io/no-use-Ascend310P-uuid": ""}}, "spec": {"containers": [{"name": "c", "image": "x", "resources": {
            "limits": {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-core": "150"}}}]}},
        {"group": "", "version": "v1", "kind": "Pod"})
    assert answer["allowed"] is True and answer["patch"], answer
    assert answer["warnings"] == [
        'spec.containers[0].resources.limits["huawei.com/Ascend310P-core"]: \'150\' is more than 100 percent of a '
        "chip: capped to 100, the whole chip's cores, as HAMi caps it",
        'metadata.annotations["hami.io/no-use-Ascend310P-uuid"]: "" names nothing: no constraint, as HAMi reads it']
    stored = ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", {"metadata": {"name": "capped"}, "spec": {
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {
            "huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-core": "150"}}}]}})
    claim_obj = ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/"
                              f"{stored['spec']['resourceClaims'][0]['resourceClaimName']}")
    assert claim_obj["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"] == {"cores": "100"}
    status, reply = cp.api("POST", f"/api/v1/namespaces/{ns}/pods", {"metadata": {"name": "typed", "annotations": {
        "hami.io/use-nputype": "910B3"}}, "spec": {"containers": [{"name": "c", "image": "x", "resources": {
            "limits": {"huawei.com/Ascend310P": "1"}}}]}})
    assert status == 422 and 'metadata.annotations["hami.io/use-nputype"]: 910B3 names no chip that ' \
        "huawei.com/Ascend310P can be given" in reply["message"], reply


def test_opt_out_labels_on_pod_and_namespace_and_generate_name(cp, hook):
    hook.use("claim")
    ns = hook.namespace()
    opted = {"metadata": {"name": "o", "labels": {"ascend.project-hami.io/webhook": "ignore"}}, "spec": {
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {"huawei.com/Ascend310P": "1"}}}]}}
    stored = ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", opted)
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {"huawei.com/Ascend310P": "1"}
    opted_ns = hook.namespace()
    status, reply = cp.api("PATCH", f"/api/v1/namespaces/{opted_ns}",
                           {"metadata": {"labels": {"ascend.project-hami.io/webhook": "ignore"}}},
                           content_type="application/merge-patch+json")
    assert status == 200, reply
    plain = {"metadata": {"name": "n"}, "spec": opted["spec"]}
    stored = wait_until(lambda: (r := cp.api("POST", f"/api/v1/namespaces/{opted_ns}/pods?dryRun=All", plain))[0]
                        == 201 and "resourceClaims" not in r[1]["spec"] and r[1], "namespace opt-out in effect")
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {"huawei.com/Ascend310P": "1"}
    generated = {"metadata": {"generateName": "job-"}, "spec": {
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {"huawei.com/Ascend310P": "2"}}}]}}
    stored = ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", generated)
    [reference] = stored["spec"]["resourceClaims"]
    name = reference["resourceClaimName"]
    assert name.startswith(f"{ns}-") and name.endswith("-c-ascend310p") and len(name) == len(ns) + 19
    owners = wait_until(lambda: ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}")[
        "metadata"].get("ownerReferences"), "generateName pod owns its claim")
    assert owners[0]["name"] == stored["metadata"]["name"]


def test_reinvocation_reuses_the_claim_and_an_orphan_is_swept(cp, hook):
    """The API server calling twice for one pod gets the same answer; the claim no pod came for is deleted."""
    import base64
    import json
    import ssl
    import urllib.request

    proc = hook.use("claim")
    ns = hook.namespace()
    # A user's claim with no owner that no pod references: never the sweep's business.
    ok(cp, "POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", {
        "metadata": {"name": "users-idle", "labels": {"hami.io/dra": "true"}}, "spec": {"devices": {"requests": [
            {"name": "x", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})
    pod = {"metadata": {"name": "never"}, "spec": {"containers": [{"name": "c", "image": "x", "resources": {
        "limits": {"huawei.com/Ascend310P": "1"}}}]}}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "r-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
        "namespace": ns, "name": "never", "object": pod, "dryRun": False}}
    context = ssl.create_default_context(cafile=str(hook.ca[0]))
    answers = []
    for _ in range(2):
        request = urllib.request.Request(f"https://127.0.0.1:{proc.port}/mutate-pods", data=json.dumps(review).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=context, timeout=10) as reply:
            answers.append(json.loads(reply.read())["response"])
    assert answers[0] == answers[1] and answers[0]["allowed"] is True
    assert json.loads(base64.b64decode(answers[0]["patch"]))[1]["value"] == [
        {"name": f"{ns}-never-c-ascend310p", "resourceClaimName": f"{ns}-never-c-ascend310p"}]
    path = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{ns}-never-c-ascend310p"
    assert ok(cp, "GET", path)["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "ascend-dra-webhook"
    wait_until(lambda: cp.api("GET", path)[0] == 404, "orphaned claim swept", within=45)
    assert "ascend_dra_webhook_orphans_deleted_total 1.0" in proc.metrics()
    assert ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/users-idle")


def dry_run_pod_review(hook, proc, ns: str, limits: dict) -> dict:
    """The webhook's answer (``response``) to a dry-run CREATE review of pod ``p`` whose one container
    ``c`` has ``limits``, sent straight to its /mutate-pods over TLS."""
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x", "resources": {
        "limits": limits}}]}}
    return dry_run_review(hook, proc, ns, pod, {"group": "", "version": "v1", "kind": "Pod"})


def dry_run_review(hook, proc, ns: str, obj: dict, kind: dict) -> dict:
    """The webhook's answer (``response``) to a dry-run CREATE review of ``obj`` (its GVK ``kind``),
    sent straight to its /mutate-pods over TLS."""
    import ssl
    import urllib.request

    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "r-1", "kind": kind, "operation": "CREATE",
        "namespace": ns, "name": obj["metadata"]["name"], "object": obj, "dryRun": True}}
    request = urllib.request.Request(f"https://127.0.0.1:{proc.port}/mutate-pods", data=json.dumps(review).encode(),
                                     headers={"Content-Type": "application/json"})
    context = ssl.create_default_context(cafile=str(hook.ca[0]))
    with urllib.request.urlopen(request, context=context, timeout=10) as reply:
        return json.loads(reply.read())["response"]


def test_a_huawei_resource_the_webhook_does_not_convert_passes_with_a_warning(cp, hook):
    """A chip name a HAMi device config adds beyond its defaults (``Ascend910B1``), or a typo, passed
    silently: the pod then waited for good as Insufficient huawei.com/... with nothing to say why."""
    proc = hook.use("template")
    ns = hook.namespace()

    def answer(limits: dict) -> dict:
        return dry_run_pod_review(hook, proc, ns, limits)

    alone = answer({"huawei.com/Ascend910B1": "1", "huawei.com/Ascend910B1-memory": "16384"})
    assert alone["allowed"] is True and "patch" not in alone
    assert [w.split(" is not ")[0] for w in alone["warnings"]] == [
        "spec.containers[0]: huawei.com/Ascend910B1", "spec.containers[0]: huawei.com/Ascend910B1-memory"]
    assert "Ascend310P" in alone["warnings"][0]  # names what it converts
    beside = answer({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310p-core": "50"})  # a typo beside
    assert beside["allowed"] is True and beside["patch"]
    assert [w.split(" is not ")[0] for w in beside["warnings"]] == ["spec.containers[0]: huawei.com/Ascend310p-core"]
    assert "warnings" not in answer({"huawei.com/Ascend310P": "1"})


def test_a_hami_device_config_makes_its_own_chips_convert(cp, hook, tmp_path):
    """With ``--hami-device-config`` a chip HAMi's defaults lack (``Ascend910B1``) converts, and the
    API server takes the claim it makes (a dry-run create); a default name the config drops is
    warned about instead (docs/webhook.md#a-hami-device-config)."""
    config = tmp_path / "device-config.yaml"
    config.write_text("vnpus:\n  hamiVnpuCore: true\n  configs:\n"
                      "  - {chipName: 910B1, commonWord: Ascend910B1, resourceName: huawei.com/Ascend910B1,\n"
                      "     resourceMemoryName: huawei.com/Ascend910B1-memory, memoryAllocatable: 65536}\n")
    proc = hook.use("claim", ("--hami-device-config", str(config)))
    assert "hami_chips=Ascend910B1" in proc.log_text()
    ns = hook.namespace()

    def answer(limits: dict) -> dict:
        return dry_run_pod_review(hook, proc, ns, limits)

    converted = answer({"huawei.com/Ascend910B1": "1", "huawei.com/Ascend910B1-memory": "16384"})
    assert converted["allowed"] is True and converted["patch"] and "warnings" not in converted, converted
    patch = json.loads(base64.b64decode(converted["patch"]))
    assert {"op": "add", "path": "/spec/resourceClaims", "value": [
        {"name": f"{ns}-p-c-ascend910b1", "resourceClaimName": f"{ns}-p-c-ascend910b1"}]} in patch
    dropped = answer({"huawei.com/Ascend310P": "1"})
    assert dropped["allowed"] is True and "patch" not in dropped
    assert dropped["warnings"][0].startswith("spec.containers[0]: huawei.com/Ascend310P is not a HAMi resource")
    assert "of Ascend910B1;" in dropped["warnings"][0]


def test_a_hami_device_configs_memory_runtime_class_and_env_are_applied(cp, hook, tmp_path):
    """HAMi's memoryAllocatable, runtimeClassName and overwriteEnv were read from the config and
    ignored: a count alone got the class's 1/64 share, the pod no runtime class, and a container
    that asks for no chip kept whatever ASCEND_VISIBLE_DEVICES its image sets. The API server
    stores the pod as HAMi's webhook would have written those three."""
    config = tmp_path / "device-config.yaml"
    config.write_text("vnpus:\n  hamiVnpuCore: true\n  configs:\n"
                      "  - {chipName: 910B1, commonWord: Ascend910B1, resourceName: huawei.com/Ascend910B1,\n"
                      "     resourceMemoryName: huawei.com/Ascend910B1-memory, memoryAllocatable: 65536,\n"
                      "     runtimeClassName: ascend, overwriteEnv: true}\n")
    hook.use("claim", ("--hami-device-config", str(config)))
    ns = hook.namespace()
    stored = ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "npu", "image": "x", "resources": {"limits": {"huawei.com/Ascend910B1": "1"}}},
        {"name": "side", "image": "x", "env": [{"name": "ASCEND_VISIBLE_DEVICES", "value": "all"}]}]}})
    assert stored["spec"]["runtimeClassName"] == "ascend"
    assert "env" not in stored["spec"]["containers"][0]
    # The API server stores an empty value by leaving it out (omitempty), as HAMi's Go client sends it.
    assert stored["spec"]["containers"][1]["env"] == [{"name": "ASCEND_VISIBLE_DEVICES"}]
    claim_obj = ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{ns}-p-npu-ascend910b1")
    assert claim_obj["spec"]["devices"]["requests"][0]["exactly"]["capacity"] == {
        "requests": {"memory": str(65536 << 20)}}


#: Volcano's Job resource as far as the API server needs it to store one (no schema: Volcano's own CRD
#: has one, and its webhooks; neither changes what ours is sent).
VOLCANO_JOB_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "jobs.batch.volcano.sh"},
    "spec": {"group": "batch.volcano.sh", "scope": "Namespaced",
             "names": {"plural": "jobs", "singular": "job", "kind": "Job", "shortNames": ["vcjob"]},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def test_a_volcano_jobs_task_templates_are_converted_and_their_claim_templates_made(cp, hook):
    """docs/webhook.md#volcano-jobs: Volcano sizes a job from its task templates, so huawei.com/* left
    there queued it for good once HAMi's device plugin was gone; the pods it makes then carry a
    claim template each, as a converted pod in template mode does."""
    status, reply = cp.api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", VOLCANO_JOB_CRD)
    assert status in (201, 409), reply
    jobs = "/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs"
    hook.use("claim")  # the pod conversion mode does not matter: a job's templates always get claim templates
    ns = hook.namespace()
    wait_until(lambda: cp.api("GET", jobs.format(ns=ns))[0] == 200, "the Job CRD served", within=30)
    worker = {"metadata": {"annotations": {"hami.io/use-Ascend310P-uuid": "U-1"}}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "infer", "image": "x", "resources": {"limits": {
            "huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "4096", "cpu": "1"}}}]}}
    plain = {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    body = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "vjob"},
            "spec": {"minAvailable": 2, "schedulerName": "volcano", "tasks": [
                {"name": "worker", "replicas": 2, "template": worker},
                {"name": "plain", "replicas": 1, "template": plain}]}}
    stored = ok(cp, "POST", jobs.format(ns=ns), body)
    converted = stored["spec"]["tasks"][0]["template"]
    [entry] = converted["spec"]["resourceClaims"]
    assert entry["name"] == "infer-ascend310p" and entry["resourceClaimTemplateName"].startswith("hami-ascend310p-")
    assert converted["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "1"},
                                                               "claims": [{"name": "infer-ascend310p"}]}
    assert converted["metadata"]["labels"]["hami.io/dra"] == "true"
    assert stored["spec"]["tasks"][1]["template"] == plain
    template = ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates/"
                             f"{entry['resourceClaimTemplateName']}")
    exactly = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["capacity"]["requests"]["memory"] == "4294967296"  # stored as sent
    assert any('uuid in ["U-1"]' in s["cel"]["expression"] for s in exactly["selectors"])
    # A job that asks for nothing is stored as written; a refused request (-memory 0 without a device
    # config) refuses the job.
    assert ok(cp, "POST", jobs.format(ns=ns), {**body, "metadata": {"name": "plain"}, "spec": {
        "tasks": [{"name": "plain", "replicas": 1, "template": plain}]}})["spec"]["tasks"][0]["template"] == plain
    # What the user is told (kubectl prints admission warnings): the Volcano version the converted
    # fields need, and a minResources entry left asking for huawei.com/*.
    answer = dry_run_review(hook, hook.use("claim"), ns, {**body, "metadata": {"name": "warned"}, "spec": {
        **body["spec"], "minResources": {"cpu": "1", "huawei.com/Ascend310P": "2"}}},
        {"group": "batch.volcano.sh", "version": "v1alpha1", "kind": "Job"})
    assert answer["allowed"] is True and answer["patch"]
    assert [w.split(":")[0] for w in answer["warnings"]] == ["its task templates now ask for ResourceClaimTemplates "
                                                             "(spec.resourceClaims, containers[].resources.claims)",
                                                             "spec.minResources"]
    assert "Volcano 1.11 or later" in answer["warnings"][0] and "huawei.com/Ascend310P" in answer["warnings"][1]
    worker["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend310P-memory"] = "0"
    status, reply = cp.api("POST", jobs.format(ns=ns), {**body, "metadata": {"name": "zero-memory"}})
    assert status == 422 and "spec.tasks[0].template.spec.containers[0].resources.limits" in reply["message"], reply


def test_certificate_rotation_while_reviews_flow_loses_none(cp, hook):
    proc = hook.use("claim")
    ns = hook.namespace()
    base = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims?dryRun=All"
    outcomes: list[tuple[int, str]] = []
    stop = threading.Event()

    def reviews() -> None:
        while not stop.is_set():
            for parameters, expected in ((BAD_GPU, 422), (GOOD_GPU, 201)):
                status, reply = cp.api("POST", base, claim(f"c-{uuid.uuid4().hex[:6]}", parameters))
                message = reply.get("message", "") if isinstance(reply, dict) else str(reply)
                if status != expected or (expected == 422 and "'Bogus' is not one of" not in message):
                    outcomes.append((status, message))
                else:
                    outcomes.append((status, "ok"))

    workers = [threading.Thread(target=reviews) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(1.0)
        before = len(outcomes)
        new_cert, new_key = issue(hook.workdir / "pki-next", hook.ca, "serving")
        hook.key.write_bytes(new_key.read_bytes())  # key first: a mismatching pair for a moment
        time.sleep(0.2)
        hook.cert.write_bytes(new_cert.read_bytes())
        wait_until(lambda: 'ascend_dra_webhook_tls_reloads_total{result="ok"} 1.0' in proc.metrics(), "reloaded")
        time.sleep(1.5)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert [o for o in outcomes if o[1] != "ok"] == []
    assert len(outcomes) - before > 10
    import ssl

    served = ssl.get_server_certificate(("127.0.0.1", proc.port), ca_certs=str(hook.ca[0]))
    assert ssl.PEM_cert_to_DER_cert(served) == ssl.PEM_cert_to_DER_cert(new_cert.read_text())


PLURALS = {"Namespace": "/api/v1/namespaces", "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
           "Service": "/api/v1/namespaces/{ns}/services", "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
           "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
           "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
           "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
           "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
           "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
           "Issuer": "/apis/cert-manager.io/v1/namespaces/{ns}/issuers",
           "Certificate": "/apis/cert-manager.io/v1/namespaces/{ns}/certificates"}


def test_deployment_manifests_are_accepted_by_the_api_server(cp):
    """Every manifest, cert-manager's Issuer and Certificate under cert-manager's own CRDs included,
    passes a strict server-side dry-run create."""
    from tests.cluster.chart import install_cert_manager_crds
    from tests.cluster.webhook_process import DEPLOYMENTS

    install_cert_manager_crds(cp)
    kustomization = yaml.safe_load((DEPLOYMENTS / "kustomization.yaml").read_text())
    kinds = []
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((DEPLOYMENTS / name).read_text()):
            kinds.append(doc["kind"])
            if doc["kind"] == "Namespace":
                status, reply = cp.api("POST", PLURALS["Namespace"], doc)  # namespaced dry runs need it
                assert status in (201, 409), reply
                continue
            path = PLURALS[doc["kind"]].format(ns=doc["metadata"].get("namespace", ""))
            ok(cp, "POST", f"{path}?dryRun=All&fieldValidation=Strict", doc)
    assert sorted(set(kinds)) == sorted(PLURALS)


def test_make_webhook_up_converts_hami_pods_on_the_local_control_plane_and_down_removes_it(cp):
    """``make webhook-up`` / ``webhook-down`` (docs/webhook.md, "On the local control plane"): a
    HAMi pod in any namespace is converted while it runs; afterwards no configuration and no
    webhook process is left, so a HAMi pod is stored as written."""
    def run(command: str) -> str:
        done = subprocess.run([sys.executable, "-m", "tests.cluster.webhook_process", command, "--dir",
                               str(cp.workdir)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hami"}, "spec": {"containers": [{
        "name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {
            "huawei.com/Ascend310P": 1, "huawei.com/Ascend310P-memory": 4000}}}]}}
    ns = f"local-{uuid.uuid4().hex[:8]}"
    ok(cp, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    wait_until(lambda: cp.api("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] == 200,
               "default service account")
    assert "configurations ascend-dra-webhook installed" in run("up")
    pid = json.loads((cp.workdir / STATE).read_text())["pid"]
    try:
        # The API server picks the configurations up through an informer: retry until converted.
        def converted() -> dict[str, Any] | None:
            status, stored = cp.api("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod)
            return stored if status == 201 and stored["metadata"].get("labels", {}).get("hami.io/dra") else None
        stored = wait_until(converted, "pod converted", within=20)
        assert stored["spec"]["containers"][0]["resources"].get("limits", {}) == {}
    finally:
        assert "webhook stopped" in run("down")
    for plural in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        assert cp.api("GET", f"/apis/admissionregistration.k8s.io/v1/{plural}/ascend-dra-webhook")[0] == 404
    assert not pid_alive(pid), "the webhook still runs"

    # The API server drops the configurations through its informer too: until then a pod may still
    # be sent to the stopped webhook and refused (failurePolicy Fail).
    def stored_as_written() -> dict[str, Any] | None:
        status, stored = cp.api("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod)
        return stored if status == 201 else None
    stored = wait_until(stored_as_written, "pod stored without the webhook", within=20)
    assert "hami.io/dra" not in stored["metadata"].get("labels", {})


def test_the_charts_webhook_configurations_are_the_manifests():
    """deployments/webhook/webhook-configurations.yaml and the chart's send the API server's reviews
    alike: the same webhooks, rules, policies, conditions and selectors (the chart's defaults; only
    the clientConfig differs)."""
    from tests.cluster.chart import render
    from tests.cluster.webhook_process import DEPLOYMENTS

    def hooks(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        return {d["kind"]: [{k: v for k, v in h.items() if k != "clientConfig"} for h in d["webhooks"]]
                for d in docs if d["kind"].endswith("WebhookConfiguration")}

    manifests = hooks(list(yaml.safe_load_all((DEPLOYMENTS / "webhook-configurations.yaml").read_text())))
    assert hooks(render("ascend-dra", "webhook-values.yaml")) == manifests
    assert [h["name"] for h in manifests["MutatingWebhookConfiguration"]] == [
        "pods.hami.ascend.project-hami.io", "pod-updates.hami.ascend.project-hami.io",
        "volcano-jobs.hami.ascend.project-hami.io"]


def _template_calls(proc) -> Counter[str]:
    """``ascend_dra_webhook_api_requests_total`` of resourceclaimtemplates, by verb."""
    calls: Counter[str] = Counter()
    for family in text_string_to_metric_families(proc.metrics()):
        for s in family.samples:
            if s.name == "ascend_dra_webhook_api_requests_total" and s.labels["resource"] == "resourceclaimtemplates":
                calls[s.labels["verb"]] += int(s.value)
    return calls


def _templates_known(proc) -> float:
    [value] = [s.value for f in text_string_to_metric_families(proc.metrics())
               for s in f.samples if s.name == "ascend_dra_webhook_templates_known"]
    return value


def test_pods_of_one_request_in_template_mode_send_nothing_for_a_template_that_exists(cp, hook):
    """Every template-mode admission POSTed the shared template and GOT it after the 409: two API
    calls inside each review, and in a burst of 500 pods the webhook, past its time budget, denied
    296 (docs/performance.md). The webhook now watches the templates it made: once the watch reports
    one, pods of its request cost no call; a template deleted by hand is made again by the next pod."""
    proc = hook.use("template")
    ns = hook.namespace()

    def pod(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                "spec": {"containers": [{"name": "app", "image": "busybox", "resources": {"limits": {
                    "huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "8192"}}}]}}

    def burst(names: list[str]) -> None:
        with ThreadPoolExecutor(len(names)) as pool:
            answers = list(pool.map(lambda n: cp.api("POST", f"/api/v1/namespaces/{ns}/pods", pod(n)), names))
        assert [status for status, _ in answers] == [201] * len(names), answers

    def caught_up() -> bool:  # earlier tests' namespaces may be going: compare with what exists now
        ours = ok(cp, "GET", "/apis/resource.k8s.io/v1/resourceclaimtemplates"
                             "?labelSelector=app.kubernetes.io/managed-by%3Dascend-dra-webhook")["items"]
        return _templates_known(proc) == len(ours)

    burst([f"first-{i}" for i in range(8)])
    name = ok(cp, "GET", f"/api/v1/namespaces/{ns}/pods/first-0")["spec"]["resourceClaims"][0][
        "resourceClaimTemplateName"]
    wait_until(caught_up, "the webhook's watch reports the template", within=20)
    before = _template_calls(proc)
    assert before["create"] >= 1 and before["list"] >= 1 and before["watch"] >= 1, before
    burst([f"then-{i}" for i in range(12)])
    assert _template_calls(proc) == before  # twelve admissions, no call for their template

    ok(cp, "DELETE", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates/{name}")
    wait_until(caught_up, "the webhook's watch reports the deletion", within=20)
    burst(["after-delete"])
    assert _template_calls(proc)["create"] == before["create"] + 1
    ok(cp, "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates/{name}")
