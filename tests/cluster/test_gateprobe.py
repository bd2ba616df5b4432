"""gateprobe.py against the real kube-apiserver: a dry-run create answers what would be stored and
stores nothing (the end-to-end case, a gate turned on while the daemon runs, is in test_hard_vnpu.py)."""

from __future__ import annotations

import pytest

from ascend_dra.cluster import apiclient
from ascend_dra.cluster.gateprobe import gates_still_dropped
from ascend_dra.model import CounterConsumption, CounterSet, Device, Inventory
from tests.cluster.test_publish import our_slices
from tests.cluster.test_slice_watch import close_api
from tests.integration.daemon import DRIVER

pytestmark = [pytest.mark.cluster, pytest.mark.anyio]

GATES = ["DRADeviceTaints", "DRAPartitionableDevices"]


def pool(*devices: Device, counter_sets: tuple[CounterSet, ...] = ()) -> Inventory:
    return Inventory(devices=devices, counter_sets=counter_sets)


async def test_a_server_that_keeps_every_field_is_told_apart_and_nothing_is_stored(cp):
    chip_set = CounterSet("npu-0-0-counters", {"aicore": "20", "memory": "32Gi"})
    chip = Device("npu-0-0", consumes_counters=(CounterConsumption(chip_set.name, {"aicore": "20", "memory": "32Gi"}),))
    vnpu = Device("vnpu-0-0-vir05-0", consumes_counters=(CounterConsumption(chip_set.name, {"aicore": "5",
                                                                                            "memory": "8Gi"}),))
    api = await apiclient.connect_api(str(cp.kubeconfig))
    try:
        assert await gates_still_dropped(api, pool(chip, vnpu, counter_sets=(chip_set,)), GATES,
                                         driver_name=DRIVER, node_name=cp.node_name) == []
        # No field of a gate in the pool (no templates, no devices): it cannot be asked, so it stays off.
        assert await gates_still_dropped(api, pool(Device("npu-1-0")), GATES, driver_name=DRIVER,
                                         node_name=cp.node_name) == ["DRAPartitionableDevices"]
        assert await gates_still_dropped(api, pool(), GATES, driver_name=DRIVER, node_name=cp.node_name) == GATES
    finally:
        await close_api(api)
    assert our_slices(cp, cp.node_name) == []  # dry runs only
