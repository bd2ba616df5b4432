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
* ``-memory`` is MiB -> ``value * 1024 * 1024`` bytes (``Quantity.Value()`` rounds up, so ``1.5`` ->
  2 MiB; ``4k`` is a plain ``4000`` as the API server sends it), bytes with a unit from ``M`` up or a
  binary one; ``-core`` is percent of a chip, copied as a Quantity (``12.5`` -> ``12500m``); both are
  read from ``limits``, else from ``requests`` (HAMi and HAMi-DRA read ``limits`` only; we keep a
  value written only in ``requests`` instead of dropping it, docs/webhook.md#conversion-of-hami-syntax);
* selectors, in this order: the type selector, the chip model (:data:`CHIP_SELECTORS`; HAMi-DRA has
  none, so a 910B3 request could get a 310P3 share), ``uuid in``, ``!(uuid in)``, ``productName in``,
  ``!(productName in)`` from ``hami.io/use-<commonWord>-uuid``, ``hami.io/no-use-<commonWord>-uuid``,
  ``hami.io/use-nputype``, ``hami.io/no-use-nputype`` (comma-split, trimmed, empties dropped, each
  quoted as Go's ``strconv.Quote`` does); ``use-nputype`` goes into every Ascend claim of the pod;
* the count, memory and core entries leave both ``limits`` and ``requests``; the pod gets the label
  ``hami.io/dra: "true"``, each container a ``resources.claims`` entry and the pod a
  ``spec.resourceClaims`` entry.

Claim names (direct mode, docs/ascend-hardware.md#conversion-rules step 1-2):
``<namespace>-<pod>-<container>-<lower(commonWord)>``,
``<namespace>-<rand5>-...`` with ``generateName``; longer than 63 -> ``name[:54].rstrip("-") + "-" +
sha256(name)[:8 hex]``. Gaps of HAMi-DRA fixed here (issue 10): a dotted pod name has its dots
turned into ``-`` (a pod claim name must be a DNS label); a memory written with a unit (``8Gi``) is
read as bytes, never multiplied again; values that are not whole counts, negative, over 100 %, or
memory over HAMi's 2147483647 MiB are refused naming the field; an annotation with no usable value is
refused with its name (as HAMi-DRA).

Template mode (the default): one ResourceClaimTemplate per distinct claim spec, named
``hami-<lower(commonWord)>-<sha256(spec)[:10 hex]>`` and shared by every pod with that request; the
pod claim name is ``<container>-<lower(commonWord)>`` and the claim controller creates each pod's
claim with the pod as its owner.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from enum import StrEnum
from typing import Any

import attrs
import orjson

from ascend_dra.model import canonical_quantity, parse_quantity
from ascend_dra.webhook.claimnames import claim_name, go_quote, random5, template_name, truncate_dns_label
from ascend_dra.webhook.hamichips import CHIP_SELECTORS, COMMON_WORDS, DEFAULT_CHIPS, RESOURCE_PREFIX, HamiChip

__all__ = (
    "CHIP_SELECTORS",
    "COMMON_WORDS",
    "DEVICE_CLASS",
    "DRA_LABEL",
    "MANAGED_BY",
    "OPT_OUT_LABEL",
    "ConversionError",
    "Mode",
    "PlannedClaim",
    "PodConversion",
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

#: The largest ``-memory`` in MiB: HAMi keeps it as an int32 of MiB and refuses more as a wrong unit
#: ("memory unit is treated as MB not Byte"; Project-HAMi/HAMi pkg/device/ascend/device.go
#: ``GenerateResourceRequests``, docs/ascend-hardware.md#hami-device-plugin-conventions).
MAX_MEMORY_MIB = 2**31 - 1
_SUFFIX = re.compile(r"[+-]?[0-9.]+([a-zA-Z]*|[eE][+-]?[0-9]+)")
#: Suffixes read as bytes. Not ``k``: the API server hands a webhook every quantity in canonical
#: form, so a plain ``4000`` (MiB) arrives as ``4k``. A decimal suffix from ``M`` up read as MiB
#: would be at least 10^6 MiB, more than any chip; as bytes it is what the user meant.
_BYTE_UNITS = frozenset(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "M", "G", "T", "P", "E"))


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
    """What converting one pod needs: the objects to create, then the patch to return."""

    mode: Mode
    claims: tuple[PlannedClaim, ...]
    patch: tuple[Mapping[str, Any], ...]


def _type_selector(driver_name: str) -> str:
    return (f'device.driver == "{driver_name}" && '
            f'device.attributes["{driver_name}"].type == "HAMivNPUCore"')


def _chip_selector(chip: HamiChip, driver_name: str) -> str:
    """The chips ``chip`` names (:data:`CHIP_SELECTORS` by default). ``.?x.orValue("")``: a device
    without the attribute (its chip name unknown) does not match; a plain ``.x`` would be a CEL
    evaluation error that aborts the allocation."""
    value = f'device.attributes["{driver_name}"].?{chip.attribute}.orValue("")'
    if len(chip.values) == 1:
        return f"{value} == {go_quote(chip.values[0])}"
    return f"{value} in [{','.join(go_quote(v) for v in chip.values)}]"


def _values(annotations: Mapping[str, Any], key: str) -> list[str] | None:
    """The comma-separated values of an annotation; None if absent, [] if it has none usable."""
    raw = annotations.get(key)
    if raw is None:
        return None
    return [v.strip() for v in str(raw).split(",") if v.strip()]


def _quantity(value: object) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"{orjson.dumps(value).decode()} is not a quantity")
    number = parse_quantity(value)
    if not number.is_finite():
        raise ValueError(f"{value!r} is not a finite quantity")
    return number


def _memory_bytes(value: object) -> int:
    """``-memory`` in bytes: a plain number is MiB (rounded up, as ``Quantity.Value()``), and so is
    one with the suffix ``k`` (``4k`` is how a ``4000`` written in the pod reaches the webhook); a
    value with a binary unit (``8Gi``) or a decimal one from ``M`` up (``500M``) is bytes (rounded up).

    :raises ValueError: not a quantity, not above 0, a value with a byte unit under 1 MiB
        (``1023Ki``, ``1M``: no share is that small, so it is a unit slip), or more than
        :data:`MAX_MEMORY_MIB` MiB (HAMi's int32 bound, also a unit slip: bytes written without a
        unit, ``8589934592`` for 8 GiB).
    """
    number = _quantity(value)
    text = str(value).strip()
    match = _SUFFIX.fullmatch(text)
    has_unit = bool(match) and match.group(1) in _BYTE_UNITS
    if number <= 0:
        raise ValueError(f"{text!r} must be more than 0 (MiB, or bytes with a unit such as 8Gi)")
    if has_unit and number < 1024 * 1024:
        raise ValueError(f"{text!r} is {math.ceil(number)} bytes, less than 1 MiB: a plain number is MiB "
                         "(4000 for 4000 MiB), a value with a unit is bytes (4000Mi)")
    memory = math.ceil(number) if has_unit else math.ceil(number) * 1024 * 1024
    if memory > MAX_MEMORY_MIB * 1024 * 1024:
        raise ValueError(f"{text!r} is more than {MAX_MEMORY_MIB} MiB, the most HAMi accepts: a plain number is "
                         "MiB (8192 for 8 GiB), a value with a unit is bytes (8Gi)")
    return memory


def _limit_path(path: str, section: str, key: str) -> str:
    return f'{path}.resources.{section}["{key}"]'


#: A claim holds at most this many devices (resource.k8s.io/v1 ``AllocationResultsMaxSize``, 32 in
#: 1.35-1.37): a larger HAMi count could never be allocated.
MAX_CHIPS = 32


@attrs.frozen
class _Chip:
    hami: HamiChip
    count: int
    memory_bytes: int | None
    cores: str | None

    @property
    def common_word(self) -> str:
        return self.hami.common_word


def _chips(container: Mapping[str, Any], path: str, problems: list[tuple[str, str]],
           table: Sequence[HamiChip]) -> list[_Chip]:
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}

    def entry(key: str) -> tuple[str, object] | None:
        """``(section, value)`` of ``key``: ``limits`` first, then ``requests`` (HAMi's webhook
        reads ``limits`` only; a value the user wrote in ``requests`` is kept, not dropped); the
        entry leaves both sections either way (:func:`convert_pod`)."""
        for section, values in (("limits", limits), ("requests", requests)):
            if key in values:
                return section, values[key]
        return None

    chips = []
    for hami in table:
        key, memory_key, core_key = hami.count_name, hami.memory_name, hami.core_name
        if key not in limits:
            continue
        count = memory = cores = None
        try:
            number = _quantity(limits[key])
            if number != number.to_integral_value() or number < 0:
                raise ValueError(f"{limits[key]!r} must be a whole number of chips (0 for none)")
            if number > MAX_CHIPS:
                raise ValueError(f"{limits[key]!r} is more chips than one claim can hold (at most {MAX_CHIPS}, "
                                 "the API's AllocationResultsMaxSize)")
            count = int(number)
        except ValueError as exc:
            problems.append((_limit_path(path, "limits", key), str(exc)))
        if memory_key is not None and (found := entry(memory_key)) is not None:
            section, value = found
            try:
                memory = _memory_bytes(value)
            except ValueError as exc:
                problems.append((_limit_path(path, section, memory_key), str(exc)))
        if core_key is not None and (found := entry(core_key)) is not None:
            section, value = found
            try:
                number = _quantity(value)
                if not 0 <= number <= 100:
                    raise ValueError(f"{value!r} is out of range 0..100 (percent of a chip)")
                cores = canonical_quantity(str(value))
            except ValueError as exc:
                problems.append((_limit_path(path, section, core_key), str(exc)))
        if count is not None:
            chips.append(_Chip(hami, count, memory, cores))
    return chips


def _selectors(chip: HamiChip, annotations: Mapping[str, Any], driver_name: str,
               problems: list[tuple[str, str]]) -> list[dict[str, Any]]:
    attribute = f'device.attributes["{driver_name}"]'
    expressions = [_type_selector(driver_name), _chip_selector(chip, driver_name)]
    word = chip.common_word
    for key, field, negate in ((f"hami.io/use-{word}-uuid", "uuid", False),
                               (f"hami.io/no-use-{word}-uuid", "uuid", True),
                               ("hami.io/use-nputype", "productName", False),
                               ("hami.io/no-use-nputype", "productName", True)):
        values = _values(annotations, key)
        if values is None:
            continue
        if not values:
            problems.append((f'metadata.annotations["{key}"]',
                             f"annotation {key} has no usable value: {go_quote(str(annotations[key]))}"))
            continue
        test = f"{attribute}.{field} in [{','.join(go_quote(v) for v in values)}]"  # HAMi-DRA joins with ','
        expressions.append(f"!({test})" if negate else test)
    return [{"cel": {"expression": e}} for e in expressions]


def _covers(app: _Chip, init: _Chip) -> bool:
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


def _claim_spec(chip: _Chip, selectors: list[dict[str, Any]], driver_name: str) -> dict[str, Any]:
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
        device config, or one loaded with :func:`~ascend_dra.webhook.hamichips.load_device_config`).
    :param random5: the 5 characters that stand for the name of a pod created with ``generateName``.
    :returns: None when the pod asks for no Ascend chip in ``limits`` (it passes untouched).
    :raises ConversionError: with every problem, each naming its field.
    """
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    problems: list[tuple[str, str]] = []
    found: list[tuple[str, int, Mapping[str, Any], list[_Chip]]] = []
    for section in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(section) or ()):
            path = f"spec.{section}[{index}]"
            asked = _chips(container, path, problems, chips)
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
    shareable: list[tuple[_Chip, str]] = []  # the app containers' chips and their pod claim names
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
            if section == "initContainers" and container.get("restartPolicy") != "Always":
                shared = next((claim for app, claim in shareable if _covers(app, chip)), None)
                if shared is not None:  # it ends before the app containers start: the pod books the larger
                    claims.append({"name": shared})
                    continue
            selectors = _selectors(chip.hami, annotations, driver_name, problems)
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
        raise ConversionError(problems)
    if not planned:  # only counts of 0: the entries leave the pod (a -memory no node advertises
        return PodConversion(mode, (), tuple(patch))  # would keep it pending), nothing else changes
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
    return PodConversion(mode, tuple(planned), tuple(patch))
