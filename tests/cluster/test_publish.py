"""The daemon in cluster mode against the real kube-apiserver, kube-scheduler and controller-manager.

The daemon runs as a process (fake profile); the test reads what the API server stored, lets the
real scheduler allocate claims, and plays the kubelet over the daemon's unix sockets.
"""

from __future__ import annotations

import time
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.daemon import DRIVER, Kubelet

pytestmark = pytest.mark.cluster

RES = "/apis/resource.k8s.io/v1"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def wait_until(probe: Callable[[], Any], what: str, within: float = 10.0) -> Any:
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.1)
    pytest.fail(f"not {what} within {within} s; last: {last!r}")


def ok(cp, method: str, path: str, body: Any = None) -> Any:
    status, reply = cp.api(method, path, body)
    assert 200 <= status < 300, f"{method} {path} -> {status}: {reply}"
    return reply


def our_slices(cp, node: str) -> list[dict[str, Any]]:
    selector = urllib.parse.quote(f"spec.driver={DRIVER},spec.nodeName={node}")
    return ok(cp, "GET", f"{RES}/resourceslices?fieldSelector={selector}")["items"]


def delete_our_slices(cp, node: str) -> None:
    selector = urllib.parse.quote(f"spec.driver={DRIVER},spec.nodeName={node}")
    ok(cp, "DELETE", f"{RES}/resourceslices?fieldSelector={selector}")


def test_published_slices_are_accepted_with_owner_attributes_and_capacities(cp, start_daemon):
    start_daemon()
    [obj] = wait_until(lambda: our_slices(cp, cp.node_name), "published")
    node_uid = ok(cp, "GET", f"/api/v1/nodes/{cp.node_name}")["metadata"]["uid"]
    assert obj["metadata"]["name"].startswith(f"{cp.node_name}-{DRIVER}-")
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": cp.node_name, "uid": node_uid, "controller": True}]
    spec = obj["spec"]
    assert (spec["driver"], spec["nodeName"]) == (DRIVER, cp.node_name)
    assert spec["pool"] == {"name": cp.node_name, "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == [f"npu-{i}-0" for i in range(4)]
    device = spec["devices"][2]
    assert device["attributes"]["index"] == {"int": 2}
    assert device["attributes"]["type"] == {"string": "npu"}
    assert device["attributes"]["chipName"] == {"string": "910B3"}
    assert len(device["attributes"]["uuid"]["string"]) == 36
    assert device["capacity"] == {"cores": {"value": "100"}, "memory": {"value": "64Gi"}}


def test_300_devices_make_3_slices_and_shrinking_removes_the_obsolete_ones(cp, start_daemon):
    d = start_daemon(fake_devices=300)
    slices = wait_until(lambda: (s := our_slices(cp, cp.node_name)) and len(s) == 3 and s, "3 slices")
    assert sorted(len(s["spec"]["devices"]) for s in slices) == [44, 128, 128]
    assert {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices} == {(1, 3)}
    d.stop()
    start_daemon(fake_devices=10)
    # Wait for the end of the sync, not a step of it: obsolete slices go first, then the kept one
    # is rewritten (for a moment one slice with the old 128 devices is left).
    [shrunk] = wait_until(lambda: (s := our_slices(cp, cp.node_name)) and len(s) == 1
                          and s[0]["spec"]["pool"]["generation"] == 2 and s, "one slice left", within=15)
    assert len(shrunk["spec"]["devices"]) == 10
    assert shrunk["spec"]["pool"] == {"name": cp.node_name, "generation": 2, "resourceSliceCount": 1}


def test_slices_deleted_behind_our_back_come_back_within_5_seconds(cp, start_daemon):
    start_daemon()
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    delete_our_slices(cp, cp.node_name)  # what the kubelet does when it starts
    [back] = wait_until(lambda: our_slices(cp, cp.node_name), "re-created", within=5)
    assert len(back["spec"]["devices"]) == 4
    assert back["spec"]["pool"]["generation"] == 1


def test_the_slices_are_published_before_the_kubelet_can_register_us(cp, short_tmp):
    """The first publish (TLS handshakes, the node GET, the slice writes) ran while the kubelet's GetInfo
    waited behind it on the loop (38-127 ms after the socket accepted, on a loaded machine); now the
    registration socket is bound after it, so the slices are there when the kubelet can first call."""
    from tests.integration.daemon import DaemonProcess, accepts

    d = DaemonProcess(short_tmp / "node", node=cp.node_name, kubeconfig=cp.kubeconfig).start(wait=False)
    try:
        wait_until(lambda: accepts(d.registration_socket), "the registration socket accepts", within=30)
        assert our_slices(cp, cp.node_name)
    finally:
        d.stop()


def test_an_api_server_that_is_down_delays_registration_by_a_bounded_wait_only(cp, short_tmp):
    from ascend_dra.node.daemon import FIRST_PUBLISH_WAIT_S
    from tests.integration.daemon import DaemonProcess, accepts

    cp.stop_apiserver()
    try:
        d = DaemonProcess(short_tmp / "node", node=cp.node_name, kubeconfig=cp.kubeconfig).start(wait=False)
        try:
            wait_until(lambda: accepts(d.registration_socket), "the registration socket accepts",
                       within=15 + FIRST_PUBLISH_WAIT_S)
            wait_until(lambda: "publishing ResourceSlices failed; retrying" in d.log_text(),  # it did try, and went on
                       "the failed publish logged", within=15 + FIRST_PUBLISH_WAIT_S)
        finally:
            d.stop()
    finally:
        cp.start_apiserver()


def test_the_publisher_converges_after_an_api_server_restart(cp, start_daemon):
    d = start_daemon()
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    cp.restart_apiserver()
    delete_our_slices(cp, cp.node_name)
    wait_until(lambda: our_slices(cp, cp.node_name), "re-created after the restart", within=15)
    assert d.proc is not None and d.proc.poll() is None


def apply_examples(cp) -> None:
    for doc in yaml.safe_load_all((EXAMPLES / "deviceclasses" / "fake.yaml").read_text()):
        status, reply = cp.api("POST", f"{RES}/deviceclasses", doc)
        assert status in (201, 409), reply


def create_pod(cp, namespace: str, class_name: str, selector: str | None = None,
               via_template: bool = True) -> tuple[str, str]:
    """A pod with one claim for ``class_name``: from a ResourceClaimTemplate (the controller-manager
    creates the claim), or, with ``via_template=False``, a ResourceClaim created here and named by
    the pod (for tests about allocation, which need not involve the controller-manager)."""
    name = f"p-{uuid.uuid4().hex[:8]}"
    request: dict[str, Any] = {"name": "npu", "exactly": {"deviceClassName": class_name}}
    if selector:
        request["exactly"]["selectors"] = [{"cel": {"expression": selector}}]
    config = {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "FakeConfig", "aicoreLimit": 40}
    spec = {"devices": {"requests": [request],
                        "config": [{"requests": ["npu"], "opaque": {"driver": DRIVER, "parameters": config}}]}}
    if via_template:
        ok(cp, "POST", f"{RES}/namespaces/{namespace}/resourceclaimtemplates", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": spec}})
        claim_ref = {"name": "npu", "resourceClaimTemplateName": name}
    else:
        ok(cp, "POST", f"{RES}/namespaces/{namespace}/resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": spec})
        claim_ref = {"name": "npu", "resourceClaimName": name}
    ok(cp, "POST", f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"resourceClaims": [claim_ref],
                 "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "npu"}]}}]}})
    return name, name


def delete_pod(cp, name: str, namespace: str = "default") -> None:
    """Delete a pod of :func:`create_pod` and its template or claim (whichever it has)."""
    cp.api("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}?gracePeriodSeconds=0")
    cp.api("DELETE", f"{RES}/namespaces/{namespace}/resourceclaimtemplates/{name}")
    cp.api("DELETE", f"{RES}/namespaces/{namespace}/resourceclaims/{name}")


def pod_claim(cp, namespace: str, pod: str) -> dict[str, Any] | None:
    """The pod's (first) ResourceClaim, by name or once the controller-manager created it."""
    obj = ok(cp, "GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
    named = obj["spec"]["resourceClaims"][0].get("resourceClaimName")
    statuses = obj.get("status", {}).get("resourceClaimStatuses") or []
    name = named or (statuses[0].get("resourceClaimName") if statuses else None)
    if not name:
        return None
    return ok(cp, "GET", f"{RES}/namespaces/{namespace}/resourceclaims/{name}")


def test_scheduler_allocates_our_device_and_the_kubelet_prepares_it(cp, start_daemon):
    d = start_daemon()
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    apply_examples(cp)
    pod, _ = create_pod(cp, "default", "fake.ascend.project-hami.io")
    bound = wait_until(lambda: ok(cp, "GET", f"/api/v1/namespaces/default/pods/{pod}")["spec"].get("nodeName"),
                       "bound", within=30)
    assert bound == cp.node_name
    claim = wait_until(lambda: (c := pod_claim(cp, "default", pod)) and c.get("status", {}).get("allocation") and c,
                       "allocated")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (DRIVER, cp.node_name)
    uid = claim["metadata"]["uid"]

    k = Kubelet(d)
    try:
        reply = k.prepare(claim)
        assert reply.claims[uid].error == ""
        [device] = reply.claims[uid].devices
        assert device.device_name == result["device"]
        spec_file = d.cdi_dir / f"k8s.{DRIVER}-npu_{uid}.yaml"
        spec = yaml.safe_load(spec_file.read_text())
        assert spec["devices"][0]["name"] == f"{uid}-{result['device']}"
        assert "FAKE_NPU_AICORE_LIMIT=40" in spec["devices"][0]["containerEdits"]["env"]

        ok(cp, "DELETE", f"/api/v1/namespaces/default/pods/{pod}?gracePeriodSeconds=0")
        assert k.unprepare(claim).claims[uid].error == ""
        assert not spec_file.exists()
    finally:
        k.close()
        delete_pod(cp, pod)


def test_a_claim_whose_selector_matches_nothing_stays_pending_and_nothing_is_prepared(cp, start_daemon):
    d = start_daemon()
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    apply_examples(cp)
    pod, _ = create_pod(cp, "default", "fake.ascend.project-hami.io",
                        selector=f'device.attributes["{DRIVER}"].index == 99', via_template=False)
    try:
        claim = wait_until(lambda: pod_claim(cp, "default", pod), "claim created by the controller-manager")
        wait_until(lambda: unschedulable(cp, pod), "reported unschedulable by the scheduler", within=30)
        claim = pod_claim(cp, "default", pod)
        assert not claim.get("status", {}).get("allocation")
        k = Kubelet(d)
        reply = k.prepare(claim)
        k.close()
        name = claim["metadata"]["name"]
        assert reply.claims[claim["metadata"]["uid"]].error == (
            f"ResourceClaim default/{name} is not allocated (status.allocation is empty)")
        assert sorted(p.name for p in d.cdi_dir.iterdir()) == [f"k8s.{DRIVER}-npu_common.yaml"]
    finally:
        delete_pod(cp, pod)


def test_prepared_claims_are_served_while_the_api_server_is_down(cp, start_daemon):
    d = start_daemon()
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    apply_examples(cp)
    pods = [create_pod(cp, "default", "fake.ascend.project-hami.io", via_template=False)[0] for _ in range(2)]
    claims = [wait_until(lambda p=p: (c := pod_claim(cp, "default", p)) and c.get("status", {}).get("allocation")
                         and c, f"{p} allocated", within=30) for p in pods]
    prepared, waiting = claims
    k = Kubelet(d)
    try:
        first = k.prepare(prepared)
        assert first.claims[prepared["metadata"]["uid"]].error == ""
        cp.stop_apiserver()
        try:
            # The kubelet restarted and prepares again: the claim cannot be read to check its
            # allocation, so the record answers, as it did when written.
            assert k.prepare(prepared) == first
            # A claim the daemon never saw needs the API server: that claim fails, with the reason.
            error = k.prepare(waiting).claims[waiting["metadata"]["uid"]].error
            assert error.startswith(f"ResourceClaim default/{waiting['metadata']['name']}: reading it from the API "
                                    "server failed")
            assert k.unprepare(prepared).claims[prepared["metadata"]["uid"]].error == ""
        finally:
            cp.start_apiserver()
        assert k.prepare(waiting).claims[waiting["metadata"]["uid"]].error == ""
        delete_our_slices(cp, cp.node_name)
        wait_until(lambda: our_slices(cp, cp.node_name), "re-created after the outage", within=15)
        k.unprepare(waiting)
    finally:
        k.close()
        for pod in pods:
            delete_pod(cp, pod)


def test_a_claim_allocated_but_reserved_for_no_pod_is_refused(cp, start_daemon):
    d = start_daemon()
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    name = f"unreserved-{uuid.uuid4().hex[:6]}"
    claim = ok(cp, "POST", f"{RES}/namespaces/default/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "npu", "exactly": {
            "deviceClassName": "fake.ascend.project-hami.io"}}]}}})
    try:
        # What an allocation without a consumer looks like (the status a controller could write).
        claim["status"] = {"allocation": {"devices": {"results": [
            {"request": "npu", "driver": DRIVER, "pool": cp.node_name, "device": "npu-3-0"}]}}}
        claim = ok(cp, "PUT", f"{RES}/namespaces/default/resourceclaims/{name}/status", claim)
        k = Kubelet(d)
        reply = k.prepare(claim)
        k.close()
        assert reply.claims[claim["metadata"]["uid"]].error == (
            f"ResourceClaim default/{name} is allocated but not reserved for any pod (status.reservedFor is empty)")
    finally:
        cp.api("DELETE", f"{RES}/namespaces/default/resourceclaims/{name}")


def unschedulable(cp, pod: str) -> bool:
    """Whether the scheduler has said it cannot place ``pod`` (PodScheduled False)."""
    conditions = ok(cp, "GET", f"/api/v1/namespaces/default/pods/{pod}").get("status", {}).get("conditions") or []
    return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)


def test_an_unhealthy_device_is_tainted_and_the_scheduler_avoids_it_until_it_recovers(cp, start_daemon):
    """By default (--unhealthy-devices taint); before 2026-12-03 only with --taint-unhealthy."""
    d = start_daemon(extra_args=("--health-interval", "0.2"))
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    apply_examples(cp)
    marks = d.root / "plugins" / DRIVER / "profiles" / "fake-health"
    marks.mkdir(parents=True)
    (marks / "npu-2-0").write_text("unhealthy\n")

    def taints() -> dict[str, list[dict[str, Any]]]:
        return {dev["name"]: dev.get("taints", []) for s in our_slices(cp, cp.node_name)
                for dev in s["spec"]["devices"]}

    wait_until(lambda: taints()["npu-2-0"], "tainted")
    assert taints()["npu-2-0"] == [{"key": f"{DRIVER}/unhealthy", "effect": "NoSchedule",
                                    "timeAdded": taints()["npu-2-0"][0]["timeAdded"]}]
    assert all(not t for name, t in taints().items() if name != "npu-2-0")
    pod, _ = create_pod(cp, "default", "fake.ascend.project-hami.io",
                        selector=f'device.attributes["{DRIVER}"].index == 2', via_template=False)
    try:
        wait_until(lambda: unschedulable(cp, pod), "kept off the tainted device", within=30)
        (marks / "npu-2-0").unlink()
        wait_until(lambda: not taints()["npu-2-0"], "taint removed")
        bound = wait_until(lambda: ok(cp, "GET", f"/api/v1/namespaces/default/pods/{pod}")["spec"].get("nodeName"),
                           "scheduled once healthy", within=60)
        assert bound == cp.node_name
    finally:
        delete_pod(cp, pod)


def test_a_taint_keeps_the_time_it_was_added_through_rewrites_and_restarts(cp, start_daemon):
    """We send taints without ``timeAdded``; the API server stamps each write's time on them. The
    pool rewritten for another device's health reset it, and a restarted daemon found the stored
    slices (with times) unlike its own (without) and rewrote the whole pool for nothing."""
    d = start_daemon(extra_args=("--health-interval", "0.2"))
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    marks = d.root / "plugins" / DRIVER / "profiles" / "fake-health"
    marks.mkdir(parents=True)

    def state() -> tuple[int, dict[str, str]]:
        slices = our_slices(cp, cp.node_name)
        return (max(s["spec"]["pool"]["generation"] for s in slices),
                {dev["name"]: t["timeAdded"] for s in slices for dev in s["spec"]["devices"]
                 for t in dev.get("taints") or ()})

    (marks / "npu-1-0").write_text("unhealthy\n")
    _, first = wait_until(lambda: "npu-1-0" in (st := state())[1] and st, "npu-1-0 tainted")
    time.sleep(1.1)  # timeAdded has seconds
    (marks / "npu-2-0").write_text("unhealthy\n")
    generation, both = wait_until(lambda: "npu-2-0" in (st := state())[1] and st, "npu-2-0 tainted")
    assert both["npu-1-0"] == first["npu-1-0"]
    assert both["npu-2-0"] > first["npu-1-0"]
    d.stop()
    time.sleep(1.1)
    d.start()
    time.sleep(2)  # the first reconcile and a few health checks
    assert state() == (generation, both)
    assert d.log_text().count("published ResourceSlices") == 3  # the first, two taints; none at the restart


def test_without_the_taints_gate_an_unhealthy_device_is_withdrawn_until_it_recovers(short_tmp):
    """An API server with DRADeviceTaints off drops device taints silently: the taint meant to keep
    new claims off an unhealthy device did nothing, and the scheduler gave it away. The daemon sees
    the taint dropped and withdraws the device from the slice instead; it comes back once healthy."""
    from tests.cluster.controlplane import DEFAULT_FEATURE_GATES, ControlPlane, default_bin_dir, k8s_minor
    from tests.cluster.versions import at_least
    from tests.integration.daemon import DaemonProcess

    if at_least(k8s_minor(), "1.37"):
        pytest.skip(f"DRADeviceTaints is GA in Kubernetes {k8s_minor()}: kube-apiserver refuses to start with it "
                    "off (DRADeviceTaintRules depends on it); tested on 1.35 and 1.36")
    cp = ControlPlane(short_tmp / "cp", default_bin_dir(), feature_gates={**DEFAULT_FEATURE_GATES,
                                                                          "DRADeviceTaints": False})
    cp.start()
    d = None
    pod = ""
    try:
        d = DaemonProcess(short_tmp / "node", node=cp.node_name, kubeconfig=cp.kubeconfig,
                          extra_args=["--health-interval", "0.2"]).start()
        wait_until(lambda: our_slices(cp, cp.node_name), "published")
        apply_examples(cp)

        def devices() -> set[str]:
            return {dev["name"] for s in our_slices(cp, cp.node_name) for dev in s["spec"]["devices"]}

        assert "npu-2-0" in devices()
        marks = d.root / "plugins" / DRIVER / "profiles" / "fake-health"
        marks.mkdir(parents=True)
        (marks / "npu-2-0").write_text("unhealthy\n")
        wait_until(lambda: "npu-2-0" not in devices(), "withdrawn", within=30)
        assert devices() == {"npu-0-0", "npu-1-0", "npu-3-0"}
        assert "the API server drops device taints" in d.log_text()
        pod, _ = create_pod(cp, "default", "fake.ascend.project-hami.io",
                            selector=f'device.attributes["{DRIVER}"].index == 2', via_template=False)

        wait_until(lambda: unschedulable(cp, pod), "kept off the withdrawn device", within=30)
        (marks / "npu-2-0").unlink()
        wait_until(lambda: "npu-2-0" in devices(), "published again", within=30)
        bound = wait_until(lambda: ok(cp, "GET", f"/api/v1/namespaces/default/pods/{pod}")["spec"].get("nodeName"),
                           "scheduled once healthy", within=60)
        assert bound == cp.node_name
    finally:
        if pod:
            delete_pod(cp, pod)
        if d is not None:
            d.stop()
        cp.stop()
