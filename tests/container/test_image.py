"""Our image as a user builds it: ``make image`` (hack/build-image.sh) with podman, from Debian's
packages and PyPI only, then both commands run from it the way the chart runs them.

The build is cached between sessions: podman's storage (overlay) lives in
``${ASCEND_DRA_CACHE:-~/.cache/ascend-dra}/podman-image`` and the Debian base and the wheels in their
own cache folders, so a session with nothing changed costs seconds (the second build below checks that
every layer comes from the cache). Sessions take a lock on that folder; the transient state (runroot,
libpod's tmp dir) is removed after each.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.container.conftest import _BLOB_CACHE_ROOT, IMAGE_REPORT, INSTALL_HINT, TIMINGS, Podman, remove_blob_cache

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/ascend-dra:test"
VERSION = re.search(r'^version = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
#: Profiles the image ships (entry points of pyproject.toml); gpu needs the optional nvidia-ml-py.
SHIPPED_PROFILES = ("HAMivNPUCore", "fake", "hard-vNPU", "npu-310P", "npu-910")


def _cache_dir() -> Path:
    return Path(os.environ.get("ASCEND_DRA_CACHE", Path.home() / ".cache" / "ascend-dra")) / "podman-image"


def _make_image(podman: Podman, label: str) -> str:
    env = {**os.environ, "CONTAINERS_CONF": str(podman.conf), "CONTAINERS_STORAGE_CONF": str(podman.storage_conf)}
    start = time.monotonic()
    # Cold: mmdebstrap, pip download and the build (a few minutes on 2 cores); the timeout is a backstop.
    done = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "image", f"IMAGE={IMAGE}"], env=env,
                          capture_output=True, text=True, timeout=3600)
    TIMINGS.append((label, time.monotonic() - start))
    if done.returncode != 0:
        pytest.fail(f"make image exited with {done.returncode}:\n{done.stderr[-4000:]}{done.stdout[-4000:]}")
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def built():
    """``(podman, first build's output, image id, second build's output, image id)``."""
    missing = [tool for tool in ("podman", "runc", "unshare", "mmdebstrap", "make") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"the image test needs {', '.join(missing)}: {INSTALL_HINT}")
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    had_blob_cache = _BLOB_CACHE_ROOT.exists()
    with open(cache / ".session.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        podman = Podman(cache, driver="overlay")
        try:
            podman.write_config()
            first = _make_image(podman, "make image (this session's first build)")
            first_id = podman.check("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
            second = _make_image(podman, "make image again (nothing changed)")
            second_id = podman.check("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
            yield podman, first, first_id, second, second_id
        finally:
            for transient in ("run", "libpod-tmp"):
                shutil.rmtree(cache / transient, ignore_errors=True)
            if not had_blob_cache:
                remove_blob_cache()


def _run(podman: Podman, *args: str, entrypoint: str | None = None, flags: tuple[str, ...] = ()) -> str:
    """``podman run --rm --network=none IMAGE ARGS``; fails the test on a non-zero exit. Returns stdout."""
    extra = (f"--entrypoint={entrypoint}",) if entrypoint else ()
    return podman.check("run", "--rm", "--network=none", "--pull=never", *flags, *extra, IMAGE, *args,
                        label=f"podman run {' '.join(args)[:40]}").stdout


def test_the_build_uses_the_debian_base_and_a_second_build_reuses_every_layer(built):
    podman, first, first_id, second, second_id = built
    assert "FROM localhost/ascend-dra-base:bookworm-" in first
    assert second_id == first_id
    # Both RUN steps of the builder stage came from the cache, neither ran.
    assert second.count("--> Using cache") >= 2
    assert "No broken requirements found" not in second
    assert "VERSION_CODENAME=bookworm" in _run(podman, "/etc/os-release", entrypoint="cat")
    interpreter = _run(podman, "-c", "readlink -f /opt/ascend-dra/bin/python", entrypoint="sh").strip()
    assert interpreter == "/usr/bin/python3.11"  # Debian's, not the official images' /usr/local/bin


def test_both_commands_run(built):
    podman = built[0]
    assert _run(podman, "--version").startswith(f"ascend-dra {VERSION} (CPython 3.11.")
    for args in (["--help"], ["run", "--help"], ["webhook", "--help"]):
        assert "usage: ascend-dra" in _run(podman, *args)
    listed = {line.split()[0]: line for line in _run(podman, "profiles").splitlines()[1:] if line.strip()}
    for name in SHIPPED_PROFILES:
        assert name in listed, listed
        assert listed[name].split(None, 4)[4].startswith("ok"), listed[name]
    rows = [line.split() for line in _run(podman, "discover", "--profiles", "fake").splitlines()[1:]]
    assert [row[:3] for row in rows] == [["fake", f"npu-{i}-0", "910B3"] for i in range(4)]


def test_the_webhook_runs_as_the_chart_runs_it_non_root(built):
    podman = built[0]
    assert podman.check("image", "inspect", "--format", "{{.Config.User}}", IMAGE).stdout.strip() == "65532:65532"
    assert _run(podman, "-c", "id -u; id -g", entrypoint="sh").split() == ["65532", "65532"]
    # deployments/helm/ascend-dra/templates/webhook.yaml: read-only root, no capabilities, no escalation.
    chart_like = ("--read-only", "--cap-drop=all", "--security-opt=no-new-privileges", "--user=65532:65532")
    assert "usage: ascend-dra webhook" in _run(podman, "webhook", "--help", flags=chart_like)


def test_the_image_is_lean(built):
    podman = built[0]
    script = """
for tool in gcc cc c++ make ld pip pip3 apt-get; do command -v $tool; done
ls /opt/ascend-dra/bin | grep -x -e 'pip.*' -e easy_install
/opt/ascend-dra/bin/python -c 'import importlib.util as u; print(*[m for m in ("pip", "setuptools") if u.find_spec(m)])'
ls -d /src /wheels /root/.cache /etc/apt /var/lib/apt /var/cache/apt /usr/share/man/* /usr/share/locale/* 2>/dev/null
find /usr/share/doc -type f ! -name copyright | head -3
true
"""
    assert _run(podman, "-c", script, entrypoint="sh").split() == []
    size = int(podman.check("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
    parts = _run(podman, "-c", "cd /opt/ascend-dra/lib/python3.11/site-packages && du -sk * | sort -rn | head -6; "
                 "du -sk /opt/ascend-dra /usr/lib/python3.11 /usr/lib/x86_64-linux-gnu /usr/bin", entrypoint="sh")
    IMAGE_REPORT.append(f"{IMAGE}: {size / 1e6:.0f} MB; biggest parts (KiB):")
    IMAGE_REPORT.extend("  " + " ".join(line.split()) for line in parts.splitlines())


def test_the_venv_holds_exactly_the_locked_dependencies(built):
    """pyproject.toml's dependencies resolved with requirements.lock as constraints (the Dockerfile's
    first RUN) give exactly the lock: nothing unpinned came in, no pin is stale."""
    podman = built[0]
    listing = _run(podman, "-c", "import importlib.metadata as m, json; "
                   "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))",
                   entrypoint="/opt/ascend-dra/bin/python")
    installed = {_canonical(name): version for name, version in json.loads(listing).items()}
    assert installed.pop("ascend-dra") == VERSION
    assert installed == _lock()


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[_canonical(name)] = version
    return pins
