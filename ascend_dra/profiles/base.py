"""The profile contract: everything a profile author needs, and nothing else (docs/architecture.md#profiles).

A profile is found through the entry-point group ``ascend_dra.profiles``
(``name = "package.module:factory"``); ``factory()`` takes no arguments and returns an object
that satisfies :class:`Profile`. The daemon then calls, in this order:

1. ``await profile.discover(ctx)`` -> :class:`Inventory` (at start-up and on every rediscovery);
2. for each Prepare: :func:`decode_config` on every opaque config for our driver (which calls
   ``profile.validate``), then ``profile.apply_config(config, devices, apply_ctx)`` once per
   group of allocated devices that share a config, split so that no device name repeats in one
   call (shares of one device, :func:`ascend_dra.state.planning.batches_by_device`) ->
   ``{device name: ContainerEdits}``;
3. optionally ``await profile.prepare_side_effects(...)`` / ``unprepare_side_effects(...)`` for
   profiles that change the node (they must be idempotent; what they did is checkpointed).
   With them, optionally ``created_device_nodes(devices, apply_ctx) -> host paths`` (nodes the side
   effects create: not required to exist when the claim is planned) and
   ``await reconcile_side_effects(live records, ctx)`` (once at start-up, after recovery) and
   ``claim_evidence(ctx) -> lines`` (blocking, in a worker thread: the profile's own files that say
   a claim was prepared, asked when the checkpoint is damaged and names no claim).

The default config (:meth:`Profile.default_config`) applies to devices no opaque config names.

Optional hook ``async health(ctx, inventory) -> Mapping[device name, bool | None]``: called every
``--health-interval`` seconds; ``True`` healthy, ``False`` unhealthy, ``None`` unknown; devices it
leaves out count as healthy. The result feeds the kubelet's resource-health stream (KEP-4680) and
the ``ascend_dra_unhealthy_devices`` metric. Without the hook every discovered device is healthy.

Optional hook ``device_metadata(config, devices, apply_ctx) -> Mapping[device name, Mapping[attribute, value]]``:
called beside ``apply_config``, with the same arguments, when the daemon writes device metadata files
for pods (KEP-5304, ``--device-metadata``): what the claim decided about each device that its
published attributes do not say (a share's quota). Values are attribute values as in
:class:`Device` (``int``, ``bool``, ``str``, :class:`Version`), names as the API allows them; they are
added to the device's published attributes in the file and win on a name both have. Pure, like
``apply_config``; an exception fails the claim's Prepare with the profile's name.

Optional hook ``readings() -> Mapping[device name, DeviceReading]``: what the devices reported at
the last ``health`` call (compute and memory in use, temperature, power), read by the daemon when
``/metrics`` is scraped; it must only return what it holds (no I/O: it runs on the event loop).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, override

from ascend_dra.cdi.spec import ContainerEdits, DeviceNode, Mount
from ascend_dra.model import (
    AllocatedDevice,
    Capacity,
    CapacityRequestPolicy,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceReading,
    DeviceTaint,
    Inventory,
    Version,
    parse_quantity,
)
from ascend_dra.profiles.options import ProfileOption, absolute_path, path_option, simulate_option

__all__ = (
    "API_VERSION_SUFFIX",
    "AllocatedDevice",
    "ApplyContext",
    "Capacity",
    "CapacityRequestPolicy",
    "ConfigError",
    "ContainerEdits",
    "CounterConsumption",
    "CounterSet",
    "Device",
    "DeviceNode",
    "DeviceReading",
    "DeviceTaint",
    "Inventory",
    "Mount",
    "Profile",
    "ProfileContext",
    "ProfileOption",
    "Version",
    "absolute_path",
    "config_converter",
    "decode_config",
    "parse_quantity",
    "path_option",
    "simulate_option",
    "visible_per_request",
)

#: Opaque config apiVersion is ``<driver-name>/v1alpha1`` (docs/architecture.md#names).
API_VERSION_SUFFIX = "v1alpha1"


class ConfigError(ValueError):
    """Raised by :func:`decode_config` and ``Profile.validate`` when an opaque config is wrong.

    :ivar problems: ``(field path, message)`` pairs, e.g.
        ``("parameters.sharing.interval", "'Fast' is not one of Default, Short, Medium, Long")``.
        Paths are relative to the opaque config; callers prefix them with where it came from.
    """

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{path}: {message}" for path, message in self.problems))

    @classmethod
    def at(cls, path: str, message: str) -> ConfigError:
        """A ConfigError with one problem."""
        return cls([(path, message)])


@attrs.frozen
class ProfileContext:
    """What the daemon tells every profile about the node (built from the daemon's settings).

    :ivar fake_devices: how many devices simulated discovery creates (``--fake-devices``).
    :ivar dev_root: where the daemon sees the host's device nodes (``--dev-root``: ``/dev``; a fake
        tree in tests and labs; the host's ``/dev`` mounted elsewhere in a container). Everything the
        daemon reads about device nodes is read under it.
    :ivar dev_root_on_host: where ``dev_root`` is on the host, as the container runtime that reads
        the CDI specs sees it (``--dev-root-on-host``); None: ``dev_root`` itself (the daemon sees the
        host's device directory at its own path). Build CDI device nodes with :meth:`device_node`.
    :ivar sys_root: where sysfs is read (``/sys``).
    :ivar npu_smi: the ``npu-smi`` executable (``--npu-smi``).
    :ivar state_dir: a directory the profile may keep files in (under the plugin data directory).
    :ivar options: free-form profile options (``--profile-option name.key=value``).
    :ivar boot_id_file: the file holding the node's boot id (``--boot-id-file``), for profiles whose
        side effects may not survive a reboot.
    """

    node_name: str
    driver_name: str
    fake_devices: int = 4
    dev_root: Path = Path("/dev")
    sys_root: Path = Path("/sys")
    npu_smi: str = "npu-smi"
    state_dir: Path = Path("/var/lib/kubelet/plugins/ascend-dra")
    options: Mapping[str, str] = attrs.field(factory=dict)
    boot_id_file: Path = Path("/proc/sys/kernel/random/boot_id")
    dev_root_on_host: Path | None = None

    @property
    def host_dev_root(self) -> Path:
        """The host's path of :attr:`dev_root` (:attr:`dev_root_on_host`, else :attr:`dev_root`)."""
        return self.dev_root_on_host if self.dev_root_on_host is not None else self.dev_root

    def device_node(self, name: str) -> DeviceNode:
        """The CDI device node of the host's device ``name`` (``davinci0``, or ``/dev/davinci0``):
        ``path`` ``/dev/<name>`` in the container, ``hostPath`` ``<host_dev_root>/<name>`` on the
        host (left out when it is that same path). The daemon checks it at ``<dev_root>/<name>``
        (:meth:`daemon_path`) before it hands the spec out."""
        name = name.removeprefix("/dev/")
        path = f"/dev/{name}"
        host = str(self.host_dev_root / name)
        return DeviceNode(path=path, host_path=None if host == path else host)

    def daemon_path(self, host_path: str) -> Path:
        """Where the daemon sees a host path of a CDI spec: a path under :attr:`host_dev_root` is read
        under :attr:`dev_root`; any other (``/dev/null`` under a lab's tree, a hard vNPU's
        ``vnpu-dev-dir``) as it is."""
        try:
            return self.dev_root / Path(host_path).relative_to(self.host_dev_root)
        except ValueError:  # not under the host's device directory
            return Path(host_path)


@attrs.frozen
class ApplyContext:
    """What ``apply_config`` may read: the node context, the profile's inventory, the claim's identity."""

    profile: ProfileContext
    inventory: Inventory
    claim_uid: str
    claim_namespace: str
    claim_name: str


@runtime_checkable
class Profile(Protocol):
    """A device profile. ``name`` is its entry-point name; ``cdi_class`` the class in its CDI kind.

    ``config_types`` maps each opaque config ``kind`` to an attrs class; fields are decoded from
    camelCase JSON keys (``timeSliceInterval`` -> ``time_slice_interval``) and unknown keys are
    rejected.
    """

    name: str
    cdi_class: str
    config_types: Mapping[str, type]

    def default_config(self) -> Any:
        """The config applied to devices that no opaque config names."""

    async def discover(self, ctx: ProfileContext) -> Inventory:
        """Find the node's devices. Must not block the event loop (subprocesses async, file I/O in threads)."""

    def validate(self, config: Any) -> None:
        """Check a decoded config; raise :class:`ConfigError` naming the field and the allowed values."""

    def apply_config(
        self, config: Any, devices: Sequence[AllocatedDevice], ctx: ApplyContext
    ) -> Mapping[str, ContainerEdits]:
        """Return ``{device name: ContainerEdits}`` for ``devices``. Pure: no side effects."""


def visible_per_request(
    devices: Sequence[AllocatedDevice],
    value: Callable[[AllocatedDevice], object],
    order: Callable[[AllocatedDevice], Any] | None = None,
) -> dict[str, str]:
    """``{base request: "v1,v2,..."}``: the comma-joined ``value`` of every device of each base
    request, sorted by ``order`` (default: the value).

    The value of a ``*_VISIBLE_DEVICES`` variable (``ASCEND_VISIBLE_DEVICES``,
    ``NVIDIA_VISIBLE_DEVICES``): every device of one request carries the same list, so the CDI
    edits a container receives agree. Two requests in one container still set it twice, and the
    runtime keeps the last (CDI env has no merge).
    """
    grouped: dict[str, list[AllocatedDevice]] = {}
    for device in devices:
        grouped.setdefault(device.base_request, []).append(device)
    sort_key = order or value
    return {request: ",".join(str(value(d)) for d in sorted(members, key=sort_key))
            for request, members in grouped.items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)

    def factory(cls: type) -> Any:
        renames = {f.name: override(rename=_camel(f.name)) for f in attrs.fields(cls) if "_" in f.name}
        inner = make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True, **renames)

        def structure(value: Any, _: type) -> Any:
            if not isinstance(value, Mapping):
                raise TypeError(f"must be a JSON object, got {_json_type(value)}")
            return inner(value, cls)

        return structure

    converter.register_structure_hook_factory(attrs.has, factory)
    # JSON types are taken as they are: "false" is not a bool, "3" and 3.7 are not ints.
    # Type hooks, which take precedence over cattrs' built-in conversions (int("3"), int(3.7)).
    for target, accepted in ((bool, (bool,)), (int, (int,)), (float, (int, float)), (str, (str,))):
        converter.register_structure_hook(target, _strict(target, accepted))
    # Dispatch follows the MRO, so StrEnum/IntEnum members would reach the str/int hooks first.
    for base in (enum.Enum, enum.StrEnum, enum.IntEnum):
        converter.register_structure_hook(base, _enum)
    return converter


def _enum(value: Any, cls: type[enum.Enum]) -> enum.Enum:
    if isinstance(value, bool) or not isinstance(value, str | int):
        allowed = ", ".join(str(m.value) for m in cls)
        raise TypeError(f"must be one of {allowed}, got {_got(value)}")
    return cls(value)


def _got(value: object) -> str:
    """What the user wrote, for messages: ``a string "50"``, ``a number 3.7``, ``null``."""
    return "null" if value is None else f"{_json_type(value)} {_json_text(value)}"


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if value is None:
        return "null"
    return "an object" if isinstance(value, Mapping) else type(value).__name__


_JSON_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _strict(target: type, accepted: tuple[type, ...]) -> Any:
    def structure(value: Any, _: type) -> Any:
        if (isinstance(value, bool) and target is not bool) or not isinstance(value, accepted):
            raise TypeError(f"must be {_JSON_NAMES[target]}, got {_got(value)}")
        return target(value)

    return structure


def _json_text(value: object) -> str:
    """``value`` as JSON text, for messages that quote what the user wrote."""
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


#: The strict converter for user configs: camelCase keys, unknown keys rejected.
config_converter = _make_converter()

_PATH_SUFFIX = re.compile(r"^(.*) @ \$(.*)$")


def decode_config(
    parameters: object, config_types: Mapping[str, type], driver_name: str, profile: Profile | None = None
) -> Any:
    """Decode an opaque ``parameters`` object into the attrs class named by its ``kind``, then validate.

    :param parameters: ``spec.devices.config[].opaque.parameters`` (a JSON object).
    :param config_types: ``kind`` -> attrs class, usually ``profile.config_types``.
    :param driver_name: our driver; ``apiVersion`` must be ``<driver_name>/v1alpha1``.
    :param profile: when given, its ``validate`` runs on the decoded config.
    :raises ConfigError: naming the field (``parameters.<path>``) and the allowed values.
    """
    if not isinstance(parameters, Mapping):
        raise ConfigError.at("parameters", f"must be a JSON object, got {type(parameters).__name__}")
    api_version = f"{driver_name}/{API_VERSION_SUFFIX}"
    problems = []
    if parameters.get("apiVersion") != api_version:
        problems.append(("parameters.apiVersion", f"{parameters.get('apiVersion')!r} is not {api_version!r}"))
    kind = parameters.get("kind")
    cls = config_types.get(kind) if isinstance(kind, str) else None
    if cls is None:
        allowed = ", ".join(sorted(config_types)) or "(this profile takes no config)"
        problems.append(("parameters.kind", f"{kind!r} is not one of {allowed}"))
    if problems:
        raise ConfigError(problems)
    body = {k: v for k, v in parameters.items() if k not in ("apiVersion", "kind")}
    try:
        config = config_converter.structure(body, cls)
    except Exception as exc:  # cattrs raises exception groups describing every bad field
        problems = _cattrs_problems(exc)
        raise ConfigError(problems + _validate_the_rest(body, cls, problems, profile)) from None
    if profile is not None:
        try:
            profile.validate(config)
        except ConfigError as exc:
            raise ConfigError([(_under_parameters(p), m) for p, m in exc.problems]) from None
    return config


def _validate_the_rest(body: Mapping[str, Any], cls: type, problems: list[tuple[str, str]],
                       profile: Profile | None) -> list[tuple[str, str]]:
    """The profile's ``validate`` problems of the fields that decoded, so that one answer names a
    range problem beside a type problem; the fields that did not decode take their defaults here
    and are not reported twice. Nothing when there is no profile or the rest does not decode alone
    (a required field is missing or wrong)."""
    if profile is None:
        return []
    bad = {path.split(".")[1] for path, _ in problems if path.count(".") >= 1}
    try:
        partial = config_converter.structure({k: v for k, v in body.items() if k not in bad}, cls)
        profile.validate(partial)
    except ConfigError as exc:
        found = [(_under_parameters(p), m) for p, m in exc.problems]
        # A problem of the whole config ("parameters") may stem from a field already named.
        return [(p, m) for p, m in found if "." in p and p.split(".")[1] not in bad]
    except Exception:  # the rest alone does not decode: the type problems are the whole answer
        return []
    return []


def _under_parameters(path: str) -> str:
    return path if path.startswith("parameters") else f"parameters.{path}" if path else "parameters"


def _cattrs_problems(exc: Exception) -> list[tuple[str, str]]:
    problems = []
    for message in cattrs.transform_error(exc, path="$", format_exception=_format_exception):
        match = _PATH_SUFFIX.match(message)
        if match:
            text, path = match.groups()
            problems.append((_under_parameters(_camel_path(path.lstrip("."))), text))
        else:
            problems.append(("parameters", message))
    return problems


def _format_exception(exc: BaseException, type_: type | None) -> str:
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        allowed = ", ".join(_camel(f.name) for f in attrs.fields(exc.cl)) or "none"
        unknown = ", ".join(sorted(exc.extra_fields))
        return f"unknown field(s) {unknown}; allowed fields: {allowed}"
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, TypeError) and str(exc).startswith("must be"):
        return str(exc)
    if isinstance(exc, ValueError) and isinstance(type_, type) and issubclass(type_, enum.Enum):
        allowed = ", ".join(str(m.value) for m in type_)
        return f"{exc.args[0].split(' is not a valid')[0]} is not one of {allowed}"
    return cattrs.v.format_exception(exc, type_)


def _camel_path(path: str) -> str:
    return ".".join(_camel(part) for part in path.split(".")) if path else ""
