"""The device metadata part of a claim's plan (KEP-5304; :mod:`ascend_dra.cdi.devicemetadata`): per request,
the file's bytes, the CDI device that mounts it, and that device's id on the request's first device.

Pure, as the rest of a plan: nothing is written here (``PreparedClaims.write_plan`` writes the files
beside the specs).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, MutableMapping, MutableSequence, Sequence
from typing import Any

import attrs

from ascend_dra.cdi import devicemetadata, naming
from ascend_dra.cdi.devicemetadata import MetadataDevice, MetadataStore
from ascend_dra.cdi.spec import CdiDevice, ContainerEdits, Mount
from ascend_dra.durable.checkpoint import DeviceRecord
from ascend_dra.model import AllocatedDevice, ClaimAllocation, Device, attribute_to_api
from ascend_dra.profiles.checks import attribute_problem

__all__ = ("MetadataPlanError", "Placed", "add_metadata", "metadata_requests")


class MetadataPlanError(Exception):
    """The claim's metadata cannot be made; planning.py turns it into its PlanError."""


@attrs.frozen
class Placed:
    """An allocation result as planned: its CDI kind, its record's index in the plan, its profile."""

    result: AllocatedDevice
    kind: str
    record: int
    profile: str


def add_metadata(
    claim: ClaimAllocation,
    placed: Sequence[Placed],
    extra: Mapping[tuple[str, str | None], Mapping[str, Any]],
    devices: Mapping[str, Device],
    records: MutableSequence[DeviceRecord],
    kind_devices: MutableMapping[str, list[CdiDevice]],
    *,
    driver_name: str,
    store: MetadataStore,
) -> dict[str, bytes]:
    """Add, per base request of ``claim``, the CDI device that mounts its metadata file to the claim's
    devices of the kind of the request's first device (allocation order), and that device's qualified
    id to the end of the first device's record; return ``{base request: the file's bytes}``.

    A device's attributes are the ones it is published with (``devices``), then what its profile's
    ``device_metadata`` hook decided for this claim (``extra``, keyed by device and share ID), which
    win on a name both give.

    :raises MetadataPlanError: a request name or pod claim name that cannot name a directory of
        the layout (not a DNS label), or a profile's attribute the API would not accept.
    """
    ref = f"ResourceClaim {claim.namespace}/{claim.name}"
    pod_claim_name = claim.pod_claim_name
    if pod_claim_name is not None and not devicemetadata.is_path_name(pod_claim_name):
        raise MetadataPlanError(f"{ref}: metadata.annotations['resource.kubernetes.io/pod-claim-name'] "
                                f"{pod_claim_name!r} is not a DNS label, so it cannot name the device metadata "
                                "directory (the claim controller sets it to the pod's spec.resourceClaims[].name)")
    position = {id(result): i for i, result in enumerate(claim.results)}
    by_request: dict[str, list[Placed]] = defaultdict(list)
    for item in sorted(placed, key=lambda p: position.get(id(p.result), len(position))):
        by_request[item.result.base_request].append(item)
    files: dict[str, bytes] = {}
    for request, items in by_request.items():
        if not devicemetadata.is_path_name(request):
            raise MetadataPlanError(f"{ref}: request name {request!r} is not a DNS label, so it cannot name "
                                    "a device metadata directory")
        first = items[0]
        name = devicemetadata.device_name(claim.uid, request)
        mount = Mount(host_path=str(store.path(claim.uid, request)),
                      container_path=devicemetadata.container_path(driver_name, claim.name, request, pod_claim_name))
        kind_devices[first.kind].append(CdiDevice(name, ContainerEdits(mounts=(mount,))))
        record = records[first.record]
        records[first.record] = attrs.evolve(
            record, cdi_device_ids=(*record.cdi_device_ids, naming.qualified_name(first.kind, name)))
        by_full_name: dict[str, list[MetadataDevice]] = defaultdict(list)
        for item in items:
            result = item.result
            published = devices[result.device].attributes
            decided = extra.get((result.device, result.share_id), {})
            for key, value in decided.items():
                problem = attribute_problem(key, value)
                if problem is not None:
                    raise MetadataPlanError(f"{ref}: profile {item.profile} gave device {result.device} the device "
                                            f"metadata attribute {key!r}: {problem}")
            attributes = {key: attribute_to_api(value) for key, value in {**published, **decided}.items()}
            by_full_name[result.request].append(MetadataDevice(result.driver, result.pool, result.device, attributes))
        files[request] = devicemetadata.encode_stream(
            devicemetadata.document(claim_namespace=claim.namespace, claim_name=claim.name, claim_uid=claim.uid,
                                    pod_claim_name=pod_claim_name, requests=list(by_full_name.items()),
                                    api_version=version)
            for version in devicemetadata.API_VERSIONS)
    return files


def metadata_requests(claim_uid: str, cdi_device_ids: Sequence[str]) -> list[str]:
    """The requests whose metadata files a claim's answer names (its CDI ids), in order."""
    found = (devicemetadata.request_of(claim_uid, cdi_id.partition("=")[2]) for cdi_id in cdi_device_ids)
    return list(dict.fromkeys(r for r in found if r is not None))
