"""Fixtures for tests that need a real Kubernetes control plane (1.35 by default, $ASCEND_DRA_K8S=1.37).

* ``control_plane`` (session scope): etcd + kube-apiserver + kube-controller-manager + kube-scheduler on
  127.0.0.1 in a tmp dir, with a fake Ready Node. Exposes ``.kubeconfig`` (Path), ``.node_name``,
  ``.restart_apiserver()``.
* If ``ASCEND_DRA_KUBECONFIG`` is set (e.g. after ``make cluster-up``), that cluster is reused instead;
  ``restart_apiserver()`` then works only if the kubeconfig sits next to the ``state.json`` written by
  ``controlplane.py up`` (otherwise the test calling it is skipped).
* Missing binaries are built with ``tests/cluster/build.sh`` once, at the end of collection (outside the
  per-test timeout; a cold build takes many minutes). Set ``ASCEND_DRA_NO_BUILD=1`` to fail instead.
* ``anyio_backend``: "asyncio" (grpclib / aiohttp / kubernetes_asyncio are asyncio-only).
* The version: ``ASCEND_DRA_K8S=1.37`` selects the 1.37 binaries (``build.sh --k8s 1.37``).
  ``k8s_version`` is what the API server reports (``"1.37"``); ``versions.require_k8s`` skips a test on
  an older server, naming the feature and the version that has it (never silently).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import (
    BUILD_SH,
    STATE_FILE,
    ControlPlane,
    ControlPlaneError,
    default_bin_dir,
    k8s_minor,
    missing_binaries,
)

ENV_KUBECONFIG = "ASCEND_DRA_KUBECONFIG"


class ExternalCluster:
    """A cluster we did not start (ASCEND_DRA_KUBECONFIG without a state.json next to it)."""

    def __init__(self, kubeconfig: Path, node_name: str) -> None:
        self.kubeconfig = kubeconfig
        self.node_name = node_name

    def restart_apiserver(self) -> None:
        pytest.skip(f"{ENV_KUBECONFIG} points to a cluster this session cannot restart")


def _needs_control_plane(items: list[pytest.Item]) -> bool:
    return any("control_plane" in getattr(item, "fixturenames", ()) for item in items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build missing binaries before the first test runs (a per-test timeout would kill a cold build)."""
    if os.environ.get(ENV_KUBECONFIG) or session.config.option.collectonly:
        return
    if not _needs_control_plane(session.items):
        return
    bin_dir = default_bin_dir()
    missing = missing_binaries(bin_dir)
    if not missing or os.environ.get("ASCEND_DRA_NO_BUILD"):
        return  # the fixture reports missing binaries
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    log = bin_dir.parent / "build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if tr is not None:
        tr.write_line(
            f"tests/cluster: building Kubernetes {k8s_minor()}: {', '.join(missing)} into {bin_dir} "
            f"(cold: ~7 min on 2 cores, warm Go cache: ~25 s); log: {log}"
        )
    with open(log, "ab") as f:
        rc = subprocess.run(["bash", str(BUILD_SH), "--k8s", k8s_minor()], stdout=f,
                            stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise pytest.UsageError(f"{BUILD_SH} failed (exit {rc}); last lines of {log}:\n{tail}")
    if tr is not None:
        tr.write_line("tests/cluster: build done")


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane | ExternalCluster]:
    external = os.environ.get(ENV_KUBECONFIG)
    if external:
        kc = Path(external).resolve()
        if (kc.parent / STATE_FILE).exists() and kc.name == "kubeconfig":
            yield ControlPlane.attach(kc.parent)
        else:
            yield ExternalCluster(kc, os.environ.get("ASCEND_DRA_NODE_NAME", "node-1"))
        return

    bin_dir = default_bin_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        pytest.fail(
            f"control-plane binaries missing in {bin_dir}: {', '.join(missing)}. "
            f"Run {BUILD_SH} (or unset ASCEND_DRA_NO_BUILD), or point {ENV_KUBECONFIG} at a running "
            f"cluster (make cluster-up).",
            pytrace=False,
        )
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane"), bin_dir)
    try:
        cp.start()
    except ControlPlaneError as e:
        pytest.fail(f"control plane did not start: {e}", pytrace=False)
    if cp.server_version() != k8s_minor():
        cp.stop()
        pytest.fail(f"{bin_dir} serves Kubernetes {cp.server_version()}, not {k8s_minor()} ($ASCEND_DRA_K8S)",
                    pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def k8s_version(control_plane) -> str:
    """``MAJOR.MINOR`` of the cluster under test, as its API server reports it (``"1.35"``, ``"1.37"``)."""
    server_version = getattr(control_plane, "server_version", None)
    return server_version() if server_version is not None else k8s_minor()


# -- per-test fixtures shared by the cluster tests ---------------------------------------------------


@pytest.fixture
def cp(control_plane):
    """The session's control plane, with none of our ResourceSlices before and after the test."""
    _delete_our_slices(control_plane, control_plane.node_name)
    yield control_plane
    _delete_our_slices(control_plane, control_plane.node_name)


@pytest.fixture
def start_daemon(cp, short_tmp):
    """``start(fake_devices, extra_args)`` runs a fake-profile daemon against ``cp``; all stop after the test."""
    from tests.integration.daemon import DaemonProcess

    started: list = []

    def start(fake_devices: int = 4, extra_args: tuple[str, ...] = ()):
        d = DaemonProcess(short_tmp / "node", node=cp.node_name, kubeconfig=cp.kubeconfig,
                          fake_devices=fake_devices, extra_args=extra_args).start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


def _delete_our_slices(cp, node: str) -> None:
    from tests.cluster.test_publish import delete_our_slices  # the helper lives beside its tests

    delete_our_slices(cp, node)
