"""A converted HAMi pod is allocated by the real scheduler with the lab's consumed capacity, and prepared.

The HAMivNPUCore profile is being built elsewhere; here a stand-in third-party profile publishes
the seed lab's slice device (ascend.md §11.3: ``npu-0-0``, ``type: HAMivNPUCore``, the lab's uuid,
consumable ``memory`` 21525Mi and ``cores`` 100 with their request policies, shareable) and the
DeviceClass ``hami-vnpu-core.project-hami.io`` of §11.4 is created. What is checked is the
webhook's half: the claim it makes from the lab's pod is one the scheduler allocates exactly as
the lab's step 5 shows (``consumedCapacity: {cores: "50", memory: 8Gi}``, request ``npu``, a
``shareID``), and our daemon prepares it. The real profile's container edits are not.
"""

from __future__ import annotations

import os

import pytest
import yaml

from tests.cluster.test_publish import RES, delete_our_slices, ok, our_slices, pod_claim, wait_until
from tests.cluster.test_webhook import LAB_POD
from tests.cluster.webhook_process import installed_hook
from tests.distributions import write_distribution
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

pytestmark = pytest.mark.cluster

STAND_IN = '''
import attrs
from ascend_dra.profiles.base import (Capacity, CapacityRequestPolicy, ContainerEdits, Device, Inventory,
                                      parse_quantity)

@attrs.frozen
class StandInConfig:
    pass

class StandIn:
    name = "hami-standin"
    cdi_class = "vnpu"
    config_types = {"StandInConfig": StandInConfig}

    def default_config(self):
        return StandInConfig()

    async def discover(self, ctx):
        memory = Capacity("21525Mi", CapacityRequestPolicy(default="21525Mi", valid_range_min="1Mi",
                                                           valid_range_max="21525Mi", valid_range_step="1Mi"))
        cores = Capacity("100", CapacityRequestPolicy(default="100", valid_range_min="0", valid_range_max="100",
                                                      valid_range_step="1"))
        device = Device(name="npu-0-0", attributes={
            "brand": "Huawei", "index": 0, "model": "310P3", "physicalID": 0, "productName": "310P3",
            "type": "HAMivNPUCore", "uuid": "68496E64-20E05477-92C31323-6E78030A-BD003019"},
            capacities={"memory": memory, "cores": cores}, allow_multiple_allocations=True)
        return Inventory(devices=(device,), source="simulated")

    def validate(self, config):
        pass

    def apply_config(self, config, devices, ctx):
        return {d.device: ContainerEdits(env=(
            f"CONSUMED_MEMORY={int(parse_quantity(d.consumed_capacity['memory']))}",
            f"CONSUMED_CORES={d.consumed_capacity['cores']}")) for d in devices}

def factory():
    return StandIn()
'''

CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": "hami-vnpu-core.project-hami.io"},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}" && '
                                                       f'device.attributes["{DRIVER}"].type == "HAMivNPUCore"'}}]}}


@pytest.mark.parametrize("mode", ["claim", "template"])
def test_converted_lab_pod_is_allocated_as_the_lab_shows_and_prepared(control_plane, short_tmp, tmp_path, mode):
    cp = control_plane
    vendor = short_tmp / "vendor"
    write_distribution(vendor, "hami-standin", {"hami-standin": STAND_IN})
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(vendor), os.environ.get("PYTHONPATH")]))}
    delete_our_slices(cp, cp.node_name)
    daemon = DaemonProcess(short_tmp / "node", node=cp.node_name, kubeconfig=cp.kubeconfig, profiles="hami-standin",
                           env=env).start()
    status, reply = cp.api("POST", f"{RES}/deviceclasses", CLASS)
    assert status in (201, 409), reply
    kubelet = None
    with installed_hook(cp, tmp_path, mode) as hook:
        ns = hook.namespace("dra-ascend-e2e")
        try:
            wait_until(lambda: our_slices(cp, cp.node_name), "stand-in slice published")
            ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", LAB_POD)
            claim = wait_until(lambda: (c := pod_claim(cp, ns, "ascend-share-a")) and c.get("status", {}).get(
                "allocation") and c, "allocated", within=30)
            [result] = claim["status"]["allocation"]["devices"]["results"]
            share_id = result.pop("shareID")
            assert result == {"consumedCapacity": {"cores": "50", "memory": "8Gi"}, "device": "npu-0-0",
                              "driver": DRIVER, "pool": cp.node_name, "request": "npu"}
            assert claim["status"]["allocation"]["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [cp.node_name]}]}]}
            kubelet = Kubelet(daemon)
            uid = claim["metadata"]["uid"]
            reply = kubelet.prepare(claim)
            assert reply.claims[uid].error == ""
            [prepared] = reply.claims[uid].devices
            assert prepared.share_id == share_id
            spec = yaml.safe_load((daemon.cdi_dir / f"k8s.{DRIVER}-vnpu_{uid}.yaml").read_text())
            assert spec["devices"][0]["containerEdits"]["env"] == ["CONSUMED_MEMORY=8589934592", "CONSUMED_CORES=50"]
            assert kubelet.unprepare(claim).claims[uid].error == ""
        finally:
            if kubelet is not None:
                kubelet.close()
            cp.api("DELETE", f"/api/v1/namespaces/{ns}/pods/ascend-share-a?gracePeriodSeconds=0")
            daemon.stop()
            delete_our_slices(cp, cp.node_name)
