"""Cluster mode: claims from the API server and the ResourceSlice reconciler.

This module and kubernetes-asyncio are imported only when the daemon runs in cluster mode, before its
event loop starts (the import costs ~0.4 s and ~60 MB, docs/architecture.md#import-cost); apiclient.py
itself is light (its constants are read in both modes) and imports kubernetes-asyncio only then.
Objects travel as plain ``resource.k8s.io/v1`` JSON dicts (the same shapes as standalone mode),
through the daemon's own requests (apiclient.py), the watch included; no typed API object is made.

Publishing follows the Go helper's ResourceSlice controller (docs/architecture.md#resourceslice-publishing): one
pool named after the node, owner reference to the Node, ``generateName`` ``<node>-<driver>-``;
on every change the pool generation rises, obsolete slices are deleted first, then matched
slices updated, then new ones created. A watch on our slices (slicewatch.py) triggers a re-sync, so
slices that someone else deleted (the kubelet wipes a node's slices when it starts) come back within seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from anyio.abc import TaskStatus
from tenacity import AsyncRetrying, retry_if_exception_type, wait_random_exponential

from ascend_dra.cluster.apiclient import RESOURCE_V1, ApiError, KubeApi, connect_api, open_api
from ascend_dra.cluster.slices import build_slices_stepwise, keep_taint_times, slice_content
from ascend_dra.cluster.slicewatch import SliceWatchMixin
from ascend_dra.model import ClaimAllocation, Inventory
from ascend_dra.state.claims import ClaimGone, ClaimUnreadable, check_claim_ref, parse_claim, why_gone

__all__ = ("ApiClaimSource", "ApiPublisher", "DroppedFieldsError")

log = logging.getLogger(__name__)


class DroppedFieldsError(Exception):
    """Raised by the publisher when the API server stored a slice without fields we sent.

    The API server drops fields of disabled feature gates without an error (docs/architecture.md#feature-gates);
    ``gates`` names
    the gates that must be enabled on kube-apiserver (and the scheduler, and the kubelet).
    """

    def __init__(self, fields: list[str], gates: list[str]) -> None:
        self.fields = fields
        self.gates = gates
        super().__init__(f"the API server dropped ResourceSlice fields {', '.join(fields)}: enable the feature "
                         f"gate(s) {', '.join(gates)} on kube-apiserver, kube-scheduler and the kubelet")


#: Seconds between looks, while a newer instance publishes (a rolling update), at whether it still
#: runs: if its rollout fails and it exits, this instance's slices are kept current again soon.
STANDBY_POLL_S = 2.0


class ApiClaimSource:
    """Fetches claims with ``GET resource.k8s.io/v1`` before Prepare, as the Go helper does
    (docs/architecture.md#what-the-go-helper-does)."""

    def __init__(self, kubeconfig: str | None, driver_name: str, api: KubeApi | None = None) -> None:
        """:param api: a client to share (its owner closes it); without one, one is opened at the first GET."""
        self.kubeconfig = kubeconfig
        self.driver_name = driver_name
        self._api = api
        self._owns_api = api is None
        self._lock = anyio.Lock()

    async def _get_api(self) -> KubeApi:
        async with self._lock:
            if self._api is None:
                self._api = KubeApi(await open_api(self.kubeconfig))
            return self._api

    async def get(self, namespace: str, name: str, uid: str, *, uid_recorded: bool = False) -> ClaimAllocation:
        """Return the allocated claim (``uid_recorded``: see :func:`~ascend_dra.state.claims.check_claim_ref`).

        :raises ClaimError: not found, a different uid (replaced), not allocated, or not reserved
            for any consumer; or the API server could not be asked.
        """
        check_claim_ref(namespace, name, uid, uid_recorded=uid_recorded)
        ref = f"ResourceClaim {namespace}/{name}"
        api = await self._get_api()
        try:
            obj = await api.call("GET", f"{RESOURCE_V1}/namespaces/{namespace}/resourceclaims/{name}")
        except ApiError as exc:
            if exc.status == 404:
                raise ClaimGone(f"{ref} does not exist") from None
            raise ClaimUnreadable(f"{ref}: reading it from the API server failed: {exc}") from None
        obj.setdefault("kind", "ResourceClaim")
        # The uid first: a claim replaced under the same name is not allocated yet, and "not
        # allocated" would hide that it is another claim (an audit of API faults).
        found = (obj.get("metadata") or {}).get("uid")
        if found != uid:
            raise ClaimGone(f"{ref}: uid {uid} was requested but the claim has uid {found} (it got replaced)")
        claim = parse_claim(obj, self.driver_name, uid_recorded=uid_recorded)
        if not claim.reserved_for:
            raise ClaimGone(f"{ref} is allocated but not reserved for any pod (status.reservedFor is empty)")
        return claim

    async def gone(self, namespace: str, name: str, uid: str, pool: str) -> str | None:
        """:meth:`~ascend_dra.state.claims.ClaimSource.gone`: not found (404), replaced under its name,
        deallocated, or allocated on another node; None if it is allocated here or the API server
        cannot be asked."""
        try:
            api = await self._get_api()
            obj = await api.call("GET", f"{RESOURCE_V1}/namespaces/{namespace}/resourceclaims/{name}")
        except ApiError as exc:
            return "no longer exists in the API server" if exc.status == 404 else None
        except Exception:  # a hint for a message: never worth failing the Prepare that asked
            log.debug("asking whether a prepared claim is gone failed", exc_info=True)
            return None
        return why_gone(obj, uid, self.driver_name, pool)

    async def aclose(self) -> None:
        """Close the client this source opened itself (a shared one is its owner's to close)."""
        if self._api is not None and self._owns_api:
            await self._api.client.close()


_GATED_DEVICE_FIELDS = {
    "taints": "DRADeviceTaints",
    "allowMultipleAllocations": "DRAConsumableCapacity",
    "consumesCounters": "DRAPartitionableDevices",
}


def dropped_fields(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """Compare a slice spec we sent with the one the API server stored.

    :return: ``(field paths dropped, feature gates that would keep them)``.
    """
    fields: list[str] = []
    gates: list[str] = []

    def note(path: str, gate: str) -> None:
        fields.append(path)
        if gate not in gates:
            gates.append(gate)

    if sent.get("sharedCounters") and not stored.get("sharedCounters"):
        note("spec.sharedCounters", "DRAPartitionableDevices")
    stored_devices = {d.get("name"): d for d in stored.get("devices") or []}
    for device in sent.get("devices") or []:
        kept = stored_devices.get(device["name"], {})
        for key, gate in _GATED_DEVICE_FIELDS.items():
            if device.get(key) and not kept.get(key):
                note(f"spec.devices[{device['name']}].{key}", gate)
        for cap, value in (device.get("capacity") or {}).items():
            if value.get("requestPolicy") and not (kept.get("capacity", {}).get(cap) or {}).get("requestPolicy"):
                note(f"spec.devices[{device['name']}].capacity.{cap}.requestPolicy", "DRAConsumableCapacity")
    return fields, gates


def _owner_uids(obj: Mapping[str, Any]) -> list[Any]:
    """The uids of a stored object's ``metadata.ownerReferences`` (ours: one, the Node's)."""
    return [ref.get("uid") for ref in (obj.get("metadata") or {}).get("ownerReferences") or ()]


def _key(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """Match key: the device names (or counter-set names) a slice carries."""
    names = [d["name"] for d in spec.get("devices") or []] + [f"counters:{c['name']}" for c in
                                                                spec.get("sharedCounters") or []]
    return tuple(sorted(names))


class ApiPublisher(SliceWatchMixin):
    """Keeps the node's pool in the API server equal to the inventory.

    :param newer_instance: during a rolling update (instancelock.py), returns the id of a newer
        live instance of the driver on this node that publishes, or None; while there is one, this
        publisher writes nothing and looks again every :data:`STANDBY_POLL_S`.
    :param published: called after each reconcile that succeeded (slices written or found
        current): a rolling-update instance records it for the older ones (instancelock.py).
    :param dropped: called with the :class:`DroppedFieldsError` of each write whose slices the API
        server stored without fields we sent (the daemon then withdraws what it meant to taint).
    :ivar generation: the pool generation last written.
    :ivar last_error: the last reconcile error (None after a successful sync), for health reporting;
        :attr:`retrying` is the part of it that readiness reports.
    :ivar syncs: how many reconciles wrote something.
    :ivar standing_by_for: the newer instance's id while this one stands by, else None.
    """

    def __init__(self, kubeconfig: str | None, *, driver_name: str, node_name: str,
                 resync_interval: float = 60.0, api: KubeApi | None = None,
                 newer_instance: Callable[[], str | None] | None = None,
                 published: Callable[[], None] | None = None,
                 dropped: Callable[[DroppedFieldsError], None] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.driver_name = driver_name
        self.node_name = node_name
        self.resync_interval = resync_interval
        self.generation = 0
        self.last_error: Exception | None = None
        self.syncs = 0
        self.standing_by_for: str | None = None
        self._newer_instance = newer_instance
        self._published = published
        self._dropped = dropped
        self._inventory = Inventory()
        self._wake = anyio.Event()
        #: Set once the first publish attempt ended, written or not (the daemon binds the
        #: registration socket after it, so that GetInfo never waits behind the first sync).
        self.first_attempt = anyio.Event()
        self._api = api  # shared (its owner closes it), or opened by connect() and closed by run()
        self._owns_api = api is None
        self._owner: dict[str, str] | None = None
        # (contents we sent, contents the server stored) of the last write, for up-to-date checks.
        self._written: tuple[list[bytes], list[bytes]] | None = None
        # (name, resourceVersion) of each slice our last write left: the watch events they cause
        # need no reconcile (each took a LIST and a compare of every device).
        self._own_versions: set[tuple[str, str]] = set()
        self._syncing = False
        self._held_events: list[tuple[str, str | None, str | None]] = []  # (type, name, resourceVersion)
        self._watch_version: str | None = None  # the last resourceVersion the watch saw (where the next begins)
        self._list_version: str | None = None  # the last LIST's resourceVersion (where the first watch begins)
        self._listed = anyio.Event()  # set by each LIST that gave a version (a watch after a 410 waits for one)
        self._streaming_since_sync = False  # a watch has streamed, without a break, since the last LIST
        # ((inventory, generation, node uid), slices, their sorted contents) of the last build.
        self._built: tuple[tuple[Any, int, str], list[dict[str, Any]], list[bytes]] | None = None

    async def connect(self) -> None:
        """Open this publisher's own API client unless it was given one (:func:`connect_api`).

        :raises RuntimeError: the kubeconfig or in-cluster configuration cannot be used.
        """
        if self._api is None:
            self._api = await connect_api(self.kubeconfig)

    def update(self, inventory: Inventory) -> None:
        """Set the desired inventory; the reconcile loop publishes it promptly."""
        self._inventory = inventory
        self._wake.set()

    async def run(self, inventory: Inventory, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Reconcile until cancelled. Reports started at once: Prepare of prepared claims must not
        wait for an API server that is down."""
        self._inventory = inventory
        if self._api is None:
            await self.connect()
        api = self._api
        assert api is not None
        task_status.started()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch)
                quiet = False  # the last turn reconciled (or found nothing to), and its wait ended on the timer
                while True:
                    self._wake = anyio.Event()
                    if self._stand_by():
                        self.first_attempt.set()
                    elif quiet and self._streaming_since_sync and self.last_error is None:
                        # A resync while the watch has streamed since the last reconcile: any change
                        # to our slices would have woken us (a deleted or re-created Node too, as the
                        # garbage collector then deletes them), so there is nothing to GET or LIST.
                        if self._published is not None:
                            self._published()  # still current (rolling-update instances read it)
                    else:
                        self._syncing = True
                        try:
                            await self._sync_with_retry()
                        finally:
                            self._syncing = False
                        # Events that came while the write's answers were still on their way:
                        # now it is known which of them our write caused.
                        if any(not self._is_own_write(*event) for event in self._held_events):
                            self._wake.set()
                        self._held_events.clear()
                    with anyio.move_on_after(STANDBY_POLL_S if self.standing_by_for else self.resync_interval
                                             ) as waited:
                        await self._wake.wait()
                    # (after standing by, what a newer instance wrote meanwhile is the next reconcile's to see)
                    quiet = waited.cancelled_caught and not self.standing_by_for
        finally:
            if self._owns_api:
                with anyio.CancelScope(shield=True):
                    await api.client.close()

    def _stand_by(self) -> bool:
        """Whether a newer instance publishes now (logged when that changes)."""
        newer = self._newer_instance() if self._newer_instance is not None else None
        if newer != self.standing_by_for:
            if newer is not None:
                log.info("a newer instance of the driver runs on this node and publishes its ResourceSlices; "
                         "this one stands by", extra={"newer_rolling_update_id": newer})
            else:
                log.info("no newer instance runs any more; publishing ResourceSlices again")
            self.standing_by_for = newer
        return newer is not None

    async def _sync_with_retry(self) -> None:
        async for attempt in AsyncRetrying(
            # full jitter, 0.5 s doubling up to 30 s (wait_exponential_jitter's `initial` is deprecated
            # in tenacity 9.2, and its replacement, `multiplier`, is missing from 8.2, our floor)
            wait=wait_random_exponential(multiplier=0.5, max=30), retry=retry_if_exception_type(ApiError),
            reraise=True,
        ):
            with attempt:
                try:
                    await self.sync()
                    self.last_error = None
                    if self._published is not None and self.standing_by_for is None:  # it wrote or checked
                        self._published()
                except ApiError as exc:
                    self.last_error = exc
                    log.warning("publishing ResourceSlices failed; retrying", extra={"error": str(exc)})
                    raise
                except DroppedFieldsError as exc:
                    self.last_error = exc
                    log.error("ResourceSlice fields were dropped by the API server", extra={"error": str(exc)})
                    if self._dropped is not None:
                        self._dropped(exc)
                finally:
                    self.first_attempt.set()

    async def _node_owner(self) -> dict[str, str]:
        """The slices' owner reference: our Node's name and its uid, read again at every reconcile.

        A Node deleted and created again under the same name (a node re-imaged, or re-registered
        by its kubelet) has a new uid; slices that still name the old one have no owner, and the
        garbage collector deletes them, again after every republish, for as long as the daemon
        kept the uid it read at start (one GET a reconcile: at most one a ``resync_interval``
        while nothing changes).

        :raises ApiError: the Node cannot be read (404 while it is gone: nothing is written then).
        """
        assert self._api is not None
        try:
            node = await self._api.call("GET", f"/api/v1/nodes/{self.node_name}")
        except ApiError as exc:
            raise ApiError(exc.status, f"reading Node {self.node_name} for the owner reference: {exc}") from None
        uid = node["metadata"]["uid"]
        if self._owner is not None and self._owner["uid"] != uid:
            log.info("our Node was created again; its ResourceSlices are republished with its new uid",
                     extra={"node": self.node_name, "uid": uid})
        self._owner = {"name": self.node_name, "uid": uid}
        return self._owner

    @property
    def retrying(self) -> ApiError | None:
        """The error of the last attempt while the publisher retries it (the API server unreachable
        or refusing): what makes the daemon not ready. A :class:`DroppedFieldsError` is not retried
        (the slices are written, without a gate's fields) and stays until the next resync; it is
        logged and counted (``ascend_dra_resourceslice_publish_failing``) instead."""
        error = self.last_error
        return error if isinstance(error, ApiError) else None

    async def list_slices(self) -> list[dict[str, Any]]:
        """Our slices in the API server (field selector ``spec.driver`` + ``spec.nodeName``)."""
        assert self._api is not None
        query = [("fieldSelector", self.slice_selector())]
        reply = await self._api.call("GET", f"{RESOURCE_V1}/resourceslices", query=query)
        self._streaming_since_sync = self._streaming  # a watch that began before this LIST covers what follows
        self._list_version = (reply.get("metadata") or {}).get("resourceVersion") or self._list_version
        if self._list_version is not None:
            self._listed.set()
        return [s for s in reply.get("items") or [] if s["spec"]["pool"]["name"] == self.node_name]

    async def sync(self) -> bool:
        """One reconcile; return True if anything was written.

        :raises ApiError: the API server refused or did not answer (retried by the loop).
        :raises DroppedFieldsError: the stored slices lack fields we sent (a feature gate is off).
        """
        assert self._api is not None
        owner = await self._node_owner()
        existing = await self.list_slices()
        current = max((s["spec"]["pool"].get("generation", 0) for s in existing), default=0)
        desired, want = await self._desired(current, owner)
        have = sorted(slice_content(s["spec"]) for s in existing)
        # What the server stored may differ from what we sent (fields of a disabled gate dropped,
        # values normalized): slices equal to the server's version of our last write are current.
        same = have == want or self._written == (want, have)
        up_to_date = (
            same
            and len(existing) == len(desired)
            and all(s["spec"]["pool"].get("generation") == current for s in existing)
            and all(s["spec"]["pool"].get("resourceSliceCount") == len(desired) for s in existing)
            and all(_owner_uids(s) == [owner["uid"]] for s in existing)  # the Node was not created again
        )
        if up_to_date:
            self.generation = current
            return False
        if self._stand_by():  # a newer instance came up while this reconcile ran (or retried)
            return False
        generation = current + 1
        self._built = None  # the objects are changed below and sent
        for obj in desired:
            obj["spec"]["pool"]["generation"] = generation
        keep_taint_times(desired, existing)
        pairs, obsolete, new = _match(existing, desired)
        for old in obsolete:
            await self._delete(old)
        stored = []
        for old, new_obj in pairs:
            body = {**new_obj, "metadata": {**old["metadata"], "ownerReferences":
                                            new_obj["metadata"].get("ownerReferences")}}
            stored.append((new_obj, await self._api.call(
                "PUT", f"{RESOURCE_V1}/resourceslices/{old['metadata']['name']}", body=body)))
        for new_obj in new:
            stored.append((new_obj, await self._api.call("POST", f"{RESOURCE_V1}/resourceslices", body=new_obj)))
        self.generation = generation
        self.syncs += 1
        log.info("published ResourceSlices", extra={"generation": generation, "slices": len(desired),
                                                     "devices": len(self._inventory.devices),
                                                     "deleted": len(obsolete)})
        self._written = (sorted(slice_content(sent["spec"]) for sent, _ in stored),
                         sorted(slice_content(got.get("spec") or {}) for _, got in stored))
        self._own_versions = {(got["metadata"]["name"], got["metadata"]["resourceVersion"])
                              for _, got in stored if got.get("metadata")}
        fields: list[str] = []
        gates: list[str] = []
        for sent, got in stored:
            more_fields, more_gates = dropped_fields(sent["spec"], got.get("spec") or {})
            fields += more_fields
            gates += [g for g in more_gates if g not in gates]
        if fields:
            raise DroppedFieldsError(fields, gates)
        return True

    async def _desired(self, generation: int, owner: dict[str, str]) -> tuple[list[dict[str, Any]], list[bytes]]:
        """The slices of the inventory at ``generation`` and their sorted contents, built again
        only when the inventory or the generation changed, one slice per loop step
        (:func:`build_slices_stepwise`)."""
        inventory = self._inventory  # update() may replace it while the slices are built
        key = (inventory, generation, owner["uid"])
        built = self._built
        if built is None or built[0][0] is not inventory or built[0][1:] != key[1:]:
            desired = await build_slices_stepwise(inventory, driver_name=self.driver_name, node_name=self.node_name,
                                                  pool_generation=generation, owner=owner)
            self._built = (key, desired, sorted(slice_content(d["spec"]) for d in desired))
        return self._built[1], self._built[2]

    async def _delete(self, obj: Mapping[str, Any]) -> None:
        assert self._api is not None
        meta = obj["metadata"]
        body = {"apiVersion": "v1", "kind": "DeleteOptions",
                "preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}}
        try:
            await self._api.call("DELETE", f"{RESOURCE_V1}/resourceslices/{meta['name']}", body=body)
        except ApiError as exc:
            if exc.status != 404:
                raise

def _match(existing: list[dict[str, Any]], desired: list[dict[str, Any]]
           ) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Pair existing slices with desired ones: same device-name set first, then one-to-one leftovers
    if exactly one of each remains (as the Go helper). Returns (pairs, obsolete, new)."""
    by_key: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for obj in existing:
        by_key.setdefault(_key(obj["spec"]), []).append(obj)
    pairs, new = [], []
    for obj in desired:
        candidates = by_key.get(_key(obj["spec"]))
        if candidates:
            pairs.append((candidates.pop(), obj))
        else:
            new.append(obj)
    leftovers = [o for objs in by_key.values() for o in objs]
    if len(leftovers) == 1 and len(new) == 1:
        pairs.append((leftovers.pop(), new.pop()))
    return pairs, leftovers, new
