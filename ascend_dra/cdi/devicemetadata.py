"""Device metadata for pods (KEP-5304, "DRA Device Attributes Downward API"): the file a container reads
to learn about its devices without API access, and where it is on the host and in the container.

The protocol is the driver's alone, with no kubelet feature gate: the driver writes a JSON file on the
host and a CDI device whose only edit bind-mounts it read-only into the container; the kubelet hands
that CDI device to the runtime as it hands any other the Prepare answer names. Facts from
k8s.io/dynamic-resource-allocation (``api/metadata/doc.go``, ``types.go``, ``helpers.go``,
``v1alpha1/types.go``; ``kubeletplugin/metadata.go`` for what the Go helper writes):

* in the container, ``/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim name>/
  <request>/<driver>-metadata.json`` for a claim the pod names (``resourceClaimName``), and
  ``.../resourceclaimtemplates/<pod claim name>/<request>/<driver>-metadata.json`` for a claim made
  from a template, ``<pod claim name>`` being the pod's ``spec.resourceClaims[].name`` (the claim's
  annotation ``resource.kubernetes.io/pod-claim-name``): the generated claim's name is not known
  when the pod is written. ``<request>`` is the base request (a ``/<subrequest>`` dropped);
* the file is a JSON stream: the same ``DeviceMetadata`` object once per API version the driver
  writes, newest first (a reader takes the first version it knows and skips the others). We write
  :data:`API_VERSIONS`: ``metadata.resource.k8s.io/v1beta1``, which the Kubernetes documentation of
  1.37 (where the feature is beta: "DRA device metadata in containers") makes required, then
  ``v1alpha1`` for the readers of 1.36 (k8s.io/dynamic-resource-allocation v0.36 knows only it; v0.37.2
  has both, with the same fields: ``api/metadata/v1beta1/types.go``). Both carry ``metadata`` (the
  claim's ``name``, ``namespace``, ``uid``, ``generation`` 1), ``podClaimName`` (template claims only)
  and ``requests``: ``name`` (the full ``<request>[/<subrequest>]``) and ``devices`` (``driver``,
  ``pool``, ``name``, ``attributes`` in ResourceSlice form: ``{"<name>": {"int"|"string"|"bool"|
  "version": value}}``).

Ours, not the protocol's (docs/architecture.md#device-metadata-for-pods): the host file is
``<plugin data dir>/device-metadata/<claim UID>/<request>/metadata.json``, keyed by UID so that a
claim recreated under the same name never meets its predecessor's file; the CDI device is
``<claim UID>-metadata_<request>`` in the claim's own spec. Files are written atomically (a temp
file renamed over the target, mode 0644) and, like specs, not fsynced: each is made again from the
claim when it is missing (after a reboot, a removal by hand), and removed with the claim's specs.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import orjson

from ascend_dra.system.atomicfile import write_atomic

__all__ = (
    "API_VERSIONS",
    "CLAIMS_SUBDIR",
    "CONTAINER_DIR",
    "FILE_SUFFIX",
    "HOST_DIR",
    "KIND",
    "TEMPLATES_SUBDIR",
    "MetadataDevice",
    "MetadataStore",
    "container_path",
    "device_name",
    "document",
    "encode_stream",
    "is_path_name",
    "request_of",
)

#: Where containers find the files (``metadata.ContainerDir``).
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
#: Under :data:`CONTAINER_DIR`: claims the pod names (``metadata.ResourceClaimsSubDir``).
CLAIMS_SUBDIR = "resourceclaims"
#: Under :data:`CONTAINER_DIR`: claims made from a template (``metadata.ResourceClaimTemplatesSubDir``).
TEMPLATES_SUBDIR = "resourceclaimtemplates"
#: A file's name is ``<driver><FILE_SUFFIX>`` (``metadata.MetadataFileSuffix``).
FILE_SUFFIX = "-metadata.json"
#: The API versions we write, newest first (the order of the stream; see the module docstring).
API_VERSIONS = ("metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1")
KIND = "DeviceMetadata"
#: Under the plugin data directory: ``<claim UID>/<request>/metadata.json`` (ours).
HOST_DIR = "device-metadata"
_HOST_FILE = "metadata.json"
#: Joins the claim UID and the request in the CDI device name. A DNS-label device name (every
#: published device's) never holds it, so ``<uid>-metadata_<request>`` never names a device's own
#: ``<uid>-<device>[-<shareID>]``.
_MARK = "-metadata_"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def is_path_name(value: str) -> bool:
    """Whether ``value`` may name a directory of the layout: a DNS label (≤ 63), as the API requires of a
    request name and of ``pod.spec.resourceClaims[].name``, so never ``..``, ``/`` or empty."""
    return bool(_DNS_LABEL.fullmatch(value))


def container_path(driver_name: str, claim_name: str, request: str, pod_claim_name: str | None = None) -> str:
    """The file's path in the container (``metadata.ResourceClaimFilePath`` /
    ``ResourceClaimTemplateFilePath``): under ``resourceclaimtemplates/<pod_claim_name>`` when the claim
    was made from a template, else under ``resourceclaims/<claim_name>``.

    :param request: the base request name (no ``/<subrequest>``).
    """
    if pod_claim_name:
        return f"{CONTAINER_DIR}/{TEMPLATES_SUBDIR}/{pod_claim_name}/{request}/{driver_name}{FILE_SUFFIX}"
    return f"{CONTAINER_DIR}/{CLAIMS_SUBDIR}/{claim_name}/{request}/{driver_name}{FILE_SUFFIX}"


def device_name(claim_uid: str, request: str) -> str:
    """The CDI device that mounts the file of ``request`` (a base request): ``<uid>-metadata_<request>``."""
    return f"{claim_uid}{_MARK}{request}"


def request_of(claim_uid: str, cdi_device_name: str) -> str | None:
    """The request whose file ``cdi_device_name`` mounts, when it is the claim's metadata device; else None."""
    prefix = f"{claim_uid}{_MARK}"
    if not cdi_device_name.startswith(prefix):
        return None
    request = cdi_device_name[len(prefix):]
    return request if is_path_name(request) else None


@attrs.frozen
class MetadataDevice:
    """One allocated device as the file describes it (``v1alpha1.Device``).

    :ivar attributes: qualified attribute name -> the API's ``DeviceAttribute`` form
        (``{"int": 3}``; ``model.attribute_to_api``).
    """

    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)


def document(*, claim_namespace: str, claim_name: str, claim_uid: str, pod_claim_name: str | None,
             requests: Sequence[tuple[str, Sequence[MetadataDevice]]],
             api_version: str = API_VERSIONS[0]) -> dict[str, Any]:
    """One ``DeviceMetadata`` object of ``api_version`` (one of :data:`API_VERSIONS`, whose objects have
    the same fields; see the module docstring).

    :param requests: ``(full request name, its devices)`` in allocation order; the full name keeps a
        ``/<subrequest>``.
    """
    out: dict[str, Any] = {
        "kind": KIND,
        "apiVersion": api_version,
        "metadata": {"name": claim_name, "namespace": claim_namespace, "uid": claim_uid, "generation": 1},
    }
    if pod_claim_name:
        out["podClaimName"] = pod_claim_name
    out["requests"] = [
        {"name": name, "devices": [
            {"driver": d.driver, "pool": d.pool, "name": d.name,
             **({"attributes": {k: dict(v) for k, v in sorted(d.attributes.items())}} if d.attributes else {})}
            for d in devices]}
        for name, devices in requests
    ]
    return out


def encode_stream(documents: Iterable[Mapping[str, Any]]) -> bytes:
    """The file's bytes: each object (newest API version first) indented, each ending in a newline."""
    return b"".join(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n" for doc in documents)


def _check_uid(claim_uid: str) -> None:
    if not claim_uid or "/" in claim_uid or "\x00" in claim_uid or claim_uid in (".", ".."):
        raise ValueError(f"claim uid {claim_uid!r} cannot name a device metadata directory")


class MetadataStore:
    """The host's metadata files: ``<root>/<claim UID>/<request>/metadata.json``.

    The methods block only for small page-cache writes and unlinks, with no fsync, so the daemon calls
    them on the event loop, as it writes CDI specs (:class:`ascend_dra.cdi.store.CdiStore`).

    :param root: ``<plugin data dir>/device-metadata``, an absolute path the container runtime resolves
        the same way (the daemon sees the plugin data directory at the host's path).
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, claim_uid: str, request: str) -> Path:
        """The host file of ``request`` (a base request) of the claim.

        :raises ValueError: a uid or request that could leave the directory.
        """
        _check_uid(claim_uid)
        if not is_path_name(request):
            raise ValueError(f"request name {request!r} is not a DNS label")
        return self.root / claim_uid / request / _HOST_FILE

    def write(self, claim_uid: str, request: str, data: bytes) -> Path:
        """Write the file atomically (mode 0644; directories 0755), replacing an older one.

        :raises OSError: the disk is full or read-only (the old file, if any, stays).
        """
        path = self.path(claim_uid, request)
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        write_atomic(path, data, 0o644, durable=False, fault="device-metadata")
        return path

    def remove_claim(self, claim_uid: str) -> bool:
        """Remove the claim's directory with every file in it; return False if it was not there.

        :raises OSError: something in it cannot be removed (a read-only file system).
        """
        _check_uid(claim_uid)
        directory = self.root / claim_uid
        if not os.path.lexists(directory):
            return False
        if directory.is_symlink() or not directory.is_dir():
            directory.unlink()
            return True
        try:
            shutil.rmtree(directory)
        except FileNotFoundError:
            return False
        return True

    def holds(self, claim_uid: str) -> bool:
        """Whether the claim has anything here (one ``lstat``).

        :raises ValueError: a uid that could leave the directory.
        """
        _check_uid(claim_uid)
        return os.path.lexists(self.root / claim_uid)

    def claim_uids(self) -> list[str]:
        """The claim UIDs that have a directory here (blocking); none when the root is missing."""
        try:
            return sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []

    def missing(self, claim_uid: str, requests: Iterable[str]) -> list[str]:
        """The host paths of ``requests``' files that are not regular files (blocking)."""
        return [str(p) for p in (self.path(claim_uid, r) for r in requests) if not p.is_file()]
