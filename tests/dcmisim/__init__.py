"""The test ``libdcmi.so`` (``libdcmi.c`` beside this file), built with gcc, and fake hosts that carry it.

:func:`fake_host` writes one node that both discovery tiers read: the npu-smi simulator's
``host.json``, ``/dev``, sysfs, and two host roots, one with the library installed.

:func:`build` compiles the library once per source hash into ``${ASCEND_DRA_CACHE:-~/.cache/ascend-dra}``
(atomically, so parallel runs share it); :func:`install` puts it where the driver installs DCMI
under a fake host root. The library answers from ``$ASCEND_NPU_SMI_SIM_DIR/host.json``, the host
the npu-smi simulator reads (:func:`ascend_dra.profiles.ascend.sim.npusmi_sim.write_host`), and obeys
``$ASCEND_NPU_SMI_SIM_DIR/dcmi-faults`` (see the C file's header).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ascend_dra.profiles.ascend.sim import npusmi_sim
from ascend_dra.profiles.base import ProfileContext
from tests.unit.test_ascend_support import dev_tree, sys_tree

__all__ = ("FAULTS", "SIM", "SOURCE", "SOURCES", "FakeHost", "build", "fake_host", "install", "set_fault")

#: The npu-smi simulator's console script.
SIM = str(Path(sys.executable).with_name("ascend-dra-npu-smi-sim"))

SOURCE = Path(__file__).resolve().parent / "libdcmi.c"
#: Every file of the library: the chip calls, the vNPU calls, what they share.
SOURCES = (SOURCE, SOURCE.with_name("vnpu.c"), SOURCE.with_name("dcmisim.h"))
#: The fault file's name inside the simulator's directory.
FAULTS = "dcmi-faults"
_FLAGS = ("-shared", "-fPIC", "-O1", "-std=gnu11", "-Wall", "-Wextra", "-Werror")


def _cache() -> Path:
    return Path(os.environ.get("ASCEND_DRA_CACHE", Path.home() / ".cache" / "ascend-dra"))


def build(*, minimal: bool = False) -> Path:
    """The compiled library (built on first use of this source and flags).

    :param minimal: the variant that exports ``dcmi_init`` only.
    :raises RuntimeError: gcc is missing (what to install) or failed (with its output).
    """
    flags = (*_FLAGS, "-DDCMI_SIM_MINIMAL") if minimal else _FLAGS
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in SOURCES) + " ".join(flags).encode()).hexdigest()[:16]
    target = _cache() / f"libdcmi-sim-{digest}" / "libdcmi.so"
    if target.exists():
        return target
    if shutil.which("gcc") is None:
        raise RuntimeError("the DCMI tests build a test libdcmi.so with gcc, which is not on PATH: install it "
                           "(Debian: apt-get install gcc libc6-dev; .ci/run does so when it is missing)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / "libdcmi.so"
        done = subprocess.run(["gcc", *flags, "-o", str(out), *(str(p) for p in SOURCES if p.suffix == ".c")],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"gcc failed on {SOURCE}:\n{done.stderr}")
        os.replace(out, target)
    return target


def install(host_root: Path, library: Path, where: str = "usr/local/dcmi") -> Path:
    """Copy ``library`` to ``<host_root>/<where>/libdcmi.so`` (a driver install location). :return: its path."""
    path = host_root / where / "libdcmi.so"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(library, path)
    return path


def set_fault(sim_dir: Path, *lines: str) -> None:
    """Write the fault file (``"dcmi_get_device_health hang"``, ``"dcmi_init -8005"``, ``"... -8005 1 0"``);
    no lines removes every fault."""
    path = sim_dir / FAULTS
    if lines:
        path.write_text("".join(f"{line}\n" for line in lines))
    else:
        path.unlink(missing_ok=True)


SHARED_NODES = ("davinci_manager", "devmm_svm", "hisi_hdc")


@attrs.frozen
class FakeHost:
    """One simulated node that both tiers read.

    :ivar sim_dir: ``$ASCEND_NPU_SMI_SIM_DIR`` (``host.json``, ``dcmi-faults``).
    :ivar plain_root: a host root with the driver's directories and no ``libdcmi.so`` (npu-smi answers).
    :ivar dcmi_root: the same with the test ``libdcmi.so`` in ``/usr/local/dcmi``.
    """

    sim_dir: Path
    dev: Path
    sys_root: Path
    plain_root: Path
    dcmi_root: Path

    def ctx(self, npu_smi: str = SIM) -> ProfileContext:
        """The profile context of this node, npu-smi being the simulator (or ``npu_smi``)."""
        return ProfileContext(node_name="node-a", driver_name="ascend.project-hami.io", dev_root=self.dev,
                              sys_root=self.sys_root, npu_smi=npu_smi, state_dir=self.sim_dir.parent / "state")


def fake_host(root: Path, chips: Sequence[Mapping[str, Any]], library: Path | None = None) -> FakeHost:
    """Write the node under ``root``: ``host.json`` (:func:`.npusmi_sim.write_host`, which fills in the
    facts a chip leaves out), ``/dev/davinci<physical ID>`` and the shared nodes, sysfs PCI functions
    (NUMA node = NPU ID mod 2) with ``class/davinci`` links to them, and the two host roots.

    :param library: the ``libdcmi.so`` to install (default: :func:`build`).
    """
    sim_dir = root / "npu-smi-sim"
    npusmi_sim.write_host(sim_dir, chips)
    written = npusmi_sim.Sim(sim_dir).chips
    dev = dev_tree(root, [*(f"davinci{c['physical_id']}" for c in written), *SHARED_NODES])
    functions = {c["bus_id"].lower(): ("0x19e5", c["pci_device_id"] or "0x0000", c["npu_id"] % 2)
                 for c in written if c.get("bus_id")}
    links = {c["physical_id"]: c["bus_id"].lower() for c in written if c.get("bus_id")}
    sys_root = sys_tree(root, functions, links)
    roots = []
    for name in ("host", "host-dcmi"):
        host = root / name
        (host / "usr/local/Ascend/driver/lib64").mkdir(parents=True)
        (host / "usr/local/Ascend/driver/version.info").write_text(f"Version={npusmi_sim.DRIVER_VERSION}\n")
        (host / "usr/local/dcmi").mkdir(parents=True)
        roots.append(host)
    install(roots[1], library or build())
    return FakeHost(sim_dir, dev, sys_root, *roots)
