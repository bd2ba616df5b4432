"""The daemon over real unix sockets, with grpcio (C-core) playing the kubelet, on a real filesystem."""

from __future__ import annotations

import os
import socket
import stat
import time
import uuid
from pathlib import Path

import grpc
import pytest
import yaml

from tests.claimfiles import claim_object, fake_config, write_claim
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

KIND = f"k8s.{DRIVER}/npu"


def spec_path(daemon: DaemonProcess, uid: str):
    return daemon.cdi_dir / f"k8s.{DRIVER}-npu_{uid}.yaml"


@pytest.fixture
def daemon(short_tmp):
    d = DaemonProcess(short_tmp / "sa").start()
    yield d
    d.stop()


@pytest.fixture
def kubelet(daemon):
    k = Kubelet(daemon)
    yield k
    k.close()


def test_registration_answers_like_the_go_helper_and_keeps_the_status(daemon, kubelet):
    info = kubelet.get_info()
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(daemon.dra_socket)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                                             "v1alpha1.DRAResourceHealth"]
    from tests.kubelet_pb.pluginregistration import api_pb2 as reg_pb2

    kubelet.registration.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
    with pytest.raises(grpc.RpcError) as failed:
        kubelet.registration.NotifyRegistrationStatus(
            reg_pb2.RegistrationStatus(plugin_registered=False, error="version skew"), timeout=5)
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    assert "registration failed: version skew" in failed.value.details()
    assert "the kubelet refused the registration" in daemon.log_text()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_sockets_are_owner_only_and_only_our_own_directory_is_narrowed(daemon):
    """The registration socket's directory is the kubelet's plugins_registry, shared by every CSI
    and DRA plugin of the node: it was chmodded to 0750 at each start, shutting out whatever reaches
    it through "other". It is made as the kubelet makes it (0755) and never narrowed."""
    for sock in (daemon.registration_socket, daemon.dra_socket):
        mode = sock.stat().st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(daemon.dra_socket.parent.stat().st_mode) == 0o750
    assert stat.S_IMODE(daemon.registration_socket.parent.stat().st_mode) == 0o755 & ~_umask()
    daemon.registration_socket.parent.chmod(0o775)  # as another plugin's installer may have left it
    daemon.stop()
    daemon.start()
    assert stat.S_IMODE(daemon.registration_socket.parent.stat().st_mode) == 0o775


@pytest.mark.parametrize("api", ["v1", "v1beta1"])
def test_prepare_writes_cdi_spec_and_unprepare_removes_it(daemon, kubelet, api):
    claim = write_claim(daemon.root, claim_object("c1", node="node-1", results=[("npu", "npu-1-0")],
                                                   configs=[fake_config(requests=["npu"], aicoreLimit=25)]))
    uid = claim["metadata"]["uid"]
    reply = kubelet.prepare(claim, api=api)
    assert list(reply.claims) == [uid]
    entry = reply.claims[uid]
    assert entry.error == ""
    [device] = entry.devices
    assert list(device.request_names) == ["npu"]
    assert (device.pool_name, device.device_name) == ("node-1", "npu-1-0")
    # the device's own, its request's device metadata file (KEP-5304, test_device_metadata.py), the common one
    assert list(device.cdi_device_ids) == [f"{KIND}={uid}-npu-1-0", f"{KIND}={uid}-metadata_npu", f"{KIND}=common"]
    spec = yaml.safe_load(spec_path(daemon, uid).read_text())
    assert spec["cdiVersion"] == "0.5.0"  # hostPath and a digit-leading name need 0.5.0
    assert spec["kind"] == KIND
    [cdi_device, metadata] = spec["devices"]
    assert metadata["name"] == f"{uid}-metadata_npu"
    assert cdi_device["name"] == f"{uid}-npu-1-0"
    assert cdi_device["containerEdits"]["env"] == [
        "ASCEND_VISIBLE_DEVICES=1", "FAKE_NPU_AICORE_LIMIT=25", "ASCEND_GLOBAL_LOG_LEVEL=1"]
    assert cdi_device["containerEdits"]["deviceNodes"] == [{"path": "/dev/davinci1", "hostPath": "/dev/null"}]
    common = yaml.safe_load((daemon.cdi_dir / f"k8s.{DRIVER}-npu_common.yaml").read_text())
    assert common["devices"][0]["containerEdits"]["env"] == ["ASCEND_DRA_NODE_NAME=node-1",
                                                             f"ASCEND_DRA_DRIVER_NAME={DRIVER}"]

    reply = kubelet.unprepare(claim, api=api)
    assert reply.claims[uid].error == ""
    assert not spec_path(daemon, uid).exists()


def test_prepare_and_unprepare_are_idempotent(daemon, kubelet):
    claim = write_claim(daemon.root, claim_object("idem", results=[("npu", "npu-0-0")]))
    uid = claim["metadata"]["uid"]
    first = kubelet.prepare(claim)
    second = kubelet.prepare(claim)
    assert first == second
    assert first.claims[uid].error == ""
    records = daemon.records()
    assert list(records) == [uid]
    assert records[uid]["state"] == "PrepareCompleted"
    for _ in range(2):
        assert kubelet.unprepare(claim).claims[uid].error == ""
    unknown = claim_object("never-prepared")
    assert kubelet.unprepare(unknown).claims[unknown["metadata"]["uid"]].error == ""


def test_a_second_claim_on_an_exclusive_device_is_refused(daemon, kubelet):
    first = write_claim(daemon.root, claim_object("first", results=[("npu", "npu-2-0")]))
    second = write_claim(daemon.root, claim_object("second", results=[("npu", "npu-2-0")]))
    assert kubelet.prepare(first).claims[first["metadata"]["uid"]].error == ""
    error = kubelet.prepare(second).claims[second["metadata"]["uid"]].error
    assert error == (f"ResourceClaim default/second: device npu-2-0 is already prepared for ResourceClaim "
                     f"default/first (uid {first['metadata']['uid']}) and does not allow multiple allocations")
    assert not spec_path(daemon, second["metadata"]["uid"]).exists()
    kubelet.unprepare(first)
    assert kubelet.prepare(second).claims[second["metadata"]["uid"]].error == ""


def test_subrequest_results_report_the_base_request_and_take_its_config(daemon, kubelet):
    claim = write_claim(daemon.root, claim_object(
        "sub", results=[("npu/small", "npu-3-0")], configs=[fake_config(requests=["npu"], aicoreLimit=10)]))
    uid = claim["metadata"]["uid"]
    [device] = kubelet.prepare(claim).claims[uid].devices
    assert list(device.request_names) == ["npu"]
    spec = yaml.safe_load(spec_path(daemon, uid).read_text())
    assert "FAKE_NPU_AICORE_LIMIT=10" in spec["devices"][0]["containerEdits"]["env"]


def test_claim_config_wins_over_class_config(daemon, kubelet):
    claim = write_claim(daemon.root, claim_object("prec", results=[("npu", "npu-0-0")], configs=[
        fake_config(source="FromClaim", aicoreLimit=30),
        fake_config(source="FromClass", aicoreLimit=90, logLevel="debug"),
    ]))
    uid = claim["metadata"]["uid"]
    assert kubelet.prepare(claim).claims[uid].error == ""
    env = yaml.safe_load(spec_path(daemon, uid).read_text())["devices"][0]["containerEdits"]["env"]
    assert "FAKE_NPU_AICORE_LIMIT=30" in env
    assert "ASCEND_GLOBAL_LOG_LEVEL=1" in env  # the claim's config is taken whole, not merged


def test_one_bad_claim_never_harms_the_others(daemon, kubelet):
    good = write_claim(daemon.root, claim_object("good", results=[("npu", "npu-0-0")]))
    missing = claim_object("missing-file")
    unallocated = write_claim(daemon.root, claim_object("unallocated", allocated=False))
    unknown_device = write_claim(daemon.root, claim_object("unknown-device", results=[("npu", "npu-99-0")]))
    other_pool = write_claim(daemon.root, claim_object("other-pool", node="node-2", results=[("npu", "npu-1-0")]))
    bad_kind = write_claim(daemon.root, claim_object("bad-kind", results=[("npu", "npu-1-0")], configs=[
        {"source": "FromClaim", "requests": [], "opaque": {"driver": DRIVER, "parameters": {
            "apiVersion": f"{DRIVER}/v1alpha1", "kind": "TurboConfig"}}}]))
    unknown_field = write_claim(daemon.root, claim_object("unknown-field", results=[("npu", "npu-1-0")],
                                                          configs=[fake_config(turbo=True)]))
    out_of_range = write_claim(daemon.root, claim_object("out-of-range", results=[("npu", "npu-1-0")],
                                                         configs=[fake_config(aicoreLimit=101)]))
    other_driver = write_claim(daemon.root, claim_object("other-driver", driver="gpu.example.com"))
    unsafe = claim_object("unsafe", uid="../../etc/passwd")
    replaced = write_claim(daemon.root, claim_object("replaced"))
    replaced_ref = {**replaced, "metadata": {**replaced["metadata"], "uid": str(uuid.uuid4())}}
    unparsable = claim_object("unparsable")
    path = daemon.root / "claims" / "default" / "unparsable.yaml"
    path.write_text("metadata: [unclosed\n")

    claims = [good, missing, unallocated, unknown_device, other_pool, bad_kind, unknown_field, out_of_range,
              other_driver, unsafe, replaced_ref, unparsable]
    reply = kubelet.prepare(*claims)
    errors = {c["metadata"]["name"]: reply.claims[c["metadata"]["uid"]].error for c in claims}
    assert set(reply.claims) == {c["metadata"]["uid"] for c in claims}
    assert errors["good"] == ""
    root = daemon.root
    assert errors["missing-file"] == (f"ResourceClaim default/missing-file: claim file "
                                      f"{root}/claims/default/missing-file.yaml does not exist")
    assert errors["unallocated"] == "ResourceClaim default/unallocated is not allocated (status.allocation is empty)"
    assert errors["unknown-device"] == ("ResourceClaim default/unknown-device: device node-1/npu-99-0 was never "
                                        f"published by {DRIVER} on node node-1")
    assert errors["other-pool"] == ("ResourceClaim default/other-pool: device node-2/npu-1-0 was never "
                                    f"published by {DRIVER} on node node-1")
    assert errors["bad-kind"] == ("ResourceClaim default/bad-kind: invalid opaque config: "
                                  "status.allocation.devices.config[0].opaque.parameters.kind: "
                                  "'TurboConfig' is not one of FakeConfig")
    assert errors["unknown-field"] == ("ResourceClaim default/unknown-field: invalid opaque config: "
                                       "status.allocation.devices.config[0].opaque.parameters: unknown field(s) "
                                       "turbo; allowed fields: aicoreLimit, logLevel")
    assert errors["out-of-range"] == ("ResourceClaim default/out-of-range: invalid opaque config: "
                                      "status.allocation.devices.config[0].opaque.parameters.aicoreLimit: "
                                      "101 is outside the allowed range 1..100 (percent)")
    assert errors["other-driver"] == f"ResourceClaim default/other-driver has no allocation results for driver {DRIVER}"
    assert errors["unsafe"] == ("claim uid '../../etc/passwd' must be letters, digits, '-' or '.' "
                                "(no '/', '..', '_' or NUL), at most 253 characters, and not 'common'")
    assert errors["replaced"] == (f"ResourceClaim default/replaced: uid {replaced_ref['metadata']['uid']} was "
                                  f"requested but the claim has uid {replaced['metadata']['uid']} (it got replaced)")
    assert errors["unparsable"].startswith(f"ResourceClaim default/unparsable: {path} is not valid YAML")
    assert sorted(p.name for p in daemon.cdi_dir.iterdir()) == sorted(
        [f"k8s.{DRIVER}-npu_common.yaml", spec_path(daemon, good["metadata"]["uid"]).name])


@pytest.mark.parametrize("bad", ["a/b", "..", "x\x00y", "u" * 254], ids=["slash", "dotdot", "nul", "too-long"])
def test_unsafe_uids_never_reach_a_path(daemon, kubelet, bad):
    claim = claim_object("unsafe", uid=bad)
    assert "must be letters, digits" in kubelet.prepare(claim).claims[bad].error
    assert "must be letters, digits" in kubelet.unprepare(claim).claims[bad].error


def test_unsafe_names_and_namespaces_are_refused(daemon, kubelet):
    long_name = claim_object("n" * 254)
    bad_ns = claim_object("ok", namespace="../etc")
    reply = kubelet.prepare(long_name, bad_ns)
    assert "is not a DNS subdomain" in reply.claims[long_name["metadata"]["uid"]].error
    assert "is not a DNS label" in reply.claims[bad_ns["metadata"]["uid"]].error


def test_share_id_reaches_v1_only(daemon, kubelet):
    share = str(uuid.uuid4())
    claim = write_claim(daemon.root, claim_object("shared", results=[
        {"request": "npu", "driver": DRIVER, "pool": "node-1", "device": "npu-0-0", "shareID": share}]))
    uid = claim["metadata"]["uid"]
    [device] = kubelet.prepare(claim, api="v1").claims[uid].devices
    assert device.HasField("share_id") and device.share_id == share
    assert device.cdi_device_ids[0] == f"{KIND}={uid}-npu-0-0-{share}"
    [beta] = kubelet.prepare(claim, api="v1beta1").claims[uid].devices
    assert beta.device_name == "npu-0-0"


def test_health_stream_lists_every_device(daemon, kubelet):
    message = kubelet.first_health()
    assert [(d.device.pool_name, d.device.device_name, d.health) for d in message.devices] == [
        ("node-1", f"npu-{i}-0", 1) for i in range(4)]
    assert all(d.health_check_timeout_seconds == 30 for d in message.devices)


def test_stale_socket_from_a_crash_is_replaced(short_tmp):
    d = DaemonProcess(short_tmp / "sa")
    d.registration_socket.parent.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(d.registration_socket))
    stale.close()  # the file stays, nobody listens: what a kill -9 leaves
    d.start()
    try:
        k = Kubelet(d)
        assert k.get_info().name == DRIVER
        k.close()
    finally:
        d.stop()
    assert not d.registration_socket.exists() and not d.dra_socket.exists()


def test_orphan_claim_specs_are_removed_at_start(short_tmp):
    d = DaemonProcess(short_tmp / "sa")
    d.cdi_dir.mkdir(parents=True)
    orphan = d.cdi_dir / f"k8s.{DRIVER}-npu_0a1b2c3d-0000-4000-8000-000000000000.yaml"
    orphan.write_text("cdiVersion: 0.5.0\nkind: k8s.x/npu\ndevices: []\n")
    foreign = d.cdi_dir / "k8s.other.example.com-gpu_0a1b2c3d.yaml"
    foreign.write_text("cdiVersion: 0.5.0\n")
    d.start()
    d.stop()
    assert not orphan.exists()
    assert foreign.exists()  # another driver's spec is not ours to remove


def test_truncated_checkpoint_stops_start_up_and_is_kept(short_tmp):
    d = DaemonProcess(short_tmp / "sa").start()
    claim = write_claim(d.root, claim_object("kept"))
    k = Kubelet(d)
    k.prepare(claim)
    k.close()
    d.stop()
    blob = d.checkpoint.read_bytes()
    d.checkpoint.write_bytes(blob[: len(blob) // 2])
    d.start(wait=False)
    assert d.wait_exit() == 1
    log = d.log_text()
    assert f"checkpoint {d.checkpoint} is unreadable: not valid JSON" in log
    assert "move it away" in log
    assert d.checkpoint.read_bytes() == blob[: len(blob) // 2]


def test_bit_flipped_checkpoint_fails_its_checksum(short_tmp):
    d = DaemonProcess(short_tmp / "sa").start()
    claim = write_claim(d.root, claim_object("flipped"))
    k = Kubelet(d)
    k.prepare(claim)
    k.close()
    d.stop()
    text = d.checkpoint.read_text().replace('"PrepareCompleted"', '"PrepareCompletes"')
    d.checkpoint.write_text(text)
    d.start(wait=False)
    assert d.wait_exit() == 1
    assert "checksum mismatch" in d.log_text()


def test_reboot_recreates_cdi_specs_when_the_kubelet_prepares_again(short_tmp):
    d = DaemonProcess(short_tmp / "sa").start()
    claim = write_claim(d.root, claim_object("survivor", results=[("npu", "npu-2-0")]))
    uid = claim["metadata"]["uid"]
    k = Kubelet(d)
    before = k.prepare(claim)
    k.close()
    d.stop()
    # A reboot: a new boot id, and /var/run/cdi (tmpfs) is empty.
    d.boot_id_file.write_text("boot-2\n")
    for f in d.cdi_dir.iterdir():
        f.unlink()
    d.start()
    assert (d.cdi_dir / f"k8s.{DRIVER}-npu_common.yaml").exists()
    k = Kubelet(d)
    after = k.prepare(claim)
    k.close()
    assert after == before
    assert spec_path(d, uid).exists()
    assert yaml.safe_load(d.checkpoint.read_text())["data"]["boot_id"] == "boot-2"  # start-up compacted
    assert d.records()[uid]["boot_id"] == "boot-2"
    d.stop()


def test_a_spec_lost_in_the_same_boot_comes_back_without_a_prepare(short_tmp):
    """While the kubelet runs it never prepares a prepared claim again, yet each container it
    (re)starts resolves the claim's CDI ids (kubernetes/kubernetes#141433): a spec removed while the
    daemon was down, or while it ran, must come back by itself."""
    d = DaemonProcess(short_tmp / "sa", extra_args=["--health-interval", "0.2"]).start()
    claim = write_claim(d.root, claim_object("kept", results=[("npu", "npu-1-0")]))
    uid = claim["metadata"]["uid"]
    k = Kubelet(d)
    k.prepare(claim)
    k.close()
    written = spec_path(d, uid).read_bytes()
    d.stop()
    spec_path(d, uid).unlink()
    d.start()
    assert wait_for(lambda: spec_path(d, uid).exists()), d.log_path.read_text()[-2000:]
    assert spec_path(d, uid).read_bytes() == written
    spec_path(d, uid).unlink()  # and while it runs
    assert wait_for(lambda: spec_path(d, uid).exists()), d.log_path.read_text()[-2000:]
    assert spec_path(d, uid).read_bytes() == written
    d.stop()


def wait_for(condition, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_full_cdi_disk_fails_that_claim_and_the_daemon_lives(small_cdi):
    d = DaemonProcess(small_cdi).start()
    k = Kubelet(d)
    filler = d.cdi_dir / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 1024):
            pass
    except OSError as exc:
        assert exc.errno == 28  # ENOSPC: the CDI file system is full now
    finally:
        os.close(fd)
    claim = write_claim(d.root, claim_object("no-space"))
    uid = claim["metadata"]["uid"]
    error = k.prepare(claim).claims[uid].error
    assert error.startswith("ResourceClaim default/no-space: No space left on device")
    assert k.get_info().name == DRIVER
    assert uid not in d.records()
    filler.unlink()
    assert k.prepare(claim).claims[uid].error == ""
    k.close()
    d.stop()


def test_read_only_cdi_dir_fails_that_claim_and_the_daemon_lives(small_cdi):
    d = DaemonProcess(small_cdi).start()
    k = Kubelet(d)
    assert os.system(f"mount -o remount,ro {d.cdi_dir}") == 0
    claim = write_claim(d.root, claim_object("read-only"))
    uid = claim["metadata"]["uid"]
    assert k.prepare(claim).claims[uid].error.startswith(
        "ResourceClaim default/read-only: Read-only file system")
    assert k.get_info().name == DRIVER
    os.system(f"mount -o remount,rw {d.cdi_dir}")
    assert k.prepare(claim).claims[uid].error == ""
    k.close()
    d.stop()


def test_a_relative_standalone_dir_gives_absolute_paths_in_specs_and_plugin_info(short_tmp):
    d = DaemonProcess(short_tmp / "rel", cwd=short_tmp).start()
    k = Kubelet(d)
    try:
        assert k.get_info().endpoint == str(d.dra_socket)
        claim = write_claim(d.root, claim_object("rel"))
        assert k.prepare(claim).claims[claim["metadata"]["uid"]].error == ""
        spec = yaml.safe_load(spec_path(d, claim["metadata"]["uid"]).read_text())
        mount = spec["devices"][0]["containerEdits"]["mounts"][0]
        assert mount["hostPath"] == f"{d.root}/plugins/{DRIVER}/profiles/fake-driver"
    finally:
        k.close()
        d.stop()


def test_concurrent_claims_on_one_exclusive_device_exactly_one_wins(daemon):
    from concurrent.futures import ThreadPoolExecutor

    claims = [write_claim(daemon.root, claim_object(f"race-{i}", results=[("npu", "npu-1-0")])) for i in range(16)]
    kubelets = [Kubelet(daemon) for _ in range(4)]  # several connections, like several pod workers
    try:
        with ThreadPoolExecutor(16) as pool:
            replies = list(pool.map(lambda i: kubelets[i % 4].prepare(claims[i]), range(16)))
    finally:
        for k in kubelets:
            k.close()
    errors = [r.claims[c["metadata"]["uid"]].error for r, c in zip(replies, claims, strict=True)]
    assert errors.count("") == 1
    assert all("is already prepared for ResourceClaim" in e for e in errors if e)
    winner = claims[errors.index("")]["metadata"]["uid"]
    assert list(daemon.records()) == [winner]
    assert [p.name for p in daemon.cdi_dir.glob("*_*-*.yaml")] == [spec_path(daemon, winner).name]


def test_the_same_claim_prepared_concurrently_is_prepared_once(daemon):
    from concurrent.futures import ThreadPoolExecutor

    claim = write_claim(daemon.root, claim_object("retried", results=[("npu", "npu-2-0")]))
    uid = claim["metadata"]["uid"]
    kubelets = [Kubelet(daemon) for _ in range(8)]
    try:
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda k: k.prepare(claim), kubelets))
    finally:
        for k in kubelets:
            k.close()
    assert all(r.claims[uid].error == "" for r in replies)
    assert all(r == replies[0] for r in replies)
    assert list(daemon.records()) == [uid]


def test_a_second_daemon_on_the_same_directory_waits_and_never_touches_the_first_ones_sockets(short_tmp):
    import time

    first = DaemonProcess(short_tmp / "sa").start()
    second = DaemonProcess(short_tmp / "sa")
    second.log_path = short_tmp / "second.log"
    inode = first.registration_socket.stat().st_ino
    second.start(wait=False)
    try:
        deadline = time.monotonic() + 20
        while "waiting for it to stop" not in second.log_text():
            assert time.monotonic() < deadline, second.log_text()
            time.sleep(0.05)
        assert first.registration_socket.stat().st_ino == inode  # not replaced
        k = Kubelet(first)
        assert k.get_info().name == DRIVER
        k.close()
        first.stop()
        second.wait_serving()
        assert "took over the plugin directory" in second.log_text()
        # The first daemon's shutdown did not remove the sockets its successor serves on.
        k = Kubelet(second)
        assert k.get_info().name == DRIVER
        k.close()
    finally:
        first.stop()
        second.stop()


def test_64_calls_in_flight_use_at_most_the_worker_thread_limit(short_tmp):
    """anyio's default allows 40 worker threads, each with a malloc arena of its own: 64 Unprepares in
    flight started them all. The daemon caps blocking work at WORKER_THREADS threads."""
    from concurrent.futures import ThreadPoolExecutor

    from ascend_dra.node.daemon import WORKER_THREADS

    d = DaemonProcess(short_tmp / "threads", fake_devices=64).start()
    k = Kubelet(d)
    try:
        def threads() -> int:
            status = Path(f"/proc/{d.proc.pid}/status").read_text()
            return int(status.split("Threads:")[1].split()[0])

        idle = threads()
        claims = [claim_object(f"t-{i}", node="node-1", results=[("npu", f"npu-{i}-0")]) for i in range(64)]
        for c in claims:
            write_claim(d.root, c)
        most = 0
        with ThreadPoolExecutor(64) as pool:
            for _ in range(2):
                for call in (k.prepare, k.unprepare):
                    futures = [pool.submit(lambda c=c, call=call: call(c).claims[c["metadata"]["uid"]].error)
                               for c in claims]
                    while not all(f.done() for f in futures):
                        most = max(most, threads())
                    assert [f.result() for f in futures] == [""] * 64
        assert most <= idle + WORKER_THREADS
    finally:
        k.close()
        d.stop()


def test_one_log_line_per_prepared_and_unprepared_claim_with_devices_and_duration(short_tmp):
    import re

    d = DaemonProcess(short_tmp / "sa").start()
    k = Kubelet(d)
    try:
        good = write_claim(d.root, claim_object("good", results=[("npu", "npu-0-0"), ("npu", "npu-1-0")]))
        k.prepare(good, claim_object("missing"))
        k.unprepare(good)
    finally:
        k.close()
        d.stop()
    uid = good["metadata"]["uid"]
    log = d.log_text()
    prepared = re.findall(r"INFO +ascend_dra\.kubelet\.dra: prepared claim (.*)", log)
    assert prepared == [f"claim=default/good claim_uid={uid} devices=node-1/npu-0-0,node-1/npu-1-0 "
                        f"duration_ms={prepared[0].rsplit('=', 1)[1]}"]
    assert float(prepared[0].rsplit("=", 1)[1]) > 0
    assert re.search(rf"INFO +ascend_dra\.kubelet\.dra: unprepared claim claim=default/good claim_uid={uid} "
                     r"duration_ms=[0-9.]+$", log, re.M)
    assert re.search(r"WARNING +ascend_dra\.kubelet\.dra: prepare failed claim=default/missing claim_uid=\S+ "
                     r"duration_ms=[0-9.]+ error=", log)
