"""kill -9 of the daemon at every durable step of Prepare and Unprepare, then restart and replay.

Whatever instant the daemon dies at, a restart must leave: no CDI spec that the checkpoint does
not back as PrepareCompleted, no lost prepared claim, and a replay (the kubelet retrying) that
succeeds and ends in the same state as an uninterrupted run.
"""

from __future__ import annotations

import time

import grpc
import pytest

from ascend_dra.observe.faults import POINTS, WRITE_POINTS
from tests.claimfiles import claim_object, write_claim
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

PREPARE_POINTS = [p for p in POINTS if p.startswith("prepare:")]
UNPREPARE_POINTS = [p for p in POINTS if p.startswith("unprepare:")]


def records(d: DaemonProcess) -> dict:
    return d.records()


def claim_specs(d: DaemonProcess) -> set[str]:
    return {p.name for p in d.cdi_dir.glob(f"k8s.{DRIVER}-npu_*.yaml") if not p.name.endswith("_common.yaml")}


def spec_names(uids) -> set[str]:
    return {f"k8s.{DRIVER}-npu_{uid}.yaml" for uid in uids}


def metadata_files(d: DaemonProcess) -> set[str]:
    """The claim uids with a device metadata file (KEP-5304; each claim here has one request, ``npu``)
    and those with anything else under the metadata directory, which must be none."""
    root = d.root / "plugins" / DRIVER / "device-metadata"
    found = {p.name for p in root.iterdir()} if root.exists() else set()
    return {uid for uid in found if (root / uid / "npu" / "metadata.json").is_file()} | \
        {f"{uid} (no file)" for uid in found if not (root / uid / "npu" / "metadata.json").is_file()}


def assert_consistent(d: DaemonProcess) -> None:
    """Every claim spec and device metadata file on disk is backed by a PrepareCompleted record, and
    vice versa."""
    completed = {uid for uid, r in records(d).items() if r["state"] == "PrepareCompleted"}
    assert all(r["state"] == "PrepareCompleted" for r in records(d).values())
    assert claim_specs(d) == spec_names(completed)
    assert metadata_files(d) == completed


def assert_repaired(d: DaemonProcess) -> None:
    """Right after a restart: every claim spec on disk is backed by a PrepareCompleted record and no
    record is left PrepareStarted (both settled before the daemon serves); a completed record whose
    spec a kill left unwritten (a Prepare without side effects writes it while the record goes out,
    state.py) gets it back from the repair loop's first pass. Then :func:`assert_consistent`."""
    assert all(r["state"] == "PrepareCompleted" for r in records(d).values())
    assert claim_specs(d) <= spec_names(records(d))
    assert metadata_files(d) <= set(records(d))
    deadline = time.monotonic() + 15
    while (claim_specs(d) != spec_names(records(d)) or metadata_files(d) != set(records(d))) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert_consistent(d)


def call_and_die(d: DaemonProcess, call) -> None:
    with pytest.raises(grpc.RpcError) as died:
        call()
    assert died.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)
    assert d.wait_exit() == -9


@pytest.mark.parametrize("point", PREPARE_POINTS)
def test_kill9_inside_prepare_then_restart_and_replay(short_tmp, point):
    d = DaemonProcess(short_tmp / "sa")
    d.start(extra_env={"ASCEND_DRA_CRASH_AT": point})
    kept = write_claim(d.root, claim_object("kept", results=[("npu", "npu-0-0")]))
    claim = write_claim(d.root, claim_object("crashing", results=[("npu", "npu-1-0")]))
    k = Kubelet(d)
    # A claim prepared before the crash point is armed... (the point fires on the first Prepare,
    # so prepare "kept" in the same batch: both are in flight when the daemon dies).
    call_and_die(d, lambda: k.prepare(kept, claim))
    k.close()

    d.start()
    assert_repaired(d)
    k = Kubelet(d)
    reply = k.prepare(kept, claim)
    for c in (kept, claim):
        uid = c["metadata"]["uid"]
        assert reply.claims[uid].error == ""
        assert [dev.device_name for dev in reply.claims[uid].devices] == [c["status"]["allocation"]["devices"]
                                                                          ["results"][0]["device"]]
        assert (d.cdi_dir / f"k8s.{DRIVER}-npu_{uid}.yaml").exists()
        assert records(d)[uid]["state"] == "PrepareCompleted"
    assert_consistent(d)
    for c in (kept, claim):
        assert k.unprepare(c).claims[c["metadata"]["uid"]].error == ""
    assert records(d) == {}
    assert claim_specs(d) == set()
    assert metadata_files(d) == set()
    k.close()
    d.stop()


@pytest.mark.parametrize("point", UNPREPARE_POINTS)
def test_kill9_inside_unprepare_then_restart_and_replay(short_tmp, point):
    d = DaemonProcess(short_tmp / "sa")
    d.start(extra_env={"ASCEND_DRA_CRASH_AT": point})
    claim = write_claim(d.root, claim_object("leaving", results=[("npu", "npu-2-0")]))
    uid = claim["metadata"]["uid"]
    k = Kubelet(d)
    assert k.prepare(claim).claims[uid].error == ""
    call_and_die(d, lambda: k.unprepare(claim))
    k.close()

    d.start()
    # Killed after the spec was removed: the record (so the device) is still held, never released
    # before its spec is gone; the restarted daemon cannot tell that from a spec lost while the claim
    # is in use, and puts the spec back (recovery.py, repair_specs) until the retried Unprepare.
    # Earlier points leave the claim fully prepared.
    spec = d.cdi_dir / f"k8s.{DRIVER}-npu_{uid}.yaml"
    deadline = time.monotonic() + 15
    while not (spec.exists() and metadata_files(d) == {uid}) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert_consistent(d)
    assert uid in records(d)
    k = Kubelet(d)
    assert k.unprepare(claim).claims[uid].error == ""
    assert uid not in records(d)
    assert claim_specs(d) == set()
    assert metadata_files(d) == set()
    # The device is free again for another claim.
    other = write_claim(d.root, claim_object("next", results=[("npu", "npu-2-0")]))
    assert k.prepare(other).claims[other["metadata"]["uid"]].error == ""
    k.close()
    d.stop()


#: The two orders a kill can catch a Prepare without side effects in, while its spec is written and its
#: record goes out (state.py): (stall, kill, whether the record is on disk, whether the spec is).
IN_FLIGHT = {
    # The loop stalls before the spec; the writer thread makes the record durable, then dies.
    "record-durable-spec-unwritten": ("prepare:completed-write-submitted@10", "journal:after-append", True, False),
    # The writer thread stalls before appending; the loop writes the spec, then dies.
    "spec-written-record-not-appended": ("journal:before-append@10", "prepare:after-cdi-write", False, True),
    # The same, killed between the device metadata file and the spec: the file is an orphan.
    "metadata-written-record-not-appended": ("journal:before-append@10", "prepare:after-metadata-write", False,
                                             False),
}


@pytest.mark.parametrize("case", IN_FLIGHT)
def test_kill9_while_the_spec_and_the_completed_record_are_both_in_flight(short_tmp, case):
    stall, kill, recorded, written = IN_FLIGHT[case]
    assert {stall.partition("@")[0], kill} <= set(WRITE_POINTS) | set(POINTS)
    d = DaemonProcess(short_tmp / "sa")
    d.start(extra_env={"ASCEND_DRA_STALL_AT": stall, "ASCEND_DRA_CRASH_AT": kill})
    claim = write_claim(d.root, claim_object("racing", results=[("npu", "npu-3-0")]))
    uid = claim["metadata"]["uid"]
    spec = d.cdi_dir / f"k8s.{DRIVER}-npu_{uid}.yaml"
    k = Kubelet(d)
    call_and_die(d, lambda: k.prepare(claim))
    k.close()
    assert (uid in records(d), spec.exists()) == (recorded, written)
    if case == "metadata-written-record-not-appended":
        assert metadata_files(d) == {uid}  # left behind, for start-up to remove

    d.start()
    assert_repaired(d)  # the orphan spec removed before serving, or the missing spec put back
    assert spec.exists() == recorded
    k = Kubelet(d)
    reply = k.prepare(claim)  # the kubelet's retry: answered from the record, or prepared anew
    assert reply.claims[uid].error == ""
    assert [dev.device_name for dev in reply.claims[uid].devices] == ["npu-3-0"]
    assert spec.exists()
    assert k.unprepare(claim).claims[uid].error == ""
    assert records(d) == {}
    assert claim_specs(d) == set()
    assert metadata_files(d) == set()
    k.close()
    d.stop()
