"""Device metadata for pods (KEP-5304) from a real daemon over its unix socket, in standalone mode: the
Prepare answer names the metadata CDI device on each request's first device, the claim's spec mounts
the file read-only at the protocol's path, the file parses and names the devices with their attributes
(a HAMivNPUCore share with its quota), a removed file comes back, Unprepare removes it, and
``--device-metadata false`` gives none. The crash points are in test_crash.py (every point of
Prepare and Unprepare checks the files too) and the disk fault in test_disk_faults.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from ascend_dra.profiles.ascend.sim import labnode
from tests.claimfiles import claim_object, write_claim
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet
from tests.metadatastream import newest_object

ROOT = "/var/run/kubernetes.io/dra-device-attributes"


def uid(claim: dict[str, Any]) -> str:
    return claim["metadata"]["uid"]


def host_file(d: DaemonProcess, claim: dict[str, Any], request: str) -> Path:
    return d.root / "plugins" / DRIVER / "device-metadata" / uid(claim) / request / "metadata.json"


def stream(path: Path) -> list[dict[str, Any]]:
    """The file's first (v1beta1) object, as a list of one, once the stream is checked."""
    return [newest_object(path.read_text())]


def mounts_of(d: DaemonProcess, cdi_id: str) -> list[dict[str, Any]]:
    """The mounts of the CDI device ``cdi_id`` (``vendor/class=name``), found in the spec files on disk."""
    kind, _, name = cdi_id.partition("=")
    for path in d.cdi_dir.glob("*.yaml"):
        spec = yaml.safe_load(path.read_text())
        if spec["kind"] == kind:
            for device in spec["devices"]:
                if device["name"] == name:
                    return list(device["containerEdits"]["mounts"])
    raise AssertionError(f"no CDI device {cdi_id} in {d.cdi_dir}")


def test_prepare_answers_the_metadata_device_and_its_file_names_the_devices(short_tmp):
    d = DaemonProcess(short_tmp / "sa", extra_args=["--health-interval", "0.3"]).start()
    k = Kubelet(d)
    named = write_claim(d.root, claim_object("named", results=[("npu/small", "npu-1-0"), ("npu/small", "npu-2-0")]))
    template = claim_object("pod-0-npu-8xk2q", results=[("npu", "npu-3-0")])
    template["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "npu"}
    write_claim(d.root, template)
    try:
        reply = k.prepare(named, template)
        kind = f"k8s.{DRIVER}/npu"
        first, second = reply.claims[uid(named)].devices
        assert reply.claims[uid(named)].error == ""
        assert list(first.cdi_device_ids) == [f"{kind}={uid(named)}-npu-1-0", f"{kind}={uid(named)}-metadata_npu",
                                              f"{kind}=common"]
        assert list(second.cdi_device_ids) == [f"{kind}={uid(named)}-npu-2-0", f"{kind}=common"]
        assert mounts_of(d, first.cdi_device_ids[1]) == [{
            "hostPath": str(host_file(d, named, "npu")),
            "containerPath": f"{ROOT}/resourceclaims/named/npu/{DRIVER}-metadata.json",
            "options": ["ro", "nosuid", "nodev", "bind"]}]
        [doc] = stream(host_file(d, named, "npu"))
        assert (doc["kind"], doc["apiVersion"]) == ("DeviceMetadata", "metadata.resource.k8s.io/v1beta1")
        assert doc["metadata"] == {"name": "named", "namespace": "default", "uid": uid(named), "generation": 1}
        [request] = doc["requests"]
        assert request["name"] == "npu/small"
        assert [(dev["driver"], dev["pool"], dev["name"], dev["attributes"]["index"]) for dev in request["devices"]] \
            == [(DRIVER, "node-1", "npu-1-0", {"int": 1}), (DRIVER, "node-1", "npu-2-0", {"int": 2})]

        [device] = reply.claims[uid(template)].devices
        [mount] = mounts_of(d, device.cdi_device_ids[1])
        assert mount["containerPath"] == f"{ROOT}/resourceclaimtemplates/npu/npu/{DRIVER}-metadata.json"
        [doc] = stream(host_file(d, template, "npu"))
        assert doc["podClaimName"] == "npu" and doc["requests"][0]["devices"][0]["name"] == "npu-3-0"

        # removed by hand: the repair loop (every --health-interval) writes it again
        written = host_file(d, named, "npu").read_bytes()
        host_file(d, named, "npu").unlink()
        deadline = time.monotonic() + 15
        # logged once the checkpoint says so, after the file; naming the file that was missing, not the spec
        logged = (f"re-created the files of a prepared claim claim_uid={uid(named)} rebooted=False "
                  f"missing=['{host_file(d, named, 'npu')}']")
        while not (host_file(d, named, "npu").exists() and logged in d.log_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host_file(d, named, "npu").read_bytes() == written
        assert logged in d.log_text()

        for claim in (named, template):
            assert k.unprepare(claim).claims[uid(claim)].error == ""
            assert not host_file(d, claim, "npu").parent.parent.exists()
            assert not list(d.cdi_dir.glob(f"*_{uid(claim)}.yaml"))
    finally:
        k.close()
        d.stop()


def test_a_share_of_hami_vnpu_core_reads_its_quota_and_its_chip(short_tmp):
    node = labnode.build(short_tmp / "lab")
    d = DaemonProcess(short_tmp / "sa", node="aio-node74-arm", profiles="HAMivNPUCore",
                      extra_args=node.flags()).start()
    k = Kubelet(d)
    result = {"request": "npu", "driver": DRIVER, "pool": "aio-node74-arm", "device": "npu-1-0", "shareID": "s-1",
              "consumedCapacity": {"cores": "30", "memory": "8Gi", "containers": "1"}}
    claim = write_claim(d.root, claim_object("share", node="aio-node74-arm", results=[result]))
    try:
        assert k.prepare(claim).claims[uid(claim)].error == ""
        [doc] = stream(host_file(d, claim, "npu"))
        attributes = doc["requests"][0]["devices"][0]["attributes"]
        assert attributes["memoryQuotaMiB"] == {"int": 8192}
        assert attributes["coresQuotaPercent"] == {"int": 30}
        assert attributes["index"] == {"int": 1}  # the logic ID, as published
        assert attributes["physicalID"]["int"] >= 0
        assert attributes["type"] == {"string": "HAMivNPUCore"}
        assert k.unprepare(claim).claims[uid(claim)].error == ""
    finally:
        k.close()
        d.stop()


def test_with_device_metadata_off_no_file_and_no_id(short_tmp):
    d = DaemonProcess(short_tmp / "sa", extra_args=["--device-metadata", "false"]).start()
    k = Kubelet(d)
    claim = write_claim(d.root, claim_object("plain"))
    try:
        [device] = k.prepare(claim).claims[uid(claim)].devices
        assert [i.rpartition("=")[2] for i in device.cdi_device_ids] == [f"{uid(claim)}-npu-0-0", "common"]
        assert not (d.root / "plugins" / DRIVER / "device-metadata").exists()
    finally:
        k.close()
        d.stop()
