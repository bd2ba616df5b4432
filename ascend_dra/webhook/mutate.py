"""``/mutate-pods``: convert a pod's HAMi resources, creating what its new references name.

The plan comes from :func:`ascend_dra.hami.convert.convert_pod`; this module makes it true in the
API server, then answers with the pod's patch:

* claim mode: one ResourceClaim per planned claim, labelled ``hami.io/dra=true`` and
  ``app.kubernetes.io/managed-by=ascend-dra-webhook``, annotated with the pod it was made for. The
  pod's uid does not exist yet, so :mod:`ascend_dra.webhook.owners` sets the pod as the owner once
  the pod is stored (and deletes such a claim whose pod never appeared);
* template mode: one ResourceClaimTemplate per distinct spec, content-named, shared and kept.

``dryRun`` requests create with ``dryRun=All``: the API server checks the objects and stores
nothing, and the patch is still returned (HAMi-DRA does the same, docs/ascend-hardware.md#conversion-rules). When a
create
fails half-way, the claims this call created are deleted before the denial (docs/ascend-hardware.md#conversion-rules
step 7). A claim
that already exists is reused only when this webhook made it for a pod of that name, nobody owns it
yet and its spec is the planned one (the API server called us again for the same pod). One that
HAMi-DRA made before the switch (:mod:`ascend_dra.hami.hamidra`) for an earlier pod of this
name, and that nothing uses any more (no pod names it, nothing in its ``status.reservedFor``), is
deleted (uid and resourceVersion preconditions) and made again as ours; in a dry run it is left as
it is. Any other existing object of that name is left alone and the pod is denied, naming it. A
user's own claims are never touched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from ascend_dra.hami import volcano
from ascend_dra.hami.chips import DEFAULT_CHIPS, HamiChip, chip_names
from ascend_dra.hami.convert import (
    DRA_LABEL,
    MANAGED_BY,
    OPT_OUT_LABEL,
    OPT_OUT_VALUE,
    POD_ANNOTATION,
    ConversionError,
    Mode,
    PlannedClaim,
    PodConversion,
    convert_pod,
    unconverted_resources,
)
from ascend_dra.hami.hamidra import made_by_hami_dra, users_of
from ascend_dra.webhook import review
from ascend_dra.webhook.kubeapi import ApiError, KubeApi
from ascend_dra.webhook.metrics import WebhookMetrics
from ascend_dra.webhook.podupdate import PodUpdates
from ascend_dra.webhook.templatecache import TemplateCache

__all__ = ("PodMutator",)

logger = logging.getLogger(__name__)

RESOURCE_V1 = "/apis/resource.k8s.io/v1"
#: Seconds one API call of a review may take; the webhook configuration allows 10 in all.
CALL_TIMEOUT_S = 4.0
#: Seconds a replaced HAMi-DRA claim may take to go (its finalizer is removed once it is deallocated).
GONE_WITHIN_S = 3.0


class _Refused(Exception):
    def __init__(self, message: str, code: int) -> None:
        self.message = message
        self.code = code
        super().__init__(message)


def _labels() -> dict[str, str]:
    return {DRA_LABEL: "true", MANAGED_BY[0]: MANAGED_BY[1]}


class PodMutator:
    """Answers ``/mutate-pods`` reviews: a pod's or Volcano Job's CREATE, a converted pod's UPDATE
    (:class:`~ascend_dra.webhook.podupdate.PodUpdates`).

    :param api: the API client the claims and templates are created with.
    :param mode: :class:`~ascend_dra.hami.convert.Mode` (``template`` by default).
    :param driver_name: the driver named in the CEL selectors.
    :param chips: the HAMi resources converted and the chips each names (``--hami-device-config``).
    :param metrics: where replaced HAMi-DRA claims are counted; None: not counted (tests).

    :ivar templates: the templates this webhook made that exist now; run :meth:`TemplateCache.run`
        beside the server, or every template-mode admission asks the API server.
    """

    def __init__(self, api: KubeApi, mode: Mode, driver_name: str,
                 chips: tuple[HamiChip, ...] = DEFAULT_CHIPS, metrics: WebhookMetrics | None = None) -> None:
        self.api = api
        self.mode = mode
        self.driver_name = driver_name
        self.chips = chips
        self.metrics = metrics
        self.updates = PodUpdates(api, chips, driver_name)
        self.templates = TemplateCache(api, _same_spec,
                                       on_known=metrics.templates_known.set if metrics is not None else None)

    async def review(self, request: review.ReviewRequest) -> tuple[bytes, str]:
        """Answer one review; returns ``(response body, outcome)`` with outcome ``allowed``,
        ``converted`` or ``denied``."""
        if request.operation == "UPDATE" and (request.group, request.kind) == ("", "Pod"):
            return await self.updates.review(request)
        if request.operation != "CREATE" or request.object is None:
            return review.allowed(request.uid), "allowed"
        if (request.group, request.kind) == ("", "Pod"):
            return await self._review_pod(request)
        if (request.group, request.kind) == (volcano.GROUP, volcano.KIND):
            return await self._review_job(request)
        return review.allowed(request.uid), "allowed"

    def _warnings(self, pod: Mapping[str, Any], prefix: str = "") -> list[str]:
        """Names a HAMi config can define beyond the chip table (or typos): the object passes as
        written and waits for a node that advertises them; the user is told why at once (kubectl
        prints admission warnings)."""
        return [f"{prefix}{entry} is not a HAMi resource this webhook converts (it converts the count, -memory and "
                f"-core of {chip_names(self.chips)}; --hami-device-config gives it a HAMi config's names); "
                "the pod keeps it and waits for a node that advertises it"
                for entry in unconverted_resources(pod, self.chips)]

    async def _review_pod(self, request: review.ReviewRequest) -> tuple[bytes, str]:
        pod = request.object
        assert pod is not None
        metadata = pod.get("metadata") or {}
        if (metadata.get("labels") or {}).get(OPT_OUT_LABEL) == OPT_OUT_VALUE:
            return review.allowed(request.uid), "allowed"
        pod_name = request.name or metadata.get("name") or ""
        shown = f"pod {request.namespace}/{pod_name or str(metadata.get('generateName', '')) + '<generated>'}"
        for_pod = pod_name or f"{metadata.get('generateName', '')}*"
        answer, outcome, conversion = await self._convert(
            request, shown, for_pod, self.mode, self._warnings(pod),
            lambda: convert_pod(pod, request.namespace, mode=self.mode, driver_name=self.driver_name,
                                chips=self.chips))
        if conversion is not None:
            logger.info("pod converted", extra={"pod_namespace": request.namespace, "pod_name": for_pod,
                                                "mode": self.mode.value, "dry_run": request.dry_run,
                                                "objects": [c.object_name for c in conversion.claims]})
        return answer, outcome

    async def _review_job(self, request: review.ReviewRequest) -> tuple[bytes, str]:
        """A Volcano Job: its task templates converted (:mod:`ascend_dra.hami.volcano`), always
        with ResourceClaimTemplates, whatever the pod conversion mode."""
        job = request.object
        assert job is not None
        metadata = job.get("metadata") or {}
        if (metadata.get("labels") or {}).get(OPT_OUT_LABEL) == OPT_OUT_VALUE:
            return review.allowed(request.uid), "allowed"
        name = request.name or metadata.get("name") or f"{metadata.get('generateName', '')}*"
        warnings = [w for index, template in volcano.task_templates(job)
                    for w in self._warnings(template, f"spec.tasks[{index}].template.")]
        answer, outcome, conversion = await self._convert(
            request, f"volcano job {request.namespace}/{name}", name, Mode.TEMPLATE, warnings,
            lambda: volcano.convert_job(job, request.namespace, driver_name=self.driver_name, chips=self.chips),
            also_if_converted=volcano.conversion_warnings(job))
        if conversion is not None:
            logger.info("volcano job converted", extra={"job_namespace": request.namespace, "job_name": name,
                                                        "dry_run": request.dry_run,
                                                        "objects": sorted({c.object_name for c in conversion.claims})})
        return answer, outcome

    async def _convert(self, request: review.ReviewRequest, shown: str, owner: str, mode: Mode,
                       warnings: list[str], plan: Callable[[], PodConversion | None],
                       also_if_converted: list[str] | None = None) -> tuple[bytes, str, PodConversion | None]:
        """Plan, create what the plan names, and answer: ``(body, outcome, the conversion if made)``;
        ``also_if_converted``: warnings given only with a conversion."""
        try:
            conversion = plan()
        except ConversionError as exc:
            problems = "; ".join(f"{path}: {message}" for path, message in exc.problems)
            return review.denied(request.uid, f"{shown}: cannot convert its HAMi resources: {problems}"), "denied", None
        if conversion is None:
            return review.allowed(request.uid, warnings), "allowed", None
        warnings = warnings + [f"{path}: {message}" for path, message in conversion.warnings]
        try:
            await self._create_all(conversion.claims, request.namespace, owner, request.dry_run, mode)
        except _Refused as exc:
            return review.denied(request.uid, f"{shown}: {exc.message}", code=exc.code,
                                 reason="Conflict" if exc.code == 409 else "InternalError"), "denied", None
        return review.patched(request.uid, conversion.patch, warnings + (also_if_converted or [])), "converted", \
            conversion

    def _body(self, claim: PlannedClaim, namespace: str, for_pod: str, mode: Mode) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": claim.object_name, "namespace": namespace, "labels": _labels()}
        if mode is Mode.CLAIM:
            metadata["annotations"] = {POD_ANNOTATION: for_pod}
            return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": metadata,
                    "spec": claim.spec}
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": metadata,
                "spec": {"spec": claim.spec}}

    @staticmethod
    def _collection(namespace: str, mode: Mode) -> str:
        plural = "resourceclaims" if mode is Mode.CLAIM else "resourceclaimtemplates"
        return f"{RESOURCE_V1}/namespaces/{namespace}/{plural}"

    async def _create_all(self, claims: tuple[PlannedClaim, ...], namespace: str, for_pod: str, dry_run: bool,
                          mode: Mode) -> None:
        """Create (or reuse) every object; on failure delete the claims created here, then raise _Refused."""
        created: list[str] = []
        query = {"dryRun": "All"} if dry_run else None
        done: set[str] = set()
        try:
            for claim in claims:
                if claim.object_name in done:
                    continue  # template mode: two containers with the same request share one template
                done.add(claim.object_name)
                if mode is Mode.TEMPLATE:  # shared by every pod of the request: made once (templatecache.py)
                    await self.templates.ensure(namespace, claim.object_name, claim.spec, dry_run,
                                                lambda c=claim: self._create(c, namespace, for_pod, mode, query))
                elif await self._create(claim, namespace, for_pod, mode, query):
                    created.append(claim.object_name)
        except BaseException:
            if mode is Mode.CLAIM and created:
                # Also when the review is cancelled (client gone, shutdown): bounded, shielded.
                with anyio.CancelScope(shield=True), anyio.move_on_after(2 * CALL_TIMEOUT_S):
                    await self._roll_back(created, namespace, mode)
            raise

    async def _create(self, claim: PlannedClaim, namespace: str, for_pod: str, mode: Mode,
                      query: Mapping[str, str] | None) -> bool:
        """POST one object, or accept the existing one (:meth:`_reuse`); returns whether a claim was
        created here (a dry run creates nothing). :raises _Refused: naming the object."""
        try:
            body = self._body(claim, namespace, for_pod, mode)
            await self.api.request("POST", self._collection(namespace, mode), body=body, query=query,
                                   timeout_s=CALL_TIMEOUT_S)
            return query is None
        except ApiError as exc:
            if exc.status != 409:
                raise _Refused(f"creating {self._what(claim, namespace, mode)} failed: {exc}", 500) from None
            return await self._reuse(claim, namespace, for_pod, mode, query is not None)

    @staticmethod
    def _what(claim: PlannedClaim, namespace: str, mode: Mode) -> str:
        kind = "ResourceClaim" if mode is Mode.CLAIM else "ResourceClaimTemplate"
        return f"{kind} {namespace}/{claim.object_name} (for {claim.container})"

    async def _reuse(self, claim: PlannedClaim, namespace: str, for_pod: str, mode: Mode, dry_run: bool) -> bool:
        """Accept an existing object of the planned name only if it is the one we would create, or
        replace a HAMi-DRA claim nothing uses; returns whether a claim was created here."""
        what = self._what(claim, namespace, mode)
        try:
            existing = await self.api.request("GET", f"{self._collection(namespace, mode)}/{claim.object_name}",
                                              timeout_s=CALL_TIMEOUT_S)
        except ApiError as exc:
            raise _Refused(f"{what} exists but cannot be read: {exc}", 500) from None
        metadata: Mapping[str, Any] = existing.get("metadata") or {}
        spec = existing.get("spec") if mode is Mode.CLAIM else (existing.get("spec") or {}).get("spec")
        ours = (metadata.get("labels") or {}).get(MANAGED_BY[0]) == MANAGED_BY[1]
        if not ours and mode is Mode.CLAIM and made_by_hami_dra(existing):
            return await self._replace_hami_dra(existing, claim, namespace, for_pod, dry_run)
        if not ours and not (mode is Mode.CLAIM and metadata.get("ownerReferences")):
            raise _Refused(f"{what} already exists and was not made by this webhook; delete or rename it", 409)
        if mode is Mode.CLAIM:
            if (metadata.get("annotations") or {}).get(POD_ANNOTATION) != for_pod or metadata.get("ownerReferences"):
                owner = ", ".join(f"{o.get('kind')} {o.get('name')} uid {o.get('uid')}"
                                  for o in metadata.get("ownerReferences") or ()) or "no owner"
                raise _Refused(f"{what} already exists and belongs to another pod ({owner}); a deleted pod's claim "
                               "is removed by the garbage collector, retry in a few seconds", 409)
            if metadata.get("deletionTimestamp"):
                raise _Refused(f"{what} is being deleted; retry in a few seconds", 409)
        if not _same_spec(spec, claim.spec):
            raise _Refused(f"{what} already exists with a different spec", 409)
        return False

    async def _replace_hami_dra(self, existing: Mapping[str, Any], claim: PlannedClaim, namespace: str,
                                for_pod: str, dry_run: bool) -> bool:
        """Delete a claim HAMi-DRA made for an earlier pod of this name, if nothing uses it, and create
        ours in its place; returns True once created (False in a dry run, which changes nothing).

        :raises _Refused: (409) something uses it, it changed meanwhile, or it did not go within
            :data:`GONE_WITHIN_S`.
        """
        what = self._what(claim, namespace, Mode.CLAIM)
        metadata = existing["metadata"]
        try:
            listed = await self.api.request("GET", f"/api/v1/namespaces/{namespace}/pods", timeout_s=CALL_TIMEOUT_S)
        except ApiError as exc:
            raise _Refused(f"{what} was made by HAMi-DRA; the pods that may use it cannot be listed: {exc}",
                           500) from None
        users = users_of(existing, listed.get("items") or ())
        if users:
            raise _Refused(f"{what} was made by HAMi-DRA and is still used by {', '.join(users.values())}; "
                           "it is taken over once nothing uses it, retry then", 409)
        if dry_run:
            return False
        path = f"{self._collection(namespace, Mode.CLAIM)}/{claim.object_name}"
        body = {"apiVersion": "v1", "kind": "DeleteOptions",
                "preconditions": {"uid": metadata["uid"], "resourceVersion": metadata["resourceVersion"]}}
        try:
            await self.api.request("DELETE", path, body=body, timeout_s=CALL_TIMEOUT_S)
        except ApiError as exc:
            if exc.status != 404:
                raise _Refused(f"{what} was made by HAMi-DRA and could not be replaced: {exc}; retry", 409) from None
        with anyio.move_on_after(GONE_WITHIN_S):
            while True:
                try:
                    await self.api.request("POST", self._collection(namespace, Mode.CLAIM),
                                           body=self._body(claim, namespace, for_pod, Mode.CLAIM),
                                           timeout_s=CALL_TIMEOUT_S)
                except ApiError as exc:
                    if exc.status != 409:
                        raise _Refused(f"creating {what} failed: {exc}", 500) from None
                    await anyio.sleep(0.2)  # still there: its finalizer goes once it is deallocated
                    continue
                if self.metrics is not None:
                    self.metrics.hami_dra_claims.labels("replaced").inc()
                logger.info("claim made by HAMi-DRA replaced", extra={"claim_namespace": namespace,
                                                                      "claim_name": claim.object_name})
                return True
        raise _Refused(f"{what} was made by HAMi-DRA for an earlier pod of this name and is being deleted; retry "
                       "in a few seconds", 409)

    async def _roll_back(self, names: list[str], namespace: str, mode: Mode) -> None:
        for name in names:
            try:
                await self.api.request("DELETE", f"{self._collection(namespace, mode)}/{name}",
                                       timeout_s=CALL_TIMEOUT_S)
            except ApiError as exc:
                if exc.status != 404:
                    # The owner loop's sweep deletes it later: it has our label and no owner.
                    logger.warning("claim not rolled back", extra={"claim_namespace": namespace, "claim_name": name,
                                                                   "error": str(exc)})


def _same_spec(stored: Any, planned: Mapping[str, Any]) -> bool:
    """Whether the stored spec is the planned one, ignoring fields the API server adds as defaults."""
    if not isinstance(stored, Mapping):
        return False
    try:
        stored_req = stored["devices"]["requests"]
        planned_req = planned["devices"]["requests"]
    except (KeyError, TypeError):
        return False
    if len(stored_req) != len(planned_req):
        return False
    for got, want in zip(stored_req, planned_req, strict=True):
        if got.get("name") != want["name"]:
            return False
        exact, planned_exact = got.get("exactly") or {}, want["exactly"]
        if any(exact.get(k) != v for k, v in planned_exact.items()):
            return False
    return True
