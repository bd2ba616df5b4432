"""HAMi resource syntax -> ResourceClaim specs and the pod's JSON Patch (pure; no API calls).

The rules are HAMi-DRA's (Project-HAMi/HAMi-DRA), as docs/ascend-hardware.md#hami-resource-names,
docs/ascend-hardware.md#conversion-rules records
them, for every Ascend ``commonWord``; the facts carry over, the code is ours. Per container (and,
unlike HAMi-DRA, per init container) and per chip whose count ``huawei.com/<commonWord>`` is in
``limits``, in the device-config order of :data:`COMMON_WORDS`, one claim; an init container (not a
sidecar) whose request an app container's covers uses that container's claim instead, so the pod
books the larger of the two as HAMi's scheduler does (``CollapseInitContainerUsage``):

* request ``npu``, ``exactly: {allocationMode: ExactCount, count: <count>, deviceClassName:
  hami-vnpu-core.project-hami.io, capacity.requests: {memory, cores}, selectors}``, and with a
  count above 1 the constraint ``distinctAttribute: <driver>/physicalID`` (HAMi's count is that many
  chips; HAMi-DRA leaves it out, and the scheduler may then put every share on one chip);
* count, ``-memory`` and ``-core`` as :mod:`ascend_dra.hami.request` reads them (``-memory``
  MiB -> bytes, ``-core`` percent as a Quantity, a ``-core`` above 100 capped with a warning, a
  ``-memory``/``-core`` without its count refused; with a HAMi device config a count alone asks
  for its ``memoryAllocatable``);
* selectors, in this order: the type selector, the chip model (:data:`CHIP_SELECTORS`; HAMi-DRA has
  none, so a 910B3 request could get a 310P3 share), then those of the ``hami.io/use-*`` annotations
  (:mod:`ascend_dra.hami.annotations`); ``use-nputype`` goes into every Ascend claim of the pod;
* the count, memory and core entries leave both ``limits`` and ``requests``; the pod gets the label
  ``hami.io/dra: "true"``, each container a ``resources.claims`` entry and the pod a
  ``spec.resourceClaims`` entry; a device config's ``runtimeClassName`` and ``overwriteEnv`` are
  applied as HAMi's webhook applies them.

Claim names (direct mode, docs/ascend-hardware.md#conversion-rules step 1-2):
``<namespace>-<pod>-<container>-<lower(commonWord)>``,
``<namespace>-<rand5>-...`` with ``generateName``; longer than 63 -> ``name[:54].rstrip("-") + "-" +
sha256(name)[:8 hex]``. Gaps of HAMi-DRA fixed here (issue 10): a dotted pod name has its dots
turned into ``-`` (a pod claim name must be a DNS label); a memory written with a unit (``8Gi``) is
read as bytes, never multiplied again; values that are not whole counts, negative, or memory over
HAMi's 2147483647 MiB are refused naming the field.

Template mode (the default): one ResourceClaimTemplate per distinct claim spec, named
``hami-<lower(commonWord)>-<sha256(spec)[:10 hex]>`` and shared by every pod with that request; the
pod claim name is ``<container>-<lower(commonWord)>`` and the claim controller creates each pod's
claim with the pod as its owner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any

import attrs

from ascend_dra.hami.annotations import selector_expressions
from ascend_dra.hami.chips import CHIP_SELECTORS, COMMON_WORDS, DEFAULT_CHIPS, RESOURCE_PREFIX, HamiChip
from ascend_dra.hami.claimnames import claim_name, go_quote, random5, template_name, truncate_dns_label
from ascend_dra.hami.request import ChipRequest, Problems, read_requests
from ascend_dra.model import canonical_quantity, parse_quantity

__all__ = (
    "CHIP_SELECTORS",
    "COMMON_WORDS",
    "DEVICE_CLASS",
    "DRA_LABEL",
    "MANAGED_BY",
    "OPT_OUT_LABEL",
    "VISIBLE_DEVICES",
    "ConversionError",
    "Mode",
    "PlannedClaim",
    "PodConversion",
    "chip_selector",
    "claim_name",
    "convert_pod",
    "go_quote",
    "truncate_dns_label",
    "unconverted_resources",
)

#: The DeviceClass HAMi-DRA's claims name (``pkg/constants`` ``AscendDeviceClassName``,
#: docs/ascend-hardware.md#peer-deviceclasses).
DEVICE_CLASS = "hami-vnpu-core.project-hami.io"
REQUEST_NAME = "npu"
DRA_LABEL = "hami.io/dra"
#: Our opt-out (label on a namespace or pod). Not ``hami.io/webhook: ignore``: that one keeps HAMi
#: core's webhook away from DRA pods and must not stop this conversion (docs/ascend-hardware.md#conversion-rules; the
#: lab's pod has it).
OPT_OUT_LABEL = "ascend.project-hami.io/webhook"
OPT_OUT_VALUE = "ignore"
MANAGED_BY = ("app.kubernetes.io/managed-by", "ascend-dra-webhook")
#: On a direct claim: the pod it was made for (``<name>`` or ``<generateName>*``), for the owner loop.
POD_ANNOTATION = "ascend.project-hami.io/pod"
#: What HAMi's ``overwriteEnv`` empties in the containers that ask for no chip, so that an Ascend
#: container runtime gives them none (``MutateAdmission``, Project-HAMi/HAMi pkg/device/ascend/device.go).
VISIBLE_DEVICES = "ASCEND_VISIBLE_DEVICES"

class Mode(StrEnum):
    """``--conversion-mode``: what the pod references."""

    TEMPLATE = "template"  #: a ResourceClaimTemplate per distinct request (the claim controller makes the claims)
    CLAIM = "claim"  #: a ResourceClaim per container and chip, named as HAMi-DRA names it


class ConversionError(ValueError):
    """Raised by :func:`convert_pod` when the pod's HAMi resources cannot be converted.

    :ivar problems: ``(field path, message)`` pairs, every problem of the pod.
    """

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{path}: {message}" for path, message in self.problems))


@attrs.frozen
class PlannedClaim:
    """One claim (or template) the pod will reference.

    :ivar pod_claim_name: ``pod.spec.resourceClaims[].name`` (a DNS label).
    :ivar object_name: the ResourceClaim (claim mode) or ResourceClaimTemplate (template mode) name.
    :ivar container: ``spec.containers[i]`` / ``spec.initContainers[i]``, for messages.
    :ivar spec: the ``resource.k8s.io/v1`` ResourceClaimSpec.
    """

    pod_claim_name: str
    object_name: str
    container: str
    common_word: str
    spec: Mapping[str, Any]


@attrs.frozen
class PodConversion:
    """What converting one pod needs: the objects to create, then the patch to return.

    :ivar warnings: ``(field path, message)`` pairs the user is told (admission warnings) but that do
        not refuse the pod, e.g. a ``-core`` above 100 capped.
    """

    mode: Mode
    claims: tuple[PlannedClaim, ...]
    patch: tuple[Mapping[str, Any], ...]
    warnings: tuple[tuple[str, str], ...] = ()


def _type_selector(driver_name: str) -> str:
    return (f'device.driver == "{driver_name}" && '
            f'device.attributes["{driver_name}"].type == "HAMivNPUCore"')


def chip_selector(chip: HamiChip, driver_name: str) -> str:
    """The chips ``chip`` names (:data:`CHIP_SELECTORS` by default). ``.?x.orValue("")``: a device
    without the attribute (its chip name unknown) does not match; a plain ``.x`` would be a CEL
    evaluation error that aborts the allocation."""
    value = f'device.attributes["{driver_name}"].?{chip.attribute}.orValue("")'
    if len(chip.values) == 1:
        return f"{value} == {go_quote(chip.values[0])}"
    return f"{value} in [{','.join(go_quote(v) for v in chip.values)}]"


def _selectors(chip: HamiChip, annotations: Mapping[str, Any], driver_name: str, problems: Problems,
               warnings: Problems) -> list[dict[str, Any]]:
    expressions = [_type_selector(driver_name), chip_selector(chip, driver_name),
                   *selector_expressions(chip, annotations, f'device.attributes["{driver_name}"]', problems, warnings)]
    return [{"cel": {"expression": e}} for e in expressions]


def _covers(app: ChipRequest, init: ChipRequest) -> bool:
    """Whether an app container's request ``app`` holds what an init container asks for: the same
    chip family and count, and memory and cores each no larger (unset only where the app's is unset
    too: an unset one is the device class's default, unknown here)."""
    def fits(mine: object, theirs: object) -> bool:
        return theirs is None if mine is None else theirs is not None and \
            parse_quantity(str(mine)) <= parse_quantity(str(theirs))

    return (app.common_word, app.count) == (init.common_word, init.count) and \
        fits(init.memory_bytes, app.memory_bytes) and fits(init.cores, app.cores)


def unconverted_resources(pod: Mapping[str, Any], chips: Sequence[HamiChip] = DEFAULT_CHIPS) -> list[str]:
    """The ``huawei.com/`` resource names in the pod's containers (and init containers) that no
    entry of ``chips`` converts, as ``<container path>: <name>``: a chip name of a HAMi device
    config edited beyond the table (HAMi reads it from its config, so ``Ascend910B1`` or a renamed
    resource work there; ``--hami-device-config`` gives the webhook that config), or a typo. Such a
    pod is let through unchanged and waits for a node that advertises the name; the webhook says so
    in a warning."""
    converted = {name for chip in chips for name in chip.resource_names}
    found: list[str] = []
    spec = pod.get("spec")
    for section in ("initContainers", "containers"):
        for index, container in enumerate((spec.get(section) or ()) if isinstance(spec, Mapping) else ()):
            resources = container.get("resources") if isinstance(container, Mapping) else None
            for part in ("limits", "requests"):
                values = (resources or {}).get(part) if isinstance(resources, Mapping) else None
                for name in values if isinstance(values, Mapping) else ():
                    entry = f"spec.{section}[{index}]: {name}"
                    if name.startswith(RESOURCE_PREFIX) and name not in converted and entry not in found:
                        found.append(entry)
    return found


def _claim_spec(chip: ChipRequest, selectors: list[dict[str, Any]], driver_name: str) -> dict[str, Any]:
    exactly: dict[str, Any] = {"allocationMode": "ExactCount", "count": chip.count, "deviceClassName": DEVICE_CLASS}
    requests = {}
    if chip.cores is not None:
        requests["cores"] = chip.cores
    if chip.memory_bytes is not None:
        requests["memory"] = canonical_quantity(str(chip.memory_bytes))  # stored as sent
    if requests:
        exactly["capacity"] = {"requests": requests}
    exactly["selectors"] = selectors
    devices: dict[str, Any] = {"requests": [{"name": REQUEST_NAME, "exactly": exactly}]}
    if chip.count > 1:
        # HAMi's count is that many chips. A HAMivNPUCore device may be allocated more than once
        # (KEP-5075), so without this the scheduler may put every share on one chip.
        devices["constraints"] = [{"requests": [REQUEST_NAME], "distinctAttribute": f"{driver_name}/physicalID"}]
    return {"devices": devices}


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _bound_to_a_node(spec: Mapping[str, Any], problems: list[tuple[str, str]]) -> None:
    """Refuse a pod that asks for NPUs and names its node at creation (``spec.nodeName``).

    HAMi's webhook denies it ("pod has node assigned", Project-HAMi/HAMi ``pkg/scheduler/webhook.go``).
    Under DRA the scheduler never sees such a pod, so nothing allocates its claims and the kubelet
    waits for them forever (kubernetes.io, "How DRA Works", "Pre-scheduled Pods").
    """
    node = spec.get("nodeName")
    if node:
        problems.append(("spec.nodeName",
                         f"{str(node)!r}: a pod bound to a node at creation bypasses the scheduler, so its "
                         f"ResourceClaims are never allocated; use nodeSelector kubernetes.io/hostname: {node} "
                         "instead (HAMi refuses such pods too)"))


def _privileged(spec: Mapping[str, Any], problems: list[tuple[str, str]]) -> None:
    """Refuse every privileged container of a pod that asks for NPUs.

    HAMi's webhook denies such a pod (Project-HAMi/HAMi ``pkg/scheduler/webhook.go``,
    ``privilegedContainerName``, init containers included): a privileged container gets every device
    node of the host and may remount ``/etc/ld.so.preload``, so neither the chip nor the share the
    claim books can be enforced on it.
    """
    for section in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(section) or ()):
            context = container.get("securityContext") if isinstance(container, Mapping) else None
            if isinstance(context, Mapping) and context.get("privileged") is True:
                problems.append((f"spec.{section}[{index}].securityContext.privileged",
                                 "a privileged container sees every NPU of the node, so the pod's NPU share "
                                 "cannot be enforced; remove privileged: true (HAMi refuses such pods too)"))


def _env_patch(spec: Mapping[str, Any], holders: set[str], chips: Sequence[HamiChip]) -> list[dict[str, Any]]:
    """HAMi's ``overwriteEnv``: ``ASCEND_VISIBLE_DEVICES=""`` in each container (and init container)
    whose limits lack the count of a chip whose config sets it (HAMi's ``MutateAdmission``, which
    appends the variable; the last of a name wins, so one written by the user is replaced here), so
    that an Ascend runtime gives it no chip. Not in containers that hold a claim of this conversion
    (``holders``, field paths): HAMi's device plugin sets the variable for them, here the claim's CDI
    spec does, and either wins over the pod's own value."""
    overwriting = [chip for chip in chips if chip.overwrite_env]
    patch: list[dict[str, Any]] = []
    for section in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(section) or ()):
            limits = (container.get("resources") or {}).get("limits") or {}
            if f"spec.{section}[{index}]" in holders or all(c.count_name in limits for c in overwriting):
                continue
            env = [e for e in container.get("env") or () if not (isinstance(e, Mapping) and
                                                                 e.get("name") == VISIBLE_DEVICES)]
            patch.append({"op": "replace" if "env" in container else "add", "path": f"/spec/{section}/{index}/env",
                          "value": [*env, {"name": VISIBLE_DEVICES, "value": ""}]})
    return patch


def _unique(pairs: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(dict.fromkeys(pairs))  # a use-nputype problem is found once per claim


def convert_pod(
    pod: Mapping[str, Any], namespace: str, *, mode: Mode = Mode.TEMPLATE,
    driver_name: str = "ascend.project-hami.io", random5: Callable[[], str] = random5,
    chips: Sequence[HamiChip] = DEFAULT_CHIPS,
) -> PodConversion | None:
    """Plan the conversion of a pod's HAMi resources.

    :param pod: the Pod as the API server sent it (``request.object``).
    :param namespace: ``request.namespace`` (the object's may be empty at admission).
    :param driver_name: the driver in the CEL selectors (HAMi-DRA: ``ascend.project-hami.io``).
    :param chips: the resources converted and the chips each names, in order (HAMi's default
        device config, or one loaded with :func:`~ascend_dra.hami.chips.load_device_config`,
        whose ``memoryAllocatable``, ``runtimeClassName`` and ``overwriteEnv`` are applied too).
    :param random5: the 5 characters that stand for the name of a pod created with ``generateName``.
    :returns: None when the pod asks for no Ascend chip in ``limits`` (it passes untouched).
    :raises ConversionError: with every problem, each naming its field.
    """
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    problems: Problems = []
    warnings: Problems = []
    found: list[tuple[str, int, Mapping[str, Any], list[ChipRequest]]] = []
    for section in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(section) or ()):
            path = f"spec.{section}[{index}]"
            asked = read_requests(container, path, chips, problems, warnings)
            if asked:
                found.append((section, index, container, asked))
    if not found and not problems:
        return None
    if any(chip.count for _, _, _, asked in found for chip in asked):
        _bound_to_a_node(spec, problems)
        _privileged(spec, problems)
    pod_name = metadata.get("name") or random5()
    existing = {c.get("name") for c in spec.get("resourceClaims") or () if isinstance(c, Mapping)}
    planned: list[PlannedClaim] = []
    patch: list[dict[str, Any]] = []
    holders: set[str] = set()  # the containers that hold a claim (field paths)
    shareable: list[tuple[ChipRequest, str]] = []  # the app containers' chips and their pod claim names
    # App containers first (sorted() is stable): an init container may use one of their claims.
    for section, index, container, asked in sorted(found, key=lambda f: f[0] == "initContainers"):
        path = f"spec.{section}[{index}]"
        name = str(container.get("name", ""))
        resources = dict(container.get("resources") or {})
        converted = {name for c in asked for name in c.hami.resource_names}
        for part in ("limits", "requests"):
            kept = {k: v for k, v in (resources.get(part) or {}).items() if k not in converted}
            if kept:
                resources[part] = kept
            else:
                resources.pop(part, None)
        claims = list(resources.get("claims") or ())
        for chip in asked:
            if not chip.count:
                continue  # no chip asked for (a chart's `npu: 0`): its entries leave, no claim is made
            holders.add(path)
            if section == "initContainers" and container.get("restartPolicy") != "Always":
                shared = next((claim for app, claim in shareable if _covers(app, chip)), None)
                if shared is not None:  # it ends before the app containers start: the pod books the larger
                    claims.append({"name": shared})
                    continue
            selectors = _selectors(chip.hami, annotations, driver_name, problems, warnings)
            claim_spec = _claim_spec(chip, selectors, driver_name)
            if mode is Mode.CLAIM:
                object_name = pod_claim = claim_name(namespace, pod_name, name, chip.common_word)
            else:
                pod_claim = truncate_dns_label(f"{name}-{chip.common_word.lower()}")
                object_name = template_name(chip.common_word, claim_spec)
            if pod_claim in existing:
                problems.append((f"{path}.resources.claims",
                                 f"the pod already has a resource claim named {pod_claim!r}; rename it"))
            existing.add(pod_claim)
            planned.append(PlannedClaim(pod_claim, object_name, path, chip.common_word, claim_spec))
            claims.append({"name": pod_claim})
            if section == "containers":
                shareable.append((chip, pod_claim))
        if claims:
            resources["claims"] = claims
        patch.append({"op": "replace" if "resources" in container else "add",
                      "path": f"/spec/{section}/{index}/resources", "value": resources})
    if problems:
        raise ConversionError(_unique(problems))
    patch += _env_patch(spec, holders, chips)
    # HAMi's runtimeClassName: the first chip asked for (init containers first, in config order)
    # whose config names one, on a pod that names none.
    runtime_class = next((c.hami.runtime_class for _, _, _, asked in found for c in asked if c.hami.runtime_class),
                         None)
    if runtime_class is not None and spec.get("runtimeClassName") is None:
        patch.append({"op": "add", "path": "/spec/runtimeClassName", "value": runtime_class})
    if not planned:  # only counts of 0: the entries leave the pod (a -memory no node advertises
        return PodConversion(mode, (), tuple(patch), _unique(warnings))  # would keep it pending)
    position = {f"spec.{section}[{index}]": n for n, (section, index, _, _) in enumerate(found)}
    planned.sort(key=lambda c: position[c.container])  # the pod's own container order again
    reference = "resourceClaimName" if mode is Mode.CLAIM else "resourceClaimTemplateName"
    entries = [{"name": c.pod_claim_name, reference: c.object_name} for c in planned]
    if spec.get("resourceClaims"):
        patch += [{"op": "add", "path": "/spec/resourceClaims/-", "value": e} for e in entries]
    else:
        patch.append({"op": "add", "path": "/spec/resourceClaims", "value": entries})
    if metadata.get("labels"):
        patch.append({"op": "add", "path": f"/metadata/labels/{_escape(DRA_LABEL)}", "value": "true"})
    else:
        patch.append({"op": "add", "path": "/metadata/labels", "value": {DRA_LABEL: "true"}})
    return PodConversion(mode, tuple(planned), tuple(patch), _unique(warnings))
