"""Every profile's device nodes follow one rule (docs/architecture.md, "Device nodes"): the daemon
reads them under ``--dev-root``; a CDI spec names ``/dev/<name>`` in the container and
``<--dev-root-on-host>/<name>`` on the host (``--dev-root`` itself by default); a simulated device's
node is the host's ``/dev/null``.

Issue 40: ``npu-310P`` wrote ``/dev/davinciN`` and ``HAMivNPUCore`` ``<dev-root>/davinciN`` for the
same flag, and a simulated node (``/dev/null``) was looked for under a lab's ``--dev-root``.

Each case runs a real Prepare through :class:`DeviceState` (which refuses a spec naming a node that
is not where the daemon looks) and reads the claim's CDI spec, in two layouts of one fake tree
``T/dev``: a lab (``--dev-root T/dev``; the host's nodes are ``T/dev/...``) and a daemon in a
container that sees the host's ``/dev`` at ``T/dev`` (``--dev-root T/dev --dev-root-on-host /dev``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from ascend_dra.cdi.store import CdiStore
from ascend_dra.model import Inventory
from ascend_dra.profiles.ascend.hardvnpu.profile import HardVnpuProfile
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from ascend_dra.profiles.ascend.sim import labnode, npusmi_sim
from ascend_dra.profiles.ascend.vnpucore.profile import VnpuCoreProfile
from ascend_dra.profiles.base import ProfileContext
from ascend_dra.profiles.fake import FakeProfile
from ascend_dra.profiles.gpu import GpuProfile
from ascend_dra.state.claims import StandaloneClaimSource
from ascend_dra.state.devicestate import ClaimRef, DeviceState
from tests.claimfiles import DRIVER, claim_object, write_claim
from tests.hardvnpu import SimHost
from tests.unit.test_ascend_discovery import ANSWERS_910A, tree_910a
from tests.unit.test_ascend_profiles import host_root, lab_310p3
from tests.unit.test_ascend_support import fake_npu_smi

pytestmark = pytest.mark.anyio

NODE = "node-1"
SHARED = ("davinci_manager", "devmm_svm", "hisi_hdc")


@attrs.frozen
class Case:
    """One profile on one fake node: what to load, the context, the claim's result, and the nodes
    its spec must name as ``(container path, name under the host's device directory or None for
    /dev/null)``."""

    profile: Any
    ctx: ProfileContext
    result: dict[str, Any]
    nodes: tuple[tuple[str, str | None], ...]
    inventory: Callable[[Inventory], Inventory] = lambda inventory: inventory


def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    (tmp_path / "dev").mkdir()
    ctx = ProfileContext(node_name=NODE, driver_name=DRIVER, dev_root=tmp_path / "dev", fake_devices=2)
    return Case(FakeProfile(), ctx, {"request": "npu", "device": "npu-1-0"}, (("/dev/davinci1", None),))


def gpu_simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    (tmp_path / "dev").mkdir()
    ctx = ProfileContext(node_name=NODE, driver_name=DRIVER, dev_root=tmp_path / "dev", fake_devices=2,
                         options={"gpu.simulate": "always"})
    return Case(GpuProfile(), ctx, {"request": "gpu", "device": "gpu-0"}, (("/dev/nvidia0", None),))


def gpu_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    """NVML's devices (the simulated ones, answered as NVML's: no GPU here)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidiactl"):
        (dev / name).touch()
    ctx = ProfileContext(node_name=NODE, driver_name=DRIVER, dev_root=dev, fake_devices=2,
                         options={"gpu.simulate": "always"})
    return Case(GpuProfile(), ctx, {"request": "gpu", "device": "gpu-0"},
                (("/dev/nvidia0", "nvidia0"), ("/dev/nvidiactl", "nvidiactl")),
                inventory=lambda inventory: attrs.evolve(inventory, source="nvml"))


def npu_310p(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    ctx = attrs.evolve(lab_310p3(tmp_path), node_name=NODE)
    return Case(Npu310PProfile(host_root=host_root(tmp_path)), ctx, {"request": "npu", "device": "npu-1-0"},
                (("/dev/davinci2", "davinci2"), *((f"/dev/{n}", n) for n in SHARED)))


def npu_310p_simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    """The simulated tier beside a tree that has the shared nodes: those are named, the chip is /dev/null."""
    case = npu_310p(tmp_path, monkeypatch)
    ctx = attrs.evolve(case.ctx, npu_smi=str(tmp_path / "none"), options={"npu-310P.simulate": "always"})
    return attrs.evolve(case, ctx=ctx, nodes=(("/dev/davinci1", None), *((f"/dev/{n}", n) for n in SHARED)))


def npu_910(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    dev, sys_root = tree_910a(tmp_path)
    ctx = ProfileContext(node_name=NODE, driver_name=DRIVER, dev_root=dev, sys_root=sys_root,
                         npu_smi=str(fake_npu_smi(tmp_path, ANSWERS_910A)), state_dir=tmp_path / "state")
    # npu-0-0 is NPU 0, on davinci3 (tree_910a numbers the nodes in bus order).
    return Case(Npu910Profile(), ctx, {"request": "npu", "device": "npu-0-0"},
                (("/dev/davinci3", "davinci3"), *((f"/dev/{n}", n) for n in SHARED)))


def hard_vnpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    """A vNPU the simulator makes in the host's device directory (the daemon's T/dev), as the driver
    makes ``/dev/vdavinci<ID>``; no ``vnpu-dev-dir`` option."""
    host = SimHost(tmp_path / "sim", ((4, 0, 0, 0, "910B4"),))
    npusmi_sim.write_host(host.sim_dir, [{"npu_id": 4, "chip_id": 0, "logic_id": 0, "physical_id": 0,
                                          "model": "910B4", "bus_id": "0000:81:00.0"}],
                          boot_id_file=host.boot_id_file, dev_dir=host.dev)
    for key, value in host.env.items():
        monkeypatch.setenv(key, value)
    ctx = attrs.evolve(host.ctx(NODE), options={"hard-vNPU.boot-id-file": str(host.boot_id_file)})
    return Case(HardVnpuProfile(), ctx, {"request": "npu", "device": "vnpu-0-0-vir05-1c-8g-0"},
                (("/dev/davinci105", "vdavinci105"), *((f"/dev/{n}", n) for n in SHARED)))  # its vnpuID


def hami_vnpu_core(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    lab = labnode.build(tmp_path / "lab")
    ctx = ProfileContext(node_name=NODE, driver_name=DRIVER, npu_smi=str(lab.npu_smi), dev_root=lab.dev_root,
                         sys_root=tmp_path / "sys", state_dir=tmp_path / "state",
                         options={"HAMivNPUCore.hostRoot": str(lab.host_root)})
    return Case(VnpuCoreProfile(), ctx, {"request": "npu", "device": "npu-1-0", "shareID": "s-1",
                                         "consumedCapacity": {"memory": "8Gi", "cores": "50", "containers": "1"}},
                (("/dev/davinci2", "davinci2"), *((f"/dev/{n}", n) for n in SHARED)))


CASES: Mapping[str, Callable[[Path, pytest.MonkeyPatch], Case]] = {
    "fake": fake, "gpu-simulated": gpu_simulated, "gpu-nvml": gpu_nvml, "npu-310P": npu_310p,
    "npu-310P-simulated": npu_310p_simulated, "npu-910": npu_910, "hard-vNPU": hard_vnpu,
    "HAMivNPUCore": hami_vnpu_core,
}


async def spec_nodes(tmp_path: Path, case: Case) -> list[dict[str, str]]:
    """Prepare the case's claim through DeviceState; the device nodes of its claim spec."""
    name = case.profile.name
    inventory = case.inventory(await case.profile.discover(case.ctx))
    root = tmp_path / "daemon"
    (root / "plugin").mkdir(parents=True)
    state = DeviceState(driver_name=DRIVER, node_name=NODE, profiles={name: case.profile},
                        inventories={name: inventory}, profile_ctx=case.ctx, cdi=CdiStore(root / "cdi"),
                        plugin_dir=root / "plugin", boot_id="boot-1",
                        claim_source=StandaloneClaimSource(root / "claims", DRIVER))
    await state.recover()
    claim = write_claim(root, claim_object("c", node=NODE, results=[
        {"driver": DRIVER, "pool": NODE, **case.result}]))
    uid = claim["metadata"]["uid"]
    answer = (await state.prepare([ClaimRef("default", "c", uid)]))[uid]
    assert isinstance(answer, list), answer
    [spec] = [yaml.safe_load(p.read_text()) for p in (root / "cdi").glob(f"*{uid}*")]
    return [n for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]]


@pytest.mark.parametrize("layout", ["lab", "container"])
@pytest.mark.parametrize("profile", list(CASES))
async def test_each_profile_names_its_device_nodes_by_the_one_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   profile: str, layout: str) -> None:
    case = CASES[profile](tmp_path, monkeypatch)
    if layout == "container":
        case = attrs.evolve(case, ctx=attrs.evolve(case.ctx, dev_root_on_host=Path("/dev")))
        (case.ctx.dev_root / "null").touch()  # the host's /dev, seen at T/dev, has its null device
    host_dir = str(case.ctx.dev_root) if layout == "lab" else "/dev"
    expected = []
    for path, name in case.nodes:
        host = "/dev/null" if name is None else f"{host_dir}/{name}"
        expected.append({"path": path} if host == path else {"path": path, "hostPath": host})
    nodes = await spec_nodes(tmp_path, case)
    assert nodes == expected
    # What the container runtime opens on the host is what the daemon checked under --dev-root.
    for node in nodes:
        if node.get("hostPath") != "/dev/null":
            assert case.ctx.daemon_path(node.get("hostPath", node["path"])) == case.ctx.dev_root / (
                node.get("hostPath", node["path"]).rsplit("/", 1)[1])


def test_daemon_path_maps_the_hosts_device_directory_onto_dev_root() -> None:
    container = ProfileContext(node_name=NODE, driver_name=DRIVER, dev_root=Path("/host/dev"),
                               dev_root_on_host=Path("/dev"))
    assert container.device_node("davinci0").host_path is None
    assert container.daemon_path("/dev/davinci0") == Path("/host/dev/davinci0")
    assert container.daemon_path("/devices/x") == Path("/devices/x")  # not under /dev: as it is
    lab = ProfileContext(node_name=NODE, driver_name=DRIVER, dev_root=Path("/lab/dev"))
    assert lab.device_node("/dev/davinci0").host_path == "/lab/dev/davinci0"
    assert lab.daemon_path("/lab/dev/davinci0") == Path("/lab/dev/davinci0")
    assert lab.daemon_path("/dev/null") == Path("/dev/null")
