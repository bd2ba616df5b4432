"""Which Kubernetes version a cluster test runs on, and skipping (with the reason) what it lacks."""

from __future__ import annotations

import pytest

__all__ = ("at_least", "require_k8s")


def _minor_tuple(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def at_least(version: str, minimum: str) -> bool:
    """``"1.37"`` is at least ``"1.36"``."""
    return _minor_tuple(version) >= _minor_tuple(minimum)


def require_k8s(version: str, minimum: str, feature: str) -> None:
    """Skip the calling test when the cluster (``version``) is older than ``minimum``, naming the feature."""
    if not at_least(version, minimum):
        pytest.skip(f"Kubernetes {version} lacks {feature} (needs {minimum} or later)")
