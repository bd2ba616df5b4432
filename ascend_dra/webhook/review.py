"""AdmissionReview ``admission.k8s.io/v1``: reading a request, writing a response (pure functions).

Source: docs/architecture.md#admission (api 0.35 ``admission/v1/types.go``; the API server's
checks in ``pkg/admission/plugin/webhook/request/admissionreview.go``). The API server rejects a
reply whose ``apiVersion``/``kind`` are not exactly ``admission.k8s.io/v1``/``AdmissionReview`` or
whose ``response.uid`` differs from the request's; a denial's ``status.message`` is what the client
sees after ``admission webhook "<name>" denied the request:``; a code below 400 is coerced to 400.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import orjson

__all__ = (
    "API_VERSION",
    "KIND",
    "MAX_BODY_BYTES",
    "ReviewError",
    "ReviewRequest",
    "allowed",
    "bad_request_status",
    "denied",
    "parse_review",
    "patched",
)

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

#: Largest body we read, in bytes. The API server caps a request body at 3 MiB; an AdmissionReview
#: carries the object (and oldObject on UPDATE), so twice that plus the envelope.
MAX_BODY_BYTES = 8 * 1024 * 1024


class ReviewError(ValueError):
    """Raised by :func:`parse_review` when the body is not a usable AdmissionReview.

    :ivar uid: the request's uid when it could be read (then a proper denial can be sent back),
        else None (the server answers HTTP 400 with a ``metav1.Status`` body).
    :ivar message: what was wrong, naming the field (``request.kind``, ``request.object``, ...).
    """

    def __init__(self, message: str, uid: str | None = None) -> None:
        self.uid = uid
        self.message = message
        super().__init__(message)


@attrs.frozen
class ReviewRequest:
    """The fields of ``AdmissionReview.request`` this webhook uses.

    :ivar uid: ``request.uid``, echoed in the response.
    :ivar group, version, kind: ``request.kind`` (the object's GVK as sent: with matchPolicy
        ``Equivalent`` the API server converts to a version listed in the rules).
    :ivar operation: ``CREATE``, ``UPDATE``, ``DELETE`` or ``CONNECT``.
    :ivar namespace, name: ``request.namespace`` / ``request.name`` (``name`` may be empty with
        ``generateName``).
    :ivar object: ``request.object`` (a JSON object; None on DELETE).
    :ivar old_object: ``request.oldObject`` (UPDATE and DELETE), else None.
    :ivar dry_run: ``request.dryRun``: nothing may be persisted (sideEffects ``NoneOnDryRun``).
    """

    uid: str
    group: str
    version: str
    kind: str
    operation: str
    namespace: str
    name: str
    object: Mapping[str, Any] | None
    dry_run: bool
    old_object: Mapping[str, Any] | None = None


def _text(value: object, field: str, uid: str | None, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ReviewError(f"{field} must be a string, got {type(value).__name__}", uid)
    return value


def parse_review(body: bytes) -> ReviewRequest:
    """Decode an AdmissionReview request body.

    :param body: the HTTP request body (JSON), at most :data:`MAX_BODY_BYTES`.
    :raises ReviewError: naming the first field that is missing or of the wrong type; ``uid`` is
        set once ``request.uid`` was readable.
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"body is not JSON (invalid at character {exc.pos})") from None
    if not isinstance(doc, dict):
        raise ReviewError(f"body must be a JSON object (an AdmissionReview), got {type(doc).__name__}")
    request = doc.get("request")
    if not isinstance(request, dict):
        raise ReviewError("request is missing or not an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid is missing or not a string")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise ReviewError(f"apiVersion/kind {doc.get('apiVersion')!r}/{doc.get('kind')!r} is not "
                          f"{API_VERSION}/{KIND} (set admissionReviewVersions: [v1])", uid)
    gvk = request.get("kind")
    if not isinstance(gvk, dict):
        raise ReviewError("request.kind is missing or not an object", uid)
    obj = request.get("object")
    if obj is not None and not isinstance(obj, dict):
        raise ReviewError(f"request.object must be an object, got {type(obj).__name__}", uid)
    old = request.get("oldObject")
    if old is not None and not isinstance(old, dict):
        raise ReviewError(f"request.oldObject must be an object, got {type(old).__name__}", uid)
    dry_run = request.get("dryRun", False)
    if not isinstance(dry_run, bool | None):
        raise ReviewError(f"request.dryRun must be a boolean, got {type(dry_run).__name__}", uid)
    return ReviewRequest(
        uid=uid,
        group=_text(gvk.get("group", ""), "request.kind.group", uid),
        version=_text(gvk.get("version"), "request.kind.version", uid),
        kind=_text(gvk.get("kind"), "request.kind.kind", uid),
        operation=_text(request.get("operation"), "request.operation", uid),
        namespace=_text(request.get("namespace"), "request.namespace", uid, required=False),
        name=_text(request.get("name"), "request.name", uid, required=False),
        object=obj,
        dry_run=bool(dry_run),
        old_object=old,
    )


def _envelope(response: dict[str, Any]) -> bytes:
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def allowed(uid: str, warnings: Sequence[str] = ()) -> bytes:
    """The response body allowing the request unchanged."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if warnings:
        response["warnings"] = list(warnings)
    return _envelope(response)


def denied(uid: str, message: str, *, code: int = 422, reason: str = "Invalid") -> bytes:
    """The response body denying the request; ``message`` is what the client reads.

    :param code: HTTP code in ``status.code`` (422 Invalid for a wrong object, 400 BadRequest for a
        malformed review, 500 InternalError when the API server failed us); at least 400.
    """
    status = {"status": "Failure", "message": message, "reason": reason, "code": max(code, 400)}
    return _envelope({"uid": uid, "allowed": False, "status": status})


def patched(uid: str, patch: Sequence[Mapping[str, Any]], warnings: Sequence[str] = ()) -> bytes:
    """The response body allowing the request with a JSON Patch (RFC 6902), base64 as the API wants."""
    if not patch:
        return allowed(uid, warnings)
    response: dict[str, Any] = {"uid": uid, "allowed": True, "patchType": "JSONPatch",
                                "patch": base64.b64encode(orjson.dumps(list(patch))).decode()}
    if warnings:
        response["warnings"] = list(warnings)
    return _envelope(response)


def bad_request_status(message: str) -> bytes:
    """A ``metav1.Status`` body for an HTTP 400 answer to a body we could not read a uid from."""
    return orjson.dumps({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "BadRequest",
                         "code": 400, "message": f"malformed AdmissionReview: {message}"})
