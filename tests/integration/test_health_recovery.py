"""Health that recovers, through the Ascend profiles' own health source (``npu-smi info``'s Health
column, here the lab node's stand-in): a chip that turns Critical is tainted and reported Unhealthy;
while npu-smi does not answer the chips are unknown to the kubelet, and stay published through the
rediscoveries meanwhile, the tainted one with its taint; once npu-smi answers again with OK it loses its
taint, is reported Healthy to the kubelet, and a new claim on it is prepared without a word about its health,
all without a restart."""

from __future__ import annotations

import time

import attrs

from ascend_dra.profiles.ascend.sim import labnode
from tests.claimfiles import claim_object, write_claim
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet
from tests.integration.test_health import HEALTHY, UNHEALTHY, UNKNOWN, slice_devices, wait_for
from tests.kubelet_pb.dra_health.v1alpha1 import api_pb2 as health_pb2

NODE = "aio-node74-arm"


def test_an_unhealthy_chip_that_answers_again_is_untainted_healthy_and_takes_a_new_claim(short_tmp):
    lab = labnode.build(short_tmp / "lab")
    d = DaemonProcess(short_tmp / "sa", node=NODE, profiles="HAMivNPUCore",
                      extra_args=[*lab.flags(), "--health-interval", "0.2", "--rediscover-interval", "0.2"]).start()
    k = Kubelet(d)
    stream = k.health.NodeWatchResources(health_pb2.NodeWatchResourcesRequest(), timeout=60)

    def next_states(wanted: int, what: str) -> dict[str, int]:
        deadline = time.monotonic() + 20
        for message in stream:
            states = {x.device.device_name: x.health for x in message.devices}
            if states.get("npu-0-0") == wanted:
                return states
            assert time.monotonic() < deadline, (what, states)
        raise AssertionError(f"health stream ended before {what}")

    first, second = lab.chips
    try:
        assert next_states(HEALTHY, "healthy at start") == {"npu-0-0": HEALTHY, "npu-1-0": HEALTHY}
        lab.set_info([attrs.evolve(first, health="Critical"), second])
        assert next_states(UNHEALTHY, "unhealthy") == {"npu-0-0": UNHEALTHY, "npu-1-0": HEALTHY}
        wait_for(lambda: slice_devices(d).get("npu-0-0"), "npu-0-0 tainted")
        assert [t["key"] for t in slice_devices(d)["npu-0-0"]] == [f"{DRIVER}/unhealthy"]

        lab.set_info(None)  # npu-smi stops answering: the chips keep their verdicts, and stay published
        assert next_states(UNKNOWN, "unknown") == {"npu-0-0": UNKNOWN, "npu-1-0": UNKNOWN}
        # The devfs tier answers the rediscovery; the chips stay offered as at npu-smi's last answer
        # (before, HAMivNPUCore offered none: it cannot read the device-share mode without npu-smi).
        wait_for(lambda: "driver not answering; chips offered as at its last answer" in d.log_text(),
                 "a rediscovery while npu-smi does not answer")
        assert [t["key"] for t in slice_devices(d)["npu-0-0"]] == [f"{DRIVER}/unhealthy"]

        lab.set_info(lab.chips)  # it answers again, OK
        assert next_states(HEALTHY, "healthy again") == {"npu-0-0": HEALTHY, "npu-1-0": HEALTHY}
        wait_for(lambda: slice_devices(d).get("npu-0-0") == [], "npu-0-0 untainted")

        result = {"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-0-0", "shareID": "s-1",
                  "consumedCapacity": {"cores": "50", "memory": "8Gi", "containers": "1"}}
        claim = write_claim(d.root, claim_object("after", namespace="dra-ascend-e2e", node=NODE, results=[result]))
        assert k.prepare(claim).claims[claim["metadata"]["uid"]].error == ""
        [line] = [ln for ln in d.log_text().splitlines() if "prepared claim" in ln and "dra-ascend-e2e/after" in ln]
        assert "unhealthy" not in line and "WARNING" not in line, line
    finally:
        stream.cancel()
        k.close()
        d.stop()
