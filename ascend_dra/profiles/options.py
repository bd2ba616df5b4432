"""Profile options (``--profile-option PROFILE.KEY=VALUE``): what each profile declares, and the check
that runs before start-up so a typo stops the daemon with one line instead of emptying its pool.

A profile declares its options as ``profile_options: Mapping[str, ProfileOption]`` (key -> what it
accepts); a profile without the attribute is not checked (third-party profiles written before it).
Keys are ``<profile>.<key>`` (that profile only) or a bare ``<key>`` (every loaded profile that
declares it). :func:`option_problems` reports:

* ``<profile>.<key>`` of a profile that is not loaded (``--profiles``);
* a key the profile does not declare, listing the keys it does;
* a bare key that no loaded profile declares;
* a value the option does not accept (not one of its choices, or refused by its check).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import PurePosixPath

import attrs

__all__ = ("ProfileOption", "absolute_path", "option_problems", "simulate_option")


@attrs.frozen
class ProfileOption:
    """One option a profile reads from ``ProfileContext.options``.

    :ivar help: what it does, one sentence.
    :ivar choices: the allowed values; empty when any value that passes ``check`` is allowed.
    :ivar check: called with the value; raises :class:`ValueError` saying what is wrong with it
        (e.g. ``"is not an absolute path"``).
    """

    help: str
    choices: tuple[str, ...] = ()
    check: Callable[[str], None] | None = None

    def problem(self, value: str) -> str | None:
        """What is wrong with ``value``, or None."""
        if self.choices and value not in self.choices:
            return f"{value!r} is not one of {', '.join(self.choices)}"
        if self.check is not None:
            try:
                self.check(value)
            except ValueError as exc:
                return f"{value!r} {exc}"
        return None


def absolute_path(value: str) -> None:
    """Check for :attr:`ProfileOption.check`: an absolute POSIX path.

    :raises ValueError: ``"is not an absolute path"``.
    """
    if not PurePosixPath(value).is_absolute():
        raise ValueError("is not an absolute path")


def simulate_option(help: str = "when simulated devices are published: never, when nothing real is found "
                                "(fallback), or always") -> ProfileOption:
    """The ``simulate`` option of the profiles that can simulate devices: never | fallback | always."""
    return ProfileOption(help=help, choices=("never", "fallback", "always"))


def _declared(profile: object) -> Mapping[str, ProfileOption] | None:
    declared = getattr(profile, "profile_options", None)
    return declared if isinstance(declared, Mapping) else None


def _takes(name: str, declared: Mapping[str, ProfileOption] | None) -> str:
    if declared is None:
        return f"{name} takes any"
    return f"{name} takes {', '.join(declared)}" if declared else f"{name} takes no options"


def option_problems(options: Mapping[str, str], profiles: Mapping[str, object], *, source: str) -> list[str]:
    """Check ``options`` against the loaded ``profiles``' declarations (see the module docstring).

    :param options: key -> value, as given.
    :param profiles: profile name -> profile object, the ones ``--profiles`` loaded.
    :param source: how the user gave them, for the messages (``--profile-option``, ``PROFILE_OPTIONS``).
    :return: one message per problem, each naming ``source``, the key and what is accepted.
    """
    problems = []
    loaded = ",".join(profiles) or "none"
    for key, value in options.items():
        owner = next((name for name in profiles if key.startswith(f"{name}.")), None)
        if owner is not None:
            targets = {owner: key[len(owner) + 1:]}
        elif "." in key:
            problems.append(f"{source} {key}: profile {key.split('.', 1)[0]!r} is not loaded (--profiles {loaded})")
            continue
        else:
            targets = {name: key for name, p in profiles.items()
                       if _declared(p) is None or key in (_declared(p) or {})}
            if not targets:
                takes = "; ".join(_takes(name, _declared(p)) for name, p in profiles.items())
                problems.append(f"{source} {key}: unknown to every loaded profile ({takes}); "
                                "give PROFILE.KEY=VALUE")
                continue
        for name, option_key in targets.items():
            declared = _declared(profiles[name])
            if declared is None:
                continue
            option = declared.get(option_key)
            if option is None:
                problems.append(f"{source} {key}: unknown; {_takes(name, declared)}")
                continue
            problem = option.problem(value)
            if problem is not None:
                problems.append(f"{source} {key}: {problem}")
    return problems
