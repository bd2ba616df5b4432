"""Admin access (KEP-5018) on the real scheduler: an admin claim shares a device a workload holds.

The scheduler allocates an ``adminAccess`` request on a device that a workload claim already has
(admin access does not reserve), and only in a namespace labelled
``resource.kubernetes.io/admin-access: "true"``. Our Prepare must then accept it, in both orders,
and the admin claim must never block the workload.
"""

from __future__ import annotations

import uuid

import pytest
import yaml

from tests.cluster.test_publish import RES, apply_examples, ok, our_slices, pod_claim, wait_until
from tests.integration.daemon import DRIVER, Kubelet

pytestmark = pytest.mark.cluster

ADMIN_NS = "dra-admin"
CLASS = "fake.ascend.project-hami.io"


def ensure_admin_namespace(cp) -> None:
    status, reply = cp.api("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": ADMIN_NS, "labels": {"resource.kubernetes.io/admin-access": "true"}}})
    assert status in (201, 409), reply


def claim_pod(cp, namespace: str, *, admin: bool) -> str:
    """A ResourceClaim for one fake NPU (``adminAccess`` when ``admin``) and a pod that uses it."""
    name = f"{'adm' if admin else 'wl'}-{uuid.uuid4().hex[:8]}"
    request = {"name": "npu", "exactly": {"deviceClassName": CLASS, **({"adminAccess": True} if admin else {})}}
    ok(cp, "POST", f"{RES}/namespaces/{namespace}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}}})
    ok(cp, "POST", f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"resourceClaims": [{"name": "npu", "resourceClaimName": name}],
                 "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "npu"}]}}]}})
    return name


def allocated_and_reserved(cp, namespace: str, pod: str) -> dict:
    return wait_until(lambda: (c := pod_claim(cp, namespace, pod)) and c.get("status", {}).get("allocation")
                      and c["status"].get("reservedFor") and c, f"{namespace}/{pod} allocated", within=30)


@pytest.mark.parametrize("admin_first", [False, True], ids=["workload-first", "admin-first"])
def test_an_admin_claim_is_prepared_beside_the_workload_holding_the_device(cp, start_daemon, admin_first):
    d = start_daemon(fake_devices=1)  # one device: both claims must land on it
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    apply_examples(cp)
    ensure_admin_namespace(cp)
    k = Kubelet(d)
    made: list[tuple[str, str]] = []
    try:
        order = [(ADMIN_NS, True), ("default", False)] if admin_first else [("default", False), (ADMIN_NS, True)]
        claims = {}
        for namespace, admin in order:
            pod = claim_pod(cp, namespace, admin=admin)
            made.append((namespace, pod))
            claim = allocated_and_reserved(cp, namespace, pod)
            [result] = claim["status"]["allocation"]["devices"]["results"]
            assert result["device"] == "npu-0-0"
            assert bool(result.get("adminAccess")) is admin
            uid = claim["metadata"]["uid"]
            reply = k.prepare(claim)
            assert reply.claims[uid].error == "", reply.claims[uid].error
            claims[admin] = claim
        for claim in claims.values():
            uid = claim["metadata"]["uid"]
            spec = yaml.safe_load((d.cdi_dir / f"k8s.{DRIVER}-npu_{uid}.yaml").read_text())
            assert spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] == "/dev/davinci0"
        # Unpreparing the admin claim leaves the workload's hold; a second workload stays refused.
        admin_uid = claims[True]["metadata"]["uid"]
        assert k.unprepare(claims[True]).claims[admin_uid].error == ""
        assert claims[False]["metadata"]["uid"] in d.records()
    finally:
        k.close()
        for namespace, pod in made:
            cp.api("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod}?gracePeriodSeconds=0")
            cp.api("DELETE", f"{RES}/namespaces/{namespace}/resourceclaims/{pod}")
