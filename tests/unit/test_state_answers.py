"""DeviceState never answers what cannot be honoured (issue: CDI, Unprepare, admin access, checkpoint).

Each test drives a real DeviceState on a real filesystem (tmpfs mounts where a read-only CDI dir is
needed; the tests run as root) and checks what is on disk, not only what was answered.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import orjson
import pytest

from ascend_dra.cdi import naming
from ascend_dra.cdi.spec import DeviceNode
from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.profiles.base import ApplyContext, ContainerEdits, Device, Inventory, ProfileContext
from ascend_dra.profiles.fake import FakeProfile
from ascend_dra.state.devicestate import DeviceState
from tests.claimfiles import DRIVER, claim_object, write_claim
from tests.unit.test_state import NODE, SharedProfile, SideEffectProfile, make_state, on_disk, ref, share

pytestmark = pytest.mark.anyio

FAKE_KIND = f"k8s.{DRIVER}/npu"
COMMON = naming.common_spec_file(FAKE_KIND)


def answered_ids_resolve(root: Path, devices) -> None:
    """Every CDI id answered names a device of a spec file that is on disk now."""
    import yaml

    defined = set()
    for file in (root / "cdi").glob("*.yaml"):
        spec = yaml.safe_load(file.read_text())
        defined.update(f"{spec['kind']}={d['name']}" for d in spec["devices"])
    for device in devices:
        for cdi_id in device.cdi_device_ids:
            assert cdi_id in defined, f"{cdi_id} does not resolve"


# -- 1. every CDI id we answer resolves ---------------------------------------------------------------


async def test_common_spec_deleted_while_running_is_re_created_by_new_and_replayed_prepares(tmp_path):
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    first = write_claim(tmp_path, claim_object("first", results=[("npu", "npu-0-0")]))
    assert isinstance((await state.prepare([ref(first)]))[first["metadata"]["uid"]], list)
    (tmp_path / "cdi" / COMMON).unlink()
    replayed = (await state.prepare([ref(first)]))[first["metadata"]["uid"]]
    assert (tmp_path / "cdi" / COMMON).exists()
    answered_ids_resolve(tmp_path, replayed)
    (tmp_path / "cdi" / COMMON).unlink()
    second = write_claim(tmp_path, claim_object("second", results=[("npu", "npu-1-0")]))
    fresh = (await state.prepare([ref(second)]))[second["metadata"]["uid"]]
    answered_ids_resolve(tmp_path, fresh)


async def test_the_whole_cdi_dir_removed_while_running_is_re_created(tmp_path):
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    first = write_claim(tmp_path, claim_object("first", results=[("npu", "npu-0-0")]))
    await state.prepare([ref(first)])
    shutil.rmtree(tmp_path / "cdi")
    replayed = (await state.prepare([ref(first)]))[first["metadata"]["uid"]]
    assert isinstance(replayed, list), replayed
    answered_ids_resolve(tmp_path, replayed)
    shutil.rmtree(tmp_path / "cdi")
    second = write_claim(tmp_path, claim_object("second", results=[("npu", "npu-1-0")]))
    fresh = (await state.prepare([ref(second)]))[second["metadata"]["uid"]]
    assert isinstance(fresh, list), fresh
    answered_ids_resolve(tmp_path, fresh)


async def test_a_cdi_dir_that_cannot_be_re_created_fails_the_claim_instead_of_answering(tmp_path):
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    held = write_claim(tmp_path, claim_object("held", results=[("npu", "npu-0-0")]))
    await state.prepare([ref(held)])
    shutil.rmtree(tmp_path / "cdi")
    (tmp_path / "cdi").write_text("not a directory")
    uid = held["metadata"]["uid"]
    replayed = (await state.prepare([ref(held)]))[uid]
    assert str(replayed).startswith("ResourceClaim default/held: re-creating its CDI spec: File exists")
    other = write_claim(tmp_path, claim_object("other", results=[("npu", "npu-1-0")]))
    error = (await state.prepare([ref(other)]))[other["metadata"]["uid"]]
    assert str(error).startswith("ResourceClaim default/other: File exists")
    assert other["metadata"]["uid"] not in on_disk(tmp_path).claims  # rolled back, nothing held


class NodeProfile(SharedProfile):
    """Two exclusive devices whose edits name ``/dev/accel<N>`` as raw paths, as a profile that does
    not use ``ProfileContext.device_node`` may (looked for under ``--dev-root`` when the host's
    device directory, ``--dev-root-on-host``, is ``/dev``)."""

    name = "nodes"
    cdi_class = "accel"

    async def discover(self, ctx: ProfileContext) -> Inventory:
        return Inventory(devices=(Device("accel-0"), Device("accel-1")))

    def apply_config(self, config, devices: Sequence, ctx: ApplyContext) -> Mapping[str, ContainerEdits]:
        return {d.device: ContainerEdits(device_nodes=(DeviceNode(f"/dev/accel{d.device[-1]}"),
                                                       DeviceNode("/dev/accel_ctl"))) for d in devices}


async def node_state(root: Path) -> DeviceState:
    state = await make_state(root, {"nodes": NodeProfile()})
    dev = root / "dev"
    dev.mkdir()
    state.profile_ctx = attrs.evolve(state.profile_ctx, dev_root=dev, dev_root_on_host=Path("/dev"))
    return state


async def test_a_spec_naming_a_missing_device_node_is_refused_naming_it(tmp_path):
    state = await node_state(tmp_path)
    (tmp_path / "dev" / "accel0").touch()
    claim = write_claim(tmp_path, claim_object("c", results=[("npu", "accel-0")]))
    uid = claim["metadata"]["uid"]
    error = (await state.prepare([ref(claim)]))[uid]
    assert str(error) == (f"ResourceClaim default/c: device nodes /dev/accel_ctl (looked for at "
                          f"{tmp_path / 'dev' / 'accel_ctl'}) do not exist on node {NODE}; the NPU driver may not be "
                          "loaded yet, or the device was removed. Nothing was prepared; the kubelet retries")
    assert uid not in on_disk(tmp_path).claims
    assert not list((tmp_path / "cdi").glob(f"*{uid}*"))  # no incomplete spec kept for a replay
    (tmp_path / "dev" / "accel_ctl").touch()
    assert isinstance((await state.prepare([ref(claim)]))[uid], list)
    assert on_disk(tmp_path).claims[uid].device_nodes == ("/dev/accel0", "/dev/accel_ctl")


async def test_a_replay_after_the_device_node_vanished_fails_loudly_and_keeps_the_hold(tmp_path):
    state = await node_state(tmp_path)
    for node in ("accel0", "accel_ctl"):
        (tmp_path / "dev" / node).touch()
    claim = write_claim(tmp_path, claim_object("c", results=[("npu", "accel-0")]))
    uid = claim["metadata"]["uid"]
    await state.prepare([ref(claim)])
    (tmp_path / "dev" / "accel0").unlink()
    error = (await state.prepare([ref(claim)]))[uid]
    assert (f"device nodes /dev/accel0 (looked for at {tmp_path / 'dev' / 'accel0'}) named by its CDI spec no "
            "longer exist") in str(error)
    assert on_disk(tmp_path).claims[uid].state == "PrepareCompleted"  # still held until unprepared
    assert await state.unprepare([ref(claim)]) == {uid: None}


async def test_an_ascend_node_without_hisi_hdc_fails_the_prepare_naming_it(tmp_path):
    from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
    from tests.unit.test_ascend_profiles import host_root, lab_310p3

    ctx = attrs.evolve(lab_310p3(tmp_path), node_name=NODE)
    (ctx.dev_root / "hisi_hdc").unlink()
    profile = Npu310PProfile(host_root=host_root(tmp_path))
    state = await make_state(tmp_path / "node", {"npu-310P": profile})
    state.profile_ctx = ctx
    state.set_inventories({"npu-310P": await profile.discover(ctx)})
    claim = write_claim(tmp_path / "node", claim_object("c", results=[("npu", "npu-0-0")]))
    error = (await state.prepare([ref(claim)]))[claim["metadata"]["uid"]]
    # A lab tree (--dev-root alone): the spec names the lab's node, and the refusal that path.
    assert str(error).startswith(f"ResourceClaim default/c: device nodes {ctx.dev_root / 'hisi_hdc'} do not exist "
                                 f"on node {NODE}")
    (ctx.dev_root / "hisi_hdc").touch()
    assert isinstance((await state.prepare([ref(claim)]))[claim["metadata"]["uid"]], list)


# -- 2. a device is released only after its spec is gone ----------------------------------------------


@pytest.fixture
def frozen_cdi(tmp_path):
    """``tmp_path/cdi`` on its own tmpfs; ``freeze()`` makes it read-only, ``thaw()`` writable."""
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(cdi)], check=True)

    class Mount:
        @staticmethod
        def freeze() -> None:
            subprocess.run(["mount", "-o", "remount,ro", str(cdi)], check=True)

        @staticmethod
        def thaw() -> None:
            subprocess.run(["mount", "-o", "remount,rw", str(cdi)], check=True)

    yield Mount
    subprocess.run(["umount", "-l", str(cdi)], check=True)


async def test_unprepare_that_cannot_remove_the_spec_keeps_the_device_held(tmp_path, frozen_cdi):
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    first = write_claim(tmp_path, claim_object("first", results=[("npu", "npu-0-0")]))
    uid = first["metadata"]["uid"]
    await state.prepare([ref(first)])
    frozen_cdi.freeze()
    error = (await state.unprepare([ref(first)]))[uid]
    assert "Read-only file system" in str(error) and "its devices stay held" in str(error)
    assert on_disk(tmp_path).claims[uid].state == "PrepareCompleted"
    frozen_cdi.thaw()
    second = write_claim(tmp_path, claim_object("second", results=[("npu", "npu-0-0")]))
    refused = (await state.prepare([ref(second)]))[second["metadata"]["uid"]]
    assert f"device npu-0-0 is already prepared for ResourceClaim default/first (uid {uid})" in str(refused)
    assert await state.unprepare([ref(first)]) == {uid: None}  # the kubelet's retry
    assert not (tmp_path / "cdi" / naming.claim_spec_file(FAKE_KIND, uid)).exists()
    assert isinstance((await state.prepare([ref(second)]))[second["metadata"]["uid"]], list)


async def test_start_up_over_an_undeletable_orphan_spec_starts_and_retries_the_removal(tmp_path, frozen_cdi):
    orphan = tmp_path / "cdi" / naming.claim_spec_file(FAKE_KIND, "0c6f1f3e-0000-4000-8000-000000000001")
    orphan.write_text("kind: k8s.ascend.project-hami.io/npu\n")
    (tmp_path / "cdi" / COMMON).write_text("x")
    frozen_cdi.freeze()
    state = await make_state(tmp_path, {"fake": FakeProfile()})  # no exception: start-up goes on
    assert state.cleanup_pending and orphan.exists()
    await state.retry_cleanup()
    assert state.cleanup_pending and orphan.exists()  # still read-only: kept for the next retry
    frozen_cdi.thaw()
    await state.retry_cleanup()
    assert not state.cleanup_pending and not orphan.exists()


async def test_start_up_whose_rollback_fails_keeps_the_record_and_retries(tmp_path):
    profile = SideEffectProfile()
    state = await make_state(tmp_path, {"effects": profile})
    claim = write_claim(tmp_path, claim_object("c", results=[("a", "hw-0")]))
    uid = claim["metadata"]["uid"]
    await state.prepare([ref(claim)])
    await state.close()
    record = on_disk(tmp_path).claims[uid]
    ckpt.save(tmp_path / "plugin" / ckpt.CHECKPOINT_FILE,
              ckpt.CheckpointData("boot-1", {uid: attrs.evolve(record, state=ckpt.PREPARE_STARTED)}))
    profile.fail_unprepares = 1
    restarted = await make_state(tmp_path, {"effects": profile})  # the rollback fails; start-up goes on
    assert restarted.cleanup_pending and uid in on_disk(tmp_path).claims
    other = write_claim(tmp_path, claim_object("other", results=[("a", "hw-0")]))
    assert "is already prepared for" in str((await restarted.prepare([ref(other)]))[other["metadata"]["uid"]])
    await restarted.retry_cleanup()
    assert not restarted.cleanup_pending and uid not in on_disk(tmp_path).claims
    assert isinstance((await restarted.prepare([ref(other)]))[other["metadata"]["uid"]], list)


# -- 3. admin access (KEP-5018) ---------------------------------------------------------------------


def admin(device: str) -> dict:
    return {"request": "npu", "driver": DRIVER, "pool": NODE, "device": device, "adminAccess": True}


@pytest.mark.parametrize("admin_first", [False, True], ids=["workload-first", "admin-first"])
async def test_admin_access_is_neither_guarded_nor_a_holder(tmp_path, admin_first):
    profile = SideEffectProfile()
    state = await make_state(tmp_path, {"effects": profile})
    workload = write_claim(tmp_path, claim_object("workload", results=[("a", "hw-0")]))
    monitor = write_claim(tmp_path, claim_object("monitor", results=[admin("hw-0")]))
    order = [monitor, workload] if admin_first else [workload, monitor]
    for claim in order:
        result = (await state.prepare([ref(claim)]))[claim["metadata"]["uid"]]
        assert isinstance(result, list), result
    # The admin claim got the device's spec but no side effect (no vNPU created for it).
    assert [c for c in profile.calls if c[1] == monitor["metadata"]["uid"]] == []
    assert on_disk(tmp_path).claims[monitor["metadata"]["uid"]].devices[0].admin_access is True
    # A second workload claim is still refused: the first one holds the device, the admin claim does not count.
    late = write_claim(tmp_path, claim_object("late", results=[("a", "hw-0")]))
    assert "ResourceClaim default/workload" in str((await state.prepare([ref(late)]))[late["metadata"]["uid"]])


@pytest.mark.parametrize("both_admin", [False, True], ids=["workload-and-admin", "admin-twice"])
async def test_one_device_twice_in_a_claim_with_admin_access_is_refused_plainly(tmp_path, both_admin):
    # kubernetes/kubernetes#131269: an allocator gave one claim a device for a workload request and
    # again for an admin-access one. Both CDI devices had one name and the error blamed the profile
    # ("profile fake produced invalid CDI spec: duplicate device"); allocators no longer do it (#131299).
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    first = admin("npu-0-0") if both_admin else {**admin("npu-0-0"), "adminAccess": False, "request": "work"}
    claim = write_claim(tmp_path, claim_object("mon", results=[first, {**admin("npu-0-0"), "request": "mon"}]))
    error = (await state.prepare([ref(claim)]))[claim["metadata"]["uid"]]
    assert str(error) == ("ResourceClaim default/mon: device npu-0-0 is allocated twice in this claim, once with "
                          "admin access; a claim may use a device only once")
    assert on_disk(tmp_path).claims == {}


# -- 4. an exclusive hold takes the whole device -------------------------------------------------------


async def test_an_exclusive_hold_is_not_shared_after_the_device_becomes_shareable(tmp_path):
    profile = SharedProfile()
    state = await make_state(tmp_path, {"shared": profile})
    holder = write_claim(tmp_path, claim_object("holder", results=[("npu", "chip-0")]))
    await state.prepare([ref(holder)])
    inventory = state.inventories["shared"]
    shareable = tuple(attrs.evolve(d, allow_multiple_allocations=True) if d.name == "chip-0" else d
                      for d in inventory.devices)
    state.set_inventories({"shared": attrs.evolve(inventory, devices=shareable)})
    taker = write_claim(tmp_path, claim_object("taker", results=[share("chip-0", "1Gi", "1")]))
    error = (await state.prepare([ref(taker)]))[taker["metadata"]["uid"]]
    assert str(error) == (f"ResourceClaim default/taker: device chip-0 is already prepared for ResourceClaim "
                          f"default/holder (uid {holder['metadata']['uid']}), which holds it exclusively (it was "
                          "allocated while the device allowed one allocation only)")
    await state.unprepare([ref(holder)])
    assert isinstance((await state.prepare([ref(taker)]))[taker["metadata"]["uid"]], list)


# -- 5. checkpoint compatibility in both directions ---------------------------------------------------


def edit_checkpoint(root: Path, edit) -> None:
    """Rewrite the stored records the way another release might have written them (valid checksum)."""
    path = root / "plugin" / ckpt.CHECKPOINT_FILE
    doc = orjson.loads(path.read_bytes())
    edit(doc["data"]["claims"])
    data = orjson.dumps(doc["data"], option=orjson.OPT_SORT_KEYS)
    doc["checksum"] = "sha256:" + __import__("hashlib").sha256(data).hexdigest()
    path.write_bytes(orjson.dumps(doc))


async def two_prepared(root: Path) -> tuple[dict, dict]:
    state = await make_state(root, {"fake": FakeProfile()})
    a = write_claim(root, claim_object("a", results=[("npu", "npu-0-0")]))
    b = write_claim(root, claim_object("b", results=[("npu", "npu-1-0")]))
    await state.prepare([ref(a), ref(b)])
    await state.close()  # a clean stop: the snapshot alone holds the records (another release edits it)
    return a, b


async def test_a_record_in_a_newer_state_starts_refuses_its_claim_and_holds_its_device(tmp_path):
    a, b = await two_prepared(tmp_path)
    ua, ub = a["metadata"]["uid"], b["metadata"]["uid"]
    edit_checkpoint(tmp_path, lambda claims: claims[ua].update(state="UnprepareStarted"))
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    results = await state.prepare([ref(a), ref(b)])
    assert str(results[ua]) == ("ResourceClaim default/a: its checkpoint record is in state 'UnprepareStarted', "
                                "which this release does not know (it knows PrepareCompleted, PrepareStarted); "
                                "unprepare the claim or run the release that wrote it")
    assert isinstance(results[ub], list)
    c = write_claim(tmp_path, claim_object("c", results=[("npu", "npu-0-0")]))
    assert "already prepared for ResourceClaim default/a" in str((await state.prepare([ref(c)]))[c["metadata"]["uid"]])
    assert (await state.unprepare([ref(a)]))[ua] is None
    assert ua not in on_disk(tmp_path).claims
    assert isinstance((await state.prepare([ref(c)]))[c["metadata"]["uid"]], list)


async def test_null_consumed_capacity_starts_and_replays(tmp_path):
    a, _ = await two_prepared(tmp_path)
    ua = a["metadata"]["uid"]
    edit_checkpoint(tmp_path, lambda claims: claims[ua]["devices"][0].update(consumed_capacity=None))
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    answered = (await state.prepare([ref(a)]))[ua]
    assert isinstance(answered, list) and answered[0].cdi_device_ids


async def test_a_device_record_without_cdi_ids_fails_the_replay_loudly(tmp_path):
    a, b = await two_prepared(tmp_path)
    ua = a["metadata"]["uid"]
    edit_checkpoint(tmp_path, lambda claims: claims[ua]["devices"][0].pop("cdi_device_ids"))
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    results = await state.prepare([ref(a), ref(b)])
    assert str(results[ua]) == ("ResourceClaim default/a: its checkpoint record names no CDI device ids or spec "
                                "files (written by an incompatible release), so the answer cannot be given again; "
                                "unprepare the claim (delete its pod) and prepare it again")
    assert isinstance(results[b["metadata"]["uid"]], list)


async def test_an_unreadable_record_is_kept_refused_and_holds_its_device(tmp_path):
    a, b = await two_prepared(tmp_path)
    ua, ub = a["metadata"]["uid"], b["metadata"]["uid"]
    odd = {"boot_id": 7, "devices": [{"device": "npu-0-0", "request": 1}]}  # another release's shape
    edit_checkpoint(tmp_path, lambda claims: claims[ua].update(odd))
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    results = await state.prepare([ref(a), ref(b)])
    assert str(results[ua]).startswith("ResourceClaim default/a: its checkpoint record was written by another "
                                       "ascend-dra release and cannot be read by this one (")
    assert isinstance(results[ub], list)
    assert ua in orjson.loads((tmp_path / "plugin" / ckpt.CHECKPOINT_FILE).read_bytes())["data"]["claims"]
    spec = tmp_path / "cdi" / naming.claim_spec_file(FAKE_KIND, ua)
    assert spec.exists()  # named by the unreadable record: not an orphan
    c = write_claim(tmp_path, claim_object("c", results=[("npu", "npu-0-0")]))
    assert "a checkpoint record this release cannot read" in str((await state.prepare([ref(c)]))[c["metadata"]["uid"]])
    assert (await state.unprepare([ref(a)]))[ua] is None
    assert not spec.exists() and ua not in on_disk(tmp_path).claims
    assert isinstance((await state.prepare([ref(c)]))[c["metadata"]["uid"]], list)


async def test_a_damaged_checkpoint_that_records_no_claim_is_set_aside(tmp_path):
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / ckpt.CHECKPOINT_FILE).write_bytes(b"")
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    assert [p.name.startswith("checkpoint.json.corrupt-") for p in plugin.iterdir()].count(True) == 1
    assert state.prepared_claims == {}


async def test_a_damaged_checkpoint_that_records_claims_still_stops_start_up(tmp_path):
    await two_prepared(tmp_path)
    path = tmp_path / "plugin" / ckpt.CHECKPOINT_FILE
    path.write_bytes(path.read_bytes().replace(b'"npu-0-0"', b'"npu-0-9"'))  # checksum no longer matches
    with pytest.raises(ckpt.CheckpointCorrupt) as raised:
        await make_state(tmp_path, {"fake": FakeProfile()})
    assert raised.value.reason == "checksum mismatch (the file was modified or damaged)"
    assert path.exists()  # left for inspection
