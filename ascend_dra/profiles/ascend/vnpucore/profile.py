"""The ``HAMivNPUCore`` profile: one Ascend chip shared by many claims, each with its own quota.

The soft split of Project-HAMi's hami-vnpu-core (docs/ascend-hardware.md#device-share-mode,
docs/ascend-hardware.md#the-hami-ascend-dra-driver; Lab 18; the
vNPU-core integration source): every chip in device-share mode is published once, named
``npu-<logicID>-0`` with ``allowMultipleAllocations: true``; the scheduler books each claim's
share of its consumable capacities (KEP-5075, one ``shareID`` per allocation); Prepare turns the
share into the limiter's env (:mod:`.vnpu_core_quota`) and mounts hami-vnpu-core into the container.

**Attributes** (HAMi-DRA's CEL reads them unchanged, docs/ascend-hardware.md#peer-attributes): ``type: HAMivNPUCore``,
``uuid`` (the
chip's VDie ID from ``npu-smi info -t board -i N -c C``; omitted, never invented, when unknown),
``productName`` and ``model`` (the chip name, ``310P3``), ``physicalID``, ``index`` (logic ID),
``brand: Huawei``, plus the common Ascend attributes of :mod:`.attributes`.

**Capacities**, each with a request policy (the defaults are what a claim gets for a capacity it
does not name; see docs/hami-vnpu-core.md for the trade-off):

* ``memory`` = the chip's MiB as ``npu-smi info`` prints it (``21525Mi``); range 1Mi..all, step 1Mi;
  default **1/64 of the chip** (``336Mi`` on a 310P3), not the whole chip as the peer does, so a
  claim that asks only for cores leaves the memory to others;
* ``cores`` = ``100`` (percent); range 1..100, step 1; default **1** (the limiter's own default
  priority, docs/ascend-hardware.md#vnpu-core-environment), so a memory-only claim does not take all compute;
* ``containers`` = ``64``, the limiter's registry size (``MAX_MANAGERS``, docs/ascend-hardware.md#vnpu-core-limiter),
  or the option ``maxShares`` (1..64; HAMi's device plugin allows 7 pods on a 310P3);
every allocation
  consumes exactly 1 (valid values: 1), so the scheduler never places a 65th share on a chip.
  All containers that use one claim share its local dir, meant to make the limiter count them as
  one; with separate PID namespaces it may not (docs/hami-vnpu-core.md, "Known limit").

**Container edits** per allocated device: env of its request (same on every device of it); device
nodes ``/dev/davinci<physicalID>`` plus the shared nodes found at discovery; the mounts of
docs/ascend-hardware.md#vnpu-core-container-edits:
``/etc/ascend_install.info``, the driver's ``lib64/driver`` and ``version.info`` (ro), the assets
dir at ``/hami-vnpu-core`` (ro), the claim's own preload file onto ``/etc/ld.so.preload`` (ro; it
names ``/hami-vnpu-core/libvnpu.so``, :mod:`.vnpu_core_assets`: the host's ``ld.so.preload`` may
name a path the container does not have), the shared region at ``/hami-shared-region`` and the
claim's local dir at ``/hami-vnpu-shmem`` (rw, nosuid, nodev). The claim's dir is
``<vnpuCoreDir>/containers/<claimUID>``: ``ld.so.preload`` (mode 0644) and one local dir per request,
``<request>/`` (mode 0777), created by :meth:`VnpuCoreProfile.prepare_side_effects` and removed
with everything in it by :meth:`unprepare_side_effects`.

Host paths are profile options (:mod:`.vnpu_core_host`); prerequisites in :mod:`.vnpu_core_prereq`.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs

from ascend_dra.model import ClaimAllocation
from ascend_dra.observe.faults import disk_fault
from ascend_dra.profiles.ascend import host as ascend_host
from ascend_dra.profiles.ascend.attributes import chip_attributes, device_name
from ascend_dra.profiles.ascend.chip import DroppedChip, NpuChip
from ascend_dra.profiles.ascend.chips import MODELS, ChipFamily
from ascend_dra.profiles.ascend.discovery.chain import DRIVER_TIERS, TIER_DEVFS, TIER_SIMULATED, discover_chips
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiError
from ascend_dra.profiles.ascend.npusmi.keyvalue import DeviceShare
from ascend_dra.profiles.ascend.npusmi.runner import NpuSmi
from ascend_dra.profiles.ascend.profile import AscendChipProfile, unknown_family
from ascend_dra.profiles.ascend.vnpucore.assets import LibraryMissing, library_problem, preload_path, write_preload
from ascend_dra.profiles.ascend.vnpucore.host import (
    CONTAINER_LOCAL_DIR,
    CONTAINER_SHARED_REGION,
    CONTAINER_VNPU_CORE_DIR,
    MAX_CONTAINERS,
    OPTIONS,
    VnpuCoreHost,
    max_shares,
)
from ascend_dra.profiles.ascend.vnpucore.prereq import judge, probe_host
from ascend_dra.profiles.ascend.vnpucore.quota import limiter_env, metadata_attributes
from ascend_dra.profiles.base import (
    AllocatedDevice,
    ApplyContext,
    Capacity,
    CapacityRequestPolicy,
    ConfigError,
    ContainerEdits,
    Device,
    DeviceNode,
    Inventory,
    Mount,
    ProfileContext,
)

__all__ = ("MAX_CONTAINERS", "PROFILE_NAME", "VnpuCoreConfig", "VnpuCoreProfile", "capacities", "factory")

logger = logging.getLogger(__name__)

PROFILE_NAME = "HAMivNPUCore"
_RW = ("rw", "nosuid", "nodev", "bind")
_RO = ("ro", "nosuid", "nodev", "bind")
# A claim UID / request name as a path component: what check_claim_ref and the API allow, no dots.
_COMPONENT = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: A Kubernetes object UID as the API server makes them (RFC 4122 text form): the names of our claim dirs.
_CLAIM_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@attrs.frozen
class VnpuCoreConfig:
    """Opaque config ``kind: VnpuCoreConfig`` (apiVersion ``<driver-name>/v1alpha1``).

    :ivar mount_tools: ``mountTools``: also mount ``/usr/local/dcmi`` and ``/usr/local/bin/npu-smi``
        read-only when the node has them. Default false, as the peer driver
        (docs/ascend-hardware.md#vnpu-core-container-edits: npu-smi is
        deliberately not mounted; inside the container it shows the quota as the memory total).
    """

    mount_tools: bool = False


def capacities(memory_mib: int, shares: int = MAX_CONTAINERS) -> dict[str, Capacity]:
    """The three capacities of a chip with ``memory_mib`` MiB that ``shares`` claims may share at
    once (see the module docstring)."""
    return {
        "memory": Capacity(f"{memory_mib}Mi", CapacityRequestPolicy(
            default=f"{max(1, memory_mib // MAX_CONTAINERS)}Mi", valid_range_min="1Mi",
            valid_range_max=f"{memory_mib}Mi", valid_range_step="1Mi")),
        "cores": Capacity("100", CapacityRequestPolicy(
            default="1", valid_range_min="1", valid_range_max="100", valid_range_step="1")),
        "containers": Capacity(str(shares), CapacityRequestPolicy(default="1", valid_values=("1",))),
    }


class VnpuCoreProfile(AscendChipProfile):
    """HAMivNPUCore soft split; see the module docstring."""

    name = PROFILE_NAME
    cdi_class = "vnpu"
    config_types: Mapping[str, type] = {"VnpuCoreConfig": VnpuCoreConfig}
    families = frozenset(ChipFamily)
    simulated_model = MODELS["310P3"]
    profile_options = OPTIONS

    def __init__(self) -> None:
        super().__init__()
        #: Device name -> (where: ``NPU 5 chip 0``, reason) of each chip the last discovery did not offer.
        self.refused: dict[str, tuple[str, str]] = {}
        #: Node-level notes of the last discovery (the aarch64 one).
        self.node_notes: tuple[str, ...] = ()
        self.install_info_exists = False  # found at discovery; the mount is added only then
        self.max_shares = MAX_CONTAINERS  # option maxShares, read at discovery
        # Physical ID -> the device published for each chip offered at the last answer of the driver
        # (DCMI or npu-smi): what a devfs answer keeps offering while the driver does not answer.
        self._offered: dict[int, Device] = {}
        self._carried_note: str | None = None

    def default_config(self) -> VnpuCoreConfig:
        """``VnpuCoreConfig()``: no tools mounted."""
        return VnpuCoreConfig()

    def validate(self, config: object) -> None:
        """:raises ConfigError: when ``mountTools`` is not a boolean."""
        if not isinstance(config, VnpuCoreConfig):
            raise ConfigError.at("kind", f"{type(config).__name__} is not VnpuCoreConfig")
        if not isinstance(config.mount_tools, bool):
            raise ConfigError.at("mountTools", f"{config.mount_tools!r} is not true or false")

    async def discover(self, ctx: ProfileContext) -> Inventory:
        """Discover the chips (the Ascend chain), then keep those that meet the prerequisites.

        Each chip not offered is logged once per change of its reason (WARNING, fields
        ``device_name``, ``npu_id``, ``chip_id``, ``reason``) and listed by :meth:`discovery_notes`.

        :raises ValueError: for a bad profile option (naming it and the allowed values).
        """
        host = VnpuCoreHost.from_options(ctx.options, self.name)
        self.host_root = Path(host.host_root)
        self.max_shares = max_shares(ctx.options, self.name)
        found = await discover_chips(
            npu_smi=ctx.npu_smi, dev_root=ctx.dev_root, sys_root=ctx.sys_root, node_name=ctx.node_name,
            simulate=self.simulate_mode(ctx), simulated_model=self.simulated_model,
            simulated_count=ctx.fake_devices, timeout_s=self.timeout_s, profile=self.name,
            host_root=self.host_root, search_path=self.search_path, known=self._known, dcmi=self.dcmi_for(ctx),
            stable=self._stable,
        )
        if found.source in DRIVER_TIERS:
            self._known = {c.physical_id: c for c in found.chips}
        share: tuple[DeviceShare, ...] | None = None
        share_problem: str | None = None
        if found.source in DRIVER_TIERS and found.chips:
            executable = found.npu_smi.executable if found.npu_smi is not None else ctx.npu_smi
            try:
                share = await NpuSmi(executable, timeout_s=self.timeout_s).device_share()
            except NpuSmiError as exc:
                share_problem = str(exc)
        machine = platform.machine()
        facts = await anyio.to_thread.run_sync(probe_host, host, machine, abandon_on_cancel=True)
        self.layout = await anyio.to_thread.run_sync(ascend_host.probe, ctx.dev_root, self.host_root,
                                                     abandon_on_cancel=True)
        self.install_info_exists = await anyio.to_thread.run_sync(os.path.isfile, host.install_info)
        carried = self._carried(found.source, found.chips)
        judged = [c for c in found.chips if c.physical_id not in carried]
        unknown = tuple(DroppedChip.of(c, unknown_family(c)) for c in judged if c.family is None)
        self.last_discovery = found
        self._dropped = (*found.dropped, *unknown)
        verdict = judge([c for c in judged if c.family is not None], tier=found.source, device_share=share,
                        device_share_problem=share_problem, facts=facts, machine=machine)
        self._log_refusals(verdict.refused)
        for note in set(verdict.notes) - set(self.node_notes):
            logger.info("HAMivNPUCore note", extra={"profile": self.name, "note": note})
        self.node_notes = verdict.notes
        offered = {c.physical_id: self.device(c) for c in verdict.offered}
        if found.source in DRIVER_TIERS or found.source == TIER_SIMULATED:
            self._offered = offered
        devices = {**carried, **offered}
        return Inventory(devices=tuple(devices[c.physical_id] for c in found.chips if c.physical_id in devices),
                         source=found.source)

    def _carried(self, source: str, chips: Sequence[NpuChip]) -> dict[int, Device]:
        """The devices of :attr:`_offered` that a devfs answer still shows a device node for, published
        as they were: when the driver stops answering, the devfs tier cannot read the device-share
        mode (nor memory, nor on some nodes the family), and offering nothing would withdraw the
        chips from the scheduler and from the claims prepared on them (the daemon keeps a profile's
        inventory when its discovery fails, daemon.py, for the same reason). Their health is unknown
        meanwhile (:meth:`AscendChipProfile.health`), so a chip marked unhealthy stays marked."""
        carried = {c.physical_id: self._offered[c.physical_id] for c in chips
                   if source == TIER_DEVFS and c.physical_id in self._offered}
        note = None
        if carried:
            note = (f"{source} tier: {len(carried)} chip{'s' if len(carried) != 1 else ''} offered as at the last "
                    "answer of the driver (device-share mode not readable)")
            if note != self._carried_note:
                logger.warning("driver not answering; chips offered as at its last answer",
                               extra={"profile": self.name, "devices": sorted(d.name for d in carried.values())})
        self._carried_note = note
        return carried

    def discovery_notes(self) -> tuple[str, ...]:
        """The Ascend chain's notes (:meth:`AscendChipProfile.discovery_notes`), then the node's
        notes (the aarch64 one) and one line per chip not offered: ``npu-1-0 (NPU 5 chip 0) not
        offered: <reason>`` (``ascend-dra discover`` prints them)."""
        carried = (self._carried_note,) if self._carried_note else ()
        return (*super().discovery_notes(), *carried, *self.node_notes,
                *(f"{name} ({where}) not offered: {reason}" for name, (where, reason) in self.refused.items()))

    def _log_refusals(self, refused: Sequence[tuple[NpuChip, str]]) -> None:
        now = {device_name(c): (f"NPU {c.npu_id} chip {c.chip_id}", reason) for c, reason in refused}
        for chip, reason in refused:
            name = device_name(chip)
            if self.refused.get(name, ("", ""))[1] != reason:
                logger.warning("chip not offered by HAMivNPUCore", extra={
                    "profile": self.name, "device_name": name, "npu_id": chip.npu_id, "chip_id": chip.chip_id,
                    "reason": reason})
        for name in set(self.refused) - set(now):
            logger.info("chip offered by HAMivNPUCore again", extra={"profile": self.name, "device_name": name})
        self.refused = now

    def device(self, chip: NpuChip) -> Device:
        """The published device for an offered ``chip`` (its ``memory_mib`` is known)."""
        extra = {"type": PROFILE_NAME, "model": chip.chip_name}  # brand: chip_attributes
        attributes = chip_attributes(chip, {k: v for k, v in extra.items() if v is not None})
        assert chip.memory_mib is not None
        return Device(name=device_name(chip), attributes=attributes,
                      capacities=capacities(chip.memory_mib, self.max_shares), allow_multiple_allocations=True)

    # -- Prepare --------------------------------------------------------------------------------

    def apply_config(
        self, config: VnpuCoreConfig | None, devices: Sequence[AllocatedDevice], ctx: ApplyContext
    ) -> Mapping[str, ContainerEdits]:
        """``{device name: ContainerEdits}`` (see the module docstring). Pure.

        :raises ValueError: when a result lacks ``consumedCapacity`` (naming ``DRAConsumableCapacity``),
            a device is not in the inventory, or the claim UID / request name is not a path component.
        """
        config = config if config is not None else self.default_config()
        host = VnpuCoreHost.from_options(ctx.profile.options, self.name)
        claim_dir = host.claim_dir(_component(ctx.claim_uid, "claim UID"))
        by_request: dict[str, list[AllocatedDevice]] = {}
        for allocated in devices:
            by_request.setdefault(allocated.base_request, []).append(allocated)
        edits: dict[str, ContainerEdits] = {}
        for request, members in by_request.items():
            # Admin access (KEP-5018: monitoring, debugging) sees the chips but is not a share:
            # no quota, no limiter preload, no local dir (docs/durable-state.md).
            admin = [m for m in members if m.admin_access]
            shares = [m for m in members if not m.admin_access]
            if admin:
                physical = [self._physical_id(ctx, m.device) for m in admin]
                env = (f"ASCEND_VISIBLE_DEVICES={','.join(str(p) for p in physical)}",)
                mounts = tuple(self._driver_mounts(host, config))
                for allocated, number in zip(admin, physical, strict=True):
                    edits[allocated.device] = ContainerEdits(env=env, device_nodes=self._nodes(ctx, number),
                                                             mounts=mounts)
            if shares:
                physical = [self._physical_id(ctx, m.device) for m in shares]
                env = limiter_env(shares, physical)
                mounts = self._mounts(host, config, claim_dir, _component(request, "request name"))
                for allocated, number in zip(shares, physical, strict=True):
                    edits[allocated.device] = ContainerEdits(env=env, device_nodes=self._nodes(ctx, number),
                                                             mounts=mounts)
        return edits

    def device_metadata(
        self, config: VnpuCoreConfig | None, devices: Sequence[AllocatedDevice], ctx: ApplyContext
    ) -> Mapping[str, Mapping[str, int | str]]:
        """The optional hook of device metadata (KEP-5304, docs/writing-a-profile.md): each share's quota
        (:func:`.quota.metadata_attributes`) beside the chip's published attributes. An admin-access
        result has no quota and adds nothing. Pure.

        :raises ValueError: a result without ``consumedCapacity`` (as :meth:`apply_config`).
        """
        return {d.device: metadata_attributes(d) for d in devices if not d.admin_access}

    def _physical_id(self, ctx: ApplyContext, device: str) -> int:
        published = ctx.inventory.device(device)
        value = published.attributes.get("physicalID") if published is not None else None
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"device {device} is not in the {self.name} inventory or has no physicalID")
        return value

    def _nodes(self, ctx: ApplyContext, physical_id: int) -> tuple[DeviceNode, ...]:
        # As the whole-chip profiles: the mandatory shared nodes are always named, so a node that
        # lacks one fails the Prepare (the daemon checks every node) instead of a broken container.
        names = (f"/dev/davinci{physical_id}", *self.shared_node_paths(simulated=False))
        return tuple(ctx.profile.device_node(p) for p in names)

    def _driver_mounts(self, host: VnpuCoreHost, config: VnpuCoreConfig, *, tools: bool = True) -> list[Mount]:
        """The driver's files (all an admin-access container gets: no limiter)."""
        mounts = []
        if self.install_info_exists:
            mounts.append(Mount(host.install_info, "/etc/ascend_install.info", _RO))
        mounts += [
            Mount(host.driver_libs, "/usr/local/Ascend/driver/lib64/driver", _RO),
            Mount(host.version_info, "/usr/local/Ascend/driver/version.info", _RO),
        ]
        if tools and config.mount_tools:
            mounts += [Mount(host.on_host(p), p, _RO) for p in self.layout.tool_mounts]
        return mounts

    def _mounts(self, host: VnpuCoreHost, config: VnpuCoreConfig, claim_dir: str, request: str) -> tuple[Mount, ...]:
        mounts = self._driver_mounts(host, config, tools=False)
        mounts += [
            Mount(host.vnpu_core_dir, CONTAINER_VNPU_CORE_DIR, _RO),
            # The claim's own file, not the host's: what that one names may not exist in the
            # container, and the loader then skips it without a word (vnpu_core_assets).
            Mount(preload_path(claim_dir), "/etc/ld.so.preload", _RO),
            Mount(host.shared_region_dir, CONTAINER_SHARED_REGION, _RW),
            Mount(f"{claim_dir}/{request}", CONTAINER_LOCAL_DIR, _RW),
        ]
        if config.mount_tools:
            mounts += [Mount(host.on_host(p), p, _RO) for p in self.layout.tool_mounts]
        return tuple(mounts)

    async def prepare_side_effects(
        self, claim: ClaimAllocation, devices: Sequence[AllocatedDevice], ctx: ApplyContext
    ) -> dict[str, Any]:
        """Check that containers would load the interceptor library, then create the claim's dir,
        its preload file and one mode-0777 subdir per request (idempotent: what an interrupted
        attempt left is reused, its modes set and its preload written again).

        The library is checked again here, not only at discovery: it may have gone or changed since,
        and a container whose preload names nothing runs with no quota at all.

        :return: ``{"claimDir": <host path>}``, stored in the checkpoint for :meth:`unprepare_side_effects`
            (the preload file is inside that dir, so it goes with it).
        :raises ValueError: naming the library and why no container would load it.
        :raises OSError: naming the dir or file that could not be made.
        """
        host = VnpuCoreHost.from_options(ctx.profile.options, self.name)
        claim_dir = host.claim_dir(_component(claim.uid, "claim UID"))
        requests = sorted({_component(d.base_request, "request name") for d in devices})
        preload = await anyio.to_thread.run_sync(_make_claim_files, host, claim_dir, requests, platform.machine())
        logger.info("created the claim's hami-vnpu-core local dir",
                    extra={"claim_uid": claim.uid, "path": claim_dir, "requests": requests, "preload": preload})
        return {"claimDir": claim_dir}

    async def unprepare_side_effects(self, record: Mapping[str, Any] | None, ctx: ApplyContext) -> None:
        """Remove the claim's local dir (and the limiter's files in it); a missing dir is fine.

        :param record: what :meth:`prepare_side_effects` returned, or None when the daemon rolls back
            a Prepare that crashed before recording it: the dir is then found from ``ctx.claim_uid``.
        :raises ValueError: when the record names a path outside ``<vnpuCoreDir>/containers``.
        """
        host = VnpuCoreHost.from_options(ctx.profile.options, self.name)
        path = str(record.get("claimDir", "")) if record is not None else \
            host.claim_dir(_component(ctx.claim_uid, "claim UID"))
        if os.path.dirname(path) != host.containers_dir or not _COMPONENT.fullmatch(os.path.basename(path)):
            raise ValueError(f"unprepare {self.name}: {path!r} is not a claim dir under {host.containers_dir}")
        await anyio.to_thread.run_sync(_remove_dir, path)
        logger.info("removed the claim's hami-vnpu-core local dir", extra={"claim_uid": ctx.claim_uid, "path": path})

    def claim_evidence(self, ctx: ProfileContext) -> list[str]:
        """The per-claim dirs under ``<vnpuCoreDir>/containers`` whose name is a claim UID, one line
        each (blocking): made only after the claim's PrepareStarted record was durable and removed
        before its record goes, so one left says a claim was prepared. Asked when the checkpoint is
        damaged and names no claim (docs/durable-state.md). Other entries there (another installer's)
        say nothing about our claims and are left out.

        :raises OSError: when the dir exists but cannot be listed (it then cannot vouch for nothing).
        """
        host = VnpuCoreHost.from_options(ctx.options, self.name)
        try:
            names = sorted(os.listdir(host.containers_dir))
        except FileNotFoundError:
            return []
        return [f"hami-vnpu-core claim dir {host.containers_dir}/{name}" for name in names
                if _CLAIM_UID.fullmatch(name) and os.path.isdir(f"{host.containers_dir}/{name}")]


def _component(value: str, what: str) -> str:
    if not _COMPONENT.fullmatch(value):
        raise ValueError(f"{what} {value!r} cannot be a path component (lower-case letters, digits and '-')")
    return value


def _make_claim_files(host: VnpuCoreHost, claim_dir: str, requests: Sequence[str], machine: str) -> str:
    """Check the library, make the claim's dirs and write its preload file; return the file's path."""
    try:
        problem = library_problem(host, machine)
    except LibraryMissing as exc:
        problem = f"hami-vnpu-core library {exc} is missing"
    if problem is not None:
        raise ValueError(f"{problem}; no container of this claim would enforce its quota")
    _make_dirs(claim_dir, requests)
    return write_preload(claim_dir)


def _make_dirs(claim_dir: str, requests: Sequence[str]) -> None:
    # chmod after mkdir: the daemon's umask must not narrow the mode hami-vnpu-core needs (0777,
    # docs/ascend-hardware.md#vnpu-core-host-layout: containers may run as any user).
    os.makedirs(claim_dir, exist_ok=True)
    os.chmod(claim_dir, 0o755)
    for request in requests:
        path = os.path.join(claim_dir, request)
        disk_fault("vnpu-core-dir:mkdir", path)  # tests: the claim dir made, its first subdir not
        os.makedirs(path, exist_ok=True)
        os.chmod(path, 0o777)


def _remove_dir(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)


def factory() -> VnpuCoreProfile:
    """Entry point ``HAMivNPUCore`` of group ``ascend_dra.profiles``."""
    return VnpuCoreProfile()
