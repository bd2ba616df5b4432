"""The real kubelet 1.35 and containerd 2.2 against our daemon (fake profile): registration, a pod's
container getting our CDI edits, Unprepare on deletion, kubelet and daemon restarts, health in the
pod status (KEP-4680). Fixtures: tests/kubelet/conftest.py; the node: tests/kubelet/node.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.integration.daemon import Kubelet
from tests.kubelet.pods import (
    DRIVER,
    ENV_DONE,
    FAKE_CLASS,
    RES,
    container_env,
    delete_pod,
    get_pod,
    ok,
    our_slices,
    pod_claim,
    pod_manifest,
    start_fake_claim_pod,
    wait_for,
    wait_running,
)
from tests.kubelet.pods import specs as cdi_specs

pytestmark = pytest.mark.kubelet

#: Printed after the env: what the CDI spec's device node and mount give the container.
PROBE = "ls /dev/davinci*; cat /usr/local/Ascend/driver/version.info;"


def specs(node) -> list[Path]:
    return cdi_specs(node.cdi_dir)


def start_claim_pod(cp, ns: str, name: str) -> tuple[dict, dict]:
    return start_fake_claim_pod(cp, ns, name, script=PROBE)


def test_the_kubelet_registers_our_plugin_from_its_registry_dir(node, daemon):
    """The kubelet finds our registration socket, takes the first DRA service of our GetInfo list it
    supports (1.35 serves v1 and v1beta1: v1, our first), connects and opens the health stream."""
    log = wait_for(lambda: (t := node.kubelet_log.read_text()) and "Registered DRA plugin" in t and t,
                   "the kubelet's registration log", within=30)
    # The daemon logs its side only when the kubelet's NotifyRegistrationStatus arrives, which the
    # kubelet sends after its own line: another process's event, so wait for it too.
    wait_for(lambda: "registered with the kubelet" in daemon.log_text(), "the daemon told of its registration",
             within=30)
    kubelet = Kubelet(daemon)
    try:
        offered = list(kubelet.get_info().supported_versions)
    finally:
        kubelet.close()
    assert offered[:2] == ["v1.DRAPlugin", "v1beta1.DRAPlugin"], offered
    [line] = [ln for ln in log.splitlines() if "Registered DRA plugin" in ln]
    assert f'driverName="{DRIVER}"' in line and 'chosenService="v1.DRAPlugin"' in line, line
    assert f'endpoint="{daemon.dra_socket}"' in line, line
    # The kubelet opens the health stream in a goroutine of its own after it logged the registration
    # (the line was once not yet in the log read above): wait for it, as for the registration.
    wait_for(lambda: "Successfully started WatchResources health stream" in node.kubelet_log.read_text(),
             "the kubelet's WatchResources health stream", within=30)
    assert (node.kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock").is_socket()
    wait_for(lambda: our_slices(node.cp, node.node_name), "slices published", within=30)


def test_a_pod_with_a_claim_runs_with_our_cdi_edits_and_deletion_unprepares(node, daemon, classes, namespace):
    cp = node.cp
    _, claim = start_claim_pod(cp, namespace, "with-npu")
    uid = claim["metadata"]["uid"]
    [spec] = [s for s in specs(node) if uid in s.name]
    # the device's own CDI device, and the one mounting its request's device metadata file (KEP-5304)
    [device, _] = yaml.safe_load(spec.read_text())["devices"]
    want = dict(e.split("=", 1) for e in device["containerEdits"]["env"])
    assert want["FAKE_NPU_AICORE_LIMIT"] == "40"
    # containerd injected the spec: the env, the device node and the driver mount are in the container.
    env = container_env(cp, namespace, "with-npu")
    assert {k: env.get(k) for k in want} == want
    log = ok_log(cp, namespace, "with-npu")
    assert f"/dev/davinci{want['ASCEND_VISIBLE_DEVICES']}" in log and "Version=simulated" in log, log
    assert uid in daemon.records()
    delete_pod(cp, namespace, "with-npu")
    wait_for(lambda: not spec.exists(), f"{spec.name} removed (NodeUnprepareResources)", within=30)
    wait_for(lambda: uid not in daemon.records(), "the claim's record dropped", within=10)


def test_kubelet_restart_wipes_our_slices_we_restore_them_and_running_pods_keep_their_devices(
        node, daemon, classes, namespace):
    cp = node.cp
    pod, claim = start_claim_pod(cp, namespace, "survivor")
    before = {s["metadata"]["uid"] for s in our_slices(cp, node.node_name)}
    container_id = pod["status"]["containerStatuses"][0]["containerID"]
    offset = node.kubelet_log.stat().st_size
    node.restart_kubelet()
    # On start the kubelet deletes every ResourceSlice of its node (its DRA plugin manager's start-up
    # wipe); we re-register and publish them again: new objects.
    wait_for(lambda: "Deleted ResourceSlices" in new_log(node, offset), "the kubelet's slice wipe", within=30)
    wait_for(lambda: (u := {s["metadata"]["uid"] for s in our_slices(cp, node.node_name)}) and not u & before,
             "our slices re-created after the wipe", within=30)
    # Our slices come back from our own slice watch, not from the kubelet's re-registration: wait for
    # the kubelet's line rather than assume it came first.
    wait_for(lambda: 'chosenService="v1.DRAPlugin"' in new_log(node, offset), "the kubelet registered us again",
             within=30)
    pod = wait_running(cp, namespace, "survivor")
    [status] = pod["status"]["containerStatuses"]
    assert status["containerID"] == container_id and status.get("restartCount", 0) == 0
    assert claim["metadata"]["uid"] in daemon.records()
    assert container_env(cp, namespace, "survivor")["FAKE_NPU_AICORE_LIMIT"] == "40"
    delete_pod(cp, namespace, "survivor")
    wait_for(lambda: claim["metadata"]["uid"] not in daemon.records(), "unprepared by the new kubelet", within=30)


def test_daemon_kill9_keeps_the_running_pod_and_the_next_pod_works(node, daemon, classes, namespace):
    cp = node.cp
    pod, first_claim = start_claim_pod(cp, namespace, "first")
    container_id = pod["status"]["containerStatuses"][0]["containerID"]
    daemon.kill9()
    daemon.start()
    _, second_claim = start_claim_pod(cp, namespace, "second")
    assert container_env(cp, namespace, "second")["FAKE_NPU_AICORE_LIMIT"] == "40"
    [first] = get_pod(cp, namespace, "first")["status"]["containerStatuses"]
    assert first["containerID"] == container_id and "running" in first["state"], first
    assert {first_claim["metadata"]["uid"], second_claim["metadata"]["uid"]} <= set(daemon.records())
    # The restarted daemon unprepares what its predecessor prepared.
    for name, claim in (("first", first_claim), ("second", second_claim)):
        delete_pod(cp, namespace, name)
        wait_for(lambda c=claim: not [s for s in specs(node) if c["metadata"]["uid"] in s.name],
                 f"{name}'s spec removed", within=30)


def test_a_device_we_report_unhealthy_shows_in_the_pod_status(node, daemon, classes, namespace):
    """KEP-4680 (``ResourceHealthStatus``, alpha in 1.35, enabled for this tier): the kubelet consumes
    our ``v1alpha1.DRAResourceHealth`` stream and writes ``allocatedResourcesStatus``, naming the
    device by the first CDI device ID of our Prepare reply: the device's own."""
    cp = node.cp
    _, claim = start_claim_pod(cp, namespace, "sick")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    marks = daemon.root / "plugins" / DRIVER / "profiles" / "fake-health"
    marks.mkdir(parents=True, exist_ok=True)

    def health() -> list[dict]:
        [status] = get_pod(cp, namespace, "sick")["status"]["containerStatuses"]
        return [r for res in status.get("allocatedResourcesStatus") or [] for r in res.get("resources", [])]

    try:
        wait_for(lambda: [r.get("health") for r in health()] == ["Healthy"], "Healthy in the pod status", 60)
        (marks / result["device"]).write_text("unhealthy\n")
        wait_for(lambda: [r.get("health") for r in health()] == ["Unhealthy"], "Unhealthy in the pod status", 60)
        uid = claim["metadata"]["uid"]
        assert health() == [{"resourceID": f"k8s.{DRIVER}/npu={uid}-{result['device']}", "health": "Unhealthy"}]
        (marks / result["device"]).unlink()
        wait_for(lambda: [r.get("health") for r in health()] == ["Healthy"], "Healthy again", 60)
    finally:
        (marks / result["device"]).unlink(missing_ok=True)
    delete_pod(cp, namespace, "sick")


def new_log(node, offset: int) -> str:
    with open(node.kubelet_log, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def ok_log(cp, namespace: str, pod: str) -> str:
    status, text = cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log?container=main")
    assert status == 200, text
    return text


def test_a_claim_with_two_devices_runs_and_its_health_names_each_device(node, daemon, classes, namespace):
    """Two devices of one claim: the kubelet lists one health entry per device under its first CDI
    device ID, and the API server refuses a pod status whose entries repeat an ID (``Duplicate
    value``): with the claim's common ID first for both (before this test), every status update of
    the pod failed and it stayed Pending in the API while its container ran."""
    cp = node.cp
    config = {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "FakeConfig", "aicoreLimit": 30}
    ok(cp, "POST", f"{RES}/namespaces/{namespace}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "two"},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "npu", "exactly": {"deviceClassName": "fake.ascend.project-hami.io",
                                                     "allocationMode": "ExactCount", "count": 2}}],
            "config": [{"requests": ["npu"], "opaque": {"driver": DRIVER, "parameters": config}}]}}}})
    ok(cp, "POST", f"/api/v1/namespaces/{namespace}/pods", pod_manifest("two", claim_template="two", script=PROBE))
    pod = wait_running(cp, namespace, "two")
    env = container_env(cp, namespace, "two")
    assert env["FAKE_NPU_AICORE_LIMIT"] == "30" and len(env["ASCEND_VISIBLE_DEVICES"].split(",")) == 2, env
    [status] = pod["status"]["containerStatuses"]
    ids = [r["resourceID"] for res in status.get("allocatedResourcesStatus") or [] for r in res["resources"]]
    uid = pod_claim(cp, namespace, "two")["metadata"]["uid"]
    devices = [r["device"] for r in pod_claim(cp, namespace, "two")["status"]["allocation"]["devices"]["results"]]
    assert sorted(ids) == sorted(f"k8s.{DRIVER}/npu={uid}-{d}" for d in devices), ids
    delete_pod(cp, namespace, "two")


#: What a container prints of its device metadata file (KEP-5304), and whether it can write it.
METADATA_END = "--metadata-end--"


def metadata_probe(path: str) -> str:
    return (f"echo {ENV_DONE}-metadata; cat {path}; echo; (echo x >> {path}) 2>/dev/null && echo WRITABLE; "
            f"echo {METADATA_END};")


def printed_metadata(cp, namespace: str, pod: str) -> tuple[list[dict], bool]:
    """The JSON objects the pod's container printed of its metadata file, and whether it could write it."""
    text = wait_for(lambda: (t := ok_log(cp, namespace, pod)) and METADATA_END in t and t,
                    f"pod {pod} printed its device metadata", within=30)
    body = text.split(f"{ENV_DONE}-metadata", 1)[1].split(METADATA_END, 1)[0]
    decoder, out, at = json.JSONDecoder(), [], 0
    while body[at:].strip() and not body[at:].lstrip().startswith("WRITABLE"):
        while body[at].isspace():
            at += 1
        obj, at = decoder.raw_decode(body, at)
        out.append(obj)
    return out, "WRITABLE" in body


def test_a_pod_reads_its_device_metadata_file_from_a_template_and_a_named_claim(node, daemon, classes, namespace):
    """KEP-5304 through the real kubelet and containerd: the kubelet passes the metadata CDI device of
    our answer to containerd, which bind-mounts the file read-only where the protocol says: under
    ``resourceclaimtemplates/<pod claim name>`` for a template's claim, ``resourceclaims/<claim name>``
    for a claim the pod names. Deleting the pod unprepares the claim, which removes the file."""
    cp = node.cp
    root = "/var/run/kubernetes.io/dra-device-attributes"
    from_template = f"{root}/resourceclaimtemplates/npu/npu/{DRIVER}-metadata.json"
    _, claim = start_fake_claim_pod(cp, namespace, "reads-metadata", script=metadata_probe(from_template))
    [beta, alpha], writable = printed_metadata(cp, namespace, "reads-metadata")
    assert not writable
    assert (beta["apiVersion"], alpha["apiVersion"]) == ("metadata.resource.k8s.io/v1beta1",
                                                         "metadata.resource.k8s.io/v1alpha1")
    assert beta["metadata"]["uid"] == claim["metadata"]["uid"] and beta["podClaimName"] == "npu"
    [request] = beta["requests"]
    [device] = request["devices"]
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (request["name"], device["driver"], device["pool"], device["name"]) == \
        ("npu", DRIVER, node.node_name, result["device"])
    assert device["attributes"]["index"] == {"int": int(result["device"].split("-")[1])}
    host_dir = daemon.root / "plugins" / DRIVER / "device-metadata" / claim["metadata"]["uid"]
    assert (host_dir / "npu" / "metadata.json").is_file()

    ok(cp, "POST", f"{RES}/namespaces/{namespace}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "named-npu"},
        "spec": {"devices": {"requests": [{"name": "npu", "exactly": {"deviceClassName": FAKE_CLASS}}]}}})
    named = f"{root}/resourceclaims/named-npu/npu/{DRIVER}-metadata.json"
    ok(cp, "POST", f"/api/v1/namespaces/{namespace}/pods",
       pod_manifest("reads-named", claim="named-npu", script=metadata_probe(named)))
    wait_running(cp, namespace, "reads-named")
    [doc, _], writable = printed_metadata(cp, namespace, "reads-named")
    assert not writable and "podClaimName" not in doc and doc["metadata"]["name"] == "named-npu"

    delete_pod(cp, namespace, "reads-metadata")
    wait_for(lambda: not host_dir.exists(), "the device metadata directory removed (NodeUnprepareResources)",
             within=30)
    delete_pod(cp, namespace, "reads-named")
