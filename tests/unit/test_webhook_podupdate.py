"""UPDATE of a converted pod (ascend_dra/webhook/podupdate.py, docs/webhook.md#updates-of-a-converted-pod),
against an in-memory API that holds the claims and templates the conversion made."""

from __future__ import annotations

import base64
import copy
from typing import Any

import orjson
import pytest

from ascend_dra.hami.chips import DEFAULT_CHIPS
from ascend_dra.hami.convert import Mode, convert_pod
from ascend_dra.webhook.kubeapi import ApiError
from ascend_dra.webhook.podupdate import PodUpdates
from ascend_dra.webhook.review import ReviewRequest
from tests.jsonpatch import apply_patch

pytestmark = pytest.mark.anyio

DRIVER = "ascend.project-hami.io"
UUID = "68496E64-20E05477-92C31323-6E78030A-BD003019"
LIMITS = {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "8192", "huawei.com/Ascend310P-core": "50"}


class FakeApi:
    """GETs of the claims and templates a conversion made; any other call is a test failure."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    async def request(self, method: str, path: str, **_: Any) -> Any:
        assert method == "GET", (method, path)
        if path not in self.objects:
            raise ApiError(404, "NotFound", f"{path} not found")
        return self.objects[path]


def manifest(limits: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The pod as the user wrote it (and as an apply sends it again)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "ns", "labels": {"app": "web"},
                         "annotations": {"hami.io/use-Ascend310P-uuid": UUID, **(annotations or {})}},
            "spec": {"initContainers": [{"name": "warm", "image": "x", "resources": {
                         "limits": {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "4096"}}}],
                     "containers": [{"name": "app", "image": "x", "resources": {
                         "limits": {**(limits or LIMITS), "cpu": "1"}}}]}}


def created(api: FakeApi, mode: Mode, written: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stored pod after its conversion, with what the conversion made put into ``api``."""
    written = written or manifest()
    conversion = convert_pod(written, "ns", mode=mode)
    plural = "resourceclaims" if mode is Mode.CLAIM else "resourceclaimtemplates"
    for claim in conversion.claims:
        spec = claim.spec if mode is Mode.CLAIM else {"spec": claim.spec}
        api.objects[f"/apis/resource.k8s.io/v1/namespaces/ns/{plural}/{claim.object_name}"] = {
            "metadata": {"name": claim.object_name}, "spec": spec}
    stored = apply_patch(written, conversion.patch)
    stored["metadata"]["uid"] = "u-1"
    return stored


def reapplied(stored: dict[str, Any], written: dict[str, Any]) -> dict[str, Any]:
    """What a client-side ``kubectl apply`` of ``written`` sends: the live pod with the manifest's
    fields laid over it (the claims it never wrote stay)."""
    new = copy.deepcopy(stored)
    for section in ("initContainers", "containers"):
        for mine, theirs in zip(new["spec"][section], written["spec"][section], strict=True):
            for part, values in theirs["resources"].items():
                mine["resources"].setdefault(part, {}).update(values)
    new["metadata"]["annotations"] = dict(written["metadata"]["annotations"])
    return new


async def answer(api: FakeApi, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    request = ReviewRequest(uid="r", group="", version="v1", kind="Pod", operation="UPDATE", namespace="ns",
                            name="web-0", object=new, dry_run=False, old_object=old)
    body, _ = await PodUpdates(api, DEFAULT_CHIPS, DRIVER).review(request)
    return orjson.loads(body)["response"]


def patched(response: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    assert response["allowed"] is True, response
    return apply_patch(new, orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else [])


@pytest.mark.parametrize("mode", [Mode.CLAIM, Mode.TEMPLATE])
async def test_applying_the_same_manifest_again_changes_nothing_it_may_not(mode):
    """The apply put huawei.com/* back into the pod's resources, which an UPDATE may not change: the
    API server refused it, and an unchanged manifest could not be applied again (or have its image
    changed). Now the entries are taken out again, leaving what the API server allows."""
    api = FakeApi()
    stored = created(api, mode)
    new = reapplied(stored, manifest())
    new["spec"]["containers"][0]["image"] = "y"  # what an update may change
    result = patched(await answer(api, stored, new), new)
    expected = copy.deepcopy(stored)
    expected["spec"]["containers"][0]["image"] = "y"
    assert result == expected


async def test_server_side_apply_that_drops_the_claims_gets_them_back():
    """Server-side apply removes what its manager set and no longer applies: the claims the conversion
    added under that manager, and the label; the update then changed immutable fields."""
    api = FakeApi()
    stored = created(api, Mode.CLAIM)
    new = copy.deepcopy(manifest())
    new["metadata"]["uid"] = "u-1"
    new["metadata"]["labels"] = {"app": "web"}
    assert patched(await answer(api, stored, new), new) == stored


async def test_an_apply_that_changes_the_request_is_refused_saying_why():
    api = FakeApi()
    stored = created(api, Mode.CLAIM)
    new = reapplied(stored, manifest({**LIMITS, "huawei.com/Ascend310P-memory": "4096"}))
    response = await answer(api, stored, new)
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        "pod ns/web-0: spec.containers[0].resources: the NPU request cannot change once the pod is created: this "
        "update asks for huawei.com/Ascend310P 1 chip(s), memory 4294967296 bytes, cores 50, and its claims hold "
        "ResourceClaim ns-web-0-app-ascend310p: 1 chip(s), memory 8589934592 bytes, cores 50; delete the pod and "
        "create it again (a pod's resources cannot change under HAMi either)")
    other_chip = reapplied(stored, manifest({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "8192",
                                             "huawei.com/Ascend910B3-core": "50"}))
    assert (await answer(api, stored, other_chip))["allowed"] is False


@pytest.mark.parametrize(("key", "value"), [
    ("hami.io/use-Ascend310P-uuid", "OTHER-UUID"),
    ("hami.io/use-Ascend310P-uuid", None),
    ("hami.io/no-use-Ascend310P-uuid", UUID),
    ("hami.io/use-nputype", "310P3"),
], ids=["changed", "removed", "added", "nputype"])
async def test_editing_an_annotation_the_claims_were_made_from_is_refused(key, value):
    """The edit was accepted and did nothing: the claim's selectors were fixed at creation."""
    api = FakeApi()
    stored = created(api, Mode.TEMPLATE)
    new = copy.deepcopy(stored)
    if value is None:
        del new["metadata"]["annotations"][key]
    else:
        new["metadata"]["annotations"][key] = value
    response = await answer(api, stored, new)
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith(f'pod ns/web-0: metadata.annotations["{key}"]: ')
    assert "the pod's claims were made from it when the pod was created" in message
    assert "delete the pod and create it again with the new value" in message


async def test_other_edits_pass_and_an_annotation_of_a_chip_the_pod_does_not_use_too():
    api = FakeApi()
    stored = created(api, Mode.CLAIM)
    new = copy.deepcopy(stored)
    new["metadata"]["annotations"]["hami.io/use-Ascend910B3-uuid"] = "X"
    new["metadata"]["labels"]["tier"] = "gold"
    new["spec"]["containers"][0]["image"] = "y"
    response = await answer(api, stored, new)
    assert response == {"uid": "r", "allowed": True}


async def test_a_removed_dra_label_is_put_back_with_a_warning():
    api = FakeApi()
    stored = created(api, Mode.CLAIM)
    new = copy.deepcopy(stored)
    del new["metadata"]["labels"]["hami.io/dra"]
    response = await answer(api, stored, new)
    assert patched(response, new)["metadata"]["labels"] == stored["metadata"]["labels"]
    assert response["warnings"] == ['metadata.labels["hami.io/dra"]: kept: it marks the pod as converted, and the '
                                    "webhook finds the pod's claims by it"]


async def test_a_pod_being_deleted_or_never_converted_always_passes():
    api = FakeApi()
    stored = created(api, Mode.CLAIM)
    new = copy.deepcopy(stored)
    new["metadata"]["annotations"]["hami.io/use-Ascend310P-uuid"] = "OTHER"
    new["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert (await answer(api, stored, new))["allowed"] is True
    plain = manifest()
    assert (await answer(api, plain, reapplied(plain, manifest())))["allowed"] is True


async def test_a_pod_hami_dra_converted_is_compared_with_its_claim_too():
    """Lab 18's pod as HAMi-DRA stored it (examples/hami-lab/ascend-share-a.yaml): its claim has no
    chip-model selector, and an apply of the lab's manifest is still the same request."""
    api = FakeApi()
    name = "dra-ascend-e2e-ascend-share-a-app-ascend310p"
    api.objects[f"/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/{name}"] = {
        "metadata": {"name": name}, "spec": {"devices": {"requests": [{"name": "npu", "exactly": {
            "allocationMode": "ExactCount", "count": 1, "deviceClassName": "hami-vnpu-core.project-hami.io",
            "capacity": {"requests": {"cores": "50", "memory": "8589934592"}}, "selectors": [
                {"cel": {"expression": f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == '
                                       '"HAMivNPUCore"'}},
                {"cel": {"expression": f'device.attributes["{DRIVER}"].uuid in ["{UUID}"]'}}]}}]}}}
    stored = {"metadata": {"name": "ascend-share-a", "namespace": "ns", "uid": "u",
                           "labels": {"hami.io/dra": "true", "hami.io/webhook": "ignore"},
                           "annotations": {"hami.io/use-Ascend310P-uuid": UUID}},
              "spec": {"containers": [{"name": "app", "image": "x", "resources": {"claims": [{"name": name}]}}],
                       "resourceClaims": [{"name": name, "resourceClaimName": name}]}}
    new = copy.deepcopy(stored)
    new["spec"]["containers"][0]["resources"]["limits"] = dict(LIMITS)
    assert patched(await answer(api, stored, new), new) == stored


async def test_an_init_container_that_shares_the_app_containers_claim_is_the_same_request_again():
    api = FakeApi()
    written = manifest()
    written["spec"]["initContainers"][0]["resources"]["limits"] = {
        "huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "4096", "huawei.com/Ascend310P-core": "25"}
    stored = created(api, Mode.CLAIM, written)
    assert stored["spec"]["initContainers"][0]["resources"]["claims"] == stored["spec"]["containers"][0]["resources"][
        "claims"]
    new = reapplied(stored, written)
    assert patched(await answer(api, stored, new), new) == stored
    written["spec"]["initContainers"][0]["resources"]["limits"]["huawei.com/Ascend310P-core"] = "75"  # more than held
    assert (await answer(api, stored, reapplied(stored, written)))["allowed"] is False
