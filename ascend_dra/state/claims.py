"""Where allocated ResourceClaims come from, and how one is reduced to a :class:`ClaimAllocation`.

Two claim sources: the API server (cluster mode; ``GET`` of ``resource.k8s.io/v1``
ResourceClaims, as the Go helper does before calling the driver, docs/architecture.md#what-the-go-helper-does)
and, in standalone mode, ``DIR/claims/<namespace>/<name>.yaml`` holding exactly what
``kubectl get resourceclaim -o yaml`` prints, ``status.allocation`` included.

Claim UIDs, names and namespaces are checked by :func:`check_claim_ref` before they are used in
a path or a CDI name (docs/architecture.md#durable-state).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import attrs
import yaml

from ascend_dra.cdi.naming import COMMON_DEVICE
from ascend_dra.model import AllocatedDevice, ClaimAllocation, OpaqueConfig

__all__ = (
    "POD_CLAIM_NAME_ANNOTATION",
    "ClaimError",
    "ClaimGone",
    "ClaimRef",
    "ClaimSource",
    "ClaimUnreadable",
    "PrepareError",
    "StandaloneClaimSource",
    "check_claim_ref",
    "parse_claim",
    "unique_refs",
    "why_gone",
)

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: The annotation the claim controller puts on a claim it makes from a ResourceClaimTemplate: the
#: pod's ``spec.resourceClaims[].name`` (k8s.io/api ``resource/v1`` ``PodResourceClaimAnnotation``).
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
#: Bytes of one file name (NAME_MAX on Linux): a standalone claim file is ``<name>.yaml``.
_MAX_FILE_NAME = 255

#: DNS-1123 subdomain (names) / label (namespaces); UIDs are RFC 4122 UUIDs in practice but we
#: accept any DNS-1123-ish token: letters, digits, '-', '.' with no '/', '..' or NUL. Not '_' and not
#: 'common': the uid ends the claim's CDI spec file name, ``<vendor>-<class>_<uid>.yaml`` (cdi/naming.py),
#: and with either it could name the common spec or another kind's claim spec.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_UID = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


@attrs.frozen
class ClaimRef:
    """A claim as the kubelet names it in ``NodePrepareResourcesRequest.claims[]``."""

    namespace: str
    name: str
    uid: str


class PrepareError(Exception):
    """Raised for one claim when it cannot be prepared or unprepared; the message goes to the kubelet as is."""


class ClaimError(Exception):
    """Raised when a claim cannot be prepared: missing, unparsable, not allocated, replaced, unsafe.

    The message is what the kubelet shows in the pod's events; it names the claim and the field.
    """


class ClaimGone(ClaimError):
    """The claim is not there to prepare: it does not exist, another claim took its name, or it is
    not allocated (or not reserved for any pod)."""


class ClaimUnreadable(ClaimError):
    """The claim could not be read now (the API server unreachable or failing, a file unreadable):
    nothing is known about it, and a later try may succeed."""


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: ``line L, column C: <problem> (<context>)``, e.g. ``line 2, column 1:
    did not find expected node content (while parsing a flow node)``; its own ``str`` spans three
    lines and names the input ``"<unicode string>"``."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        return " ".join(str(exc).split())
    context = getattr(exc, "context", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" + (f" ({context})" if context else "")


def check_claim_ref(namespace: str, name: str, uid: str, *, uid_recorded: bool = False) -> None:
    """Refuse identifiers that could escape a directory or break a CDI name.

    :param uid_recorded: the uid names a record of the checkpoint, accepted when it was prepared
        (perhaps by an older release's rule): only the namespace and name are checked.
    :raises ClaimError: if the namespace is not a DNS label (≤ 63), the name not a DNS subdomain
        (≤ 253), or the uid contains anything but letters, digits, ``-``, ``.`` (≤ 253), which rules
        out ``/``, ``..`` and NUL, or is ``common`` (see ``_UID``).
    """
    if not (0 < len(namespace) <= 63 and _NAMESPACE.fullmatch(namespace)):
        raise ClaimError(f"claim namespace {namespace!r} is not a DNS label (lower-case letters, digits, '-'; "
                         "at most 63 characters)")
    if not (0 < len(name) <= 253 and _NAME.fullmatch(name) and ".." not in name):
        raise ClaimError(f"claim name {name!r} is not a DNS subdomain (lower-case letters, digits, '-', '.'; "
                         "at most 253 characters)")
    if uid_recorded:
        return
    if not (0 < len(uid) <= 253 and _UID.fullmatch(uid) and ".." not in uid and uid != COMMON_DEVICE):
        raise ClaimError(f"claim uid {uid!r} must be letters, digits, '-' or '.' (no '/', '..', '_' or NUL), "
                         f"at most 253 characters, and not {COMMON_DEVICE!r}")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` as a mapping (None: empty). :raises ClaimError: naming ``where``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ClaimError(f"{where} must be an object, not {type(value).__name__} {value!r:.60}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    """``value`` as a list (None: empty). :raises ClaimError: naming ``where``."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ClaimError(f"{where} must be a list, not {type(value).__name__} {value!r:.60}")
    return value


def _quantity(value: Any, where: str) -> str:
    """A Quantity as its string (the API server's form); a plain number from a hand-written claim
    file is taken as that number. :raises ClaimError: anything else, naming ``where``."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ClaimError(f"{where} must be a Quantity string (e.g. \"4Gi\", \"10\"), not {value!r:.60}")


_Ref = TypeVar("_Ref", bound="_HasUid")


class _HasUid(Protocol):
    @property
    def uid(self) -> str: ...


def unique_refs(refs: Sequence[_Ref]) -> list[_Ref]:
    """``refs`` with each uid once (its first mention): a uid named twice in one call is one claim,
    prepared or unprepared once (twice, the second Unprepare of it failed the whole call)."""
    seen: dict[str, _Ref] = {}
    for ref in refs:
        seen.setdefault(ref.uid, ref)
    return list(seen.values())


def parse_claim(obj: Any, driver_name: str, *, uid_recorded: bool = False) -> ClaimAllocation:
    """Reduce a ResourceClaim object (``resource.k8s.io/v1`` JSON) to what our driver prepares.

    Only ``status.allocation.devices.results`` and ``.config`` entries for ``driver_name`` are kept.
    Every field read is checked for its API type: the API server guarantees them, a hand-written
    standalone claim file does not, and a wrong type must not change what is prepared (a string
    ``adminAccess: "false"`` read as true skipped the guard; ``requests: npu`` became three requests).

    :param uid_recorded: its uid names a checkpoint record (see :func:`check_claim_ref`).
    :raises ClaimError: if the object is not a ResourceClaim, lacks metadata, is not allocated, or
        a field has the wrong type (the message names the field).
    """
    if not isinstance(obj, Mapping) or obj.get("kind") not in (None, "ResourceClaim"):
        raise ClaimError(f"not a ResourceClaim object (kind {obj.get('kind') if isinstance(obj, Mapping) else None!r})")
    meta = _mapping(obj.get("metadata"), "metadata")
    ident = {}
    for key in ("namespace", "name", "uid"):
        value = meta.get(key) or ""
        if not isinstance(value, str):
            raise ClaimError(f"metadata.{key} must be a string, not {value!r:.60}")
        ident[key] = value
    namespace, name, uid = ident["namespace"], ident["name"], ident["uid"]
    check_claim_ref(namespace, name, uid, uid_recorded=uid_recorded)
    ref = f"ResourceClaim {namespace}/{name}"
    annotations = _mapping(meta.get("annotations"), f"{ref}: metadata.annotations")
    pod_claim_name = annotations.get(POD_CLAIM_NAME_ANNOTATION)
    if pod_claim_name is not None and not isinstance(pod_claim_name, str):
        raise ClaimError(f"{ref}: metadata.annotations[{POD_CLAIM_NAME_ANNOTATION!r}] must be a string, not "
                         f"{pod_claim_name!r:.60}")
    status = _mapping(obj.get("status"), f"{ref}: status")
    allocation = _mapping(status.get("allocation"), f"{ref}: status.allocation")
    if not allocation:
        raise ClaimGone(f"{ref} is not allocated (status.allocation is empty)")
    devices = _mapping(allocation.get("devices"), f"{ref}: status.allocation.devices")
    results = []
    for i, result in enumerate(_list(devices.get("results"), f"{ref}: status.allocation.devices.results")):
        where = f"{ref}: status.allocation.devices.results[{i}]"
        result = _mapping(result, where)
        if result.get("driver") != driver_name:
            continue
        for key in ("request", "pool", "device"):
            if not isinstance(result.get(key), str) or not result.get(key):
                raise ClaimError(f"{where}.{key} is missing")
        share_id = result.get("shareID")
        if share_id is not None and (not isinstance(share_id, str) or not share_id):
            raise ClaimError(f"{where}.shareID must be a non-empty string, not {share_id!r:.60}")
        admin = result.get("adminAccess")
        if admin is not None and not isinstance(admin, bool):
            raise ClaimError(f"{where}.adminAccess must be true or false, not {admin!r:.60}")
        consumed = _mapping(result.get("consumedCapacity"), f"{where}.consumedCapacity")
        results.append(
            AllocatedDevice(
                request=result["request"],
                driver=driver_name,
                pool=result["pool"],
                device=result["device"],
                share_id=share_id,
                consumed_capacity={str(k): _quantity(v, f"{where}.consumedCapacity.{k}") for k, v in consumed.items()},
                admin_access=bool(admin),
            )
        )
    configs = []
    for i, config in enumerate(_list(devices.get("config"), f"{ref}: status.allocation.devices.config")):
        where = f"{ref}: status.allocation.devices.config[{i}]"
        config = _mapping(config, where)
        opaque = _mapping(config.get("opaque"), f"{where}.opaque")
        if opaque.get("driver") != driver_name:
            continue
        source = config.get("source")
        if source not in ("FromClass", "FromClaim"):
            raise ClaimError(f"{where}.source {source!r} is not FromClass or FromClaim")
        requests = _list(config.get("requests"), f"{where}.requests")
        if not all(isinstance(r, str) and r for r in requests):
            raise ClaimError(f"{where}.requests must be a list of request names, not {requests!r:.60}")
        configs.append(
            OpaqueConfig(
                source=source,
                requests=tuple(requests),
                driver=driver_name,
                parameters=opaque.get("parameters") or {},
                index=i,
            )
        )
    consumers = [_mapping(r, f"{ref}: status.reservedFor[{i}]")
                 for i, r in enumerate(_list(status.get("reservedFor"), f"{ref}: status.reservedFor"))]
    pods = tuple(c["name"] for c in consumers
                 if c.get("resource") == "pods" and not c.get("apiGroup") and isinstance(c.get("name"), str))
    return ClaimAllocation(uid, namespace, name, tuple(results), tuple(configs),
                           tuple(c.get("uid", "") for c in consumers), pods, pod_claim_name or None)


class ClaimSource(Protocol):
    """Fetches the current object of a claim named by the kubelet."""

    async def get(self, namespace: str, name: str, uid: str, *, uid_recorded: bool = False) -> ClaimAllocation:
        """Return the allocated claim; raise :class:`ClaimError` if it cannot be prepared.

        :param uid_recorded: ``uid`` names a checkpoint record (see :func:`check_claim_ref`)."""

    async def gone(self, namespace: str, name: str, uid: str, pool: str) -> str | None:
        """Why the prepared claim ``uid`` is no longer there to use its devices of ``pool`` (this
        node's): deleted, replaced under its name, deallocated or allocated on another node; None
        when it still is, or that cannot be told now. Never raises."""


class StandaloneClaimSource:
    """Claims from ``<root>/<namespace>/<name>.yaml`` (standalone mode, docs/architecture.md#standalone-mode).

    :param root: the claims directory (``DIR/claims``).
    """

    def __init__(self, root: Path, driver_name: str) -> None:
        self.root = root
        self.driver_name = driver_name

    def path(self, namespace: str, name: str) -> Path:
        return self.root / namespace / f"{name}.yaml"

    async def get(self, namespace: str, name: str, uid: str, *, uid_recorded: bool = False) -> ClaimAllocation:
        """Read and parse the claim file; its ``metadata.uid`` must equal ``uid``.

        :raises ClaimError: file missing or unparsable, not allocated, or a different uid.
        """
        check_claim_ref(namespace, name, uid, uid_recorded=uid_recorded)
        if len(name) > _MAX_FILE_NAME - len(".yaml"):
            raise ClaimError(f"ResourceClaim {namespace}/{name}: a standalone claim file name holds at most "
                             f"{_MAX_FILE_NAME - len('.yaml')} characters before '.yaml' (a file name is at most "
                             f"{_MAX_FILE_NAME} bytes); this name has {len(name)}")
        path = self.path(namespace, name)
        try:
            text = path.read_text()  # a small local file: a worker thread would cost more than the read
        except FileNotFoundError:
            raise ClaimGone(f"ResourceClaim {namespace}/{name}: claim file {path} does not exist") from None
        except OSError as exc:
            raise ClaimUnreadable(f"ResourceClaim {namespace}/{name}: cannot read {path}: {exc.strerror}") from None
        try:
            obj = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError as exc:
            raise ClaimError(f"ResourceClaim {namespace}/{name}: {path} is not valid YAML: {yaml_problem(exc)}") \
                from None
        claim = parse_claim(obj, self.driver_name, uid_recorded=uid_recorded)
        if (claim.namespace, claim.name) != (namespace, name):
            raise ClaimError(f"ResourceClaim {namespace}/{name}: {path} holds {claim.namespace}/{claim.name}")
        if claim.uid != uid:
            raise ClaimGone(f"ResourceClaim {namespace}/{name}: uid {uid} was requested but the claim has uid "
                             f"{claim.uid} (it got replaced)")
        return claim

    async def gone(self, namespace: str, name: str, uid: str, pool: str) -> str | None:
        """:meth:`ClaimSource.gone`: the claim file is missing, names another uid, or is not
        allocated here."""
        path = self.path(namespace, name)
        try:
            obj = yaml.load(path.read_text(), Loader=_Loader)
        except FileNotFoundError:
            return f"has no claim file any more ({path})"
        except (OSError, ValueError, yaml.YAMLError):
            return None
        return why_gone(obj, uid, self.driver_name, pool)


def why_gone(obj: Any, uid: str, driver_name: str, pool: str) -> str | None:
    """The reason of :meth:`ClaimSource.gone` for a claim object read under the prepared claim's
    name (a ResourceClaim as JSON or YAML); None when it is that claim, allocated devices of
    ``driver_name`` in ``pool``."""
    if not isinstance(obj, Mapping):
        return None
    found = (obj.get("metadata") or {}).get("uid")
    if found != uid:
        return f"was deleted (the name now belongs to a claim with uid {found})"
    allocation = (obj.get("status") or {}).get("allocation")
    if not allocation:
        return "is not allocated any more (status.allocation is empty)"
    results = ((allocation.get("devices") or {}).get("results") or []) if isinstance(allocation, Mapping) else []
    pools = sorted({r.get("pool") for r in results if isinstance(r, Mapping) and r.get("driver") == driver_name})
    if pools and pool not in pools:
        return f"is allocated on another node now (pool {', '.join(map(str, pools))})"
    return None
