"""A checkpoint that is damaged and names no claim is set aside only when nothing on the node says a
claim was prepared (records.py, evidence.py; docs/durable-state.md, "A damaged checkpoint").

Every shape that reads as empty is generated (the envelope and ``data`` shapes below, crossed), and
each is tried against every kind of evidence: a claim CDI spec of ours, a journal change, a profile's
own records, and a source that cannot be read.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest

from ascend_dra.cdi import naming
from ascend_dra.cdi.store import CdiStore
from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.evidence import few, prepared_claims_evidence
from ascend_dra.profiles.ascend.hardvnpu.ledger import Ledger, LedgerEntry
from ascend_dra.profiles.ascend.hardvnpu.profile import HardVnpuProfile
from ascend_dra.profiles.ascend.vnpucore.profile import VnpuCoreProfile
from ascend_dra.profiles.base import ProfileContext
from ascend_dra.profiles.fake import FakeProfile
from tests.claimfiles import DRIVER, claim_object, write_claim
from tests.unit.test_state import make_state, on_disk, ref

pytestmark = pytest.mark.anyio

FAKE_KIND = f"k8s.{DRIVER}/npu"
UID = "0b6c1f7e-4a57-4f0e-9d2a-6c0f4ad1e2b3"

_BODIES: list[Any] = [None, [], "", {}, {"data": None}, {"data": {"claims": {}}}, {"data": {"claims": None}},
                      {"data": {"boot_id": "boot-1", "claims": {}}}, {"data": {"boot_id": None, "claims": {}}}]
_ENVELOPES: list[dict[str, Any]] = [{}, {"kind": "AscendDRACheckpoint", "version": 1, "checksum": "sha256:00"},
                                    {"kind": "SomethingElse", "version": 1}, {"kind": "AscendDRACheckpoint"}]


def _shapes() -> dict[str, bytes]:
    """Every damaged file this release reads as naming no claim: blank files, then each body in each
    envelope. Shapes that do not read as empty (a version another release wrote, say) are left out
    here; they stop start-up whatever the node holds."""
    shapes = {"zero-bytes": b"", "space": b" ", "newlines": b"\n\n", "tabs-and-crlf": b"\t\r\n \x0b\x0c"}
    for (i, body), (j, envelope) in itertools.product(enumerate(_BODIES), enumerate(_ENVELOPES)):
        if envelope and not isinstance(body, dict):
            continue  # null, [] or "" in an envelope is a body of data: {"data": null} covers it
        shapes[f"body{i}-envelope{j}"] = orjson.dumps({**envelope, **body} if envelope else body)
    found = {}
    for name, blob in shapes.items():
        try:
            ckpt.decode(blob, Path("checkpoint.json"))
        except ckpt.CheckpointCorrupt as exc:
            if exc.records_nothing:
                found[name] = blob
    return found


EMPTY = _shapes()


def test_the_shapes_cover_every_way_a_file_reads_as_empty():
    # blank files, null/[]/""/{} alone, and data null or claims empty/null under every envelope that
    # fails (a kind of ours without version or checksum, another kind, a bad checksum)
    assert len(EMPTY) >= 20, sorted(EMPTY)
    assert {"zero-bytes", "space", "newlines", "tabs-and-crlf"} <= set(EMPTY)
    blobs = set(EMPTY.values())
    assert {b"null", b"[]", b'""', b"{}"} <= blobs


async def prepared(root: Path) -> tuple[dict, Path]:
    """A claim prepared and the daemon stopped cleanly: the record is in the snapshot alone."""
    state = await make_state(root, {"fake": FakeProfile()})
    claim = write_claim(root, claim_object("kept", results=[("npu", "npu-0-0")]))
    assert isinstance((await state.prepare([ref(claim)]))[claim["metadata"]["uid"]], list)
    await state.close()
    return claim, root / "cdi" / naming.claim_spec_file(FAKE_KIND, claim["metadata"]["uid"])


def checkpoint(root: Path) -> Path:
    return root / "plugin" / ckpt.CHECKPOINT_FILE


async def refused(root: Path, profiles: dict[str, Any] | None = None) -> str:
    """Start-up refuses with the advice for any unreadable checkpoint; return the reason it gives."""
    with pytest.raises(ckpt.CheckpointCorrupt) as raised:
        await make_state(root, profiles or {"fake": FakeProfile()})
    assert not list((root / "plugin").glob("checkpoint.json.corrupt-*"))
    assert "it names no claim, but that proves nothing while this node says claims were prepared: " in str(raised.value)
    assert "restore it from a backup" in str(raised.value)
    return raised.value.reason


@pytest.mark.parametrize("shape", EMPTY)
async def test_a_claim_spec_of_ours_stops_start_up_over_every_empty_shape(tmp_path, shape):
    _, spec = await prepared(tmp_path)
    checkpoint(tmp_path).write_bytes(EMPTY[shape])
    reason = await refused(tmp_path)
    assert f"1 claim CDI spec(s) of ours under {tmp_path / 'cdi'}: {spec.name}" in reason
    assert spec.exists() and checkpoint(tmp_path).read_bytes() == EMPTY[shape]


@pytest.mark.parametrize("shape", EMPTY)
async def test_with_nothing_prepared_every_empty_shape_is_set_aside(tmp_path, shape):
    (tmp_path / "plugin").mkdir()
    checkpoint(tmp_path).write_bytes(EMPTY[shape])
    # Neither a common spec nor another driver's spec says that a claim of ours was prepared.
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / naming.common_spec_file(FAKE_KIND)).write_text("{}")
    (tmp_path / "cdi" / f"k8s.other.example.com-npu_{UID}.yaml").write_text("{}")
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    assert state.prepared_claims == {}
    aside = list((tmp_path / "plugin").glob("checkpoint.json.corrupt-*"))
    assert [p.read_bytes() for p in aside] == [EMPTY[shape]]


async def test_a_claim_device_metadata_dir_alone_stops_start_up(tmp_path):
    """After a reboot the CDI dir (a tmpfs) is empty, but the device metadata files are on the disk."""
    state = await make_state(tmp_path, {"fake": FakeProfile()}, device_metadata=True)
    claim = write_claim(tmp_path, claim_object("kept", results=[("npu", "npu-0-0")]))
    uid = claim["metadata"]["uid"]
    assert isinstance((await state.prepare([ref(claim)]))[uid], list)
    await state.close()
    for file in (tmp_path / "cdi").iterdir():
        file.unlink()
    checkpoint(tmp_path).write_bytes(b"null")
    reason = await refused(tmp_path)
    assert f"1 claim device metadata dir(s) under {tmp_path / 'plugin' / 'device-metadata'}: {uid}" in reason
    assert (tmp_path / "plugin" / "device-metadata" / uid).is_dir()  # not removed as an orphan


async def test_a_journal_change_alone_stops_start_up(tmp_path):
    """After a reboot the CDI dir (a tmpfs) is empty: the journal's records are the evidence."""
    await prepared(tmp_path)
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    second = write_claim(tmp_path, claim_object("second", results=[("npu", "npu-1-0")]))
    assert isinstance((await state.prepare([ref(second)]))[second["metadata"]["uid"]], list)
    state.journal.close()  # a kill: the record stays in the journal only
    for file in (tmp_path / "cdi").iterdir():
        file.unlink()
    checkpoint(tmp_path).write_bytes(b"")
    reason = await refused(tmp_path)
    assert f"checkpoint.journal holds changes of 1 claim(s) since the snapshot ({second['metadata']['uid']})" \
        in reason
    checkpoint(tmp_path).unlink()  # moved away by the operator: the journal over no snapshot
    assert list(on_disk(tmp_path).claims) == [second["metadata"]["uid"]]


class Recorded(FakeProfile):
    """Keeps a file per claim of its own, as the hard-vNPU ledger does."""

    def __init__(self, lines: list[str] | Exception) -> None:
        self.lines = lines

    def claim_evidence(self, ctx: ProfileContext) -> list[str]:
        if isinstance(self.lines, Exception):
            raise self.lines
        return self.lines


async def test_a_profiles_own_records_stop_start_up(tmp_path):
    (tmp_path / "plugin").mkdir()
    checkpoint(tmp_path).write_bytes(b"null")
    lines = [f"entry {i}" for i in range(5)]
    reason = await refused(tmp_path, {"fake": Recorded(lines)})
    assert reason.endswith("5 record(s) of profile fake: entry 0, entry 1, entry 2 and 2 more")
    assert checkpoint(tmp_path).read_bytes() == b"null"


async def test_a_source_that_cannot_be_read_cannot_vouch_for_nothing(tmp_path):
    (tmp_path / "plugin").mkdir()
    checkpoint(tmp_path).write_bytes(b"")
    reason = await refused(tmp_path, {"fake": Recorded(PermissionError(13, "Permission denied", "/state/x"))})
    assert reason.endswith("profile fake cannot tell whether claims were prepared (PermissionError: [Errno 13] "
                           "Permission denied: '/state/x')")
    (tmp_path / "cdi").write_text("a file where the CDI dir should be")
    reason = await refused(tmp_path)
    assert reason.endswith(f"the CDI dir {tmp_path / 'cdi'} cannot be listed to look for claim specs (Not a "
                           "directory)")


def test_the_hard_vnpu_ledger_is_evidence_even_when_an_entry_does_not_read(tmp_path):
    ctx = ProfileContext(node_name="n", driver_name=DRIVER, state_dir=tmp_path)
    profile = HardVnpuProfile()
    assert profile.claim_evidence(ctx) == []
    ledger = Ledger(tmp_path / "hard-vNPU")
    ledger.write(LedgerEntry(4, 0, 105, "vir05_1c_8g", UID, "vnpu-0-0-vir05-1c-8g-0", "boot-1"))
    (tmp_path / "hard-vNPU" / "vnpu-4-0-100.json").write_bytes(b"")  # torn by a crash: still says something
    assert profile.claim_evidence(ctx) == [f"hard-vNPU ledger entry {tmp_path}/hard-vNPU/vnpu-4-0-100.json",
                                           f"hard-vNPU ledger entry {tmp_path}/hard-vNPU/vnpu-4-0-105.json"]


def test_few_names_three_and_counts_the_rest():
    assert (few([]), few(["a"]), few("abc"), few("abcdef")) == ("", "a", "a, b, c", "a, b, c and 3 more")


def test_hami_vnpu_core_claim_dirs_are_evidence_and_other_entries_are_not(tmp_path):
    """A claim's local dir (with its preload file) is made after its PrepareStarted record and goes
    before the record does: one left says a claim was prepared. What another installer keeps beside
    them (a pod's dir of HAMi's device plugin, a file) says nothing about our claims."""
    ctx = ProfileContext(node_name="n", driver_name=DRIVER, state_dir=tmp_path / "state",
                         options={"HAMivNPUCore.hostRoot": str(tmp_path)})
    profile = VnpuCoreProfile()
    assert profile.claim_evidence(ctx) == []  # no containers dir at all
    containers = tmp_path / "usr/local/hami-vnpu-core/containers"
    (containers / "some-pod_app").mkdir(parents=True)
    (containers / "7d1a0a4e-0000-4000-8000-000000000000").write_text("a file, not a claim dir")
    assert profile.claim_evidence(ctx) == []
    (containers / UID / "npu").mkdir(parents=True)
    assert profile.claim_evidence(ctx) == [f"hami-vnpu-core claim dir {containers}/{UID}"]



def test_a_hami_vnpu_core_claim_dir_is_named_in_the_start_up_refusal(tmp_path):
    """What records.py says when it refuses to set the checkpoint aside (the evidence lines)."""
    (tmp_path / "host/usr/local/hami-vnpu-core/containers" / UID / "npu").mkdir(parents=True)
    ctx = ProfileContext(node_name="n", driver_name=DRIVER, state_dir=tmp_path / "state",
                         options={"HAMivNPUCore.hostRoot": str(tmp_path / "host")})
    found = prepared_claims_evidence(CdiStore(tmp_path / "cdi"), [FAKE_KIND], {"HAMivNPUCore": VnpuCoreProfile()}, ctx)
    assert found == [f"1 record(s) of profile HAMivNPUCore: hami-vnpu-core claim dir "
                     f"{tmp_path}/host/usr/local/hami-vnpu-core/containers/{UID}"]
