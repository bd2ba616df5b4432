"""Which HAMi resource names the webhook converts, and which chips each commonWord names.

By default the table is HAMi's own default device config (:data:`DEFAULT_CHIPS`). A cluster whose
HAMi config added chips (``Ascend910B1``) or renamed resources gives the webhook that config with
``--hami-device-config`` (the ``device-config.yaml`` key of HAMi's ``hami-scheduler-device``
ConfigMap), and :func:`load_device_config` builds the table from its ``vnpus`` entries, as HAMi's
scheduler does (Project-HAMi/HAMi ``pkg/device/ascend/vnpu.go``, ``VNPUConfig``; ``InitDevices`` in
``device.go``): each entry's ``resourceName``, ``resourceMemoryName`` and ``resourceCoreName`` are the
pod's resources, its ``commonWord`` names the claims and the ``hami.io/use-<commonWord>-uuid``
annotations, and its ``chipName`` is the chip it gives (HAMi gives a request only chips whose name
equals it). Three more keys are applied as HAMi's webhook applies them (``MutateAdmission`` in
``pkg/device/ascend/device.go``): ``memoryAllocatable`` (MiB) is the memory of a request that gives
only a count, ``runtimeClassName`` is set on a pod that asks for the chip and names none, and
``overwriteEnv: true`` gives the containers that ask for no chip ``ASCEND_VISIBLE_DEVICES=""``.
docs/webhook.md#a-hami-device-config says what is read and what is not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import yaml

__all__ = ("CHIP_SELECTORS", "COMMON_WORDS", "DEFAULT_CHIPS", "RESOURCE_PREFIX", "DeviceConfigError", "HamiChip",
           "chip_names", "load_device_config")

RESOURCE_PREFIX = "huawei.com/"

#: Ascend commonWords in HAMi's device-config order (``DefaultAscendVNPUs()``,
#: docs/ascend-hardware.md#hami-resource-names), then ``Ascend910B``: HAMi's name for 910B3 chips
#: before v2.7.0 (Project-HAMi/HAMi commit 20f54c89 renamed it ``Ascend910B3``), which pods written
#: for those releases and ascend-device-plugin's docs still use.
COMMON_WORDS = ("Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4-1", "Ascend910B4", "Ascend310P",
                "Ascend910C", "Ascend910B")
#: commonWord -> (attribute, value) of the chips it names. HAMi gives a request only chips of its
#: own commonWord (the device plugin registers a chip under the commonWord whose ``chipName`` equals
#: the chip's name; the scheduler's ``checkType`` compares them), so a 910B3 pod never lands on a
#: 310P3. The HAMivNPUCore class selects every chip the profile publishes, so the claim says which
#: (HAMi-DRA leaves it out). As our whole-chip classes (examples/deviceclasses/
#: ascend-extended-resources.yaml): the 310P and 910C by family, the others by chip name.
CHIP_SELECTORS = {
    "Ascend910A": ("chipName", "910A"), "Ascend910B2": ("chipName", "910B2"), "Ascend910B3": ("chipName", "910B3"),
    "Ascend910B4-1": ("chipName", "910B4-1"), "Ascend910B4": ("chipName", "910B4"),
    "Ascend310P": ("chipFamily", "Ascend310P"), "Ascend910C": ("chipFamily", "Ascend910C"),
    "Ascend910B": ("chipName", "910B3"),
}

#: The keys of an entry that name its pod resources: the count, the memory and the cores.
_NAME_KEYS = ("resourceName", "resourceMemoryName", "resourceCoreName")
#: The largest ``memoryAllocatable``: HAMi keeps memory as an int32 of MiB.
_MAX_MIB = 2**31 - 1
#: A commonWord becomes part of claim and template names (lower-cased) and of annotation keys.
_COMMON_WORD = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?")
#: An extended resource name: ``<DNS subdomain>/<name>`` (what the API server accepts in ``limits``).
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


@attrs.frozen
class HamiChip:
    """One HAMi commonWord: the pod resources it reads and the chips its claims select.

    :ivar count_name: the chip count resource (``huawei.com/Ascend310P``).
    :ivar memory_name: its memory resource (MiB, ``…-memory``); None when the config names none.
    :ivar core_name: its core resource (percent of a chip, ``…-core``); None when the config names none.
    :ivar attribute: the device attribute the claim selects on, ``chipName`` or ``chipFamily``.
    :ivar values: the attribute's values that match (one or more).
    :ivar memory_allocatable_mib: HAMi's ``memoryAllocatable`` (MiB): the memory a count without
        ``-memory`` asks for (the whole chip in HAMi); None: the device class's default share.
    :ivar runtime_class: HAMi's ``runtimeClassName``, set on a pod that asks for this chip and
        names no runtime class; None: not set.
    :ivar overwrite_env: HAMi's ``overwriteEnv``: containers that ask for no chip get
        ``ASCEND_VISIBLE_DEVICES=""``, so an Ascend runtime gives them none.
    """

    common_word: str
    count_name: str
    memory_name: str | None
    core_name: str | None
    attribute: str
    values: tuple[str, ...]
    memory_allocatable_mib: int | None = None
    runtime_class: str | None = None
    overwrite_env: bool = False

    @property
    def resource_names(self) -> tuple[str, ...]:
        """Every resource of this commonWord that the conversion reads and takes out of the pod."""
        return tuple(n for n in (self.count_name, self.memory_name, self.core_name) if n is not None)


#: HAMi's default device config (and ``Ascend910B``), resources ``huawei.com/<commonWord>`` and its
#: ``-memory`` and ``-core``.
DEFAULT_CHIPS = tuple(
    HamiChip(word, RESOURCE_PREFIX + word, f"{RESOURCE_PREFIX}{word}-memory", f"{RESOURCE_PREFIX}{word}-core",
             CHIP_SELECTORS[word][0], (CHIP_SELECTORS[word][1],))
    for word in COMMON_WORDS)


class DeviceConfigError(ValueError):
    """The HAMi device config cannot be used; the message names the file and the field."""


def _entries(document: object, where: str) -> list[tuple[str, Any]]:
    if not isinstance(document, Mapping) or "vnpus" not in document:
        raise DeviceConfigError(f"{where}: no vnpus key; give the device-config.yaml of HAMi's hami-scheduler-device "
                                "ConfigMap (its vnpus list names the Ascend chips)")
    vnpus = document["vnpus"]
    if isinstance(vnpus, Mapping):  # HAMi since the hamiVnpuCore switch: {hamiVnpuCore, configs: [...]}
        entries, path = vnpus.get("configs"), "vnpus.configs"
    else:  # older HAMi and volcano-vgpu's config: the list itself
        entries, path = vnpus, "vnpus"
    if not isinstance(entries, list) or not entries:
        raise DeviceConfigError(f"{where}: {path} must be a non-empty list of chips (chipName, commonWord, "
                                "resourceName, ...); with none the webhook would convert nothing")
    return [(f"{path}[{index}]", entry) for index, entry in enumerate(entries)]


def _text(entry: Mapping[str, Any], key: str, path: str, where: str, *, required: bool) -> str | None:
    value = entry.get(key)
    if value is None or value == "":
        if required:
            raise DeviceConfigError(f"{where}: {path}.{key} is missing")
        return None
    if not isinstance(value, str):
        raise DeviceConfigError(f"{where}: {path}.{key} must be a string, not {value!r:.60}")
    return value


def load_device_config(path: Path) -> tuple[HamiChip, ...]:
    """The chip table of a HAMi device config file (YAML), in the order of its entries.

    Read per entry of ``vnpus`` (a list, or ``vnpus.configs``): ``commonWord``, ``chipName`` and
    ``resourceName`` (required), ``resourceMemoryName`` and ``resourceCoreName`` (optional: a
    resource the config does not name is not converted, as in HAMi), ``memoryAllocatable`` (a
    whole number of MiB), ``runtimeClassName`` (a string; empty is none) and ``overwriteEnv`` (a
    boolean). Entries that share a commonWord (HAMi's 910B4 and 910B4-1 under ``Ascend910B4``) make
    one chip whose claims select either chip name; they must then name the same resources and
    runtime class, the smaller ``memoryAllocatable`` is kept (it fits either chip) and
    ``overwriteEnv`` holds if one of them sets it. Every other key (``memoryCapacity``, templates,
    ``superPod``, ...) is HAMi's and not read.

    :raises DeviceConfigError: the file cannot be read or parsed, or an entry is incomplete or
        contradicts another; the message names the file and the field.
    """
    where = str(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DeviceConfigError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise DeviceConfigError(f"{where}: not YAML: {str(exc).splitlines()[0]}") from None
    words: dict[str, tuple[str, tuple[str | None, ...], list[str]]] = {}  # word -> (path, names, chips)
    extras: dict[str, HamiChip] = {}  # word -> its memoryAllocatable, runtimeClassName, overwriteEnv
    owner: dict[str, str] = {}  # resource name -> commonWord
    for path_, entry in _entries(document, where):
        if not isinstance(entry, Mapping):
            raise DeviceConfigError(f"{where}: {path_} must be a mapping (chipName, commonWord, resourceName, ...)")
        word = _text(entry, "commonWord", path_, where, required=True)
        chip = _text(entry, "chipName", path_, where, required=True)
        assert word is not None and chip is not None
        if len(word) > 40 or not _COMMON_WORD.fullmatch(word):
            raise DeviceConfigError(f"{where}: {path_}.commonWord {word!r} must be letters, digits and '-' (at most "
                                    "40; it becomes part of claim names)")
        names = tuple(_text(entry, key, path_, where, required=key == "resourceName") for key in _NAME_KEYS)
        given = [(key, name) for key, name in zip(_NAME_KEYS, names, strict=True) if name is not None]
        for key, name in given:
            if not _RESOURCE.fullmatch(name):
                raise DeviceConfigError(f"{where}: {path_}.{key} {name!r} is not a resource name "
                                        "(<domain>/<name>, e.g. huawei.com/Ascend310P)")
            if not name.startswith(RESOURCE_PREFIX):
                # The webhook configurations' matchConditions send only pods asking for huawei.com/*.
                raise DeviceConfigError(f"{where}: {path_}.{key} {name} is not under {RESOURCE_PREFIX}: the API "
                                        f"server sends the webhook only pods that ask for {RESOURCE_PREFIX}* resources")
            if owner.setdefault(name, word) != word:
                raise DeviceConfigError(f"{where}: {path_}.{key} {name} is also a resource of commonWord "
                                        f"{owner[name]}; one resource can name one commonWord")
        if len({name for _, name in given}) != len(given):
            raise DeviceConfigError(f"{where}: {path_} names one resource twice")
        applied = _applied_keys(entry, path_, where)
        if word in words:
            first, first_names, chips = words[word]
            if names != first_names:
                raise DeviceConfigError(f"{where}: {path_} and {first} share commonWord {word} but name different "
                                        "resources")
            if applied.runtime_class != extras[word].runtime_class:
                raise DeviceConfigError(f"{where}: {path_} and {first} share commonWord {word} but name different "
                                        "runtimeClassName")
            extras[word] = _merged(extras[word], applied)
            if chip not in chips:
                chips.append(chip)
        else:
            words[word] = (path_, names, [chip])
            extras[word] = applied
    return tuple(attrs.evolve(extras[word], common_word=word, count_name=names[0] or "", memory_name=names[1],
                              core_name=names[2], values=tuple(chips))
                 for word, (_, names, chips) in words.items())


def _applied_keys(entry: Mapping[str, Any], path: str, where: str) -> HamiChip:
    """The entry's ``memoryAllocatable``, ``runtimeClassName`` and ``overwriteEnv`` (on a chip whose
    other fields are filled in by the caller).

    :raises DeviceConfigError: a value of the wrong type or out of range, naming the field.
    """
    memory = entry.get("memoryAllocatable")
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or not 0 < memory <= _MAX_MIB):
        raise DeviceConfigError(f"{where}: {path}.memoryAllocatable must be a whole number of MiB from 1 to "
                                f"{_MAX_MIB}, not {memory!r:.60}")
    runtime_class = _text(entry, "runtimeClassName", path, where, required=False)
    if runtime_class is not None and not (len(runtime_class) <= 253 and _DNS_SUBDOMAIN.fullmatch(runtime_class)):
        raise DeviceConfigError(f"{where}: {path}.runtimeClassName {runtime_class!r} is not a RuntimeClass name "
                                "(a lower-case DNS subdomain, e.g. ascend)")
    overwrite = entry.get("overwriteEnv", False)
    if overwrite is None:
        overwrite = False
    if not isinstance(overwrite, bool):
        raise DeviceConfigError(f"{where}: {path}.overwriteEnv must be true or false, not {overwrite!r:.60}")
    return HamiChip("", "", None, None, "chipName", (), memory, runtime_class, overwrite)


def _merged(first: HamiChip, other: HamiChip) -> HamiChip:
    """Two entries of one commonWord: the smaller memory (it fits either chip), either's overwriteEnv."""
    memories = [m for m in (first.memory_allocatable_mib, other.memory_allocatable_mib) if m is not None]
    return attrs.evolve(first, memory_allocatable_mib=min(memories) if memories else None,
                        overwrite_env=first.overwrite_env or other.overwrite_env)


def chip_names(chips: Sequence[HamiChip]) -> str:
    """``Ascend910A, Ascend310P, ...``: the commonWords of a table, for messages."""
    return ", ".join(chip.common_word for chip in chips)
