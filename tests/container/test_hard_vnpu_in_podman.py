"""podman runs a container from the CDI spec of a prepared hard-vNPU claim: the container sees the
host's ``vdavinci<vnpuID>`` node the simulated npu-smi created, as ``/dev/davinci<vnpuID>``, and
the Ascend runtime's env; after Unprepare the vNPU and its node are gone."""

from __future__ import annotations

import pytest

from tests.claimfiles import claim_object, write_claim
from tests.container.test_cdi_in_podman import assert_dev_null_char_device, container_env
from tests.hardvnpu import SimHost, daemon_args
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

pytestmark = pytest.mark.container

KIND = f"k8s.{DRIVER}/vnpu"


@pytest.fixture
def node(short_tmp):
    """One simulated 910B4 (simulated discovery tier, so shared device nodes are not required),
    with vNPUs made by the stateful npu-smi simulator as character devices 1:3."""
    root = short_tmp / "sa"
    host = SimHost(root, chips=((0, 0, 0, 0, "910B4"),), host_root=False)  # podman mounts this machine's paths
    for name in ("davinci_manager", "devmm_svm", "hisi_hdc"):  # not on this host's real /dev
        (host.dev / name).unlink()
    host.state_dir = root / "plugins" / DRIVER / "profiles"
    d = DaemonProcess(root, profiles="hard-vNPU", fake_devices=1, env=host.env,
                      extra_args=[*daemon_args(host), "--profile-option", "hard-vNPU.simulate=always"]).start()
    k = Kubelet(d)
    yield d, host, k
    k.close()
    d.stop()


def test_container_sees_the_vnpu_as_davinci_and_the_runtime_env(podman, node):
    d, host, k = node
    claim = write_claim(d.root, claim_object("vnpu", results=[("npu", "vnpu-0-0-vir10-3c-16g-1")]))
    uid = claim["metadata"]["uid"]
    entry = k.prepare(claim).claims[uid]
    assert entry.error == ""
    ids = [i for dev in entry.devices for i in dev.cdi_device_ids]
    assert ids == [f"{KIND}={uid}-vnpu-0-0-vir10-3c-16g-1", f"{KIND}={uid}-metadata_npu", f"{KIND}=common"]
    assert [v["vnpu_id"] for v in host.vnpus()] == [101]

    done = podman.run(ids, "env; ls -l /dev/davinci101", cdi_dir=d.cdi_dir, label="podman run: hard vNPU")
    assert done.returncode == 0, done.stderr
    env = container_env(done.stdout)
    assert env["ASCEND_VISIBLE_DEVICES"] == "101"
    assert env["ASCEND_RUNTIME_OPTIONS"] == "VIRTUAL"
    assert "ASCEND_VNPU_SPECS" not in env  # the runtime would create a second vNPU
    assert env["ASCEND_DRA_NODE_NAME"] == "node-1"
    # The host's vdavinci101 is the container's davinci101, where CANN looks (as Huawei's device plugin).
    assert_dev_null_char_device(done.stdout, "/dev/davinci101")

    assert k.unprepare(claim).claims[uid].error == ""
    assert host.vnpus() == [] and not (host.vdev / "vdavinci101").exists()
    after = podman.run(ids, "true", cdi_dir=d.cdi_dir, label="podman run: hard vNPU after unprepare")
    assert after.returncode != 0 and "unresolvable CDI devices" in after.stderr
