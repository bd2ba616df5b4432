"""podman runs containers from the CDI specs of HAMivNPUCore claims on the simulated lab node: the
env carries the quotas, ``/etc/ld.so.preload`` is the host's hami-vnpu-core file (read-only, there
before the entrypoint's first instruction), the device nodes exist, the shared region is shared by
the containers of one chip, and the claim's local dir is private to it and gone after Unprepare."""

from __future__ import annotations

import pytest

from ascend_dra.profiles.ascend import labnode
from tests.claimfiles import claim_object, write_claim
from tests.container.test_cdi_in_podman import assert_dev_null_char_device, container_env, prepare
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

pytestmark = pytest.mark.container

NODE = "aio-node74-arm"
NODES = "/dev/davinci0 /dev/davinci_manager /dev/devmm_svm /dev/hisi_hdc"
# The entrypoint's first act is to read the preload file: the limiter's library is named there
# before any workload instruction runs (hami-vnpu-core starts its manager from that library's
# constructor, docs/ascend-hardware.md#vnpu-core-limiter).
SCRIPT = ("cat /etc/ld.so.preload; echo ---; env; ls -l " + NODES + "; "
          "(echo x > /etc/ld.so.preload) 2>/dev/null && echo preload-writable || echo preload-read-only; "
          "ls -ld /hami-shared-region /hami-vnpu-shmem; ls /hami-vnpu-core; "
          "echo {who} > /hami-vnpu-shmem/vnpu_local_shmem && echo local-rw; cat /proc/self/mountinfo; {shared}")


@pytest.fixture
def lab_daemon(short_tmp):
    node = labnode.build(short_tmp / "lab")
    assert node.real_device_nodes, "the container test runs as root and needs mknod"
    d = DaemonProcess(short_tmp / "sa", node=NODE, profiles="HAMivNPUCore", extra_args=node.flags()).start()
    k = Kubelet(d)
    yield d, k, node
    k.close()
    d.stop()


def lab_claim(d: DaemonProcess, name: str, share_id: str) -> dict:
    result = {"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-0-0", "shareID": share_id,
              "consumedCapacity": {"cores": "50", "memory": "8Gi", "containers": "1"}}
    return write_claim(d.root, claim_object(name, namespace="dra-ascend-e2e", node=NODE, results=[result]))


def test_two_containers_share_one_chip_with_their_own_quota_and_local_dir(podman, lab_daemon):
    d, k, node = lab_daemon
    a = lab_claim(d, "dra-ascend-e2e-ascend-share-a-app-ascend310p", "be06132e-0aff-4efc-bd8e-42a4e06ed385")
    b = lab_claim(d, "dra-ascend-e2e-ascend-share-b-app-ascend310p", "5554db84-1574-46bd-a3ea-0b7197fbbbda")
    ids_a = prepare(k, a)
    kind = f"k8s.{DRIVER}/vnpu"
    uid_a = a["metadata"]["uid"]
    assert ids_a == [f"{kind}={uid_a}-npu-0-0-be06132e-0aff-4efc-bd8e-42a4e06ed385", f"{kind}=common"]

    first = podman.run(ids_a, SCRIPT.format(who="a", shared="echo a > /hami-shared-region/0_global_registry"),
                       cdi_dir=d.cdi_dir, label="podman run: HAMivNPUCore share A")
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert out.splitlines()[0] == "/hami-vnpu-core/libvnpu.so"  # the host's ld.so.preload
    env = container_env(out)
    assert {k_: env[k_] for k_ in ("NPU_MEM_QUOTA", "NPU_PRIORITY", "ASCEND_VISIBLE_DEVICES", "NPU_GLOBAL_SHM_PATH",
                                   "NPU_LOCAL_SHM_PATH")} == {
        "NPU_MEM_QUOTA": "8192", "NPU_PRIORITY": "50", "ASCEND_VISIBLE_DEVICES": "0",
        "NPU_GLOBAL_SHM_PATH": "/hami-shared-region/0_global_registry",
        "NPU_LOCAL_SHM_PATH": "/hami-vnpu-shmem/vnpu_local_shmem"}
    for path in NODES.split():
        assert_dev_null_char_device(out, path)
    assert "preload-read-only" in out
    # A bind mount of its own (mountinfo: mount point in field 5, options in field 6).
    [preload] = [line.split() for line in out.splitlines() if line.split()[4:5] == ["/etc/ld.so.preload"]]
    assert preload[5].split(",")[0] == "ro"
    assert "local-rw" in out
    modes = [line.split()[0] for line in out.splitlines() if line.endswith(("/hami-shared-region", "/hami-vnpu-shmem"))]
    assert modes == ["drwxrwxrwx", "drwxrwxrwx"]
    assert {"ld.so.preload", "libvnpu.so", "containers"} <= set(out.splitlines())  # ls /hami-vnpu-core
    host_local_a = node.host_root / "usr/local/hami-vnpu-core/containers" / uid_a / "npu" / "vnpu_local_shmem"
    assert host_local_a.read_text() == "a\n"

    # B on the same chip: same global registry path, sees what A's manager created, own local dir.
    second = podman.run(prepare(k, b), SCRIPT.format(who="b", shared="cat /hami-shared-region/0_global_registry"),
                        cdi_dir=d.cdi_dir, label="podman run: HAMivNPUCore share B")
    assert second.returncode == 0, second.stderr
    assert container_env(second.stdout)["NPU_GLOBAL_SHM_PATH"] == "/hami-shared-region/0_global_registry"
    assert second.stdout.splitlines()[-1] == "a"
    uid_b = b["metadata"]["uid"]
    assert (node.host_root / "usr/local/hami-vnpu-core/containers" / uid_b / "npu" / "vnpu_local_shmem"
            ).read_text() == "b\n"
    assert host_local_a.read_text() == "a\n"

    assert k.unprepare(a).claims[uid_a].error == ""
    assert not host_local_a.parent.parent.exists()
    after = podman.run(ids_a, "true", cdi_dir=d.cdi_dir, label="podman run: share A after unprepare (refused)")
    assert after.returncode != 0 and "unresolvable CDI devices" in after.stderr
    assert k.unprepare(b).claims[uid_b].error == ""
