"""The dependency lower bounds in pyproject.toml are the versions hack/floors.txt pins for
``make test-floors``, and the APIs we need from the lowest kubernetes-asyncio are there."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def lower_bounds() -> dict[str, Version]:
    """Package -> the lowest version its pyproject.toml requirement allows (``>=X`` or ``==X.*``)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    bounds = {}
    for text in deps:
        requirement = Requirement(text)
        floors = [Version(s.version.removesuffix(".*")) for s in requirement.specifier if s.operator in (">=", "==")]
        assert len(floors) == 1, f"{text}: give exactly one lower bound (>=X or ==X.*)"
        bounds[canonicalize_name(requirement.name)] = floors[0]
    return bounds


def pinned() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "hack" / "floors.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_every_lower_bound_is_pinned_for_the_floor_run() -> None:
    assert lower_bounds() == pinned()


def test_the_kubernetes_asyncio_floor_has_the_resource_v1_api() -> None:
    from kubernetes_asyncio import client

    assert callable(client.ResourceV1Api.read_namespaced_resource_claim)
    assert lower_bounds()["kubernetes-asyncio"] >= Version("34.3.3")  # 33.x has only v1beta1/v1beta2
