"""state.py: config precedence, and DeviceState driven directly on a real filesystem.

The profiles below are small in-test profiles that follow the contract in ``profiles/base.py``:
one publishes a shared device with consumable ``memory``/``cores``, one forgets a device's edits,
one changes the node (``prepare_side_effects`` / ``unprepare_side_effects``) and records every call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from ascend_dra.cdi import naming
from ascend_dra.cdi.store import CdiStore
from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.durable.journal import load_state
from ascend_dra.model import AllocatedDevice, ClaimAllocation, OpaqueConfig, PreparedDevice
from ascend_dra.profiles.base import (
    AllocatedDevice as ContractAllocatedDevice,
)
from ascend_dra.profiles.base import (
    ApplyContext,
    Capacity,
    CapacityRequestPolicy,
    ContainerEdits,
    Device,
    Inventory,
    Profile,
    ProfileContext,
)
from ascend_dra.profiles.fake import FakeConfig, FakeProfile
from ascend_dra.state.claims import StandaloneClaimSource
from ascend_dra.state.devicestate import ClaimRef, DeviceState, PrepareError, resolve_configs
from ascend_dra.state.planning import batches_by_device
from tests.claimfiles import DRIVER, claim_object, fake_config, write_claim

NODE = "node-1"
FAKE_KIND = f"k8s.{DRIVER}/npu"

assert ContractAllocatedDevice is AllocatedDevice


# -- resolve_configs --------------------------------------------------------------------------------


def config(source: str, index: int, requests: Sequence[str] = (), kind: str = "FakeConfig") -> OpaqueConfig:
    return OpaqueConfig(source, tuple(requests), DRIVER, {"apiVersion": f"{DRIVER}/v1alpha1", "kind": kind}, index)


KINDS = {"FakeConfig": FakeConfig}
ALL_KINDS = frozenset({"FakeConfig", "GpuConfig"})


@pytest.mark.parametrize(
    ("configs", "request_name", "chosen"),
    [
        pytest.param((), "npu", None, id="no-config-is-the-default"),
        pytest.param((config("FromClass", 0),), "npu", 0, id="class-only"),
        pytest.param((config("FromClass", 0), config("FromClaim", 1)), "npu", 1, id="claim-beats-class"),
        pytest.param((config("FromClaim", 0), config("FromClass", 1)), "npu", 0,
                     id="claim-beats-a-later-class-entry"),
        pytest.param((config("FromClaim", 0), config("FromClaim", 1)), "npu", 1, id="later-claim-entry-wins"),
        pytest.param((config("FromClass", 0), config("FromClass", 1)), "npu", 1, id="later-class-entry-wins"),
        pytest.param((config("FromClaim", 1), config("FromClaim", 0)), "npu", 1,
                     id="order-is-the-allocation-index-not-the-tuple-order"),
        pytest.param((config("FromClass", 0), config("FromClaim", 1, ["other"])), "npu", 0,
                     id="claim-entry-for-another-request-skipped"),
        pytest.param((config("FromClaim", 0, ["npu"]), config("FromClaim", 1, ["other"])), "npu", 0,
                     id="request-filter"),
        pytest.param((config("FromClaim", 0, ["a", "npu"]),), "npu", 0, id="one-of-several-requests"),
        pytest.param((config("FromClaim", 0, ["npu"]),), "npu/small", 0, id="req-matches-req-slash-sub"),
        pytest.param((config("FromClaim", 0, ["npu/small"]),), "npu/small", 0, id="req-slash-sub-exactly"),
        pytest.param((config("FromClaim", 0, ["npu/large"]),), "npu/small", None, id="other-subrequest"),
        pytest.param((config("FromClaim", 0, ["npu/small"]),), "npu", None, id="subrequest-does-not-match-base"),
        pytest.param((config("FromClaim", 0, ["np"]),), "npu", None, id="prefix-is-not-a-match"),
        pytest.param((config("FromClaim", 0), config("FromClaim", 1, kind="GpuConfig")), "npu", 0,
                     id="kind-of-another-profile-skipped"),
        pytest.param((config("FromClaim", 0), config("FromClaim", 1, kind="Bogus")), "npu", 1,
                     id="unknown-kind-kept-so-decoding-names-the-allowed-kinds"),
    ],
)
def test_resolve_configs_precedence(configs, request_name, chosen):
    claim = ClaimAllocation("uid-1", "default", "c", (), configs)
    result = AllocatedDevice(request_name, DRIVER, NODE, "npu-0-0")
    found = resolve_configs(claim, result, KINDS, ALL_KINDS)
    assert (None if found is None else found.index) == chosen


def test_resolve_configs_keeps_a_config_without_a_kind_mapping():
    broken = OpaqueConfig("FromClaim", (), DRIVER, ["not", "an", "object"], 0)  # type: ignore[arg-type]
    claim = ClaimAllocation("uid-1", "default", "c", (), (broken,))
    assert resolve_configs(claim, AllocatedDevice("npu", DRIVER, NODE, "npu-0-0"), KINDS, ALL_KINDS) is broken


# -- in-test profiles -------------------------------------------------------------------------------


@attrs.frozen
class SharedConfig:
    label: str = "default"


class SharedProfile:
    """One shared chip (``vnpu-0``: 32Gi of memory, 100 % of cores, multiple allocations) and one
    exclusive chip (``chip-0``)."""

    name = "shared"
    cdi_class = "vnpu"
    config_types: Mapping[str, type] = {"SharedConfig": SharedConfig}

    def default_config(self) -> SharedConfig:
        return SharedConfig()

    async def discover(self, ctx: ProfileContext) -> Inventory:
        return Inventory(devices=(
            Device("vnpu-0", capacities={"memory": Capacity("32Gi"), "cores": Capacity("100")},
                   allow_multiple_allocations=True),
            Device("chip-0", capacities={"memory": Capacity("32Gi")}),
        ), source="simulated")

    def validate(self, config: SharedConfig) -> None:
        pass

    def apply_config(self, config: SharedConfig, devices: Sequence[AllocatedDevice],
                     ctx: ApplyContext) -> Mapping[str, ContainerEdits]:
        return {d.device: ContainerEdits(env=(f"SHARED_LABEL={config.label}",
                                              f"SHARED_MEMORY={d.consumed_capacity.get('memory', '')}"))
                for d in devices}


class ForgetfulProfile(SharedProfile):
    """Returns edits for no device at all (a profile bug the daemon must report, not crash on)."""

    name = "forgetful"
    cdi_class = "forget"

    async def discover(self, ctx: ProfileContext) -> Inventory:
        return Inventory(devices=(Device("lost-0"),))

    def apply_config(self, config: Any, devices: Sequence[AllocatedDevice],
                     ctx: ApplyContext) -> Mapping[str, ContainerEdits]:
        return {}


class BrokenApplyProfile(SharedProfile):
    """apply_config raises an unexpected exception (a third-party profile bug)."""

    name = "broken"
    cdi_class = "broken"

    async def discover(self, ctx: ProfileContext) -> Inventory:
        return Inventory(devices=(Device("brk-0"),))

    def apply_config(self, config: Any, devices: Sequence[AllocatedDevice],
                     ctx: ApplyContext) -> Mapping[str, ContainerEdits]:
        raise RuntimeError("template table is empty")


class SideEffectProfile(SharedProfile):
    """Changes the node: records each call, and can be told to fail the next unprepare."""

    name = "effects"
    cdi_class = "hw"

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail_unprepares = 0

    async def discover(self, ctx: ProfileContext) -> Inventory:
        return Inventory(devices=(Device("hw-0"), Device("hw-1")))

    async def prepare_side_effects(self, claim: ClaimAllocation, devices: Sequence[AllocatedDevice],
                                   ctx: ApplyContext) -> dict[str, Any]:
        names = [d.device for d in devices]
        self.calls.append(("prepare", claim.uid, ctx.claim_uid, names))
        return {"created": names}

    async def unprepare_side_effects(self, side_effects: Any, ctx: ApplyContext) -> None:
        self.calls.append(("unprepare", ctx.claim_uid, side_effects))
        if self.fail_unprepares:
            self.fail_unprepares -= 1
            raise RuntimeError("vNPU destroy failed: device busy")


def test_in_test_profiles_follow_the_contract():
    for profile in (SharedProfile(), ForgetfulProfile(), BrokenApplyProfile(), SideEffectProfile()):
        assert isinstance(profile, Profile)


# -- DeviceState ------------------------------------------------------------------------------------


async def make_state(root: Path, profiles: Mapping[str, Any], boot_id: str = "boot-1", *,
                     device_metadata: bool = False) -> DeviceState:
    ctx = ProfileContext(node_name=NODE, driver_name=DRIVER, fake_devices=4, state_dir=root / "state")
    inventories = {name: await profile.discover(ctx) for name, profile in profiles.items()}
    (root / "plugin").mkdir(parents=True, exist_ok=True)
    state = DeviceState(driver_name=DRIVER, node_name=NODE, profiles=profiles, inventories=inventories,
                        profile_ctx=ctx, cdi=CdiStore(root / "cdi"), plugin_dir=root / "plugin", boot_id=boot_id,
                        claim_source=StandaloneClaimSource(root / "claims", DRIVER), device_metadata=device_metadata)
    await state.recover()
    return state


def ref(obj: dict) -> ClaimRef:
    meta = obj["metadata"]
    return ClaimRef(meta["namespace"], meta["name"], meta["uid"])


def share(device: str, memory: str, cores: str, request: str = "share", share_id: str = "") -> dict:
    return {"request": request, "driver": DRIVER, "pool": NODE, "device": device,
            "shareID": share_id or os.urandom(4).hex(), "consumedCapacity": {"memory": memory, "cores": cores}}


def on_disk(root: Path) -> ckpt.CheckpointData:
    """The durable state: the snapshot with the journal applied."""
    return load_state(root / "plugin")


pytestmark = pytest.mark.anyio


async def test_prepare_with_the_fake_profile_writes_spec_and_checkpoint(tmp_path):
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    obj = write_claim(tmp_path, claim_object("c1", results=[("npu", "npu-2-0")],
                                             configs=[fake_config(aicoreLimit=40)]))
    uid = obj["metadata"]["uid"]
    results = await state.prepare([ref(obj)])
    assert results == {uid: [PreparedDevice(("npu",), NODE, "npu-2-0",
                                            (f"{FAKE_KIND}={uid}-npu-2-0", f"{FAKE_KIND}=common"))]}
    spec_file = tmp_path / "cdi" / naming.claim_spec_file(FAKE_KIND, uid)
    assert "FAKE_NPU_AICORE_LIMIT=40" in spec_file.read_text()
    record = on_disk(tmp_path).claims[uid]
    assert (record.state, record.boot_id, record.cdi_specs) == ("PrepareCompleted", "boot-1", (spec_file.name,))
    assert await state.unprepare([ref(obj)]) == {uid: None}
    assert not spec_file.exists()
    assert on_disk(tmp_path).claims == {}


@pytest.mark.parametrize("batched", [pytest.param(False, id="one-call-each"), pytest.param(True, id="one-batch")])
async def test_shared_device_takes_claims_while_capacity_fits_and_refuses_the_overflow(tmp_path, batched):
    state = await make_state(tmp_path, {"shared": SharedProfile()})
    first = write_claim(tmp_path, claim_object("first", results=[share("vnpu-0", "8Gi", "50")]))
    second = write_claim(tmp_path, claim_object("second", results=[share("vnpu-0", "8Gi", "40")]))
    third = write_claim(tmp_path, claim_object("third", results=[share("vnpu-0", "8Gi", "20")]))
    if batched:
        results = await state.prepare([ref(first), ref(second), ref(third)])
    else:
        results = {}
        for obj in (first, second, third):
            results.update(await state.prepare([ref(obj)]))
    uids = [o["metadata"]["uid"] for o in (first, second, third)]
    assert [type(results[u]) for u in uids[:2]] == [list, list] and isinstance(results[uids[2]], PrepareError)
    assert str(results[uids[2]]) == ("ResourceClaim default/third: device vnpu-0 capacity cores: 20 requested but "
                                     "only 10 of 100 is free")
    assert sorted(on_disk(tmp_path).claims) == sorted(uids[:2])
    # Once a share is released, the third fits.
    await state.unprepare([ref(first)])
    assert isinstance((await state.prepare([ref(third)]))[uids[2]], list)


async def test_shared_device_refuses_memory_overflow_naming_what_is_free(tmp_path):
    state = await make_state(tmp_path, {"shared": SharedProfile()})
    first = write_claim(tmp_path, claim_object("first", results=[share("vnpu-0", "16Gi", "10")]))
    greedy = write_claim(tmp_path, claim_object("greedy", results=[share("vnpu-0", "20Gi", "10")]))
    await state.prepare([ref(first)])
    results = await state.prepare([ref(greedy)])
    assert str(results[greedy["metadata"]["uid"]]) == (
        "ResourceClaim default/greedy: device vnpu-0 capacity memory: 20Gi requested but only 16Gi of 32Gi "
        "is free")  # before: "only 17179869184 of 32Gi", bytes beside Gi (issue 40)


async def test_two_shares_of_one_shared_device_in_one_claim_count_together(tmp_path):
    state = await make_state(tmp_path, {"shared": SharedProfile()})
    obj = write_claim(tmp_path, claim_object("twice", results=[share("vnpu-0", "8Gi", "60", request="a"),
                                                               share("vnpu-0", "8Gi", "60", request="b")]))
    results = await state.prepare([ref(obj)])
    assert str(results[obj["metadata"]["uid"]]) == (
        "ResourceClaim default/twice: device vnpu-0 capacity cores: 60 requested but only 40 of 100 is free")


async def test_two_fitting_shares_in_one_claim_get_two_cdi_devices(tmp_path):
    state = await make_state(tmp_path, {"shared": SharedProfile()})
    obj = write_claim(tmp_path, claim_object("pair", results=[share("vnpu-0", "8Gi", "30", "a", "s1"),
                                                              share("vnpu-0", "4Gi", "30", "b/x", "s2")]))
    uid = obj["metadata"]["uid"]
    kind = f"k8s.{DRIVER}/vnpu"
    assert (await state.prepare([ref(obj)]))[uid] == [
        PreparedDevice(("a",), NODE, "vnpu-0", (f"{kind}={uid}-vnpu-0-s1", f"{kind}=common"), "s1"),
        PreparedDevice(("b",), NODE, "vnpu-0", (f"{kind}={uid}-vnpu-0-s2", f"{kind}=common"), "s2"),
    ]


async def test_two_shares_of_one_device_in_one_claim_each_get_their_own_edits(tmp_path):
    # apply_config answers {device name: edits}; with both shares in one call the second overwrote
    # the first, and both CDI devices carried the last share's edits. The planner now calls it
    # once per batch in which no device name repeats.
    state = await make_state(tmp_path, {"shared": SharedProfile()})
    obj = write_claim(tmp_path, claim_object("pair", results=[share("vnpu-0", "8Gi", "30", "a", "s1"),
                                                              share("vnpu-0", "4Gi", "30", "b", "s2"),
                                                              {**share("chip-0", "2Gi", "30", "b"), "shareID": None,
                                                               "consumedCapacity": None}]))
    uid = obj["metadata"]["uid"]
    assert isinstance((await state.prepare([ref(obj)]))[uid], list)
    spec = yaml.safe_load((tmp_path / "cdi" / naming.claim_spec_file(f"k8s.{DRIVER}/vnpu", uid)).read_text())
    env = {d["name"]: d["containerEdits"]["env"] for d in spec["devices"]}
    assert env == {f"{uid}-vnpu-0-s1": ["SHARED_LABEL=default", "SHARED_MEMORY=8Gi"],
                   f"{uid}-vnpu-0-s2": ["SHARED_LABEL=default", "SHARED_MEMORY=4Gi"],
                   f"{uid}-chip-0": ["SHARED_LABEL=default", "SHARED_MEMORY="]}


async def test_exclusive_device_twice_in_one_claim_is_refused(tmp_path):
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    obj = write_claim(tmp_path, claim_object("dup", results=[("a", "npu-0-0"), ("b", "npu-0-0")]))
    results = await state.prepare([ref(obj)])
    assert str(results[obj["metadata"]["uid"]]) == (
        "ResourceClaim default/dup: device npu-0-0 is allocated twice in this claim and does not allow multiple "
        "allocations")
    assert on_disk(tmp_path).claims == {}


async def test_exclusive_device_held_by_another_claim_is_refused(tmp_path):
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    holder = write_claim(tmp_path, claim_object("holder", results=[("npu", "npu-1-0")]))
    late = write_claim(tmp_path, claim_object("late", results=[("npu", "npu-1-0")]))
    await state.prepare([ref(holder)])
    results = await state.prepare([ref(late)])
    assert str(results[late["metadata"]["uid"]]) == (
        f"ResourceClaim default/late: device npu-1-0 is already prepared for ResourceClaim default/holder "
        f"(uid {holder['metadata']['uid']}) and does not allow multiple allocations")


async def test_profile_returning_no_edits_for_a_device_is_a_claim_error(tmp_path):
    state = await make_state(tmp_path, {"forgetful": ForgetfulProfile()})
    obj = write_claim(tmp_path, claim_object("c", results=[("req", "lost-0")]))
    results = await state.prepare([ref(obj)])
    assert str(results[obj["metadata"]["uid"]]) == (
        "ResourceClaim default/c: profile forgetful returned no container edits for device lost-0")
    assert on_disk(tmp_path).claims == {}
    assert os.listdir(tmp_path / "cdi") == [naming.common_spec_file(f"k8s.{DRIVER}/forget")]


async def test_one_claims_profile_crash_does_not_fail_the_batch(tmp_path):
    state = await make_state(tmp_path, {"fake": FakeProfile(), "broken": BrokenApplyProfile()})
    good = write_claim(tmp_path, claim_object("good", results=[("npu", "npu-0-0")]))
    bad = write_claim(tmp_path, claim_object("bad", results=[("x", "brk-0")]))
    try:
        results = await state.prepare([ref(good), ref(bad)])
    except RuntimeError as exc:
        pytest.fail(f"BUG (state.py prepare): an unexpected exception from one claim's plan ({exc!r}) escaped "
                    "DeviceState.prepare and failed the whole batch; _plan errors other than PrepareError/"
                    "ConfigError/ClaimError must become that claim's PrepareError (docs/architecture.md#durable-state)")
    assert isinstance(results[good["metadata"]["uid"]], list)
    assert isinstance(results[bad["metadata"]["uid"]], PrepareError)


@pytest.mark.parametrize(
    ("memory", "outcome"),
    [
        pytest.param("512Ki", "prepared", id="binary-Ki-is-a-valid-quantity"),
        pytest.param("1.2.3", "refused", id="malformed-quantity"),
    ],
)
async def test_a_claims_consumed_capacity_never_fails_the_batch(tmp_path, memory, outcome):
    state = await make_state(tmp_path, {"shared": SharedProfile(), "fake": FakeProfile()})
    good = write_claim(tmp_path, claim_object("good", results=[("npu", "npu-0-0")]))
    odd = write_claim(tmp_path, claim_object("odd", results=[share("vnpu-0", memory, "10")]))
    try:
        results = await state.prepare([ref(good), ref(odd)])
    except Exception as exc:
        pytest.fail(f"BUG (model.parse_quantity + state._check_free): consumedCapacity {memory!r} made "
                    f"parse_quantity raise {exc!r}, which escaped DeviceState.prepare and failed every claim "
                    "of the batch")
    assert isinstance(results[good["metadata"]["uid"]], list)
    got = results[odd["metadata"]["uid"]]
    assert isinstance(got, list if outcome == "prepared" else PrepareError)


class PolicyProfile(SharedProfile):
    """``vnpu-0`` with request policies (KEP-5075): cores 1-100 in steps of 1, one container a share."""

    async def discover(self, ctx: ProfileContext) -> Inventory:
        return Inventory(devices=(Device("vnpu-0", capacities={
            "memory": Capacity("32Gi"),
            "cores": Capacity("100", CapacityRequestPolicy(default="10", valid_range_min="1", valid_range_max="100",
                                                           valid_range_step="1")),
            "containers": Capacity("2", CapacityRequestPolicy(default="1", valid_values=("1",))),
        }, allow_multiple_allocations=True),), source="simulated")


@pytest.mark.parametrize(("consumed", "message"), [
    ({"memory": "-100Gi"}, "consumedCapacity memory -100Gi of device vnpu-0 is negative"),
    ({"cores": "-50"}, "consumedCapacity cores -50 of device vnpu-0 is negative"),
    ({"cores": "0.5"}, "consumedCapacity cores 0.5 of device vnpu-0 is outside the device's valid range (from 1 to "
                       "100 in steps of 1)"),
    ({"containers": "-1"}, "consumedCapacity containers -1 of device vnpu-0 is negative"),
    ({"containers": "2"}, "consumedCapacity containers 2 of device vnpu-0 is not one of the device's valid values (1)"),
], ids=["negative memory", "negative cores", "off the range's step", "negative count", "not a valid value"])
async def test_a_consumed_capacity_the_scheduler_cannot_have_booked_is_refused(tmp_path, consumed, message):
    """A negative amount summed with the others let a chip be over-booked (-100, then 64 and 64 of a
    64-container chip were all prepared); the scheduler books only values of the request policy (an
    audit of bad claims)."""
    state = await make_state(tmp_path, {"shared": PolicyProfile()})
    odd = share("vnpu-0", "1Gi", "10")
    odd["consumedCapacity"].update(consumed)
    claim = write_claim(tmp_path, claim_object("odd", results=[odd]))
    assert str((await state.prepare([ref(claim)]))[claim["metadata"]["uid"]]) == f"ResourceClaim default/odd: {message}"
    assert on_disk(tmp_path).claims == {}
    # The device's whole capacity is still free for claims the scheduler could have made.
    full = write_claim(tmp_path, claim_object("full", results=[share("vnpu-0", "32Gi", "100")]))
    assert isinstance((await state.prepare([ref(full)]))[full["metadata"]["uid"]], list)


async def test_one_share_id_twice_on_a_device_in_one_claim_is_refused_naming_the_share(tmp_path):
    """It failed as "profile shared produced invalid CDI spec: duplicate device", blaming the
    profile (an audit of bad claims)."""
    state = await make_state(tmp_path, {"shared": SharedProfile()})
    twice = write_claim(tmp_path, claim_object("twice", results=[share("vnpu-0", "1Gi", "10", share_id="s1"),
                                                                 share("vnpu-0", "1Gi", "10", "other", "s1")]))
    assert str((await state.prepare([ref(twice)]))[twice["metadata"]["uid"]]) == (
        "ResourceClaim default/twice: device vnpu-0 has shareID s1 twice in this claim "
        "(status.allocation.devices.results); each share of a device has a shareID of its own")


# -- side effects -----------------------------------------------------------------------------------


async def test_side_effects_run_once_on_prepare_and_are_undone_on_unprepare(tmp_path):
    profile = SideEffectProfile()
    state = await make_state(tmp_path, {"effects": profile})
    obj = write_claim(tmp_path, claim_object("c", results=[("a", "hw-0"), ("b", "hw-1")]))
    uid = obj["metadata"]["uid"]
    assert isinstance((await state.prepare([ref(obj)]))[uid], list)
    assert profile.calls == [("prepare", uid, uid, ["hw-0", "hw-1"])]
    assert on_disk(tmp_path).claims[uid].side_effects == {"effects": {"created": ["hw-0", "hw-1"]}}
    # A repeated Prepare (kubelet retry) is answered from the checkpoint: no second side effect.
    assert isinstance((await state.prepare([ref(obj)]))[uid], list)
    assert len(profile.calls) == 1
    assert await state.unprepare([ref(obj)]) == {uid: None}
    assert profile.calls[1:] == [("unprepare", uid, {"created": ["hw-0", "hw-1"]})]
    assert on_disk(tmp_path).claims == {}
    assert await state.unprepare([ref(obj)]) == {uid: None}  # unknown claim: succeeds, nothing to undo
    assert len(profile.calls) == 2


def _count_syncs(monkeypatch) -> list[int]:
    """The file descriptors of every fdatasync from now on (each durable checkpoint write makes one)."""
    synced: list[int] = []
    monkeypatch.setattr(os, "fdatasync", lambda fd, real=os.fdatasync: (synced.append(fd), real(fd))[1])
    return synced


async def test_a_prepare_with_side_effects_makes_two_durable_writes(tmp_path, monkeypatch):
    """PrepareStarted before the side effects; PrepareCompleted, with their result, after the spec.
    The result had a durable write of its own, three in all (issue 37: each an fdatasync on a disk
    that a hundred daemons share); until PrepareCompleted a crash is rolled back with None."""
    profile = SideEffectProfile()
    state = await make_state(tmp_path, {"effects": profile})
    obj = write_claim(tmp_path, claim_object("c", results=[("a", "hw-0")]))
    uid = obj["metadata"]["uid"]
    synced = _count_syncs(monkeypatch)
    assert isinstance((await state.prepare([ref(obj)]))[uid], list)
    assert len(synced) == 2
    record = on_disk(tmp_path).claims[uid]
    assert (record.state, record.side_effects) == ("PrepareCompleted", {"effects": {"created": ["hw-0"]}})

    (tmp_path / "cdi" / naming.claim_spec_file(f"k8s.{DRIVER}/hw", uid)).unlink()  # the reboot's empty tmpfs
    rebooted = await make_state(tmp_path, {"effects": SideEffectProfile()}, boot_id="boot-2")
    synced.clear()
    assert isinstance((await rebooted.prepare([ref(obj)]))[uid], list)  # the replay: the same two
    assert len(synced) == 2
    record = on_disk(tmp_path).claims[uid]
    assert (record.state, record.boot_id, record.side_effects) == (
        "PrepareCompleted", "boot-2", {"effects": {"created": ["hw-0"]}})


async def test_retried_prepare_rolls_back_a_prepare_started_record_first(tmp_path):
    profile = SideEffectProfile()
    state = await make_state(tmp_path, {"effects": profile})
    obj = write_claim(tmp_path, claim_object("c", results=[("a", "hw-0")]))
    uid = obj["metadata"]["uid"]
    spec_path = tmp_path / "cdi" / naming.claim_spec_file(f"k8s.{DRIVER}/hw", uid)
    spec_path.mkdir()  # the CDI write fails: a directory sits where the spec goes
    profile.fail_unprepares = 1  # and the rollback of that attempt fails too
    results = await state.prepare([ref(obj)])
    # The error names the spec file, not the temp file it is written through.
    assert str(results[uid]) == f"ResourceClaim default/c: Is a directory ({spec_path})"
    record = on_disk(tmp_path).claims[uid]
    assert (record.state, record.side_effects) == ("PrepareStarted", {"effects": {"created": ["hw-0"]}})
    assert profile.calls == [("prepare", uid, uid, ["hw-0"]), ("unprepare", uid, {"created": ["hw-0"]})]

    spec_path.rmdir()
    results = await state.prepare([ref(obj)])
    assert isinstance(results[uid], list)
    assert profile.calls[2:] == [("unprepare", uid, {"created": ["hw-0"]}), ("prepare", uid, uid, ["hw-0"])]
    assert on_disk(tmp_path).claims[uid].state == "PrepareCompleted"
    assert spec_path.is_file()


async def test_start_up_rolls_back_a_prepare_started_record(tmp_path):
    profile = SideEffectProfile()
    state = await make_state(tmp_path, {"effects": profile})
    obj = write_claim(tmp_path, claim_object("c", results=[("a", "hw-0")]))
    uid = obj["metadata"]["uid"]
    spec_path = tmp_path / "cdi" / naming.claim_spec_file(f"k8s.{DRIVER}/hw", uid)
    spec_path.mkdir()
    profile.fail_unprepares = 1
    await state.prepare([ref(obj)])
    spec_path.rmdir()

    restarted = SideEffectProfile()
    await make_state(tmp_path, {"effects": restarted})
    assert restarted.calls == [("unprepare", uid, {"created": ["hw-0"]})]
    assert on_disk(tmp_path).claims == {}


async def test_replayed_prepare_after_a_reboot_re_runs_side_effects_and_rewrites_the_spec(tmp_path):
    profile = SideEffectProfile()
    state = await make_state(tmp_path, {"effects": profile}, boot_id="boot-1")
    obj = write_claim(tmp_path, claim_object("c", results=[("a", "hw-1")]))
    uid = obj["metadata"]["uid"]
    first = await state.prepare([ref(obj)])
    spec_path = tmp_path / "cdi" / naming.claim_spec_file(f"k8s.{DRIVER}/hw", uid)
    written = spec_path.read_bytes()
    spec_path.unlink()  # /var/run/cdi is tmpfs: gone after the reboot

    after = SideEffectProfile()
    rebooted = await make_state(tmp_path, {"effects": after}, boot_id="boot-2")
    assert after.calls == []  # nothing is undone at start-up: the reboot already undid it
    again = await rebooted.prepare([ref(obj)])
    assert again == first
    assert after.calls == [("prepare", uid, uid, ["hw-1"])]
    assert spec_path.read_bytes() == written
    record = on_disk(tmp_path).claims[uid]
    assert (record.state, record.boot_id) == ("PrepareCompleted", "boot-2")
    # The next replay in the same boot does not run them again.
    await rebooted.prepare([ref(obj)])
    assert len(after.calls) == 1


async def test_replay_in_the_same_boot_rewrites_a_lost_spec_without_side_effects(tmp_path):
    profile = SideEffectProfile()
    state = await make_state(tmp_path, {"effects": profile})
    obj = write_claim(tmp_path, claim_object("c", results=[("a", "hw-0")]))
    uid = obj["metadata"]["uid"]
    await state.prepare([ref(obj)])
    spec_path = tmp_path / "cdi" / naming.claim_spec_file(f"k8s.{DRIVER}/hw", uid)
    spec_path.unlink()
    assert isinstance((await state.prepare([ref(obj)]))[uid], list)
    assert spec_path.is_file()
    assert len(profile.calls) == 1


async def test_a_record_an_older_release_wrote_with_common_first_is_answered_own_id_first(tmp_path):
    """Releases before the kubelet tier answered `common` first; the kubelet names a device by its first
    id (KEP-4680), so two devices of one claim collided in the pod status. A replay reorders."""
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    obj = write_claim(tmp_path, claim_object("old", results=[("npu", "npu-0-0"), ("npu", "npu-1-0")]))
    uid = obj["metadata"]["uid"]
    await state.prepare([ref(obj)])
    record = state.prepared_claims[uid]
    old_order = tuple(attrs.evolve(d, cdi_device_ids=tuple(reversed(d.cdi_device_ids))) for d in record.devices)
    state.store.table[uid] = attrs.evolve(record, devices=old_order)
    await state.store.save(compact=True)
    await state.close()
    assert [d.cdi_device_ids[0] for d in on_disk(tmp_path).claims[uid].devices] == [f"{FAKE_KIND}=common"] * 2

    restarted = await make_state(tmp_path, {"fake": FakeProfile()})
    [first, second] = (await restarted.prepare([ref(obj)]))[uid]
    assert first.cdi_device_ids == (f"{FAKE_KIND}={uid}-npu-0-0", f"{FAKE_KIND}=common")
    assert second.cdi_device_ids == (f"{FAKE_KIND}={uid}-npu-1-0", f"{FAKE_KIND}=common")


class SecondNpuProfile(SharedProfile):
    """A second profile of CDI class ``npu`` (as npu-910 and npu-310P, both in the chart's default list)."""

    name = "second-npu"
    cdi_class = "npu"

    async def discover(self, ctx: ProfileContext) -> Inventory:
        return Inventory(devices=(Device("chip-9"),))


def resolvable_cdi_ids(cdi_dir: Path) -> set[str]:
    """Every ``kind=device`` a runtime can resolve from the spec files in ``cdi_dir``."""
    ids = set()
    for path in cdi_dir.glob("*.yaml"):
        if not path.is_file():
            continue
        spec = yaml.safe_load(path.read_text())
        ids.update(f"{spec['kind']}={d['name']}" for d in spec["devices"])
    return ids


async def test_devices_of_two_profiles_of_one_cdi_class_in_one_claim_all_resolve(tmp_path):
    """Two profiles share a CDI kind, so the claim's spec file of that kind is one file: it must hold
    both profiles' devices (before, the second profile's spec replaced the first's and the answer
    named a CDI device no spec held; the class of fault of sriov-network-device-plugin#576)."""
    state = await make_state(tmp_path, {"fake": FakeProfile(), "second-npu": SecondNpuProfile()})
    obj = write_claim(tmp_path, claim_object("mixed", results=[("a", "npu-0-0"), ("b", "chip-9")]))
    uid = obj["metadata"]["uid"]
    devices = (await state.prepare([ref(obj)]))[uid]
    assert [d.device_name for d in devices] == ["npu-0-0", "chip-9"]
    answered = {cdi_id for d in devices for cdi_id in d.cdi_device_ids}
    assert answered <= resolvable_cdi_ids(tmp_path / "cdi")
    assert on_disk(tmp_path).claims[uid].cdi_specs == (naming.claim_spec_file(FAKE_KIND, uid),)
    assert await state.unprepare([ref(obj)]) == {uid: None}
    assert not (tmp_path / "cdi" / naming.claim_spec_file(FAKE_KIND, uid)).exists()


class UnderscoreClassProfile(SharedProfile):
    """A profile whose CDI class holds ``_`` (CDI allows it), so its spec files start with the
    ``<vendor>-npu_`` stem of class ``npu`` too."""

    name = "npu-x"
    cdi_class = "npu_x"

    async def discover(self, ctx: ProfileContext) -> Inventory:
        return Inventory(devices=(Device("x-0"),))


async def test_orphan_cleanup_leaves_the_files_of_a_kind_whose_class_extends_another_alone(tmp_path):
    """Orphan specs are found by file name; ``<vendor>-npu_x_common.yaml`` is kind npu_x's common spec,
    not a claim spec of kind npu for claim ``x_common``. Before, every cleanup retry removed it (the
    class of fault of canonical/lxd#14843: cleanup that matches spec file names wrongly)."""
    profiles = {"fake": FakeProfile(), "npu-x": UnderscoreClassProfile()}
    x_kind = f"k8s.{DRIVER}/npu_x"
    # An orphan that cannot be removed (a directory under a spec file's name) keeps a retry pending.
    (tmp_path / "cdi" / naming.claim_spec_file(FAKE_KIND, "0rphan")).mkdir(parents=True)
    state = await make_state(tmp_path, profiles)
    assert state.cleanup_pending
    obj = write_claim(tmp_path, claim_object("x", results=[("x", "x-0")]))
    uid = obj["metadata"]["uid"]
    devices = (await state.prepare([ref(obj)]))[uid]
    await state.retry_cleanup()
    common = tmp_path / "cdi" / naming.common_spec_file(x_kind)
    assert common.is_file()
    assert {cdi_id for d in devices for cdi_id in d.cdi_device_ids} <= resolvable_cdi_ids(tmp_path / "cdi")
    assert state.cdi.claim_specs([FAKE_KIND, x_kind]) == {
        "0rphan": [naming.claim_spec_file(FAKE_KIND, "0rphan")], uid: [naming.claim_spec_file(x_kind, uid)]}


def test_batches_by_device_keeps_requests_together_and_names_unique():
    def dev(request: str, device: str, share: str | None = None) -> AllocatedDevice:
        return AllocatedDevice(request, DRIVER, NODE, device, share_id=share)

    plain = [dev("a", "x"), dev("b", "z"), dev("a", "y")]
    assert batches_by_device(plain) == [plain]  # nothing repeats: one call, in order
    a1, a2, b1, b2 = dev("a", "x", "s1"), dev("a", "y"), dev("b", "x", "s2"), dev("b/large", "y", "s3")
    assert batches_by_device([a1, a2, b1, b2]) == [[a1, a2], [b1, b2]]
    twice = [dev("a", "x", "s1"), dev("a", "x", "s2"), dev("b", "z")]
    assert batches_by_device(twice) == [[twice[0], twice[2]], [twice[1]]]


async def record_an_old_uid(tmp_path: Path) -> tuple[str, str]:
    """A claim prepared by a release whose rule accepted ``old_uid`` (releases before 2026-12-02
    accepted '_'): its completed record, its spec file and its claim file; returns (kind, spec file)."""
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    kind = f"k8s.{DRIVER}/npu"
    spec = naming.claim_spec_file(kind, "old_uid")
    (tmp_path / "cdi" / spec).write_text("{}")
    state._records["old_uid"] = ckpt.ClaimRecord(
        "old_uid", "default", "old", ckpt.PREPARE_COMPLETED, "boot-1",
        (ckpt.DeviceRecord("npu", NODE, "npu-0-0", (f"{kind}=old_uid-npu-0-0",)),), (spec,))
    await state._save()
    write_claim(tmp_path, claim_object("old", uid="old_uid"))  # a replay reads the claim again
    return kind, spec


async def test_a_record_whose_uid_a_newer_rule_refuses_can_still_be_unprepared(tmp_path):
    # Releases before 2026-12-02 accepted '_' in a uid (standalone claim files); the rule changed
    # (claims.check_claim_ref), and a claim prepared then must not be stuck with its device held.
    kind, spec = await record_an_old_uid(tmp_path)
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    assert (await state.prepare([ClaimRef("default", "old", "old_uid")]))["old_uid"] == [  # the kubelet's replay
        PreparedDevice(("npu",), NODE, "npu-0-0", (f"{kind}=old_uid-npu-0-0",))]
    assert await state.unprepare([ClaimRef("default", "old", "old_uid")]) == {"old_uid": None}
    assert not (tmp_path / "cdi" / spec).exists()
    assert on_disk(tmp_path).claims == {}
    refused = await state.unprepare([ClaimRef("default", "new", "new_uid")])  # unknown: the rule holds
    assert "must be letters, digits, '-' or '.'" in str(refused["new_uid"])


async def test_a_replay_reads_the_claim_again_and_refuses_an_allocation_other_than_the_recorded_one(tmp_path):
    """A claim allocated again under its uid without an Unprepare (a force-deleted pod) was answered
    from the record: the pod got the devices the scheduler had counted free (NVIDIA
    dra-driver-nvidia-gpu#1162 is of this kind)."""
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    obj = write_claim(tmp_path, claim_object("c", results=[("npu", "npu-0-0")]))
    uid = obj["metadata"]["uid"]
    first = (await state.prepare([ref(obj)]))[uid]
    assert (await state.prepare([ref(obj)]))[uid] == first  # the same allocation: the same answer

    write_claim(tmp_path, claim_object("c", uid=uid, results=[("npu", "npu-1-0")]))
    refused = (await state.prepare([ref(obj)]))[uid]
    assert isinstance(refused, PrepareError)
    assert str(refused) == (
        f"ResourceClaim default/c: it was prepared with npu: {NODE}/npu-0-0 and is now allocated npu: {NODE}/npu-1-0: "
        "it was allocated again without an Unprepare on this node. If no pod on this node uses its earlier devices "
        f"any more, release them with `ascend-dra call unprepare default/c --uid {uid}`, and the kubelet's next "
        "Prepare prepares the new allocation")
    assert on_disk(tmp_path).claims[uid].devices[0].device == "npu-0-0"  # nothing released behind anyone's back

    assert await state.unprepare([ref(obj)]) == {uid: None}  # what the message says to do
    again = (await state.prepare([ref(obj)]))[uid]
    assert [d.device_name for d in again] == ["npu-1-0"]


async def test_a_replay_refuses_a_claim_no_longer_allocated_or_replaced(tmp_path):
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    obj = write_claim(tmp_path, claim_object("c", results=[("npu", "npu-0-0")]))
    uid = obj["metadata"]["uid"]
    assert isinstance((await state.prepare([ref(obj)]))[uid], list)
    write_claim(tmp_path, claim_object("c", uid=uid, allocated=False))
    assert "not allocated" in str((await state.prepare([ref(obj)]))[uid])
    write_claim(tmp_path, claim_object("c"))  # another claim under the name
    assert "it got replaced" in str((await state.prepare([ref(obj)]))[uid])
    assert on_disk(tmp_path).claims[uid].state == "PrepareCompleted"


async def test_repair_specs_puts_back_the_specs_of_claims_prepared_in_this_boot_and_only_those(tmp_path, caplog):
    """The kubelet does not Prepare a claim again while it runs (kubernetes/kubernetes#141433): a spec
    removed while the daemon was down (or by hand) stayed gone, and each container start failed."""
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    objs = [write_claim(tmp_path, claim_object(f"c{i}", results=[("npu", f"npu-{i}-0")])) for i in range(3)]
    for obj in objs:
        assert isinstance((await state.prepare([ref(obj)]))[obj["metadata"]["uid"]], list)
    specs = [tmp_path / "cdi" / naming.claim_spec_file(FAKE_KIND, o["metadata"]["uid"]) for o in objs]
    written = [p.read_bytes() for p in specs]
    assert await state.repair_specs() == []  # nothing missing: nothing read, nothing written

    specs[0].unlink()
    specs[1].unlink()
    write_claim(tmp_path, claim_object("c1", uid=objs[1]["metadata"]["uid"], results=[("npu", "npu-3-0")]))
    restarted = await make_state(tmp_path, {"fake": FakeProfile()})
    assert await restarted.repair_specs() == [objs[0]["metadata"]["uid"]]
    assert specs[0].read_bytes() == written[0]
    assert not specs[1].exists()  # allocated again meanwhile: refused, named in a WARNING, record kept
    [warning] = [r for r in caplog.records if r.levelname == "WARNING" and "re-creating it failed" in r.message]
    assert warning.claim_uid == objs[1]["metadata"]["uid"] and "now allocated npu: node-1/npu-3-0" in warning.error
    assert set(on_disk(tmp_path).claims) == {o["metadata"]["uid"] for o in objs}

    specs[2].unlink()  # a claim of an earlier boot waits for the kubelet's Prepare (side effects first)
    rebooted = await make_state(tmp_path, {"fake": FakeProfile()}, boot_id="boot-2")
    assert await rebooted.repair_specs() == []
    assert not specs[2].exists()


async def prepared_without_spec(tmp_path: Path) -> tuple[DeviceState, dict, str, Path]:
    """A state with claim ``c`` prepared on npu-0-0 whose CDI spec is then removed:
    (state, claim object, uid, the spec's path)."""
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    obj = write_claim(tmp_path, claim_object("c", results=[("npu", "npu-0-0")]))
    uid = obj["metadata"]["uid"]
    await state.prepare([ref(obj)])
    spec = tmp_path / "cdi" / naming.claim_spec_file(FAKE_KIND, uid)
    spec.unlink()
    return state, obj, uid, spec


async def test_repair_specs_never_prepares_back_a_claim_unprepared_meanwhile(tmp_path):
    state, obj, uid, spec = await prepared_without_spec(tmp_path)
    real_get = state.claim_source.get

    async def get_then_unprepare(*args, **kwargs):  # the kubelet's Unprepare lands while the claim is read
        claim = await real_get(*args, **kwargs)
        assert await state.unprepare([ref(obj)]) == {uid: None}
        return claim

    state.claim_source.get = get_then_unprepare
    assert await state.repair_specs() == []
    assert not spec.exists() and on_disk(tmp_path).claims == {}


async def test_a_claim_whose_spec_cannot_be_repaired_is_tried_again_later_and_logged_once_per_reason(
        tmp_path, caplog, monkeypatch):
    """Every look (each --health-interval) read the claim again and logged again, forever, and an API
    outage was logged at INFO as if the claim were gone."""
    import logging
    import types

    from ascend_dra.state import recovery
    from ascend_dra.state.claims import ClaimUnreadable

    clock = [1000.0]
    monkeypatch.setattr(recovery, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    state, obj, uid, spec = await prepared_without_spec(tmp_path)
    reads = []

    async def unreachable(namespace, name, uid, **_):
        reads.append(uid)
        raise ClaimUnreadable(f"ResourceClaim {namespace}/{name}: reading it from the API server failed: "
                              f"timeout {len(reads)}")  # each try's message differs

    real_get, state.claim_source.get = state.claim_source.get, unreachable
    caplog.set_level(logging.DEBUG, logger="ascend_dra.state")

    def logged() -> list[str]:
        return [r.levelname for r in caplog.records if "a prepared claim's CDI spec" in r.message]

    first = recovery.REPAIR_RETRY_FIRST_S
    assert await state.repair_specs() == []
    clock[0] += first - 1
    assert await state.repair_specs() == []  # not due yet: no second read
    assert len(reads) == 1 and logged() == ["WARNING"]
    clock[0] += 1
    assert await state.repair_specs() == []
    assert len(reads) == 2 and logged() == ["WARNING", "DEBUG"]  # the same reason: quiet
    clock[0] += 2 * first - 1
    assert await state.repair_specs() == [] and len(reads) == 2  # and waits twice as long

    state.claim_source.get = real_get  # the API server is back; the kubelet's replay repairs it first
    assert isinstance((await state.prepare([ref(obj)]))[uid], list) and spec.is_file()
    clock[0] += 1
    assert await state.repair_specs() == []
    assert uid not in state._repair_waits  # whole again: forgotten
    spec.unlink()  # lost again in another outage: named again, at once
    state.claim_source.get = unreachable
    assert await state.repair_specs() == []
    assert len(reads) == 3 and logged() == ["WARNING", "DEBUG", "WARNING"]

    state.claim_source.get = real_get
    clock[0] += first
    assert await state.repair_specs() == [uid] and spec.is_file() and uid not in state._repair_waits


async def test_repair_logs_a_gone_claim_at_info_and_a_broken_claim_file_as_a_warning(tmp_path, caplog):
    import logging

    state = await make_state(tmp_path, {"fake": FakeProfile()})
    gone, broken = (write_claim(tmp_path, claim_object(n, results=[("npu", f"npu-{i}-0")]))
                    for i, n in enumerate(("gone", "broken")))
    for obj in (gone, broken):
        await state.prepare([ref(obj)])
        (tmp_path / "cdi" / naming.claim_spec_file(FAKE_KIND, obj["metadata"]["uid"])).unlink()
    (tmp_path / "claims" / "default" / "gone.yaml").unlink()
    (tmp_path / "claims" / "default" / "broken.yaml").write_text("metadata: [\n")
    caplog.set_level(logging.INFO, logger="ascend_dra.state")
    assert await state.repair_specs() == []
    levels = {r.claim_uid: r.levelname for r in caplog.records if "CDI spec" in r.message}
    assert levels == {gone["metadata"]["uid"]: "INFO", broken["metadata"]["uid"]: "WARNING"}


async def test_a_recorded_uid_read_before_its_unprepare_is_held_to_todays_rule_when_prepared_anew(tmp_path):
    """A uid a newer rule refuses is accepted for its record only: read as recorded and unprepared
    before the Prepare took the claim's lock, it was prepared anew under the relaxed rule."""
    await record_an_old_uid(tmp_path)
    state = await make_state(tmp_path, {"fake": FakeProfile()})
    old = ClaimRef("default", "old", "old_uid")
    real_get = state.claim_source.get

    async def get_then_unprepare(*args, **kwargs):
        claim = await real_get(*args, **kwargs)
        assert await state.unprepare([old]) == {"old_uid": None}
        return claim

    state.claim_source.get = get_then_unprepare
    refused = (await state.prepare([old]))["old_uid"]
    assert "must be letters, digits, '-' or '.'" in str(refused)
    assert on_disk(tmp_path).claims == {}


def test_reallocation_compares_every_share_and_tells_exclusive_from_shared():
    from ascend_dra.state.replay import reallocation

    def record(*devices):
        return ckpt.ClaimRecord("u", "default", "c", ckpt.PREPARE_COMPLETED, "boot-1", tuple(
            ckpt.DeviceRecord("npu", NODE, d, ("x",), share_id=s) for d, s in devices), ("f",))

    def claim(*devices):
        return ClaimAllocation("u", "default", "c", tuple(
            AllocatedDevice("npu", DRIVER, NODE, d, share_id=s) for d, s in devices))

    two_shares = record(("npu-0-0", "s1"), ("npu-0-0", "s2"))
    assert reallocation(two_shares, claim(("npu-0-0", "s2"), ("npu-0-0", "s1"))) is None
    assert "now allocated npu: node-1/npu-0-0 (share s1)" in reallocation(two_shares, claim(("npu-0-0", "s1")))
    assert reallocation(record(("npu-0-0", None)), claim(("npu-0-0", "s9"))) is not None  # exclusive, now shared


async def test_a_replay_during_an_api_outage_is_answered_from_the_record_unless_its_spec_must_be_made(tmp_path):
    """A kubelet restarted while the API server is down prepares its running pods' claims again: they
    were answered from the checkpoint, and reading the claim first must not turn that into errors."""
    from ascend_dra.state.claims import ClaimUnreadable

    state = await make_state(tmp_path, {"fake": FakeProfile()})
    obj = write_claim(tmp_path, claim_object("c", results=[("npu", "npu-0-0")]))
    uid = obj["metadata"]["uid"]
    first = (await state.prepare([ref(obj)]))[uid]
    real_get = state.claim_source.get

    async def down(namespace, name, uid, **_):
        raise ClaimUnreadable(f"ResourceClaim {namespace}/{name}: reading it from the API server failed: refused")

    state.claim_source.get = down
    assert (await state.prepare([ref(obj)]))[uid] == first
    (tmp_path / "cdi" / naming.claim_spec_file(FAKE_KIND, uid)).unlink()
    missing = (await state.prepare([ref(obj)]))[uid]  # a spec is made from the claim: not now
    assert isinstance(missing, ClaimUnreadable) and "reading it from the API server failed" in str(missing)
    other = write_claim(tmp_path, claim_object("new", results=[("npu", "npu-1-0")]))
    assert isinstance((await state.prepare([ref(other)]))[other["metadata"]["uid"]], ClaimUnreadable)
    state.claim_source.get = real_get
    assert (await state.prepare([ref(obj)]))[uid] == first
