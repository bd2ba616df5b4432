"""cdi/: spec validation, the lowest cdiVersion a spec needs, names, and the spec directory on a real fs."""

from __future__ import annotations

import os

import pytest
import yaml

from ascend_dra.cdi import naming
from ascend_dra.cdi.spec import CdiDevice, ContainerEdits, DeviceNode, Mount, Spec, SpecError, minimum_version
from ascend_dra.cdi.store import CdiStore

DRIVER = "ascend.project-hami.io"
KIND = f"k8s.{DRIVER}/npu"
UID = "5d1e2c3a-0b4f-4e6a-9c7d-8e9f0a1b2c3d"
ENV = ContainerEdits(env=("A=1",))


def spec(*devices: CdiDevice, kind: str = KIND, edits: ContainerEdits = ContainerEdits()) -> Spec:
    return Spec(kind, devices, edits)


def device(name: str = "dev-a", edits: ContainerEdits = ENV) -> CdiDevice:
    return CdiDevice(name, edits)


# -- validation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        pytest.param(spec(device(), kind="npu"), "kind: 'npu' is not vendor/class (letters, digits, '_', '.', '-')",
                     id="kind-without-slash"),
        pytest.param(spec(device(), kind="k8s.x/-npu"),
                     "kind: 'k8s.x/-npu' is not vendor/class (letters, digits, '_', '.', '-')",
                     id="class-leading-dash"),
        pytest.param(spec(device(), kind="1vendor/npu"),
                     "kind: '1vendor/npu' is not vendor/class (letters, digits, '_', '.', '-')",
                     id="vendor-leading-digit"),
        pytest.param(spec(), "devices: a spec needs at least one device", id="no-devices"),
        pytest.param(spec(device("-dev")),
                     "devices[0].name: '-dev' must start and end with a letter or digit and contain only letters, "
                     "digits, '_', '.', ':' and '-'", id="device-name-leading-dash"),
        pytest.param(spec(device("a/b")),
                     "devices[0].name: 'a/b' must start and end with a letter or digit and contain only letters, "
                     "digits, '_', '.', ':' and '-'", id="device-name-slash"),
        pytest.param(spec(device("dev-a"), device("dev-a")), "devices[1].name: duplicate device 'dev-a'",
                     id="duplicate-device"),
        pytest.param(spec(device(edits=ContainerEdits())),
                     "devices[0].containerEdits: a device needs at least one edit", id="device-without-edits"),
        pytest.param(spec(device(edits=ContainerEdits(env=("NOEQUALS",)))),
                     "devices[0].containerEdits.env[0]: 'NOEQUALS' is not NAME=value with a non-empty NAME",
                     id="env-without-equals"),
        pytest.param(spec(device(edits=ContainerEdits(env=("A=1", "=x")))),
                     "devices[0].containerEdits.env[1]: '=x' is not NAME=value with a non-empty NAME",
                     id="env-empty-name"),
        pytest.param(spec(device(edits=ContainerEdits(env=("A=b\x00c",)))),
                     "devices[0].containerEdits.env[0]: 'A=b\\x00c' is not NAME=value with a non-empty NAME",
                     id="env-nul"),
        pytest.param(spec(device(edits=ContainerEdits(device_nodes=(DeviceNode("dev/davinci0"),)))),
                     "devices[0].containerEdits.deviceNodes[0].path: 'dev/davinci0' is not absolute",
                     id="device-node-relative-path"),
        pytest.param(spec(device(edits=ContainerEdits(device_nodes=(DeviceNode("/dev/x", host_path="null"),)))),
                     "devices[0].containerEdits.deviceNodes[0].hostPath: 'null' is not absolute",
                     id="device-node-relative-host-path"),
        pytest.param(spec(device(edits=ContainerEdits(device_nodes=(DeviceNode("/dev/x", type="z"),)))),
                     "devices[0].containerEdits.deviceNodes[0].type: 'z' is not one of '', b, c, u, p",
                     id="device-node-type"),
        pytest.param(spec(device(edits=ContainerEdits(device_nodes=(DeviceNode("/dev/x", permissions="rwx"),)))),
                     "devices[0].containerEdits.deviceNodes[0].permissions: 'rwx' is not a subset of 'rwm'",
                     id="device-node-permissions"),
        pytest.param(spec(device(edits=ContainerEdits(mounts=(Mount("host", "/c"),)))),
                     "devices[0].containerEdits.mounts[0].hostPath: 'host' is not absolute",
                     id="mount-relative-host-path"),
        pytest.param(spec(device(edits=ContainerEdits(mounts=(Mount("/h", "c"),)))),
                     "devices[0].containerEdits.mounts[0].containerPath: 'c' is not absolute",
                     id="mount-relative-container-path"),
        pytest.param(spec(device(), edits=ContainerEdits(env=("BAD",))),
                     "containerEdits.env[0]: 'BAD' is not NAME=value with a non-empty NAME", id="spec-level-edits"),
    ],
)
def test_validate_names_each_problem(bad, problem):
    with pytest.raises(SpecError) as raised:
        bad.validate()
    assert str(raised.value) == f"invalid CDI spec: {problem}"


def test_validate_lists_every_problem_at_once_in_order():
    bad = Spec(
        "nokind",
        (
            CdiDevice("ok-1", ContainerEdits(env=("X",), mounts=(Mount("rel", "/c"),))),
            CdiDevice("ok-1", ContainerEdits()),
        ),
        ContainerEdits(device_nodes=(DeviceNode("/dev/x", type="q"),)),
    )
    with pytest.raises(SpecError) as raised:
        bad.validate()
    assert str(raised.value) == (
        "invalid CDI spec: "
        "kind: 'nokind' is not vendor/class (letters, digits, '_', '.', '-'); "
        "devices[0].containerEdits.env[0]: 'X' is not NAME=value with a non-empty NAME; "
        "devices[0].containerEdits.mounts[0].hostPath: 'rel' is not absolute; "
        "devices[1].name: duplicate device 'ok-1'; "
        "devices[1].containerEdits: a device needs at least one edit; "
        "containerEdits.deviceNodes[0].type: 'q' is not one of '', b, c, u, p"
    )


def test_spec_error_is_a_value_error():
    assert issubclass(SpecError, ValueError)


@pytest.mark.parametrize(
    "good",
    [
        pytest.param(spec(device()), id="env-only"),
        pytest.param(spec(device(edits=ContainerEdits(env=("EMPTY=",)))), id="env-empty-value"),
        pytest.param(spec(device(f"{UID}-npu-0-0")), id="digit-leading-name"),
        pytest.param(spec(device("a")), id="one-character-name"),
        pytest.param(spec(device("x:y.z_w-1")), id="name-with-every-inner-character"),
        pytest.param(spec(device(edits=ContainerEdits(
            device_nodes=(DeviceNode("/dev/davinci0", "/dev/null", "c", 236, 0, "rwm"),),
            mounts=(Mount("/h", "/c", (), "bind"),)))), id="every-field"),
        pytest.param(spec(device(), kind="k8s.a-b.c/class.with.dots"), id="dots-in-class"),
    ],
)
def test_validate_accepts_what_the_cdi_library_accepts(good):
    good.validate()


# -- minimum_version --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "version"),
    [
        pytest.param(spec(device("dev-a")), "0.3.0", id="plain"),
        pytest.param(spec(device(edits=ContainerEdits(mounts=(Mount("/h", "/c"),)))), "0.3.0",
                     id="mount-without-type"),
        pytest.param(spec(device(edits=ContainerEdits(mounts=(Mount("/h", "/c", type="bind"),)))), "0.4.0",
                     id="mount-type"),
        pytest.param(spec(device(), edits=ContainerEdits(mounts=(Mount("/h", "/c", type="bind"),))), "0.4.0",
                     id="spec-level-mount-type"),
        pytest.param(spec(device(edits=ContainerEdits(device_nodes=(DeviceNode("/dev/a", host_path="/dev/b"),)))),
                     "0.5.0", id="host-path"),
        pytest.param(spec(device(), edits=ContainerEdits(device_nodes=(DeviceNode("/dev/a", host_path="/dev/b"),))),
                     "0.5.0", id="spec-level-host-path"),
        pytest.param(spec(device("0abc")), "0.5.0", id="digit-leading-device-name"),
        pytest.param(spec(device("abc0")), "0.3.0", id="digit-trailing-device-name"),
        pytest.param(spec(device("0abc", ContainerEdits(mounts=(Mount("/h", "/c", type="bind"),)))), "0.5.0",
                     id="digit-name-beats-mount-type"),
        pytest.param(spec(device(), kind="k8s.example.com/npu.v2"), "0.6.0", id="dot-in-class"),
        pytest.param(spec(device(), kind="k8s.example.com/npu"), "0.3.0", id="dot-in-vendor-only"),
        pytest.param(spec(device("0abc"), kind="k8s.example.com/npu.v2"), "0.6.0", id="dot-in-class-beats-digit"),
    ],
)
def test_minimum_version_is_the_lowest_that_covers_the_content(subject, version):
    assert minimum_version(subject) == version
    assert subject.to_dict()["cdiVersion"] == version


def test_to_dict_shape():
    subject = Spec(
        KIND,
        (CdiDevice(f"{UID}-npu-1-0", ContainerEdits(
            env=("ASCEND_VISIBLE_DEVICES=1",),
            device_nodes=(DeviceNode("/dev/davinci1", host_path="/dev/null", type="c", major=236, minor=1,
                                     permissions="rw"),),
            mounts=(Mount("/opt/driver", "/usr/local/Ascend/driver"),))),),
        ContainerEdits(env=("SPEC=1",)),
    )
    assert subject.to_dict() == {
        "cdiVersion": "0.5.0",
        "kind": KIND,
        "devices": [{
            "name": f"{UID}-npu-1-0",
            "containerEdits": {
                "env": ["ASCEND_VISIBLE_DEVICES=1"],
                "deviceNodes": [{"path": "/dev/davinci1", "hostPath": "/dev/null", "type": "c", "major": 236,
                                 "minor": 1, "permissions": "rw"}],
                "mounts": [{"hostPath": "/opt/driver", "containerPath": "/usr/local/Ascend/driver",
                            "options": ["ro", "nosuid", "nodev", "bind"]}],
            },
        }],
        "containerEdits": {"env": ["SPEC=1"]},
    }


def test_merged_edits_keep_order_and_drop_repeated_nodes_and_mounts():
    node, mount = DeviceNode("/dev/a"), Mount("/h", "/c")
    first = ContainerEdits(env=("A=1",), device_nodes=(node,), mounts=(mount,))
    second = ContainerEdits(env=("A=2",), device_nodes=(node, DeviceNode("/dev/b")), mounts=(mount,))
    assert first.merged(second) == ContainerEdits(env=("A=1", "A=2"), device_nodes=(node, DeviceNode("/dev/b")),
                                                  mounts=(mount,))


# -- naming -----------------------------------------------------------------------------------------


def test_kind_and_qualified_names():
    assert naming.kind(DRIVER, "npu") == "k8s.ascend.project-hami.io/npu"
    assert naming.qualified_name(KIND, "common") == "k8s.ascend.project-hami.io/npu=common"
    assert naming.qualified_name(KIND, f"{UID}-npu-0-0") == f"k8s.ascend.project-hami.io/npu={UID}-npu-0-0"


@pytest.mark.parametrize(
    ("share_id", "expected"),
    [
        pytest.param(None, f"{UID}-npu-3-0", id="exclusive"),
        pytest.param("", f"{UID}-npu-3-0", id="empty-share-id"),
        pytest.param("0a1b", f"{UID}-npu-3-0-0a1b", id="shared"),
    ],
)
def test_claim_device_name(share_id, expected):
    assert naming.claim_device_name(UID, "npu-3-0", share_id) == expected


def test_spec_file_names():
    assert naming.spec_file_prefix(KIND) == "k8s.ascend.project-hami.io-npu"
    assert naming.claim_spec_file(KIND, UID) == f"k8s.ascend.project-hami.io-npu_{UID}.yaml"
    assert naming.claim_spec_file(KIND, "a/b") == "k8s.ascend.project-hami.io-npu_a_b.yaml"
    assert naming.common_spec_file(KIND) == "k8s.ascend.project-hami.io-npu_common.yaml"


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        pytest.param("a", True, id="one-letter"),
        pytest.param("0", True, id="one-digit"),
        pytest.param(f"{UID}-npu-0-0", True, id="claim-device"),
        pytest.param("A_b.c:d-e", True, id="inner-characters"),
        pytest.param("", False, id="empty"),
        pytest.param("-a", False, id="leading-dash"),
        pytest.param("a-", False, id="trailing-dash"),
        pytest.param("a_", False, id="trailing-underscore"),
        pytest.param("a/b", False, id="slash"),
        pytest.param("a b", False, id="space"),
        pytest.param("a=b", False, id="equals"),
        # BUG (cdi/naming.py): `$` in _DEVICE also matches before a final "\n", so a name ending in a
        # newline passes; use re.fullmatch (or \Z).
        pytest.param("abc\n", False, id="trailing-newline"),
    ],
)
def test_device_name_validity(name, valid):
    assert naming.is_device_name(name) is valid, (
        f"is_device_name({name!r}) should be {valid}" + (" (BUG: `$` matches before a final newline; use "
                                                         "re.fullmatch)" if name.endswith("\n") else ""))


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        pytest.param(KIND, True, id="ours"),
        pytest.param("a/b", True, id="shortest"),
        pytest.param("vendor.io/class_1", True, id="underscore-digit"),
        pytest.param("vendor", False, id="no-slash"),
        pytest.param("/class", False, id="no-vendor"),
        pytest.param("vendor/", False, id="no-class"),
        pytest.param("vendor/a/b", False, id="two-slashes"),
        pytest.param("vendor./class", False, id="vendor-trailing-dot"),
        pytest.param("vendor/_class", False, id="class-leading-underscore"),
        # BUG (cdi/naming.py): same trailing-newline hole in _VENDOR_OR_CLASS.
        pytest.param("vendor/class\n", False, id="trailing-newline"),
    ],
)
def test_kind_validity(value, valid):
    assert naming.is_kind(value) is valid, (
        f"is_kind({value!r}) should be {valid}" + (" (BUG: `$` matches before a final newline; use re.fullmatch)"
                                                   if value.endswith("\n") else ""))


# -- CdiStore ---------------------------------------------------------------------------------------


def claim_spec(uid: str = UID) -> Spec:
    return Spec(KIND, (CdiDevice(f"{uid}-npu-0-0", ContainerEdits(
        env=("ASCEND_VISIBLE_DEVICES=0",), device_nodes=(DeviceNode("/dev/davinci0", host_path="/dev/null"),),
        mounts=(Mount("/opt/d", "/usr/local/Ascend/driver"),))),))


def test_ensure_root_creates_the_directory_0755(tmp_path):
    store = CdiStore(tmp_path / "var" / "run" / "cdi")
    store.ensure_root()
    store.ensure_root()
    assert (tmp_path / "var" / "run" / "cdi").is_dir()
    assert (tmp_path / "var" / "run" / "cdi").stat().st_mode & 0o777 == 0o755 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_write_parses_back_as_to_dict_and_leaves_no_temp_file(tmp_path):
    store = CdiStore(tmp_path)
    subject = claim_spec()
    filename = naming.claim_spec_file(KIND, UID)
    path = store.write(filename, subject)
    assert path == tmp_path / filename
    assert yaml.safe_load(path.read_text()) == subject.to_dict()
    assert os.listdir(tmp_path) == [filename]
    assert path.stat().st_mode & 0o777 == 0o644 & ~_umask()


def test_write_replaces_an_older_file(tmp_path):
    store = CdiStore(tmp_path)
    filename = naming.claim_spec_file(KIND, UID)
    store.write(filename, claim_spec())
    newer = Spec(KIND, (CdiDevice(f"{UID}-npu-0-0", ContainerEdits(env=("NEW=1",))),))
    store.write(filename, newer)
    assert yaml.safe_load((tmp_path / filename).read_text()) == newer.to_dict()
    assert os.listdir(tmp_path) == [filename]


def test_write_of_an_invalid_spec_writes_nothing(tmp_path):
    store = CdiStore(tmp_path)
    filename = naming.claim_spec_file(KIND, UID)
    store.write(filename, claim_spec())
    before = (tmp_path / filename).read_bytes()
    with pytest.raises(SpecError) as raised:
        store.write(filename, Spec(KIND, (CdiDevice("dev", ContainerEdits()),)))
    assert str(raised.value) == "invalid CDI spec: devices[0].containerEdits: a device needs at least one edit"
    assert (tmp_path / filename).read_bytes() == before
    assert os.listdir(tmp_path) == [filename]


def test_remove_reports_whether_the_file_was_there(tmp_path):
    store = CdiStore(tmp_path)
    filename = naming.claim_spec_file(KIND, UID)
    store.write(filename, claim_spec())
    assert store.remove(filename) is True
    assert not (tmp_path / filename).exists()
    assert store.remove(filename) is False


def test_claim_specs_lists_per_claim_files_of_our_kinds_only(tmp_path):
    store = CdiStore(tmp_path)
    vnpu = naming.kind(DRIVER, "vnpu")
    other = naming.kind("gpu.example.com", "gpu")
    uid2 = "0f0f0f0f-1111-2222-3333-444455556666"
    store.write(naming.claim_spec_file(KIND, UID), claim_spec())
    store.write(naming.claim_spec_file(vnpu, UID), Spec(vnpu, (CdiDevice("v", ENV),)))
    store.write(naming.claim_spec_file(KIND, uid2), claim_spec(uid2))
    store.write(naming.common_spec_file(KIND), Spec(KIND, (CdiDevice("common", ENV),)))
    store.write(naming.claim_spec_file(other, "9"), Spec(other, (CdiDevice("g", ENV),)))
    (tmp_path / f".{naming.claim_spec_file(KIND, 'x')}.123.tmp").write_text("torn")
    (tmp_path / f"{naming.spec_file_prefix(KIND)}_y.json").write_text("{}")
    found = store.claim_specs([KIND, vnpu])
    assert {uid: sorted(files) for uid, files in found.items()} == {
        UID: sorted([naming.claim_spec_file(KIND, UID), naming.claim_spec_file(vnpu, UID)]),
        uid2: [naming.claim_spec_file(KIND, uid2)],
    }


def test_claim_specs_of_a_missing_directory_is_empty(tmp_path):
    assert CdiStore(tmp_path / "absent").claim_specs([KIND]) == {}
