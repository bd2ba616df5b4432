"""Loading profiles through the ``ascend_dra.profiles`` entry-point group, isolating broken ones.

Each entry point is loaded on its own (:func:`load_one`): the import, the factory call and the
contract check run inside one ``try``, and a failure becomes a :class:`ProfileLoadError` naming
the entry point and the distribution that shipped it, logged once with its traceback. At run
time :func:`discover_isolated` guards each profile's ``discover`` the same way, bounded by a
timeout, and rejects an inventory the API server would refuse (:mod:`ascend_dra.profiles.checks`).
The daemon skips what failed and goes on with the other profiles (docs/architecture.md#profiles).

Modelled on pluggy's ``load_setuptools_entrypoints`` (a ``(plugin, distribution)`` record per
entry point) and pytest's ``import_plugin`` (a failing plugin is named in the error), with two
differences: nothing a profile raises escapes, and two distributions registering one name is
reported rather than silently resolved.
"""

from __future__ import annotations

import inspect
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points

import anyio
import attrs

from ascend_dra.cdi import naming
from ascend_dra.model import Inventory
from ascend_dra.profiles import checks
from ascend_dra.profiles.base import Profile, ProfileContext

__all__ = (
    "ENTRY_POINT_GROUP",
    "LoadedProfile",
    "ProfileLoadError",
    "discover_isolated",
    "installed",
    "load_installed",
    "load_one",
    "load_profiles",
)

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "ascend_dra.profiles"


class ProfileLoadError(Exception):
    """A profile that cannot be used: it failed to load, or its discovery failed.

    Raised by :func:`discover_isolated`; held in :attr:`LoadedProfile.error` by :func:`load_one`.
    The cause (the profile's own exception, or :class:`TimeoutError`) is ``__cause__``.

    :ivar entry_point: the entry-point name (``fake``, ``npu-910``, ``example``, ...).
    :ivar distribution: ``"<name> <version>"`` of the distribution that registered it, or ``"unknown"``.
    :ivar reason: what went wrong, e.g. ``"discovery did not finish within 30 s"``.
    """

    def __init__(self, entry_point: str, distribution: str, reason: str) -> None:
        self.entry_point = entry_point
        self.distribution = distribution
        self.reason = reason
        super().__init__(f"profile {entry_point!r} from {distribution}: {reason}")


@attrs.frozen
class LoadedProfile:
    """One installed profile and how loading it went (a row of ``ascend-dra profiles``).

    :ivar name: entry-point name.
    :ivar distribution: distribution name (``ascend-dra``, ``ascend-dra-example-profile``), or ``"unknown"``.
    :ivar version: distribution version, ``""`` when unknown.
    :ivar target: the entry point's ``module:attr``.
    :ivar profile: the profile object, None when loading failed.
    :ivar error: why loading failed, None when it worked.
    """

    name: str
    distribution: str
    version: str
    target: str
    profile: Profile | None
    error: ProfileLoadError | None = None

    @property
    def status(self) -> str:
        """``"ok"`` or ``"broken: <reason>"``."""
        return "ok" if self.error is None else f"broken: {self.error.reason}"

    @property
    def where(self) -> str:
        """``"<distribution> <version>"``, as error messages name it."""
        return f"{self.distribution} {self.version}".strip()


def _distribution(ep: EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown", ""
    return dist.metadata["Name"] or "unknown", dist.version or ""


def installed() -> list[EntryPoint]:
    """Every entry point of the group, sorted by name (duplicates from several distributions kept)."""
    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


_REQUIRED_METHODS = ("default_config", "discover", "validate", "apply_config")
_OPTIONAL_PAIRS = (("prepare_side_effects", "unprepare_side_effects"),)


def contract_problems(profile: object, entry_point: str) -> list[str]:
    """Return how ``profile`` falls short of :class:`~ascend_dra.profiles.base.Profile`, empty if it does not.

    Checked: ``name`` equals the entry-point name; ``cdi_class`` is a valid CDI class; every
    required method is callable, ``discover`` an ``async def``; ``config_types`` maps each
    ``kind`` to an attrs class; ``default_config()`` returns None or an instance of one of them;
    ``prepare_side_effects`` and ``unprepare_side_effects`` come together and are ``async def``.
    """
    found = []
    name = getattr(profile, "name", None)
    if name is None:
        found.append("lacks 'name'")
    elif name != entry_point:
        found.append(f"name {name!r} differs from its entry-point name {entry_point!r}")
    cdi_class = getattr(profile, "cdi_class", None)
    if not isinstance(cdi_class, str) or not naming.is_kind(naming.kind("example.com", cdi_class)):
        found.append(f"cdi_class {cdi_class!r} is not a CDI class (a letter, then letters, digits, '_', '.', '-')")
    missing = [method for method in _REQUIRED_METHODS if not callable(getattr(profile, method, None))]
    if missing:
        found.append(f"lacks the method(s) {', '.join(missing)}")
    if "discover" not in missing and not inspect.iscoroutinefunction(profile.discover):  # type: ignore[attr-defined]
        found.append("discover is not an 'async def'")
    config_types = getattr(profile, "config_types", None)
    if not isinstance(config_types, Mapping):
        found.append(f"config_types is {type(config_types).__name__}, not a mapping of kind -> attrs class")
        config_types = {}
    else:
        for kind, cls in config_types.items():
            if not isinstance(kind, str) or not isinstance(cls, type) or not attrs.has(cls):
                found.append(f"config_types[{kind!r}] is {cls!r}, not an attrs class")
    if "default_config" not in missing:
        default = profile.default_config()  # type: ignore[attr-defined]
        kinds = tuple(cls for cls in config_types.values() if isinstance(cls, type))
        if default is not None and not isinstance(default, kinds):
            found.append(f"default_config() returned a {type(default).__name__}, not one of its config_types")
    declared = getattr(profile, "profile_options", None)
    if declared is not None:
        from ascend_dra.profiles.options import ProfileOption

        if not isinstance(declared, Mapping) or not all(
                isinstance(k, str) and isinstance(v, ProfileOption) for k, v in declared.items()):
            found.append("profile_options is not a mapping of key -> ProfileOption")
    for first, second in _OPTIONAL_PAIRS:
        present = [hook for hook in (first, second) if hasattr(profile, hook)]
        if len(present) == 1:
            found.append(f"has {present[0]} without {second if present[0] == first else first}")
        for hook in present:
            if not inspect.iscoroutinefunction(getattr(profile, hook)):
                found.append(f"{hook} is not an 'async def'")
    return found


def load_one(ep: EntryPoint, *, log: bool = True) -> LoadedProfile:
    """Import one entry point, call its factory and check the result against the contract.

    Never raises (except ``BaseException`` such as KeyboardInterrupt, but ``SystemExit`` included:
    a module that calls ``sys.exit`` on import is broken, not a reason to end the daemon unnamed): a
    failure is held in the result's ``error`` with the original exception as its ``__cause__``.

    :param log: log the outcome (INFO when loaded; ERROR with the traceback when broken). The
        ``ascend-dra profiles`` listing turns this off and shows the status instead.
    """
    dist_name, dist_version = _distribution(ep)
    where = f"{dist_name} {dist_version}".strip()
    try:
        factory = ep.load()
        profile = factory()
        problems = contract_problems(profile, ep.name)
        if problems:
            raise TypeError(f"the object from {ep.value} does not satisfy the profile contract "
                            f"(ascend_dra/profiles/base.py): {'; '.join(problems)}")
    except (Exception, SystemExit) as exc:
        error = ProfileLoadError(ep.name, where, f"{type(exc).__name__}: {exc}")
        error.__cause__ = exc
        if log:
            logger.error("profile broken, skipped", exc_info=exc,
                         extra={"profile": ep.name, "distribution": where, "target": ep.value})
        return LoadedProfile(ep.name, dist_name, dist_version, ep.value, None, error)
    if log:
        logger.info("profile loaded", extra={"profile": ep.name, "distribution": where, "target": ep.value})
    return LoadedProfile(ep.name, dist_name, dist_version, ep.value, profile)


def _by_name(eps: Iterable[EntryPoint]) -> dict[str, list[EntryPoint]]:
    grouped: dict[str, list[EntryPoint]] = defaultdict(list)
    for ep in eps:
        grouped[ep.name].append(ep)
    return grouped


def _duplicate(name: str, candidates: Sequence[EntryPoint]) -> LoadedProfile:
    wheres = [" ".join(_distribution(ep)).strip() for ep in candidates]
    shipped = "; ".join(f"{where}: {ep.value}" for where, ep in zip(wheres, candidates, strict=True))
    dist_name, dist_version = _distribution(candidates[0])
    error = ProfileLoadError(name, ", ".join(wheres), f"registered by {len(candidates)} distributions "
                             f"({shipped}); uninstall all but one")
    return LoadedProfile(name, dist_name, dist_version, candidates[0].value, None, error)


def load_profiles(
    names: Sequence[str], eps: Iterable[EntryPoint] | None = None, *, log: bool = True
) -> list[LoadedProfile]:
    """Load the profiles called ``names``, in that order, one result per name.

    A name with no entry point gives a result whose error lists the installed names; a name that
    two distributions register gives a result whose error names both, and neither is loaded.

    :param eps: the entry points to choose from; default :func:`installed`. Tests pass their own.
    """
    grouped = _by_name(eps if eps is not None else installed())
    results = []
    for name in names:
        candidates = grouped.get(name, [])
        if len(candidates) == 1:
            results.append(load_one(candidates[0], log=log))
            continue
        if candidates:
            result = _duplicate(name, candidates)
        else:
            known = ", ".join(sorted(grouped)) or "none"
            error = ProfileLoadError(name, "unknown", f"no profile {name!r} is installed; installed: {known}")
            result = LoadedProfile(name, "unknown", "", "", None, error)
        if log:
            what = "profile broken, skipped" if candidates else "no such profile"
            logger.error(what, extra={"profile": name, "reason": str(result.error)})
        results.append(result)
    return results


def load_installed(eps: Iterable[EntryPoint] | None = None, *, log: bool = False) -> list[LoadedProfile]:
    """Load every installed profile, sorted by name (for ``ascend-dra profiles``).

    A name registered by several distributions gives one result per distribution, each broken.
    """
    results = []
    for name, candidates in sorted(_by_name(eps if eps is not None else installed()).items()):
        if len(candidates) == 1:
            results.append(load_one(candidates[0], log=log))
            continue
        duplicate = _duplicate(name, candidates)
        for ep in candidates:
            dist_name, dist_version = _distribution(ep)
            results.append(attrs.evolve(duplicate, distribution=dist_name, version=dist_version, target=ep.value))
    return results


async def discover_isolated(loaded: LoadedProfile, ctx: ProfileContext, *, timeout_s: float) -> Inventory:
    """Run ``loaded.profile.discover(ctx)``, bounded by ``timeout_s`` seconds, and check its result.

    The timeout cancels a discovery that awaits forever. It cannot interrupt code that blocks
    the event loop, nor a worker thread started without ``abandon_on_cancel=True``; the contract
    asks profiles for neither (docs/writing-a-profile.md).

    :param loaded: a result of :func:`load_one` / :func:`load_profiles`.
    :param timeout_s: seconds discovery may take.
    :returns: the inventory, when :func:`checks.inventory_problems` finds nothing wrong.
    :raises ProfileLoadError: naming the profile and its distribution, when the profile did not
        load, discovery raised or timed out, returned something other than an ``Inventory``, or
        returned devices the API server would reject (every problem listed).
    """
    if loaded.profile is None:
        raise loaded.error or ProfileLoadError(loaded.name, loaded.where or "unknown", "not loaded")
    where = loaded.where or "unknown"
    scope = anyio.CancelScope()
    try:
        with anyio.fail_after(timeout_s) as scope:
            inventory = await loaded.profile.discover(ctx)
    except Exception as exc:
        if isinstance(exc, TimeoutError) and scope.cancelled_caught:
            reason = f"discovery did not finish within {timeout_s:g} s"
        else:
            reason = f"discovery failed: {type(exc).__name__}: {exc}"
        raise ProfileLoadError(loaded.name, where, reason) from exc
    if not isinstance(inventory, Inventory):
        raise ProfileLoadError(loaded.name, where,
                               f"discovery returned a {type(inventory).__name__}, not an Inventory")
    # In a worker thread: checking every device is CPU work that grows with the inventory (15-28 ms
    # for 1,300 devices in one benchmark), and the loop must stay free for GetInfo and Prepare
    # (docs/performance.md#getinfo-and-the-event-loop); the interpreter switches threads every 5 ms.
    problems = await anyio.to_thread.run_sync(checks.inventory_problems, inventory)
    if problems:
        raise ProfileLoadError(loaded.name, where, "discovery returned an invalid inventory: " + "; ".join(problems))
    return inventory
