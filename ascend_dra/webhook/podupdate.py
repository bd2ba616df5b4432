"""``/mutate-pods`` for an UPDATE of a converted pod (labelled ``hami.io/dra``).

The API server lets an UPDATE change little of a pod: labels and annotations, container images,
``activeDeadlineSeconds``, added tolerations, scheduling gates removed; not its resources nor its
resource claims. What a HAMi user does to a converted pod, and what this does about it
(docs/webhook.md#updates-of-a-converted-pod):

* **applies the manifest again** (``kubectl apply``, server-side apply, a GitOps tool): the update
  brings back the ``huawei.com/*`` entries the conversion took out (and a server-side apply can drop
  fields the conversion added under its manager). When what it asks for is what the pod's claims
  hold (count, memory and cores per container, the chip's kind), the entries are taken out again
  and the claims, the pod's ``resourceClaims`` and the ``hami.io/dra`` label put back, so the
  update changes only what it may (HAMi-DRA's chart registers ``mutate-update.hami.io`` for this).
  When it asks for something else, the update is refused saying so: the claim cannot change;
  delete the pod and create it again;
* **edits a ``hami.io/use-*`` annotation** the pod's claims were made from: refused, naming it. HAMi's
  scheduler reads the uuid ones again at each scheduling attempt; here they became the claims'
  selectors at creation and a claim's spec cannot change, so the edit would be accepted and do nothing;
* **removes the ``hami.io/dra`` label**: put back, with a warning (the owner loop and this webhook
  find converted pods by it).

Everything else passes. An update of a pod being deleted always passes (finalizers must go).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import attrs

from ascend_dra.hami.annotations import NPUTYPE, NPUTYPE_EXCLUDED
from ascend_dra.hami.chips import HamiChip
from ascend_dra.hami.claimnames import go_quote
from ascend_dra.hami.convert import DEVICE_CLASS, DRA_LABEL, OPT_OUT_LABEL, OPT_OUT_VALUE, chip_selector
from ascend_dra.hami.request import ChipRequest, Problems, read_requests
from ascend_dra.model import parse_quantity
from ascend_dra.webhook import review
from ascend_dra.webhook.kubeapi import ApiError, KubeApi

__all__ = ("PodUpdates",)

RESOURCE_V1 = "/apis/resource.k8s.io/v1"
CALL_TIMEOUT_S = 4.0
_SECTIONS = ("initContainers", "containers")


@attrs.frozen
class _Held:
    """One request of a claim the pod holds: what it books (memory in bytes, cores in percent)."""

    claim: str
    count: int
    memory: Decimal | None
    cores: Decimal | None
    selectors: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.claim}: {_amounts(self.count, self.memory, self.cores)}"


def _amounts(count: int, memory: Decimal | None, cores: Decimal | None) -> str:
    return (f"{count} chip(s), memory {'default' if memory is None else f'{memory} bytes'}, "
            f"cores {'default' if cores is None else cores}")


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


class PodUpdates:
    """Answers UPDATE reviews of pods (see the module docstring).

    :param api: reads the claims and templates a pod references.
    :param chips: the HAMi resources converted (the webhook's chip table).
    :param driver_name: the driver in the CEL selectors (to recognise a claim's chip selector).
    """

    def __init__(self, api: KubeApi, chips: Sequence[HamiChip], driver_name: str) -> None:
        self.api = api
        self.chips = tuple(chips)
        self.driver_name = driver_name
        self._names = {name for chip in chips for name in chip.resource_names}

    async def review(self, request: review.ReviewRequest) -> tuple[bytes, str]:
        """Answer one UPDATE review; returns ``(response body, outcome)``."""
        old, new = request.old_object, request.object
        if old is None or new is None or DRA_LABEL not in _labels(old) or \
                _labels(new).get(OPT_OUT_LABEL) == OPT_OUT_VALUE or \
                (old.get("metadata") or {}).get("deletionTimestamp") or \
                (new.get("metadata") or {}).get("deletionTimestamp"):
            return review.allowed(request.uid), "allowed"
        problems: Problems = self._annotation_changes(old, new)
        warnings: Problems = []
        patch: list[dict[str, Any]] = []
        reapplied = await self._resources(request.namespace, old, new, problems, warnings, patch)
        if DRA_LABEL not in _labels(new):
            value = {**_labels(new), DRA_LABEL: _labels(old)[DRA_LABEL]}
            patch.append({"op": "replace" if "labels" in (new.get("metadata") or {}) else "add",
                          "path": "/metadata/labels", "value": value})
            if not reapplied:
                warnings.append((f'metadata.labels["{DRA_LABEL}"]', "kept: it marks the pod as converted, and the "
                                 "webhook finds the pod's claims by it"))
        shown = f"pod {request.namespace}/{request.name or (new.get('metadata') or {}).get('name', '')}"
        if problems:
            message = "; ".join(f"{path}: {why}" for path, why in dict.fromkeys(problems))
            return review.denied(request.uid, f"{shown}: {message}"), "denied"
        rendered = [f"{path}: {why}" for path, why in warnings]
        return review.patched(request.uid, patch, rendered), "converted" if patch else "allowed"

    def _used_words(self, old: Mapping[str, Any]) -> list[HamiChip]:
        """The chips whose annotations made the pod's claims: those a claim name ends with
        (``…-ascend310p``), or every chip when no claim name says."""
        names = [str(e.get("name", "")) for e in (old.get("spec") or {}).get("resourceClaims") or ()
                 if isinstance(e, Mapping)]
        used = [c for c in self.chips if any(n.endswith(f"-{c.common_word.lower()}") for n in names)]
        return used or list(self.chips)

    def _annotation_changes(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> Problems:
        before = (old.get("metadata") or {}).get("annotations") or {}
        after = (new.get("metadata") or {}).get("annotations") or {}
        keys = [k for chip in self._used_words(old) for k in (f"hami.io/use-{chip.common_word}-uuid",
                                                              f"hami.io/no-use-{chip.common_word}-uuid")]
        problems = []
        for key in dict.fromkeys([*keys, NPUTYPE, NPUTYPE_EXCLUDED]):
            if before.get(key) == after.get(key):
                continue
            change = ("added" if key not in before else "removed" if key not in after else
                      f"changed from {go_quote(str(before[key]))} to {go_quote(str(after[key]))}")
            hami = ("HAMi's scheduler reads it again while a pod is pending; under DRA the claim holds it"
                    if key not in (NPUTYPE, NPUTYPE_EXCLUDED) else "HAMi-DRA's claims hold it the same way")
            problems.append((f'metadata.annotations["{key}"]', (
                f"{change}: the pod's claims were made from it when the pod was created, and a claim's devices "
                f"cannot change, so the edit would do nothing; delete the pod and create it again with the new "
                f"value ({hami})")))
        return problems

    async def _resources(self, namespace: str, old: Mapping[str, Any], new: Mapping[str, Any], problems: Problems,
                         warnings: Problems, patch: list[dict[str, Any]]) -> bool:
        """Take re-applied HAMi entries out again where the claims hold what they ask for, and put back
        the claims an apply dropped; returns whether any HAMi entry came back."""
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        reapplied = False
        for section in _SECTIONS:
            old_containers = old_spec.get(section) or []
            for index, container in enumerate(new_spec.get(section) or ()):
                before = old_containers[index] if index < len(old_containers) else None
                if not isinstance(container, Mapping) or not isinstance(before, Mapping) or \
                        before.get("name") != container.get("name"):
                    continue  # containers cannot be added or renamed: the API server refuses it
                path = f"spec.{section}[{index}]"
                resources = dict(container.get("resources") or {})
                held_before = (before.get("resources") or {})
                came_back = [k for part in ("limits", "requests") for k, v in (resources.get(part) or {}).items()
                             if k in self._names and (held_before.get(part) or {}).get(k) != v]
                lost_claims = "claims" not in resources and bool(held_before.get("claims"))
                if not came_back and not lost_claims:
                    continue
                if came_back:
                    reapplied = True
                    known = len(problems)
                    asked = read_requests(container, path, self.chips, problems, warnings)
                    held = await self._held(namespace, old, before, path, problems)
                    if held is None or len(problems) > known:
                        continue
                    if (why := self._differs(asked, held, section, container)) is not None:
                        problems.append((f"{path}.resources", why))
                        continue
                for part in ("limits", "requests"):
                    kept = {k: v for k, v in (resources.get(part) or {}).items() if k not in self._names}
                    if kept:
                        resources[part] = kept
                    else:
                        resources.pop(part, None)
                if lost_claims:
                    resources["claims"] = held_before["claims"]
                patch.append({"op": "replace" if "resources" in container else "add",
                              "path": f"/spec/{section}/{index}/resources", "value": resources})
        if not new_spec.get("resourceClaims") and old_spec.get("resourceClaims"):
            patch.append({"op": "replace" if "resourceClaims" in new_spec else "add", "path": "/spec/resourceClaims",
                          "value": old_spec["resourceClaims"]})
        return reapplied

    async def _held(self, namespace: str, pod: Mapping[str, Any], container: Mapping[str, Any], path: str,
                    problems: Problems) -> list[_Held] | None:
        """The requests of the HAMi classes in the claims (or templates) ``container`` uses; None when
        one cannot be read (a problem names it)."""
        entries = {e.get("name"): e for e in (pod.get("spec") or {}).get("resourceClaims") or ()
                   if isinstance(e, Mapping)}
        held = []
        for used in (container.get("resources") or {}).get("claims") or ():
            entry = entries.get(used.get("name")) if isinstance(used, Mapping) else None
            if entry is None:
                continue
            if entry.get("resourceClaimName"):
                kind, name = "ResourceClaim", entry["resourceClaimName"]
            elif entry.get("resourceClaimTemplateName"):
                kind, name = "ResourceClaimTemplate", entry["resourceClaimTemplateName"]
            else:
                continue
            plural = f"{kind.lower()}s"
            try:
                obj = await self.api.request("GET", f"{RESOURCE_V1}/namespaces/{namespace}/{plural}/{name}",
                                             timeout_s=CALL_TIMEOUT_S)
            except ApiError as exc:
                problems.append((f"{path}.resources", f"the {kind} {name} it uses cannot be read to compare this "
                                 f"update's NPU request with: {exc}"))
                return None
            spec = obj.get("spec") or {}
            spec = spec.get("spec") or {} if kind == "ResourceClaimTemplate" else spec
            for request in (spec.get("devices") or {}).get("requests") or ():
                exactly = request.get("exactly") if isinstance(request, Mapping) else None
                if not isinstance(exactly, Mapping) or exactly.get("deviceClassName") != DEVICE_CLASS:
                    continue
                amounts = (exactly.get("capacity") or {}).get("requests") or {}
                held.append(_Held(f"{kind} {name}", int(exactly.get("count", 1)),
                                  parse_quantity(amounts["memory"]) if "memory" in amounts else None,
                                  parse_quantity(amounts["cores"]) if "cores" in amounts else None,
                                  tuple(str((s.get("cel") or {}).get("expression", ""))
                                        for s in exactly.get("selectors") or () if isinstance(s, Mapping))))
        return held

    def _differs(self, asked: list[ChipRequest], held: list[_Held], section: str,
                 container: Mapping[str, Any]) -> str | None:
        """Why the re-applied request is not what the claims hold, or None when it is. An init container
        (not a sidecar) may use an app container's claim that holds more, as the conversion gives it."""
        covering = section == "initContainers" and container.get("restartPolicy") != "Always"
        left = list(held)
        for ask in (a for a in asked if a.count):
            memory = None if ask.memory_bytes is None else Decimal(ask.memory_bytes)
            cores = None if ask.cores is None else parse_quantity(ask.cores)
            kind = chip_selector(ask.hami, self.driver_name)
            match = next((h for h in left if h.count == ask.count and _fits(memory, h.memory, covering)
                          and _fits(cores, h.cores, covering) and
                          (kind in h.selectors or not any(".?chip" in s for s in h.selectors))), None)
            if match is None:
                return (f"the NPU request cannot change once the pod is created: this update asks for "
                        f"{ask.hami.count_name} {_amounts(ask.count, memory, cores)}, and its claims hold "
                        f"{'; '.join(h.describe() for h in held) or 'none'}; delete the pod and create it again "
                        "(a pod's resources cannot change under HAMi either)")
            left.remove(match)
        if left:
            return (f"the NPU request cannot change once the pod is created: this update asks for less than its "
                    f"claims hold ({'; '.join(h.describe() for h in left)}); delete the pod and create it again")
        return None


def _fits(asked: Decimal | None, held: Decimal | None, covering: bool) -> bool:
    """Equal, or for an init container that shares an app container's claim, no more than it holds
    (unset only where the claim's is unset too: the class's default is unknown here)."""
    if asked is None or held is None:
        return asked is None and held is None
    return asked <= held if covering else asked == held
