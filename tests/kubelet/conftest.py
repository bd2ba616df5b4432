"""Fixtures of the kubelet tier: a control plane of its own (no fake Node), containerd and the real
kubelet as Node ``node-1`` (:mod:`tests.kubelet.node`), and our daemon in cluster mode with the fake
profile, registered through the kubelet's plugin registry.

* Kubernetes 1.35 only (the one wrapper module of the kubelet, ``go-kubelet-1.35/``); on another
  ``$ASCEND_DRA_K8S`` every test is skipped with that reason.
* Missing binaries (control plane and node) are built at the end of collection, outside the per-test
  timeout; ``ASCEND_DRA_NO_BUILD=1`` fails instead.
* Session scope, in start order: ``kubelet_cp`` → ``node``; ``daemon`` (fake profile) per module.
  Torn down in reverse, with every container killed and the cgroups removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.cluster.controlplane import (
    BUILD_SH,
    DEFAULT_FEATURE_GATES,
    ControlPlane,
    ControlPlaneError,
    default_bin_dir,
    k8s_minor,
    missing_binaries,
)
from tests.integration.daemon import DaemonProcess
from tests.kubelet.node import Node, NodeError, kubelet_client_pki

HERE = Path(__file__).resolve().parent
NODE_BUILD_SH = HERE / "build.sh"
K8S = "1.35"
#: The control plane's gates plus KEP-4680's (alpha, off in 1.35): the API server keeps
#: ``allocatedResourcesStatus`` only with it, the kubelet consumes our health stream only with it.
GATES = {**DEFAULT_FEATURE_GATES, "ResourceHealthStatus": True}


def _node_bin_dirs() -> tuple[Path, Path]:
    out = subprocess.run(["bash", str(NODE_BUILD_SH), "--print-bin-dirs"], check=True, capture_output=True,
                         text=True).stdout.split()
    return Path(out[0]), Path(out[1])


def _node_missing() -> bool:
    return subprocess.run(["bash", str(NODE_BUILD_SH), "--check"], capture_output=True).returncode != 0


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build what is missing before the first test (a cold kubelet + containerd build takes minutes)."""
    if session.config.option.collectonly or k8s_minor() != K8S or os.environ.get("ASCEND_DRA_NO_BUILD"):
        return
    if not any("node" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    for script, missing in ((BUILD_SH, bool(missing_binaries(default_bin_dir(K8S)))), (NODE_BUILD_SH, _node_missing())):
        if not missing:
            continue
        log = Path(os.environ.get("ASCEND_DRA_CACHE", Path.home() / ".cache" / "ascend-dra")) / "node-build.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        if tr is not None:
            tr.write_line(f"tests/kubelet: running {script} (log: {log})")
        with open(log, "ab") as f:
            rc = subprocess.run(["bash", str(script), "--k8s", K8S] if script == BUILD_SH else ["bash", str(script)],
                                stdout=f, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            raise pytest.UsageError(f"{script} failed (exit {rc}); last lines of {log}:\n{tail}")


@contextlib.contextmanager
def started(part: ControlPlane | Node, error: type[Exception], what: str) -> Iterator[None]:
    """``part.start()`` (a start-up ``error`` fails the test with its message), ``part.stop()`` at the end."""
    try:
        part.start()
    except error as e:
        pytest.fail(f"{what} did not start: {e}", pytrace=False)
    try:
        yield
    finally:
        part.stop()


@pytest.fixture(scope="session")
def node_tmp() -> Iterator[Path]:
    """A short directory (unix socket paths) for the node and the daemon."""
    path = Path(tempfile.mkdtemp(prefix="adra-kl-", dir="/tmp"))
    yield path
    if not os.environ.get("ASCEND_DRA_KEEP_NODE_DIR"):  # set it to read the logs after a failure
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def kubelet_cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if k8s_minor() != K8S:
        pytest.skip(f"tests/kubelet runs on Kubernetes {K8S} only (its kubelet wrapper module), not {k8s_minor()}")
    bin_dir = default_bin_dir(K8S)
    if missing_binaries(bin_dir):
        pytest.fail(f"control-plane binaries missing in {bin_dir}: run {BUILD_SH}", pytrace=False)
    workdir = tmp_path_factory.mktemp("kubelet-cp")
    # The API server reaches the kubelet (pod logs) at its InternalIP with a client certificate.
    cp = ControlPlane(workdir, bin_dir, feature_gates=GATES, fake_node=False,
                      extra_apiserver_args=kubelet_client_pki(workdir / "pki"))
    with started(cp, ControlPlaneError, "control plane"):
        yield cp


@pytest.fixture(scope="session")
def node(kubelet_cp: ControlPlane, node_tmp: Path) -> Iterator[Node]:
    if _node_missing():
        pytest.fail(f"node binaries missing: run {NODE_BUILD_SH}", pytrace=False)
    kubelet_bin, containerd_bin = _node_bin_dirs()
    n = Node(node_tmp / "n", kubelet_cp, kubelet_bin / "kubelet", containerd_bin, feature_gates=GATES)
    with started(n, NodeError, "node"):
        yield n


@pytest.fixture(scope="module")
def daemon(node: Node, kubelet_cp: ControlPlane) -> Iterator[DaemonProcess]:
    """Our daemon, fake profile, 4 devices, its sockets in the kubelet's root dir, health every 0.2 s.
    Module scope: one driver name registers once, and Lab 18's module runs its own profile."""
    d = DaemonProcess(node.kubelet_root, node=node.node_name, kubeconfig=kubelet_cp.kubeconfig,
                      extra_args=("--health-interval", "0.2")).start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture(scope="session")
def classes(kubelet_cp: ControlPlane) -> None:
    """The fake profile's DeviceClasses (examples/deviceclasses/fake.yaml)."""
    for doc in yaml.safe_load_all((HERE.parents[1] / "examples" / "deviceclasses" / "fake.yaml").read_text()):
        status, reply = kubelet_cp.api("POST", "/apis/resource.k8s.io/v1/deviceclasses", doc)
        assert status in (201, 409), reply


@pytest.fixture
def namespace(kubelet_cp: ControlPlane) -> Iterator[str]:
    """A fresh namespace (its default ServiceAccount exists), deleted after the test."""
    from tests.kubelet.pods import create_namespace

    name = f"kl-{uuid.uuid4().hex[:6]}"
    create_namespace(kubelet_cp, name)
    yield name
    kubelet_cp.api("DELETE", f"/api/v1/namespaces/{name}")
