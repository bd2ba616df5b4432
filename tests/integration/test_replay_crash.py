"""kill -9 inside a replay after a reboot, of a claim whose profile has node side effects: a restart
must leave nothing the replay made that no record names, and the kubelet's retry must prepare it.

A replay after a reboot runs the side effects again (replay.py). It used to run them on the
``PrepareCompleted`` record of the earlier boot, with no ``PrepareStarted`` phase: a kill after
they ran and before the record took their result left what they made unrecorded, for good. The
profile here follows the contract of docs/writing-a-profile.md: what it makes is named after the
claim UID, ``unprepare_side_effects(record)`` removes what ``record`` names and
``unprepare_side_effects(None)`` everything of the claim. What it makes lives in a directory that a
reboot empties (as a tmpfs does), so a replay after a reboot must make it again.
"""

from __future__ import annotations

import os
import shutil

import grpc
import pytest

from ascend_dra.observe.faults import POINTS
from tests.claimfiles import claim_object, write_claim
from tests.distributions import write_distribution
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

MADE = '''
import os
import uuid
from pathlib import Path

from ascend_dra.profiles.fake import FakeProfile

DIR = Path(os.environ["MADE_DIR"])


class Made(FakeProfile):
    name = "made"
    cdi_class = "made"

    async def prepare_side_effects(self, claim, devices, ctx):
        DIR.mkdir(parents=True, exist_ok=True)
        path = DIR / f"{claim.uid}-{uuid.uuid4().hex[:8]}"
        path.write_text(claim.uid)
        return {"file": str(path)}

    async def unprepare_side_effects(self, record, ctx):
        paths = [Path(record["file"])] if record is not None else DIR.glob(f"{ctx.claim_uid}-*")
        for path in paths:
            path.unlink(missing_ok=True)


def factory():
    return Made()
'''

#: The replay's own points, and the journal's: before the fix, journal:before-append in a replay
#: after a reboot was the write of the side effects' result.
REPLAY_POINTS = [p for p in POINTS if p.startswith("replay:")] + ["journal:before-append", "journal:after-append"]


@pytest.fixture
def made(short_tmp, tmp_path):
    vendor = tmp_path / "vendor"
    write_distribution(vendor, "made-vendor-profile", {"made": MADE})
    root = short_tmp / "sa"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(vendor), os.environ.get("PYTHONPATH")])),
           "MADE_DIR": str(short_tmp / "run" / "made")}
    d = DaemonProcess(root, profiles="made", env=env)
    yield d, short_tmp / "run" / "made"
    d.stop()


def made_files(directory) -> set[str]:
    return {p.name for p in directory.iterdir()} if directory.is_dir() else set()


def metadata_dirs(d: DaemonProcess) -> set[str]:
    """The claim uids with a device metadata directory (KEP-5304; on the plugin dir's disk: a reboot keeps it)."""
    root = d.checkpoint.parent / "device-metadata"
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


def recorded_files(d: DaemonProcess) -> set[str]:
    return {os.path.basename(r["side_effects"]["made"]["file"]) for r in d.records().values()
            if (r.get("side_effects") or {}).get("made")}


@pytest.mark.parametrize("point", REPLAY_POINTS)
def test_kill9_inside_a_replay_after_a_reboot_leaves_nothing_unrecorded(made, point):
    d, run = made
    d.start()
    claim = write_claim(d.root, claim_object("survivor", results=[("npu", "npu-0-0")]))
    uid = claim["metadata"]["uid"]
    k = Kubelet(d)
    assert k.prepare(claim).claims[uid].error == ""
    k.close()
    d.stop()
    shutil.rmtree(run)  # a reboot: the tmpfs is empty, and so is the CDI dir
    shutil.rmtree(d.cdi_dir)
    d.boot_id_file.write_text("boot-2\n")

    d.start(extra_env={"ASCEND_DRA_CRASH_AT": point})
    k = Kubelet(d)
    with pytest.raises(grpc.RpcError):
        k.prepare(claim)
    k.close()
    assert d.wait_exit() == -9

    d.start()
    assert made_files(run) <= recorded_files(d)  # nothing made that no record names
    assert all(r["state"] == "PrepareCompleted" for r in d.records().values())
    assert metadata_dirs(d) <= set(d.records())
    k = Kubelet(d)
    assert k.prepare(claim).claims[uid].error == ""
    assert made_files(run) == recorded_files(d) and len(made_files(run)) == 1
    assert (d.cdi_dir / f"k8s.{DRIVER}-made_{uid}.yaml").exists()
    assert (d.checkpoint.parent / "device-metadata" / uid / "npu" / "metadata.json").is_file()
    assert d.records()[uid]["boot_id"] == "boot-2"
    assert k.unprepare(claim).claims[uid].error == ""
    assert made_files(run) == set() and d.records() == {} and metadata_dirs(d) == set()
    k.close()
