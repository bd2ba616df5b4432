"""What HAMi's monitoring tools see of us, on the real control plane.

* The slices of every Ascend profile are stored with the attributes and capacities HAMi-DRA's
  node-device cache reads (read back from the API server and parsed as HAMi-DRA parses them,
  tests/unit/test_hami_monitoring_attributes.py).
* The lab (HAMivNPUCore on the simulated 2 x 310P3, tests/cluster/test_hami_lab.py) with two pods:
  a real Prometheus (tests/prometheus.py) scrapes the daemon, and every panel of the Grafana dashboard
  the chart ships returns series with the pods' labels. With ``ASCEND_DRA_METRICS_PICTURE=<png>`` the
  test also takes docs/monitoring.md's picture of Prometheus's graph page (headless Chromium).
* A chip that was unhealthy and answers again loses its taint, and a new pod lands on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

import attrs
import pytest

from ascend_dra.cluster.slices import build_slices
from ascend_dra.profiles.ascend.hardvnpu.profile import HardVnpuProfile
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.sim import npusmi_sim
from ascend_dra.profiles.ascend.vnpucore.profile import VnpuCoreProfile
from tests.cluster.chart import render
from tests.cluster.controlplane import free_port
from tests.cluster.test_hami_lab import NS, allocated, lab_daemon, lab_pod, result_of, unschedulable
from tests.cluster.test_publish import RES, ok, our_slices, wait_until
from tests.hardvnpu import SimHost
from tests.prometheus import Prometheus
from tests.unit.test_ascend_profiles import host_root, lab_310p3
from tests.unit.test_hami_monitoring_attributes import DRIVER, MIB, hami_dra_reads, lab_context

pytestmark = pytest.mark.cluster

LAB_UUID = "68496E64-20E05477-92C31323-6E78030A-BD003019"


@pytest.mark.anyio
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


# -- the lab on the real control plane, its /metrics scraped by a real Prometheus ------------------------


@pytest.fixture
def observed_lab(control_plane, short_tmp):
    """The lab node's daemon (HAMivNPUCore on the simulated 2 x 310P3, cluster mode, health every
    0.2 s, ``/metrics`` on a free port), the lab's DeviceClass, namespace and RuntimeClass; what the
    test created is removed afterwards."""
    port = free_port()
    with lab_daemon(control_plane, short_tmp, "--health-interval", "0.2", "--metrics-port", str(port),
                    "--metrics-address", "127.0.0.1") as (d, k, node):
        yield control_plane, d, k, node, port


def dashboard_panels(namespace: str) -> list[dict[str, Any]]:
    """The panels of the dashboard the chart ships (rendered with ``grafanaDashboard.enabled``)."""
    [configmap] = [o for o in render(namespace, set_values=("grafanaDashboard.enabled=true",))
                   if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-grafana-dashboard")]
    [text] = configmap["data"].values()
    return json.loads(text)["panels"]


def test_every_dashboard_panel_shows_the_lab_pods_series_in_prometheus(observed_lab, short_tmp) -> None:
    cp, _, k, node, port = observed_lab
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    first, second = node.chips
    node.set_info([attrs.evolve(first, aicore_percent=42, memory_used_mib=9000),
                   attrs.evolve(second, aicore_percent=17, memory_used_mib=5000, temperature_c=44)])
    pods = ("ascend-share-a", "ascend-ctrl-a")  # 8 GiB / 50 % of npu-0-0; of npu-1-0
    for pod in pods:
        lab_pod(cp, pod)
    claims = [wait_until(lambda p=p: allocated(cp, p), f"{p}'s claim allocated", within=30) for p in pods]
    reply = k.prepare(*claims)
    assert {uid: e.error for uid, e in reply.claims.items() if e.error} == {}
    prometheus = Prometheus(short_tmp / "prometheus", f"127.0.0.1:{port}").start()
    try:
        panels = dashboard_panels(NS)
        assert len(panels) == 7
        for panel in panels:
            [target] = panel["targets"]
            expr = target["expr"].replace("$node", ".*").replace("$namespace", ".*")
            result = prometheus.wait_query(expr, panel["title"])
            series = {(r["metric"]["namespace"], r["metric"]["pod"], r["metric"]["device"]): float(r["value"][1])
                      for r in result}
            assert set(series) == {(NS, "ascend-share-a", "npu-0-0"), (NS, "ascend-ctrl-a", "npu-1-0")}, panel["title"]
            if panel["title"] == "NPU memory given to each pod":
                assert series[(NS, "ascend-share-a", "npu-0-0")] == 8 << 30
            if panel["title"] == "AI core use of each pod's chip":
                assert series == {(NS, "ascend-share-a", "npu-0-0"): 42.0, (NS, "ascend-ctrl-a", "npu-1-0"): 17.0}
            if panel["title"] == "Temperature of each pod's chip":
                assert series[(NS, "ascend-ctrl-a", "npu-1-0")] == 44.0
        # Every scrape has every chip's reading, also those that came while the health check's npu-smi
        # ran (every 0.2 s here): one scrape without them and Prometheus marks them stale, a gap.
        prometheus.wait_query("sum_over_time(up[10s]) >= 8", "eight scrapes", within=60)
        missed = prometheus.query("count_over_time(hami_host_gpu_utilization_ratio[10s]) - on () group_left "
                                  "sum_over_time(up[10s])")
        assert [float(r["value"][1]) for r in missed] == [0.0, 0.0], missed
        # The chart's ConfigMap is one the API server takes as it is.
        [configmap] = [o for o in render(NS, set_values=("grafanaDashboard.enabled=true",))
                       if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-grafana-dashboard")]
        stored = ok(cp, "POST", f"/api/v1/namespaces/{NS}/configmaps", configmap)
        cp.api("DELETE", f"/api/v1/namespaces/{NS}/configmaps/{stored['metadata']['name']}")
        assert stored["metadata"]["labels"]["grafana_dashboard"] == "1"
        picture = os.environ.get(PICTURE_ENV)
        if picture:  # docs/monitoring.md's picture, from this very run: a minute of changing AI core use
            for a, b in ((55, 20), (63, 31), (48, 35), (71, 12), (66, 25), (40, 30), (58, 22), (45, 18)):
                node.set_info([attrs.evolve(first, aicore_percent=a, memory_used_mib=9000),
                               attrs.evolve(second, aicore_percent=b, memory_used_mib=5000, temperature_c=44)])
                time.sleep(5)
            [utilization] = [p for p in panels if p["title"] == "AI core use of each pod's chip"]
            screenshot(prometheus, utilization["targets"][0]["expr"].replace("$node", ".*").replace(
                "$namespace", ".*"), Path(picture), short_tmp / "chromium")
    finally:
        prometheus.stop()
        for claim in claims:
            k.unprepare(claim)


def test_a_chip_that_recovers_loses_its_taint_and_a_new_pod_lands_on_it(observed_lab) -> None:
    """Health that recovers on the real control plane: npu-0-0 turns Critical in npu-smi info, is
    tainted and the pod pinned to it (by uuid) stays pending; npu-smi stops answering and it stays
    tainted; it answers OK again, loses its taint, the pod is scheduled onto it and its claim prepared."""
    cp, d, k, node, _ = observed_lab
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    first, second = node.chips

    def taints() -> list[dict[str, Any]]:
        return [t for s in our_slices(cp, cp.node_name) for dev in s["spec"]["devices"] if dev["name"] == "npu-0-0"
                for t in dev.get("taints") or []]

    node.set_info([attrs.evolve(first, health="Critical"), second])
    wait_until(taints, "npu-0-0 tainted")
    lab_pod(cp, "ascend-share-a")  # pinned to npu-0-0 by its uuid
    wait_until(lambda: unschedulable(cp, "ascend-share-a"), "kept off the tainted chip", within=30)
    node.set_info(None)
    wait_until(lambda: "profile health check failed" in d.log_text(), "npu-smi silent")
    assert taints() and allocated(cp, "ascend-share-a") is None
    node.set_info(node.chips)
    wait_until(lambda: not taints(), "taint removed")
    claim = wait_until(lambda: allocated(cp, "ascend-share-a"), "scheduled once healthy", within=60)
    assert result_of(claim)["device"] == "npu-0-0"
    uid = claim["metadata"]["uid"]
    assert k.prepare(claim).claims[uid].error == ""
    assert k.unprepare(claim).claims[uid].error == ""


PICTURE_ENV = "ASCEND_DRA_METRICS_PICTURE"


def screenshot(prometheus: Prometheus, expr: str, out: Path, profile_dir: Path) -> None:
    """Prometheus's own graph page of ``expr`` as a PNG, by headless Chromium (Debian's ``chromium``)."""
    query = urllib.parse.urlencode({"g0.expr": expr, "g0.tab": "0", "g0.range_input": "1m"})
    chromium = shutil.which("chromium") or "chromium"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={profile_dir}", "--window-size=1800,860", "--virtual-time-budget=15000",
                    f"--screenshot={out}", f"{prometheus.url}/graph?{query}"], check=True, timeout=120,
                   capture_output=True)
