"""A private podman for the container tests: own config, own storage, own image, and the daemon's CDI
directory shown to podman as ``/var/run/cdi`` in a private mount namespace.

podman 4.3.1 (Debian 12) cannot be pointed at another CDI directory: it has no ``--cdi-spec-dir``
flag (podman 4.5+) and containers-common 0.50 has no ``[engine] cdi_spec_dirs`` (podman 4.6+); it
reads the CDI library's defaults ``/etc/cdi`` and ``/var/run/cdi`` only. So every podman call runs
under ``unshare --mount --propagation private`` with a fresh tmpfs on ``/run`` and the daemon's
``DIR/cdi`` bind-mounted on ``/run/cdi``: podman sees the daemon's specs live (a spec removed by
Unprepare is gone for podman too), and nothing of it is visible on the host or outlives the call.
The tmpfs also takes runc's state root (``/run/runc``).
"""

from __future__ import annotations

import resource
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

IMAGE = "localhost/adra-bb:latest"
APPLETS = ("sh", "ls", "env", "cat")
INSTALL_HINT = "run hack/install-container-deps.sh (installs podman, runc, busybox-static and mmdebstrap)"
#: podman call (or step) -> seconds, printed in the terminal summary.
TIMINGS: list[tuple[str, float]] = []
#: Lines about our image (size, biggest parts), printed in the terminal summary.
IMAGE_REPORT: list[str] = []
#: Created by ``podman import`` (containers/image's blob-info cache, not configurable in podman 4.3).
_BLOB_CACHE_ROOT = Path("/var/lib/containers")


def remove_blob_cache(root: Path = _BLOB_CACHE_ROOT) -> None:
    """Undo what ``podman import`` made under ``root`` when it was not there before the session: the
    blob-info cache file, then ``cache/`` and ``root`` only while empty. Everything else stays: a
    user's podman storage (``storage/``) made meanwhile, by ``make image`` or by hand, is theirs."""
    for cache in (root / "cache").glob("blob-info-cache-v1.*"):
        cache.unlink(missing_ok=True)
    for directory in (root / "cache", root):
        try:
            directory.rmdir()
        except OSError:  # not empty (or gone): left as it is
            pass


class Podman:
    """``podman`` with a private containers.conf and storage under ``base`` (``driver``: the storage
    driver, ``vfs`` or ``overlay``)."""

    def __init__(self, base: Path, driver: str = "vfs") -> None:
        self.base = base
        self.driver = driver
        self.conf = base / "containers.conf"
        self.storage_conf = base / "storage.conf"
        self.env = {"CONTAINERS_CONF": str(self.conf), "CONTAINERS_STORAGE_CONF": str(self.storage_conf),
                    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

    def write_config(self) -> None:
        nofile = _at_most_hard(resource.RLIMIT_NOFILE, 1 << 20)
        nproc = _at_most_hard(resource.RLIMIT_NPROC, 8192)
        self.conf.write_text(f"""\
[containers]
# podman's defaults exceed the hard limits of a host without CAP_SYS_RESOURCE (crun: "setrlimit
# RLIMIT_NOFILE: Operation not permitted", runc: "error setting rlimit type 7"): stay at or below them.
default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]
log_driver = "k8s-file"

[engine]
# crun 1.8 refuses hybrid cgroup hosts ("cgroups in hybrid mode not supported").
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "{self.base}/libpod-tmp"
lock_type = "file"
num_locks = 64

[network]
network_config_dir = "{self.base}/cni"
""")
        self.storage_conf.write_text(f"""\
[storage]
driver = "{self.driver}"
graphroot = "{self.base}/graph"
runroot = "{self.base}/run"
""")

    def __call__(self, *args: str, cdi_dir: Path | None = None, label: str | None = None,
                 timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``podman ARGS`` in a private mount namespace (see the module docstring); ``cdi_dir``
        becomes its ``/var/run/cdi`` (empty without it). Never raises on a non-zero exit."""
        setup = "mount -t tmpfs -o size=16m,mode=0755 adra-run /run && mkdir /run/cdi"
        if cdi_dir is not None:
            setup += f" && mount --bind {shlex.quote(str(cdi_dir))} /run/cdi"
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{setup} && exec "$@"', "sh",
                "podman", *args]
        start = time.monotonic()
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        TIMINGS.append((label or f"podman {args[0]}", time.monotonic() - start))
        return done

    def check(self, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
        done = self(*args, **kwargs)
        if done.returncode != 0:
            pytest.fail(f"podman {shlex.join(args)} exited with {done.returncode}:\n{done.stderr}{done.stdout}")
        return done

    def run(self, devices: Sequence[str], script: str, *, cdi_dir: Path, label: str
            ) -> subprocess.CompletedProcess[str]:
        """``podman run --rm --network=none --device D... IMAGE sh -c SCRIPT``."""
        flags = [f"--device={d}" for d in devices]
        return self("run", "--rm", "--network=none", "--pull=never", *flags, IMAGE, "sh", "-c", script,
                    cdi_dir=cdi_dir, label=label)


def _at_most_hard(which: int, wanted: int) -> int:
    hard = resource.getrlimit(which)[1]
    return wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)


def _build_image(podman: Podman) -> None:
    rootfs = podman.base / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy2("/bin/busybox", rootfs / "bin" / "busybox")
    for applet in APPLETS:
        (rootfs / "bin" / applet).symlink_to("busybox")
    tarball = podman.base / "rootfs.tar"
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
    podman.check("import", "--quiet", str(tarball), IMAGE, label="podman import (image build)")


@pytest.fixture(scope="session")
def podman():
    """A usable private podman with ``localhost/adra-bb:latest`` (a static busybox) imported."""
    missing = [tool for tool in ("podman", "runc", "unshare") if shutil.which(tool) is None]
    if not Path("/bin/busybox").is_file():
        missing.append("/bin/busybox")
    if missing:
        pytest.fail(f"container tests need {', '.join(missing)}: {INSTALL_HINT}")
    had_blob_cache = _BLOB_CACHE_ROOT.exists()
    base = Path(tempfile.mkdtemp(prefix="adra-podman-", dir="/tmp"))
    p = Podman(base)
    try:
        p.write_config()
        start = time.monotonic()
        _build_image(p)
        TIMINGS.append(("image build total (rootfs + tar + import)", time.monotonic() - start))
        yield p
    finally:
        p("rm", "--all", "--force", label="teardown: podman rm")
        p("rmi", "--all", "--force", label="teardown: podman rmi")
        shutil.rmtree(base, ignore_errors=True)
        if not had_blob_cache:
            remove_blob_cache()


def pytest_terminal_summary(terminalreporter) -> None:
    if TIMINGS:
        terminalreporter.section("container test timings")
        for label, seconds in TIMINGS:
            terminalreporter.write_line(f"{seconds:7.2f} s  {label}")
    if IMAGE_REPORT:
        terminalreporter.section("container image")
        for line in IMAGE_REPORT:
            terminalreporter.write_line(line)
