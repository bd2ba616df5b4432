"""What HAMi's monitoring reads, on the real kube-apiserver: the slices of every Ascend profile are
stored with the attributes and capacities HAMi-DRA's node-device cache reads (read back from the API
server and parsed as HAMi-DRA parses them, tests/unit/test_hami_monitoring_attributes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_dra.profiles.ascend import npusmi_sim
from ascend_dra.profiles.ascend.hard_vnpu import HardVnpuProfile
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.vnpu_core import VnpuCoreProfile
from ascend_dra.slices import build_slices
from tests.cluster.test_publish import RES, ok
from tests.hardvnpu import SimHost
from tests.unit.test_ascend_profiles import host_root, lab_310p3
from tests.unit.test_hami_monitoring_attributes import DRIVER, MIB, hami_dra_reads, lab_context

pytestmark = [pytest.mark.cluster, pytest.mark.anyio]

LAB_UUID = "68496E64-20E05477-92C31323-6E78030A-BD003019"


async def test_the_api_server_keeps_what_hami_dra_reads(control_plane, tmp_path: Path, monkeypatch) -> None:
    host = SimHost(tmp_path / "hard")
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    inventories = {
        "whole-310p": await Npu310PProfile(host_root=host_root(tmp_path)).discover(lab_310p3(tmp_path)),
        "vnpu-core": await VnpuCoreProfile().discover(lab_context(tmp_path)),
        "hard-vnpu": await HardVnpuProfile().discover(host.ctx()),
    }
    read: dict[str, dict[str, dict]] = {}
    created = []
    try:
        for scenario, inventory in inventories.items():
            for obj in build_slices(inventory, driver_name=DRIVER, node_name=f"hami-{scenario}"):
                stored = ok(control_plane, "POST", f"{RES}/resourceslices", obj)
                created.append(stored["metadata"]["name"])
                for device in stored["spec"].get("devices") or []:
                    read.setdefault(scenario, {})[device["name"]] = hami_dra_reads(device)
    finally:
        for name in created:
            control_plane.api("DELETE", f"{RES}/resourceslices/{name}")
    assert read["whole-310p"]["npu-1-0"] == {"name": "npu-1-0", "uuid": "", "architecture": "Ascend310P",
                                            "brand": "Huawei", "productName": "310P3", "cores": 100,
                                            "memory": 21525 * MIB}
    assert read["vnpu-core"]["npu-0-0"] == {"name": "npu-0-0", "uuid": LAB_UUID, "architecture": "Ascend310P",
                                           "brand": "Huawei", "productName": "310P3", "cores": 100,
                                           "memory": 21525 * MIB}
    vnpu = read["hard-vnpu"]["vnpu-1-0-vir05-1c-8g-3"]
    assert {k: vnpu[k] for k in ("brand", "architecture", "productName", "cores", "memory")} == {
        "brand": "Huawei", "architecture": "Ascend910B", "productName": "910B4", "cores": 25, "memory": 8192 * MIB}
