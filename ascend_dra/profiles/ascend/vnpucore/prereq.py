"""Which chips the HAMivNPUCore profile may offer, and why each other chip is not offered.

Prerequisites (docs/ascend-hardware.md#device-share-mode; Lab 18 "前置条件"; the integration source "前提条件"):

* the chip is in **device-share** mode (``npu-smi info -t device-share`` says ``True`` for its
  NPU ID and chip ID). The profile never switches it on: that is ``npu-smi set -t device-share``,
  a prompt about security risks that the operator answers (docs/ascend-hardware.md#npu-smi-commands,
  docs/ascend-hardware.md#device-share-mode);
* the driver is **25.5 or newer** (``version.info``, :mod:`.versioninfo`);
* the host has the hami-vnpu-core assets: ``libvnpu.so`` in the assets directory and the shared
  region directory (docs/ascend-hardware.md#vnpu-core-host-layout; the peer chart's init container
  puts them there). The host's ``ld.so.preload`` is not needed: each claim gets its own;
* every container would load ``libvnpu.so`` (:func:`.vnpu_core_assets.library_problem`: it resolves
  inside the container to a file under our mount, readable by every user, an ELF shared object of
  this host's machine); otherwise the loader skips it and the quota is never enforced;
* the shared region has mode **0777** (:data:`SHARED_REGION_MODE`): every container's limiter
  creates (``open(O_CREAT|O_RDWR)``) its chip's ``<physicalID>_global_registry`` there, as whatever
  user the container runs as (Project-HAMi/hami-vnpu-core ``crates/limiter/src/shmem/setup.rs``
  ``open_global_registry``); HAMi's device plugin makes it 0777 and chmods it at start-up
  (Project-HAMi/ascend-device-plugin ``internal/server/util.go`` ``prepareHostResources``). The
  profile never changes the mode itself; the reason names the ``chmod`` to run;
* the chip's memory size is known (the ``memory`` capacity is exactly what npu-smi reports).

The soft split is documented for **aarch64** hosts only (Lab 18: "HAMivNPUCore 软切分仅支持 ARM");
another architecture is a note, not a refusal, because the assets are what decide. A ``limiter``
binary in the assets directory is a note too (:func:`.vnpu_core_assets.limiter_binary`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

import attrs

from ascend_dra.profiles.ascend.chip import NpuChip
from ascend_dra.profiles.ascend.npusmi.keyvalue import DeviceShare
from ascend_dra.profiles.ascend.vnpucore.assets import LibraryMissing, library_problem, limiter_binary
from ascend_dra.profiles.ascend.vnpucore.host import VnpuCoreHost
from ascend_dra.profiles.ascend.vnpucore.versioninfo import DriverRelease, VersionInfoError, parse_version_info

__all__ = ("MIN_DRIVER", "SHARED_REGION_MODE", "SUPPORTED_MACHINES", "HostFacts", "Verdict", "judge", "probe_host")

#: Oldest driver release with the soft split (docs/ascend-hardware.md#device-share-mode: "Ascend driver ≥ 25.5").
MIN_DRIVER = DriverRelease(25, 5, "25.5")
#: ``platform.machine()`` values the soft split is documented for (Lab 18).
SUPPORTED_MACHINES = frozenset({"aarch64", "arm64"})
#: Permission bits the shared region must have (``mkdir -m 0777``; see the module docstring).
SHARED_REGION_MODE = 0o777


@attrs.frozen
class HostFacts:
    """What the node's files say: the driver release (or why it is unknown), missing asset paths,
    the shared region's permission bits (None when it is missing or unreadable), why containers
    would not load the interceptor library (None when they would, or when it is missing), and the
    path of an older design's ``limiter`` binary in the assets dir (None when there is none)."""

    driver: DriverRelease | None
    driver_problem: str | None
    missing_assets: tuple[str, ...]
    shared_region_mode: int | None = None
    shared_region_path: str = ""
    library_problem: str | None = None
    limiter_binary: str | None = None


def probe_host(host: VnpuCoreHost, machine: str) -> HostFacts:
    """Read ``version.info`` and check the assets as containers will see them (blocking; run it in a
    worker thread). ``machine`` is ``platform.machine()`` (the library must be built for it)."""
    driver: DriverRelease | None = None
    problem: str | None = None
    try:
        with open(host.version_info, encoding="utf-8", errors="replace") as f:
            driver = parse_version_info(f.read())
    except OSError as exc:
        problem = f"cannot read {host.version_info}: {exc.strerror or exc}"
    except VersionInfoError as exc:
        problem = f"{host.version_info}: {exc.reason}"
    missing: list[str] = []
    library: str | None = None
    try:
        library = library_problem(host, machine)
    except LibraryMissing as exc:
        missing.append(str(exc))
    if not os.path.isdir(host.shared_region_dir):
        missing.append(host.shared_region_dir)
    try:
        region_mode: int | None = stat.S_IMODE(os.stat(host.shared_region_dir).st_mode)
    except OSError:
        region_mode = None
    return HostFacts(driver=driver, driver_problem=problem, missing_assets=tuple(missing),
                     shared_region_mode=region_mode, shared_region_path=host.shared_region_dir,
                     library_problem=library, limiter_binary=limiter_binary(host))


@attrs.frozen
class Verdict:
    """The outcome for a node: chips offered, ``(chip, reason)`` for the others, node notes."""

    offered: tuple[NpuChip, ...]
    refused: tuple[tuple[NpuChip, str], ...]
    notes: tuple[str, ...]


def judge(
    chips: Sequence[NpuChip],
    *,
    tier: str,
    device_share: Sequence[DeviceShare] | None,
    device_share_problem: str | None,
    facts: HostFacts,
    machine: str,
) -> Verdict:
    """Apply the prerequisites of the module docstring to every chip (pure).

    :param tier: the discovery tier that found ``chips``; only ``npu-smi`` knows NPU IDs.
    :param device_share: the parsed ``npu-smi info -t device-share``, or None when it failed
        (then ``device_share_problem`` says why).
    :param machine: ``platform.machine()`` of the host.
    :return: every chip either offered or refused with one reason naming all its failed checks.
    """
    node_problems: list[str] = []
    if facts.driver is None:
        node_problems.append(f"driver version unknown ({facts.driver_problem}); HAMivNPUCore needs driver >= "
                             f"{MIN_DRIVER}")
    elif facts.driver < MIN_DRIVER:
        node_problems.append(f"driver {facts.driver} is older than {MIN_DRIVER} (HAMivNPUCore needs >= {MIN_DRIVER})")
    if facts.missing_assets:
        node_problems.append("hami-vnpu-core assets missing: " + ", ".join(facts.missing_assets))
    if facts.library_problem is not None:
        node_problems.append(facts.library_problem)
    mode = facts.shared_region_mode
    if mode is not None and mode & SHARED_REGION_MODE != SHARED_REGION_MODE:
        region = facts.shared_region_path
        node_problems.append(f"hami-vnpu-core shared region {region} is mode {mode:04o}, needs "
                             f"{SHARED_REGION_MODE:04o} (every container's limiter creates its chip's global "
                             "registry there, as any user): "
                             f"chmod {SHARED_REGION_MODE:04o} {region}")
    shared = {(s.npu_id, s.chip_id): s.enabled for s in device_share or ()}
    offered: list[NpuChip] = []
    refused: list[tuple[NpuChip, str]] = []
    for chip in chips:
        problems = list(node_problems)
        if tier not in ("npu-smi", "dcmi") or chip.npu_id is None:
            problems.append(f"device-share mode unknown: chip found by the {tier} tier, not by the driver")
        elif device_share is None:
            problems.append(f"device-share mode unknown: {device_share_problem}")
        elif (chip.npu_id, chip.chip_id) not in shared:
            problems.append("not listed by npu-smi info -t device-share")
        elif not shared[(chip.npu_id, chip.chip_id)]:
            problems.append(f"device-share is off (enable it with: npu-smi set -t device-share -i {chip.npu_id} "
                            f"-c {chip.chip_id} -d 1)")
        if not chip.memory_mib:
            problems.append("memory size unknown (npu-smi info printed no total)")
        if problems:
            refused.append((chip, "; ".join(problems)))
        else:
            offered.append(chip)
    notes = []
    if machine not in SUPPORTED_MACHINES:
        notes.append(f"host architecture is {machine or 'unknown'}: the HAMivNPUCore soft split is documented for "
                     "aarch64 hosts only (Lab 18); libvnpu.so must be built for this host and driver")
    if facts.limiter_binary is not None:
        notes.append(f"{facts.limiter_binary} is there, and ascend-dra never starts it: it is the older "
                     "hami-vnpu-core design's manager, which a postStart hook started in each container. The "
                     "libvnpu.so beside it must run the manager itself (limiter::supervisor), or workloads wait "
                     "for a manager that never comes (docs/hami-vnpu-core.md)")
    return Verdict(offered=tuple(offered), refused=tuple(refused), notes=tuple(notes))
