"""Device health: a profile's health hook reaches the kubelet's NodeWatchResources stream (KEP-4680)."""

from __future__ import annotations

import time

import grpc
import pytest

from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet
from tests.kubelet_pb.dra_health.v1alpha1 import api_pb2 as health_pb2

HEALTHY, UNHEALTHY, UNKNOWN = 1, 2, 0


def test_a_device_reported_unhealthy_reaches_the_health_stream_and_recovers(short_tmp):
    d = DaemonProcess(short_tmp / "sa", extra_args=["--health-interval", "0.2"]).start()
    k = Kubelet(d)
    marks = d.root / "plugins" / DRIVER / "profiles" / "fake-health"
    stream = k.health.NodeWatchResources(health_pb2.NodeWatchResourcesRequest(), timeout=30)
    try:
        first = next(stream)
        assert {x.device.device_name: x.health for x in first.devices} == {
            f"npu-{i}-0": HEALTHY for i in range(4)}
        assert {x.health_check_timeout_seconds for x in first.devices} == {30}  # never below the kubelet's 30 s

        marks.mkdir(parents=True)
        (marks / "npu-2-0").write_text("unhealthy\n")
        (marks / "npu-3-0").write_text("unknown\n")
        deadline = time.monotonic() + 15
        for message in stream:
            states = {x.device.device_name: x.health for x in message.devices}
            if states["npu-2-0"] == UNHEALTHY:
                break
            assert time.monotonic() < deadline, states
        assert states == {"npu-0-0": HEALTHY, "npu-1-0": HEALTHY, "npu-2-0": UNHEALTHY, "npu-3-0": UNKNOWN}
        assert all(x.device.pool_name == "node-1" for x in message.devices)

        (marks / "npu-2-0").unlink()
        for message in stream:
            if {x.device.device_name: x.health for x in message.devices}["npu-2-0"] == HEALTHY:
                break
            assert time.monotonic() < deadline + 15
        assert "device health changed" in d.log_text()
    finally:
        stream.cancel()
        k.close()
        d.stop()


def test_the_stream_ends_cleanly_when_the_daemon_stops(short_tmp):
    d = DaemonProcess(short_tmp / "sa").start()
    k = Kubelet(d)
    stream = k.health.NodeWatchResources(health_pb2.NodeWatchResourcesRequest(), timeout=30)
    assert len(next(stream).devices) == 4
    d.stop()
    try:
        next(stream)
        raise AssertionError("the stream went on after the daemon stopped")
    except grpc.RpcError as exc:
        assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN)
    except StopIteration:
        pass
    finally:
        k.close()


def test_both_health_versions_stream_the_same_devices_and_are_advertised_newest_first(short_tmp):
    d = DaemonProcess(short_tmp / "sa").start()
    k = Kubelet(d)
    try:
        services = list(k.get_info().supported_versions)
        assert services == ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"]
        v1, v1alpha1 = k.first_health("v1"), k.first_health("v1alpha1")
        assert type(v1).DESCRIPTOR.full_name == "v1.NodeWatchResourcesResponse"
        assert type(v1alpha1).DESCRIPTOR.full_name == "v1alpha1.NodeWatchResourcesResponse"
        for message in (v1, v1alpha1):
            assert {(x.device.pool_name, x.device.device_name, x.health) for x in message.devices} == {
                ("node-1", f"npu-{i}-0", HEALTHY) for i in range(4)}
            assert {x.health_check_timeout_seconds for x in message.devices} == {30}
    finally:
        k.close()
        d.stop()


def test_a_long_health_interval_still_resends_inside_the_kubelets_30_s(short_tmp):
    d = DaemonProcess(short_tmp / "sa", extra_args=["--health-interval", "120"]).start()
    k = Kubelet(d)
    from tests.kubelet_pb.dra_health.v1 import api_pb2 as v1_pb2

    stream = k.health_v1.NodeWatchResources(v1_pb2.NodeWatchResourcesRequest(), timeout=40)
    try:
        next(stream)
        started = time.monotonic()
        second = next(stream)  # nothing changed: this is the periodic re-send
        gap = time.monotonic() - started
        assert len(second.devices) == 4
        assert gap < 15, f"re-sent after {gap:.1f} s; the kubelet calls devices unknown after 30 s"
    finally:
        stream.cancel()
        k.close()
        d.stop()


def test_with_the_health_service_off_it_is_neither_served_nor_advertised(short_tmp):
    d = DaemonProcess(short_tmp / "sa", extra_args=["--health-service=false"]).start()
    k = Kubelet(d)
    try:
        assert list(k.get_info().supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
        for api in ("v1", "v1alpha1"):
            try:
                k.first_health(api)
                raise AssertionError(f"{api} health answered although it is off")
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        k.close()
        d.stop()


def slice_devices(d: DaemonProcess) -> dict[str, list[dict]]:
    """Device name -> its taints, over the standalone slice files (a device absent: not published)."""
    import yaml

    found: dict[str, list[dict]] = {}
    for path in sorted((d.root / "resourceslices").glob("*.yaml")):
        for dev in yaml.safe_load(path.read_text())["spec"].get("devices") or []:
            found[dev["name"]] = dev.get("taints") or []
    return found


def wait_for(probe, what: str, within: float = 15.0):
    deadline = time.monotonic() + within
    while not (value := probe()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return value


@pytest.mark.parametrize(("flags", "published", "tainted"), [
    ((), True, True),  # the default: taint
    (("--unhealthy-devices", "withdraw"), False, False),
    (("--unhealthy-devices", "publish"), True, False),
    (("--taint-unhealthy", "false"), True, False),  # the older flag's false: as before 2026-12-03
], ids=["default taint", "withdraw", "publish", "taint-unhealthy false"])
def test_what_the_slices_say_of_an_unhealthy_device(short_tmp, flags, published, tainted):
    """An unhealthy device got new claims by default (no taint unless --taint-unhealthy, which needs
    a feature gate): a migrating device-plugin user expects it to leave the allocatable pool. A
    device of unknown health stays as it is; a recovered one comes back."""
    d = DaemonProcess(short_tmp / "sl", extra_args=["--health-interval", "0.2", *flags]).start()
    marks = d.root / "plugins" / DRIVER / "profiles" / "fake-health"
    try:
        marks.mkdir(parents=True)
        (marks / "npu-3-0").write_text("unknown\n")
        (marks / "npu-2-0").write_text("unhealthy\n")
        if published and tainted:
            wait_for(lambda: slice_devices(d).get("npu-2-0"), "npu-2-0 tainted")
            assert slice_devices(d)["npu-2-0"][0]["key"] == f"{DRIVER}/unhealthy"
        elif not published:
            wait_for(lambda: "npu-2-0" not in slice_devices(d), "npu-2-0 withdrawn")
        else:
            wait_for(lambda: "device health changed" in d.log_text(), "the health change seen")
            time.sleep(0.5)  # a republish would have come by now
        devices = slice_devices(d)
        assert ("npu-2-0" in devices) == published
        assert devices.get("npu-2-0", []) == [] or tainted
        assert devices["npu-3-0"] == [] and devices["npu-0-0"] == []
        (marks / "npu-2-0").unlink()
        wait_for(lambda: slice_devices(d).get("npu-2-0") == [], "npu-2-0 back, untainted")
        deprecations = [line for line in d.log_text().splitlines() if "deprecated" in line]
        if "--taint-unhealthy" in flags:
            assert [line.split("ascend_dra.node.daemon: ", 1)[-1] for line in deprecations] == [
                "--taint-unhealthy is deprecated (since 2026-12-03): give --unhealthy-devices publish instead"]
        else:
            assert deprecations == []
    finally:
        d.stop()


@pytest.mark.parametrize(("env", "said"), [
    ({"TAINT_UNHEALTHY": "true"},
     "TAINT_UNHEALTHY is deprecated (since 2026-12-03): give UNHEALTHY_DEVICES=taint instead"),
    ({"TAINT_UNHEALTHY": "true", "UNHEALTHY_DEVICES": "taint"},
     "TAINT_UNHEALTHY is deprecated (since 2026-12-03) and says what UNHEALTHY_DEVICES says: drop it"),
], ids=["alone", "beside the newer variable"])
def test_the_older_variable_is_named_deprecated_with_what_to_do_instead(short_tmp, env, said):
    d = DaemonProcess(short_tmp / "old", env=env).start()
    try:
        assert said in d.log_text()
    finally:
        d.stop()


@pytest.mark.parametrize(("flags", "env", "said"), [
    (["--taint-unhealthy", "true", "--unhealthy-devices", "withdraw"], {},
     "--taint-unhealthy true and --unhealthy-devices withdraw disagree; give --unhealthy-devices only"),
    # The older variable left in a chart's extraEnv beside an explicit taint: the same value as the
    # default, so it was read as agreeing, and the older variable's publish won without a word.
    (["--unhealthy-devices", "taint"], {"TAINT_UNHEALTHY": "false"},
     "TAINT_UNHEALTHY false and --unhealthy-devices taint disagree; give --unhealthy-devices only"),
    ([], {"TAINT_UNHEALTHY": "false", "UNHEALTHY_DEVICES": "taint"},
     "TAINT_UNHEALTHY false and UNHEALTHY_DEVICES taint disagree; give UNHEALTHY_DEVICES only"),
], ids=["flags", "old variable, new flag", "both variables"])
def test_both_unhealthy_settings_at_odds_stop_start_up_in_one_line(short_tmp, flags, env, said):
    d = DaemonProcess(short_tmp / "odd", extra_args=flags, env=env)
    d.start(wait=False)
    assert d.wait_exit() == 2
    assert d.log_text().strip() == f"ascend-dra run: {said}"


def test_a_claim_prepared_on_a_device_reported_unhealthy_is_a_warning_naming_it(short_tmp):
    """Allocated before its device was tainted (or published as healthy): the Prepare succeeds, as
    the claim is the kubelet's to run, but the line says which device may fail its containers."""
    from tests.claimfiles import claim_object, write_claim

    d = DaemonProcess(short_tmp / "sa", extra_args=["--health-interval", "0.2"]).start()
    k = Kubelet(d)
    try:
        marks = d.root / "plugins" / DRIVER / "profiles" / "fake-health"
        marks.mkdir(parents=True)
        (marks / "npu-2-0").write_text("unhealthy\n")
        deadline = time.monotonic() + 15
        while "npu-2-0=unhealthy" not in d.log_text():
            assert time.monotonic() < deadline, d.log_text()
            time.sleep(0.1)
        sick = write_claim(d.root, claim_object("sick", results=[("npu", "npu-2-0")]))
        well = write_claim(d.root, claim_object("well", results=[("npu", "npu-1-0")]))
        for claim in (sick, well):
            assert not k.prepare(claim).claims[claim["metadata"]["uid"]].error
        lines = [line for line in d.log_text().splitlines() if "prepared claim" in line]
        [warned] = [line for line in lines if "reports unhealthy" in line]
        assert "default/sick" in warned and "unhealthy=npu-2-0" in warned and "WARNING" in warned, warned
        assert any("default/well" in line and "unhealthy" not in line for line in lines), lines
    finally:
        k.close()
        d.stop()
