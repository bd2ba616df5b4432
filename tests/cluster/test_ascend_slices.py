"""The slices of the npu-310P and npu-910 profiles, as discovered from real npu-smi outputs, are
accepted by the real kube-apiserver and stored unchanged."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest

from ascend_dra.cluster.slices import build_slices
from tests.cluster.test_publish import RES, ok
from tests.unit.test_ascend_limits import FIXTURE_NODES, fixture_node

pytestmark = pytest.mark.cluster

DRIVER = "ascend.project-hami.io"


@pytest.mark.anyio
@pytest.mark.parametrize("scenario", FIXTURE_NODES)
async def test_fixture_node_slices_are_accepted_unchanged(control_plane, tmp_path: Path, scenario: str) -> None:
    inventory = await fixture_node(tmp_path, scenario)
    node = f"fixture-{scenario.lower()}"
    created = []
    try:
        for obj in build_slices(inventory, driver_name=DRIVER, node_name=node):
            stored = ok(control_plane, "POST", f"{RES}/resourceslices", obj)
            created.append(stored["metadata"]["name"])
            assert stored["spec"] == obj["spec"], scenario
        selector = urllib.parse.quote(f"spec.nodeName={node}")
        listed = ok(control_plane, "GET", f"{RES}/resourceslices?fieldSelector={selector}")["items"]
        assert sum(len(s["spec"]["devices"]) for s in listed) == len(inventory.devices)
    finally:
        for name in created:
            control_plane.api("DELETE", f"{RES}/resourceslices/{name}")
