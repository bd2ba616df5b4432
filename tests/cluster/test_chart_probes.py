"""The chart's probes, run as the kubelet runs them, against a daemon started with the chart's env.

The DaemonSet ``helm template`` renders gives the container's env (ports, driver, profiles, log
settings) and its startup, liveness and readiness probes. A daemon is started in cluster mode with
that env (the host paths replaced by the test's directories, the pod UID by a fresh id), and each
probe is performed the way the kubelet does: a ``grpc`` probe is ``grpc.health.v1.Health/Check``
with the probe's ``service`` (empty when unset) on the pod's address, an ``httpGet`` probe a plain
GET whose 2xx/3xx status passes.
"""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from typing import Any

import grpc
import pytest

from tests.cluster.chart import by_kind, render
from tests.cluster.controlplane import free_port
from tests.cluster.test_publish import wait_until
from tests.integration.daemon import DaemonProcess, Kubelet
from tests.kubelet_pb.grpc.health.v1 import health_pb2, health_pb2_grpc
from tests.kubelet_pb.pluginregistration import api_pb2 as reg_pb2

pytestmark = pytest.mark.cluster


def probe_passes(probe: dict[str, Any]) -> bool:
    """Run one rendered probe against 127.0.0.1 as the kubelet would; True when it passes."""
    if "grpc" in probe:
        with grpc.insecure_channel(f"127.0.0.1:{probe['grpc']['port']}") as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=probe["grpc"].get("service", "")), timeout=2)
            except grpc.RpcError:
                return False
            return reply.status == health_pb2.HealthCheckResponse.SERVING
    get = probe["httpGet"]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{get['port']}{get['path']}", timeout=2) as reply:
            return 200 <= reply.status < 400
    except (urllib.error.URLError, OSError):
        return False


@pytest.mark.parametrize("metrics", [True, False], ids=["readiness-on-http", "readiness-on-grpc"])
def test_the_rendered_probes_pass_on_a_running_daemon_and_readiness_waits_for_registration(cp, short_tmp,
                                                                                          metrics):
    health_port, metrics_port = free_port(), free_port() if metrics else 0
    [ds] = by_kind(render("ascend-dra", "fake-values.yaml", set_values=(
        f"daemon.healthcheckPort={health_port}", f"daemon.metricsPort={metrics_port}")), "DaemonSet")
    [container] = ds["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env.pop("CDI_ROOT")  # host paths: the test's directories instead (DaemonProcess passes them as flags)
    env.pop("KUBELET_ROOT_DIR")
    uid = uuid.uuid4().hex[:12]  # ROLLING_UPDATE_ID is the pod UID (valueFrom); short: the test dir is long
    assert {e["name"] for e in container["env"] if "valueFrom" in e} == {"NODE_NAME", "ROLLING_UPDATE_ID"}
    d = DaemonProcess(short_tmp / "node", node=cp.node_name, kubeconfig=cp.kubeconfig, rolling_update_id=uid,
                      fake_devices=int(env.pop("FAKE_DEVICES", "4")), profiles=env.pop("PROFILES"))
    d.start(extra_env=env)
    k = Kubelet(d)
    try:
        startup, liveness, readiness = (container[p] for p in ("startupProbe", "livenessProbe", "readinessProbe"))
        assert ("httpGet" in readiness) == metrics
        wait_until(lambda: probe_passes(startup), "the startup probe passes", within=30)
        assert probe_passes(liveness)
        assert not probe_passes(readiness)  # the kubelet has not registered us yet
        info = k.get_info()
        k.registration.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
        assert info.name == env["DRIVER_NAME"]
        wait_until(lambda: probe_passes(readiness), "the readiness probe passes after registration", within=15)
    finally:
        k.close()
        d.stop()
    assert not probe_passes(liveness)  # stopped: the kubelet would restart the container


def test_readiness_fails_while_the_resourceslices_cannot_be_published(cp, start_daemon):
    """A registered daemon that cannot publish (the API server gone) showed Ready while the scheduler
    allocated from slices that no longer said what the node has (here: a device turned unhealthy)."""
    from tests.cluster.test_publish import our_slices
    from tests.integration.daemon import DRIVER
    from tests.integration.test_grpc_health import http, register

    port = free_port()
    d = start_daemon(extra_args=("--health-interval", "0.2", "--metrics-port", str(port)))
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    register(d)
    wait_until(lambda: http(port, "/readyz")[0] == 200, "ready once registered", within=15)
    cp.stop_apiserver()
    try:
        marks = d.root / "plugins" / DRIVER / "profiles" / "fake-health"
        marks.mkdir(parents=True)
        (marks / "npu-1-0").write_text("unhealthy\n")  # the taint must be published: it cannot be
        status, body = wait_until(lambda: (r := http(port, "/readyz"))[0] != 200 and r, "not ready", within=30)
        assert status == 503 and "publishing the ResourceSlices failed" in body, body
        assert d.proc.poll() is None  # still serving the kubelet meanwhile
    finally:
        cp.start_apiserver()
    wait_until(lambda: http(port, "/readyz")[0] == 200, "ready again once published", within=60)
    [taints] = [dev.get("taints") for s in our_slices(cp, cp.node_name) for dev in s["spec"]["devices"]
                if dev["name"] == "npu-1-0"]
    assert [(t["key"], t["effect"]) for t in taints or ()] == [(f"{DRIVER}/unhealthy", "NoSchedule")]
