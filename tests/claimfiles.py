"""Builds allocated ResourceClaim objects the way the API server returns them (resource.k8s.io/v1)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

DRIVER = "ascend.project-hami.io"


def claim_object(
    name: str,
    *,
    namespace: str = "default",
    uid: str | None = None,
    node: str = "node-1",
    results: Sequence[tuple[str, str]] | Sequence[dict[str, Any]] = (("npu", "npu-0-0"),),
    configs: Sequence[dict[str, Any]] = (),
    driver: str = DRIVER,
    allocated: bool = True,
) -> dict[str, Any]:
    """A ResourceClaim dict. ``results``: (request, device) pairs or full result dicts; ``configs``:
    ``status.allocation.devices.config`` entries."""
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
        "spec": {"devices": {"requests": [{"name": "npu", "exactly": {"deviceClassName": "fake"}}]}},
    }
    if allocated:
        full = [r if isinstance(r, dict) else {"request": r[0], "driver": driver, "pool": node, "device": r[1]}
                for r in results]
        obj["status"] = {
            "allocation": {"devices": {"results": full, "config": list(configs)}},
            "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": str(uuid.uuid4())}],
        }
    return obj


def fake_config(source: str = "FromClaim", requests: Sequence[str] = (), driver: str = DRIVER,
                **fields: Any) -> dict[str, Any]:
    """A ``status.allocation.devices.config`` entry carrying a FakeConfig."""
    return {"source": source, "requests": list(requests),
            "opaque": {"driver": driver, "parameters": {"apiVersion": f"{driver}/v1alpha1", "kind": "FakeConfig",
                                                         **fields}}}


def create_in_api(cp: Any, obj: dict[str, Any], device_class: str = "fake.ascend.project-hami.io") -> dict[str, Any]:
    """Create the allocated claim ``obj`` (from :func:`claim_object`) in the API server ``cp`` as the
    scheduler leaves it: created, then ``status.allocation``, then ``status.reservedFor``; return
    what the server stored (with its uid). The consumer is not a pod (the claim controller would
    remove a pod that does not exist), so the claim stays reserved.

    :raises RuntimeError: the API server refused a step.
    """
    obj = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "uid"}}
    status = obj.pop("status")
    obj["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = device_class
    base = f"/apis/resource.k8s.io/v1/namespaces/{obj['metadata']['namespace']}/resourceclaims"
    code, stored = cp.api("POST", base, obj)
    if code != 201:
        raise RuntimeError(f"create claim: {code} {stored}")
    status["reservedFor"] = [{"apiGroup": "tests.ascend-dra.io", "resource": "consumers",
                              "name": obj["metadata"]["name"], "uid": str(uuid.uuid4())}]
    for step in ({"allocation": status["allocation"]}, status):
        stored["status"] = step
        code, stored = cp.api("PUT", f"{base}/{obj['metadata']['name']}/status", stored)
        if code != 200:
            raise RuntimeError(f"claim status: {code} {stored}")
    return stored


def write_claim(root: Path, obj: dict[str, Any]) -> dict[str, Any]:
    """Write ``obj`` as ``root/claims/<ns>/<name>.yaml`` (standalone mode) and return it."""
    meta = obj["metadata"]
    path = root / "claims" / meta["namespace"] / f"{meta['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(obj))
    return obj
