"""The scale bed's fixed part: one control plane with the audit log and the bed's users, the Node
objects, the DeviceClasses, each node kind's hosts, and the npu-smi simulator's server.

The control plane is tests/cluster/controlplane.py's, with: no default ``node-1``; the users
``scale-drivers`` (the drivers' kubeconfig, the one user the audit policy logs) and
``scale-kubelets`` (the stand-ins); kube-controller-manager's client allowed 200 requests a second
(burst 400) instead of 20 (30): at 20 pods a second its job and resourceclaim controllers need
about 80, and ClusterLoader2's clusters raise it too; kube-scheduler keeps its defaults (50/100).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.cluster.controlplane import ControlPlane, default_bin_dir, missing_binaries
from tests.scale.fleet import CHIPS, GO_DRIVER, SHAPES, NodeHost
from tests.scale.observe import AUDIT_POLICY, DRIVER_USER

__all__ = ("KUBELET_USER", "Bed")

ROOT = Path(__file__).resolve().parents[2]
KUBELET_USER = "scale-kubelets"
RESOURCE = "/apis/resource.k8s.io/v1"


class Bed:
    """``nodes`` Node objects (``scale-000``, ...) on a control plane in ``/tmp/asc-*``; start with
    :meth:`start`, end with :meth:`stop`.

    :param bin_dir: the control-plane binaries (default: tests/cluster/build.sh's for $ASCEND_DRA_K8S).
    :raises RuntimeError: from :meth:`start`: binaries missing (make cluster-bins builds them).
    """

    def __init__(self, nodes: int, *, bin_dir: Path | None = None, dcmi: bool = True) -> None:
        """:param dcmi: the ``hami`` and ``hard`` nodes carry libdcmi.so (fleet.NodeHost.dcmi)."""
        self.count = nodes
        self.dcmi = dcmi
        self.workdir = Path(tempfile.mkdtemp(prefix="asc-", dir="/tmp"))  # short: socket paths
        self.shm = Path(tempfile.mkdtemp(prefix="asc-", dir="/dev/shm"))  # CDI specs on tmpfs, as on a node
        self.bin_dir = bin_dir or default_bin_dir()
        self.audit_log = self.workdir / "audit.log"
        self.cp = ControlPlane(
            self.workdir / "cp", self.bin_dir, fake_node=False, extra_users=(DRIVER_USER, KUBELET_USER),
            extra_apiserver_args=[f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
                                  f"--audit-log-path={self.audit_log}", "--audit-log-maxsize=0"],
            extra_controller_manager_args=["--kube-api-qps=200", "--kube-api-burst=400"])
        self.names = [f"scale-{i:03d}" for i in range(nodes)]
        self._hosts: dict[str, list[NodeHost]] = {}
        self._sim: subprocess.Popen[bytes] | None = None
        self.sim_port: int | None = None

    @property
    def driver_kubeconfig(self) -> Path:
        return self.workdir / "drivers.kubeconfig"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.workdir / "kubelets.kubeconfig"

    def start(self) -> Bed:
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise RuntimeError(f"control-plane binaries missing in {self.bin_dir}: {', '.join(missing)} "
                               "(make cluster-bins builds them)")
        (self.workdir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        self.cp.start()
        self.cp.user_kubeconfig(DRIVER_USER, self.driver_kubeconfig)
        self.cp.user_kubeconfig(KUBELET_USER, self.kubelet_kubeconfig)
        for name in self.names:
            self.cp.ensure_node(name)
        classes = [doc for file in ("fake.yaml", "hami-vnpu-core.yaml", "hard-vnpu.yaml")
                   for doc in yaml.safe_load_all((ROOT / "examples" / "deviceclasses" / file).read_text()) if doc]
        classes.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": GO_DRIVER},
                        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{GO_DRIVER}'"}}]}})
        for doc in classes:
            status, reply = self.cp.api("POST", f"{RESOURCE}/deviceclasses", doc)
            if status != 201:
                raise RuntimeError(f"DeviceClass {doc['metadata']['name']}: HTTP {status}: {reply}")
        return self

    def hosts(self, shape: str) -> list[NodeHost]:
        """The node hosts of ``shape`` (made at the first ask; the simulator's server started for ``hard``)."""
        assert shape in SHAPES
        if shape not in self._hosts:
            if shape == "hard" and self._sim is None:
                self._start_sim()
            hosts = [NodeHost(name, i, self.workdir / shape[0] / f"{i:03d}", self.shm / shape[0] / f"{i:03d}", shape,
                              dcmi=self.dcmi) for i, name in enumerate(self.names)]
            for host in hosts:
                host.prepare(self.sim_port)
            self._hosts[shape] = hosts
        return self._hosts[shape]

    def _start_sim(self) -> None:
        port_file = self.workdir / "npusmi.port"
        log = open(self.workdir / "npusmi-server.log", "ab")
        self._sim = subprocess.Popen([sys.executable, "-m", "tests.scale.npusmi_server", str(port_file)], cwd=ROOT,
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if self._sim.poll() is not None or time.monotonic() > deadline:
                log_text = (self.workdir / "npusmi-server.log").read_text()
                raise RuntimeError(f"the npu-smi server did not start: {log_text}")
            time.sleep(0.05)
        self.sim_port = int(port_file.read_text())

    def npusmi_mutations(self) -> list[str]:
        """The vNPU creates and destroys the npu-smi server ran so far (its log's lines)."""
        log = self.workdir / "npusmi-server.log"
        return [line for line in log.read_text().splitlines() if "->" in line] if log.exists() else []

    def delete_slices(self, driver: str) -> None:
        """Delete every ResourceSlice of ``driver`` (a stopped fleet's; the kubelet would wipe them)."""
        self.cp.api("DELETE", f"{RESOURCE}/resourceslices?fieldSelector=spec.driver={driver}")

    def published_nodes(self, driver: str) -> set[str]:
        """The nodes with at least one ResourceSlice of ``driver``."""
        status, reply = self.cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.driver={driver}")
        if status != 200:
            raise RuntimeError(f"listing ResourceSlices: HTTP {status}: {reply}")
        return {s["spec"].get("nodeName") for s in reply.get("items") or []}

    def wait_published(self, driver: str, timeout: float = 300.0) -> None:
        """:raises TimeoutError: some node has no slice of ``driver`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (missing := set(self.names) - self.published_nodes(driver)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no ResourceSlice of {driver} after {timeout:.0f} s on {len(missing)} nodes, "
                                   f"e.g. {sorted(missing)[:3]}")
            time.sleep(0.5)

    def stop(self) -> None:
        try:
            self.cp.stop()
        finally:
            if self._sim is not None:
                self._sim.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._sim.wait(10)
                if self._sim.poll() is None:
                    self._sim.kill()
                    self._sim.wait()
            shutil.rmtree(self.shm, ignore_errors=True)
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def devices(self) -> int:
        return self.count * CHIPS
