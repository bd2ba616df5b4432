"""The ``hami.io/use-*`` pod annotations: the CEL selectors they become, and the values refused (pure).

``hami.io/use-<commonWord>-uuid`` and ``hami.io/no-use-<commonWord>-uuid`` (HAMi's scheduler reads
them, Project-HAMi/HAMi ``pkg/device/devices.go`` ``CheckUUID``), ``hami.io/use-nputype`` and
``hami.io/no-use-nputype`` (HAMi-DRA's, on the device's ``productName``; HAMi's Ascend devices do not
read them) become, in this order, ``uuid in [...]``, ``!(uuid in [...])``, ``productName in [...]``,
``!(productName in [...])``: values comma-split, trimmed, empties dropped, each quoted as Go's
``strconv.Quote`` does (docs/ascend-hardware.md#conversion-rules step 4).

Where they differ from HAMi-DRA, they follow HAMi: a value that is empty or only blanks is no
constraint (HAMi: "An empty value means no constraint"; HAMi-DRA refuses the pod), as is a
``no-use`` of only separators (it excludes nothing); a ``use`` of only separators (``" , "``)
matches no chip in HAMi either and is refused. A ``use-nputype`` that names only chips of another
kind than the request's (``910B3`` on a ``huawei.com/Ascend310P`` request), or a ``no-use-nputype``
that excludes every chip the request can have, is refused naming the annotation: the claim could
never be allocated, and the scheduler's ``cannot allocate all claims`` names no field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ascend_dra.hami.chips import HamiChip
from ascend_dra.hami.claimnames import go_quote
from ascend_dra.hami.request import Problems

__all__ = ("HAMI_CHIP_NAMES", "NPUTYPE", "NPUTYPE_EXCLUDED", "selector_annotations", "selector_expressions")

NPUTYPE = "hami.io/use-nputype"
NPUTYPE_EXCLUDED = "hami.io/no-use-nputype"
#: HAMi's ``chipName`` of each commonWord of its default device config (``DefaultAscendVNPUs()``,
#: docs/ascend-hardware.md#hami-resource-names), which our devices publish as ``productName``: a
#: ``use-nputype`` naming one of these asks for that commonWord's chips.
HAMI_CHIP_NAMES = {"910A": "Ascend910A", "910B2": "Ascend910B2", "910B3": "Ascend910B3", "910B4-1": "Ascend910B4-1",
                   "910B4": "Ascend910B4", "310P3": "Ascend310P", "Ascend910": "Ascend910C"}


def selector_annotations(chip: HamiChip) -> tuple[tuple[str, str, bool], ...]:
    """``(annotation, device attribute, negated)`` of each annotation that constrains ``chip``'s claims,
    in selector order."""
    word = chip.common_word
    return ((f"hami.io/use-{word}-uuid", "uuid", False), (f"hami.io/no-use-{word}-uuid", "uuid", True),
            (NPUTYPE, "productName", False), (NPUTYPE_EXCLUDED, "productName", True))


def _possible(chip: HamiChip, name: str) -> bool:
    """Whether a device whose ``productName`` is ``name`` can be one of ``chip``'s: our devices publish
    their chip name as both ``productName`` and ``chipName``; a family selector takes every chip
    name but those HAMi gives another commonWord."""
    if chip.attribute == "chipName":
        return name in chip.values
    return HAMI_CHIP_NAMES.get(name, chip.common_word) == chip.common_word


def _impossible(chip: HamiChip, key: str, values: Sequence[str]) -> str | None:
    """Why the ``*-nputype`` annotation ``key`` leaves ``chip``'s claim no device, or None."""
    chips = (f"chipName {', '.join(chip.values)}" if chip.attribute == "chipName"
             else f"the {', '.join(chip.values)} family")
    if key == NPUTYPE and not any(_possible(chip, v) for v in values):
        return (f"{', '.join(values)} names no chip that {chip.count_name} can be given (its chips: {chips}), so "
                "its claim could never be allocated; name one of them or remove the annotation (HAMi's scheduler "
                "does not read hami.io/use-nputype for Ascend chips; HAMi-DRA turns it into a selector, as here)")
    if key == NPUTYPE_EXCLUDED and chip.attribute == "chipName" and set(chip.values) <= set(values):
        return (f"{', '.join(values)} excludes every chip that {chip.count_name} can be given ({chips}), so its "
                "claim could never be allocated; remove the annotation (HAMi's scheduler does not read it for "
                "Ascend chips; HAMi-DRA turns it into a selector, as here)")
    return None


def selector_expressions(chip: HamiChip, annotations: Mapping[str, Any], attribute: str, problems: Problems,
                         warnings: Problems) -> list[str]:
    """The CEL expressions of ``chip``'s claim that come from the pod's annotations.

    :param attribute: the CEL of the device's attributes, ``device.attributes["<driver>"]``.
    :param problems: each refused annotation is appended as ``(metadata.annotations["<key>"], why)``.
    :param warnings: each annotation read as no constraint is appended likewise (a pod with two
        chips may append one twice; the caller drops repeats).
    """
    expressions = []
    for key, field, negated in selector_annotations(chip):
        raw = annotations.get(key)
        if raw is None:
            continue
        path = f'metadata.annotations["{key}"]'
        values = [v.strip() for v in str(raw).split(",") if v.strip()]
        if not values:
            if negated or not str(raw).strip():
                warnings.append((path, f"{go_quote(str(raw))} names nothing: no constraint, as HAMi reads it"))
            else:
                problems.append((path, f"annotation {key} has no usable value: {go_quote(str(raw))} (HAMi matches no "
                                       "chip with it, so the pod would wait forever; name one or remove it)"))
            continue
        if field == "productName" and (why := _impossible(chip, key, values)) is not None:
            problems.append((path, why))
            continue
        test = f"{attribute}.{field} in [{','.join(go_quote(v) for v in values)}]"  # HAMi-DRA joins with ','
        expressions.append(f"!({test})" if negated else test)
    return expressions
