"""podman runs containers from the CDI specs of HAMivNPUCore claims on the simulated lab node: the
env carries the quotas, ``/etc/ld.so.preload`` is the claim's own file (read-only, there before the
entrypoint's first instruction), the device nodes exist, the shared region is shared by the
containers of one chip, and the claim's local dir is private to it and gone after Unprepare.

And glibc's own loader, in a container of an image with a dynamically linked program, maps the
library the preload names: with the vNPU-core integration source's host layout, whose own
``ld.so.preload`` names ``/hami-vnpu-core/target/debug/libvnpu.so`` (a path no container has), the
library is still loaded (``/proc/self/maps``) and the loader prints no "cannot be preloaded"."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ascend_dra.profiles.ascend.sim import labnode
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
    assert ids_a == [f"{kind}={uid_a}-npu-0-0-be06132e-0aff-4efc-bd8e-42a4e06ed385", f"{kind}={uid_a}-metadata_npu",
                     f"{kind}=common"]  # then its device metadata mount (KEP-5304), the common one

    first = podman.run(ids_a, SCRIPT.format(who="a", shared="echo a > /hami-shared-region/0_global_registry"),
                       cdi_dir=d.cdi_dir, label="podman run: HAMivNPUCore share A")
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert out.splitlines()[0] == "/hami-vnpu-core/libvnpu.so"  # the claim's own ld.so.preload
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


GLIBC_IMAGE = "localhost/adra-glibc:latest"
#: A stub of glibc >= 2.34 (its functions moved into libc.so.6): a real shared object, harmless to preload.
STUB_LIBRARY = "libutil.so.1"


def _libraries(program: str) -> list[Path]:
    """The shared objects ``program`` needs, by ``ldd`` (the dynamic loader among them)."""
    out = subprocess.run(["ldd", program], capture_output=True, text=True, check=True).stdout
    return [Path(m) for m in re.findall(r"(?:=>\s*|^\s*)(/\S+)", out, re.MULTILINE)]


@pytest.fixture(scope="module")
def glibc_image(podman) -> Path:
    """``localhost/adra-glibc:latest``: the busybox applets plus the host's dynamically linked ``cat``
    as ``/bin/dyncat``, with the libraries and the loader it needs at their host paths. Returns the
    host's :data:`STUB_LIBRARY` (found beside its libc), a real library to serve as libvnpu.so."""
    program = shutil.which("cat")
    assert program is not None
    libraries = _libraries(program)
    rootfs = podman.base / "glibc-rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy2("/bin/busybox", rootfs / "bin" / "busybox")
    for applet in ("sh", "cat"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    shutil.copy2(program, rootfs / "bin" / "dyncat")
    for library in libraries:
        (rootfs / library.relative_to("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(library, rootfs / library.relative_to("/"))  # follows links: the file itself
    tarball = podman.base / "glibc-rootfs.tar"
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
    podman.check("import", "--quiet", str(tarball), GLIBC_IMAGE, label="podman import (glibc image)")
    [libc] = [lib for lib in libraries if lib.name == "libc.so.6"]
    stub = libc.parent / STUB_LIBRARY
    assert stub.is_file(), f"the host has no {stub} to use as a real shared object"
    return stub


def test_the_loader_in_a_container_maps_the_library_with_the_integration_sources_layout(podman, glibc_image,
                                                                                        short_tmp):
    node = labnode.build(short_tmp / "lab")
    core = node.host_root / "usr/local/hami-vnpu-core"
    shutil.rmtree(core)
    core.mkdir()
    # The integration source's host layout, file for file, with a real shared object as the library.
    (core / "limiter").write_bytes(labnode.elf_header(kind=2))
    shutil.copyfile(glibc_image, core / "libvnpu.so")
    (core / "ld.so.preload").write_text("/hami-vnpu-core/target/debug/libvnpu.so\n")
    d = DaemonProcess(short_tmp / "sa", node=NODE, profiles="HAMivNPUCore", extra_args=node.flags()).start()
    k = Kubelet(d)
    try:
        claim = lab_claim(d, "dra-ascend-e2e-ascend-share-a-app-ascend310p", "be06132e-0aff-4efc-bd8e-42a4e06ed385")
        flags = [f"--device={cdi_id}" for cdi_id in prepare(k, claim)]
        done = podman("run", "--rm", "--network=none", "--pull=never", *flags, GLIBC_IMAGE, "sh", "-c",
                      "cat /etc/ld.so.preload; /bin/dyncat /proc/self/maps", cdi_dir=d.cdi_dir,
                      label="podman run: glibc's loader with the integration source's layout")
        assert done.returncode == 0, done.stderr
        assert "cannot be preloaded" not in done.stderr, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == "/hami-vnpu-core/libvnpu.so"
        mapped = {line.split()[-1] for line in lines[1:] if len(line.split()) == 6}
        assert "/hami-vnpu-core/libvnpu.so" in mapped, done.stdout
        assert k.unprepare(claim).claims[claim["metadata"]["uid"]].error == ""
    finally:
        k.close()
        d.stop()
