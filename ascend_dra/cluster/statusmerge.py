"""The claim-status write for claims that server-side apply cannot patch: a JSON merge patch of
``status.devices`` (claimstatus.py, ``ClaimStatusWriter``).

Found on the 1.35 API server: any patch of ``resourceclaims/status`` re-encodes the allocation's
opaque ``parameters``, and its "status.allocation is immutable" check compares bytes. Server-side
apply re-encodes them with sorted keys, so it fails unless the claim's creator wrote them sorted and
compact (kubectl does; a Go struct or a Python dict in its own key order does not); a JSON merge
patch keeps the key order and fails only when the creator wrote whitespace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ("merge_entries",)


async def merge_entries(api: Any, path: str, uid: str, field_manager: str, mine: Callable[[Any], bool],
                        entries: list[dict]) -> None:
    """Replace this node's entries of the claim's ``status.devices`` with ``entries`` by a merge patch.

    Other drivers' and nodes' entries (``mine`` false) are kept as read, ours replaced, and
    ``resourceVersion`` guards against a concurrent writer (409: the caller retries). What others
    wrote into an entry of our device (``conditions`` of a binding-conditions controller,
    ``networkData``) is kept: only ``data`` is ours, as with server-side apply (a merge patch replaces
    the whole list, and this dropped them; kubernetes-sigs/dra-example-driver#266). Empty ``entries``
    (Unprepare) remove our entries whole: the device is no longer the claim's on this node.

    :param path: the claim's ``.../resourceclaims/<name>/status``.
    :param uid: the claim's uid; a claim replaced meanwhile is left alone.
    :raises ApiError: the GET or the PATCH failed.
    """
    claim = await api.call("GET", path.removesuffix("/status"))
    if claim.get("metadata", {}).get("uid") != uid:
        return  # replaced meanwhile: nothing of ours to show
    devices = (claim.get("status") or {}).get("devices") or []
    others = [d for d in devices if not mine(d)]
    if not entries and len(others) == len(devices):
        return  # nothing of ours to remove
    before = {_entry_key(d): d for d in devices if mine(d)}
    entries = [{**{k: v for k, v in before.get(_entry_key(e), {}).items() if k != "data"}, **e} for e in entries]
    await api.call("PATCH", path, query=[("fieldManager", field_manager)], content_type="application/merge-patch+json",
                   body={"metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
                         "status": {"devices": [*others, *entries]}})


def _entry_key(entry: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
    """What identifies a ``status.devices`` entry (the list's map keys): driver, pool, device, shareID."""
    return entry.get("driver"), entry.get("pool"), entry.get("device"), entry.get("shareID")
