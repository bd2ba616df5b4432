"""The owner loop: each direct claim made by the webhook gets its pod as owner once the pod exists.

At admission the pod has no uid yet, so a claim cannot name it as owner (this is why HAMi-DRA's
claims leak when its webhook is down at pod deletion, docs/ascend-hardware.md#deletion-on-pod-delete). This loop, run
in the
webhook process, closes the gap:

* it lists and then watches pods labelled ``hami.io/dra=true``; for each ``spec.resourceClaims[]``
  entry with a ``resourceClaimName`` whose claim carries our ``managed-by`` label and no owner, it
  sets ``ownerReferences: [{Pod, name, uid, controller: true, blockOwnerDeletion: true}]`` (a merge
  patch with the claim's ``resourceVersion`` as precondition). From then on the garbage collector in
  kube-controller-manager deletes the claim with the pod, whether the webhook runs or not;
* every ``sweep_interval_s`` (and at start) it lists our claims that still have no owner: one that a
  pod references is adopted; one older than ``grace_s`` that no pod references (the pod was
  refused after our review, or deleted while no webhook ran) is deleted with ``uid`` and
  ``resourceVersion`` preconditions. Claims without our label, such as a user's own, are never
  touched.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

import anyio
from anyio.abc import TaskStatus

from ascend_dra.hami.chips import DEFAULT_CHIPS, HamiChip
from ascend_dra.hami.convert import DRA_LABEL, MANAGED_BY, POD_ANNOTATION
from ascend_dra.hami.hamidra import follows_hami_dra_rule, made_by_hami_dra, users_of
from ascend_dra.webhook.kubeapi import ApiError, KubeApi
from ascend_dra.webhook.metrics import WebhookMetrics

__all__ = ("OwnerLoop",)

logger = logging.getLogger(__name__)

PODS = "/api/v1/pods"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"


def _claim_path(namespace: str, name: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"


def _references(pod: Mapping[str, Any]) -> list[str]:
    return [c["resourceClaimName"] for c in (pod.get("spec") or {}).get("resourceClaims") or ()
            if isinstance(c, Mapping) and isinstance(c.get("resourceClaimName"), str)]


def _made_for(claim_metadata: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether the claim's pod annotation (``<name>`` or ``<generateName>*``) fits this pod."""
    wanted = str((claim_metadata.get("annotations") or {}).get(POD_ANNOTATION, ""))
    name = str(pod["metadata"].get("name", ""))
    return name == wanted or (wanted.endswith("*") and name.startswith(wanted[:-1]))


def owner_reference(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference naming ``pod`` as the controller of a claim."""
    return {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


class OwnerLoop:
    """Sets pods as owners of the webhook's direct claims, and removes those no pod came for.

    :param grace_s: seconds an ownerless claim may wait for its pod before the sweep deletes it;
        well above a review's 10 s timeout plus the pod's own admission.
    :param sweep_interval_s: seconds between sweeps; default ``min(30, grace_s / 2)``.
    :param chips: the commonWords whose HAMi-DRA claim names are recognised (the webhook's table).
    """

    def __init__(self, api: KubeApi, metrics: WebhookMetrics, *, grace_s: float = 60.0,
                 sweep_interval_s: float | None = None, chips: tuple[HamiChip, ...] = DEFAULT_CHIPS) -> None:
        self.api = api
        self.metrics = metrics
        self.chips = chips
        self.grace_s = grace_s
        self.sweep_interval_s = sweep_interval_s if sweep_interval_s is not None else min(30.0, grace_s / 2)
        self._owned: set[tuple[str, str]] = set()  # claims settled: owned, or never ours to own

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """List, report started, then watch and sweep until cancelled. API errors are retried."""
        while True:
            try:
                resource_version: str | None = await self._list_and_adopt()
                await self.sweep()
                break
            except ApiError as exc:
                logger.warning("first pod list failed, retrying", extra={"error": str(exc)})
                await anyio.sleep(2.0)
        task_status.started()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._sweep_forever)
            while True:
                try:
                    if resource_version is not None:
                        resource_version = await self._watch(resource_version)
                except ApiError as exc:
                    logger.warning("pod watch failed, listing again", extra={"error": str(exc)})
                    await anyio.sleep(1.0)
                    resource_version = None
                if resource_version is None:
                    try:
                        resource_version = await self._list_and_adopt()
                    except ApiError as exc:
                        logger.warning("pod list failed", extra={"error": str(exc)})
                        await anyio.sleep(2.0)

    async def _list_and_adopt(self) -> str:
        doc = await self.api.request("GET", PODS, query={"labelSelector": f"{DRA_LABEL}=true"})
        for pod in doc.get("items") or ():
            await self.adopt(pod)
        return str(doc["metadata"]["resourceVersion"])

    async def _watch(self, resource_version: str) -> str | None:
        """Watch from ``resource_version``; returns where to go on, None when a relist is needed."""
        query = {"labelSelector": f"{DRA_LABEL}=true", "resourceVersion": resource_version, "timeoutSeconds": "300"}
        async for event in self.api.watch(PODS, query):
            obj = event.get("object") or {}
            if event.get("type") == "ERROR":
                return None  # 410 Gone: the version is too old
            resource_version = (obj.get("metadata") or {}).get("resourceVersion", resource_version)
            if event.get("type") in ("ADDED", "MODIFIED"):
                await self.adopt(obj)
            elif event.get("type") == "DELETED":
                namespace = obj.get("metadata", {}).get("namespace", "")
                self._owned.difference_update({(namespace, n) for n in _references(obj)})
        return resource_version

    async def adopt(self, pod: Mapping[str, Any]) -> None:
        """Make ``pod`` the owner of each of its referenced claims that is ours and has no owner."""
        metadata = pod.get("metadata") or {}
        namespace = metadata.get("namespace", "")
        if not metadata.get("uid") or metadata.get("deletionTimestamp"):
            return
        for name in _references(pod):
            if (namespace, name) in self._owned:
                continue
            try:
                claim = await self.api.request("GET", _claim_path(namespace, name))
            except ApiError as exc:
                if exc.status != 404:
                    logger.warning("claim not readable", extra={"claim_namespace": namespace, "claim_name": name,
                                                                "error": str(exc)})
                continue
            await self._set_owner(claim, pod)

    async def _set_owner(self, claim: Mapping[str, Any], pod: Mapping[str, Any]) -> None:
        metadata = claim.get("metadata") or {}
        key = (metadata.get("namespace", ""), metadata.get("name", ""))
        if (metadata.get("labels") or {}).get(MANAGED_BY[0]) != MANAGED_BY[1]:
            if made_by_hami_dra(claim) and self._named_as_hami_dra_names_it(key, pod):
                await self._adopt_hami_dra(claim, pod)
            else:
                self._owned.add(key)  # a user's claim: never ours to own or delete
            return
        if metadata.get("ownerReferences"):
            self._owned.add(key)
            return
        if not _made_for(metadata, pod):
            return  # another pod points at a claim made for someone else: no adoption
        patch = {"metadata": {"ownerReferences": [owner_reference(pod)],
                              "resourceVersion": metadata.get("resourceVersion")}}
        try:
            await self.api.request("PATCH", _claim_path(*key), body=patch, content_type="application/merge-patch+json")
        except ApiError as exc:
            if exc.status == 409:
                # Changed meanwhile (another replica set the owner, say): the next event or sweep looks again.
                logger.debug("claim changed before its owner was set", extra={"claim_namespace": key[0],
                                                                             "claim_name": key[1]})
                return
            self.metrics.owner_updates.labels("error").inc()
            logger.warning("claim owner not set", extra={"claim_namespace": key[0], "claim_name": key[1],
                                                         "error": str(exc)})
            return
        self._owned.add(key)
        self.metrics.owner_updates.labels("ok").inc()
        logger.info("claim owned by its pod", extra={"claim_namespace": key[0], "claim_name": key[1],
                                                     "pod_uid": pod["metadata"]["uid"]})

    def _named_as_hami_dra_names_it(self, key: tuple[str, str], pod: Mapping[str, Any]) -> bool:
        """Whether ``pod`` names the claim as HAMi-DRA's conversion does: a pod claim entry of the
        claim's own name, and the name HAMi-DRA gives one of its containers' claims."""
        namespace, name = key
        entries = (pod.get("spec") or {}).get("resourceClaims") or ()
        return any(isinstance(e, Mapping) and e.get("name") == name == e.get("resourceClaimName") for e in entries) \
            and follows_hami_dra_rule(name, pod, namespace, self.chips)

    async def _adopt_hami_dra(self, claim: Mapping[str, Any], pod: Mapping[str, Any]) -> None:
        """Make ``pod`` the owner of a claim HAMi-DRA made for it, unless something else uses it."""
        metadata = claim["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        try:
            listed = await self.api.request("GET", f"/api/v1/namespaces/{namespace}/pods")
        except ApiError as exc:
            logger.warning("pods not listed, claim made by HAMi-DRA not adopted yet", extra={
                "claim_namespace": namespace, "claim_name": name, "error": str(exc)})
            return
        others = {uid: user for uid, user in users_of(claim, listed.get("items") or ()).items()
                  if uid != pod["metadata"]["uid"]}
        if others:
            self._owned.add((namespace, name))  # shared: not one pod's to delete with it
            logger.info("claim made by HAMi-DRA not adopted: used by another pod",
                        extra={"claim_namespace": namespace, "claim_name": name, "users": ", ".join(others.values())})
            return
        patch = {"metadata": {"ownerReferences": [owner_reference(pod)],
                              "resourceVersion": metadata.get("resourceVersion")}}
        try:
            await self.api.request("PATCH", _claim_path(namespace, name), body=patch,
                                   content_type="application/merge-patch+json")
        except ApiError as exc:
            if exc.status != 409:  # 409: changed meanwhile; the next event or list looks again
                self.metrics.owner_updates.labels("error").inc()
                logger.warning("claim owner not set", extra={"claim_namespace": namespace, "claim_name": name,
                                                             "error": str(exc)})
            return
        self._owned.add((namespace, name))
        self.metrics.hami_dra_claims.labels("adopted").inc()
        logger.info("claim made by HAMi-DRA adopted by its pod", extra={
            "claim_namespace": namespace, "claim_name": name, "pod_uid": pod["metadata"]["uid"]})

    async def _sweep_forever(self) -> None:
        while True:
            await anyio.sleep(self.sweep_interval_s)
            try:
                await self.sweep()
            except ApiError as exc:
                logger.warning("claim sweep failed", extra={"error": str(exc)})

    async def sweep(self) -> None:
        """Adopt or delete every claim of ours that has no owner (see the module docstring)."""
        label = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"
        doc = await self.api.request("GET", CLAIMS, query={"labelSelector": label})
        now = dt.datetime.now(dt.UTC)
        pods_by_namespace: dict[str, list[Mapping[str, Any]]] = {}
        for claim in doc.get("items") or ():
            metadata = claim.get("metadata") or {}
            if metadata.get("ownerReferences") or metadata.get("deletionTimestamp"):
                continue
            namespace, name = metadata["namespace"], metadata["name"]
            if namespace not in pods_by_namespace:
                listed = await self.api.request("GET", f"/api/v1/namespaces/{namespace}/pods",
                                                query={"labelSelector": f"{DRA_LABEL}=true"})
                pods_by_namespace[namespace] = listed.get("items") or []
            pod = next((p for p in pods_by_namespace[namespace] if name in _references(p)), None)
            if pod is not None:
                await self._set_owner(claim, pod)
                continue
            created = dt.datetime.fromisoformat(metadata["creationTimestamp"].replace("Z", "+00:00"))
            if (now - created).total_seconds() < self.grace_s:
                continue
            await self._delete_orphan(metadata)

    async def _delete_orphan(self, metadata: Mapping[str, Any]) -> None:
        namespace, name = metadata["namespace"], metadata["name"]
        body = {"apiVersion": "v1", "kind": "DeleteOptions",
                "preconditions": {"uid": metadata["uid"], "resourceVersion": metadata["resourceVersion"]}}
        try:
            await self.api.request("DELETE", _claim_path(namespace, name), body=body)
        except ApiError as exc:
            if exc.status not in (404, 409):
                logger.warning("orphaned claim not deleted", extra={"claim_namespace": namespace, "claim_name": name,
                                                                    "error": str(exc)})
            return
        self.metrics.orphans_deleted.inc()
        logger.info("orphaned claim deleted: no pod references it",
                    extra={"claim_namespace": namespace, "claim_name": name})
