"""CDI names: kinds, device names, fully-qualified device IDs and spec file names.

Source: CDI ``pkg/parser/parser.go`` (``QualifiedName``, vendor/class/device name rules) and
``pkg/cdi/spec-dirs.go`` (``GenerateTransientSpecName``); docs/architecture.md#names for our choices: kind
``k8s.<driver-name>/<class>``, a ``common`` device, per-claim devices ``<claimUID>-<device>``.
"""

from __future__ import annotations

import re

__all__ = (
    "COMMON_DEVICE",
    "claim_device_name",
    "claim_spec_file",
    "common_spec_file",
    "is_device_name",
    "is_kind",
    "kind",
    "qualified_name",
    "spec_file_prefix",
)

#: The device of the common spec, present in every prepared claim's CDI device list.
COMMON_DEVICE = "common"

_VENDOR_OR_CLASS = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_DEVICE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


def kind(driver_name: str, cdi_class: str) -> str:
    """Return our CDI kind, ``k8s.<driver-name>/<class>`` (e.g. ``k8s.ascend.project-hami.io/npu``)."""
    return f"k8s.{driver_name}/{cdi_class}"


def is_kind(value: str) -> bool:
    """Whether ``value`` is a valid ``vendor/class``."""
    vendor, slash, cdi_class = value.partition("/")
    return bool(slash) and bool(_VENDOR_OR_CLASS.fullmatch(vendor)) and bool(_VENDOR_OR_CLASS.fullmatch(cdi_class))


def is_device_name(value: str) -> bool:
    """Whether ``value`` is a valid CDI device name."""
    return bool(_DEVICE.fullmatch(value))


def qualified_name(cdi_kind: str, device: str) -> str:
    """Return the fully-qualified CDI device ID ``vendor/class=device`` the kubelet passes to the runtime."""
    return f"{cdi_kind}={device}"


def claim_device_name(claim_uid: str, device: str, share_id: str | None = None) -> str:
    """Return the per-claim CDI device name ``<claimUID>-<device>[-<shareID>]``."""
    return f"{claim_uid}-{device}-{share_id}" if share_id else f"{claim_uid}-{device}"


def spec_file_prefix(cdi_kind: str) -> str:
    """Return ``vendor-class`` with ``/`` replaced, the stem every spec file of a kind starts with."""
    return cdi_kind.replace("/", "-")


def claim_spec_file(cdi_kind: str, claim_uid: str) -> str:
    """Return the transient per-claim spec file name, ``<vendor>-<class>_<claimUID>.yaml``."""
    return f"{spec_file_prefix(cdi_kind)}_{claim_uid.replace('/', '_')}.yaml"


def common_spec_file(cdi_kind: str) -> str:
    """Return the common spec file name, ``<vendor>-<class>_common.yaml``."""
    return f"{spec_file_prefix(cdi_kind)}_{COMMON_DEVICE}.yaml"
