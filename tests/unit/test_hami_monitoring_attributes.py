"""What HAMi's monitoring reads from our ResourceSlices: each Ascend profile's slices, read the way
HAMi-DRA's node-device cache reads them (``ParseNodeDevice`` in ``pkg/cache/nodedevices.go``).

That reader takes, for every device of a slice, the string attributes ``uuid``, ``architecture``,
``brand`` and ``productName`` (a missing key or a non-string value reads as ``""``) and the
capacities ``cores`` and ``memory`` as ``Quantity.Value()`` (a missing one reads as 0); its
collector (``pkg/metrics/collector.go``) shows ``memory / 1024 / 1024`` as MB and ``cores`` as is,
so ``memory`` must count bytes and ``cores`` percent of a chip (HAMi's unit, 100 = whole).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from ascend_dra.cluster.slices import build_slices
from ascend_dra.model import Inventory, parse_quantity
from ascend_dra.profiles.ascend.hardvnpu.profile import HardVnpuProfile
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from ascend_dra.profiles.ascend.sim import labnode, npusmi_sim
from ascend_dra.profiles.ascend.vnpucore.profile import VnpuCoreProfile
from ascend_dra.profiles.base import ProfileContext
from tests.hardvnpu import SimHost
from tests.unit.test_ascend_discovery import ANSWERS_910A, tree_910a
from tests.unit.test_ascend_profiles import context, host_root, lab_310p3
from tests.unit.test_ascend_support import fake_npu_smi

pytestmark = pytest.mark.anyio

DRIVER = "ascend.project-hami.io"
MIB = 1024 * 1024


def hami_dra_reads(device: dict[str, Any]) -> dict[str, Any]:
    """One ``NodeDevice`` as HAMi-DRA's ``ParseNodeDevice`` fills it from a ``resource.k8s.io/v1`` device."""
    attributes, capacity = device.get("attributes") or {}, device.get("capacity") or {}

    def string(key: str) -> str:
        value = attributes.get(key) or {}
        return value.get("string", "") if isinstance(value.get("string"), str) else ""

    def value(key: str) -> int:  # Quantity.Value(): rounded up to an integer
        return math.ceil(parse_quantity(capacity[key]["value"])) if key in capacity else 0

    return {"name": device["name"], "uuid": string("uuid"), "architecture": string("architecture"),
            "brand": string("brand"), "productName": string("productName"),
            "cores": value("cores"), "memory": value("memory")}


def devices_of(inventory: Inventory) -> dict[str, dict[str, Any]]:
    """Device name -> what HAMi-DRA reads, over the slices we would publish for ``inventory``."""
    return {d["name"]: hami_dra_reads(d) for s in build_slices(inventory, driver_name=DRIVER, node_name="node-a")
            for d in s["spec"].get("devices") or []}


async def test_310p_whole_chips_carry_what_hami_dra_reads(tmp_path: Path) -> None:
    inventory = await Npu310PProfile(host_root=host_root(tmp_path)).discover(lab_310p3(tmp_path))
    read = devices_of(inventory)
    # 310P3_info.txt prints no VDie ID: the uuid comes only from ``-t board -c`` (absent from this fixture).
    assert read["npu-0-0"] == {"name": "npu-0-0", "uuid": "", "architecture": "Ascend310P", "brand": "Huawei",
                               "productName": "310P3", "cores": 100, "memory": 21525 * MIB}


async def test_910_whole_chips_carry_what_hami_dra_reads(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, ANSWERS_910A)
    dev, sys_root = tree_910a(tmp_path)
    inventory = await Npu910Profile().discover(context(tmp_path, exe, dev, sys_root))
    assert devices_of(inventory)["npu-0-0"] == {
        "name": "npu-0-0", "uuid": "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003", "architecture": "Ascend910",
        "brand": "Huawei", "productName": "910A", "cores": 100, "memory": 32768 * MIB}


def lab_context(tmp_path: Path, lab: labnode.LabNode | None = None) -> ProfileContext:
    """The simulated Lab 18 node (labnode.py; built under ``tmp_path`` unless given) as the
    HAMivNPUCore profile's context."""
    lab = lab or labnode.build(tmp_path / "lab")
    return ProfileContext(node_name="node-a", driver_name=DRIVER, npu_smi=str(lab.npu_smi), dev_root=lab.dev_root,
                          sys_root=tmp_path / "sys", state_dir=tmp_path / "state",
                          options={"HAMivNPUCore.hostRoot": str(lab.host_root)})


async def test_hami_vnpu_core_shares_carry_what_hami_dra_reads(tmp_path: Path) -> None:
    read = devices_of(await VnpuCoreProfile().discover(lab_context(tmp_path)))
    assert read == {
        "npu-0-0": {"name": "npu-0-0", "uuid": "68496E64-20E05477-92C31323-6E78030A-BD003019",
                    "architecture": "Ascend310P", "brand": "Huawei", "productName": "310P3", "cores": 100,
                    "memory": 21525 * MIB},
        "npu-1-0": {"name": "npu-1-0", "uuid": "D8496E64-20C101B1-C0D42F23-AED8030A-40003039",
                    "architecture": "Ascend310P", "brand": "Huawei", "productName": "310P3", "cores": 100,
                    "memory": 21525 * MIB},
    }


async def test_hard_vnpus_carry_their_share_of_the_chip_in_hamis_units(tmp_path: Path, monkeypatch) -> None:
    host = SimHost(tmp_path)
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    read = devices_of(await HardVnpuProfile().discover(host.ctx()))
    whole, vnpu = read["npu-1-0"], read["vnpu-1-0-vir05-1c-8g-3"]
    assert (whole["brand"], whole["architecture"], whole["productName"], whole["cores"], whole["memory"]) == (
        "Huawei", "Ascend910B", "910B4", 100, 32768 * MIB)
    # vir05_1c_8g: 5 of the 910B4's 20 AI cores (25 %) and 8 GiB, beside the chip's own uuid and names.
    assert {k: vnpu[k] for k in ("brand", "architecture", "productName", "cores", "memory")} == {
        "brand": "Huawei", "architecture": "Ascend910B", "productName": "910B4", "cores": 25, "memory": 8192 * MIB}
    assert vnpu["uuid"] == whole["uuid"]
