"""The HAMivNPUCore profile on the simulated Lab 18 node: discovery through the real npu-smi parsing
path, per-chip prerequisites, the limiter's env and mounts, and the per-claim local dir through the
real DeviceState (Prepare, Unprepare, rollback of an interrupted Prepare)."""

from __future__ import annotations

import logging
import stat
from importlib.metadata import entry_points
from pathlib import Path

import attrs
import pytest
import yaml

from ascend_dra.cdi.spec import DeviceNode, Mount
from ascend_dra.cdi.store import CdiStore
from ascend_dra.cli.discover import run as discover_run
from ascend_dra.durable import checkpoint as ckpt
from ascend_dra.model import AllocatedDevice
from ascend_dra.profiles import registry
from ascend_dra.profiles.ascend.sim import labnode
from ascend_dra.profiles.ascend.vnpucore.profile import VnpuCoreProfile
from ascend_dra.profiles.ascend.vnpucore.versioninfo import DriverRelease, VersionInfoError, parse_version_info
from ascend_dra.profiles.base import ApplyContext, ConfigError, ProfileContext, decode_config
from ascend_dra.profiles.checks import inventory_problems
from ascend_dra.state.claims import StandaloneClaimSource
from ascend_dra.state.devicestate import ClaimRef, DeviceState
from tests.claimfiles import claim_object, write_claim

DRIVER = "ascend.project-hami.io"
NODE = "aio-node74-arm"
UUID_0 = "68496E64-20E05477-92C31323-6E78030A-BD003019"
UUID_1 = "D8496E64-20C101B1-C0D42F23-AED8030A-40003039"
CLAIM_UID = "8ec6bbf9-8ce0-4aa1-bc57-7078653d090c"


@pytest.fixture
def lab(tmp_path: Path) -> labnode.LabNode:
    return labnode.build(tmp_path / "lab")


def context(lab: labnode.LabNode, tmp_path: Path) -> ProfileContext:
    return ProfileContext(node_name=NODE, driver_name=DRIVER, npu_smi=str(lab.npu_smi), dev_root=lab.dev_root,
                          sys_root=tmp_path / "sys", state_dir=tmp_path / "state",
                          options={"HAMivNPUCore.hostRoot": str(lab.host_root)})


def loaded() -> VnpuCoreProfile:
    (ep,) = [ep for ep in entry_points(group=registry.ENTRY_POINT_GROUP) if ep.name == "HAMivNPUCore"]
    result = registry.load_one(ep, log=False)
    assert result.error is None, result.status
    assert isinstance(result.profile, VnpuCoreProfile)
    return result.profile


def share(device: str, memory: str = "8Gi", cores: str = "50", request: str = "npu", share_id: str = "s1",
          **extra: str) -> AllocatedDevice:
    return AllocatedDevice(request=request, driver=DRIVER, pool=NODE, device=device, share_id=share_id,
                           consumed_capacity={"memory": memory, "cores": cores, **extra})


# -- version.info --------------------------------------------------------------------------------


def test_version_info_gives_the_release_and_compares_major_minor_only() -> None:
    assert parse_version_info("Version=25.5.1\nascendhal_version=7.35.23\n") == DriverRelease(25, 5, "25.5.1")
    assert parse_version_info("package_version=23.0.rc3\n") < DriverRelease(25, 5, "25.5")
    assert DriverRelease.parse("25.5.rc1") == DriverRelease(25, 5, "25.5")
    with pytest.raises(VersionInfoError, match=r"^version.info: no Version= line$"):
        parse_version_info("Innerversion=V100R001C25\n")
    with pytest.raises(VersionInfoError, match=r"release 'V25' does not start with <major>.<minor>"):
        parse_version_info("Version=V25\n")


# -- discovery -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_lab_node_publishes_the_labs_two_chips(lab, tmp_path) -> None:
    inventory = await loaded().discover(context(lab, tmp_path))
    assert inventory.source == "npu-smi"
    assert inventory_problems(inventory) == []
    assert [d.name for d in inventory.devices] == ["npu-0-0", "npu-1-0"]
    for device, index, physical, uuid in zip(inventory.devices, (0, 1), (0, 2), (UUID_0, UUID_1), strict=True):
        lab_attributes = {"brand": "Huawei", "index": index, "model": "310P3", "physicalID": physical,
                          "productName": "310P3", "type": "HAMivNPUCore", "uuid": uuid}
        assert {k: device.attributes[k] for k in lab_attributes} == lab_attributes
        assert device.allow_multiple_allocations is True
        assert device.capacities["memory"].value == "21525Mi"
        assert device.capacities["cores"].value == "100"
        assert device.capacities["containers"].value == "64"
        assert device.capacities["memory"].request_policy.default == "336Mi"  # 21525 // 64
        assert device.capacities["cores"].request_policy.default == "1"
        assert device.capacities["containers"].request_policy.valid_values == ("1",)
    assert inventory.devices[1].attributes["npuID"] == 5


@pytest.mark.anyio
async def test_max_shares_caps_the_claims_one_chip_takes_as_hamis_device_count_does(lab, tmp_path) -> None:
    """HAMi's Ascend device plugin lets at most VDeviceCount pods share a chip (7 on a 310P3 by
    default, set per node); a HAMi user who relied on it got 64 here, with no way to ask for less."""
    ctx = context(lab, tmp_path)
    ctx = attrs.evolve(ctx, options={**ctx.options, "HAMivNPUCore.maxShares": "7"})
    inventory = await loaded().discover(ctx)
    assert {d.capacities["containers"].value for d in inventory.devices} == {"7"}
    assert {d.capacities["memory"].request_policy.default for d in inventory.devices} == {"336Mi"}  # unchanged
    assert inventory_problems(inventory) == []
    declared = loaded().profile_options["maxShares"]
    assert [declared.problem(v) for v in ("1", "64")] == [None, None]
    for bad in ("0", "65", "7.5", "seven", ""):
        assert declared.problem(bad) == f"{bad!r} is not a whole number from 1 to 64 (claims per chip)"
    with pytest.raises(ValueError, match=r"profile option HAMivNPUCore.maxShares: '0' is not a whole number"):
        await loaded().discover(attrs.evolve(ctx, options={**ctx.options, "HAMivNPUCore.maxShares": "0"}))


@pytest.mark.anyio
async def test_chip_without_device_share_is_not_offered_and_the_reason_is_logged_once(lab, tmp_path, caplog) -> None:
    lab.set_device_share(5, 0, False)
    profile = loaded()
    ctx = context(lab, tmp_path)
    with caplog.at_level(logging.INFO, logger="ascend_dra.profiles.ascend.vnpucore.profile"):
        inventory = await profile.discover(ctx)
        await profile.discover(ctx)
    assert [d.name for d in inventory.devices] == ["npu-0-0"]
    reason = "device-share is off (enable it with: npu-smi set -t device-share -i 5 -c 0 -d 1)"
    assert f"npu-1-0 (NPU 5 chip 0) not offered: {reason}" in profile.discovery_notes()
    refusals = [r for r in caplog.records if r.getMessage() == "chip not offered by HAMivNPUCore"]
    assert [(r.device_name, r.npu_id, r.chip_id, r.reason) for r in refusals] == [("npu-1-0", 5, 0, reason)]
    lab.set_device_share(5, 0, True)
    with caplog.at_level(logging.INFO, logger="ascend_dra.profiles.ascend.vnpucore.profile"):
        again = await profile.discover(ctx)
    assert [d.name for d in again.devices] == ["npu-0-0", "npu-1-0"]
    assert any(r.getMessage() == "chip offered by HAMivNPUCore again" for r in caplog.records)


@pytest.mark.anyio
async def test_old_driver_and_missing_assets_refuse_every_chip(tmp_path) -> None:
    lab = labnode.build(tmp_path / "lab", driver_version="23.0.rc3", assets=False)
    profile = loaded()
    inventory = await profile.discover(context(lab, tmp_path))
    assert inventory.devices == ()
    host = lab.host_root
    reason = (f"driver 23.0.rc3 is older than 25.5 (HAMivNPUCore needs >= 25.5); hami-vnpu-core assets missing: "
              f"{host}/usr/local/hami-vnpu-core/libvnpu.so, {host}/usr/local/hami-shared-region")
    assert [n for n in profile.discovery_notes() if "not offered" in n] == [
        f"npu-0-0 (NPU 4 chip 0) not offered: {reason}", f"npu-1-0 (NPU 5 chip 0) not offered: {reason}"]


@pytest.mark.anyio
async def test_a_shared_region_not_mode_0777_refuses_every_chip(lab, tmp_path) -> None:
    """Project-HAMi/ascend-device-plugin internal/server/util.go makes the shared region 0777 (and
    chmods it): each container's limiter creates ``<id>_global_registry`` there as its own user."""
    region = lab.host_root / "usr/local/hami-shared-region"
    region.chmod(0o755)
    profile = loaded()
    inventory = await profile.discover(context(lab, tmp_path))
    assert inventory.devices == ()
    reason = (f"hami-vnpu-core shared region {region} is mode 0755, needs 0777 (every container's limiter "
              f"creates its chip's global registry there, as any user): chmod 0777 {region}")
    assert [n for n in profile.discovery_notes() if "not offered" in n] == [
        f"npu-0-0 (NPU 4 chip 0) not offered: {reason}", f"npu-1-0 (NPU 5 chip 0) not offered: {reason}"]
    region.chmod(0o777)
    assert [d.name for d in (await profile.discover(context(lab, tmp_path))).devices] == ["npu-0-0", "npu-1-0"]


@pytest.mark.anyio
async def test_discover_command_shows_reasons_and_the_aarch64_note(lab, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    library = lab.host_root / "usr/local/hami-vnpu-core/libvnpu.so"
    library.write_bytes(labnode.elf_header("x86_64"))  # built for the host it pretends to be
    lab.set_device_share(4, 0, False)
    text = await discover_run([loaded()], context(lab, tmp_path), "table")
    lines = text.splitlines()
    assert lines[1].split() == ["HAMivNPUCore", "npu-1-0", "310P3", "21525Mi", "-", "-", "npu-smi"]
    assert ("HAMivNPUCore: host architecture is x86_64: the HAMivNPUCore soft split is documented for aarch64 "
            "hosts only (Lab 18); libvnpu.so must be built for this host and driver") in lines
    assert ("HAMivNPUCore: npu-0-0 (NPU 4 chip 0) not offered: device-share is off (enable it with: npu-smi set "
            "-t device-share -i 4 -c 0 -d 1)") in lines
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    library.write_bytes(labnode.elf_header("aarch64"))
    text = await discover_run([loaded()], context(lab, tmp_path), "table")
    assert "aarch64" not in text


@pytest.mark.anyio
async def test_a_failing_device_share_query_is_the_reason(lab, tmp_path) -> None:
    # An npu-smi without the device-share type (older drivers): that call fails, the others answer.
    wrapper = tmp_path / "npu-smi"
    wrapper.write_text('#!/bin/sh\n[ "$*" = "info -t device-share" ] && { echo "Error: unknown type" >&2; exit 2; }\n'
                       f'exec {lab.npu_smi} "$@"\n')
    wrapper.chmod(0o755)
    ctx = attrs.evolve(context(lab, tmp_path), npu_smi=str(wrapper))
    profile = loaded()
    inventory = await profile.discover(ctx)
    assert inventory.devices == ()
    reason = f"device-share mode unknown: run '{wrapper} info -t device-share': exit status 2: Error: unknown type"
    assert f"npu-0-0 (NPU 4 chip 0) not offered: {reason}" in profile.discovery_notes()


@pytest.mark.anyio
async def test_when_npu_smi_stops_answering_the_offered_chips_stay_published(lab, tmp_path) -> None:
    """A rediscovery while npu-smi does not answer falls to the devfs tier, which cannot read the
    device-share mode (nor, on this node without sysfs, the family): the chips offered at the last
    npu-smi answer stay as they were published while their device node is there, instead of the pool
    going empty under the claims prepared on them; a chip whose node is gone is no longer offered."""
    profile = loaded()
    ctx = context(lab, tmp_path)
    before = await profile.discover(ctx)
    lab.set_device_share(5, 0, False)  # changed while npu-smi is down: not seen until it answers
    lab.set_info(None)
    during = await profile.discover(ctx)
    assert during.source == "devfs"
    assert during.devices == before.devices
    assert "devfs tier: 2 chips offered as at the last answer of the driver (device-share mode not readable)" in \
        profile.discovery_notes()
    assert await profile.health(ctx, during) == {"npu-0-0": None, "npu-1-0": None}
    (lab.dev_root / "davinci2").unlink()
    assert [d.name for d in (await profile.discover(ctx)).devices] == ["npu-0-0"]
    (lab.dev_root / "davinci2").touch()
    lab.set_info(lab.chips)
    after = await profile.discover(ctx)
    assert (after.source, [d.name for d in after.devices]) == ("npu-smi", ["npu-0-0"])
    assert "npu-1-0 (NPU 5 chip 0) not offered: device-share is off" in " ".join(profile.discovery_notes())


@pytest.mark.anyio
async def test_unknown_profile_option_is_refused_with_the_allowed_keys(lab, tmp_path) -> None:
    ctx = ProfileContext(node_name=NODE, driver_name=DRIVER, npu_smi=str(lab.npu_smi),
                         options={"HAMivNPUCore.hostroot": "/x", "HAMivNPUCore.driverDir": "rel/path"})
    with pytest.raises(ValueError) as caught:
        await loaded().discover(ctx)
    assert str(caught.value) == (
        "profile option HAMivNPUCore.hostroot: unknown (allowed: hostRoot, vnpuCoreDir, sharedRegionDir, "
        "driverDir, installInfo, simulate, maxShares); profile option HAMivNPUCore.driverDir: 'rel/path' is not "
        "an absolute path")


def test_config_mount_tools_must_be_a_boolean() -> None:
    profile = loaded()
    with pytest.raises(ConfigError) as caught:
        decode_config({"apiVersion": f"{DRIVER}/v1alpha1", "kind": "VnpuCoreConfig", "mountTools": "yes"},
                      profile.config_types, DRIVER, profile)
    assert str(caught.value) == 'parameters.mountTools: must be a boolean, got a string "yes"'


# -- container edits -----------------------------------------------------------------------------


async def applied(lab, tmp_path, devices, config=None):
    profile = loaded()
    ctx = context(lab, tmp_path)
    inventory = await profile.discover(ctx)
    return profile.apply_config(config, devices, ApplyContext(ctx, inventory, CLAIM_UID, "dra-ascend-e2e", "a"))


@pytest.mark.anyio
async def test_lab_share_gets_the_labs_env_device_nodes_and_mounts(lab, tmp_path) -> None:
    edits = (await applied(lab, tmp_path, [share("npu-0-0")]))["npu-0-0"]
    assert edits.env == (
        "ASCEND_VISIBLE_DEVICES=0", "NPU_MEM_QUOTA=8192", "NPU_PRIORITY=50",
        "NPU_GLOBAL_SHM_PATH=/hami-shared-region/0_global_registry",
        "NPU_LOCAL_SHM_PATH=/hami-vnpu-shmem/vnpu_local_shmem")
    dev, host = lab.dev_root, lab.host_root
    assert edits.device_nodes == tuple(DeviceNode(path=f"/dev/{n}", host_path=f"{dev}/{n}") for n in (
        "davinci0", "davinci_manager", "devmm_svm", "hisi_hdc"))
    ro, rw = ("ro", "nosuid", "nodev", "bind"), ("rw", "nosuid", "nodev", "bind")
    core = f"{host}/usr/local/hami-vnpu-core"
    assert edits.mounts == (
        Mount(f"{host}/etc/ascend_install.info", "/etc/ascend_install.info", ro),
        Mount(f"{host}/usr/local/Ascend/driver/lib64/driver", "/usr/local/Ascend/driver/lib64/driver", ro),
        Mount(f"{host}/usr/local/Ascend/driver/version.info", "/usr/local/Ascend/driver/version.info", ro),
        Mount(core, "/hami-vnpu-core", ro),
        Mount(f"{core}/containers/{CLAIM_UID}/ld.so.preload", "/etc/ld.so.preload", ro),  # the claim's own
        Mount(f"{host}/usr/local/hami-shared-region", "/hami-shared-region", rw),
        Mount(f"{core}/containers/{CLAIM_UID}/npu", "/hami-vnpu-shmem", rw))
    assert edits.problems("npu-0-0") == []


@pytest.mark.anyio
async def test_mount_tools_adds_npu_smi_and_dcmi(lab, tmp_path) -> None:
    from ascend_dra.profiles.ascend.vnpucore.profile import VnpuCoreConfig

    edits = (await applied(lab, tmp_path, [share("npu-0-0")], VnpuCoreConfig(mount_tools=True)))["npu-0-0"]
    host = lab.host_root
    assert edits.mounts[-2:] == (Mount(f"{host}/usr/local/dcmi", "/usr/local/dcmi", ("ro", "nosuid", "nodev", "bind")),
                                 Mount(f"{host}/usr/local/bin/npu-smi", "/usr/local/bin/npu-smi",
                                       ("ro", "nosuid", "nodev", "bind")))


@pytest.mark.anyio
async def test_memory_is_floored_to_whole_mib_and_below_one_mib_is_refused(lab, tmp_path) -> None:
    edits = await applied(lab, tmp_path, [share("npu-0-0", memory=str(8 * 2**30 + 2**20 - 1), cores="12500m")])
    assert "NPU_MEM_QUOTA=8192" in edits["npu-0-0"].env
    assert "NPU_PRIORITY=12.5" in edits["npu-0-0"].env
    with pytest.raises(ValueError, match=r"consumedCapacity memory 512Ki is below 1024Ki; NPU_MEM_QUOTA=0 would mean "
                                         r"unlimited to hami-vnpu-core"):
        await applied(lab, tmp_path, [share("npu-0-0", memory="512Ki")])


@pytest.mark.anyio
async def test_missing_consumed_capacity_names_the_feature_gate(lab, tmp_path) -> None:
    bare = AllocatedDevice(request="npu", driver=DRIVER, pool=NODE, device="npu-0-0")
    with pytest.raises(ValueError) as caught:
        await applied(lab, tmp_path, [bare])
    assert str(caught.value) == (
        "device npu-0-0 (request npu) was allocated without consumedCapacity memory, cores: enable the feature "
        "gate DRAConsumableCapacity on kube-apiserver, kube-scheduler, kube-controller-manager and the kubelet, "
        "then recreate the claim")


@pytest.mark.anyio
async def test_multi_device_claim_with_different_amounts_per_device(lab, tmp_path) -> None:
    devices = [share("npu-1-0", memory="4Gi", cores="30", share_id="a"),
               share("npu-0-0", memory="8Gi", cores="50", share_id="b")]
    edits = await applied(lab, tmp_path, devices)
    expected = ("ASCEND_VISIBLE_DEVICES=2,0", "NPU_MEM_QUOTA=4096", "NPU_PRIORITY=30",
                "NPU_GLOBAL_SHM_PATH=/hami-shared-region/2_global_registry",
                "NPU_LOCAL_SHM_PATH=/hami-vnpu-shmem/vnpu_local_shmem",
                "ASCEND_DRA_NPU_MEM_QUOTAS=4096,8192", "ASCEND_DRA_NPU_PRIORITIES=30,50")
    assert edits["npu-1-0"].env == expected
    assert edits["npu-0-0"].env == expected
    assert edits["npu-1-0"].device_nodes[0].path == "/dev/davinci2"
    assert edits["npu-0-0"].device_nodes[0].path == "/dev/davinci0"


# -- the per-claim local dir through the real DeviceState ----------------------------------------


async def lab_state(lab, tmp_path) -> DeviceState:
    profile = loaded()
    ctx = context(lab, tmp_path)
    inventory = await profile.discover(ctx)
    (tmp_path / "plugin").mkdir(exist_ok=True)
    state = DeviceState(driver_name=DRIVER, node_name=NODE, profiles={"HAMivNPUCore": profile},
                        inventories={"HAMivNPUCore": inventory}, profile_ctx=ctx, cdi=CdiStore(tmp_path / "cdi"),
                        plugin_dir=tmp_path / "plugin", boot_id="boot-1",
                        claim_source=StandaloneClaimSource(tmp_path / "claims", DRIVER))
    await state.recover()
    return state


def lab_claim(tmp_path, name="share-a", uid=CLAIM_UID, consumed=None):
    result = {"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-0-0", "shareID": f"{name}-share",
              "consumedCapacity": consumed if consumed is not None else {"cores": "50", "memory": "8Gi",
                                                                          "containers": "1"}}
    return write_claim(tmp_path, claim_object(name, namespace="dra-ascend-e2e", uid=uid, node=NODE,
                                              results=[result]))


@pytest.mark.anyio
async def test_prepare_creates_the_local_dir_0777_and_unprepare_removes_it(lab, tmp_path) -> None:
    state = await lab_state(lab, tmp_path)
    claim = lab_claim(tmp_path)
    ref = ClaimRef("dra-ascend-e2e", "share-a", CLAIM_UID)
    result = await state.prepare([ref])
    assert not isinstance(result[CLAIM_UID], Exception), result
    local = lab.host_root / "usr/local/hami-vnpu-core/containers" / CLAIM_UID / "npu"
    assert stat.S_IMODE(local.stat().st_mode) == 0o777
    assert state.prepared_claims[CLAIM_UID].side_effects == {"HAMivNPUCore": {"claimDir": str(local.parent)}}
    (local / "vnpu_local_shmem").write_bytes(b"limiter state")  # what the limiter leaves behind
    assert claim["metadata"]["uid"] == CLAIM_UID
    assert (await state.unprepare([ref]))[CLAIM_UID] is None
    assert not local.parent.exists()
    assert not list((tmp_path / "cdi").glob(f"*{CLAIM_UID}*"))
    assert (await state.unprepare([ref]))[CLAIM_UID] is None  # idempotent


@pytest.mark.anyio
@pytest.mark.parametrize(("memory_a", "memory_b"), [("8Gi", "4Gi"), ("4Gi", "8Gi")])
async def test_two_shares_of_one_chip_in_one_claim_each_get_their_own_quota(lab, tmp_path, memory_a,
                                                                              memory_b) -> None:
    # KEP-5075: one claim may hold two shares of one chip (requests a and b). apply_config answers by
    # device name, and both shares got the edits of the last: request a's container got b's quota,
    # so the chip handed out more memory than the scheduler booked (an audit found it).
    state = await lab_state(lab, tmp_path)
    shares = ("11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222")
    wanted = (("a", shares[0], "50", memory_a), ("b", shares[1], "25", memory_b))
    results = [{"request": request, "driver": DRIVER, "pool": NODE, "device": "npu-0-0", "shareID": share,
                "consumedCapacity": {"cores": cores, "memory": memory, "containers": "1"}}
               for request, share, cores, memory in wanted]
    write_claim(tmp_path, claim_object("pair", namespace="dra-ascend-e2e", uid=CLAIM_UID, node=NODE, results=results))
    got = (await state.prepare([ClaimRef("dra-ascend-e2e", "pair", CLAIM_UID)]))[CLAIM_UID]
    assert not isinstance(got, Exception), got
    spec = yaml.safe_load(next((tmp_path / "cdi").glob(f"*_{CLAIM_UID}.yaml")).read_text())
    edits = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    for request, share, cores, memory in wanted:
        mine = edits[f"{CLAIM_UID}-npu-0-0-{share}"]
        assert f"NPU_MEM_QUOTA={int(memory[:-2]) * 1024}" in mine["env"], (request, mine["env"])
        assert f"NPU_PRIORITY={cores}" in mine["env"], (request, mine["env"])
        assert [m["hostPath"] for m in mine["mounts"] if m["containerPath"] == "/hami-vnpu-shmem"] == [
            str(lab.host_root / "usr/local/hami-vnpu-core/containers" / CLAIM_UID / request)]


@pytest.mark.anyio
async def test_prepare_started_record_rolls_back_the_local_dir_at_start_up(lab, tmp_path) -> None:
    state = await lab_state(lab, tmp_path)
    lab_claim(tmp_path)
    ref = ClaimRef("dra-ascend-e2e", "share-a", CLAIM_UID)
    await state.prepare([ref])
    local = lab.host_root / "usr/local/hami-vnpu-core/containers" / CLAIM_UID
    assert local.is_dir()
    # What a crash in Unprepare after its first checkpoint write leaves: PrepareStarted with side effects.
    record = state.prepared_claims[CLAIM_UID]
    state._records[CLAIM_UID] = attrs.evolve(record, state=ckpt.PREPARE_STARTED)
    await state._save()
    restarted = await lab_state(lab, tmp_path)
    assert CLAIM_UID not in restarted.prepared_claims
    assert not local.exists()


@pytest.mark.anyio
async def test_prepare_without_consumed_capacity_fails_the_claim_naming_the_gate(lab, tmp_path) -> None:
    state = await lab_state(lab, tmp_path)
    lab_claim(tmp_path, consumed={})
    result = await state.prepare([ClaimRef("dra-ascend-e2e", "share-a", CLAIM_UID)])
    assert isinstance(result[CLAIM_UID], Exception)
    assert "enable the feature gate DRAConsumableCapacity" in str(result[CLAIM_UID])
    assert not (lab.host_root / "usr/local/hami-vnpu-core/containers" / CLAIM_UID).exists()


@pytest.mark.anyio
async def test_a_missing_shared_device_node_fails_the_prepare_naming_it(lab, tmp_path) -> None:
    (lab.dev_root / "hisi_hdc").unlink()
    state = await lab_state(lab, tmp_path)
    lab_claim(tmp_path)
    result = await state.prepare([ClaimRef("dra-ascend-e2e", "share-a", CLAIM_UID)])
    assert isinstance(result[CLAIM_UID], Exception)
    assert f"device nodes {lab.dev_root}/hisi_hdc do not exist" in str(result[CLAIM_UID])


@pytest.mark.anyio
async def test_an_admin_access_claim_sees_the_chip_with_no_quota_limiter_or_local_dir(lab, tmp_path) -> None:
    state = await lab_state(lab, tmp_path)
    lab_claim(tmp_path)  # a workload share on npu-0-0
    admin_uid = "5b6f0d2e-0000-4000-8000-00000000ad01"
    admin = {"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-0-0", "adminAccess": True}
    write_claim(tmp_path, claim_object("monitor", namespace="dra-ascend-e2e", uid=admin_uid, node=NODE,
                                       results=[admin]))
    refs = [ClaimRef("dra-ascend-e2e", "share-a", CLAIM_UID), ClaimRef("dra-ascend-e2e", "monitor", admin_uid)]
    results = await state.prepare(refs)
    assert not any(isinstance(r, Exception) for r in results.values()), results
    spec = yaml.safe_load(next((tmp_path / "cdi").glob(f"*{admin_uid}.yaml")).read_text())
    edits = spec["devices"][0]["containerEdits"]
    assert edits["env"] == ["ASCEND_VISIBLE_DEVICES=0"]
    assert {m["containerPath"] for m in edits["mounts"]} == {
        "/etc/ascend_install.info", "/usr/local/Ascend/driver/lib64/driver", "/usr/local/Ascend/driver/version.info"}
    assert edits["deviceNodes"][0]["path"] == "/dev/davinci0"
    assert state.prepared_claims[admin_uid].side_effects == {}  # no local dir made for it
    assert not (lab.host_root / "usr/local/hami-vnpu-core/containers" / admin_uid).exists()
