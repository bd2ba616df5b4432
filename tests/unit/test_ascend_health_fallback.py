"""Health when npu-smi stops answering and the devfs tier answers discovery instead: unknown, not
healthy, so a chip that was unhealthy keeps its taint (poolview.py) until npu-smi says it recovered."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from ascend_dra.cluster.poolview import PoolView
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from tests.unit.test_ascend_health import health_script
from tests.unit.test_ascend_profiles import host_root, lab_310p3
from tests.unit.test_ascend_support import script

pytestmark = pytest.mark.anyio


async def test_a_chip_of_the_devfs_fallback_is_unknown_and_an_unhealthy_one_stays_tainted(tmp_path: Path) -> None:
    profile = Npu310PProfile(host_root=host_root(tmp_path))
    ctx = lab_310p3(tmp_path)
    inventory = await profile.discover(ctx)
    sick = attrs.evolve(ctx, npu_smi=str(health_script(tmp_path, "Critical", "OK")))
    pool = PoolView("ascend.project-hami.io", "taint")
    pool.mark_unhealthy(await profile.health(sick, inventory))
    assert sorted(pool.taints) == ["npu-0-0"]

    broken = attrs.evolve(ctx, npu_smi=str(script(tmp_path, "#!/bin/sh\nexit 1\n", name="npu-smi-broken")))
    fallback = await profile.discover(broken)  # npu-smi fails: the device nodes answer, same names
    assert fallback.source == "devfs" and [d.name for d in fallback.devices] == ["npu-0-0", "npu-1-0"]
    assert await profile.health(broken, fallback) == {"npu-0-0": None, "npu-1-0": None}
    pool.mark_unhealthy(await profile.health(broken, fallback))
    assert sorted(pool.taints) == ["npu-0-0"]  # it was counted healthy, and lost its taint


async def test_a_node_without_npu_smi_has_no_health_source_and_its_chips_count_as_healthy(tmp_path: Path) -> None:
    profile = Npu310PProfile(host_root=host_root(tmp_path))
    ctx = attrs.evolve(lab_310p3(tmp_path), npu_smi="npu-smi")  # the default name, on no $PATH nor driver path
    profile.search_path = str(tmp_path / "empty")
    inventory = await profile.discover(ctx)
    assert inventory.source == "devfs" and profile.last_discovery.npu_smi.found is False
    assert await profile.health(ctx, inventory) == {}
