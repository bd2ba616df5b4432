"""The CDI spec as attrs classes, its validation, and the lowest cdiVersion its content needs.

Source: the CDI specification (cncf-tags/container-device-interface ``SPEC.md``,
``specs-go/config.go``, ``pkg/cdi/version.go``); docs/architecture.md#cdi.
Runtimes ignore specs newer than their CDI library (podman 4.3 accepts 0.5.0 but silently drops
0.6.0+), so :func:`minimum_version` picks the lowest version that covers the content.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from ascend_dra.cdi import naming

__all__ = ("CdiDevice", "ContainerEdits", "DeviceNode", "Mount", "Spec", "SpecError", "minimum_version")


class SpecError(ValueError):
    """Raised by :meth:`Spec.validate` when a spec would be rejected by a CDI runtime."""


_DEVICE_TYPES = ("", "b", "c", "u", "p")
_PERMISSIONS = re.compile(r"^[rwm]*$")
_ENV = re.compile(r"^[^=\x00]+=[^\x00]*$")


@attrs.frozen
class DeviceNode:
    """``containerEdits.deviceNodes[]``: a device node to create in the container.

    :ivar path: path in the container (absolute).
    :ivar host_path: path on the host when it differs from ``path`` (needs cdiVersion 0.5.0).
    :ivar permissions: cgroup permissions, a subset of ``"rwm"``.
    """

    path: str
    host_path: str | None = None
    type: str = ""
    major: int | None = None
    minor: int | None = None
    permissions: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.host_path:
            out["hostPath"] = self.host_path
        if self.type:
            out["type"] = self.type
        if self.major is not None:
            out["major"] = self.major
        if self.minor is not None:
            out["minor"] = self.minor
        if self.permissions:
            out["permissions"] = self.permissions
        return out


@attrs.frozen
class Mount:
    """``containerEdits.mounts[]``: a bind mount (``options`` such as ``("ro", "bind")``)."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ("ro", "nosuid", "nodev", "bind")
    type: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.options:
            out["options"] = list(self.options)
        if self.type:
            out["type"] = self.type
        return out


@attrs.frozen
class ContainerEdits:
    """``containerEdits``: what the runtime adds to a container for one CDI device.

    :ivar env: ``"NAME=value"`` strings.
    """

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.env or self.device_nodes or self.mounts)

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        """Return these edits followed by ``other``'s (later env entries win in the runtime)."""
        return ContainerEdits(
            env=self.env + other.env,
            device_nodes=self.device_nodes + tuple(n for n in other.device_nodes if n not in self.device_nodes),
            mounts=self.mounts + tuple(m for m in other.mounts if m not in self.mounts),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [node.to_dict() for node in self.device_nodes]
        if self.mounts:
            out["mounts"] = [mount.to_dict() for mount in self.mounts]
        return out

    def problems(self, path: str) -> list[str]:
        """Return what a runtime would reject in these edits, each prefixed by ``path``."""
        found = []
        for i, env in enumerate(self.env):
            if not _ENV.fullmatch(env):
                found.append(f"{path}.env[{i}]: {env!r} is not NAME=value with a non-empty NAME")
        for i, node in enumerate(self.device_nodes):
            if not node.path.startswith("/"):
                found.append(f"{path}.deviceNodes[{i}].path: {node.path!r} is not absolute")
            if node.host_path is not None and not node.host_path.startswith("/"):
                found.append(f"{path}.deviceNodes[{i}].hostPath: {node.host_path!r} is not absolute")
            if node.type not in _DEVICE_TYPES:
                found.append(f"{path}.deviceNodes[{i}].type: {node.type!r} is not one of '', b, c, u, p")
            if not _PERMISSIONS.fullmatch(node.permissions):
                found.append(f"{path}.deviceNodes[{i}].permissions: {node.permissions!r} is not a subset of 'rwm'")
        for i, mount in enumerate(self.mounts):
            if not mount.host_path.startswith("/"):
                found.append(f"{path}.mounts[{i}].hostPath: {mount.host_path!r} is not absolute")
            if not mount.container_path.startswith("/"):
                found.append(f"{path}.mounts[{i}].containerPath: {mount.container_path!r} is not absolute")
        return found


@attrs.frozen
class CdiDevice:
    """``devices[]``: a named device and its (non-empty) container edits."""

    name: str
    container_edits: ContainerEdits


@attrs.frozen
class Spec:
    """A CDI spec file: ``kind`` (``vendor/class``), devices, and edits applied with any of them."""

    kind: str
    devices: tuple[CdiDevice, ...]
    container_edits: ContainerEdits = ContainerEdits()

    def validate(self) -> None:
        """Check the spec the way the CDI library does before a runtime uses it.

        :raises SpecError: listing every problem: a bad kind, a bad or duplicate device name, a
            device without edits, a malformed env entry or a relative path.
        """
        found = []
        if not naming.is_kind(self.kind):
            found.append(f"kind: {self.kind!r} is not vendor/class (letters, digits, '_', '.', '-')")
        if not self.devices:
            found.append("devices: a spec needs at least one device")
        seen: set[str] = set()
        for i, device in enumerate(self.devices):
            if not naming.is_device_name(device.name):
                found.append(f"devices[{i}].name: {device.name!r} must start and end with a letter or digit "
                             "and contain only letters, digits, '_', '.', ':' and '-'")
            if device.name in seen:
                found.append(f"devices[{i}].name: duplicate device {device.name!r}")
            seen.add(device.name)
            if not device.container_edits:
                found.append(f"devices[{i}].containerEdits: a device needs at least one edit")
            found.extend(device.container_edits.problems(f"devices[{i}].containerEdits"))
        found.extend(self.container_edits.problems("containerEdits"))
        if found:
            raise SpecError("invalid CDI spec: " + "; ".join(found))

    def to_dict(self) -> dict[str, Any]:
        """The spec as the JSON/YAML object a runtime reads, with the lowest fitting cdiVersion."""
        out: dict[str, Any] = {
            "cdiVersion": minimum_version(self),
            "kind": self.kind,
            "devices": [{"name": d.name, "containerEdits": d.container_edits.to_dict()} for d in self.devices],
        }
        if self.container_edits:
            out["containerEdits"] = self.container_edits.to_dict()
        return out


def minimum_version(spec: Spec) -> str:
    """Return the lowest cdiVersion that covers the spec's content.

    0.5.0 when any ``deviceNodes[].hostPath`` is set or a device name starts with a digit; 0.4.0
    when a mount has a ``type``; 0.6.0 when the class part of ``kind`` has a dot; else 0.3.0.
    Source: CDI ``pkg/cdi/version.go`` (``MinimumRequiredVersion``).
    """
    all_edits = [spec.container_edits, *(d.container_edits for d in spec.devices)]
    if "." in spec.kind.partition("/")[2]:
        return "0.6.0"
    if any(n.host_path for e in all_edits for n in e.device_nodes) or any(
        d.name[:1].isdigit() for d in spec.devices
    ):
        return "0.5.0"
    if any(m.type for e in all_edits for m in e.mounts):
        return "0.4.0"
    return "0.3.0"
