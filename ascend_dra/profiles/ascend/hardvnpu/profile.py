"""The ``hard-vNPU`` profile: template vNPUs as partitionable devices, made at Prepare, gone at Unprepare.

Per chip that has hard-vNPU templates (:mod:`.templates`) it publishes, in the chip's pool:

* the whole chip, ``npu-<logicID>-0`` (type ``npu``, :func:`.attributes.device_name`), consuming **all** of
  the chip's counters;
* one device per template instance that could exist on the empty chip,
  ``vnpu-<logicID>-<chipID>-<template with _ as ->-<k>`` (type ``vnpu``), consuming what the template
  costs; attributes ``vnpuTemplate``, ``vnpuID``, ``aicoreCount``, ``memoryMiB`` (and ``aicpuCount``
  when known) beside the chip's own, capacities ``aicore``, ``memory`` and ``cores`` (the template's
  share of the chip's AI cores in whole percent, rounded down: HAMi's unit, attributes.py);
* one counter set per chip, ``npu-<logicID>-0-counters``: ``aicore``, ``memory`` (MiB as a
  Quantity), ``aicpu`` and DVPP engines where every template states them (:func:`.templates.chip_counters`),
  of which only those the published vNPUs together could exceed and ``aicore``
  (:func:`.templates.binding_counters`).

So the scheduler (gate DRAPartitionableDevices) never over-commits a chip and never hands out the
whole chip together with a vNPU of it. This profile replaces ``npu-310P``/``npu-910`` on a node:
load one or the other (both name whole chips ``npu-<logicID>-0``; the daemon drops the
second profile's duplicates).

**vNPU IDs are chosen at publish time.** The daemon computes a claim's CDI spec before its side
effects run, so the ID the container gets must be known then: each instance device has a fixed vNPU
ID ``physicalID x 16 + 100 + k`` (docs/ascend-hardware.md#hard-vnpu-templates), passed to
``npu-smi set -t create-vnpu -v``
and read back with ``info -t info-vnpu``. When a chip's templates need more instances than it has
vNPU IDs (a 310P3: 19 instances, 8 IDs), instance ``k`` of every template takes ID ``k`` and consumes
a ``vnpu-id-<k>`` counter of 1, so the scheduler never allocates two devices of one ID at once; each
template gets as many instances as IDs it may need (:func:`.templates.id_choices`), so a free one is
always left for any combination the other counters allow.

Container edits of a vNPU (docs/ascend-hardware.md#device-nodes, docs/ascend-hardware.md#ascend-docker-runtime):
``/dev/davinci<vnpuID>`` in the container from the host's ``vdavinci<vnpuID>`` (under
the ``vnpu-dev-dir`` option, default the host's device directory: ``--dev-root-on-host``, else
``--dev-root``), the shared nodes and driver mounts of the whole-chip
profiles, ``ASCEND_VISIBLE_DEVICES=<vnpuIDs of the request>`` and ``ASCEND_RUNTIME_OPTIONS=VIRTUAL``.
``ASCEND_VNPU_SPECS`` is **not** set: with it the Ascend Docker Runtime creates a vNPU of its own
(docs/ascend-hardware.md#ascend-docker-runtime), and ours exists already. An admin-access claim on a vNPU device creates
nothing and gets the chip's ``/dev/davinci<physicalID>`` (to watch the chip).

vNPUs are made, destroyed and listed through DCMI when the DCMI tier is loaded, through npu-smi
for any answer DCMI does not give (:mod:`.calls`, docs/hard-vnpu.md#through-dcmi); ``ascend-dra
discover`` says which tier answered each kind of call.

Profile options: ``hard-vNPU.simulate`` and ``hard-vNPU.dcmi`` (as the whole-chip profiles),
``hard-vNPU.vnpu-dev-dir``, ``hard-vNPU.boot-id-file`` (default: the daemon's ``--boot-id-file``),
``hard-vNPU.host-root`` (where the host's ``/`` is seen: npu-smi's install locations and
``libdcmi.so`` are looked for under it; default ``/``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs

from ascend_dra.model import AttributeValue, Capacity
from ascend_dra.profiles.ascend import host
from ascend_dra.profiles.ascend.attributes import WHOLE_CHIP_CORES, chip_attributes, chip_capacities, device_name
from ascend_dra.profiles.ascend.chip import DroppedChip, NpuChip
from ascend_dra.profiles.ascend.chips import MODELS, ChipFamily
from ascend_dra.profiles.ascend.config import NpuConfig
from ascend_dra.profiles.ascend.dcmi.client import DCMI_OPTION
from ascend_dra.profiles.ascend.discovery.chain import DRIVER_TIERS, TIER_SIMULATED, discover_chips
from ascend_dra.profiles.ascend.hardvnpu import templates
from ascend_dra.profiles.ascend.hardvnpu.calls import TierRecord, VnpuCalls
from ascend_dra.profiles.ascend.hardvnpu.ops import VnpuOps
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiError
from ascend_dra.profiles.ascend.npusmi.runner import NpuSmi
from ascend_dra.profiles.ascend.npusmi.vnpu_tables import Vnpu
from ascend_dra.profiles.ascend.profile import VISIBLE_DEVICES_ENV, AscendChipProfile, simulated_node, unknown_family
from ascend_dra.profiles.base import (
    AllocatedDevice,
    ApplyContext,
    ContainerEdits,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceNode,
    Inventory,
    ProfileContext,
    ProfileOption,
    path_option,
    simulate_option,
    visible_per_request,
)

__all__ = ("RUNTIME_OPTIONS_ENV", "HardVnpuProfile", "factory", "vnpu_device_name")

logger = logging.getLogger(__name__)

#: ``VIRTUAL``: the Ascend Docker Runtime option for virtual devices (docs/ascend-hardware.md#ascend-docker-runtime).
RUNTIME_OPTIONS_ENV = "ASCEND_RUNTIME_OPTIONS"
TYPE_VNPU = "vnpu"
#: What ``discover`` says of a chip that carries vNPUs our ledger does not name (docs/hard-vnpu.md).
FOREIGN_VNPU_ADVICE = ("npu-smi would refuse the templates the scheduler sees free on it; ascend-dra never "
                       "destroys them: destroy them (npu-smi set -t destroy-vnpu) to offer the chip again")


def vnpu_device_name(chip: NpuChip, template: str, k: int) -> str:
    """``vnpu-<logicID>-<chipID>-<template, '_' -> '-', lower case>-<k>`` (a DNS label)."""
    return f"vnpu-{chip.logic_id}-{chip.chip_id}-{template.replace('_', '-').lower()}-{k}"


def _counter_set_name(chip: NpuChip) -> str:
    return f"{device_name(chip)}-counters"


def _quantity(name: str, value: int) -> str:
    return f"{value}Mi" if name == "memory" else str(value)


class HardVnpuProfile(AscendChipProfile):
    """Whole chips and template vNPUs of every family with templates; see the module docstring."""

    name = "hard-vNPU"
    cdi_class = "vnpu"
    config_types: Mapping[str, type] = {"NpuConfig": NpuConfig}
    families = frozenset({ChipFamily.ASCEND310P, ChipFamily.ASCEND910, ChipFamily.ASCEND910B,
                          ChipFamily.ASCEND910C})
    simulated_model = MODELS["910B4"]
    profile_options: Mapping[str, ProfileOption] = {
        "simulate": simulate_option(),
        "dcmi": DCMI_OPTION,
        "vnpu-dev-dir": path_option("where the driver creates vdavinci<id> nodes on the host (default the host's "
                                    "device directory: --dev-root-on-host, else --dev-root)", "directory"),
        "boot-id-file": path_option("the boot id the vNPU ledger compares (default --boot-id-file)", "file"),
        "host-root": path_option("where the host's / is seen: npu-smi's install locations and libdcmi.so are looked "
                                 "for under it (default /)", "directory"),
        "templates": ProfileOption(help="the templates whose vNPUs are published, separated by commas or spaces "
                                        "(default: every template of the chip's model)",
                                   check=templates.check_template_names),
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: Which tier answered each kind of vNPU call (``ascend-dra discover`` shows it).
        self.vnpu_tiers = TierRecord()

    def option(self, ctx: ProfileContext, key: str, default: str) -> str:
        """Profile option ``hard-vNPU.<key>`` (or ``<key>``)."""
        return ctx.options.get(f"{self.name}.{key}", ctx.options.get(key, default))

    def _use_host_root(self, ctx: ProfileContext) -> None:
        """The option ``host-root``, when given, replaces the constructor's ``host_root``."""
        if (given := self.option(ctx, "host-root", "")) != "":
            self.host_root = Path(given)

    def ops(self, ctx: ProfileContext) -> VnpuOps:
        """The vNPU operations and the ledger, for ``ctx``: DCMI first when its client runs
        (:meth:`vnpu_ops` starts it), npu-smi for the rest."""
        npu_smi = NpuSmi(ctx.npu_smi, timeout_s=self.timeout_s)
        source = self.dcmi_for(ctx)
        calls = VnpuCalls(npu_smi, source.client if source is not None else None, self.vnpu_tiers)
        return VnpuOps(npu_smi, ctx.state_dir, Path(self.option(ctx, "boot-id-file", str(ctx.boot_id_file))), calls)

    async def vnpu_ops(self, ctx: ProfileContext) -> VnpuOps:
        """:meth:`ops`, with the DCMI library looked for first when no discovery has yet (a start-up
        repair runs before the first discovery)."""
        self._use_host_root(ctx)
        source = self.dcmi_for(ctx)
        if source is not None and source.client is None:
            await source.refresh(self.host_root)
        return self.ops(ctx)

    def discovery_notes(self) -> tuple[str, ...]:
        """The chain's notes (:meth:`.AscendChipProfile.discovery_notes`), then which tier answered
        each kind of vNPU call and the last time npu-smi answered for DCMI (:meth:`.TierRecord.notes`)."""
        return (*super().discovery_notes(), *self.vnpu_tiers.notes())

    # -- discovery --------------------------------------------------------------------------------

    async def discover(self, ctx: ProfileContext) -> Inventory:
        """Run the discovery chain; publish each chip, its template instances and its counter set.

        Templates come from ``npu-smi info -t template-info -i <NPU ID>`` (once per chip model)
        when it answers, else from :data:`.templates.MODELS`. Chips of models without templates
        are left out (logged once per discovery).
        """
        self._use_host_root(ctx)
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
        # What `ascend-dra discover` says under the table (AscendChipProfile.discovery_notes).
        self.last_discovery = found
        self._dropped = tuple(found.dropped)
        chips = list(found.chips)
        if found.source in DRIVER_TIERS and found.npu_smi is not None and (
                found.npu_smi.found or self.dcmi.client is not None):
            chips = await self.without_foreign_vnpus(
                ctx, chips, found.npu_smi.executable, dev_dir=self.vnpu_dev_dir(ctx), ours=self._ledger_names(ctx),
                advice=FOREIGN_VNPU_ADVICE, lister=self.ops(ctx).calls.info)
        dropped = list(self._dropped)
        npu_smi = NpuSmi(ctx.npu_smi, timeout_s=self.timeout_s)
        by_model: dict[str, templates.ChipResources | None] = {}
        devices: list[Device] = []
        counter_sets: list[CounterSet] = []
        for chip in chips:
            if chip.family is None:
                dropped.append(DroppedChip.of(chip, unknown_family(chip)))
            if chip.family not in self.families:
                continue
            key = f"{chip.chip_name}/{chip.aicore_count}"
            if key not in by_model:
                # Simulated chips are invented: the node's npu-smi knows other chips, or none.
                by_model[key] = await self._resources(None if found.source == TIER_SIMULATED else npu_smi, chip)
            resources = by_model[key]
            if resources is not None:
                resources = self.configured(ctx, resources, chip)
            if resources is None or not resources.templates:
                logger.info("chip model has no hard-vNPU templates; not published",
                            extra={"profile": self.name, "chip": chip.chip_name, "device_name": device_name(chip)})
                reason = f"chip model {chip.chip_name} has no hard-vNPU templates"
                if resources is not None and self.option(ctx, "templates", ""):
                    reason = (f"none of the configured templates ({self.option(ctx, 'templates', '')}) is one of chip "
                              f"model {chip.chip_name}'s")
                dropped.append(DroppedChip.of(chip, reason))
                continue
            chip_devices, counter_set = self.chip_devices(chip, resources)
            devices.extend(chip_devices)
            counter_sets.append(counter_set)
        self._dropped = tuple(dropped)
        return Inventory(devices=tuple(devices), counter_sets=tuple(counter_sets), source=found.source)

    def configured(self, ctx: ProfileContext, resources: templates.ChipResources,
                   chip: NpuChip) -> templates.ChipResources:
        """``resources`` with only the templates of the option ``templates``, when it is set. A
        configured name the chip's model does not accept is logged (a WARNING naming the model's
        templates) and skipped; with none left the chip is not published (the caller says why)."""
        wanted = templates.parse_template_names(self.option(ctx, "templates", ""))
        if not wanted:
            return resources
        accepted = [t for t in resources.templates if t.name in wanted]
        unknown = sorted(set(wanted) - {t.name for t in resources.templates})
        if unknown:
            logger.warning("configured hard-vNPU templates the chip model does not accept are skipped", extra={
                "profile": self.name, "chip": chip.chip_name, "device_name": device_name(chip),
                "skipped": ",".join(unknown), "templates_of_model": ",".join(t.name for t in resources.templates)})
        return attrs.evolve(resources, templates=tuple(accepted))

    def vnpu_dev_dir(self, ctx: ProfileContext) -> Path:
        """Where the daemon sees the ``vdavinci<ID>`` nodes: the ``vnpu-dev-dir`` option, else ``--dev-root``."""
        return Path(self.option(ctx, "vnpu-dev-dir", str(ctx.dev_root)))

    def _ledger_names(self, ctx: ProfileContext) -> Callable[[NpuChip, Vnpu], bool]:
        """Whether our ledger names a vNPU, with its template (blocking: a file read): one we made, or
        are about to make (its entry is written before the create, docs/hard-vnpu.md)."""
        ledger = self.ops(ctx).ledger

        def ours(chip: NpuChip, vnpu: Vnpu) -> bool:
            if chip.npu_id is None or chip.chip_id is None:
                return False
            entry = ledger.read(chip.npu_id, chip.chip_id, vnpu.vnpu_id)
            return entry is not None and entry.template == vnpu.template_name
        return ours

    async def _resources(self, npu_smi: NpuSmi | None, chip: NpuChip) -> templates.ChipResources | None:
        """The chip model's resources and templates: the catalogue's, replaced by what
        ``template-info`` prints when ``npu_smi`` is given and answers."""
        base = templates.resources_of(chip.chip_name, chip.aicore_count)
        if base is None or chip.npu_id is None or npu_smi is None:
            return base
        try:
            parsed = await npu_smi.template_info(chip.npu_id)
        except NpuSmiError as exc:
            logger.info("npu-smi template-info did not answer; using the reference's templates",
                        extra={"profile": self.name, "chip": chip.chip_name, "error": str(exc)})
            return base
        return templates.from_template_info(base, parsed)

    def chip_devices(self, chip: NpuChip, resources: templates.ChipResources) -> tuple[list[Device], CounterSet]:
        """The whole chip, its template instances and its counter set (see the module docstring)."""
        instances = [(t, k) for t in resources.templates for k in range(templates.max_instances(resources, t))]
        shared_ids = len(instances) > resources.id_slots
        if shared_ids:  # instance k of every template takes ID k (templates.id_choices)
            instances = [(t, k) for t in resources.templates for k in range(templates.id_choices(resources, t))]
        totals = templates.chip_counters(resources)
        if shared_ids:
            totals.update({f"vnpu-id-{k}": 1 for k in range(resources.id_slots)})
        needs_of: list[dict[str, int]] = []
        for template, k in instances:
            needs = templates.template_counters(resources, template)
            if shared_ids:
                needs[f"vnpu-id-{k}"] = 1
            needs_of.append(needs)
        kept = templates.binding_counters(totals, needs_of)
        published = {name: _quantity(name, totals[name]) for name in kept}
        set_name = _counter_set_name(chip)
        whole = self.device(chip)
        devices = [Device(name=whole.name, attributes=whole.attributes, capacities=whole.capacities,
                          consumes_counters=(CounterConsumption(set_name, dict(published)),))]
        for index, ((template, k), needs) in enumerate(zip(instances, needs_of, strict=True)):
            slot = k if shared_ids else index
            extra: dict[str, AttributeValue] = {
                "type": TYPE_VNPU, "vnpuTemplate": template.name, "vnpuID": templates.vnpu_id(chip.physical_id, slot),
                "aicoreCount": template.aicore, "memoryMiB": template.memory_mib,
            }
            if template.aicpu is not None:
                extra["aicpuCount"] = template.aicpu
            devices.append(Device(
                name=vnpu_device_name(chip, template.name, k), attributes=chip_attributes(chip, extra),
                capacities={"aicore": Capacity(str(template.aicore)), "memory": Capacity(f"{template.memory_mib}Mi"),
                            "cores": Capacity(str(template.aicore * WHOLE_CHIP_CORES // resources.aicore))},
                consumes_counters=(CounterConsumption(
                    set_name, {name: _quantity(name, v) for name, v in needs.items() if name in published}),),
            ))
        return devices, CounterSet(set_name, published)

    def device(self, chip: NpuChip) -> Device:
        """The whole chip (without its counter consumption)."""
        return Device(name=device_name(chip), attributes=chip_attributes(chip), capacities=chip_capacities(chip))

    # -- Prepare ----------------------------------------------------------------------------------

    def vnpu_host_path(self, ctx: ProfileContext, vnpu_id: int) -> str:
        """Where ``vdavinci<vnpuID>`` is on the host: under the option ``vnpu-dev-dir``, by default the
        host's device directory (``ProfileContext.host_dev_root``: ``--dev-root-on-host``, else
        ``--dev-root``), where the driver makes it."""
        return f"{self.option(ctx, 'vnpu-dev-dir', str(ctx.host_dev_root)).rstrip('/')}/vdavinci{vnpu_id}"

    def apply_config(
        self, config: NpuConfig | None, devices: Sequence[AllocatedDevice], ctx: ApplyContext
    ) -> Mapping[str, ContainerEdits]:
        """``{device name: ContainerEdits}`` (module docstring). Pure: the vNPU ID is the device's
        ``vnpuID`` attribute, so nothing depends on what npu-smi answers.

        :raises ValueError: if a device is not in ``ctx.inventory`` or lacks ``physicalID``.
        """
        config = config if config is not None else self.default_config()
        numbers: dict[str, tuple[int, bool]] = {}  # device -> (number, is a vNPU)
        for allocated in devices:
            published = ctx.inventory.device(allocated.device)
            attributes = published.attributes if published is not None else {}
            physical, vnpu = attributes.get("physicalID"), attributes.get("vnpuID")
            if not isinstance(physical, int) or isinstance(physical, bool):
                raise ValueError(f"apply {self.name} config: device {allocated.device} is not in the inventory "
                                 "or has no physicalID attribute")
            is_vnpu = attributes.get("type") == TYPE_VNPU and not allocated.admin_access
            numbers[allocated.device] = (vnpu if is_vnpu and isinstance(vnpu, int) else physical, is_vnpu)
        visible = visible_per_request(devices, lambda a: numbers[a.device][0])
        simulated = ctx.inventory.source == TIER_SIMULATED
        shared, mounts, common_env = self.shared_edits(config, simulated, ctx.profile)
        edits: dict[str, ContainerEdits] = {}
        for allocated in devices:
            number, is_vnpu = numbers[allocated.device]
            env = [f"{VISIBLE_DEVICES_ENV}={visible[allocated.base_request]}", *common_env]
            if is_vnpu:
                # The host's vdavinci<ID> is the container's davinci<ID>, as Huawei's own device plugin
                # and CDI generator give it (mind-cluster getDevPath, ascend-common/cdi UseVirtual):
                # CANN opens /dev/davinci<N>.
                node = DeviceNode(path=f"/dev/davinci{number}", host_path=self.vnpu_host_path(ctx.profile, number))
                env.append(f"{RUNTIME_OPTIONS_ENV}=VIRTUAL")
            else:
                node = simulated_node(number) if simulated else ctx.profile.device_node(f"davinci{number}")
            edits[allocated.device] = ContainerEdits(env=tuple(env), device_nodes=(node, *shared), mounts=mounts)
        return edits

    def created_device_nodes(self, devices: Sequence[AllocatedDevice], ctx: ApplyContext) -> list[str]:
        """Host paths of the device nodes :meth:`prepare_side_effects` creates (the vNPUs' nodes):
        they cannot exist when the claim is planned."""
        out = []
        for allocated in devices:
            published = ctx.inventory.device(allocated.device)
            vnpu = published.attributes.get("vnpuID") if published is not None else None
            if published is not None and published.attributes.get("type") == TYPE_VNPU \
                    and isinstance(vnpu, int) and not allocated.admin_access:
                out.append(self.vnpu_host_path(ctx.profile, vnpu))
        return out

    async def prepare_side_effects(self, claim: Any, devices: Sequence[AllocatedDevice],
                                   ctx: ApplyContext) -> dict[str, Any]:
        """Create a vNPU for every vNPU device of the claim (see :meth:`.vnpu_ops.VnpuOps.create_all`).

        A whole chip creates nothing, but is refused while npu-smi lists vNPUs on it: the counters
        keep our vNPUs and whole chips apart, so those were made outside ascend-dra (a whole chip and its
        vNPUs are never allocated together, docs/hard-vnpu.md).

        :return: ``{"vnpus": [ledger entry JSON, ...]}`` (stored in the checkpoint).
        :raises VnpuError: a vNPU could not be made (those made by this call are destroyed first),
            or a whole chip holds vNPUs.
        """
        ops = await self.vnpu_ops(ctx.profile)
        wanted = []
        for allocated in devices:
            published = ctx.inventory.device(allocated.device)
            if published is None or allocated.admin_access:
                continue
            a = published.attributes
            if a.get("type") == TYPE_VNPU:
                wanted.append((allocated.device, a.get("npuID"), a.get("chipID"), a.get("vnpuID"),
                               a.get("vnpuTemplate")))
            elif isinstance(a.get("npuID"), int) and isinstance(a.get("chipID"), int):
                await ops.check_no_vnpus(allocated.device, int(a["npuID"]), int(a["chipID"]))
        made = await ops.create_all(ctx.claim_uid, wanted)
        return {"vnpus": [e.to_json() for e in made]}

    async def unprepare_side_effects(self, side_effects: Any, ctx: ApplyContext) -> None:
        """Destroy the vNPUs ``side_effects`` names (idempotent; :meth:`.vnpu_ops.VnpuOps.destroy_all`).

        ``None`` (the daemon's record of a Prepare interrupted inside :meth:`prepare_side_effects`)
        destroys every vNPU the ledger names for ``ctx.claim_uid``.
        """
        ops = await self.vnpu_ops(ctx.profile)
        if side_effects is None:
            await ops.destroy_claim(ctx.claim_uid)
        else:
            await ops.destroy_all(side_effects)

    async def reconcile_side_effects(self, live: Sequence[Any], ctx: ProfileContext) -> None:
        """Start-up repair: destroy the vNPUs our ledger names that no kept checkpoint record does.

        :param live: the side effects of every claim record the daemon keeps after its recovery.
        """
        await (await self.vnpu_ops(ctx)).reconcile(live)

    def claim_evidence(self, ctx: ProfileContext) -> list[str]:
        """Our ledger's entries, one line each (blocking): a vNPU made, or about to be, for a claim.
        Asked when the checkpoint is damaged and names no claim (docs/durable-state.md)."""
        return [f"hard-vNPU ledger entry {path}" for path in self.ops(ctx).ledger.files()]


def factory() -> HardVnpuProfile:
    """Entry point ``hard-vNPU`` of group ``ascend_dra.profiles``."""
    return HardVnpuProfile()
