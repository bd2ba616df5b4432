"""Claim device status (KEP-4817): the entries built from what Prepare did, and the apply body."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from ascend_dra.cluster.claimstatus import ClaimStatusWriter
from ascend_dra.cluster.statusentries import MAX_DATA_BYTES, PreparedClaim, apply_body, cdi_env, device_entries
from ascend_dra.cluster.statushook import StatusHook
from ascend_dra.model import PreparedDevice
from tests.claimfiles import claim_object, write_claim

DRIVER = "ascend.project-hami.io"
KIND = f"k8s.{DRIVER}/npu"


def _spec(path: Path, devices: dict[str, list[str]]) -> Path:
    path.write_text(yaml.safe_dump({"cdiVersion": "0.5.0", "kind": KIND, "devices": [
        {"name": name, "containerEdits": {"env": env}} for name, env in devices.items()]}))
    return path


def test_entries_carry_physical_id_quota_env_and_vnpu_id(tmp_path):
    spec = _spec(tmp_path / "claim.yaml", {
        "uid-1-npu-0-0": ["ASCEND_VISIBLE_DEVICES=3", "NPU_MEM_QUOTA=4096", "NPU_PRIORITY=50", "LD_PRELOAD=/x.so"],
        "uid-1-npu-1-0": ["ASCEND_VISIBLE_DEVICES=5"]})
    claim = PreparedClaim(
        "ns", "c", "uid-1",
        (PreparedDevice(("req",), "node-1", "npu-0-0", (f"{KIND}=common", f"{KIND}=uid-1-npu-0-0"), "4d0c"),
         PreparedDevice(("req",), "node-1", "npu-1-0", (f"{KIND}=uid-1-npu-1-0",))),
        attributes={"npu-0-0": {"physicalID": 3}, "npu-1-0": {"physicalID": 5}},
        spec_files=(spec, tmp_path / "gone.yaml"),
        side_effects={"npu-310p": {"devices": {"npu-1-0": {"vnpuID": 116}}}})
    assert device_entries(DRIVER, claim, cdi_env(claim.spec_files)) == [
        {"driver": DRIVER, "pool": "node-1", "device": "npu-0-0", "shareID": "4d0c",
         "data": {"physicalID": 3, "env": {"ASCEND_VISIBLE_DEVICES": "3", "NPU_MEM_QUOTA": "4096",
                                           "NPU_PRIORITY": "50"}}},
        {"driver": DRIVER, "pool": "node-1", "device": "npu-1-0",
         "data": {"physicalID": 5, "env": {"ASCEND_VISIBLE_DEVICES": "5"}, "vnpuID": 116}},
    ]


def test_data_over_10_kib_drops_the_env_and_keeps_the_ids():
    claim = PreparedClaim("ns", "c", "u", (PreparedDevice(("r",), "p", "d", (f"{KIND}=u-d",)),),
                          attributes={"d": {"physicalID": 0}})
    [entry] = device_entries(DRIVER, claim, {f"{KIND}=u-d": {f"NPU_X{i}": "v" * 100 for i in range(200)}})
    assert entry["data"] == {"physicalID": 0}
    assert len(json.dumps(entry["data"])) <= MAX_DATA_BYTES


def test_a_device_with_nothing_known_has_no_data():
    claim = PreparedClaim("ns", "c", "u", (PreparedDevice(("r",), "p", "d", ()),))
    assert device_entries(DRIVER, claim, {}) == [{"driver": DRIVER, "pool": "p", "device": "d"}]


def test_the_apply_body_names_the_claim_and_its_uid_as_a_precondition():
    assert apply_body("ns", "c", "u", []) == {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u"}, "status": {"devices": []}}


# -- StatusHook.restore: the statuses of a restarted daemon's prepared claims -------------------------


class CountingApi:
    """Stands in for the API server (nothing to store here; tests/cluster checks the real writes):
    notes each status write's claim and the writer's backlog when it went out."""

    def __init__(self) -> None:
        self.writer: ClaimStatusWriter | None = None
        self.written: list[str] = []
        self.backlogs: list[int] = []

    async def call(self, method: str, path: str, **kwargs: Any) -> dict:
        self.written.append(path.split("/")[-2])
        self.backlogs.append(self.writer.backlog if self.writer is not None else -1)
        return {}


async def prepared_state(root: Path, names: Sequence[str]) -> tuple[Any, list[dict]]:
    from ascend_dra.profiles.fake import FakeProfile
    from tests.unit.test_state import make_state, ref

    state = await make_state(root, {"fake": FakeProfile()})
    claims = [write_claim(root, claim_object(name, results=[("npu", f"npu-{i}-0")])) for i, name in enumerate(names)]
    for obj in claims:
        assert isinstance((await state.prepare([ref(obj)]))[obj["metadata"]["uid"]], list)
    return state, claims


async def written(writer: ClaimStatusWriter, before: Callable[[], Awaitable[None]] | None = None) -> None:
    """Run ``writer`` until nothing waits (after ``before``, with the writer already running)."""
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        with anyio.fail_after(10):
            if before is not None:
                await before()
            while writer.backlog:  # noqa: ASYNC110 (polls the queue)
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_restore_queues_the_claims_prepared_in_this_boot_with_their_specs_and_devices(tmp_path):
    from ascend_dra.model import Inventory
    from ascend_dra.profiles.fake import FakeProfile
    from tests.unit.test_state import make_state, ref

    state, (a, b, c, d) = await prepared_state(tmp_path, ["a", "b", "c", "d"])
    await state.unprepare([ref(b)])  # unprepared: no record
    (tmp_path / "cdi" / state.prepared_claims[c["metadata"]["uid"]].cdi_specs[0]).unlink()  # a tmpfs after reboot
    fake = state.inventories["fake"]  # d's device, npu-3-0, no longer discovered
    state.set_inventories({"fake": Inventory(devices=tuple(x for x in fake.devices if x.name != "npu-3-0"))})
    api = CountingApi()
    writer = ClaimStatusWriter(api, DRIVER, pool="node-1", quiet_s=0.001)
    uids = [o["metadata"]["uid"] for o in (a, b, c, d)]
    assert await StatusHook(writer, state, tmp_path / "cdi").restore(uids) == 1
    await written(writer)
    assert api.written == ["a"]
    # Recorded in another boot (a restart after a reboot, before the kubelet prepares them again):
    rebooted = await make_state(tmp_path, {"fake": FakeProfile()}, boot_id="boot-2")
    assert await StatusHook(writer, rebooted, tmp_path / "cdi").restore(uids) == 0


@pytest.mark.anyio
async def test_a_restored_status_no_longer_due_when_its_turn_comes_is_not_written(tmp_path):
    """Queued, then the claim unprepared (its removal replaces the job only if it was queued too)
    or another instance started: writing it would put entries back on a claim no longer prepared."""
    from tests.unit.test_state import ref

    state, (a, b, c) = await prepared_state(tmp_path, ["a", "b", "c"])
    api = CountingApi()
    writer = ClaimStatusWriter(api, DRIVER, pool="node-1", quiet_s=0.001)
    others = []
    uids = [o["metadata"]["uid"] for o in (a, b, c)]
    assert await StatusHook(writer, state, tmp_path / "cdi").restore(uids, alone=lambda: not others) == 3
    await state.unprepare([ref(b)])  # by the state alone: no hook, so no removal job replaces it
    await written(writer)
    assert sorted(api.written) == ["a", "c"]
    assert await StatusHook(writer, state, tmp_path / "cdi").restore(uids, alone=lambda: not others) == 2
    others.append("pod-new")  # a newer instance came up
    await written(writer)
    assert sorted(api.written) == ["a", "c"]


@pytest.mark.anyio
async def test_restore_queues_while_few_claims_wait_for_the_writer(tmp_path, monkeypatch):
    import ascend_dra.cluster.statushook

    monkeypatch.setattr(ascend_dra.cluster.statushook, "RESTORE_BACKLOG", 1)
    state, claims = await prepared_state(tmp_path, ["a", "b", "c", "d"])
    api = CountingApi()
    writer = api.writer = ClaimStatusWriter(api, DRIVER, pool="node-1", quiet_s=0.001)

    async def restore() -> None:
        assert await StatusHook(writer, state, tmp_path / "cdi").restore(
            [o["metadata"]["uid"] for o in claims], poll_s=0.01) == 4

    await written(writer, restore)
    assert sorted(api.written) == ["a", "b", "c", "d"] and writer.failed == 0
    assert max(api.backlogs) == 1  # each write went out alone: none was queued while another waited


@pytest.mark.anyio
async def test_a_restored_status_is_checked_again_before_each_retry(tmp_path):
    """The API server refused the first try; meanwhile a newer instance started (and may unprepare
    the claim): the retry must not write it. The check was made once per round of four tries."""
    from ascend_dra.cluster.apiclient import ApiError

    state, (a,) = await prepared_state(tmp_path, ["a"])
    others: list[str] = []

    class Refusing(CountingApi):
        async def call(self, method: str, path: str, **kwargs: Any) -> dict:
            await super().call(method, path, **kwargs)
            others.append("pod-new")  # came up while this request failed
            raise ApiError(503, "the API server is shutting down")

    api = Refusing()
    writer = ClaimStatusWriter(api, DRIVER, pool="node-1", quiet_s=0.001)
    assert await StatusHook(writer, state, tmp_path / "cdi").restore([a["metadata"]["uid"]],
                                                                     alone=lambda: not others) == 1
    await written(writer)
    assert api.written == ["a"] and writer.deferrals == 0  # one request, then dropped


@pytest.mark.anyio
async def test_a_claim_repaired_only_in_a_later_pass_gets_its_status_restored_then(tmp_path, monkeypatch):
    """The API server was down at start: the first pass could not re-create claim b's spec, so the
    restore after it skipped b (a claim without its spec is not restorable). The statuses were
    restored after the first pass only, and b's was never written again."""
    import types

    from ascend_dra.node.upkeep import Upkeep
    from ascend_dra.state import recovery
    from ascend_dra.state.claims import ClaimUnreadable

    monkeypatch.setattr(recovery, "REPAIR_RETRY_FIRST_S", 0.0)
    state, (_, b) = await prepared_state(tmp_path, ["a", "b"])
    (tmp_path / "cdi" / state.prepared_claims[b["metadata"]["uid"]].cdi_specs[0]).unlink()
    outage = [True]
    real_get = state.claim_source.get

    async def get(*args: Any, **kwargs: Any) -> Any:
        if outage[0]:
            raise ClaimUnreadable("ResourceClaim default/b: reading it from the API server failed: timeout")
        return await real_get(*args, **kwargs)

    state.claim_source.get = get
    api = CountingApi()
    writer = ClaimStatusWriter(api, DRIVER, pool="node-1", quiet_s=0.001)

    upkeep = Upkeep(state, types.SimpleNamespace(health_interval=0.05, rolling_update_id=None, plugin_dir=tmp_path))

    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        tg.start_soon(upkeep.repair_loop, StatusHook(writer, state, tmp_path / "cdi"), tg)
        with anyio.fail_after(10):
            while api.written != ["a"]:  # noqa: ASYNC110 (polls what the API server got)
                await anyio.sleep(0.01)
            await anyio.sleep(0.2)  # several passes while b cannot be read: nothing more written
            assert api.written == ["a"]
            outage[0] = False
            while api.written != ["a", "b"]:  # noqa: ASYNC110
                await anyio.sleep(0.01)
            await anyio.sleep(0.2)  # and written once, not again at each pass
        tg.cancel_scope.cancel()
    assert api.written == ["a", "b"]


@pytest.mark.anyio
async def test_the_switch_to_a_merge_patch_is_not_a_failed_attempt(tmp_path):
    """The apply's 422 (a claim server-side apply cannot patch, _merge) used up an attempt: with
    attempts=1 the merge patch was never sent, and the write ended neither counted nor logged."""
    from ascend_dra.cluster.apiclient import ApiError

    state, (a,) = await prepared_state(tmp_path, ["a"])
    meta = a["metadata"]

    class ApplyRefused(CountingApi):
        async def call(self, method: str, path: str, **kwargs: Any) -> dict:
            await super().call(method, path, **kwargs)
            if kwargs.get("content_type") == "application/apply-patch+yaml":
                raise ApiError(422, "ResourceClaim.resource.k8s.io is invalid: status.allocation: field is immutable")
            if method == "GET":
                return {"metadata": {**meta, "resourceVersion": "7"}, "status": {}}
            return {}

    api = ApplyRefused()
    writer = ClaimStatusWriter(api, DRIVER, pool="node-1", quiet_s=0.001, attempts=1)
    StatusHook(writer, state, tmp_path / "cdi").after_prepare(meta["namespace"], meta["name"], meta["uid"],
                                                             state.restorable(meta["uid"])[1])
    await written(writer)
    assert len(api.written) == 3 and writer.applied == 1 and writer.failed == 0  # apply, GET, merge patch
