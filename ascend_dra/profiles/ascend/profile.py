"""What ``npu-310P`` and ``npu-910`` share: a whole-chip Ascend profile over the discovery chain.

One device per chip (a 310P Duo card and a 910C's two dies give two devices), named
``npu-<logicID>-0`` whichever tier answered (:func:`.attributes.device_name`). Each profile keeps
the chips of its families and adds its own attributes (:meth:`AscendChipProfile.extra_attributes`).
A chip whose family nobody could determine belongs to no profile: each profile logs it as not
published, with the reason, and lists it in :meth:`AscendChipProfile.discovery_notes`.

Container edits per allocated device (docs/ascend-hardware.md#the-ids, docs/ascend-hardware.md#ascend-docker-runtime):

* device nodes ``/dev/davinci<physicalID>`` and the shared nodes that exist on the node
  (:mod:`.host`), in the container at ``/dev/<name>`` and on the host at ``<--dev-root-on-host>/<name>``
  (:meth:`ProfileContext.device_node`; the daemon reads them under ``--dev-root``); on the simulated
  tier the chip's node is backed by the host's ``/dev/null``;
* read-only mounts of the driver (``lib64``, ``version.info``) and, unless ``mountTools: false``,
  ``/usr/local/dcmi`` and ``/usr/local/bin/npu-smi`` -- each only if it exists on the node;
* ``ASCEND_VISIBLE_DEVICES`` = the **physical IDs** of every device of the same request, sorted and
  comma-joined (the Ascend Docker Runtime reads physical IDs, docs/ascend-hardware.md#the-ids "Which consumer
  needs which ID" and docs/ascend-hardware.md#ascend-docker-runtime), so all devices a container receives together
  agree on it;
* CANN logging from :class:`NpuConfig`.

A chip that carries vNPUs this profile did not make (``npu-smi set -t create-vnpu`` by hand, or
Huawei's device plugin's static vNPUs) is not published: a claim would get its ``/dev/davinci<N>``
while the vNPUs' containers run on it (:meth:`AscendChipProfile.without_foreign_vnpus`).

Profile options (``ProfileContext.options``, keys ``<profile>.<key>`` or ``<key>``):
``simulate`` = ``never`` (default) | ``fallback`` | ``always`` (:class:`SimulateMode`); ``dcmi`` =
``auto`` (default) | ``never`` (:data:`.dcmi.client.DCMI_OPTION`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import anyio

from ascend_dra.model import AttributeValue, DeviceReading
from ascend_dra.profiles.ascend import host
from ascend_dra.profiles.ascend.attributes import (
    MAX_ATTRIBUTES_AND_CAPACITIES,
    chip_attributes,
    chip_capacities,
    device_name,
    pcie_root,
    standard_attributes,
)
from ascend_dra.profiles.ascend.chip import DroppedChip, NpuChip
from ascend_dra.profiles.ascend.chips import ChipFamily, ChipModel
from ascend_dra.profiles.ascend.config import (
    LOG_LEVEL_ENV,
    LOG_TO_STDOUT_ENV,
    NpuConfig,
    log_level_number,
    validate_config,
)
from ascend_dra.profiles.ascend.dcmi.client import DCMI_OPTION, DcmiError, DcmiSource
from ascend_dra.profiles.ascend.discovery.chain import (
    DRIVER_TIERS,
    TIER_DCMI,
    TIER_DEVFS,
    TIER_NPU_SMI,
    TIER_SIMULATED,
    Discovery,
    SimulateMode,
    discover_chips,
)
from ascend_dra.profiles.ascend.discovery.dcmi_health import dcmi_health
from ascend_dra.profiles.ascend.discovery.stable import StableAnswers
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiError
from ascend_dra.profiles.ascend.npusmi.locate import locate_npu_smi
from ascend_dra.profiles.ascend.npusmi.runner import DEFAULT_TIMEOUT_S, NpuSmi
from ascend_dra.profiles.ascend.npusmi.tables import parse_info
from ascend_dra.profiles.ascend.npusmi.vnpu_tables import Vnpu, VnpuInfo
from ascend_dra.profiles.ascend.usage import chip_readings
from ascend_dra.profiles.base import (
    AllocatedDevice,
    ApplyContext,
    ContainerEdits,
    Device,
    DeviceNode,
    Inventory,
    Mount,
    ProfileContext,
    ProfileOption,
    simulate_option,
    visible_per_request,
)

__all__ = ("VISIBLE_DEVICES_ENV", "AscendChipProfile")

logger = logging.getLogger(__name__)

#: Read by the Ascend Docker Runtime: physical IDs, comma-separated (docs/ascend-hardware.md#ascend-docker-runtime).
VISIBLE_DEVICES_ENV = "ASCEND_VISIBLE_DEVICES"
#: What a whole-chip profile says of a chip that carries vNPUs it did not make.
FOREIGN_VNPU_ADVICE = ("a whole-chip claim would share the chip with their containers; destroy them "
                       "(npu-smi set -t destroy-vnpu) or run the hard-vNPU profile on this node")


#: ``npu-smi info`` chip ``Health`` values (npu_chip_info.c, docs/ascend-hardware.md#npu-smi) -> healthy?
CHIP_HEALTH: Mapping[str, bool] = {"OK": True, "Warning": True, "Alarm": False, "Critical": False}


class AscendChipProfile:
    """Base of the whole-chip Ascend profiles; subclasses set ``name``, ``families``, ``simulated_model``.

    :param host_root: where the host's ``/`` is seen when probing driver paths and searching the
        driver's npu-smi install locations (tests use a tree).
    :param timeout_s: deadline of each npu-smi call, in seconds.
    :param search_path: the ``$PATH`` searched for a bare ``--npu-smi`` name; None = the process's.
    """

    name: str
    cdi_class = "npu"
    config_types: Mapping[str, type] = {"NpuConfig": NpuConfig}
    #: ``--profile-option <name>.simulate=never|fallback|always`` (checked before start-up).
    profile_options: Mapping[str, ProfileOption] = {"simulate": simulate_option(), "dcmi": DCMI_OPTION}
    families: frozenset[ChipFamily]
    simulated_model: ChipModel
    #: Whole-chip profiles leave out chips that carry vNPUs (:meth:`without_foreign_vnpus`); the
    #: profiles that make vNPUs or share chips know their own.
    whole_chips = False

    def __init__(self, *, host_root: Path = Path("/"), timeout_s: float = DEFAULT_TIMEOUT_S,
                 search_path: str | None = None) -> None:
        self.host_root = host_root
        self.timeout_s = timeout_s
        self.search_path = search_path
        self.layout = host.HostLayout()
        #: The last discovery's answer (tier, npu-smi used, dropped chips, notes); None before the first.
        self.last_discovery: Discovery | None = None
        self._dropped: tuple[DroppedChip, ...] = ()
        # Chips of the last answer from the driver (DCMI or npu-smi) by physical ID: the devfs tier
        # reuses their IDs (names).
        self._known: dict[int, NpuChip] = {}
        # npu-smi's answers about the hardware in its slot, asked again only when `info` shows a
        # change or after ten minutes (discovery/stable.py).
        self._stable = StableAnswers()
        #: libdcmi.so under host_root and its worker (docs/ascend-discovery.md#dcmi).
        self.dcmi = DcmiSource(timeout_s=timeout_s)
        #: Device name -> what it reported at the last health check (:meth:`readings`).
        self.last_readings: Mapping[str, DeviceReading] = {}

    def default_config(self) -> NpuConfig:
        """``NpuConfig()``: image's own log settings, tools mounted."""
        return NpuConfig()

    def simulate_mode(self, ctx: ProfileContext) -> SimulateMode:
        """The ``simulate`` option for this profile.

        :raises ValueError: naming the option and the allowed values.
        """
        key = f"{self.name}.simulate"
        raw = ctx.options.get(key, ctx.options.get("simulate", SimulateMode.NEVER.value))
        try:
            return SimulateMode(raw)
        except ValueError:
            allowed = ", ".join(m.value for m in SimulateMode)
            raise ValueError(f"profile option {key}: {raw!r} is not one of {allowed}") from None

    def dcmi_for(self, ctx: ProfileContext) -> DcmiSource | None:
        """:attr:`dcmi`, or None when the ``dcmi`` option says ``never`` (checked before start-up)."""
        mode = ctx.options.get(f"{self.name}.dcmi", ctx.options.get("dcmi", "auto"))
        if mode == "never":
            self.dcmi.close()
            return None
        return self.dcmi

    async def discover(self, ctx: ProfileContext) -> Inventory:
        """Run the discovery chain and publish this profile's chips.

        :return: ``Inventory(devices, source=<tier>)``; devices sorted by logic ID.
        :raises ValueError: if the ``simulate`` option is not an allowed value.
        """
        found = await discover_chips(
            npu_smi=ctx.npu_smi, dev_root=ctx.dev_root, sys_root=ctx.sys_root, node_name=ctx.node_name,
            simulate=self.simulate_mode(ctx), simulated_model=self.simulated_model,
            simulated_count=ctx.fake_devices, timeout_s=self.timeout_s, profile=self.name,
            host_root=self.host_root, search_path=self.search_path, known=self._known, dcmi=self.dcmi_for(ctx),
            stable=self._stable,
        )
        self.layout = await anyio.to_thread.run_sync(host.probe, ctx.dev_root, self.host_root)
        if found.source in DRIVER_TIERS:
            self._known = {c.physical_id: c for c in found.chips}
        unknown = tuple(DroppedChip.of(c, unknown_family(c)) for c in found.chips if c.family is None)
        for chip in unknown:
            logger.warning("chip not published", extra={**chip.log_fields(), "tier": found.source,
                                                         "profile": self.name})
        self.last_discovery = found
        self._dropped = (*found.dropped, *unknown)
        chips = [c for c in found.chips if c.family in self.families]
        if self.whole_chips and found.source in DRIVER_TIERS and found.npu_smi is not None and found.npu_smi.found:
            chips = await self.without_foreign_vnpus(ctx, chips, found.npu_smi.executable)
        roots = await anyio.to_thread.run_sync(lambda: [pcie_root(ctx.sys_root, c.pci_address) for c in chips])
        return Inventory(devices=tuple(self.device(c, r) for c, r in zip(chips, roots, strict=True)),
                         source=found.source)

    async def without_foreign_vnpus(self, ctx: ProfileContext, chips: list[NpuChip], npu_smi: str, *,
                                    dev_dir: Path | None = None, ours: Callable[[NpuChip, Vnpu], bool] | None = None,
                                    advice: str = FOREIGN_VNPU_ADVICE,
                                    lister: Callable[[int, int], Awaitable[VnpuInfo]] | None = None) -> list[NpuChip]:
        """``chips`` without those that carry vNPUs (``npu-smi info -t info-vnpu -i N -c C``) other than
        ``ours``, each left out logged and listed in :meth:`discovery_notes` with ``advice``. Nothing
        is destroyed.

        Asked only when a ``vdavinci*`` node exists under ``dev_dir`` (default ``ctx.dev_root``; the driver makes
        one per vNPU, docs/ascend-hardware.md#device-nodes): nodes without vNPUs pay one directory scan. A
        chip without NPU and chip IDs cannot be asked and is kept. The first call that fails (npu-smi
        refused or hung) keeps that chip and every one not yet asked, with one warning: one hung call
        per discovery at most, so a discovery never runs past ``--discovery-timeout`` for this.

        :param lister: ``(NPU ID, chip ID) -> VnpuInfo`` (the hard-vNPU profile's DCMI-first calls);
            default ``npu-smi info -t info-vnpu``.
        """
        where = ctx.dev_root if dev_dir is None else dev_dir
        if not await anyio.to_thread.run_sync(lambda: any(where.glob("vdavinci*"))):
            return chips
        tool = lister if lister is not None else NpuSmi(npu_smi, timeout_s=self.timeout_s).vnpu_info
        kept: list[NpuChip] = []
        dropped: list[DroppedChip] = []
        for i, chip in enumerate(chips):
            if chip.npu_id is None or chip.chip_id is None:
                kept.append(chip)
                continue
            try:
                vnpus = await self._foreign_vnpus(tool, chip, ours)
                if vnpus and ours is not None:
                    # Ours are named before they are made and until they are gone: one destroyed and
                    # its entry dropped between the list and the ledger read is gone on a second list.
                    again = {v.vnpu_id for v in await self._foreign_vnpus(tool, chip, ours)}
                    vnpus = [v for v in vnpus if v.vnpu_id in again]
            except NpuSmiError as exc:
                logger.warning("cannot tell whether the chips carry vNPUs; they are published",
                               extra={"profile": self.name, "chips": len(chips) - i, "error": str(exc)})
                kept += chips[i:]
                break
            if not vnpus:
                kept.append(chip)
                continue
            ids = ", ".join(str(v.vnpu_id) for v in vnpus)
            dropped.append(DroppedChip.of(chip, (
                f"carries {len(vnpus)} vNPU{'s' if len(vnpus) != 1 else ''} ({ids}) made outside this profile: "
                + advice)))
        for dropped_chip in dropped:
            logger.warning("chip not published", extra={**dropped_chip.log_fields(), "profile": self.name})
        self._dropped = (*self._dropped, *dropped)
        return kept

    @staticmethod
    async def _foreign_vnpus(tool: Callable[[int, int], Awaitable[VnpuInfo]], chip: NpuChip,
                             ours: Callable[[NpuChip, Vnpu], bool] | None) -> list[Vnpu]:
        """The chip's vNPUs (``tool``: ``info -t info-vnpu`` or DCMI) that ``ours`` does not claim (all without it).

        :raises NpuSmiError: npu-smi failed or its answer did not parse.
        """
        assert chip.npu_id is not None and chip.chip_id is not None
        vnpus = list((await tool(chip.npu_id, chip.chip_id)).vnpus)
        if ours is None:
            return vnpus
        return await anyio.to_thread.run_sync(lambda: [v for v in vnpus if not ours(chip, v)])

    def discovery_notes(self) -> tuple[str, ...]:
        """What the last discovery wants an operator to know, one line each (``ascend-dra discover``
        shows them): the npu-smi binary used and how it was found, tier notes (unknown chip IDs),
        each tier that failed before the one that answered and why (``tier npu-smi failed, devfs
        answered: run 'npu-smi info': exit status 1: ...``), and ``N chips not published`` followed
        by one line per dropped chip with its reason."""
        found = self.last_discovery
        if found is None:
            return ()
        lines = list(found.notes)
        if found.dcmi_failure is not None:
            lines.append(f"tier {TIER_DCMI} failed, {found.source} answered: {found.dcmi_failure}")
        # Discovery.failures holds one reason per tier tried before the answering one, in chain order;
        # an npu-smi that was not found is said by the first note already.
        missing = found.npu_smi is not None and not found.npu_smi.found
        lines.extend(f"tier {tier} failed, {found.source} answered: {why}"
                     for tier, why in zip((TIER_NPU_SMI, TIER_DEVFS), found.failures, strict=False)
                     if not (tier == TIER_NPU_SMI and missing))
        if self._dropped:
            lines.append(f"{len(self._dropped)} chip{'s' if len(self._dropped) != 1 else ''} not published")
            lines.extend(f"  not published: {d.describe()}" for d in self._dropped)
        return tuple(lines)

    async def health(self, ctx: ProfileContext, inventory: Inventory) -> Mapping[str, bool | None]:
        """Chip health from DCMI (``dcmi_get_device_health``, one round trip to the DCMI worker, no
        process) when the library is there, else, and for the chips DCMI gave no answer for, from the
        ``Health`` column of one ``npu-smi info`` (docs/ascend-hardware.md#npu-smi). The readings of
        :meth:`readings` come from the same source, chip by chip (:mod:`.discovery.dcmi_health`).

        ``OK`` and ``Warning`` (DCMI 0, 1) are healthy (the chip works; a warning is e.g. a
        temperature threshold), ``Alarm`` and ``Critical`` (2, 3) unhealthy, anything else unknown; a
        published chip that the table no longer lists is unknown. Chips found by the devfs tier because
        DCMI or npu-smi failed are unknown too: a chip that was unhealthy keeps its mark (poolview.py)
        instead of counting as healthy the moment the driver stops answering. Chips of a node without
        either (the devfs tier with no library and npu-smi not found) or of the simulated tier have no
        health source and count as healthy.

        :raises NpuSmiError: npu-smi failed, hung or printed an unknown layout while DCMI answered
            for no chip (the daemon then reports this profile's devices as unknown).
        """
        if inventory.source not in DRIVER_TIERS or not inventory.devices:
            self.last_readings = {}
            found = self.last_discovery
            if inventory.source == TIER_DEVFS and found is not None and (
                    found.dcmi_failure is not None or (found.npu_smi is not None and found.npu_smi.found)):
                # DCMI or npu-smi is there and failed: health not known
                return dict.fromkeys((d.name for d in inventory.devices), None)
            return {}
        result: dict[str, bool | None] = {}
        readings: dict[str, DeviceReading] = {}
        rest = list(inventory.devices)
        if self.dcmi.client is not None:
            try:
                answered = await dcmi_health(self.dcmi.client, inventory.devices)
                result, readings, rest = answered.health, answered.readings, answered.rest
            except DcmiError as exc:
                logger.debug("no health from DCMI; npu-smi is asked", extra={"error": str(exc), "profile": self.name})
        if not rest:
            self.last_readings = readings
            return result
        try:
            located = await anyio.to_thread.run_sync(
                lambda: locate_npu_smi(ctx.npu_smi, host_root=self.host_root, search_path=self.search_path))
            table = parse_info(await NpuSmi(located.executable, timeout_s=self.timeout_s).run("info"))
        except NpuSmiError as exc:
            self.last_readings = readings  # DCMI's, current; none of the chips left to npu-smi
            if not result:
                raise
            logger.warning("npu-smi gave no health for the chips DCMI did not answer for; they are unknown",
                           extra={"devices": [d.name for d in rest], "error": str(exc), "profile": self.name})
            return {**result, **dict.fromkeys((d.name for d in rest), None)}
        except BaseException:
            # None rather than the last ones, which would read as current; kept while the call runs,
            # so a scrape meanwhile does not lose every series.
            self.last_readings = {}
            raise
        self.last_readings = {**readings, **chip_readings(table, rest)}
        status = {(c.npu_id, c.chip_id): c.health for c in table.chips}
        return {**result, **{
            d.name: CHIP_HEALTH.get(status.get((d.attributes.get("npuID"), d.attributes.get("chipID")), ""))
            for d in rest
        }}

    def close(self) -> None:
        """Stop the DCMI worker (it is also stopped when the profile is garbage-collected, or the daemon exits)."""
        self.dcmi.close()

    def readings(self) -> Mapping[str, DeviceReading]:
        """What the chips reported at the last :meth:`health` (usage.py): from DCMI for the chips it
        answered (:mod:`.discovery.dcmi_health`), else from that pass's ``npu-smi info``; none for a chip
        whose call failed, nor on the devfs and simulated tiers. Holds no I/O (profiles/base.py)."""
        return self.last_readings

    def extra_attributes(self, chip: NpuChip) -> Mapping[str, AttributeValue | None]:
        """Family-specific attributes (None values are omitted). Overridden by each profile."""
        return {}

    def device(self, chip: NpuChip, pcie_root: str | None = None) -> Device:
        """The published device for ``chip`` (see :mod:`.attributes`): ours, then the standard ones that fit."""
        extra = {k: v for k, v in self.extra_attributes(chip).items() if v is not None}
        attributes = chip_attributes(chip, extra)
        capacities = chip_capacities(chip)
        room = MAX_ATTRIBUTES_AND_CAPACITIES - len(attributes) - len(capacities)
        attributes.update(standard_attributes(chip, pcie_root, room))
        return Device(name=device_name(chip), attributes=attributes, capacities=capacities)

    def shared_node_paths(self, simulated: bool) -> tuple[str, ...]:
        """Host paths of the shared device nodes every container of a chip gets (host.py).

        Real chips always name the mandatory ones: the daemon refuses the Prepare when one is
        missing, rather than hand out a spec without it; optional ones only where they exist.
        """
        present = self.layout.device_nodes
        if simulated:
            return present
        return (*host.MANDATORY_DEVICE_NODES, *(p for p in present if p not in host.MANDATORY_DEVICE_NODES))

    def shared_edits(self, config: NpuConfig, simulated: bool,
                     ctx: ProfileContext) -> tuple[tuple[DeviceNode, ...], tuple[Mount, ...], list[str]]:
        """What every device of this profile gets whatever the chip: the shared device nodes (host
        paths under ``ctx``'s host device directory, :meth:`ProfileContext.device_node`), the driver
        mounts (and the tools with ``mountTools``), and the log env of ``config``."""
        shared = tuple(ctx.device_node(p) for p in self.shared_node_paths(simulated))
        mounts = tuple(Mount(host_path=p, container_path=p) for p in self.layout.driver_mounts)
        if config.mount_tools:
            mounts += tuple(Mount(host_path=p, container_path=p) for p in self.layout.tool_mounts)
        common_env: list[str] = []
        level = log_level_number(config.log_level)
        if level is not None:
            common_env.append(f"{LOG_LEVEL_ENV}={level}")
        if config.log_to_stdout:
            common_env.append(f"{LOG_TO_STDOUT_ENV}=1")
        return shared, mounts, common_env

    def validate(self, config: object) -> None:
        """:raises ConfigError: see :func:`.config.validate_config`."""
        validate_config(config)

    def apply_config(
        self, config: NpuConfig | None, devices: Sequence[AllocatedDevice], ctx: ApplyContext
    ) -> Mapping[str, ContainerEdits]:
        """``{device name: ContainerEdits}`` for ``devices`` (see the module docstring). Pure.

        :param config: the decoded config, or None for :meth:`default_config`.
        :raises ValueError: if a device is not in ``ctx.inventory`` or has no ``physicalID``.
        """
        config = config if config is not None else self.default_config()
        physical: dict[str, int] = {}
        for allocated in devices:
            published = ctx.inventory.device(allocated.device)
            value = published.attributes.get("physicalID") if published is not None else None
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"apply {self.name} config: device {allocated.device} is not in the "
                                 "inventory or has no physicalID attribute")
            physical[allocated.device] = value
        visible = visible_per_request(devices, lambda a: physical[a.device])
        simulated = ctx.inventory.source == TIER_SIMULATED
        shared, mounts, common_env = self.shared_edits(config, simulated, ctx.profile)
        edits: dict[str, ContainerEdits] = {}
        for allocated in devices:
            number = physical[allocated.device]
            node = simulated_node(number) if simulated else ctx.profile.device_node(f"davinci{number}")
            edits[allocated.device] = ContainerEdits(
                env=(f"{VISIBLE_DEVICES_ENV}={visible[allocated.base_request]}", *common_env),
                device_nodes=(node, *shared),
                mounts=mounts,
            )
        return edits


def simulated_node(number: int) -> DeviceNode:
    """A simulated chip's ``/dev/davinci<number>``: the host's ``/dev/null`` (always there, whatever
    ``--dev-root``), so a container can open it."""
    return DeviceNode(path=f"/dev/davinci{number}", host_path="/dev/null")


def unknown_family(chip: NpuChip) -> str:
    """Why a chip has no family: what each source its tier read said (``NpuChip.family_said``), so
    the reason names only what was read."""
    if chip.family_said:
        return f"chip family unknown: {'; '.join(chip.family_said)}"
    name = f"chip name {chip.chip_name!r} matches no family" if chip.chip_name else "no chip name"
    return f"chip family unknown: {name}"
