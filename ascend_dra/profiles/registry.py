"""Loading profiles through the ``ascend_dra.profiles`` entry-point group, isolating broken ones.

A profile that fails to import, whose factory raises, or whose object does not satisfy the
contract is reported as a :class:`ProfileLoadError` naming the entry point and the distribution
that shipped it; the daemon logs it and goes on with the other profiles (DESIGN §4).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib.metadata import EntryPoint, entry_points

import attrs

from ascend_dra.profiles.base import Profile

__all__ = ("ENTRY_POINT_GROUP", "LoadedProfile", "ProfileLoadError", "installed", "load_profiles")

ENTRY_POINT_GROUP = "ascend_dra.profiles"


class ProfileLoadError(Exception):
    """Raised (and collected) by :func:`load_profiles` when a profile cannot be loaded.

    :ivar entry_point: the entry-point name (``fake``, ``npu-910``, ...).
    :ivar distribution: ``name version`` of the distribution that registered it, or ``"unknown"``.
    :ivar reason: what went wrong.
    """

    def __init__(self, entry_point: str, distribution: str, reason: str) -> None:
        self.entry_point = entry_point
        self.distribution = distribution
        self.reason = reason
        super().__init__(f"profile {entry_point!r} from {distribution}: {reason}")


@attrs.frozen
class LoadedProfile:
    """One installed profile and how loading it went (for ``ascend-dra profiles``)."""

    name: str
    distribution: str
    version: str
    target: str
    profile: Profile | None
    error: ProfileLoadError | None = None

    @property
    def status(self) -> str:
        return "ok" if self.error is None else f"error: {self.error.reason}"


def _distribution(ep: EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown", ""
    return dist.metadata["Name"], dist.version


def installed() -> list[EntryPoint]:
    """Every entry point of the group, sorted by name (duplicates from several distributions kept)."""
    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


_REQUIRED = ("name", "cdi_class", "config_types", "default_config", "discover", "validate", "apply_config")


def load_one(ep: EntryPoint) -> LoadedProfile:
    """Import and instantiate one entry point; never raises (the error is in the result)."""
    dist_name, dist_version = _distribution(ep)
    where = f"{dist_name} {dist_version}".strip()
    try:
        factory = ep.load()
        profile = factory()
        missing = [attr for attr in _REQUIRED if not hasattr(profile, attr)]
        if missing:
            raise TypeError(f"the object from {ep.value} lacks {', '.join(missing)} (see profiles/base.py)")
    except Exception as exc:
        error = ProfileLoadError(ep.name, where, f"{type(exc).__name__}: {exc}")
        return LoadedProfile(ep.name, dist_name, dist_version, ep.value, None, error)
    return LoadedProfile(ep.name, dist_name, dist_version, ep.value, profile)


def load_profiles(names: Sequence[str], eps: Iterable[EntryPoint] | None = None) -> list[LoadedProfile]:
    """Load the profiles called ``names``, in that order.

    A name with no entry point gives a result whose error lists the installed names.
    """
    by_name: dict[str, EntryPoint] = {}
    for ep in eps if eps is not None else installed():
        by_name.setdefault(ep.name, ep)
    results = []
    for name in names:
        ep = by_name.get(name)
        if ep is None:
            known = ", ".join(sorted(by_name)) or "none"
            error = ProfileLoadError(name, "unknown", f"no such profile; installed: {known}")
            results.append(LoadedProfile(name, "unknown", "", "", None, error))
        else:
            results.append(load_one(ep))
    return results
