"""Consumable capacity end to end (KEP-5075), and the dropped-fields report when its gate is off.

A throw-away third-party profile publishes one shareable device (``allowMultipleAllocations``,
``memory`` with a request policy). The real scheduler gives two claims a share each, and the
daemon prepares both; against an API server with ``DRAConsumableCapacity`` off, the daemon says
which gate to enable.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
import yaml

from tests.cluster.controlplane import DEFAULT_FEATURE_GATES, ControlPlane, default_bin_dir, free_port
from tests.cluster.test_publish import RES, delete_our_slices, ok, our_slices, pod_claim, wait_until
from tests.distributions import write_distribution
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet
from tests.integration.test_grpc_health import http, register

pytestmark = pytest.mark.cluster

SHARED_PROFILE = '''
import attrs
from ascend_dra.profiles.base import (Capacity, CapacityRequestPolicy, ContainerEdits, Device, Inventory,
                                      parse_quantity)

@attrs.frozen
class SharedConfig:
    pass

class Shared:
    name = "shared"
    cdi_class = "vnpu"
    config_types = {"SharedConfig": SharedConfig}

    def default_config(self):
        return SharedConfig()

    async def discover(self, ctx):
        memory = Capacity("16Gi", CapacityRequestPolicy(default="1Gi", valid_range_min="1Gi", valid_range_step="1Gi"))
        device = Device(name="shared-0", attributes={"type": "vnpu"}, capacities={"memory": memory},
                        allow_multiple_allocations=True)
        return Inventory(devices=(device,), source="simulated")

    def validate(self, config):
        pass

    def apply_config(self, config, devices, ctx):
        return {d.device: ContainerEdits(env=(
            f"NPU_MEM_QUOTA={int(parse_quantity(d.consumed_capacity.get('memory', '0'))) // 2**20}",))
            for d in devices}

def factory():
    return Shared()
'''

CLASS = {
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "shared.test.example.com"},
    "spec": {"selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].type == "vnpu"'}}]},
}


@pytest.fixture
def shared_daemon(short_tmp):
    vendor = short_tmp / "vendor"
    write_distribution(vendor, "shared-profile", {"shared": SHARED_PROFILE})
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(vendor), os.environ.get("PYTHONPATH")]))}
    started = []

    def start(cp, extra_args: tuple[str, ...] = ()) -> DaemonProcess:
        d = DaemonProcess(short_tmp / "node", node=cp.node_name, kubeconfig=cp.kubeconfig, profiles="shared",
                          env=env, extra_args=extra_args).start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


def share_pod(cp, memory: str) -> str:
    name = f"s-{uuid.uuid4().hex[:8]}"
    ok(cp, "POST", f"{RES}/namespaces/default/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "vnpu", "exactly": {
            "deviceClassName": CLASS["metadata"]["name"], "capacity": {"requests": {"memory": memory}}}}]}}}})
    ok(cp, "POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"resourceClaims": [{"name": "vnpu", "resourceClaimTemplateName": name}],
                 "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "vnpu"}]}}]}})
    return name


def test_two_claims_share_one_device_and_both_are_prepared(control_plane, shared_daemon):
    cp = control_plane
    delete_our_slices(cp, cp.node_name)
    d = shared_daemon(cp)
    [obj] = wait_until(lambda: our_slices(cp, cp.node_name), "published")
    [device] = obj["spec"]["devices"]
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"]["memory"]["requestPolicy"] == {"default": "1Gi",
                                                             "validRange": {"min": "1Gi", "step": "1Gi"}}
    status, reply = cp.api("POST", f"{RES}/deviceclasses", CLASS)
    assert status in (201, 409), reply
    pods = [share_pod(cp, "4Gi"), share_pod(cp, "6Gi")]
    k = Kubelet(d)
    try:
        claims = [wait_until(lambda p=p: (c := pod_claim(cp, "default", p)) and c.get("status", {}).get("allocation")
                             and c, f"{p} allocated", within=30) for p in pods]
        results = [c["status"]["allocation"]["devices"]["results"][0] for c in claims]
        assert [r["device"] for r in results] == ["shared-0", "shared-0"]
        assert [r["consumedCapacity"] for r in results] == [{"memory": "4Gi"}, {"memory": "6Gi"}]
        assert results[0]["shareID"] != results[1]["shareID"]
        reply = k.prepare(*claims)
        for claim, result, quota in zip(claims, results, ("4096", "6144"), strict=True):
            uid = claim["metadata"]["uid"]
            assert reply.claims[uid].error == ""
            [prepared] = reply.claims[uid].devices
            assert prepared.share_id == result["shareID"]
            spec = yaml.safe_load((d.cdi_dir / f"k8s.{DRIVER}-vnpu_{uid}.yaml").read_text())
            assert spec["devices"][0]["name"] == f"{uid}-shared-0-{result['shareID']}"
            assert spec["devices"][0]["containerEdits"]["env"] == [f"NPU_MEM_QUOTA={quota}"]
        for claim in claims:
            assert k.unprepare(claim).claims[claim["metadata"]["uid"]].error == ""
    finally:
        k.close()
        for p in pods:
            cp.api("DELETE", f"/api/v1/namespaces/default/pods/{p}?gracePeriodSeconds=0")
            cp.api("DELETE", f"{RES}/namespaces/default/resourceclaimtemplates/{p}")
        delete_our_slices(cp, cp.node_name)


def test_fields_dropped_by_an_api_server_without_the_gate_are_reported_with_the_gate(shared_daemon, short_tmp):
    gates = {**DEFAULT_FEATURE_GATES, "DRAConsumableCapacity": False}
    cp = ControlPlane(short_tmp / "cp", default_bin_dir(), feature_gates=gates)
    cp.start()
    port = free_port()
    try:
        d = shared_daemon(cp, ("--metrics-port", str(port)))
        register(d)
        [obj] = wait_until(lambda: our_slices(cp, cp.node_name), "published")
        assert "allowMultipleAllocations" not in obj["spec"]["devices"][0]  # dropped without an error
        wait_until(lambda: "dropped ResourceSlice fields" in d.log_text(), "reported", within=10)
        log = d.log_text()
        assert ("the API server dropped ResourceSlice fields spec.devices[shared-0].allowMultipleAllocations, "
                "spec.devices[shared-0].capacity.memory.requestPolicy: enable the feature gate(s) "
                "DRAConsumableCapacity on kube-apiserver, kube-scheduler and the kubelet") in log
        assert d.proc is not None and d.proc.poll() is None  # reported, not fatal
        # The stored slice lacks the gated fields for good: that must not look like a change every
        # time (each rewrite fires a watch event that would start the next rewrite).
        # Nor is it a publish that keeps failing: the node stays ready (readiness flapped with each
        # write until the next resync); the log line and the publish_failing gauge report it.
        for _ in range(6):
            assert http(port, "/readyz") == (200, "ok\n")
            time.sleep(0.5)
        [still] = our_slices(cp, cp.node_name)
        assert still["spec"]["pool"]["generation"] == 1
        assert still["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    finally:
        cp.stop()
