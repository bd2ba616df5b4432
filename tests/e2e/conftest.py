"""Fixtures of the end-to-end tier: the two-node bed (tests/e2e/bed.py) and our image in each node's
containerd, for the whole package (torn down when its last test is done, not at the end of a
`pytest tests` session that runs other tiers after it).

* Kubernetes 1.37 whatever ``$ASCEND_DRA_K8S`` says (the bed is of the newest version we support;
  ``make test`` runs the tier once).
* Missing Go binaries (control plane 1.37, kubelet and kubectl 1.37, containerd, helm) are built at the
  end of collection, outside the per-test timeout; ``ASCEND_DRA_NO_BUILD=1`` fails instead. So is our
  image, with ``make image`` in the tests' podman storage (tests/e2e/images.py; seconds when
  tests/container/test_image.py built it first).
* ``ASCEND_DRA_KEEP_BED_DIR=1`` keeps /tmp/adra-e2e-*/ (the kubelets', containerds' and control
  plane's logs) after the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.controlplane import BUILD_SH, default_bin_dir, missing_binaries
from tests.e2e import images, usage
from tests.e2e.bed import E2E_K8S, NODE_BUILD_SH, Bed, BedError
from tests.e2e.claims import CLAIMS_NS, start_claim_pod
from tests.e2e.release import FAKE_NODE, Tools, install
from tests.kubelet.pods import create_namespace

ROOT = Path(__file__).resolve().parents[2]
BUILD_HELM = ROOT / "hack" / "build-helm.sh"


def _builds() -> list[list[str]]:
    """The build commands whose products are missing."""
    todo = []
    if missing_binaries(default_bin_dir(E2E_K8S)):
        todo.append(["bash", str(BUILD_SH), "--k8s", E2E_K8S])
    if subprocess.run(["bash", str(NODE_BUILD_SH), "--k8s", E2E_K8S, "--check"], capture_output=True).returncode:
        todo.append(["bash", str(NODE_BUILD_SH), "--k8s", E2E_K8S])
    helm = Path(subprocess.run(["bash", str(BUILD_HELM), "--print"], capture_output=True, text=True).stdout.strip())
    if not os.access(helm, os.X_OK):
        todo.append(["bash", str(BUILD_HELM)])
    return todo


#: ``(reference, archive)`` of the image built at the end of collection.
_IMAGE: list[tuple[str, Path]] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build what is missing before the first test (a cold kubelet build takes minutes), and the image."""
    if session.config.option.collectonly:
        return
    if not any("bed" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    if any("image" in getattr(item, "fixturenames", ()) for item in session.items):
        try:
            _IMAGE.append(images.build_for_tests())
        except images.ImageMissing as e:
            raise pytest.UsageError(str(e)) from None
    if os.environ.get("ASCEND_DRA_NO_BUILD"):
        return
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    log = Path(os.environ.get("ASCEND_DRA_CACHE", Path.home() / ".cache" / "ascend-dra")) / "e2e-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    for argv in _builds():
        if tr is not None:
            tr.write_line(f"tests/e2e: running {' '.join(argv[1:])} (log: {log})")
        with open(log, "ab") as f:
            rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            raise pytest.UsageError(f"{' '.join(argv)} failed (exit {rc}); last lines of {log}:\n{tail}")


@pytest.fixture(scope="package")
def bed_dir() -> Iterator[Path]:
    """A short directory (unix socket paths) for the bed."""
    path = Path(tempfile.mkdtemp(prefix="adra-e2e-", dir="/tmp"))
    yield path
    if not os.environ.get("ASCEND_DRA_KEEP_BED_DIR"):
        shutil.rmtree(path, ignore_errors=True)


def _left_on_host(bed: Bed) -> list[str]:
    """What of ``bed`` the host still has after :meth:`Bed.stop`: its bridge, its cgroups, processes of
    its namespaces (none must remain)."""
    left = []
    assert bed.bridge is not None
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout.split("\n")
    ours = {bed.bridge.name, *(bed.bridge.veth(i) for i in range(len(bed.nodes)))}
    left += [f"link {line.split()[0]}" for line in links if line and line.split()[0].split("@")[0] in ours]
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    left += [f"route {line}" for line in routes.splitlines() if f"dev {bed.bridge.name}" in line]
    for node in bed.nodes.values():
        left += [f"cgroup {d}" for d in node.cgroup_dirs() if d.exists()]
    return left


@pytest.fixture(scope="package")
def bed(bed_dir: Path) -> Iterator[Bed]:
    """The bed: control plane 1.37, ``node-a`` and ``node-b`` (the simulated Lab 18 node), Ready.
    At the end, everything is stopped and the host is checked for leftovers."""
    b = Bed(bed_dir)
    try:
        b.start()
    except BedError as e:
        pytest.fail(f"the test bed did not start: {e}", pytrace=False)
    try:
        yield b
    finally:
        b.stop()
        left = _left_on_host(b)
        assert not left, f"the stopped bed left on the host: {left}"


@pytest.fixture(scope="package")
def tools(bed: Bed, bed_dir: Path) -> Tools:
    """helm and kubectl pointed at the bed, as a user's shell would be (a working dir of its own)."""
    workdir = bed_dir / "user"
    workdir.mkdir(exist_ok=True)
    return Tools(bed, workdir)


@pytest.fixture(scope="package")
def image(bed: Bed) -> tuple[str, str]:
    """``(repository, tag)`` of our image (``make image``), imported into every node's containerd."""
    if not _IMAGE:
        pytest.fail("the image was not built at the end of collection", pytrace=False)
    ref, tarball = _IMAGE[0]
    bed.import_image(tarball)
    repository, tag = ref.rsplit(":", 1)
    return repository, tag


@pytest.fixture(scope="package")
def installed(tools: Tools, image: tuple[str, str]) -> float:
    """Both releases installed and rolled out (tests/e2e/release.py); the Unix time the install began."""
    began = time.time()
    install(tools, *image)
    return began


@pytest.fixture(scope="package")
def claims_ns(bed: Bed, installed: float) -> str:
    """The namespace of the tier's claim pods (not the lab's)."""
    assert bed.cp is not None
    create_namespace(bed.cp, CLAIMS_NS)
    return CLAIMS_NS


@pytest.fixture(scope="package")
def fake_pod(bed: Bed, claims_ns: str) -> dict[str, Any]:
    """A pod with one simulated NPU on the fake node, running (it stays for the upgrade and the
    uninstall steps); its claim under ``claim``."""
    assert bed.cp is not None
    pod, claim = start_claim_pod(bed.cp, claims_ns, "fake-1", FAKE_NODE)
    return {**pod, "claim": claim}


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The usage figures of the chart's pods (tests/e2e/usage.py), also written to e2e-usage.json."""
    if usage.RECORD:
        out = images.cache_root() / "e2e-usage.json"
        terminalreporter.section(f"chart pods' resource usage (also in {out})")
        for line in usage.write(out):
            terminalreporter.write_line(line)
