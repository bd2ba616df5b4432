"""podman runs a container from the CDI specs the daemon writes, and the container sees the env,
the device nodes and the mounts; after Unprepare podman can no longer resolve the device."""

from __future__ import annotations

import json
import re

import pytest

from tests.claimfiles import claim_object, fake_config, write_claim
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

pytestmark = pytest.mark.container

KIND = f"k8s.{DRIVER}/npu"
SCRIPT = "env; ls -l {nodes}; cat /usr/local/Ascend/driver/version.info"


@pytest.fixture
def daemon(short_tmp):
    d = DaemonProcess(short_tmp / "sa", node="node-1").start()
    yield d
    d.stop()


@pytest.fixture
def kubelet(daemon):
    k = Kubelet(daemon)
    yield k
    k.close()


def prepare(kubelet: Kubelet, claim: dict) -> list[str]:
    """Prepare ``claim`` and return every CDI device ID of the reply, in order."""
    entry = kubelet.prepare(claim).claims[claim["metadata"]["uid"]]
    assert entry.error == ""
    return [cdi_id for device in entry.devices for cdi_id in device.cdi_device_ids]


def container_env(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", line))


def assert_dev_null_char_device(stdout: str, path: str) -> None:
    # busybox: "crw-rw-rw-    1 0        0           1,   3 Nov 29 14:06 /dev/davinci1"
    [line] = [line for line in stdout.splitlines() if line.endswith(f" {path}")]
    assert re.match(r"c[-rwx]{9}\s+\d+\s+\S+\s+\S+\s+1,\s+3\s", line), line


def test_container_gets_env_device_node_and_driver_mount(podman, daemon, kubelet):
    claim = write_claim(daemon.root, claim_object("one", results=[("npu", "npu-1-0")], configs=[
        fake_config(requests=["npu"], aicoreLimit=25, logLevel="error")]))
    uid = claim["metadata"]["uid"]
    ids = prepare(kubelet, claim)
    # the device's own, the one mounting its request's device metadata file (KEP-5304), the common one
    assert ids == [f"{KIND}={uid}-npu-1-0", f"{KIND}={uid}-metadata_npu", f"{KIND}=common"]

    done = podman.run(ids, SCRIPT.format(nodes="/dev/davinci1"), cdi_dir=daemon.cdi_dir,
                      label="podman run: one device")
    assert done.returncode == 0, done.stderr
    env = container_env(done.stdout)
    assert env["ASCEND_VISIBLE_DEVICES"] == "1"
    assert env["FAKE_NPU_AICORE_LIMIT"] == "25"
    assert env["ASCEND_GLOBAL_LOG_LEVEL"] == "3"
    assert env["ASCEND_DRA_NODE_NAME"] == "node-1"  # from the common spec
    assert env["ASCEND_DRA_DRIVER_NAME"] == DRIVER
    assert_dev_null_char_device(done.stdout, "/dev/davinci1")
    assert done.stdout.splitlines()[-1] == "Version=simulated"

    # The device metadata file, read-only where the protocol puts it for a claim named by the pod.
    path = f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/one/npu/{DRIVER}-metadata.json"
    read = podman.run(ids, f"cat {path}; (echo x >> {path}) 2>/dev/null && echo WRITABLE; true",
                      cdi_dir=daemon.cdi_dir, label="podman run: device metadata")
    assert read.returncode == 0, read.stderr
    assert "WRITABLE" not in read.stdout
    first = json.JSONDecoder().raw_decode(read.stdout.lstrip())[0]
    assert first["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
    assert [d["name"] for d in first["requests"][0]["devices"]] == ["npu-1-0"]


def test_two_devices_in_one_request_are_both_visible(podman, daemon, kubelet):
    claim = write_claim(daemon.root, claim_object("two", results=[("npu", "npu-0-0"), ("npu", "npu-2-0")]))
    uid = claim["metadata"]["uid"]
    ids = prepare(kubelet, claim)
    assert ids == [f"{KIND}={uid}-npu-0-0", f"{KIND}={uid}-metadata_npu", f"{KIND}=common", f"{KIND}={uid}-npu-2-0",
                   f"{KIND}=common"]

    # The kubelet passes every ID of every device (the common one twice); podman must take that.
    done = podman.run(ids, SCRIPT.format(nodes="/dev/davinci0 /dev/davinci2"), cdi_dir=daemon.cdi_dir,
                      label="podman run: two devices")
    assert done.returncode == 0, done.stderr
    env = container_env(done.stdout)
    assert env["ASCEND_VISIBLE_DEVICES"] == "0,2"
    assert env["ASCEND_DRA_NODE_NAME"] == "node-1"
    assert_dev_null_char_device(done.stdout, "/dev/davinci0")
    assert_dev_null_char_device(done.stdout, "/dev/davinci2")
    assert done.stdout.splitlines()[-1] == "Version=simulated"


def test_after_unprepare_podman_cannot_resolve_the_device(podman, daemon, kubelet):
    claim = write_claim(daemon.root, claim_object("gone", results=[("npu", "npu-3-0")]))
    uid = claim["metadata"]["uid"]
    ids = prepare(kubelet, claim)
    before = podman.run(ids, "ls /dev/davinci3", cdi_dir=daemon.cdi_dir, label="podman run: before unprepare")
    assert before.returncode == 0, before.stderr

    assert kubelet.unprepare(claim).claims[uid].error == ""
    after = podman.run(ids, "true", cdi_dir=daemon.cdi_dir, label="podman run: after unprepare (refused)")
    assert after.returncode != 0
    assert "unresolvable CDI devices" in after.stderr
    assert f"{KIND}={uid}-npu-3-0" in after.stderr
    # podman 4.3's CDI library names every requested device in this error, resolvable or not; the
    # common device does still resolve on its own (its spec stays while the daemon runs).
    common = podman.run([f"{KIND}=common"], "true", cdi_dir=daemon.cdi_dir, label="podman run: common only")
    assert common.returncode == 0, common.stderr
