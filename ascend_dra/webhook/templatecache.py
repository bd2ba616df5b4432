"""The ResourceClaimTemplates this webhook made, as they exist now: admissions in template mode skip
the API server for a template it already holds.

In template mode every converted pod of one request names the same content-named template
(:mod:`ascend_dra.webhook.mutate`). Creating it at every admission costs a POST (409 once it exists)
and a GET to check what is there: two API calls inside each review, a thousand when a Deployment of
500 pods is created at once, and past the review's time budget (``CALL_TIMEOUT_S``, a pool of 32
connections) the webhook must deny pods. So:

* **a list and a watch** of the ResourceClaimTemplates labelled ``app.kubernetes.io/managed-by=
  ascend-dra-webhook``, in every namespace, keep ``{(namespace, name): claim spec}`` of those that
  exist and are not being deleted. Only what the watch reports goes in (never an answer of our own
  POST, which a deletion may already have overtaken), and nothing is trusted while the watch is
  down (between a failed watch and the next complete list): then every admission asks the API server;
* **one creation at a time per template**: admissions that need the same template while one of
  them is creating it wait for that one, and take its outcome when it succeeded (a failure is tried
  again by the next waiter, with its own time budget).

A template deleted by hand is forgotten when the watch reports it (milliseconds); the next admission
makes it again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import attrs
from anyio.abc import TaskStatus

from ascend_dra.hami.convert import MANAGED_BY
from ascend_dra.webhook.kubeapi import ApiError, KubeApi

__all__ = ("TEMPLATES", "TemplateCache")

logger = logging.getLogger(__name__)

#: The ResourceClaimTemplates of every namespace (resource.k8s.io/v1).
TEMPLATES = "/apis/resource.k8s.io/v1/resourceclaimtemplates"

SameSpec = Callable[[Any, Mapping[str, Any]], bool]


@attrs.define
class _Creation:
    """One admission's creation of a template, which others of the same template wait for."""

    spec: Mapping[str, Any]
    done: anyio.Event = attrs.Factory(anyio.Event)
    succeeded: bool = False


class TemplateCache:
    """The webhook's templates that exist now (module docstring).

    :param same_spec: ``(stored claim spec, planned claim spec) -> bool``: whether a stored
        template serves the planned request (fields the API server defaults are ignored).
    :param on_known: called with the number of templates held after each change (a gauge).
    """

    def __init__(self, api: KubeApi, same_spec: SameSpec, on_known: Callable[[int], None] | None = None) -> None:
        self.api = api
        self.same_spec = same_spec
        self.on_known = on_known
        self._known: dict[tuple[str, str], Any] = {}
        self._synced = False
        self._creating: dict[tuple[str, str, bool], _Creation] = {}

    def holds(self, namespace: str, name: str, spec: Mapping[str, Any]) -> bool:
        """Whether the template ``namespace/name`` exists, is ours and serves ``spec`` (the claim
        spec, ``spec.spec`` of the template), as the watch last reported; False while it is down."""
        return self._synced and (namespace, name) in self._known \
            and self.same_spec(self._known[(namespace, name)], spec)

    async def ensure(self, namespace: str, name: str, spec: Mapping[str, Any], dry_run: bool,
                     create: Callable[[], Awaitable[None]]) -> None:
        """Make sure the template exists: return at once if :meth:`holds`; else wait for another
        admission creating it (same name, spec and dry-run) and take its success; else run ``create``
        (which POSTs, and checks an existing one). Its exceptions pass through."""
        key = (namespace, name, dry_run)
        while True:
            if self.holds(namespace, name, spec):
                return
            other = self._creating.get(key)
            if other is None:
                break
            await other.done.wait()
            if other.succeeded and self.same_spec(other.spec, spec):
                return
        mine = self._creating[key] = _Creation(spec)
        try:
            await create()
            mine.succeeded = True
        finally:
            del self._creating[key]
            mine.done.set()

    # -- the list and the watch ----------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """List, report started (also when the first list failed: admissions then ask the API
        server), then watch until cancelled, listing again whenever the watch fails or expires."""
        started = False
        resource_version: str | None = None
        while True:
            if resource_version is None:
                try:
                    resource_version = await self._list()
                except ApiError as exc:
                    logger.warning("listing our ResourceClaimTemplates failed; admissions ask the API server "
                                   "until a list succeeds", extra={"error": str(exc)})
            if not started:
                task_status.started()
                started = True
            if resource_version is None:
                await anyio.sleep(2.0)
                continue
            try:
                resource_version = await self._watch(resource_version)
            except ApiError as exc:
                logger.warning("the watch of our ResourceClaimTemplates failed, listing again",
                               extra={"error": str(exc)})
                resource_version = None
            if resource_version is None:
                self._synced = False
                await anyio.sleep(1.0)

    def _selector(self) -> dict[str, str]:
        return {"labelSelector": f"{MANAGED_BY[0]}={MANAGED_BY[1]}"}

    async def _list(self) -> str:
        doc = await self.api.request("GET", TEMPLATES, query=self._selector())
        self._known = {}
        for item in doc.get("items") or ():
            self._apply("ADDED", item)
        self._synced = True
        self._changed()
        return str(doc["metadata"]["resourceVersion"])

    async def _watch(self, resource_version: str) -> str | None:
        """Watch from ``resource_version``; returns where to go on, None when a list is needed."""
        query = {**self._selector(), "resourceVersion": resource_version, "timeoutSeconds": "300"}
        async for event in self.api.watch(TEMPLATES, query):
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                return None  # 410 Gone: the version is too old
            resource_version = (obj.get("metadata") or {}).get("resourceVersion", resource_version)
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(kind, obj)
                self._changed()
        return resource_version

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        if kind == "DELETED" or metadata.get("deletionTimestamp"):
            self._known.pop(key, None)
        else:
            self._known[key] = (obj.get("spec") or {}).get("spec")

    def _changed(self) -> None:
        if self.on_known is not None:
            self.on_known(len(self._known))
