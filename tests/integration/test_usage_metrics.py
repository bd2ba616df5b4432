"""Usage on the daemon's /metrics, over the lab node (HAMivNPUCore on the simulated 2 x 310P3): what a
prepared share is given and to which pod, what its chip reports, and the pod still named after a
restart of the daemon (read back from the claim)."""

from __future__ import annotations

import time
import urllib.request

import attrs
from prometheus_client.parser import text_string_to_metric_families

from ascend_dra.profiles.ascend.sim import labnode
from tests.claimfiles import claim_object, write_claim
from tests.cluster.controlplane import free_port
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

NODE = "aio-node74-arm"
UUID_0 = "68496E64-20E05477-92C31323-6E78030A-BD003019"


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Metric name -> [(labels, value)] of one scrape (prometheus-client's parser)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def wait_scraped(port: int, probe, what: str, within: float = 20.0):
    deadline = time.monotonic() + within
    while not (value := probe(scrape(port))):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return value


def test_a_prepared_share_shows_its_pod_its_booking_and_its_chip(short_tmp):
    lab = labnode.build(short_tmp / "lab")
    first, second = lab.chips
    lab.set_info([attrs.evolve(first, aicore_percent=42, memory_used_mib=9000), second])
    port = free_port()
    d = DaemonProcess(short_tmp / "sa", node=NODE, profiles="HAMivNPUCore",
                      extra_args=[*lab.flags(), "--health-interval", "0.2", "--metrics-port", str(port)]).start()
    k = Kubelet(d)
    result = {"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-0-0", "shareID": "s-1",
              "consumedCapacity": {"cores": "50", "memory": "8Gi", "containers": "1"}}
    claim = write_claim(d.root, claim_object("share-a", namespace="dra-ascend-e2e", node=NODE, results=[result]))
    uid = claim["metadata"]["uid"]
    try:
        assert k.prepare(claim).claims[uid].error == ""
        metrics = scrape(port)
        [(labels, value)] = metrics["hami_vgpu_memory_allocated_bytes"]
        assert value == 8 << 30
        assert labels == {"namespace": "dra-ascend-e2e", "node": NODE, "pod": "share-a-pod", "container_index": "",
                          "device_uuid": UUID_0, "claim": "share-a", "device": "npu-0-0"}
        assert [v for _, v in metrics["hami_vgpu_core_allocated_ratio"]] == [50.0]
        chip = {"node": NODE, "device_uuid": UUID_0, "device_index": "0", "device_type": "Ascend310P",
                "device": "npu-0-0"}
        assert (chip, 42.0) in metrics["hami_host_gpu_utilization_ratio"]
        assert (chip, 9000.0 * (1 << 20)) in metrics["hami_host_gpu_memory_used_bytes"]
        assert (chip, 37.0) in metrics["ascend_dra_device_temperature_celsius"]
        assert (chip, 1.0) in metrics["ascend_dra_device_health"]
        assert (chip, 1.0) in metrics["hami_gpu_shared_count"]
        [(_, utilization)] = metrics["hami_container_device_utilization_ratio"]
        assert utilization == 42.0

        # A restart: the claim is not read for a Prepare again, yet its pod is named once the
        # health loop has read it back.
        d.stop()
        d.start()
        wait_scraped(port, lambda m: [lb["pod"] for lb, _ in m["hami_vgpu_memory_allocated_bytes"]] == ["share-a-pod"],
                     "the pod read back after the restart")
        assert k.unprepare(claim).claims[uid].error == ""
        after = scrape(port)
        assert after["hami_vgpu_memory_allocated_bytes"] == []
        assert (chip, 0.0) in after["hami_gpu_shared_count"]
    finally:
        k.close()
        d.stop()
