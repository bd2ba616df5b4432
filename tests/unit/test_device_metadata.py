"""Device metadata for pods (KEP-5304): the file's paths and content against the protocol, and DeviceState
writing, answering, repairing and removing it on a real filesystem.

The protocol's facts (k8s.io/dynamic-resource-allocation ``api/metadata``): the container path
``/var/run/kubernetes.io/dra-device-attributes/{resourceclaims/<claim>|resourceclaimtemplates/<pod claim>}/
<base request>/<driver>-metadata.json``, the JSON stream of ``metadata.resource.k8s.io/v1alpha1``
``DeviceMetadata`` objects, the request's full name (subrequest kept) inside the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_dra.cdi import devicemetadata as dm
from ascend_dra.cdi import naming
from ascend_dra.cdi.store import CdiStore
from ascend_dra.model import AllocatedDevice, Version, attribute_to_api
from ascend_dra.profiles.ascend.vnpucore.profile import VnpuCoreProfile
from ascend_dra.profiles.base import ApplyContext, Inventory, ProfileContext
from ascend_dra.profiles.fake import FakeProfile
from ascend_dra.state.claims import ClaimError, StandaloneClaimSource, parse_claim
from ascend_dra.state.devicestate import ClaimRef, DeviceState, PrepareError
from tests.claimfiles import DRIVER, claim_object, write_claim
from tests.metadatastream import json_stream, newest_object

NODE = "node-1"
KIND = f"k8s.{DRIVER}/npu"
ROOT = "/var/run/kubernetes.io/dra-device-attributes"

pytestmark = pytest.mark.anyio


def read_file(path: Path) -> dict[str, Any]:
    """The file's v1beta1 object, after checking that the stream is v1beta1 then v1alpha1 of the same object."""
    return newest_object(path.read_text())


# -- the protocol ---------------------------------------------------------------------------------


def test_container_paths_of_a_named_claim_and_of_a_template_claim():
    assert dm.container_path(DRIVER, "shared-claim", "npu") == \
        f"{ROOT}/resourceclaims/shared-claim/npu/{DRIVER}-metadata.json"
    assert dm.container_path(DRIVER, "pod-npu-x7k2p", "npu", "npu") == \
        f"{ROOT}/resourceclaimtemplates/npu/npu/{DRIVER}-metadata.json"


def test_the_metadata_device_name_never_names_a_device_of_the_claim():
    name = dm.device_name("5d1e-0a", "npu")
    assert name == "5d1e-0a-metadata_npu" and naming.is_device_name(name)
    assert dm.request_of("5d1e-0a", name) == "npu"
    # a published device called "metadata-npu" gives <uid>-metadata-npu: never read as a metadata device
    assert dm.request_of("5d1e-0a", naming.claim_device_name("5d1e-0a", "metadata-npu")) is None
    assert dm.request_of("other", name) is None


@pytest.mark.parametrize("value", ["", "..", "a/b", "NPU", "a_b", "-a", "x" * 64])
def test_a_name_that_is_no_dns_label_cannot_name_a_directory(value):
    assert not dm.is_path_name(value)


def test_the_store_never_leaves_its_directory(tmp_path):
    store = dm.MetadataStore(tmp_path / "device-metadata")
    assert store.path("u-1", "npu") == tmp_path / "device-metadata" / "u-1" / "npu" / "metadata.json"
    for uid, request in (("../x", "npu"), ("..", "npu"), ("", "npu"), ("u-1", "../npu"), ("u-1", "a/b")):
        with pytest.raises(ValueError, match=r"cannot name a device metadata directory|is not a DNS label"):
            store.path(uid, request)
    with pytest.raises(ValueError):
        store.remove_claim("..")
    assert not store.remove_claim("u-2") and store.claim_uids() == []
    store.write("u-1", "npu", b"{}\n")
    assert store.holds("u-1") and store.claim_uids() == ["u-1"] and store.missing("u-1", ["npu", "x"]) == [
        str(store.path("u-1", "x"))]
    assert store.remove_claim("u-1") and not store.holds("u-1")


def test_attributes_in_resourceslice_form():
    assert [attribute_to_api(v) for v in (3, "910B3", True, Version("25.5.1"))] == \
        [{"int": 3}, {"string": "910B3"}, {"bool": True}, {"version": "25.5.1"}]
    with pytest.raises(TypeError, match="not bool, int, str or Version"):
        attribute_to_api(1.5)


def test_the_document_is_a_v1alpha1_stream_keeping_the_full_request_name():
    doc = dm.document(claim_namespace="ns", claim_name="c", claim_uid="u-1", pod_claim_name="gpu",
                      requests=[("npu/small", [dm.MetadataDevice(DRIVER, NODE, "npu-0-0", {"index": {"int": 0}})])])
    [read] = json_stream(dm.encode_stream([doc]).decode())
    assert read == {
        "kind": "DeviceMetadata", "apiVersion": "metadata.resource.k8s.io/v1beta1",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u-1", "generation": 1},
        "podClaimName": "gpu",
        "requests": [{"name": "npu/small", "devices": [
            {"driver": DRIVER, "pool": NODE, "name": "npu-0-0", "attributes": {"index": {"int": 0}}}]}],
    }
    plain = dm.document(claim_namespace="ns", claim_name="c", claim_uid="u-1", pod_claim_name=None, requests=[],
                        api_version="metadata.resource.k8s.io/v1alpha1")
    assert "podClaimName" not in plain and plain["apiVersion"] == "metadata.resource.k8s.io/v1alpha1"


def test_parse_claim_keeps_the_pod_claim_name_annotation_and_checks_its_type():
    obj = claim_object("c")
    assert parse_claim(obj, DRIVER).pod_claim_name is None
    obj["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "npu"}
    assert parse_claim(obj, DRIVER).pod_claim_name == "npu"
    obj["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": 7}
    with pytest.raises(ClaimError, match=r"metadata.annotations\['resource.kubernetes.io/pod-claim-name'\] must "
                                         r"be a string, not 7"):
        parse_claim(obj, DRIVER)
    obj["metadata"]["annotations"] = "x"
    with pytest.raises(ClaimError, match=r"metadata\.annotations must be an object"):
        parse_claim(obj, DRIVER)


# -- DeviceState ------------------------------------------------------------------------------------


async def make_state(root: Path, *, metadata: bool = True, boot_id: str = "boot-1",
                     profiles: dict[str, Any] | None = None) -> DeviceState:
    profiles = profiles or {"fake": FakeProfile()}
    ctx = ProfileContext(node_name=NODE, driver_name=DRIVER, fake_devices=4, state_dir=root / "state")
    inventories = {name: await p.discover(ctx) for name, p in profiles.items()}
    (root / "plugin").mkdir(parents=True, exist_ok=True)
    state = DeviceState(driver_name=DRIVER, node_name=NODE, profiles=profiles, inventories=inventories,
                        profile_ctx=ctx, cdi=CdiStore(root / "cdi"), plugin_dir=root / "plugin", boot_id=boot_id,
                        claim_source=StandaloneClaimSource(root / "claims", DRIVER), device_metadata=metadata)
    await state.recover()
    return state


def ref(obj: dict) -> ClaimRef:
    meta = obj["metadata"]
    return ClaimRef(meta["namespace"], meta["name"], meta["uid"])


def host_file(root: Path, uid: str, request: str) -> Path:
    return root / "plugin" / "device-metadata" / uid / request / "metadata.json"


def spec_of(root: Path, uid: str) -> dict[str, Any]:
    return yaml.safe_load((root / "cdi" / naming.claim_spec_file(KIND, uid)).read_text())


async def test_prepare_names_a_metadata_device_on_the_first_device_of_each_request(tmp_path):
    state = await make_state(tmp_path)
    obj = write_claim(tmp_path, claim_object("c1", results=[("npu/small", "npu-1-0"), ("npu/small", "npu-0-0"),
                                                            ("other", "npu-2-0")]))
    uid = obj["metadata"]["uid"]
    [first, second, other] = (await state.prepare([ref(obj)]))[uid]
    assert first.cdi_device_ids == (f"{KIND}={uid}-npu-1-0", f"{KIND}={uid}-metadata_npu", f"{KIND}=common")
    assert second.cdi_device_ids == (f"{KIND}={uid}-npu-0-0", f"{KIND}=common")
    assert other.cdi_device_ids == (f"{KIND}={uid}-npu-2-0", f"{KIND}={uid}-metadata_other", f"{KIND}=common")

    spec = {d["name"]: d["containerEdits"] for d in spec_of(tmp_path, uid)["devices"]}
    assert spec[f"{uid}-metadata_npu"] == {"mounts": [{
        "hostPath": str(host_file(tmp_path, uid, "npu")),
        "containerPath": f"{ROOT}/resourceclaims/c1/npu/{DRIVER}-metadata.json",
        "options": ["ro", "nosuid", "nodev", "bind"]}]}
    doc = read_file(host_file(tmp_path, uid, "npu"))
    assert doc["metadata"] == {"name": "c1", "namespace": "default", "uid": uid, "generation": 1}
    assert "podClaimName" not in doc
    [request] = doc["requests"]
    assert request["name"] == "npu/small"
    assert [d["name"] for d in request["devices"]] == ["npu-1-0", "npu-0-0"]
    published = state.inventories["fake"].device("npu-1-0").attributes
    assert request["devices"][0] == {"driver": DRIVER, "pool": NODE, "name": "npu-1-0",
                                     "attributes": {k: attribute_to_api(v) for k, v in published.items()}}
    assert request["devices"][0]["attributes"]["index"] == {"int": 1}
    assert oct(host_file(tmp_path, uid, "npu").stat().st_mode & 0o777) == "0o644"

    assert await state.unprepare([ref(obj)]) == {uid: None}
    assert not (tmp_path / "plugin" / "device-metadata" / uid).exists()
    assert not (tmp_path / "cdi" / naming.claim_spec_file(KIND, uid)).exists()


async def test_a_template_claim_gets_its_file_under_the_pod_claim_name(tmp_path):
    state = await make_state(tmp_path)
    obj = claim_object("pod-npu-x7k2p", results=[("npu", "npu-0-0")])
    obj["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "accel"}
    write_claim(tmp_path, obj)
    uid = obj["metadata"]["uid"]
    assert not isinstance((await state.prepare([ref(obj)]))[uid], Exception)
    [mount] = {d["name"]: d for d in spec_of(tmp_path, uid)["devices"]}[f"{uid}-metadata_npu"][
        "containerEdits"]["mounts"]
    assert mount["containerPath"] == f"{ROOT}/resourceclaimtemplates/accel/npu/{DRIVER}-metadata.json"
    doc = read_file(host_file(tmp_path, uid, "npu"))
    assert (doc["podClaimName"], doc["metadata"]["name"]) == ("accel", "pod-npu-x7k2p")


async def test_a_pod_claim_name_that_cannot_name_a_directory_fails_the_claim_naming_the_annotation(tmp_path):
    state = await make_state(tmp_path)
    obj = claim_object("c1")
    obj["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "../../etc"}
    write_claim(tmp_path, obj)
    error = (await state.prepare([ref(obj)]))[obj["metadata"]["uid"]]
    assert isinstance(error, PrepareError)
    assert "metadata.annotations['resource.kubernetes.io/pod-claim-name'] '../../etc' is not a DNS label" in str(error)
    assert not (tmp_path / "plugin" / "device-metadata").exists()


async def test_with_metadata_off_the_answer_and_the_spec_are_as_before(tmp_path):
    state = await make_state(tmp_path, metadata=False)
    obj = write_claim(tmp_path, claim_object("c1"))
    uid = obj["metadata"]["uid"]
    [device] = (await state.prepare([ref(obj)]))[uid]
    assert device.cdi_device_ids == (f"{KIND}={uid}-npu-0-0", f"{KIND}=common")
    assert not (tmp_path / "plugin" / "device-metadata").exists()


async def test_a_removed_file_is_repaired_even_after_metadata_was_turned_off(tmp_path):
    state = await make_state(tmp_path)
    obj = write_claim(tmp_path, claim_object("c1"))
    uid = obj["metadata"]["uid"]
    answer = (await state.prepare([ref(obj)]))[uid]
    written = host_file(tmp_path, uid, "npu").read_bytes()
    await state.close()
    host_file(tmp_path, uid, "npu").unlink()
    # restarted with the flag off: the kubelet holds an answer naming the file, so it comes back
    state = await make_state(tmp_path, metadata=False)
    assert state.claims.missing_spec_files(state.prepared_claims[uid]) == [str(host_file(tmp_path, uid, "npu"))]
    assert await state.repair_specs() == [uid]
    assert host_file(tmp_path, uid, "npu").read_bytes() == written
    assert (await state.prepare([ref(obj)]))[uid] == answer  # and a replay answers the same


async def test_a_replay_remakes_a_missing_file(tmp_path):
    state = await make_state(tmp_path)
    obj = write_claim(tmp_path, claim_object("c1"))
    uid = obj["metadata"]["uid"]
    answer = (await state.prepare([ref(obj)]))[uid]
    host_file(tmp_path, uid, "npu").unlink()
    assert (await state.prepare([ref(obj)]))[uid] == answer
    assert host_file(tmp_path, uid, "npu").is_file()


async def test_an_orphan_metadata_directory_is_removed_at_start_up_and_a_live_one_kept(tmp_path):
    state = await make_state(tmp_path)
    obj = write_claim(tmp_path, claim_object("c1"))
    uid = obj["metadata"]["uid"]
    await state.prepare([ref(obj)])
    await state.close()
    orphan = host_file(tmp_path, "0f0e-dead", "npu")
    orphan.parent.mkdir(parents=True)
    orphan.write_text("{}")
    await make_state(tmp_path)
    assert not orphan.parent.parent.exists()
    assert host_file(tmp_path, uid, "npu").is_file()


async def test_unprepare_of_an_unknown_claim_removes_its_stray_metadata(tmp_path):
    state = await make_state(tmp_path)
    stray = host_file(tmp_path, "0f0e-1", "npu")
    stray.parent.mkdir(parents=True)
    stray.write_text("{}")
    assert await state.unprepare([ClaimRef("default", "gone", "0f0e-1")]) == {"0f0e-1": None}
    assert not stray.parent.parent.exists()


async def test_a_failed_metadata_write_fails_only_that_claim_and_leaves_nothing(tmp_path, monkeypatch):
    state = await make_state(tmp_path)
    good, bad = (write_claim(tmp_path, claim_object(n, results=[("npu", d)])) for n, d in
                 (("good", "npu-0-0"), ("bad", "npu-1-0")))
    real = state.claims.metadata.write

    def write(claim_uid: str, request: str, data: bytes) -> Path:
        if claim_uid == bad["metadata"]["uid"]:
            raise OSError(28, "No space left on device", "/x/metadata.json")
        return real(claim_uid, request, data)

    monkeypatch.setattr(state.claims.metadata, "write", write)
    results = await state.prepare([ref(good), ref(bad)])
    assert not isinstance(results[good["metadata"]["uid"]], Exception)
    assert "No space left on device (/x/metadata.json)" in str(results[bad["metadata"]["uid"]])
    assert bad["metadata"]["uid"] not in state.prepared_claims
    assert not (tmp_path / "cdi" / naming.claim_spec_file(KIND, bad["metadata"]["uid"])).exists()


# -- HAMivNPUCore's quota -----------------------------------------------------------------------------


def test_hami_vnpu_core_tells_each_share_its_quota_and_an_admin_result_nothing():
    profile = VnpuCoreProfile()
    ctx = ApplyContext(ProfileContext(node_name=NODE, driver_name=DRIVER), Inventory(), "u-1", "ns", "c")
    shares = [AllocatedDevice("npu", DRIVER, NODE, "npu-0-0", "s1", {"memory": "8Gi", "cores": "30"}),
              AllocatedDevice("npu", DRIVER, NODE, "npu-1-0", "s2", {"memory": "3000Mi", "cores": "12.5"}),
              AllocatedDevice("watch", DRIVER, NODE, "npu-2-0", admin_access=True)]
    assert profile.device_metadata(None, shares, ctx) == {
        "npu-0-0": {"memoryQuotaMiB": 8192, "coresQuotaPercent": 30},
        "npu-1-0": {"memoryQuotaMiB": 3000, "coresQuotaPercent": "12.5"},
    }


class DecidingFake(FakeProfile):
    """The fake profile with a ``device_metadata`` hook: what it decides wins over what is published."""

    def __init__(self, decided: dict[str, Any]) -> None:
        super().__init__()
        self.decided = decided
        self.calls: list[tuple[Any, list[str]]] = []

    def device_metadata(self, config: Any, devices: Any, ctx: ApplyContext) -> dict[str, dict[str, Any]]:
        self.calls.append((config, [d.device for d in devices]))
        return {d.device: self.decided for d in devices}


async def test_a_profile_hook_adds_attributes_and_wins_over_the_published_ones(tmp_path):
    profile = DecidingFake({"index": 99, "driverVersion": Version("1.2.3"), "example.com/slot": "a"})
    state = await make_state(tmp_path, profiles={"fake": profile})
    obj = write_claim(tmp_path, claim_object("c1", results=[("npu", "npu-3-0")]))
    uid = obj["metadata"]["uid"]
    assert not isinstance((await state.prepare([ref(obj)]))[uid], Exception)
    doc = read_file(host_file(tmp_path, uid, "npu"))
    attributes = doc["requests"][0]["devices"][0]["attributes"]
    assert (attributes["index"], attributes["driverVersion"], attributes["example.com/slot"]) == \
        ({"int": 99}, {"version": "1.2.3"}, {"string": "a"})
    assert attributes["chipName"] == {"string": "910B3"}  # published, kept
    assert profile.calls == [(profile.default_config(), ["npu-3-0"])]


async def test_a_hook_attribute_the_api_would_refuse_fails_the_claim_naming_the_profile(tmp_path):
    state = await make_state(tmp_path, profiles={"fake": DecidingFake({"bad name": 1})})
    obj = write_claim(tmp_path, claim_object("c1"))
    error = (await state.prepare([ref(obj)]))[obj["metadata"]["uid"]]
    assert isinstance(error, PrepareError)
    assert "profile fake gave device npu-0-0 the device metadata attribute 'bad name'" in str(error)


async def test_without_metadata_the_hook_is_not_called(tmp_path):
    profile = DecidingFake({"index": 1})
    state = await make_state(tmp_path, metadata=False, profiles={"fake": profile})
    obj = write_claim(tmp_path, claim_object("c1"))
    await state.prepare([ref(obj)])
    assert profile.calls == []
