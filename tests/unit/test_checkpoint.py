"""checkpoint.py: versioned, checksummed JSON records of prepared claims, replaced atomically
(docs/architecture.md#durable-state)."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
from pathlib import Path

import attrs
import orjson
import pytest

from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.checkpoint import CheckpointCorrupt, CheckpointData, ClaimRecord, DeviceRecord

UID = "5d1e2c3a-0b4f-4e6a-9c7d-8e9f0a1b2c3d"
KIND = "k8s.ascend.project-hami.io/npu"

ADVICE = (
    "It records which claims are prepared on this node, so the daemon will not start over it. Inspect it, then "
    "either restore it from a backup or move it away (the kubelet will prepare the claims of running pods again; "
    "their CDI specs will be rewritten)"
)


def sample(boot_id: str = "boot-1", claims: int = 1) -> CheckpointData:
    records = {}
    for i in range(claims):
        uid = UID if i == 0 else f"{UID[:-4]}{i:04d}"
        records[uid] = ClaimRecord(
            uid=uid, namespace="team-a", name=f"claim-{i}", state="PrepareCompleted", boot_id=boot_id,
            devices=(
                DeviceRecord("npu", "node-1", "npu-0-0", (f"{KIND}=common", f"{KIND}={uid}-npu-0-0")),
                DeviceRecord("vnpu/small", "node-1", "npu-1-0", (f"{KIND}={uid}-npu-1-0-ab",), share_id="ab",
                             consumed_capacity={"memory": "8Gi", "cores": "25"}),
            ),
            cdi_specs=(f"k8s.ascend.project-hami.io-npu_{uid}.yaml",),
            side_effects={"hard-vnpu": {"vnpu_ids": [3, 4], "template": "vir02"}},
        )
    return CheckpointData(boot_id=boot_id, claims=records)


def checksum(data: object) -> str:
    """The documented checksum: sha256 over ``data`` serialized by orjson with sorted keys."""
    return "sha256:" + hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


def corrupt_message(path: Path, reason: str) -> str:
    return f"checkpoint {path} is unreadable: {reason}. {ADVICE}"


def test_round_trip(tmp_path):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    data = sample(claims=3)
    ckpt.save(path, data)
    assert ckpt.load(path) == data
    assert path.stat().st_mode & 0o777 == 0o600


def test_file_layout_is_kind_version_checksum_data(tmp_path):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample())
    doc = orjson.loads(path.read_bytes())
    assert sorted(doc) == ["checksum", "data", "kind", "version"]
    assert (doc["kind"], doc["version"]) == ("AscendDRACheckpoint", 1)
    assert doc["checksum"] == checksum(doc["data"])
    assert doc["data"]["claims"][UID]["state"] == "PrepareCompleted"


def test_missing_file_is_an_empty_checkpoint(tmp_path):
    assert ckpt.load(tmp_path / "absent.json") == CheckpointData()
    assert ckpt.load(tmp_path / "absent.json") == CheckpointData(boot_id="", claims={})


def test_checkpoint_path_is_under_the_plugin_dir(tmp_path):
    assert ckpt.checkpoint_path(tmp_path) == tmp_path / "checkpoint.json"


@pytest.mark.parametrize(
    "where",
    [
        pytest.param("document", id="next-to-data"),
        pytest.param("data", id="inside-data"),
        pytest.param("claim", id="in-a-claim-record"),
        pytest.param("device", id="in-a-device-record"),
    ],
)
def test_fields_of_a_newer_driver_are_ignored(tmp_path, where):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample())
    doc = orjson.loads(path.read_bytes())
    target = {"document": doc, "data": doc["data"], "claim": doc["data"]["claims"][UID],
              "device": doc["data"]["claims"][UID]["devices"][1]}[where]
    target["addedInV1_5"] = {"nested": [1, 2, 3]}
    doc["checksum"] = checksum(doc["data"])
    path.write_bytes(orjson.dumps(doc))
    assert ckpt.load(path) == sample()


def test_checksum_mismatch(tmp_path):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample())
    path.write_bytes(path.read_bytes().replace(b'"team-a"', b'"team-b"'))
    with pytest.raises(CheckpointCorrupt) as raised:
        ckpt.load(path)
    assert str(raised.value) == corrupt_message(path, "checksum mismatch (the file was modified or damaged)")
    assert (raised.value.path, raised.value.reason) == (path, "checksum mismatch (the file was modified or damaged)")


@pytest.mark.parametrize("keep", [pytest.param(0.5, id="half"), pytest.param(0.99, id="last-byte-missing")])
def test_truncated_file(tmp_path, keep):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample())
    blob = path.read_bytes()
    path.write_bytes(blob[: int(len(blob) * keep)] if keep < 0.99 else blob[:-1])
    truncated = path.read_bytes()
    with pytest.raises(orjson.JSONDecodeError) as parse_error:
        orjson.loads(truncated)
    with pytest.raises(CheckpointCorrupt) as raised:
        ckpt.load(path)
    assert str(raised.value) == corrupt_message(
        path, f"not valid JSON ({parse_error.value}); the file is probably truncated")
    assert path.read_bytes() == truncated  # left untouched for inspection


def test_empty_file(tmp_path):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    path.write_bytes(b"")
    with pytest.raises(CheckpointCorrupt) as raised:
        ckpt.load(path)
    assert str(raised.value) == corrupt_message(
        path, "not valid JSON (Input is a zero-length, empty document: line 1 column 1 (char 0)); "
              "the file is probably truncated")


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param({"kind": "DRACheckpoint", "version": 1, "checksum": "", "data": {}}, id="kubelet-kind"),
        pytest.param({"version": 1, "data": {}}, id="no-kind"),
        pytest.param([1, 2], id="not-an-object"),
    ],
)
def test_wrong_kind(tmp_path, doc):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(CheckpointCorrupt) as raised:
        ckpt.load(path)
    assert str(raised.value) == corrupt_message(path, "kind is not AscendDRACheckpoint")


@pytest.mark.parametrize(
    ("version", "shown"),
    [pytest.param(2, "2", id="newer"), pytest.param(0, "0", id="older"), pytest.param("1", "'1'", id="string"),
     pytest.param(None, "None", id="missing")],
)
def test_unknown_version(tmp_path, version, shown):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample())
    doc = orjson.loads(path.read_bytes())
    if version is None:
        del doc["version"]
    else:
        doc["version"] = version
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(CheckpointCorrupt) as raised:
        ckpt.load(path)
    assert str(raised.value) == corrupt_message(
        path, f"version {shown} is not 1 (written by another ascend-dra release)")


def _rewrite(path: Path, edit) -> None:
    """Apply ``edit`` to the stored ``data`` and store it again with a valid checksum (another release's write)."""
    doc = orjson.loads(path.read_bytes())
    edit(doc["data"])
    doc["checksum"] = checksum(doc["data"])
    path.write_bytes(orjson.dumps(doc))


def test_a_state_of_a_newer_release_is_kept_not_fatal(tmp_path):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample())
    _rewrite(path, lambda d: d["claims"][UID].update(state="UnprepareStarted"))
    data = ckpt.load(path)
    assert data.claims[UID].state == "UnprepareStarted"
    assert data.claims[UID].state not in ckpt.KNOWN_STATES
    assert not data.unreadable


def test_nulls_stand_for_defaults(tmp_path):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample())

    def nulls(d):
        d["claims"][UID]["side_effects"] = None
        for device in d["claims"][UID]["devices"]:
            device["consumed_capacity"] = None
            device["share_id"] = None
    _rewrite(path, nulls)
    record = ckpt.load(path).claims[UID]
    assert record.side_effects == {}
    assert [d.consumed_capacity for d in record.devices] == [{}, {}]
    assert [d.share_id for d in record.devices] == [None, None]


def test_an_older_record_without_optional_fields_decodes_with_defaults(tmp_path):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample())

    def older(d):
        record = d["claims"][UID]
        for key in ("side_effects", "device_nodes", "cdi_specs"):
            record.pop(key, None)
        for device in record["devices"]:
            for key in ("cdi_device_ids", "admin_access", "consumed_capacity"):
                device.pop(key, None)
    _rewrite(path, older)
    record = ckpt.load(path).claims[UID]
    assert record.cdi_specs == () and record.device_nodes == ()
    assert [d.cdi_device_ids for d in record.devices] == [(), ()]  # state.py refuses to replay this


def test_a_record_that_does_not_decode_is_kept_byte_for_byte_and_the_others_load(tmp_path):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample(claims=2))
    other = next(uid for uid in ckpt.load(path).claims if uid != UID)
    odd = {"uid": UID, "state": "PrepareCompleted", "devices": [{"device": "npu-0-0", "request": 7}],
           "cdi_specs": ["a.yaml", 3], "future": {"x": 1}}
    _rewrite(path, lambda d: d["claims"].update({UID: odd}))
    data = ckpt.load(path)
    assert list(data.claims) == [other]
    bad = data.unreadable[UID]
    assert bad.raw == odd
    assert bad.device_names == ("npu-0-0",) and bad.cdi_specs == ("a.yaml",)
    assert f"data.claims['{UID}']" in bad.reason
    # Written back unchanged beside the readable records.
    table = ckpt.RecordTable.from_data(data)
    again = ckpt.decode(table.encode("boot-1"), path)
    assert again.unreadable[UID].raw == odd and list(again.claims) == [other]


def test_fields_of_a_newer_release_survive_a_rewrite(tmp_path):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample())
    _rewrite(path, lambda d: d["claims"][UID].update(journal_seq=42, vnpu={"id": 103}))
    table = ckpt.RecordTable.from_data(ckpt.load(path))
    table[UID] = attrs.evolve(table[UID], state=ckpt.PREPARE_STARTED)
    stored = orjson.loads(table.encode("boot-1"))["data"]["claims"][UID]
    assert (stored["journal_seq"], stored["vnpu"], stored["state"]) == (42, {"id": 103}, "PrepareStarted")
    del table[UID]
    table[UID] = sample().claims[UID]  # a new Prepare of the same uid starts clean
    assert "journal_seq" not in orjson.loads(table.encode("boot-1"))["data"]["claims"][UID]


@pytest.mark.parametrize("blob, nothing", [
    (b"", True),
    (b"  \n", True),
    (b'{"kind":"AscendDRACheckpoint","version":1,"checksum":"sha256:00","data":{"boot_id":"b","claims":{}}}', True),
    (b'{"kind":"AscendDRACheckpoint","version":1,"checksum":"sha256:00","data":null}', True),
    (b'{"kind":"AscendDRACheckpoint","version":1,"checksum":"sha256:00","data":{"claims":{"u":{}}}}', False),
    (b'{"kind":"AscendDRACheckpoint","version":1,"checksum":"sha256:00","data":{"claims"', False),
    (b"null", True),
    # One flipped bit in a key's name hid every record under it, and the file was set aside as
    # empty: start-up forgot the claims, removed their specs and gave their devices away (an audit).
    (b'{"kind":"AscendDRACheckpoint","version":1,"checksum":"sha256:00","d`ta":{"claims":{"u":{}}}}', False),
    (b'{"kind":"AscendDRACheckpoint","version":1,"checksum":"sha256:00","data":{"cla)ms":{"u":{}}}}', False),
    (b'{"kind":"AscendDRACheckpoint","version":1,"checksum":"sha256:00","data":{"boot_id":"b"}}', False),
])
def test_a_damaged_file_says_whether_it_records_any_claim(tmp_path, blob, nothing):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    path.write_bytes(blob)
    with pytest.raises(CheckpointCorrupt) as raised:
        ckpt.load(path)
    assert raised.value.records_nothing is nothing


def test_a_checkpoint_that_links_to_nothing_is_not_an_empty_checkpoint(tmp_path):
    """A link to a volume not mounted yet read as "no checkpoint": start-up began empty (an audit)."""
    path = tmp_path / ckpt.CHECKPOINT_FILE
    path.symlink_to(tmp_path / "unmounted" / "checkpoint.json")
    with pytest.raises(CheckpointCorrupt) as raised:
        ckpt.load(path)
    assert raised.value.reason == (f"it is a symbolic link to {tmp_path}/unmounted/checkpoint.json, which does not "
                                   "exist (a volume not mounted?)")
    assert raised.value.records_nothing is False


def test_data_that_is_not_an_object_of_records_is_corrupt(tmp_path):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample())
    _rewrite(path, lambda d: d.update(claims=["not", "a", "map"]))
    with pytest.raises(CheckpointCorrupt) as raised:
        ckpt.load(path)
    assert raised.value.reason == "data is not an object with a boot_id string and a claims object"
    assert raised.value.records_nothing is False


def test_save_replaces_the_file_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample(boot_id="boot-1"))
    inode = path.stat().st_ino
    ckpt.save(path, sample(boot_id="boot-2", claims=2))
    assert ckpt.load(path) == sample(boot_id="boot-2", claims=2)
    assert path.stat().st_ino != inode  # a new file renamed over the old one, not rewritten in place
    assert os.listdir(tmp_path) == [ckpt.CHECKPOINT_FILE]


@pytest.fixture
def tiny_tmpfs(short_tmp):
    """A 16 KiB tmpfs (needs root): writes past its size fail with ENOSPC, like a full /var."""
    mountpoint = short_tmp / "tmpfs"
    mountpoint.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mountpoint)], check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)


def _fill(directory: Path) -> None:
    """Write a filler file until the file system is full."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                os.write(fd, b"\0" * 1024)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return
    finally:
        os.close(fd)


def test_failed_save_on_a_full_file_system_keeps_the_old_checkpoint_byte_for_byte(tiny_tmpfs):
    path = tiny_tmpfs / ckpt.CHECKPOINT_FILE
    ckpt.save(path, sample(boot_id="boot-1"))
    before = path.read_bytes()
    _fill(tiny_tmpfs)
    bigger = sample(boot_id="boot-2", claims=20)
    assert len(ckpt.encode(bigger)) > 4096
    with pytest.raises(OSError) as raised:
        ckpt.save(path, bigger)
    assert raised.value.errno == errno.ENOSPC
    assert path.read_bytes() == before
    assert ckpt.load(path) == sample(boot_id="boot-1")
    assert sorted(os.listdir(tiny_tmpfs)) == [ckpt.CHECKPOINT_FILE, "filler"]


def test_read_boot_id_strips_the_newline(tmp_path):
    (tmp_path / "boot_id").write_text("0f5e2b7c-aaaa-bbbb-cccc-111122223333\n")
    assert ckpt.read_boot_id(tmp_path / "boot_id") == "0f5e2b7c-aaaa-bbbb-cccc-111122223333"
