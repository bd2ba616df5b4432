"""RecordTable: the cached-encoding record map DeviceState saves through."""

from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.checkpoint import CheckpointData, ClaimRecord, DeviceRecord, RecordTable


def record(uid: str, state: str = "PrepareCompleted") -> ClaimRecord:
    return ClaimRecord(uid, "default", f"claim-{uid}", state, "boot-1",
                       (DeviceRecord("npu", "node-1", "npu-0-0", ("k/npu=common",), None, {"memory": "1Gi"}),),
                       ("spec.yaml",), {"p": {"created": [1]}})


def test_table_encodes_the_same_bytes_as_the_plain_encoder_after_every_kind_of_change(tmp_path):
    table = RecordTable({"a": record("a"), "b": record("b", "PrepareStarted")})
    table["c"] = record("c")
    table["b"] = record("b")  # replaced: the cached form must follow
    del table["a"]
    plain = ckpt.encode(CheckpointData(boot_id="boot-7", claims={"b": record("b"), "c": record("c")}))
    assert table.encode("boot-7") == plain
    path = tmp_path / "checkpoint.json"
    ckpt.save(path, table.encode("boot-7"))
    assert ckpt.load(path) == CheckpointData(boot_id="boot-7", claims={"b": record("b"), "c": record("c")})
    assert sorted(table) == ["b", "c"] and len(table) == 2
