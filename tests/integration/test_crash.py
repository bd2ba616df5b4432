"""kill -9 of the daemon at every durable step of Prepare and Unprepare, then restart and replay.

Whatever instant the daemon dies at, a restart must leave: no CDI spec that the checkpoint does
not back as PrepareCompleted, no lost prepared claim, and a replay (the kubelet retrying) that
succeeds and ends in the same state as an uninterrupted run.
"""

from __future__ import annotations

import time

import grpc
import pytest

from ascend_dra.faults import POINTS
from tests.claimfiles import claim_object, write_claim
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

PREPARE_POINTS = [p for p in POINTS if p.startswith("prepare:")]
UNPREPARE_POINTS = [p for p in POINTS if p.startswith("unprepare:")]


def records(d: DaemonProcess) -> dict:
    return d.records()


def claim_specs(d: DaemonProcess) -> set[str]:
    return {p.name for p in d.cdi_dir.glob(f"k8s.{DRIVER}-npu_*.yaml") if not p.name.endswith("_common.yaml")}


def assert_consistent(d: DaemonProcess) -> None:
    """Every claim spec on disk is backed by a PrepareCompleted record, and vice versa."""
    completed = {uid for uid, r in records(d).items() if r["state"] == "PrepareCompleted"}
    assert all(r["state"] == "PrepareCompleted" for r in records(d).values())
    assert claim_specs(d) == {f"k8s.{DRIVER}-npu_{uid}.yaml" for uid in completed}


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
    assert_consistent(d)
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
    while not spec.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert_consistent(d)
    assert uid in records(d)
    k = Kubelet(d)
    assert k.unprepare(claim).claims[uid].error == ""
    assert uid not in records(d)
    assert claim_specs(d) == set()
    # The device is free again for another claim.
    other = write_claim(d.root, claim_object("next", results=[("npu", "npu-2-0")]))
    assert k.prepare(other).claims[other["metadata"]["uid"]].error == ""
    k.close()
    d.stop()


def test_kill9_with_the_completed_record_durable_and_the_spec_not_yet_written(short_tmp):
    """A Prepare without side effects writes its spec while its PrepareCompleted record goes to disk
    (state.py): a kill in between can leave the record without the spec. The restarted daemon puts
    the spec back (repair_specs) and the kubelet's retry is answered from the record."""
    d = DaemonProcess(short_tmp / "sa")
    # The loop stalls before the spec write; the writer thread makes the record durable, then dies.
    d.start(extra_env={"ASCEND_DRA_STALL_AT": "prepare:completed-write-submitted@10",
                       "ASCEND_DRA_CRASH_AT": "journal:after-append"})
    claim = write_claim(d.root, claim_object("racing", results=[("npu", "npu-3-0")]))
    uid = claim["metadata"]["uid"]
    spec = d.cdi_dir / f"k8s.{DRIVER}-npu_{uid}.yaml"
    k = Kubelet(d)
    call_and_die(d, lambda: k.prepare(claim))
    k.close()
    assert records(d)[uid]["state"] == "PrepareCompleted"
    assert not spec.exists()

    d.start()
    deadline = time.monotonic() + 15
    while not spec.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert_consistent(d)
    k = Kubelet(d)
    reply = k.prepare(claim)
    assert reply.claims[uid].error == ""
    assert [dev.device_name for dev in reply.claims[uid].devices] == ["npu-3-0"]
    assert k.unprepare(claim).claims[uid].error == ""
    assert records(d) == {}
    assert claim_specs(d) == set()
    k.close()
    d.stop()
