"""Liveness and readiness of a real daemon: grpc.health.v1 on --healthcheck-port, /healthz and
/readyz on the metrics server, each dialling the real unix sockets (kubelet/grpc_health.py)."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

import grpc
import pytest

from tests.claimfiles import claim_object, write_claim
from tests.cluster.controlplane import free_port
from tests.integration.daemon import DaemonProcess, Kubelet
from tests.kubelet_pb.grpc.health.v1 import health_pb2, health_pb2_grpc
from tests.kubelet_pb.pluginregistration import api_pb2 as reg_pb2

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


def http(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def daemon(short_tmp, request):
    ports = {"health": free_port(), "metrics": free_port()}
    env = getattr(request, "param", {})
    d = DaemonProcess(short_tmp / "sa", env=env, extra_args=[
        "--healthcheck-port", str(ports["health"]), "--healthcheck-address", "127.0.0.1",
        "--metrics-port", str(ports["metrics"]), "--metrics-address", "127.0.0.1"]).start()
    channel = grpc.insecure_channel(f"127.0.0.1:{ports['health']}")
    d.health = health_pb2_grpc.HealthStub(channel)
    d.ports = ports
    yield d
    channel.close()
    d.stop()


def check(d, service: str = "") -> int:
    return d.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=2).status


def register(d) -> None:
    k = Kubelet(d)
    try:
        k.registration.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
    finally:
        k.close()


def test_serving_when_both_sockets_answer_and_ready_only_once_registered(daemon):
    assert check(daemon) == SERVING
    assert check(daemon, "liveness") == SERVING
    assert check(daemon, "readiness") == NOT_SERVING  # the kubelet has not registered us yet
    assert http(daemon.ports["metrics"], "/healthz") == (200, "ok\n")
    code, text = http(daemon.ports["metrics"], "/readyz")
    assert code == 503 and "has not registered the plugin yet" in text
    register(daemon)
    assert check(daemon, "readiness") == SERVING
    assert http(daemon.ports["metrics"], "/readyz") == (200, "ok\n")
    # The empty NodePrepareResources of each check is not a Prepare: no metrics, no log line.
    metrics = http(daemon.ports["metrics"], "/metrics")[1]
    assert 'ascend_dra_prepare_requests_total{result="ok"} 0.0' in metrics
    assert "prepared claim" not in daemon.log_text()
    # Each listener says where it serves (a README trial found the metrics one silent).
    log = daemon.log_text()
    assert f"serving /metrics address=127.0.0.1 port={daemon.ports['metrics']} paths=/healthz,/readyz" in log
    assert f"serving grpc.health.v1.Health address=127.0.0.1 port={daemon.ports['health']}" in log


def test_an_unknown_service_is_not_found_and_watch_says_service_unknown(daemon):
    with pytest.raises(grpc.RpcError) as err:
        check(daemon, "ascend.project-hami.io")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    stream = daemon.health.Watch(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
    assert next(stream).status == SERVICE_UNKNOWN
    stream.cancel()


def test_not_serving_once_the_dra_socket_file_is_removed_and_watch_sees_it(daemon):
    stream = daemon.health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=20)
    assert next(stream).status == SERVING
    daemon.dra_socket.unlink()  # the kubelet can no longer reach the DRA service
    assert check(daemon) == NOT_SERVING
    assert next(stream).status == NOT_SERVING
    stream.cancel()
    code, text = http(daemon.ports["metrics"], "/readyz")
    assert code == 503 and "DRA socket" in text and "does not answer" in text
    assert http(daemon.ports["metrics"], "/healthz")[0] == 200  # the process itself is alive
    assert "health check failing" in daemon.log_text()


def test_not_serving_when_the_registration_socket_is_gone(daemon):
    daemon.registration_socket.unlink()
    assert check(daemon) == NOT_SERVING
    assert "registration socket" in http(daemon.ports["metrics"], "/readyz")[1]


@pytest.mark.parametrize("daemon", [{"ASCEND_DRA_STALL_AT": "prepare:after-cdi-write@4"}], indirect=True)
def test_a_stuck_event_loop_is_not_serving_and_not_alive_then_recovers(daemon):
    claim = write_claim(daemon.root, claim_object("stuck"))
    k = Kubelet(daemon)
    caller = threading.Thread(target=k.prepare, args=(claim,), daemon=True)
    caller.start()  # its Prepare blocks the daemon's loop for 4 s
    time.sleep(0.5)
    started = time.monotonic()
    assert check(daemon) == NOT_SERVING  # answered by the health thread, within the probe's 1 s
    assert time.monotonic() - started < 1.5
    assert http(daemon.ports["metrics"], "/healthz") == (503, "the event loop did not run a callback within 2 s\n")
    caller.join(10)
    k.close()
    assert check(daemon) == SERVING
    assert http(daemon.ports["metrics"], "/healthz") == (200, "ok\n")


@pytest.mark.parametrize("path", ["/", "/metricsx", "/favicon.ico", "/healthz/x", "/debug"])
def test_the_metrics_server_answers_404_on_any_other_path(daemon, path):
    code, text = http(daemon.ports["metrics"], path)
    assert code == 404 and "ascend_dra" not in text
    assert http(daemon.ports["metrics"], "/metrics?x=1")[0] == 200


def test_each_rolling_update_instance_checks_its_own_sockets(short_tmp):
    ports = [free_port(), free_port()]
    old, new = (DaemonProcess(short_tmp / "sa", rolling_update_id=rid, extra_args=[
        "--healthcheck-port", str(port), "--healthcheck-address", "127.0.0.1"]).start()
        for rid, port in zip(("pod-old", "pod-new"), ports, strict=True))
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for port in ports]
    try:
        stubs = [health_pb2_grpc.HealthStub(ch) for ch in channels]
        assert [s.Check(health_pb2.HealthCheckRequest(), timeout=2).status for s in stubs] == [SERVING, SERVING]
        old.dra_socket.unlink()
        assert [s.Check(health_pb2.HealthCheckRequest(), timeout=2).status for s in stubs] == [NOT_SERVING, SERVING]
        assert old.stop() == 0
        assert stubs[1].Check(health_pb2.HealthCheckRequest(), timeout=2).status == SERVING
    finally:
        for ch in channels:
            ch.close()
        old.stop()
        new.stop()


@pytest.mark.parametrize("flag", ["--healthcheck-port", "--metrics-port"])
def test_a_port_in_use_refuses_start_up_with_one_line_naming_the_flag(short_tmp, flag):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        address = "--healthcheck-address" if flag == "--healthcheck-port" else "--metrics-address"
        d = DaemonProcess(short_tmp / "sa", extra_args=[flag, str(port), address, "127.0.0.1"])
        d.start(wait=False)
        assert d.wait_exit(20) == 1
    errors = [line for line in d.log_text().splitlines() if "ERROR" in line]
    assert errors == [next(line for line in errors if f"refusing to start: {flag} {port}: cannot listen on "
                           f"127.0.0.1:{port}: Address already in use (another process" in line)]
    assert "Traceback" not in d.log_text()
    assert sorted(p.name for p in d.root.rglob("*.sock")) == []


def test_by_default_the_probe_and_metrics_ports_answer_on_ipv4_and_ipv6(short_tmp):
    """An IPv6 single-stack cluster probes the pod's IPv6 address; the default was 0.0.0.0."""
    from tests.unit.test_listen import _has_ipv6_loopback

    if not _has_ipv6_loopback():
        pytest.skip("this kernel has no IPv6 loopback")
    ports = {"health": free_port(), "metrics": free_port()}
    d = DaemonProcess(short_tmp / "sa", extra_args=["--healthcheck-port", str(ports["health"]),
                                                    "--metrics-port", str(ports["metrics"])]).start()
    try:
        for host in ("127.0.0.1", "[::1]"):
            with urllib.request.urlopen(f"http://{host}:{ports['metrics']}/healthz", timeout=5) as reply:
                assert reply.status == 200, host
            with grpc.insecure_channel(f"{host}:{ports['health']}") as channel:
                status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
                assert status == health_pb2.HealthCheckResponse.SERVING, host
    finally:
        d.stop()


@pytest.mark.parametrize("daemon", [{"ASCEND_DRA_STALL_AT": "prepare:after-cdi-write@0.3"}], indirect=True)
def test_a_stall_in_the_first_call_after_an_idle_spell_is_measured_in_full(daemon):
    """Idle, the loop-stall monitor looks every 2 s only; the call itself wakes it (grpclib's
    RecvRequest), so the 0.3 s its Prepare holds the loop is the serving stall, not a fraction of it."""
    time.sleep(5.2)  # the looks are 2 s apart now (at about 2.3, 4.3, 6.3 s: not during the call)
    k = Kubelet(daemon)
    try:
        k.prepare(write_claim(daemon.root, claim_object("after-idle")))
    finally:
        k.close()
    time.sleep(0.2)
    text = http(daemon.ports["metrics"], "/metrics")[1]
    [value] = [float(line.split()[-1]) for line in text.splitlines()
               if line.startswith('ascend_dra_event_loop_stall_max_seconds{phase="serving"}')]
    assert value >= 0.25, value
