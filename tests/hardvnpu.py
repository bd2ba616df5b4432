"""A simulated hard-vNPU host for tests: the stateful npu-smi simulator, a /dev tree, a boot id.

Chips are given as ``(npu ID, chip ID, logic ID, physical ID, model)``; the default is the Lab 18
shape (docs/ascend-hardware.md#the-ids: NPU IDs 4/5, physical IDs 0/2, logic IDs 0/1), so a test that
sees ``-i 4`` in the simulator's state proves the NPU ID, not the logic ID, reached npu-smi.

With ``dcmi=True`` the host root the profile is given (option ``hard-vNPU.host-root``) carries the
test ``libdcmi.so`` (tests/dcmisim), which makes and lists vNPUs on the simulator's own state: the
DCMI tier then answers discovery and the vNPU calls, npu-smi what DCMI does not.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from ascend_dra.profiles.ascend.sim import npusmi_sim
from ascend_dra.profiles.base import ProfileContext
from tests.dcmisim import build, install

SIM = str(Path(sys.executable).with_name("ascend-dra-npu-smi-sim"))
LAB18 = ((4, 0, 0, 0, "910B4"), (5, 0, 1, 2, "910B4"))
#: The two ways a hard-vNPU host is driven, for tests parametrized over them.
TIERS = ("npu-smi", "dcmi")


class SimHost:
    """Directories of one simulated node under ``root``."""

    def __init__(self, root: Path, chips: Sequence[tuple[int, int, int, int, str]] = LAB18, *,
                 dcmi: bool = False, host_root: bool = True) -> None:
        """:param host_root: give the profile a host root of its own (``root/host``, with the driver's
            ``lib64``: its claims' CDI specs then mount ``/usr/local/Ascend/driver/lib64``, as on a
            real node). False (not with ``dcmi``): the profile looks at this machine's ``/``, where a
            container runtime can mount only what exists (tests/container)."""
        if dcmi and not host_root:
            raise ValueError("the DCMI tier needs the host root that carries libdcmi.so")
        self.root = root
        self.dcmi = dcmi
        self.host_root: Path | None = root / "host" if host_root else None
        if self.host_root is not None:
            (self.host_root / "usr/local/Ascend/driver/lib64").mkdir(parents=True, exist_ok=True)
        if dcmi:
            install(self.host_root, build())
        self.dev = root / "dev"
        self.vdev = root / "vdev"
        self.sim_dir = root / "npu-smi-sim"
        self.boot_id_file = root / "boot_id"
        self.state_dir = root / "profile-state"
        self.dev.mkdir(parents=True, exist_ok=True)
        for name in ("davinci_manager", "devmm_svm", "hisi_hdc", *(f"davinci{c[3]}" for c in chips)):
            (self.dev / name).touch()
        if not self.boot_id_file.exists():
            self.boot_id_file.write_text("boot-1\n")
        npusmi_sim.write_host(self.sim_dir, [
            {"npu_id": n, "chip_id": c, "logic_id": logic, "physical_id": p, "model": m,
             "bus_id": f"0000:{0x81 + 4 * i:02X}:00.0"}
            for i, (n, c, logic, p, m) in enumerate(chips)], boot_id_file=self.boot_id_file, dev_dir=self.vdev)

    @property
    def env(self) -> dict[str, str]:
        return {npusmi_sim.ENV_DIR: str(self.sim_dir)}

    @property
    def options(self) -> dict[str, str]:
        options = {"hard-vNPU.boot-id-file": str(self.boot_id_file), "hard-vNPU.vnpu-dev-dir": str(self.vdev)}
        if self.host_root is not None:
            options["hard-vNPU.host-root"] = str(self.host_root)
        return options

    def option_args(self) -> list[str]:
        return [arg for k, v in self.options.items() for arg in ("--profile-option", f"{k}={v}")]

    def ctx(self, node_name: str = "node-1") -> ProfileContext:
        return ProfileContext(node_name=node_name, driver_name="ascend.project-hami.io", dev_root=self.dev,
                              sys_root=self.root / "sys", npu_smi=SIM, state_dir=self.state_dir, options=self.options)

    def vnpus(self) -> list[dict]:
        """The vNPUs the simulator holds now: after a reboot, those vnpu-cfg-recover restored (all of
        them while it is enabled, npu-smi's default; none while it is disabled)."""
        return npusmi_sim.Sim(self.sim_dir).load()

    def reboot(self, boot_id: str) -> None:
        """A new boot id; the simulator then applies its vnpu-cfg-recover mode to the vNPUs."""
        self.boot_id_file.write_text(boot_id + "\n")

    def ledger(self) -> list[str]:
        directory = self.state_dir / "hard-vNPU"
        return sorted(p.name for p in directory.glob("*.json")) if directory.is_dir() else []


def daemon_args(host: SimHost) -> list[str]:
    """``ascend-dra run`` flags that point the hard-vNPU profile at ``host``."""
    return ["--npu-smi", SIM, "--dev-root", str(host.dev), *host.option_args()]


def vnpus_of_records(claims: dict) -> set[tuple[int, int, int]]:
    """``(npu ID, chip ID, vNPU ID)`` of every vNPU the checkpoint's claim records name."""
    return {(v["npu_id"], v["chip_id"], v["vnpu_id"]) for r in claims.values()
            for v in ((r.get("side_effects") or {}).get("hard-vNPU") or {}).get("vnpus", [])}  # null: none yet


def vnpu_keys(vnpus: list[dict]) -> set[tuple[int, int, int]]:
    return {(v["npu_id"], v["chip_id"], v["vnpu_id"]) for v in vnpus}
