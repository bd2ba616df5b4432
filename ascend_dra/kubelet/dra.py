"""The DRA node service, ``v1.DRAPlugin`` and ``v1beta1.DRAPlugin``, over one implementation.

Thin on purpose (docs/architecture.md#conventions): translate the request into
:class:`~ascend_dra.state.claims.ClaimRef` values, call :class:`~ascend_dra.state.devicestate.DeviceState`, and
build one response entry per requested claim UID: devices on success, ``error`` on failure
(docs/architecture.md#dra-grpc-services, docs/architecture.md#how-the-kubelet-calls). ``request_names`` carry
base request names; ``share_id`` is set only in v1 (kubelet 1.35). An optional status hook (statushook.py) hears
of each claim prepared or unprepared, after the state answered; it queues work and returns, so it never delays
or fails the answer.

Every claim of a call gets one log line: ``prepared claim`` / ``unprepared claim`` at INFO, or
``prepare failed`` / ``unprepare failed`` at WARNING with the error, each with ``claim``
(namespace/name), ``claim_uid``, ``devices`` (pool/device, comma-separated; Prepare) and
``duration_ms`` (of the whole call); a claim prepared on a device its profile reports unhealthy
is a WARNING, ``prepared claim on devices its profile reports unhealthy``, with ``unhealthy`` (the
devices). A call with no claims (the health check's) is answered at once: no log line, no metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from ascend_dra.kubelet._gen.k8s.io.kubelet.pkg.apis.dra import v1, v1beta1
from ascend_dra.model import PreparedDevice
from ascend_dra.state.claims import ClaimRef

__all__ = ("DraV1Service", "DraV1beta1Service", "services")

log = logging.getLogger(__name__)


class _State(Protocol):
    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, list[PreparedDevice] | Exception]: ...
    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, Exception | None]: ...


class _Observer(Protocol):
    def observe(self, operation: str, seconds: float, errors: int, claims: int) -> None: ...
    # and, optionally, unhealthy_devices(names) -> the names its profile reports unhealthy


class _StatusHook(Protocol):
    def after_prepare(self, namespace: str, name: str, uid: str, devices: Sequence[PreparedDevice]) -> None: ...
    def after_unprepare(self, namespace: str, name: str, uid: str) -> None: ...


def _notify(status: _StatusHook | None, refs: Sequence[ClaimRef], results: dict, prepared: bool) -> None:
    if status is None:
        return
    for ref in refs:
        result = results.get(ref.uid)
        if prepared and isinstance(result, list):
            status.after_prepare(ref.namespace, ref.name, ref.uid, result)
        elif not prepared and ref.uid in results and result is None:
            status.after_unprepare(ref.namespace, ref.name, ref.uid)


#: operation -> (the message of a claim done, of a claim that failed).
_MESSAGES = {"prepare": ("prepared claim", "prepare failed"), "unprepare": ("unprepared claim", "unprepare failed")}


def _log_claims(operation: str, refs: Sequence[ClaimRef], results: dict, seconds: float,
                unhealthy: Callable[[Iterable[str]], list[str]] | None = None) -> None:
    """One line per claim. A claim prepared on a device its profile reports unhealthy (allocated
    before the device was tainted or withdrawn, or with ``--unhealthy-devices publish``) is a
    WARNING naming the devices: its containers may fail, and this line is where to look."""
    done, failed = _MESSAGES[operation]
    duration_ms = round(seconds * 1000, 1)
    for ref in refs:
        result = results.get(ref.uid)
        fields: dict[str, object] = {"claim": f"{ref.namespace}/{ref.name}", "claim_uid": ref.uid}
        if isinstance(result, list):
            fields["devices"] = ",".join(f"{d.pool_name}/{d.device_name}" for d in result)
            bad = unhealthy([d.device_name for d in result]) if unhealthy is not None else []
            if bad:
                log.warning("prepared claim on devices its profile reports unhealthy",
                            extra={**fields, "duration_ms": duration_ms, "unhealthy": ",".join(bad)})
                continue
        if isinstance(result, Exception):
            log.warning(failed, extra={**fields, "duration_ms": duration_ms, "error": str(result)})
        else:
            log.info(done, extra={**fields, "duration_ms": duration_ms})


def _refs(claims: Sequence[v1.Claim] | Sequence[v1beta1.Claim]) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


async def _prepare(state: _State, claims, observer: _Observer | None,
                   status: _StatusHook | None = None) -> dict[str, list[PreparedDevice] | Exception]:
    started = time.perf_counter()
    refs = _refs(claims)
    if not refs:  # the health check's call (grpc_health.py): the socket and the loop answer
        return {}
    try:
        results = await state.prepare(refs)
    except Exception as exc:  # a bug must not turn into a gRPC error that hides which claims failed
        log.exception("prepare raised")
        results = {ref.uid: RuntimeError(f"internal error in ascend-dra: {exc}") for ref in refs}
    errors = sum(1 for r in results.values() if isinstance(r, Exception))
    seconds = time.perf_counter() - started
    _log_claims("prepare", refs, results, seconds, getattr(observer, "unhealthy_devices", None))
    if observer is not None:
        observer.observe("prepare", seconds, errors, len(results))
    _notify(status, refs, results, prepared=True)
    return results


async def _unprepare(state: _State, claims, observer: _Observer | None,
                     status: _StatusHook | None = None) -> dict[str, Exception | None]:
    started = time.perf_counter()
    refs = _refs(claims)
    if not refs:
        return {}
    try:
        results = await state.unprepare(refs)
    except Exception as exc:
        log.exception("unprepare raised")
        results = {ref.uid: RuntimeError(f"internal error in ascend-dra: {exc}") for ref in refs}
    errors = sum(1 for r in results.values() if r is not None)
    seconds = time.perf_counter() - started
    _log_claims("unprepare", refs, results, seconds)
    if observer is not None:
        observer.observe("unprepare", seconds, errors, len(results))
    _notify(status, refs, results, prepared=False)
    return results


class DraV1Service(v1.DraPluginBase):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` (kubelet 1.34+)."""

    def __init__(self, state: _State, observer: _Observer | None = None, status: _StatusHook | None = None) -> None:
        self.state = state
        self.observer = observer
        self.status = status

    async def node_prepare_resources(self, message: v1.NodePrepareResourcesRequest) -> v1.NodePrepareResourcesResponse:
        results = await _prepare(self.state, message.claims, self.observer, self.status)
        return v1.NodePrepareResourcesResponse(claims={
            uid: v1.NodePrepareResourceResponse(error=str(r)) if isinstance(r, Exception)
            else v1.NodePrepareResourceResponse(devices=[
                v1.Device(request_names=list(d.request_names), pool_name=d.pool_name, device_name=d.device_name,
                          cdi_device_ids=list(d.cdi_device_ids), share_id=d.share_id)
                for d in r
            ])
            for uid, r in results.items()
        })

    async def node_unprepare_resources(
        self, message: v1.NodeUnprepareResourcesRequest
    ) -> v1.NodeUnprepareResourcesResponse:
        results = await _unprepare(self.state, message.claims, self.observer, self.status)
        return v1.NodeUnprepareResourcesResponse(claims={
            uid: v1.NodeUnprepareResourceResponse(error="" if r is None else str(r)) for uid, r in results.items()
        })


class DraV1beta1Service(v1beta1.DraPluginBase):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``: the same answers without ``share_id``."""

    def __init__(self, state: _State, observer: _Observer | None = None, status: _StatusHook | None = None) -> None:
        self.state = state
        self.observer = observer
        self.status = status

    async def node_prepare_resources(
        self, message: v1beta1.NodePrepareResourcesRequest
    ) -> v1beta1.NodePrepareResourcesResponse:
        results = await _prepare(self.state, message.claims, self.observer, self.status)
        return v1beta1.NodePrepareResourcesResponse(claims={
            uid: v1beta1.NodePrepareResourceResponse(error=str(r)) if isinstance(r, Exception)
            else v1beta1.NodePrepareResourceResponse(devices=[
                v1beta1.Device(request_names=list(d.request_names), pool_name=d.pool_name,
                               device_name=d.device_name, cdi_device_ids=list(d.cdi_device_ids))
                for d in r
            ])
            for uid, r in results.items()
        })

    async def node_unprepare_resources(
        self, message: v1beta1.NodeUnprepareResourcesRequest
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        results = await _unprepare(self.state, message.claims, self.observer, self.status)
        return v1beta1.NodeUnprepareResourcesResponse(claims={
            uid: v1beta1.NodeUnprepareResourceResponse(error="" if r is None else str(r))
            for uid, r in results.items()
        })


def services(state: _State, observer: _Observer | None = None, status: _StatusHook | None = None) -> list[object]:
    """Both DRA service versions, ready for one grpclib server."""
    return [DraV1Service(state, observer, status), DraV1beta1Service(state, observer, status)]
