"""File systems that really fill (small tmpfs mounts; the tests need root, as CI has): the daemon's
state directory (checkpoint, journal, hard-vNPU ledger), its CDI directory, and HAMivNPUCore's
per-claim local dirs under the host root. Claims are prepared one by one until the disk refuses
one; that claim fails with the file and the cause, the claims before it are untouched, and once
the filler is removed the same daemon prepares it. Injected faults at each write in turn are in
tests/integration/test_disk_faults.py.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.hardvnpu import vnpu_keys, vnpus_of_records
from tests.integration.daemon import Kubelet
from tests.integration.test_disk_faults import Node, ids, resolves, uid


@pytest.fixture
def mounts():
    """``mount(path, size)``: a tmpfs of ``size`` and 128 inodes at ``path``, unmounted at teardown."""
    mounted: list[Path] = []

    def mount(path: Path, size: str = "256k") -> Path:
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},nr_inodes=128,mode=0755", "tmpfs", str(path)],
                       check=True)
        mounted.append(path)
        return path
    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path, *, inodes: bool = True) -> list[Path]:
    """Take every free block, then (with ``inodes``) every free inode, of the file system
    ``directory`` is on; return the filler files (removing them gives the room back)."""
    fillers = [directory / ".filler"]
    fd = os.open(fillers[0], os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    if not inodes:
        return fillers
    try:
        while True:
            fillers.append(directory / f".filler-{len(fillers)}")
            fillers[-1].touch()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
        fillers.pop()
    return fillers


#: (profile, the directory whose file system fills)
CASES = {
    "state/fake": ("fake", "state"),
    "cdi/fake": ("fake", "cdi"),
    "host/HAMivNPUCore": ("HAMivNPUCore", "host"),
    "state/hard-vNPU": ("hard-vNPU", "state"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_disk_that_really_fills_fails_one_claim_and_its_room_coming_back_serves_it(short_tmp, mounts, case):
    profile, area = CASES[case]
    node = Node(short_tmp, profile)
    d = node.d
    if area == "state":
        full = mounts(d.root / "plugins")
    elif area == "cdi":
        full = mounts(d.cdi_dir)
    else:
        full = mounts(node.local_dir(node.claims[0]).parent)
    d.start()
    k = Kubelet(d)
    try:
        kept = node.claims[0]
        first = k.prepare(kept)
        assert first.claims[uid(kept)].error == "", first
        fillers = fill(full)
        prepared = [kept]
        refused = None
        for claim in node.claims[2:4] if profile != "fake" else node.claims[5:]:
            error = k.prepare(claim).claims[uid(claim)].error
            if not error:
                prepared.append(claim)  # it still fitted (the journal's last page had room)
                continue
            refused = claim
            found = re.fullmatch(rf"ResourceClaim default/{claim['metadata']['name']}: (?:writing the checkpoint: )?"
                                 r"No space left on device \((?P<path>/[^)]+)\)", error)
            assert found, error
            assert Path(found["path"]).is_relative_to(full), error
            break
        assert refused is not None, "the disk never filled"
        assert node.claim_spec(refused) is None
        if node.lab is not None:
            assert not node.local_dir(refused).exists()
        for claim in prepared:  # untouched, and answered again while the disk is full
            again = k.prepare(claim)
            assert again.claims[uid(claim)].error == "" and resolves(node, ids(again, claim)), again
        # The refused claim's deletion may still be pending while the disk is full: the files then
        # hold it as PrepareStarted (rolled back, never answered), not as prepared; it goes out with
        # the next write (docs/durable-state.md, "A full disk, an I/O error"), checked below.
        on_disk = {key: record.get("state") for key, record in d.records().items()}
        assert set(on_disk) - {uid(refused)} == set(map(uid, prepared)), on_disk
        assert on_disk.get(uid(refused), "PrepareStarted") == "PrepareStarted", on_disk
        if node.host is not None:
            assert vnpu_keys(node.host.vnpus()) == vnpus_of_records(d.records())

        for filler in fillers:  # room again: the same process serves
            filler.unlink()
        pid = d.proc.pid
        answer = k.prepare(refused)
        assert answer.claims[uid(refused)].error == "" and resolves(node, ids(answer, refused)), answer
        prepared.append(refused)
        for claim in prepared[1:]:
            assert k.unprepare(claim).claims[uid(claim)].error == ""
        assert d.proc.pid == pid and d.proc.poll() is None
        assert set(d.records()) == {uid(kept)}
        assert not node.temp_files()
        k.close()
        assert d.stop() == 0
        d.start()
        k = Kubelet(d)
        assert set(d.records()) == {uid(kept)}
        again = k.prepare(kept)
        assert again.claims[uid(kept)].error == "" and ids(again, kept) == ids(first, kept)
        if node.host is not None:
            assert vnpu_keys(node.host.vnpus()) == vnpus_of_records(d.records())
    finally:
        k.close()
        d.stop()


def test_a_state_disk_full_at_start_up_still_serves_and_catches_up(short_tmp, mounts):
    """A daemon restarted onto a state disk with no block free: its start-up compaction cannot be
    written, yet it serves the claims the files hold, and writes again once there is room. (With no
    inode free either, not even its socket can be made: start-up stops with one line naming the
    directory and the cause, preflight.py.)"""
    node = Node(short_tmp, "fake")
    d = node.d
    full = mounts(d.root / "plugins")
    d.start()
    k = Kubelet(d)
    kept = node.claims[0]
    assert k.prepare(kept).claims[uid(kept)].error == ""
    k.close()
    d.kill9()  # the journal holds the record: the start-up compacts
    fillers = fill(full, inodes=False)
    d.start()
    k = Kubelet(d)
    try:
        assert f"No space left on device ({d.checkpoint})" in d.log_text()
        again = k.prepare(kept)
        assert again.claims[uid(kept)].error == "" and resolves(node, ids(again, kept))
        for filler in fillers:
            filler.unlink()
        other = node.claims[5]
        assert k.prepare(other).claims[uid(other)].error == ""
        assert set(d.records()) == {uid(kept), uid(other)}
    finally:
        k.close()
        d.stop()
