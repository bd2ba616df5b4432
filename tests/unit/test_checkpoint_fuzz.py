"""Whatever bytes are on disk, loading the checkpoint gives either the records or CheckpointCorrupt.

Truncations, bit flips and arbitrary bytes never raise anything else (which would crash start-up
with a traceback instead of the message that says what to do) and never load wrong records.
"""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.checkpoint import CheckpointCorrupt, CheckpointData, ClaimRecord, DeviceRecord

GOOD = CheckpointData(boot_id="boot-1", claims={
    f"uid-{i}": ClaimRecord(f"uid-{i}", "default", f"c{i}", "PrepareCompleted", "boot-1",
                            (DeviceRecord("npu", "node-1", f"npu-{i}-0", ("k/npu=common",)),), (f"spec-{i}.yaml",))
    for i in range(3)})
BLOB = ckpt.encode(GOOD)
PATH = Path("/nonexistent/checkpoint.json")  # only named in messages


def load(blob: bytes) -> CheckpointData | None:
    try:
        return ckpt.decode(blob, PATH)
    except CheckpointCorrupt:
        return None


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, len(BLOB) - 1))
def test_every_truncation_is_detected(cut):
    assert load(BLOB[:cut]) is None


@settings(max_examples=500)
@given(position=st.integers(0, len(BLOB) - 1), bit=st.integers(0, 7))
def test_a_flipped_bit_never_loads_other_records(position, bit):
    damaged = bytearray(BLOB)
    damaged[position] ^= 1 << bit
    loaded = load(bytes(damaged))
    # A flip in JSON whitespace-free text either breaks it or changes content the checksum covers;
    # the one harmless case is a flip that leaves an equal document (e.g. inside the checksum's
    # case-insensitive hex, which we compare exactly, so even that is caught).
    assert loaded is None or loaded == GOOD


@settings(max_examples=300)
@given(blob=st.binary(max_size=2048))
def test_arbitrary_bytes_are_corrupt_or_a_valid_checkpoint(blob):
    load(blob)  # must not raise anything but CheckpointCorrupt


@pytest.mark.parametrize("blob", [b"", b"{}", b"null", b"[]", b'{"kind":"AscendDRACheckpoint"}', b"\xff\xfe"])
def test_small_wrong_documents(blob):
    assert load(blob) is None
