"""The multi-node test bed: a control plane and real kubelet + containerd nodes of the newest
Kubernetes we support (1.37), each node a host of its own to the API server.

* :class:`Bed` starts, in order: the bridge (tests/e2e/network.py), the control plane
  (tests/cluster/controlplane.py) listening on the host's bridge address with
  ``--enable-aggregator-routing`` (webhook Services are called at their endpoints), then the nodes
  (tests/kubelet/node.py), each in a mount and a network namespace of its own, with the kubelet's
  usual paths (``/var/lib/kubelet``, CDI specs in ``/var/run/cdi``: the chart's defaults) under the
  namespace's overlays, ports 10250/10248, and pods on the CNI network of its node.
* A *lab* node is the simulated Lab 18 node (``ascend_dra.profiles.ascend.sim.labnode``, two 310P3) laid
  out where a real Ascend node has its files: ``/usr/local/Ascend/driver``, ``/usr/local/dcmi``,
  ``/usr/local/bin/npu-smi``, ``/etc/ascend_install.info``, the hami-vnpu-core directories and the
  ``/dev/davinci*`` device nodes, in overlays of ``/usr/local``, ``/etc`` and ``/dev`` of its namespace.
* :meth:`Bed.stop` stops every node (every container killed, cgroups removed), the control plane,
  and deletes the bridge. The state file lets another process stop a bed (``make e2e-down``).

``make e2e-up`` / ``make e2e-down`` start one and stop it (tests/e2e/cli.py).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.cluster.controlplane import (
    DEFAULT_CONTROLLERS,
    DEFAULT_FEATURE_GATES,
    ControlPlane,
    ControlPlaneError,
    default_bin_dir,
)
from tests.e2e.network import Bridge, NetworkError
from tests.kubelet.images import BUSYBOX_REF, PAUSE_REF
from tests.kubelet.node import Node, NodeError, kubelet_client_pki

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NODE_BUILD_SH = ROOT / "tests" / "kubelet" / "build.sh"
#: The Kubernetes minor version of the bed (the newest we support).
E2E_K8S = "1.37"
NODE_NAMES = ("node-a", "node-b")
STATE_FILE = "bed.json"
KUBELET_ROOT = Path("/var/lib/kubelet")
CDI_DIR = Path("/var/run/cdi")
#: Besides the control plane's: EndpointSlices (kube-apiserver finds the webhook pod through them),
#: the quota controller (the chart's ResourceQuota: admission refuses pods while its status is
#: unknown), kube-root-ca.crt in every namespace (pods' service-account token volumes), PDB status.
CONTROLLERS = (*DEFAULT_CONTROLLERS, "endpointslice-controller", "resourcequota-controller",
               "root-ca-certificate-publisher-controller", "disruption-controller")
#: Where the lab node's npu-smi stand-in keeps its answers: inside the driver directory, which the
#: chart mounts into the daemon's container, so the stand-in works there too.
LAB_DIR = "/usr/local/Ascend/driver/.ascend-dra-lab"
#: The images examples/ names, and the bed's images every node has under those names (Debian's
#: busybox-static, tests/kubelet/images.py): the nodes reach no registry.
EXAMPLE_IMAGES = {BUSYBOX_REF: "docker.io/library/busybox:1.36", PAUSE_REF: "registry.k8s.io/pause:3.10"}


class BedError(RuntimeError):
    """The bed could not start or stop; the message names the part and holds its log's tail."""


def node_bin_dirs(k8s: str = E2E_K8S) -> tuple[Path, Path]:
    """(kubelet bin dir, containerd bin dir) of tests/kubelet/build.sh for ``k8s``."""
    out = subprocess.run(["bash", str(NODE_BUILD_SH), "--k8s", k8s, "--print-bin-dirs"], check=True,
                         capture_output=True, text=True).stdout.split()
    return Path(out[0]), Path(out[1])


def lab_setup(python: str = sys.executable) -> list[str]:
    """Shell lines (run in the node's namespace) that lay the simulated Lab 18 node out at the real paths."""
    lab = shlex.quote(LAB_DIR)
    return [
        "mkdir -p /usr/local/Ascend/driver /usr/local/bin",
        f"{shlex.quote(python)} -m ascend_dra.profiles.ascend.sim.labnode {lab} >/dev/null",
        f"cp -a {lab}/host/usr/local/Ascend/driver/. /usr/local/Ascend/driver/",
        f"cp -a {lab}/host/usr/local/dcmi {lab}/host/usr/local/hami-vnpu-core {lab}/host/usr/local/hami-shared-region"
        " /usr/local/",
        f"cp {lab}/bin/npu-smi /usr/local/bin/npu-smi",
        f"cp {lab}/host/etc/ascend_install.info /etc/ascend_install.info",
        f"cp -a {lab}/dev/. /dev/",
    ]


class Bed:
    """Control plane + ``nodes`` (names), the ones in ``lab`` simulated Lab 18 nodes.

    >>> bed = Bed(workdir).start()       # returns when every Node is Ready
    >>> bed.cp.kubeconfig; bed.nodes["node-a"].node_ip; bed.stop()
    """

    def __init__(self, workdir: Path, nodes: Sequence[str] = NODE_NAMES, *, lab: Sequence[str] = ("node-b",),
                 k8s: str = E2E_K8S) -> None:
        self.workdir = Path(workdir).resolve()
        self.node_names = tuple(nodes)
        self.lab = tuple(lab)
        self.k8s = k8s
        self.bridge: Bridge | None = None
        self.cp: ControlPlane | None = None
        self.nodes: dict[str, Node] = {}

    def start(self) -> Bed:
        """Start everything; on a failure stop what started and raise :class:`BedError`."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start()
        except BaseException as e:
            with contextlib.suppress(Exception):
                self.stop()
            if isinstance(e, ControlPlaneError | NodeError | NetworkError):
                raise BedError(str(e)) from e
            raise
        return self

    def _start(self) -> None:
        self.bridge = Bridge.create()
        self._write_state()  # from here on `down` can remove the bridge
        pki = self.workdir / "cp" / "pki"
        self.cp = ControlPlane(self.workdir / "cp", default_bin_dir(self.k8s), feature_gates=DEFAULT_FEATURE_GATES,
                               fake_node=False, address=self.bridge.host_ip, controllers=CONTROLLERS,
                               extra_apiserver_args=[*kubelet_client_pki(pki), "--enable-aggregator-routing=true"])
        self.cp.start()
        kubelet_dir, containerd_dir = node_bin_dirs(self.k8s)
        for i, name in enumerate(self.node_names):
            is_lab = name in self.lab
            self.nodes[name] = Node(
                self.workdir / f"n{i}", self.cp, kubelet_dir / "kubelet", containerd_dir, node_name=name,
                feature_gates=DEFAULT_FEATURE_GATES,
                network=self.bridge.node(i, self.cp.ports["apiserver"], len(self.node_names)),
                kubelet_root=KUBELET_ROOT, cdi_dir=CDI_DIR,
                extra_overlays=("/usr/local", "/etc", "/dev") if is_lab else (),
                setup=lab_setup() if is_lab else ())
        # The nodes start side by side: most of a start is waiting for the Node to turn Ready.
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            for future in [pool.submit(n.start) for n in self.nodes.values()]:
                future.result()
        self._write_state()
        # No registry is reachable: the examples' images are the bed's own busybox and pause images.
        for node in self.nodes.values():
            for source, alias in EXAMPLE_IMAGES.items():
                node.ctr("images", "tag", "--force", source, alias)

    def kubectl_bin(self) -> Path:
        """The kubectl built beside the bed's kubelet (tests/kubelet/go-kubelet-1.37)."""
        return node_bin_dirs(self.k8s)[0] / "kubectl"

    def import_image(self, tarball: Path) -> None:
        """``ctr images import`` of an image archive into every node's containerd."""
        for node in self.nodes.values():
            node.import_image(tarball)

    def run_in(self, node: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in ``node``'s namespaces (mount and network), as root."""
        return subprocess.run([*self.nodes[node].nsenter(), *argv], capture_output=True, text=True, check=check)

    # ------------------------------------------------------------------ state / stop
    def _write_state(self) -> None:
        state = {"k8s": self.k8s, "bridge_slot": self.bridge.slot if self.bridge else None,
                 "nodes": [n.state() for n in self.nodes.values()], "lab": list(self.lab)}
        (self.workdir / STATE_FILE).write_text(json.dumps(state, indent=2))

    @classmethod
    def attach(cls, workdir: Path) -> Bed:
        """A handle on a bed that ``up`` started (from its state file).

        :raises FileNotFoundError: no state file in ``workdir``.
        """
        workdir = Path(workdir).resolve()
        state: dict[str, Any] = json.loads((workdir / STATE_FILE).read_text())
        bed = cls(workdir, [n["node_name"] for n in state["nodes"]], lab=state["lab"], k8s=state["k8s"])
        if state["bridge_slot"] is not None:
            bed.bridge = Bridge(state["bridge_slot"])
        if (workdir / "cp" / "state.json").exists():
            bed.cp = ControlPlane.attach(workdir / "cp")
        for n in state["nodes"]:
            bed.nodes[n["node_name"]] = Node.attach(n, bed.cp)  # type: ignore[arg-type]
        return bed

    def stop(self) -> None:
        """Stop the nodes, the control plane, delete the bridge; every step is tried.

        :raises BedError: naming each step that failed.
        """
        errors = []
        for node in self.nodes.values():
            try:
                node.stop()
            except Exception as e:  # the next parts are still stopped
                errors.append(f"node {node.node_name}: {e}")
        if self.cp is not None:
            try:
                self.cp.stop()
            except Exception as e:
                errors.append(f"control plane: {e}")
        if self.bridge is not None:
            try:
                self.bridge.delete()
            except Exception as e:
                errors.append(f"bridge {self.bridge.name}: {e}")
        if errors:
            raise BedError("; ".join(errors))

