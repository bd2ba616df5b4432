"""Claims HAMi-DRA made before the switch: recognising them, and whether one may be taken (pure).

HAMi-DRA's webhook creates a ResourceClaim per container and chip, named
``<namespace>-<pod>-<container>-<lower(commonWord)>`` (``<namespace>-<rand5>-...`` for a pod with
``generateName``; over 63 characters cut to 54 plus ``-`` and 8 hex of its sha256), with no owner
reference and no label, and deletes it when its validating webhook sees the pod's DELETE
(docs/ascend-hardware.md#conversion-rules, #deletion-on-pod-delete). Once this webhook replaces it,
nothing deletes those claims: a running pod's claim outlives the pod, and a pod created again under
the same name (a StatefulSet's ``web-0``) collides with it in claim mode. So a claim that looks like
one of HAMi-DRA's, that a pod labelled ``hami.io/dra`` names under the claim's own name, gets that
pod as owner (:mod:`ascend_dra.webhook.owners`), and one that no pod uses is replaced when a pod of
its name comes (:mod:`ascend_dra.webhook.mutate`).

"Looks like one of HAMi-DRA's" (:func:`made_by_hami_dra`): no owner reference, not our
``app.kubernetes.io/managed-by`` label, and every request an ``exactly`` request of the DeviceClass
HAMi-DRA's Ascend claims name (``hami-vnpu-core.project-hami.io``). A user's claim of another class
is never taken, whatever its name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ascend_dra.hami.chips import HamiChip
from ascend_dra.hami.claimnames import claim_name, truncate_dns_label
from ascend_dra.hami.convert import DEVICE_CLASS, MANAGED_BY

__all__ = ("follows_hami_dra_rule", "made_by_hami_dra", "users_of")

#: apimachinery ``util/rand``'s alphabet, as :func:`ascend_dra.hami.claimnames.random5`.
_RAND5 = "[bcdfghjklmnpqrstvwxz2456789]"


def made_by_hami_dra(claim: Mapping[str, Any]) -> bool:
    """Whether ``claim`` (a ResourceClaim as the API server returns it) has HAMi-DRA's shape: no owner,
    none of our labels, and only ``exactly`` requests of ``hami-vnpu-core.project-hami.io``."""
    metadata = claim.get("metadata") or {}
    if metadata.get("ownerReferences") or (metadata.get("labels") or {}).get(MANAGED_BY[0]) == MANAGED_BY[1]:
        return False
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests")
    return bool(requests) and all(isinstance(r, Mapping) and isinstance(r.get("exactly"), Mapping)
                                  and r["exactly"].get("deviceClassName") == DEVICE_CLASS for r in requests)


def _containers(pod: Mapping[str, Any]) -> list[str]:
    spec = pod.get("spec") or {}
    return [str(c.get("name", "")) for section in ("initContainers", "containers") for c in spec.get(section) or ()
            if isinstance(c, Mapping)]


def _generated(namespace: str, container: str, word: str) -> re.Pattern[str]:
    """The names HAMi-DRA gives a ``generateName`` pod's claim: 5 random characters for the pod, and
    when cut, any 8 hex digits (the hash of a name whose random part is unknown here)."""
    full = f"{namespace}-?????-{container}-{word.lower()}"
    if len(full) <= 63:
        return re.compile("".join(_RAND5 if ch == "?" else re.escape(ch) for ch in full))
    prefix = full[:54].rstrip("-")
    return re.compile("".join(_RAND5 if ch == "?" else re.escape(ch) for ch in prefix) + "-[0-9a-f]{8}")


def follows_hami_dra_rule(name: str, pod: Mapping[str, Any], namespace: str, chips: Sequence[HamiChip]) -> bool:
    """Whether ``name`` is what HAMi-DRA calls the claim of one of ``pod``'s containers and a chip of
    ``chips``: from the pod's name (as HAMi-DRA writes it, dots kept, and as this webhook writes
    it), or, for a pod named by ``generateName``, with any 5 random characters in its place."""
    metadata = pod.get("metadata") or {}
    pod_name = str(metadata.get("name") or "")
    for container in _containers(pod):
        for chip in chips:
            word = chip.common_word
            if name in (claim_name(namespace, pod_name, container, word),
                        truncate_dns_label(f"{namespace}-{pod_name}-{container}-{word.lower()}")):
                return True
            if metadata.get("generateName") and _generated(namespace, container, word).fullmatch(name):
                return True
    return False


def users_of(claim: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Everything that uses ``claim``, as ``{uid: "pod <name>"}``: the consumers in its
    ``status.reservedFor`` (what it is allocated for) and the ``pods`` that name it in
    ``spec.resourceClaims``. The caller drops the pod it takes the claim for."""
    name = (claim.get("metadata") or {}).get("name")
    found = {str(r.get("uid")): f"{str(r.get('resource', 'pods')).removesuffix('s')} {r.get('name')}"
             for r in (claim.get("status") or {}).get("reservedFor") or () if isinstance(r, Mapping)}
    for pod in pods:
        entries = (pod.get("spec") or {}).get("resourceClaims") or ()
        if any(isinstance(e, Mapping) and e.get("resourceClaimName") == name for e in entries):
            pod_meta = pod.get("metadata") or {}
            found.setdefault(str(pod_meta.get("uid")), f"pod {pod_meta.get('name')}")
    return found
