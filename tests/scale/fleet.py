"""The simulated nodes' hosts and the driver processes serving them, one process per node.

Three node kinds, one per workload (the profile decides the slices):

* ``whole``: the ``fake`` profile, 8 simulated NPUs a node (whole chips);
* ``hami``: ``HAMivNPUCore`` on Lab 18's simulated node (labnode.py) grown to 8 Ascend 310P3
  chips behind its ``/bin/sh`` npu-smi stand-in (soft split: consumable memory and cores); with
  ``dcmi`` (the default) its driver directory holds the test ``libdcmi.so`` on a simulator state of
  the same chips, so discovery and the health checks ask DCMI in the daemon's process, as on a
  node with the Ascend driver, and npu-smi only what DCMI does not answer (``-t device-share``);
* ``hard``: ``hard-vNPU`` on the npu-smi simulator (npusmi_sim.py), 8 Ascend 310P3 chips, whose
  templates consume the chips' shared counters. The simulator is a Python program: started for
  every call it costs ~85 ms of CPU, and a hundred nodes' discoveries (28 calls each) and vNPU
  creations would take the machine's two cores from everything measured. So the bed serves it
  from one process (:mod:`tests.scale.npusmi_server`): each node's ``npu-smi`` is a bash script
  that answers the calls whose output never changes (``info``, ``info -m``, ``template-info``)
  from files the simulator wrote at set-up, and sends the others (``info-vnpu``, ``create-vnpu``,
  ``destroy-vnpu``, the refused ones) over a TCP connection (bash's ``/dev/tcp``) to the server,
  which runs the simulator's own code on the node's state directory. A call then costs a fork and
  exec, as a real npu-smi's start does, not a Python start. By default (``dcmi=True``) the node
  also has the driver's ``libdcmi.so``, as every node with the Ascend driver installed has: the test
  library (tests/dcmisim) answers discovery and makes and destroys vNPUs in the daemon's own
  process, on the same simulator state, and npu-smi is asked only what DCMI does not answer
  (docs/hard-vnpu.md#through-dcmi). ``--tier npu-smi`` runs the hami and hard nodes without it.

The Go reference driver (kubernetes-sigs/dra-example-driver's kubelet plugin) serves the same
shapes: ``--num-devices 8`` whole GPUs; with ``--gpu-allow-multiple-allocations`` its GPUs have
consumable memory and compute (the soft split's kind); with ``--gpu-partitions 2`` each GPU is two
partitions and a full device on shared counters (the hard split's kind). Its client-go rate limit
is left as shipped (QPS 5, burst 10): a node sees at most a few claims a second here.

Every driver gets the real tmpfs directory for CDI specs (as ``/var/run/cdi`` on a node) and its
checkpoint on the disk; our daemons run as a DaemonSet would, with the metrics and health ports off.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

from ascend_dra.profiles.ascend.sim import labnode, npusmi_sim

__all__ = ("GO_DRIVER", "OUR_DRIVER", "SHAPES", "Fleet", "NodeHost", "ProcStat", "go_binary", "proc_stat")

OUR_DRIVER = "ascend.project-hami.io"
GO_DRIVER = "gpu.example.com"
GO_COMMIT = "bab2dce4b045e729565c9a3b85554738247cda30"  # dra-example-driver v0.4.0, as bench_vs_go.py
SHAPES = ("whole", "hami", "hard")
CHIPS = 8
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: The Go driver's flags for each shape.
GO_FLAGS = {"whole": [], "hami": ["--gpu-allow-multiple-allocations"], "hard": ["--gpu-partitions", "2"]}
#: Our daemon's profile for each shape.
PROFILES = {"whole": "fake", "hami": "HAMivNPUCore", "hard": "hard-vNPU"}
#: The template of the ``hard`` workload (tests/scale/workloads.py), the only one its nodes publish.
HARD_TEMPLATE = "vir04_3c"


def go_binary() -> Path:
    """Where bench/README.md builds the Go driver's kubelet plugin (outside the repository)."""
    cache = Path(os.environ.get("ASCEND_DRA_CACHE") or Path.home() / ".cache" / "ascend-dra")
    return cache / f"dra-example-driver-{GO_COMMIT[:7]}" / "dra-example-kubeletplugin"


def lab_chips(index: int) -> list[labnode.LabChip]:
    """Eight 310P3 chips in the lab node's form; VDie IDs unique in the cluster (``index`` is the node's)."""
    return [labnode.LabChip(npu_id=i, chip_id=0, logic_id=i, physical_id=i, bus_id=f"0000:{0x81 + 4 * i:02x}:00.0",
                            vdie_id=f"{index:08X}-{i:08X}-92C31323-6E78030A-BD003019") for i in range(CHIPS)]


_FRONT = r'''#!/bin/bash
# npu-smi of one simulated hard-vNPU node of the scale bed (tests/scale/fleet.py): fixed answers from
# files, the rest from the simulator's server.
ANSWERS=__ANSWERS__
case "$*" in
  "info") exec cat "$ANSWERS/info" ;;
  "info -m") exec cat "$ANSWERS/info_-m" ;;
  "info -t template-info") exec cat "$ANSWERS/template-info" ;;
  "info -t template-info -i "[0-9]*) [ -e "$ANSWERS/template-info_$5" ] && exec cat "$ANSWERS/template-info_$5" ;;
esac
exec 3<>/dev/tcp/127.0.0.1/__PORT__ || exit 1
{ printf '%s' __SIMDIR__; for a in "$@"; do printf '\t%s' "$a"; done; printf '\n'; } >&3
IFS= read -r code <&3
cat <&3
exit "$code"
'''


@attrs.define
class NodeHost:
    """One simulated node's directories (under ``root``: a short path, unix sockets stay under 108
    bytes) and the command line of its driver."""

    name: str
    index: int
    root: Path
    cdi: Path  # on tmpfs
    shape: str
    dcmi: bool = True  # a hami or hard node carries libdcmi.so (tests/dcmisim)

    @property
    def registry(self) -> Path:
        return self.root / "plugins_registry"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    def prepare(self, sim_port: int | None) -> None:
        """Make the node's directories (and its lab node or simulator state); idempotent."""
        for d in (self.root, self.registry, self.dev, self.cdi):
            d.mkdir(parents=True, exist_ok=True)
        (self.root / "boot_id").write_text("boot-1\n")
        if self.shape == "whole":  # the fake profile's device node, as on a node: /dev/null
            null = self.dev / "null"
            if not null.exists():
                try:
                    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
                except PermissionError:
                    null.touch()
        elif self.shape == "hami":
            self._lab()
        elif self.shape == "hard":
            assert sim_port is not None
            self._hard_host(sim_port)

    def _lab(self) -> labnode.LabNode:
        """(Re)build the hami node's lab node (idempotent); with :attr:`dcmi`, the test ``libdcmi.so``
        where the driver installs it (in place of the lab's placeholder file, which is no library)
        and a simulator state of the same chips for it to answer from."""
        lab = labnode.build(self.root / "lab", lab_chips(self.index))
        if self.dcmi:
            from tests.dcmisim import build, install

            npusmi_sim.write_host(self.root / "sim", [
                {"npu_id": c.npu_id, "chip_id": c.chip_id, "logic_id": c.logic_id, "physical_id": c.physical_id,
                 "model": "310P3", "bus_id": c.bus_id} for c in lab.chips])
            install(lab.host_root, build(), where="usr/local/Ascend/driver/lib64/common")
        return lab

    def _hard_host(self, port: int) -> None:
        sim = self.root / "sim"
        vdev = self.root / "vdev"
        vdev.mkdir(exist_ok=True)
        for name in ("davinci_manager", "devmm_svm", "hisi_hdc", *(f"davinci{i}" for i in range(CHIPS))):
            (self.dev / name).touch()
        npusmi_sim.write_host(sim, [{"npu_id": i, "chip_id": 0, "logic_id": i, "physical_id": i, "model": "310P3",
                                     "bus_id": f"0000:{0x81 + 4 * i:02X}:00.0"} for i in range(CHIPS)],
                              boot_id_file=self.root / "boot_id", dev_dir=vdev)
        answers = self.root / "answers"
        answers.mkdir(exist_ok=True)
        fixed = {"info": ["info"], "info_-m": ["info", "-m"], "template-info": ["info", "-t", "template-info"],
                 **{f"template-info_{i}": ["info", "-t", "template-info", "-i", str(i)] for i in range(CHIPS)}}
        for file, argv in fixed.items():
            (answers / file).write_text(npusmi_sim.run(argv, sim))
        front = self.root / "npu-smi"
        front.write_text(_FRONT.replace("__ANSWERS__", str(answers)).replace("__PORT__", str(port))
                         .replace("__SIMDIR__", str(sim)))
        front.chmod(0o755)
        if self.dcmi:
            from tests.dcmisim import build, install

            (self.host_root / "usr/local/Ascend/driver/lib64").mkdir(parents=True, exist_ok=True)
            install(self.host_root, build())

    @property
    def host_root(self) -> Path:
        """The node's host root (``hard-vNPU.host-root``): where the driver's files are."""
        return self.root / "host"

    def env(self) -> dict[str, str]:
        """What the node's daemon adds to its environment: the DCMI test library's simulator state."""
        if self.shape in ("hami", "hard") and self.dcmi:
            return {npusmi_sim.ENV_DIR: str(self.root / "sim")}
        return {}

    def ours(self, kubeconfig: Path) -> list[str]:
        """``ascend-dra run`` for this node in cluster mode."""
        args = [sys.executable, "-m", "ascend_dra.cli", "run", "--profiles", PROFILES[self.shape],
                "--node-name", self.name, "--kubeconfig", str(kubeconfig), "--cdi-root", str(self.cdi),
                "--kubelet-root-dir", str(self.root), "--boot-id-file", str(self.root / "boot_id")]
        if self.shape == "whole":
            args += ["--fake-devices", str(CHIPS), "--dev-root", str(self.dev)]
        elif self.shape == "hami":
            args += self._lab().flags()
        else:
            args += ["--npu-smi", str(self.root / "npu-smi"), "--dev-root", str(self.dev),
                     "--profile-option", f"hard-vNPU.boot-id-file={self.root / 'boot_id'}",
                     "--profile-option", f"hard-vNPU.vnpu-dev-dir={self.root / 'vdev'}",
                     # The template the workload asks for, as an operator serving it configures
                     # (docs/hard-vnpu.md): 3 devices a chip, not the 39 of every 310P3 template.
                     "--profile-option", f"hard-vNPU.templates={HARD_TEMPLATE}"]
            if self.dcmi:
                args += ["--profile-option", f"hard-vNPU.host-root={self.host_root}"]
        return args

    def go(self, kubeconfig: Path, binary: Path) -> list[str]:
        """The Go driver's kubelet plugin for this node (``NODE_NAME`` must be set too: its common CDI
        spec reads it)."""
        return [str(binary), "--node-name", self.name, "--kubeconfig", str(kubeconfig), "--cdi-root", str(self.cdi),
                "--num-devices", str(CHIPS), "--kubelet-registrar-directory-path", str(self.registry),
                "--kubelet-plugins-directory-path", str(self.root / "plugins"), *GO_FLAGS[self.shape]]

    def clear(self) -> None:
        """Remove what a driver left (sockets, checkpoint, CDI specs, vNPUs) before another one starts."""
        for path in (self.registry, self.root / "plugins"):
            shutil.rmtree(path, ignore_errors=True)
        for spec in self.cdi.glob("*"):
            spec.unlink()
        self.registry.mkdir(parents=True, exist_ok=True)


@attrs.frozen
class ProcStat:
    """A process's CPU seconds (its own; its waited-for children's) and memory (MiB) at one moment."""

    cpu: float
    children_cpu: float
    rss_mib: float


def proc_stat(pid: int) -> ProcStat:
    """Read ``/proc/PID/stat`` (utime, stime, cutime, cstime) and ``status`` (VmRSS).

    :raises OSError: the process is gone.
    """
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    rss = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
    return ProcStat((int(fields[11]) + int(fields[12])) / CLK_TCK, (int(fields[13]) + int(fields[14])) / CLK_TCK, rss)


class Fleet:
    """One driver process per node host, started ``parallel`` at a time.

    :param driver: ``"ours"`` or ``"go"``.
    """

    def __init__(self, hosts: Sequence[NodeHost], driver: str, kubeconfig: Path, *, go_binary: Path | None = None,
                 parallel: int = 8) -> None:
        self.hosts, self.driver, self.kubeconfig = list(hosts), driver, kubeconfig
        self.go_binary = go_binary
        self.parallel = parallel
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.started: dict[str, float] = {}  # node -> seconds from spawn to its registration socket

    @property
    def driver_name(self) -> str:
        return OUR_DRIVER if self.driver == "ours" else GO_DRIVER

    def start(self, timeout: float = 300.0) -> None:
        """Start every node's driver, ``parallel`` at a time: the next starts once an earlier one
        has its registration socket (start-up is the CPU-heavy part of a Python daemon's life).

        :raises RuntimeError: a driver exited, or had no registration socket ``timeout`` s after it started.
        """
        pending = list(self.hosts)
        waiting: dict[str, tuple[NodeHost, float]] = {}
        while pending or waiting:
            while pending and len(waiting) < self.parallel:
                host = pending.pop(0)
                self._spawn(host)
                waiting[host.name] = (host, time.monotonic())
            for name, (host, began) in list(waiting.items()):
                proc = self.procs[name]
                if proc.poll() is not None:
                    raise RuntimeError(f"{self.driver} driver of {name} exited with {proc.returncode}:\n"
                                       f"{self.log_tail(host)}")
                if any(host.registry.glob("*.sock")):
                    self.started[name] = time.monotonic() - began
                    del waiting[name]
            late = sorted(name for name, (_, began) in waiting.items() if time.monotonic() - began > timeout)
            if late:
                raise RuntimeError(f"{self.driver}: no registration socket {timeout:.0f} s after the start on "
                                   f"{', '.join(late)}")
            time.sleep(0.05)

    def _spawn(self, host: NodeHost) -> None:
        host.clear()
        if self.driver == "ours":
            argv, env = host.ours(self.kubeconfig), {**os.environ, **host.env()}
        else:
            assert self.go_binary is not None
            argv, env = host.go(self.kubeconfig, self.go_binary), {**os.environ, "NODE_NAME": host.name}
        with open(host.root / f"{self.driver}.log", "ab") as log:
            self.procs[host.name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                     stdin=subprocess.DEVNULL, env=env)

    def log_tail(self, host: NodeHost) -> str:
        return self.log(host)[-3000:]

    def log(self, host: NodeHost) -> str:
        """Everything the node's driver logged (every run of this driver on it)."""
        path = host.root / f"{self.driver}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.procs.items()}

    def stats(self) -> dict[str, ProcStat]:
        """Each running driver's :class:`ProcStat`, by node.

        :raises RuntimeError: a driver has exited.
        """
        out = {}
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{self.driver} driver of {name} exited with {proc.returncode}")
            out[name] = proc_stat(proc.pid)
        return out

    def stop(self) -> None:
        """SIGTERM to all, then wait (SIGKILL after 20 s)."""
        procs = list(self.procs.values())  # start() may still add to it (a run stopped while it starts)
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
