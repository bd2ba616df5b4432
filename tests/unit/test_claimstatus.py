"""Claim device status (KEP-4817): the entries built from what Prepare did, and the apply body."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ascend_dra.claimstatus import MAX_DATA_BYTES, PreparedClaim, apply_body, cdi_env, device_entries
from ascend_dra.model import PreparedDevice

DRIVER = "ascend.project-hami.io"
KIND = f"k8s.{DRIVER}/npu"


def _spec(path: Path, devices: dict[str, list[str]]) -> Path:
    path.write_text(yaml.safe_dump({"cdiVersion": "0.5.0", "kind": KIND, "devices": [
        {"name": name, "containerEdits": {"env": env}} for name, env in devices.items()]}))
    return path


def test_entries_carry_physical_id_quota_env_and_vnpu_id(tmp_path):
    spec = _spec(tmp_path / "claim.yaml", {
        "uid-1-npu-0-0": ["ASCEND_VISIBLE_DEVICES=3", "NPU_MEM_QUOTA=4096", "NPU_PRIORITY=50", "LD_PRELOAD=/x.so"],
        "uid-1-npu-1-0": ["ASCEND_VISIBLE_DEVICES=5"]})
    claim = PreparedClaim(
        "ns", "c", "uid-1",
        (PreparedDevice(("req",), "node-1", "npu-0-0", (f"{KIND}=common", f"{KIND}=uid-1-npu-0-0"), "4d0c"),
         PreparedDevice(("req",), "node-1", "npu-1-0", (f"{KIND}=uid-1-npu-1-0",))),
        attributes={"npu-0-0": {"physicalID": 3}, "npu-1-0": {"physicalID": 5}},
        spec_files=(spec, tmp_path / "gone.yaml"),
        side_effects={"npu-310p": {"devices": {"npu-1-0": {"vnpuID": 116}}}})
    assert device_entries(DRIVER, claim, cdi_env(claim.spec_files)) == [
        {"driver": DRIVER, "pool": "node-1", "device": "npu-0-0", "shareID": "4d0c",
         "data": {"physicalID": 3, "env": {"ASCEND_VISIBLE_DEVICES": "3", "NPU_MEM_QUOTA": "4096",
                                           "NPU_PRIORITY": "50"}}},
        {"driver": DRIVER, "pool": "node-1", "device": "npu-1-0",
         "data": {"physicalID": 5, "env": {"ASCEND_VISIBLE_DEVICES": "5"}, "vnpuID": 116}},
    ]


def test_data_over_10_kib_drops_the_env_and_keeps_the_ids():
    claim = PreparedClaim("ns", "c", "u", (PreparedDevice(("r",), "p", "d", (f"{KIND}=u-d",)),),
                          attributes={"d": {"physicalID": 0}})
    [entry] = device_entries(DRIVER, claim, {f"{KIND}=u-d": {f"NPU_X{i}": "v" * 100 for i in range(200)}})
    assert entry["data"] == {"physicalID": 0}
    assert len(json.dumps(entry["data"])) <= MAX_DATA_BYTES


def test_a_device_with_nothing_known_has_no_data():
    claim = PreparedClaim("ns", "c", "u", (PreparedDevice(("r",), "p", "d", ()),))
    assert device_entries(DRIVER, claim, {}) == [{"driver": DRIVER, "pool": "p", "device": "d"}]


def test_the_apply_body_names_the_claim_and_its_uid_as_a_precondition():
    assert apply_body("ns", "c", "u", []) == {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u"}, "status": {"devices": []}}
