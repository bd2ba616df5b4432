"""What changed in DRA from Kubernetes 1.35 to 1.37, on the real control plane of each version (issue 13).

Run on 1.35 (default), 1.36 and 1.37 (``ASCEND_DRA_K8S=1.37``). A test for a feature the version under
test lacks is skipped with the reason; where the lack itself is behaviour we document (extended
resources on 1.35), that behaviour is tested instead. grpcio plays the kubelet, as everywhere.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.controlplane import free_port
from tests.cluster.test_publish import (
    EXAMPLES,
    RES,
    apply_examples,
    ok,
    our_slices,
    wait_until,
)
from tests.cluster.versions import at_least, require_k8s
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

pytestmark = pytest.mark.cluster

HEALTHY = 1
FAKE_CLASS = "fake.ascend.project-hami.io"


def claim_of(cp, namespace: str, name: str) -> dict[str, Any]:
    return ok(cp, "GET", f"{RES}/namespaces/{namespace}/resourceclaims/{name}")


def our_status(claim: dict[str, Any]) -> list[dict[str, Any]]:
    """Our entries of ``status.devices``, without the fields the API server shows as null (conditions)."""
    return [{k: v for k, v in d.items() if v is not None}
            for d in claim.get("status", {}).get("devices") or [] if d["driver"] == DRIVER]


# -- resource health (KEP-4680) ---------------------------------------------------------------------


def test_both_health_services_stream_the_published_devices(cp, start_daemon):
    d = start_daemon()
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    k = Kubelet(d)
    try:
        assert list(k.get_info().supported_versions) == [
            "v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"]
        published = {dev["name"] for s in our_slices(cp, cp.node_name) for dev in s["spec"]["devices"]}
        for api in ("v1", "v1alpha1"):
            message = k.first_health(api)
            assert {(x.device.pool_name, x.device.device_name) for x in message.devices} == {
                (cp.node_name, name) for name in published}, api
            assert {x.health for x in message.devices} == {HEALTHY}
    finally:
        k.close()


# -- registration rules of the 1.38 kubelet ---------------------------------------------------------


def test_a_bad_driver_name_or_endpoint_is_refused_at_start_up_and_publishes_nothing(cp, short_tmp):
    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ascend_dra.cli", "run", "--profiles", "fake",
                               "--node-name", cp.node_name, "--kubeconfig", str(cp.kubeconfig),
                               "--cdi-root", str(short_tmp / "cdi"), *extra],
                              capture_output=True, text=True, timeout=60)

    name = run("--driver-name", "NPU_Driver", "--kubelet-root-dir", str(short_tmp))
    assert name.returncode == 2
    assert name.stderr.splitlines() == [
        "ascend-dra run: --driver-name 'NPU_Driver' must be a lower-case DNS subdomain of at most 63 characters "
        "(e.g. ascend.project-hami.io); it is the CDI vendor and the slices' driver"]
    outside = run("--kubelet-root-dir", str(short_tmp / "kubelet"),
                  "--kubelet-plugins-directory-path", str(short_tmp / "run"))
    assert outside.returncode == 2
    assert outside.stderr.splitlines() == [
        f"ascend-dra run: DRA socket {short_tmp}/run/{DRIVER}/dra.sock: the kubelet accepts only endpoints "
        f"inside its root dir {short_tmp}/kubelet (--kubelet-root-dir); put --kubelet-plugins-directory-path "
        "under it"]
    assert our_slices(cp, cp.node_name) == []


# -- claim device status (KEP-4817) -----------------------------------------------------------------


def claim_and_pod(cp, json_style: str, aicore_limit: int = 40) -> str:
    """A ResourceClaim for one fake NPU with a FakeConfig, created by a client of ``json_style``, and a pod."""
    name = f"st-{uuid.uuid4().hex[:8]}"
    config = {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "FakeConfig", "aicoreLimit": aicore_limit}
    status, reply = cp.api("POST", f"{RES}/namespaces/default/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "npu", "exactly": {"deviceClassName": FAKE_CLASS}}],
                             "config": [{"requests": ["npu"], "opaque": {"driver": DRIVER, "parameters": config}}]}}},
        json_style=json_style)
    assert status == 201, reply
    ok(cp, "POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"resourceClaims": [{"name": "npu", "resourceClaimName": name}],
                 "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "npu"}]}}]}})
    return name


def delete_claim_and_pod(cp, name: str) -> None:
    cp.api("DELETE", f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")
    cp.api("DELETE", f"{RES}/namespaces/default/resourceclaims/{name}")


def status_writers(claim: dict[str, Any]) -> set[tuple[str, str, str | None]]:
    """``(manager, operation, subresource)`` of our driver's field managers (``<driver>/<node>``)."""
    return {(f["manager"], f["operation"], f.get("subresource")) for f in claim["metadata"]["managedFields"]
            if f["manager"].split("/")[0] == DRIVER}


# How the claim's creator encoded it decides how its status can be patched (ClaimStatusWriter._merge).
CREATORS = {"kubectl": ("Apply", "status"), "go": ("Update", "status")}


def status_metrics(port: int) -> tuple[float, float, float]:
    """``(pending, ok, failed)``: the daemon's claim-status backlog and writes, as Prometheus reads them."""
    from tests.integration.test_metrics import scrape

    m = scrape(port)
    return (m[("ascend_dra_claim_status_pending", ())],
            m[("ascend_dra_claim_status_writes_total", (("result", "ok"),))],
            m[("ascend_dra_claim_status_writes_total", (("result", "failed"),))])


def metrics_args(port: int) -> tuple[str, ...]:
    return ("--metrics-port", str(port), "--metrics-address", "127.0.0.1")


@pytest.mark.parametrize("creator", sorted(CREATORS))
def test_claim_status_shows_our_data_after_prepare_and_loses_it_after_unprepare(cp, start_daemon, creator):
    port = free_port()
    d = start_daemon(extra_args=metrics_args(port))
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    apply_examples(cp)
    name = claim_and_pod(cp, creator)
    k = Kubelet(d)
    try:
        claim = wait_until(lambda: (c := claim_of(cp, "default", name)).get("status", {}).get("reservedFor") and c,
                           "allocated and reserved", within=30)
        uid = claim["metadata"]["uid"]
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert k.prepare(claim).claims[uid].error == ""
        [entry] = wait_until(lambda: our_status(claim_of(cp, "default", name)), "status.devices written")
        index = int(result["device"].split("-")[1])
        assert entry == {"driver": DRIVER, "pool": cp.node_name, "device": result["device"],
                         "data": {"env": {"ASCEND_GLOBAL_LOG_LEVEL": "1", "ASCEND_VISIBLE_DEVICES": str(index),
                                          "FAKE_NPU_AICORE_LIMIT": "40"}}}
        assert status_writers(claim_of(cp, "default", name)) == {(f"{DRIVER}/{cp.node_name}", *CREATORS[creator])}
        assert wait_until(lambda: status_metrics(port) == (0, 1, 0) or None, "the write counted") is True

        assert k.unprepare(claim).claims[uid].error == ""
        wait_until(lambda: not our_status(claim_of(cp, "default", name)), "status.devices removed")
        assert wait_until(lambda: status_metrics(port) == (0, 2, 0) or None, "the removal counted") is True
        assert claim_of(cp, "default", name)["status"]["allocation"] == claim["status"]["allocation"]
    finally:
        k.close()
        delete_claim_and_pod(cp, name)


def test_a_claim_whose_status_the_api_server_refuses_to_patch_is_still_prepared(cp, start_daemon):
    """Opaque parameters written with whitespace (Python's json.dumps) make every patch of the
    claim's status fail "status.allocation: field is immutable" on the API server: the Prepare
    succeeds all the same and the failure is one warning, and one count of the failed writes."""
    port = free_port()
    d = start_daemon(extra_args=metrics_args(port))
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    apply_examples(cp)
    name = claim_and_pod(cp, "python")
    k = Kubelet(d)
    try:
        claim = wait_until(lambda: (c := claim_of(cp, "default", name)).get("status", {}).get("reservedFor") and c,
                           "allocated and reserved", within=30)
        uid = claim["metadata"]["uid"]
        reply = k.prepare(claim).claims[uid]
        assert reply.error == "" and len(reply.devices) == 1
        wait_until(lambda: "writing the claim's status.devices failed; the claim stays prepared" in d.log_text(),
                   "the status write given up", within=20)
        assert "status.allocation" in d.log_text()
        assert our_status(claim_of(cp, "default", name)) == []
        assert status_metrics(port) == (0, 0, 1)
        assert k.unprepare(claim).claims[uid].error == ""
    finally:
        k.close()
        delete_claim_and_pod(cp, name)


def limited_kubeconfig(cp, path: Path) -> Path:
    """A kubeconfig for a service account that may publish slices and read claims, but not write
    ``resourceclaims/status``: the daemon's status writes get 403."""
    sa = f"limited-{uuid.uuid4().hex[:6]}"
    ok(cp, "POST", "/api/v1/namespaces/default/serviceaccounts",
       {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}})
    rules = [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["*"]},
             {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch"]},
             {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    ok(cp, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
       {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": sa}, "rules": rules})
    ok(cp, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": sa},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "default"}]})
    token = ok(cp, "POST", f"/api/v1/namespaces/default/serviceaccounts/{sa}/token",
               {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})["status"]["token"]
    config = yaml.safe_load(cp.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_claim_status_that_cannot_be_written_never_fails_the_prepare(cp, short_tmp):
    kubeconfig = limited_kubeconfig(cp, short_tmp / "limited-kubeconfig")
    d = DaemonProcess(short_tmp / "node", node=cp.node_name, kubeconfig=kubeconfig).start()
    k = Kubelet(d)
    pod = ""
    try:
        wait_until(lambda: our_slices(cp, cp.node_name), "published")
        apply_examples(cp)
        pod = claim_and_pod(cp, "kubectl")
        claim = wait_until(lambda: (c := claim_of(cp, "default", pod)).get("status", {}).get("reservedFor") and c,
                           "allocated and reserved", within=30)
        uid = claim["metadata"]["uid"]
        reply = k.prepare(claim).claims[uid]
        assert reply.error == "" and len(reply.devices) == 1
        wait_until(lambda: "writing the claim's status.devices failed; trying again later" in d.log_text(),
                   "the status write deferred", within=20)
        assert "HTTP 403" in d.log_text()
        assert our_status(claim_of(cp, "default", pod)) == []
        assert k.prepare(claim).claims[uid].error == ""  # and it stays prepared
        assert k.unprepare(claim).claims[uid].error == ""
    finally:
        k.close()
        d.stop()
        if pod:
            delete_claim_and_pod(cp, pod)


# -- prioritized lists (firstAvailable) -------------------------------------------------------------


def test_a_prioritized_list_falls_back_to_its_second_choice_and_is_prepared_with_its_config(cp, start_daemon):
    d = start_daemon(fake_devices=4)
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    apply_examples(cp)
    name = f"fa-{uuid.uuid4().hex[:8]}"
    config = {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "FakeConfig", "aicoreLimit": 25}
    ok(cp, "POST", f"{RES}/namespaces/default/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {
            "requests": [{"name": "npu", "firstAvailable": [
                {"name": "eight", "deviceClassName": FAKE_CLASS, "count": 8},  # the node has 4: cannot fit
                {"name": "two", "deviceClassName": FAKE_CLASS, "count": 2}]}],
            # A config for the request applies to whichever sub-request was chosen (npu -> npu/two).
            "config": [{"requests": ["npu"], "opaque": {"driver": DRIVER, "parameters": config}}]}}})
    ok(cp, "POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"resourceClaims": [{"name": "npu", "resourceClaimName": name}],
                 "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "npu"}]}}]}})
    k = Kubelet(d)
    try:
        claim = wait_until(lambda: (c := claim_of(cp, "default", name)) and c.get("status", {}).get("reservedFor")
                           and c, "allocated by the scheduler", within=30)
        results = claim["status"]["allocation"]["devices"]["results"]
        assert [r["request"] for r in results] == ["npu/two", "npu/two"]
        uid = claim["metadata"]["uid"]
        reply = k.prepare(claim).claims[uid]
        assert reply.error == ""
        assert [list(dev.request_names) for dev in reply.devices] == [["npu"], ["npu"]]  # the base request
        spec = yaml.safe_load((d.cdi_dir / f"k8s.{DRIVER}-npu_{uid}.yaml").read_text())
        [metadata] = [dev for dev in spec["devices"] if dev["name"] == f"{uid}-metadata_npu"]  # KEP-5304, base request
        for device in spec["devices"]:
            if device is not metadata:
                assert "FAKE_NPU_AICORE_LIMIT=25" in device["containerEdits"]["env"]
        assert k.unprepare(claim).claims[uid].error == ""
    finally:
        k.close()
        cp.api("DELETE", f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")
        cp.api("DELETE", f"{RES}/namespaces/default/resourceclaims/{name}")


# -- extended resources (KEP-5004) ------------------------------------------------------------------

EXTENDED_CLASSES = EXAMPLES / "deviceclasses" / "ascend-extended-resources.yaml"


def apply_extended_classes(cp) -> list[dict[str, Any]]:
    stored = []
    for doc in yaml.safe_load_all(EXTENDED_CLASSES.read_text()):
        if doc:
            cp.api("DELETE", f"{RES}/deviceclasses/{doc['metadata']['name']}")
            stored.append(ok(cp, "POST", f"{RES}/deviceclasses", doc))
    return stored


def delete_extended_classes(cp) -> None:
    for doc in yaml.safe_load_all(EXTENDED_CLASSES.read_text()):
        if doc:
            cp.api("DELETE", f"{RES}/deviceclasses/{doc['metadata']['name']}")


def classic_pod(cp) -> str:
    """examples/pods/ascend310p-extended-resource-pod.yaml (limits huawei.com/Ascend310P: 1), under a fresh name."""
    pod = yaml.safe_load((EXAMPLES / "pods" / "ascend310p-extended-resource-pod.yaml").read_text())
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"huawei.com/Ascend310P": 1}}
    pod["metadata"]["name"] = name = f"classic-{uuid.uuid4().hex[:8]}"
    ok(cp, "POST", "/api/v1/namespaces/default/pods", pod)
    return name


def simulated_310p_daemon(cp, root: Path, chips: int = 2, profile: str = "npu-310P") -> DaemonProcess:
    """The npu-310P profile (or ``profile``, a whole-chip one) on its simulated tier, with device nodes
    (plain files) under ``root/dev``."""
    dev = root / "dev"
    dev.mkdir(parents=True)
    # The simulated tier backs its device nodes with /dev/null, looked up under --dev-root too.
    for node in [*(f"davinci{i}" for i in range(chips)), "davinci_manager", "devmm_svm", "hisi_hdc", "null"]:
        (dev / node).write_text("")
    return DaemonProcess(root / "node", node=cp.node_name, kubeconfig=cp.kubeconfig, profiles=profile,
                         fake_devices=chips, extra_args=["--profile-option", f"{profile}.simulate=always",
                                                         "--npu-smi", "/bin/false",
                                                         "--dev-root", str(dev)]).start()


def test_a_classic_extended_resource_pod_gets_our_chip_with_no_claim_written(cp, short_tmp, k8s_version):
    require_k8s(k8s_version, "1.36", "DRA extended resources (DeviceClass.spec.extendedResourceName, "
                                     "KEP-5004, beta and on by default in 1.36, GA in 1.37)")
    d = simulated_310p_daemon(cp, short_tmp)
    k = Kubelet(d)
    pod = ""
    try:
        wait_until(lambda: our_slices(cp, cp.node_name), "published")
        stored = apply_extended_classes(cp)
        assert stored[0]["spec"]["extendedResourceName"] == "huawei.com/Ascend310P"
        pod = classic_pod(cp)
        status = wait_until(lambda: ok(cp, "GET", f"/api/v1/namespaces/default/pods/{pod}").get("status", {})
                            .get("extendedResourceClaimStatus"), "the scheduler's claim", within=30)
        claim = wait_until(lambda: (c := claim_of(cp, "default", status["resourceClaimName"]))
                           .get("status", {}).get("reservedFor") and c, "allocated and reserved", within=30)
        assert ok(cp, "GET", f"/api/v1/namespaces/default/pods/{pod}")["spec"]["nodeName"] == cp.node_name
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"]) == (DRIVER, cp.node_name)
        uid = claim["metadata"]["uid"]
        reply = k.prepare(claim).claims[uid]
        assert reply.error == ""
        physical_id = int(result["device"].split("-")[1])  # simulated chips: physical ID = logic ID
        spec = yaml.safe_load((d.cdi_dir / f"k8s.{DRIVER}-npu_{uid}.yaml").read_text())
        assert f"ASCEND_VISIBLE_DEVICES={physical_id}" in spec["devices"][0]["containerEdits"]["env"]
        [entry] = wait_until(lambda: our_status(claim_of(cp, "default", claim["metadata"]["name"])), "status")
        assert entry["data"]["physicalID"] == physical_id
        assert entry["data"]["env"]["ASCEND_VISIBLE_DEVICES"] == str(physical_id)
        assert k.unprepare(claim).claims[uid].error == ""
    finally:
        k.close()
        d.stop()
        if pod:
            cp.api("DELETE", f"/api/v1/namespaces/default/pods/{pod}?gracePeriodSeconds=0")
        delete_extended_classes(cp)


def test_a_job_written_for_the_ascend_device_plugin_gets_910_chips(cp, short_tmp, k8s_version):
    """``huawei.com/Ascend910``, the name Huawei's device plugin gives 910A, 910B and A3 chips alike:
    a pod asking for 2 gets two chips of the npu-910 profile (simulated 910B3). No class had that
    name, and such a pod stayed Pending with "Insufficient huawei.com/Ascend910"."""
    require_k8s(k8s_version, "1.36", "DRA extended resources (KEP-5004)")
    d = simulated_310p_daemon(cp, short_tmp, chips=2, profile="npu-910")
    pod = f"mind-{uuid.uuid4().hex[:8]}"
    try:
        wait_until(lambda: our_slices(cp, cp.node_name), "published")
        apply_extended_classes(cp)
        ok(cp, "POST", "/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
            "spec": {"containers": [{"name": "train", "image": "busybox",
                                     "resources": {"limits": {"huawei.com/Ascend910": 2}}}]}})
        status = wait_until(lambda: ok(cp, "GET", f"/api/v1/namespaces/default/pods/{pod}").get("status", {})
                            .get("extendedResourceClaimStatus"), "the scheduler's claim", within=30)
        claim = wait_until(lambda: (c := claim_of(cp, "default", status["resourceClaimName"]))
                           .get("status", {}).get("allocation") and c, "allocated", within=30)
        assert sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"]) == [
            "npu-0-0", "npu-1-0"]
    finally:
        d.stop()
        cp.api("DELETE", f"/api/v1/namespaces/default/pods/{pod}?gracePeriodSeconds=0")
        delete_extended_classes(cp)


def test_without_the_gate_the_class_loses_its_resource_name_and_the_pod_stays_pending(cp, k8s_version):
    if at_least(k8s_version, "1.36"):
        pytest.skip(f"Kubernetes {k8s_version} serves extendedResourceName (DRAExtendedResource on by default "
                    "from 1.36); the behaviour without it is tested on 1.35")
    pod = ""
    try:
        stored = apply_extended_classes(cp)
        assert all("extendedResourceName" not in c["spec"] for c in stored)  # dropped silently by the API server
        pod = classic_pod(cp)
        condition = wait_until(lambda: next((c for c in ok(cp, "GET", f"/api/v1/namespaces/default/pods/{pod}")
                                             .get("status", {}).get("conditions") or []
                                             if c["type"] == "PodScheduled" and c["status"] == "False"), None),
                               "the scheduler's verdict", within=30)
        assert condition["reason"] == "Unschedulable"
        assert "Insufficient huawei.com/Ascend310P" in condition["message"]
    finally:
        if pod:
            cp.api("DELETE", f"/api/v1/namespaces/default/pods/{pod}?gracePeriodSeconds=0")
        delete_extended_classes(cp)
