"""A simulated node for ``--profiles HAMivNPUCore,hard-vNPU`` (docs/splits.md): Lab 18's two 310P3
chips (NPU IDs 4/5, logic IDs 0/1, physical IDs 0/2) as both the lab node (device-share, board,
hami-vnpu-core assets: labnode.py) and the stateful npu-smi simulator (templates, vNPUs:
npusmi_sim.py) describe them, behind one npu-smi that asks each for what it knows.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ascend_dra.profiles.ascend.sim import labnode
from ascend_dra.profiles.base import ProfileContext
from tests.hardvnpu import SIM, SimHost

PROFILES = "HAMivNPUCore,hard-vNPU"

_SCRIPT = """#!/bin/sh
# npu-smi of a test node with both splits: the lab node's answers for device-share and the chip's
# identity, the simulator's for everything else (tests/bothsplits.py).
case "$*" in
  "info -t device-share"*|"set -t device-share"*|"info -t board"*|"info -t common"*|"info -t phyid-remap"*)
    exec {lab} "$@" ;;
esac
exec {sim} "$@"
"""


class BothSplitsHost:
    """The lab node and the simulator under ``root``; :meth:`args` are the daemon's flags."""

    def __init__(self, root: Path) -> None:
        self.lab = labnode.build(root / "lab")
        self.sim = SimHost(root / "sim", chips=tuple((c.npu_id, c.chip_id, c.logic_id, c.physical_id, "310P3")
                                                      for c in self.lab.chips))
        self.npu_smi = root / "npu-smi"
        self.npu_smi.write_text(_SCRIPT.format(lab=shlex.quote(str(self.lab.npu_smi)), sim=shlex.quote(SIM)))
        self.npu_smi.chmod(0o755)

    @property
    def env(self) -> dict[str, str]:
        return self.sim.env

    def args(self) -> list[str]:
        """``ascend-dra run`` / ``discover`` flags for both profiles on this node."""
        return ["--npu-smi", str(self.npu_smi), "--dev-root", str(self.lab.dev_root),
                "--profile-option", f"HAMivNPUCore.hostRoot={self.lab.host_root}",
                "--profile-option", f"hard-vNPU.vnpu-dev-dir={self.sim.vdev}",
                "--profile-option", f"hard-vNPU.boot-id-file={self.sim.boot_id_file}"]

    def ctx(self, node_name: str = "node-1") -> ProfileContext:
        """The context the daemon gives both profiles on this node (run its discoveries in-process
        with ``ASCEND_NPU_SMI_SIM_DIR`` set from :attr:`env`)."""
        return ProfileContext(node_name=node_name, driver_name="ascend.project-hami.io", dev_root=self.lab.dev_root,
                              sys_root=self.lab.root / "sys", npu_smi=str(self.npu_smi), state_dir=self.sim.state_dir,
                              options={"HAMivNPUCore.hostRoot": str(self.lab.host_root), **self.sim.options})
