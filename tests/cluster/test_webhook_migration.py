"""Moving from HAMi-DRA to this webhook, on a real kube-apiserver that calls the webhook over TLS
(docs/webhook.md#migrating-from-hami-dra, #updates-of-a-converted-pod).

The claims and pods HAMi-DRA left are made here as its webhook makes them: Lab 18's
``examples/hami-lab/ascend-share-a.yaml`` holds one of each (a claim with no owner and no label, and
the pod it mutated, labelled ``hami.io/dra``), put into this run's namespaces.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.controlplane import ControlPlane, default_bin_dir
from tests.cluster.test_publish import ok, wait_until
from tests.cluster.webhook_process import Hook, installed_hook

pytestmark = pytest.mark.cluster

LAB = Path(__file__).resolve().parents[2] / "examples" / "hami-lab" / "ascend-share-a.yaml"
MUTATING = "pods.hami.ascend.project-hami.io"
UPDATES = "pod-updates.hami.ascend.project-hami.io"
RC = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"


@pytest.fixture(scope="module")
def cp(tmp_path_factory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("migration-cp"), default_bin_dir())
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def hook(cp, tmp_path_factory) -> Iterator[Hook]:
    with installed_hook(cp, tmp_path_factory.mktemp("webhook"), mode="template") as h:
        yield h


def hami_dra_made(ns: str, pod_name: str, container: str = "app") -> tuple[dict[str, Any], dict[str, Any]]:
    """The claim HAMi-DRA's webhook creates for ``pod_name``'s ``container`` in ``ns``, and the pod
    as it stored it (Lab 18's pair, renamed)."""
    claim, pod = (copy.deepcopy(d) for d in yaml.safe_load_all(LAB.read_text()))
    name = f"{ns}-{pod_name}-{container}-ascend310p"
    claim["metadata"] = {"name": name, "namespace": ns}
    pod["metadata"].update(name=pod_name, namespace=ns)
    pod["spec"]["containers"][0]["name"] = container
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": name}]}
    pod["spec"]["resourceClaims"] = [{"name": name, "resourceClaimName": name}]
    return claim, pod


def claim_path(ns: str, name: str) -> str:
    return f"{RC.format(ns=ns)}/{name}"


def owners(cp, ns: str, name: str) -> list[dict[str, Any]] | None:
    return ok(cp, "GET", claim_path(ns, name))["metadata"].get("ownerReferences")


@pytest.mark.parametrize("mode", ["template", "claim"])
def test_a_claim_hami_dra_made_for_a_running_pod_is_adopted_and_goes_with_the_pod(cp, hook, mode):
    """HAMi-DRA's claims have no owner: once its webhook (which deleted them at the pod's DELETE) is
    gone, they outlived their pods, holding their share. In both modes the webhook's owner loop now
    makes the pod their owner, so the garbage collector deletes them with the pod; a HAMi-DRA claim
    two pods use, and a user's claim named the same way, are left alone."""
    hook.use(mode)
    ns = hook.namespace()
    shared, first = hami_dra_made(ns, "shared")
    second = copy.deepcopy(first)  # another pod that uses it, created first (a user's, not converted)
    second["metadata"]["name"] = "shared-too"
    del second["metadata"]["labels"]["hami.io/dra"]
    user_claim, user_pod = hami_dra_made(ns, "users")
    user_claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.example.com"
    claim, pod = hami_dra_made(ns, "web-0")
    for obj in (shared, user_claim, claim):
        ok(cp, "POST", RC.format(ns=ns), obj)
    for obj in (second, first, user_pod):
        ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", obj)
    stored = ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", pod)
    assert stored["metadata"]["labels"]["hami.io/dra"] == "true" and "limits" not in \
        stored["spec"]["containers"][0]["resources"]  # stored as HAMi-DRA left it: not sent to our CREATE
    adopted = wait_until(lambda: owners(cp, ns, claim["metadata"]["name"]), "HAMi-DRA's claim adopted", within=20)
    assert adopted == [{"apiVersion": "v1", "kind": "Pod", "name": "web-0", "uid": stored["metadata"]["uid"],
                        "controller": True, "blockOwnerDeletion": True}]
    # The pods were created in this order, so the loop has looked at the other two claims already.
    assert owners(cp, ns, shared["metadata"]["name"]) is None
    assert owners(cp, ns, user_claim["metadata"]["name"]) is None
    assert 'ascend_dra_webhook_hami_dra_claims_total{action="adopted"} 1.0' in hook.proc.metrics()
    ok(cp, "DELETE", f"/api/v1/namespaces/{ns}/pods/web-0?gracePeriodSeconds=0")
    wait_until(lambda: cp.api("GET", claim_path(ns, claim["metadata"]["name"]))[0] == 404,
               "the adopted claim garbage-collected with its pod", within=30)
    assert owners(cp, ns, shared["metadata"]["name"]) is None


HAMI_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "labels": {"app": "web"}}, "spec": {
    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {
        "huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "8192", "huawei.com/Ascend310P-core": "50"}}}]}}


def test_a_pod_made_again_under_the_name_of_a_leaked_hami_dra_claim_replaces_it_in_claim_mode(cp, hook):
    """A StatefulSet's web-0 created again after the switch, while HAMi-DRA's claim of the old web-0
    leaked: the conversion's claim name was taken and the pod was refused with 409 until someone
    deleted the claim. Now the leftover is replaced by a claim of ours; one a live pod still uses is
    not (the API server runs admission before it finds that a pod of that name exists)."""
    proc = hook.use("claim")
    ns = hook.namespace()
    leftover, _ = hami_dra_made(ns, "web-0")
    old_uid = ok(cp, "POST", RC.format(ns=ns), leftover)["metadata"]["uid"]
    name = leftover["metadata"]["name"]
    dry = ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", HAMI_POD)
    assert dry["spec"]["resourceClaims"] == [{"name": name, "resourceClaimName": name}]
    assert ok(cp, "GET", claim_path(ns, name))["metadata"]["uid"] == old_uid  # a dry run changes nothing
    stored = ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", HAMI_POD)
    assert stored["spec"]["resourceClaims"] == [{"name": name, "resourceClaimName": name}]
    replaced = ok(cp, "GET", claim_path(ns, name))
    assert replaced["metadata"]["uid"] != old_uid
    assert replaced["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "ascend-dra-webhook"
    assert 'device.attributes["ascend.project-hami.io"].?chipFamily.orValue("") == "Ascend310P"' in [
        s["cel"]["expression"] for s in replaced["spec"]["devices"]["requests"][0]["exactly"]["selectors"]]
    wait_until(lambda: owners(cp, ns, name), "the new claim owned by the new pod", within=20)
    assert 'ascend_dra_webhook_hami_dra_claims_total{action="replaced"} 1.0' in proc.metrics()
    # A HAMi-DRA pod that still runs, and a create of its name: its claim (adopted by it) is not taken.
    live_claim, live_pod = hami_dra_made(ns, "web-1")
    live_name = live_claim["metadata"]["name"]
    live_uid = ok(cp, "POST", RC.format(ns=ns), live_claim)["metadata"]["uid"]
    ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", live_pod)
    wait_until(lambda: owners(cp, ns, live_name), "web-1's claim adopted", within=20)
    status, reply = cp.api("POST", f"/api/v1/namespaces/{ns}/pods", {**HAMI_POD, "metadata": {"name": "web-1"}})
    assert status == 409, reply
    assert f"ResourceClaim {ns}/{live_name} (for spec.containers[0]) already exists and belongs to another pod " \
           "(Pod web-1 uid " in reply["message"], reply
    assert ok(cp, "GET", claim_path(ns, live_name))["metadata"]["uid"] == live_uid
    # A leaked one that a pod not converted (so never the loop's) still names: not taken either.
    used_claim, reader = hami_dra_made(ns, "web-2")
    used_uid = ok(cp, "POST", RC.format(ns=ns), used_claim)["metadata"]["uid"]
    reader["metadata"] = {"name": "reader"}
    ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", reader)
    status, reply = cp.api("POST", f"/api/v1/namespaces/{ns}/pods", {**HAMI_POD, "metadata": {"name": "web-2"}})
    assert status == 409, reply
    assert f"ResourceClaim {ns}/{used_claim['metadata']['name']} (for spec.containers[0]) was made by HAMi-DRA and " \
           "is still used by pod reader; it is taken over once nothing uses it, retry then" in reply["message"], reply
    assert ok(cp, "GET", claim_path(ns, used_claim["metadata"]["name"]))["metadata"]["uid"] == used_uid


def apply(cp, ns: str, manifest: dict[str, Any]) -> tuple[int, Any]:
    """A server-side apply of ``manifest`` by manager ``kubectl`` (what ``kubectl apply --server-side`` sends)."""
    return cp.api("PATCH", f"/api/v1/namespaces/{ns}/pods/{manifest['metadata']['name']}?fieldManager=kubectl"
                           "&force=true", manifest, content_type="application/apply-patch+yaml")


def client_apply(cp, ns: str, name: str, containers: list[dict[str, Any]]) -> tuple[int, Any]:
    """What a client-side ``kubectl apply`` of the manifest again sends: a strategic merge patch with
    the manifest's fields (the live pod's claims, which the manifest never had, stay)."""
    return cp.api("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", {"spec": {"containers": containers}},
                  content_type="application/strategic-merge-patch+json")


@pytest.mark.parametrize("mode", ["template", "claim"])
def test_applying_a_converted_pods_manifest_again_is_accepted_and_a_changed_request_refused(cp, hook, mode):
    """The apply put huawei.com/* back into the pod's resources, which no pod update may change: the
    API server refused it ("pod updates may not change fields"), so the manifest could not be
    applied again, not even to change the image. Now the update webhook takes them out again."""
    hook.use(mode)
    ns = hook.namespace()
    status, created = apply(cp, ns, HAMI_POD)
    assert status == 201, created
    before = ok(cp, "GET", f"/api/v1/namespaces/{ns}/pods/web-0")
    again = copy.deepcopy(HAMI_POD)
    again["spec"]["containers"][0]["image"] = "registry.k8s.io/pause:3.9"
    status, updated = apply(cp, ns, again)
    assert status == 200, updated
    assert updated["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.9"
    assert updated["spec"]["resourceClaims"] == before["spec"]["resourceClaims"]
    assert updated["spec"]["containers"][0]["resources"] == before["spec"]["containers"][0]["resources"]
    assert updated["metadata"]["labels"]["hami.io/dra"] == "true"
    status, patched = client_apply(cp, ns, "web-0", [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                                      "resources": HAMI_POD["spec"]["containers"][0]["resources"]}])
    assert status == 200, patched
    assert patched["spec"]["containers"][0]["resources"] == before["spec"]["containers"][0]["resources"]
    changed = copy.deepcopy(HAMI_POD)
    changed["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend310P-memory"] = "4096"
    status, reply = apply(cp, ns, changed)
    assert status == 422, reply
    assert reply["message"].startswith(
        f'admission webhook "{UPDATES}" denied the request: pod {ns}/web-0: spec.containers[0].resources: the NPU '
        "request cannot change once the pod is created: this update asks for huawei.com/Ascend310P 1 chip(s), "
        "memory 4294967296 bytes, cores 50, and its claims hold "), reply


def test_editing_a_hami_annotation_of_a_converted_pod_is_refused_and_other_edits_pass(cp, hook):
    """An edited hami.io/use-<w>-uuid was stored and did nothing: the claim's selectors were made from
    it at creation. Labels and images still change; a removed hami.io/dra label is put back."""
    hook.use("template")
    ns = hook.namespace()
    pod = copy.deepcopy(HAMI_POD)
    pod["metadata"]["annotations"] = {"hami.io/use-Ascend310P-uuid": "A"}
    ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", pod)
    path = f"/api/v1/namespaces/{ns}/pods/web-0"
    merge = "application/merge-patch+json"
    status, reply = cp.api("PATCH", path, {"metadata": {"annotations": {"hami.io/use-Ascend310P-uuid": "B"}}}, merge)
    assert status == 422, reply
    assert reply["message"].startswith(
        f'admission webhook "{UPDATES}" denied the request: pod {ns}/web-0: '
        'metadata.annotations["hami.io/use-Ascend310P-uuid"]: changed from "A" to "B": the pod\'s claims were made '
        "from it when the pod was created"), reply
    status, reply = cp.api("PATCH", path, {"metadata": {"labels": {"tier": "gold", "hami.io/dra": None},
                                                        "annotations": {"note": "x"}}}, merge)
    assert status == 200, reply
    assert reply["metadata"]["labels"] == {"app": "web", "tier": "gold", "hami.io/dra": "true"}
    assert reply["metadata"]["annotations"] == {"hami.io/use-Ascend310P-uuid": "A", "note": "x"}


def test_with_the_webhook_down_updates_of_converted_pods_still_pass(cp, hook):
    """The update webhook fails open: controllers' updates of pods (labels, finalizers, owners) must
    not wait for it."""
    hook.use("template")
    ns = hook.namespace()
    ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", HAMI_POD)
    hook.stop()
    try:
        status, reply = cp.api("PATCH", f"/api/v1/namespaces/{ns}/pods/web-0",
                               {"metadata": {"labels": {"tier": "gold"}}}, "application/merge-patch+json")
        assert status == 200, reply
    finally:
        hook.use("template")
    assert reply["metadata"]["labels"] == {"app": "web", "hami.io/dra": "true", "tier": "gold"}


def test_applying_again_keeps_what_a_hami_device_config_added(cp, hook, tmp_path):
    """With HAMi's device config the conversion also sets runtimeClassName and an empty
    ASCEND_VISIBLE_DEVICES; an apply that leaves them out must not drop them (both immutable)."""
    config = tmp_path / "device-config.yaml"
    config.write_text("vnpus:\n- {chipName: 310P3, commonWord: Ascend310P, resourceName: huawei.com/Ascend310P,\n"
                      "   resourceMemoryName: huawei.com/Ascend310P-memory,\n"
                      "   resourceCoreName: huawei.com/Ascend310P-core,\n"
                      "   runtimeClassName: ascend, overwriteEnv: true}\n")
    hook.use("template", ("--hami-device-config", str(config)))
    ns = hook.namespace()
    manifest = copy.deepcopy(HAMI_POD)
    manifest["spec"]["containers"].append({"name": "side", "image": "registry.k8s.io/pause:3.10"})
    status, created = apply(cp, ns, manifest)
    assert status == 201, created
    assert created["spec"]["runtimeClassName"] == "ascend"
    assert created["spec"]["containers"][1]["env"] == [{"name": "ASCEND_VISIBLE_DEVICES"}]
    manifest["spec"]["containers"][0]["image"] = "registry.k8s.io/pause:3.9"
    status, updated = apply(cp, ns, manifest)
    assert status == 200, updated
    assert updated["spec"]["runtimeClassName"] == "ascend"
    assert updated["spec"]["containers"][1]["env"] == [{"name": "ASCEND_VISIBLE_DEVICES"}]
    assert updated["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.9"
