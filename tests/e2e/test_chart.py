"""Our chart and image on the two-node bed, installed as a user installs them (tests/e2e/release.py):
the DaemonSet pods register with each kubelet and publish; a claim pod runs on each node with its
devices, env and mounts; HAMi-syntax pods go through the webhook pod (kube-apiserver → Service →
pod, the certificate of hack/webhook-certs.sh) and reproduce Lab 18; the ValidatingAdmissionPolicy
judges a daemon pod's own token. The upgrade and uninstall steps: test_roll.py, test_uninstall.py.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request

import pytest
import yaml

from tests.cluster.chart import api_as
from tests.cluster.test_publish import pod_claim
from tests.cluster.test_webhook_allocation import LAB_ENV
from tests.e2e import usage
from tests.e2e.claims import CLAIMS_NS, LAB_NS, lab_pod, our_status, pod_log, printed_env
from tests.e2e.nodeview import condition_time, container_id, in_container, klog_time, kubelet_lines, task_pid
from tests.e2e.release import (
    CHART,
    DRIVER,
    FAKE_NODE,
    FAKE_RELEASE,
    LAB_NODE,
    LAB_RELEASE,
    NAMESPACE,
    WEBHOOK,
    daemon_pods,
    webhook_pods,
)
from tests.kubelet.pods import RES, delete_pod, get_pod, ok, our_slices, unschedulable, wait_for, wait_running

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

EXAMPLES = CHART.parents[2] / "examples"
SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def http_get(url: str) -> tuple[int, str]:
    """A plain GET (a pod's metrics port, from the host); ``(status, body)``."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_daemon_pods_register_with_each_kubelet_publish_and_turn_ready_only_after(bed, installed, image):
    cp = bed.cp
    wanted = {FAKE_NODE: (FAKE_RELEASE, {f"npu-{i}-0" for i in range(4)}),
              LAB_NODE: (LAB_RELEASE, {"npu-0-0", "npu-1-0"})}
    for node_name, (release, devices) in wanted.items():
        node = bed.nodes[node_name]
        [pod] = daemon_pods(cp, release)
        uid = pod["metadata"]["uid"]
        assert pod["spec"]["nodeName"] == node_name
        assert pod["spec"]["containers"][0]["image"] == ":".join(image)
        # The kubelet found the pod's registration socket (named after the pod, ROLLING_UPDATE_ID)
        # in its plugins_registry and registered the DRA socket under its plugins dir.
        [line] = kubelet_lines(node, "Registered DRA plugin", since=installed)
        endpoint = f"/var/lib/kubelet/plugins/{DRIVER}/dra-{uid}.sock"
        assert f'driverName="{DRIVER}"' in line and f'endpoint="{endpoint}"' in line, line
        assert node.host_path(f"/var/lib/kubelet/plugins_registry/{DRIVER}-{uid}-reg.sock").is_socket()
        # Ready (the readiness probe: /readyz on the metrics port) only once the kubelet has it.
        ready_at = condition_time(get_pod(cp, NAMESPACE, pod["metadata"]["name"]), "Ready")
        assert ready_at is not None and ready_at >= math.floor(klog_time(line)), (ready_at, line)
        slices = our_slices(cp, node_name)
        assert {d["name"] for s in slices for d in s["spec"]["devices"]} == devices, slices
        assert all(s["spec"]["pool"]["name"] == node_name for s in slices)
        usage.startup(bed, get_pod(cp, NAMESPACE, pod["metadata"]["name"]))
        # The metrics port the readiness probe asks, from the host, as a scraper would.
        ip = get_pod(cp, NAMESPACE, pod["metadata"]["name"])["status"]["podIP"]
        assert http_get(f"http://{ip}:8080/readyz")[0] == 200
    # The chart's ResourceQuotas admitted the pods of the priority classes they cover, and count them.
    pods = ok(cp, "GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    for quota in ok(cp, "GET", f"/api/v1/namespaces/{NAMESPACE}/resourcequotas")["items"]:
        [scope] = quota["spec"]["scopeSelector"]["matchExpressions"]
        covered = [p for p in pods if p["spec"].get("priorityClassName") in scope["values"]]
        assert covered and quota["status"]["used"]["pods"] == str(len(covered)), (quota, len(covered))
    usage.snapshot(bed, "installed")


def test_the_lab_release_ships_the_dashboard_as_grafanas_sidecar_finds_it(bed, installed):
    """``grafanaDashboard.enabled`` (set on the lab release): a ConfigMap with the sidecar's label
    (``grafana_dashboard: "1"``) holds the dashboard as the chart's file has it; its panels are
    checked against a real Prometheus in tests/cluster/test_hami_monitoring.py."""
    listed = ok(bed.cp, "GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps?labelSelector=grafana_dashboard%3D1")
    [configmap] = listed["items"]
    assert configmap["metadata"]["labels"]["app.kubernetes.io/instance"] == LAB_RELEASE
    shipped = json.loads((CHART / "dashboards" / "ascend-dra-usage.json").read_text())
    assert json.loads(configmap["data"]["ascend-dra-usage.json"]) == shipped
    assert shipped["panels"]


def test_a_claim_pod_on_the_fake_node_sees_its_device_env_and_mounts(bed, fake_pod):
    cp, node = bed.cp, bed.nodes[FAKE_NODE]
    claim = fake_pod["claim"]
    assert fake_pod["spec"]["nodeName"] == FAKE_NODE
    uid = claim["metadata"]["uid"]
    [spec] = [p for p in node.host_path("/var/run/cdi").glob(f"k8s.{DRIVER}-*.yaml") if uid in p.name]
    [device, metadata] = yaml.safe_load(spec.read_text())["devices"]  # the second mounts the metadata file
    assert metadata["name"] == f"{uid}-metadata_npu"
    want = dict(e.split("=", 1) for e in device["containerEdits"]["env"])
    assert want["FAKE_NPU_AICORE_LIMIT"] == "40", want
    log = pod_log(cp, fake_pod["metadata"]["namespace"], "fake-1")
    env = printed_env(log)
    assert {k: env.get(k) for k in want} == want
    assert f"/dev/davinci{want['ASCEND_VISIBLE_DEVICES']}" in log and "Version=simulated" in log, log
    # The validating webhook (the chart's pods, failurePolicy Ignore: only a call refuses) checks
    # opaque configs of claims.
    bad = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "bad"},
           "spec": {"spec": {"devices": {
               "requests": [{"name": "npu", "exactly": {"deviceClassName": f"fake.{DRIVER}"}}],
               "config": [{"requests": ["npu"], "opaque": {"driver": DRIVER, "parameters": {
                   "apiVersion": f"{DRIVER}/v1alpha1", "kind": "FakeConfig", "aicoreLimit": 500}}}]}}}}
    status, reply = cp.api("POST", f"{RES}/namespaces/{CLAIMS_NS}/resourceclaimtemplates", bad, json_style="kubectl")
    assert status == 422 and "aicoreLimit" in reply["message"] and "denied the request" in reply["message"], reply
    # The daemon wrote the claim's status.devices (KEP-4817) with its token, through the chart's RBAC
    # and policy: its entry names its own node's pool and the env it gave the container.
    [entry] = wait_for(lambda: our_status(cp, CLAIMS_NS, "fake-1"), "status.devices written", within=30)
    assert entry["pool"] == FAKE_NODE and entry["data"]["env"]["FAKE_NPU_AICORE_LIMIT"] == "40", entry


def test_hami_pods_go_through_the_webhook_pod_and_share_a_chip_as_in_lab_18(bed, installed):
    """Lab 18 on the lab node: two HAMi pods share npu-0-0 with the lab's quota env, the third waits
    (``cannot allocate all claims``), deleting the first lets it start. No webhook runs but the
    chart's pods: the conversion proves kube-apiserver called one through its Service."""
    cp = bed.cp
    assert len(webhook_pods(cp)) == 2
    for doc in (EXAMPLES / "hami-lab" / "namespace.yaml", EXAMPLES / "hami-lab" / "runtimeclass-ascend.yaml"):
        obj = yaml.safe_load(doc.read_text())
        path = "/api/v1/namespaces" if obj["kind"] == "Namespace" else "/apis/node.k8s.io/v1/runtimeclasses"
        status, reply = cp.api("POST", path, obj)
        assert status in (201, 409), reply
    ns = LAB_NS
    ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", lab_pod("ascend-share-a"))
    stored = get_pod(cp, ns, "ascend-share-a")
    assert stored["spec"].get("resourceClaims"), stored["spec"]  # converted on its way in
    wait_for(lambda: get_pod(cp, ns, "ascend-share-a")["spec"].get("nodeName"), "A scheduled", within=60)
    ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", lab_pod("ascend-share-b"))
    for name in ("ascend-share-a", "ascend-share-b"):
        pod = wait_running(cp, ns, name, within=120)
        assert pod["spec"]["nodeName"] == LAB_NODE
        log = pod_log(cp, ns, name, container="app")
        env = printed_env(log)
        assert {k: env.get(k) for k in LAB_ENV} == LAB_ENV, env
        # The share's device node and mounts: /dev/davinci0 (physical ID 0), the driver's version,
        # hami-vnpu-core's preload file and directory.
        assert "/dev/davinci0" in log and "Version=25.5.1" in log and "/hami-vnpu-core" in log, log
    claims = {n: pod_claim(cp, ns, n) for n in ("ascend-share-a", "ascend-share-b")}
    results = {n: c["status"]["allocation"]["devices"]["results"][0] for n, c in claims.items()}
    # The webhook's claims get their status.devices too (it creates them as compact JSON).
    for name in claims:
        [entry] = wait_for(lambda n=name: our_status(cp, ns, n), f"{name}: status.devices written", within=30)
        assert entry["pool"] == LAB_NODE and entry["data"]["env"]["NPU_MEM_QUOTA"] == "8192", entry
    assert {r["device"] for r in results.values()} == {"npu-0-0"}
    assert results["ascend-share-a"]["shareID"] != results["ascend-share-b"]["shareID"]
    ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", lab_pod("ascend-share-c"))
    assert "cannot allocate all claims" in wait_for(lambda: unschedulable(cp, ns, "ascend-share-c"),
                                                    "C unschedulable", within=60)
    cdi = bed.nodes[LAB_NODE].host_path("/var/run/cdi")
    spec_a = [p for p in cdi.glob(f"k8s.{DRIVER}-vnpu_*.yaml") if claims["ascend-share-a"]["metadata"]["uid"] in p.name]
    assert spec_a
    delete_pod(cp, ns, "ascend-share-a")
    wait_for(lambda: not any(p.exists() for p in spec_a), "A's spec removed by Unprepare", within=60)
    wait_running(cp, ns, "ascend-share-c", within=120)
    env = printed_env(pod_log(cp, ns, "ascend-share-c", container="app"))
    assert {k: env.get(k) for k in LAB_ENV} == LAB_ENV, env
    assert get_pod(cp, ns, "ascend-share-b")["status"]["phase"] == "Running"
    # The webhook's pods answered those reviews (their metrics port, from the host), and the chart's
    # PodDisruptionBudget covers both replicas.
    answered = 0
    for pod in webhook_pods(cp):
        status, text = http_get(f"http://{pod['status']['podIP']}:9090/metrics")
        answered += sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                        if line.startswith("ascend_dra_webhook_reviews_total{") and "mutate" in line)
    assert answered >= 3, answered
    pdb = ok(cp, "GET", f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/{WEBHOOK}")["status"]
    assert (pdb["currentHealthy"], pdb["disruptionsAllowed"]) == (2, 1), pdb


def _slice(node: str, name: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": DRIVER, "nodeName": node, "devices": [{"name": "e2e-extra"}],
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}


def test_the_policy_refuses_a_slice_of_the_other_node_made_with_the_daemon_pods_own_token(bed, installed):
    """The token is the one the kubelet mounted into the running daemon container on node-a, read
    through that container's own file system."""
    cp, node = bed.cp, bed.nodes[FAKE_NODE]
    [pod] = daemon_pods(cp, FAKE_RELEASE)
    token = in_container(task_pid(node, container_id(pod, "plugin")), SA_TOKEN).read_text().strip()
    status, reply = api_as(cp, token, "POST", f"{RES}/resourceslices", _slice(LAB_NODE, "e2e-other-node"))
    assert status == 403, reply["message"]
    assert f"runs on node {FAKE_NODE} and may write only its ResourceSlices" in reply["message"], reply
    assert f'not one with spec.nodeName "{LAB_NODE}"' in reply["message"], reply
    status, reply = api_as(cp, token, "POST", f"{RES}/resourceslices", _slice(FAKE_NODE, "e2e-own-node"))
    assert status == 201, reply
    status, reply = api_as(cp, token, "DELETE", f"{RES}/resourceslices/e2e-own-node")
    assert status in (200, 404), reply  # 404: our daemon's slice watch removed the stranger first


def test_the_daemon_pods_own_token_writes_no_status_of_a_claim_on_the_other_node(bed, fake_pod):
    """node-b's daemon token (read from its container) may not write status.devices of node-a's
    claim: the chart's RBAC grants associated-node, not arbitrary-node; node-a's daemon wrote that
    claim's status with its own token."""
    cp = bed.cp
    [pod] = daemon_pods(cp, LAB_RELEASE)
    token = in_container(task_pid(bed.nodes[LAB_NODE], container_id(pod, "plugin")), SA_TOKEN).read_text().strip()
    claim = fake_pod["claim"]
    path = f"{RES}/namespaces/{CLAIMS_NS}/resourceclaims/{claim['metadata']['name']}/status"
    [result] = claim["status"]["allocation"]["devices"]["results"]
    entry = {"driver": DRIVER, "pool": result["pool"], "device": result["device"], "data": {"forged": True}}
    status, reply = api_as(cp, token, "PATCH", path, {"status": {"devices": [entry]}},
                           content_type="application/merge-patch+json")
    # 1.37 checks it before admission (granular status authorization): a claim allocated on another
    # node than the token's needs arbitrary-node, which the chart does not grant (tests/cluster's
    # test_chart_policy.py shows the policy refusing it where the API server does not).
    assert status == 422, reply["message"]
    assert 'verb="[arbitrary-node:patch]"' in reply["message"] and "resourceclaims/driver" in reply["message"], reply
    [ours] = our_status(cp, CLAIMS_NS, "fake-1")
    assert "forged" not in ours.get("data", {}), ours


def test_the_pods_stay_within_their_memory_requests_and_limits_after_the_claims_and_lab_18(bed, installed):
    """RSS and CPU of the daemon and webhook pods that served the steps above (tests/e2e/usage.py):
    the chart's requests and limits come from these figures."""
    assert not usage.outgrown(usage.snapshot(bed, "after claims and lab"))
