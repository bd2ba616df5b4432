"""Our image (``make image``, podman) for the bed's containerds, which no registry serves.

* The tier builds it itself, as ``make image IMAGE=localhost/ascend-dra:e2e``, in the podman storage
  tests/container/test_image.py keeps in ``${ASCEND_DRA_CACHE:-~/.cache/ascend-dra}/podman-image``
  (under that test's session lock): every layer that test built is reused, and the host's own podman
  storage is left alone. :func:`build_for_tests` returns the image's archive.
* ``make e2e-up`` takes the image a user built with ``make image`` from podman's own storage
  (:func:`archive` without a storage).

An archive is a docker-archive (``ctr images import`` reads its repository tag) saved once per image
ID into ``.../e2e-images/<id>.tar`` (the three newest kept); :meth:`tests.e2e.bed.Bed.import_image`
imports it into every node, where the chart's pods find it (``imagePullPolicy: IfNotPresent``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.container.conftest import Podman

ROOT = Path(__file__).resolve().parents[2]
#: podman names a local build ``localhost/<name>``; the Makefile builds ``ascend-dra:<version>``.
REPOSITORY = "localhost/ascend-dra"
#: The tag the tier builds (a user's `make image` tags the version).
TEST_TAG = "e2e"
#: Archives kept in the cache (about 180 MB each).
KEEP_ARCHIVES = 3


class ImageMissing(RuntimeError):
    """The image is not in podman's store, or ``make image`` failed; the message says what to do."""


def cache_root() -> Path:
    return Path(os.environ.get("ASCEND_DRA_CACHE", Path.home() / ".cache" / "ascend-dra"))


def version() -> str:
    """The package version (pyproject.toml), which is the image tag ``make image`` gives."""
    match = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert match, "no version in pyproject.toml"
    return match.group(1)


def user_reference() -> str:
    """What ``make image`` builds by default: ``localhost/ascend-dra:<version>``."""
    return f"{REPOSITORY}:{version()}"


def image_id(ref: str, env: Mapping[str, str] | None = None) -> str:
    """podman's ID of ``ref``.

    :raises ImageMissing: podman does not have it.
    """
    proc = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise ImageMissing(f"image {ref} is not in podman's store: run `make image` ({proc.stderr.strip()})")
    return proc.stdout.strip()


def archive(ref: str, env: Mapping[str, str] | None = None) -> Path:
    """A docker-archive tarball of ``ref`` (podman's storage, or the one ``env`` names), saved on
    first use for its image ID."""
    cache = cache_root() / "e2e-images"
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{image_id(ref, env)}.tar"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # another run may save the same image meanwhile
        subprocess.run(["podman", "save", "--format", "docker-archive", "-o", str(tmp), ref], check=True,
                       capture_output=True, env={**os.environ, **(env or {})})
        tmp.replace(path)
        # The newest few stay: a run of another checkout may be importing its own right now.
        for old in sorted(cache.glob("*.tar"), key=lambda f: f.stat().st_mtime, reverse=True)[KEEP_ARCHIVES:]:
            old.unlink(missing_ok=True)
    return path


@contextlib.contextmanager
def _test_storage() -> Iterator[Podman]:
    """tests/container/test_image.py's podman storage, under its session lock (transient dirs
    removed after, as that test does)."""
    base = cache_root() / "podman-image"
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".session.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        podman = Podman(base, driver="overlay")
        podman.write_config()
        try:
            yield podman
        finally:
            for transient in ("run", "libpod-tmp"):
                shutil.rmtree(base / transient, ignore_errors=True)


def build_for_tests() -> tuple[str, Path]:
    """``make image`` into the tests' storage; ``(reference, archive)``.

    :raises ImageMissing: the build failed (its output's tail in the message).
    """
    ref = f"{REPOSITORY}:{TEST_TAG}"
    with _test_storage() as podman:
        env = {**os.environ, **podman.env}
        done = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "image", f"IMAGE={ref}"], env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise ImageMissing(f"make image IMAGE={ref} failed ({done.returncode}):\n"
                               f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return ref, archive(ref, podman.env)
