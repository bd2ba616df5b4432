"""Planning a Prepare: which devices, which opaque configs, which container edits and CDI specs.

Pure apart from reading the node: a plan is computed on the event loop with no await, so the
guard's view of the held devices and the claim's reservation are one atomic step (devicestate.py).
The only I/O is a stat of each device node the specs name (a spec must not promise a device node
that does not exist; docs/durable-state.md).

With device metadata on (KEP-5304, :mod:`ascend_dra.cdi.devicemetadata`), a plan also holds, per
request of the claim, the bytes of its metadata file and a CDI device in the claim's spec that mounts
it; the request's first device names that device in its answer (:mod:`.metadataplan`).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ascend_dra.cdi import naming
from ascend_dra.cdi.devicemetadata import MetadataStore
from ascend_dra.cdi.spec import CdiDevice, ContainerEdits, Spec
from ascend_dra.durable.checkpoint import DeviceRecord
from ascend_dra.model import AllocatedDevice, ClaimAllocation, Device, Inventory, OpaqueConfig
from ascend_dra.profiles.base import ApplyContext, ConfigError, Profile, ProfileContext, decode_config
from ascend_dra.state import guard
from ascend_dra.state.metadataplan import MetadataPlanError, Placed, add_metadata

__all__ = ("Plan", "PlanError", "Planner", "batches_by_device", "resolve_configs")


class PlanError(Exception):
    """The claim cannot be prepared as allocated; the message goes to the kubelet as is."""


@attrs.frozen
class Plan:
    """What Prepare will do for one claim, computed without side effects."""

    claim: ClaimAllocation
    devices: tuple[DeviceRecord, ...]
    specs: Mapping[str, Spec]  # file name -> spec
    groups: Mapping[str, tuple[AllocatedDevice, ...]]  # profile name -> its devices (for side effects)
    device_nodes: tuple[str, ...]  # host paths the specs name, all present when planned
    #: base request -> its device metadata file's bytes (KEP-5304); empty with metadata off
    metadata: Mapping[str, bytes] = attrs.field(factory=dict)


def resolve_configs(
    claim: ClaimAllocation,
    result: AllocatedDevice,
    kinds: Mapping[str, type],
    other_kinds: frozenset[str] = frozenset(),
) -> OpaqueConfig | None:
    """Return the opaque config that applies to ``result``, or None for the profile's default.

    Precedence (as in the reference driver, docs/architecture.md#resourceclaim): configs from the
    DeviceClass (``FromClass``) lose to configs from the claim (``FromClaim``); within one
    source a later entry wins. A config applies when its ``requests`` is empty or names the
    result's request, or its base request for ``req/sub`` results. Configs whose ``kind`` is in
    ``other_kinds`` (another loaded profile's) are not considered for this device.
    """
    chosen = None
    ordered = sorted(claim.configs, key=lambda c: (c.source == "FromClaim", c.index))
    for config in ordered:
        if config.requests and result.request not in config.requests and result.base_request not in config.requests:
            continue
        kind = config.parameters.get("kind") if isinstance(config.parameters, Mapping) else None
        if kind not in kinds and kind in other_kinds:
            continue
        chosen = config
    return chosen


def batches_by_device(members: Sequence[AllocatedDevice]) -> list[list[AllocatedDevice]]:
    """Split one config's allocated devices into the calls of ``apply_config``, whose answer is keyed
    by device name (docs/writing-a-profile.md): so that no name repeats within a call. A device
    repeats only as shares of one device (KEP-5075 consumable capacity: one claim may hold several
    shares of a device, each with its own ``shareID`` and consumed capacity). The devices of one
    request stay in one call where they can (a request's env, such as ``ASCEND_VISIBLE_DEVICES``,
    lists them all); without a repeated name the one call holds every member, in order.
    """
    if len({m.device for m in members}) == len(members):
        return [list(members)]
    batches: list[list[AllocatedDevice]] = []
    names: list[set[str]] = []
    by_request: dict[str, list[AllocatedDevice]] = defaultdict(list)
    for member in members:
        by_request[member.base_request].append(member)
    for request_members in by_request.values():
        wanted = {m.device for m in request_members}
        if len(wanted) < len(request_members):  # one request holds two shares of a device: split it too
            units = [[m] for m in request_members]
        else:
            units = [request_members]
        for unit in units:
            unit_names = {m.device for m in unit}
            index = next((i for i, taken in enumerate(names) if not taken & unit_names), None)
            if index is None:
                batches.append([])
                names.append(set())
                index = len(batches) - 1
            batches[index].extend(unit)
            names[index] |= unit_names
    return batches


class Planner:
    """Plans claims against the node's current inventories.

    :param profiles: profile name -> loaded profile.
    :param profile_ctx: the node context the profiles get (``dev_root`` is where device nodes are checked).
    :param metadata_store: where device metadata files go (their host paths go into the specs).
    :param device_metadata: give new claims device metadata files (``--device-metadata``).
    """

    def __init__(self, *, driver_name: str, node_name: str, profiles: Mapping[str, Profile],
                 profile_ctx: ProfileContext, metadata_store: MetadataStore | None = None,
                 device_metadata: bool = False) -> None:
        self.driver_name = driver_name
        self.metadata_store = metadata_store
        self.device_metadata = device_metadata and metadata_store is not None
        self.node_name = node_name
        self.profiles = dict(profiles)
        self.profile_ctx = profile_ctx
        self.inventories: dict[str, Inventory] = {}
        self._device_profile: dict[str, str] = {}
        self._devices: dict[str, Device] = {}
        self._counters = guard.CounterIndex()
        # Every loaded profile's config kinds: another profile's kind is skipped for a device,
        # while a kind nobody knows is an error naming the allowed kinds.
        self._all_kinds = frozenset(k for p in self.profiles.values() for k in p.config_types)

    def set_inventories(self, inventories: Mapping[str, Inventory]) -> None:
        """Replace the known devices (after a rediscovery)."""
        self.inventories = dict(inventories)
        self._device_profile = {d.name: p for p, inv in inventories.items() for d in inv.devices}
        self._devices = {d.name: d for inv in inventories.values() for d in inv.devices}
        self._counters = guard.CounterIndex((c for inv in inventories.values() for c in inv.counter_sets),
                                            self._devices.values())

    def cdi_kind(self, profile_name: str) -> str:
        """``k8s.<driver>/<class>`` of a profile (docs/architecture.md#names)."""
        return naming.kind(self.driver_name, self.profiles[profile_name].cdi_class)

    def plan(self, claim: ClaimAllocation, taken: guard.HoldIndex, exclude: str | None = None,
             device_metadata: bool | None = None) -> Plan:
        """Compute devices, configs and CDI specs for ``claim``; pure apart from reading state and
        checking that the device nodes the specs name exist.

        :param device_metadata: whether the plan gives the claim device metadata files; None: as
            the planner is set. A replay passes whether the record's answer names them, so that a
            spec made again resolves every id the kubelet was given, whatever the flag is now.

        :raises PlanError: unknown device, bad edits, a device node that does not exist.
        :raises guard.GuardError: double allocation, capacity or shared counter overflow.
        :raises ConfigError: an opaque config that does not decode or validate.
        """
        ref = f"ResourceClaim {claim.namespace}/{claim.name}"
        if not claim.results:
            raise PlanError(f"{ref} has no allocation results for driver {self.driver_name}")
        groups: dict[str, list[AllocatedDevice]] = defaultdict(list)
        seen: dict[str, list[AllocatedDevice]] = defaultdict(list)
        for result in claim.results:
            device = self._devices.get(result.device)
            if result.pool != self.node_name or device is None:
                raise PlanError(f"{ref}: device {result.pool}/{result.device} was never published by "
                                   f"{self.driver_name} on node {self.node_name}")
            guard.check_free(ref, result, device, taken, seen[result.device], exclude)
            seen[result.device].append(result)
            groups[self._device_profile[result.device]].append(result)
        guard.check_counters(ref, claim.results, self._counters, taken, exclude)

        decoded: dict[int, Any] = {}
        # CDI kind -> the claim's CDI devices of that kind, and the profiles that made them: profiles
        # may share a CDI class (npu-910 and npu-310P are both ``npu``), and the claim's spec file
        # is named by kind and claim, so one file must hold the devices of every such profile.
        kind_devices: dict[str, list[CdiDevice]] = defaultdict(list)
        kind_profiles: dict[str, list[str]] = defaultdict(list)
        records: list[DeviceRecord] = []
        with_metadata = (self.device_metadata if device_metadata is None else device_metadata) \
            and self.metadata_store is not None
        placed: list[Placed] = []  # with metadata: each result, its CDI kind and its record's index
        extra: dict[tuple[str, str | None], Mapping[str, Any]] = {}  # (device, share) -> profile's attributes
        for profile_name, results in groups.items():
            profile = self.profiles[profile_name]
            kind = self.cdi_kind(profile_name)
            by_config: dict[int, list[AllocatedDevice]] = defaultdict(list)
            for result in results:
                config = resolve_configs(claim, result, profile.config_types, self._all_kinds)
                key = -1 if config is None else config.index
                if config is not None and key not in decoded:
                    decoded[key] = self._decode(config, profile, profile_name)
                by_config[key].append(result)
            ctx = ApplyContext(self.profile_ctx, self.inventories[profile_name], claim.uid, claim.namespace, claim.name)
            edits: dict[tuple[str, str | None], ContainerEdits] = {}
            for key, group in by_config.items():
                config = profile.default_config() if key == -1 else decoded[key]
                for members in batches_by_device(group):
                    try:
                        applied = profile.apply_config(config, members, ctx)
                    except Exception as exc:
                        raise PlanError(f"{ref}: profile {profile_name} failed to apply its config: "
                                        f"{type(exc).__name__}: {exc}") from exc
                    for member in members:
                        if member.device not in applied:
                            raise PlanError(f"{ref}: profile {profile_name} returned no container edits for "
                                            f"device {member.device}")
                        edits[(member.device, member.share_id)] = applied[member.device]
                    hook = getattr(profile, "device_metadata", None) if with_metadata else None
                    if hook is not None:
                        try:
                            found = hook(config, members, ctx)
                        except Exception as exc:
                            raise PlanError(f"{ref}: profile {profile_name} failed to give device metadata: "
                                            f"{type(exc).__name__}: {exc}") from exc
                        for member in members:
                            extra[(member.device, member.share_id)] = found.get(member.device) or {}
            kind_profiles[kind].append(profile_name)
            for result in results:
                if with_metadata:
                    placed.append(Placed(result, kind, len(records), profile_name))
                name = naming.claim_device_name(claim.uid, result.device, result.share_id)
                kind_devices[kind].append(CdiDevice(name, edits[(result.device, result.share_id)]))
                records.append(DeviceRecord(
                    request=result.request, pool=result.pool, device=result.device,
                    # The device's own ID first: the kubelet names the device by its first CDI ID in
                    # the pod's allocatedResourcesStatus (KEP-4680), and the API server refuses a pod
                    # status whose entries repeat an ID (all would be `common`; tests/kubelet).
                    cdi_device_ids=(naming.qualified_name(kind, name),
                                    naming.qualified_name(kind, naming.COMMON_DEVICE)),
                    share_id=result.share_id, consumed_capacity=dict(result.consumed_capacity),
                    admin_access=result.admin_access,
                ))
        metadata: dict[str, bytes] = {}
        if with_metadata:
            assert self.metadata_store is not None
            try:
                metadata = add_metadata(claim, placed, extra, self._devices, records, kind_devices,
                                        driver_name=self.driver_name, store=self.metadata_store)
            except MetadataPlanError as exc:
                raise PlanError(str(exc)) from None
        specs: dict[str, Spec] = {}
        for kind, cdi_devices in kind_devices.items():
            spec = Spec(kind, tuple(cdi_devices))
            try:
                spec.validate()
            except ValueError as exc:
                makers = kind_profiles[kind]
                raise PlanError(f"{ref}: profile{'s' if len(makers) > 1 else ''} {', '.join(makers)} produced "
                                f"{exc}") from None
            specs[naming.claim_spec_file(kind, claim.uid)] = spec
        nodes = tuple(dict.fromkeys(n.host_path or n.path for spec in specs.values() for d in spec.devices
                                    for n in d.container_edits.device_nodes))
        # Admin access (KEP-5018) gets the device's edits but never its side effects (no vNPU).
        effects = {p: tuple(r for r in rs if not r.admin_access) for p, rs in groups.items()}
        # Nodes the side effects create (a hard vNPU's /dev/vdavinci<ID>) cannot exist yet; the
        # answer is still checked against them after the side effects ran (devicestate.py).
        created: set[str] = set()
        for profile_name, members in effects.items():
            hook = getattr(self.profiles[profile_name], "created_device_nodes", None)
            if hook is not None and members:
                created.update(hook(members, ApplyContext(self.profile_ctx, self.inventories[profile_name],
                                                          claim.uid, claim.namespace, claim.name)))
        absent = [n for n in self.absent_nodes(nodes) if n not in created]
        if absent:
            raise PlanError(f"{ref}: device nodes {self.seen_at(absent)} do not exist on node {self.node_name}; "
                            "the NPU driver may not be loaded yet, or the device was removed. Nothing was "
                            "prepared; the kubelet retries")
        return Plan(claim, tuple(records), specs, {p: rs for p, rs in effects.items() if rs}, nodes, metadata)

    def _decode(self, config: OpaqueConfig, profile: Profile, profile_name: str) -> Any:
        where = f"status.allocation.devices.config[{config.index}].opaque"
        kind = config.parameters.get("kind") if isinstance(config.parameters, Mapping) else None
        if kind not in profile.config_types and kind in self._all_kinds:
            raise ConfigError.at(f"{where}.parameters.kind",
                                 f"{kind!r} is not a config kind of profile {profile_name}")
        try:
            return decode_config(config.parameters, profile.config_types, self.driver_name, profile)
        except ConfigError as exc:
            raise ConfigError([(f"{where}.{path}", message) for path, message in exc.problems]) from None

    def absent_nodes(self, host_paths: Iterable[str]) -> list[str]:
        """The device-node host paths that do not exist; each is looked up where the daemon sees it
        (:meth:`ProfileContext.daemon_path`: the host's device directory is ``--dev-root``)."""
        return [path for path in host_paths if not os.path.exists(self.profile_ctx.daemon_path(path))]

    def seen_at(self, host_paths: Iterable[str]) -> str:
        """``a, b (looked for at <dev-root>/b)``: the host paths, each with where the daemon looked
        for it when that is not the same path (``--dev-root`` is not the host's device directory)."""
        return ", ".join(p if str(seen := self.profile_ctx.daemon_path(p)) == p else f"{p} (looked for at {seen})"
                         for p in host_paths)
