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

An option that names a path on the node (:attr:`ProfileOption.path`) is checked again, on this
host, by :func:`option_path_problems`: a given path that does not exist, or is not the kind the
option names (a directory, a file), is a start-up error like a missing ``--dev-root`` (exit code 1,
README "Running it"), not a warning after start-up. A path the option defaults to is not checked
there: its absence is the profile's to report, per chip or per discovery.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import PurePosixPath
from typing import Literal

import attrs

__all__ = ("ProfileOption", "absolute_path", "option_path_problems", "option_problems", "path_option",
           "simulate_option")

#: What a path option names: a directory, or a regular file.
PathKind = Literal["directory", "file"]


@attrs.frozen
class ProfileOption:
    """One option a profile reads from ``ProfileContext.options``.

    :ivar help: what it does, one sentence.
    :ivar choices: the allowed values; empty when any value that passes ``check`` is allowed.
    :ivar check: called with the value; raises :class:`ValueError` saying what is wrong with it
        (e.g. ``"is not an absolute path"``).
    :ivar path: ``"directory"`` or ``"file"`` when the value names a path on the node, which must
        then exist as that kind before start-up (:func:`option_path_problems`); None otherwise.
    """

    help: str
    choices: tuple[str, ...] = ()
    check: Callable[[str], None] | None = None
    path: PathKind | None = None

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


def path_option(help: str, kind: PathKind) -> ProfileOption:
    """An option whose value is an absolute path on the node naming an existing ``kind``
    (``"directory"`` or ``"file"``), checked before start-up (:func:`option_path_problems`)."""
    return ProfileOption(help=help, check=absolute_path, path=kind)


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


def _resolved(options: Mapping[str, str], profiles: Mapping[str, object], source: str,
              problems: list[str]) -> Iterator[tuple[str, str, ProfileOption]]:
    """``(key as given, value, declared option)`` for each option a loaded profile declares; what
    does not resolve (a profile not loaded, an unknown key) is appended to ``problems``."""
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
            yield key, value, option


def option_problems(options: Mapping[str, str], profiles: Mapping[str, object], *, source: str) -> list[str]:
    """Check ``options`` against the loaded ``profiles``' declarations (see the module docstring).

    :param options: key -> value, as given.
    :param profiles: profile name -> profile object, the ones ``--profiles`` loaded.
    :param source: how the user gave them, for the messages (``--profile-option``, ``PROFILE_OPTIONS``).
    :return: one message per problem, each naming ``source``, the key and what is accepted.
    """
    problems: list[str] = []
    for key, value, option in _resolved(options, profiles, source, problems):
        problem = option.problem(value)
        if problem is not None:
            problems.append(f"{source} {key}: {problem}")
    return problems


def option_path_problems(options: Mapping[str, str], profiles: Mapping[str, object], *, source: str) -> list[str]:
    """The path options (:attr:`ProfileOption.path`) among ``options`` that name nothing of their
    kind on this host (blocking: stats each path). Run it after :func:`option_problems` found none.

    :return: one message per path, naming ``source``, the key, the path, what it must be and what
        the option is for, e.g. ``--profile-option HAMivNPUCore.hostRoot: /nonexistent does not
        exist (a directory: prefix of every default path (a lab's fake host root))``.
    """
    problems: list[str] = []
    for key, value, option in _resolved(options, profiles, source, []):
        if option.path is None or option.problem(value) is not None:
            continue
        what = f"a {option.path}: {option.help}"
        if not os.path.exists(value):
            problems.append(f"{source} {key}: {value} does not exist ({what})")
        elif not (os.path.isdir(value) if option.path == "directory" else os.path.isfile(value)):
            problems.append(f"{source} {key}: {value} is not a {option.path} ({what})")
    return problems
