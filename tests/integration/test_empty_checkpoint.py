"""A checkpoint that reads as empty (zero bytes, whitespace, ``null``, ...) over a node where claims
are prepared: the daemon as a process must refuse to start, keep every claim's spec, vNPU and
device, and leave the file as it found it (docs/durable-state.md, "A damaged checkpoint").

Zero bytes is what a truncated file looks like after outside damage (a restore, a file-system
repair, an editor); it says nothing about what the file held. The daemon started empty over it,
removed the claims' specs as orphans and gave their devices to other claims.
"""

from __future__ import annotations

import shutil
import time

import pytest

from tests.claimfiles import claim_object, write_claim
from tests.hardvnpu import SimHost, daemon_args, vnpu_keys
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet, accepts

#: Shapes that record no claim (checkpoint.CheckpointCorrupt.records_nothing): every one is only
#: damage, so it must not be read as "nothing was prepared" while the node says otherwise.
EMPTY_SHAPES = {
    "zero-bytes": b"",
    "whitespace": b" \n\t\n",
    "null": b"null",
    "empty-object": b"{}",
    "data-null": b'{"kind":"AscendDRACheckpoint","version":1,"checksum":"sha256:00","data":null}',
    "no-claims-bad-checksum": b'{"kind":"AscendDRACheckpoint","version":1,"checksum":"sha256:00",'
                              b'"data":{"boot_id":"boot-1","claims":{}}}',
}


def served_or_exited(d: DaemonProcess, timeout: float = 20.0) -> bool:
    """Wait until the daemon serves (True) or exits (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if d.proc is not None and d.proc.poll() is not None:
            d.wait_exit()
            return False
        if accepts(d.registration_socket):
            return True
        time.sleep(0.05)
    raise TimeoutError(d.log_text())


def assert_refused(d: DaemonProcess, *needles: str) -> None:
    """The daemon stopped at start-up with one line naming the checkpoint and each needle."""
    lines = [line for line in d.log_text().splitlines() if "refusing to start" in line]
    assert d.proc is not None and d.proc.returncode == 1
    assert len(lines) == 1, d.log_text()
    assert f"checkpoint {d.checkpoint} is unreadable" in lines[0]
    assert "restore it from a backup" in lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("shape", EMPTY_SHAPES)
def test_an_emptied_checkpoint_under_a_prepared_claim_stops_start_up(short_tmp, shape):
    d = DaemonProcess(short_tmp / "sa").start()
    kept = write_claim(d.root, claim_object("kept", results=[("npu", "npu-0-0")]))
    uid = kept["metadata"]["uid"]
    k = Kubelet(d)
    assert k.prepare(kept).claims[uid].error == ""
    k.close()
    d.stop()  # a clean stop: the record is in the snapshot alone, the journal holds no change
    whole = d.checkpoint.read_bytes()
    spec = d.cdi_dir / f"k8s.{DRIVER}-npu_{uid}.yaml"
    d.checkpoint.write_bytes(EMPTY_SHAPES[shape])

    other = write_claim(d.root, claim_object("other", results=[("npu", "npu-0-0")]))
    d.start(wait=False)
    served = served_or_exited(d)
    spec_kept = spec.exists()
    handed = False
    if served:  # what the daemon did before: the spec removed, the device handed to another claim
        k = Kubelet(d)
        handed = k.prepare(other).claims[other["metadata"]["uid"]].error == ""
        k.close()
        d.stop()
    assert (served, spec_kept, handed) == (False, True, False)
    assert_refused(d, spec.name)
    assert d.checkpoint.read_bytes() == EMPTY_SHAPES[shape]  # left for inspection, not set aside
    assert not list(d.checkpoint.parent.glob("checkpoint.json.corrupt-*"))

    d.checkpoint.write_bytes(whole)  # restored from a backup: the claim is prepared, its device held
    d.start()
    k = Kubelet(d)
    assert "is already prepared for" in k.prepare(other).claims[other["metadata"]["uid"]].error
    assert k.prepare(kept).claims[uid].error == ""
    assert spec.exists()
    k.close()
    d.stop()


def test_the_journal_alone_says_a_claim_was_prepared(short_tmp):
    """After a reboot the CDI dir (a tmpfs) is empty: the journal's record is the evidence."""
    d = DaemonProcess(short_tmp / "sa").start()
    first = write_claim(d.root, claim_object("first", results=[("npu", "npu-0-0")]))
    k = Kubelet(d)
    assert k.prepare(first).claims[first["metadata"]["uid"]].error == ""
    k.close()
    d.stop()  # "first" goes into the snapshot
    d.start()
    second = write_claim(d.root, claim_object("second", results=[("npu", "npu-1-0")]))
    k = Kubelet(d)
    assert k.prepare(second).claims[second["metadata"]["uid"]].error == ""
    k.close()
    d.kill9()  # "second" is in the journal only
    shutil.rmtree(d.cdi_dir)
    d.boot_id_file.write_text("boot-2\n")
    d.checkpoint.write_bytes(b"")

    d.start(wait=False)
    served = served_or_exited(d)
    if served:  # it forgot "first" (only the journal was applied): npu-0-0 went to another claim
        d.stop()
    assert not served
    assert_refused(d, "checkpoint.journal", second["metadata"]["uid"])
    assert d.checkpoint.read_bytes() == b""


def test_a_hard_vnpu_ledger_entry_says_a_claim_was_prepared(short_tmp):
    """After a reboot the vNPU outlives it (vnpu-cfg-recover, npu-smi's default) and the ledger
    names it: starting empty destroyed it as an orphan (reconcile_side_effects)."""
    root = short_tmp / "sa"
    host = SimHost(root)
    host.state_dir = root / "plugins" / DRIVER / "profiles"
    d = DaemonProcess(root, profiles="hard-vNPU", env=host.env, extra_args=daemon_args(host)).start()
    claim = write_claim(d.root, claim_object("vnpu", results=[("npu", "vnpu-0-0-vir05-1c-8g-0")]))
    k = Kubelet(d)
    assert k.prepare(claim).claims[claim["metadata"]["uid"]].error == ""
    k.close()
    d.stop()
    shutil.rmtree(d.cdi_dir)
    host.reboot("boot-2")
    d.checkpoint.write_bytes(b"")
    ledger = host.ledger()

    d.start(wait=False)
    served = served_or_exited(d)
    if served:
        d.stop()
    assert (served, vnpu_keys(host.vnpus()), host.ledger()) == (False, {(4, 0, 105)}, ledger)
    assert_refused(d, f"hard-vNPU ledger entry {host.state_dir / 'hard-vNPU' / ledger[0]}")


def test_an_emptied_checkpoint_with_nothing_prepared_is_set_aside(short_tmp):
    d = DaemonProcess(short_tmp / "sa").start()
    d.stop()
    d.checkpoint.write_bytes(b"")
    d.start()
    assert len(list(d.checkpoint.parent.glob("checkpoint.json.corrupt-*"))) == 1
    assert "set it aside and starting empty" in d.log_text()
    d.stop()
