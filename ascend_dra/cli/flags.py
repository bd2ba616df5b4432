"""The command line's parser machinery: flags with environment twins, value types, shared flag groups.

Every flag made with :func:`flag` has an environment twin (``--node-name`` and ``NODE_NAME``) shown
in ``--help``; a twin is read only when its subcommand runs (:class:`Parser`), so a bad variable of
another subcommand is no error. Standard library only: ``ascend-dra --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

__all__ = ("DEFAULT_DRIVER_NAME", "UNHEALTHY_DEVICES", "Parser", "VersionAction", "boolean", "comma_list", "flag",
           "kubelet_dir_flags", "kubelet_dirs", "log_flags", "log_level", "node_flags", "option", "options", "path")

DEFAULT_DRIVER_NAME = "ascend.project-hami.io"  # = settings.DEFAULT_DRIVER_NAME (not imported: keep --help light)
UNHEALTHY_DEVICES = ("taint", "withdraw", "publish")  # = settings.UNHEALTHY_DEVICES


class _Unset:
    """The argparse default of a flag with an environment twin: resolved after parsing (:class:`Parser`)."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


class _Twin(NamedTuple):
    """A flag's environment twin; read only when that flag's subcommand runs."""

    dest: str
    flag: str
    env: str
    default: Any
    type: Callable[[str], Any]
    choices: tuple[str, ...] | None

    def resolve(self) -> Any:
        """The env value converted by ``type``, or the default when the variable is unset or empty.

        A list (``PROFILES``) set empty is an empty list, not the default: a chart rendered with
        ``profiles: []`` must not load a profile nobody named; the command refuses the empty list.

        :raises ValueError: one line naming the variable, its flag and what it accepts.
        """
        raw = os.environ.get(self.env)
        if raw is None or (raw == "" and self.type is not comma_list):
            return self.default
        try:
            value = self.type(raw)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            # int()'s own words ("invalid literal for int() with base 10") and boolean's (which repeat
            # the value) say nothing the line does not; other types' do (a log level's choices).
            detail = "" if self.type in (int, float, boolean) else f": {exc}"
            raise ValueError(f"environment variable {self.env}={raw!r} (the twin of {self.flag}) is not "
                             f"{_accepts(self.type)}{detail}") from None
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"environment variable {self.env}={raw!r} (the twin of {self.flag}) is not "
                             f"one of {', '.join(self.choices)}")
        return value


def _accepts(type_: Callable[[str], Any]) -> str:
    return {int: "an integer", float: "a number", boolean: "true or false (true, false, yes, no, on, off, 1, 0)",
            Path: "a path", path: "a path",
            log_level: "a log level"}.get(type_, "a valid value")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, and whose flags' environment twins are read
    only for the subcommand that runs (so ``METRICS_PORT=abc ascend-dra call`` is not an error)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.twins: list[_Twin] = []

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        parsed, rest = super().parse_known_args(args, namespace)
        if rest and " " in self.prog:  # a subcommand's parser: say it here, with its own --help
            self.error(f"unrecognized arguments: {' '.join(rest)}")
        #: dest -> where its value came from: the flag (``--x``), its variable (``X``), or None (default).
        given: dict[str, str | None] = getattr(parsed, "given", {})
        for twin in self.twins:
            if getattr(parsed, twin.dest, None) is _UNSET:
                try:
                    setattr(parsed, twin.dest, twin.resolve())
                except ValueError as exc:
                    self.exit(2, f"{self.prog}: {exc}\n")
                given[twin.dest] = twin.env if os.environ.get(twin.env) else None
            elif hasattr(parsed, twin.dest):
                given[twin.dest] = twin.flag
        parsed.given = given
        parsed.variables = getattr(parsed, "variables", ()) + tuple(twin.env for twin in self.twins)
        return parsed, rest

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: <message> (see <prog> --help)`` as one line and exit 2."""
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def flag(
    parser: Parser,
    flag: str,
    env: str,
    default: Any,
    help: str,
    type: Callable[[str], Any] = str,
    **kwargs: Any,
) -> None:
    shown = "none" if default in (None, "") else ",".join(default) if isinstance(default, tuple) else default
    action = parser.add_argument(flag, default=_UNSET, type=type, help=f"{help} [env {env}; default {shown}]",
                                 **kwargs)
    choices = tuple(kwargs["choices"]) if "choices" in kwargs else None
    parser.twins.append(_Twin(action.dest, flag, env, default, type, choices))


def boolean(value: str) -> bool:
    """true/1/yes/on or false/0/no/off, any case.

    :raises argparse.ArgumentTypeError: anything else (argparse prints its message, not the
        function's name).
    """
    if value.lower() in ("true", "1", "yes", "on"):
        return True
    if value.lower() in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not true or false (true, false, yes, no, on, off, 1, 0)")


def log_level(value: str) -> str:
    """``LEVEL[,LOGGER=LEVEL...]`` (see :func:`ascend_dra.observe.logs.parse_log_level`), checked, returned as given."""
    from ascend_dra.observe.logs import parse_log_level  # stdlib and orjson only

    try:
        parse_log_level(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def path(value: str) -> Path:
    """A path flag's value; an empty one is refused (``Path("")`` is the working directory, so
    ``--standalone ''`` wrote the daemon's files there)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("is empty: give a path")
    return Path(value)


def comma_list(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def option(value: str) -> tuple[str, str]:
    key, eq, val = value.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE (e.g. npu-910.simulate=fallback)")
    return key.strip(), val.strip()


def options(value: str) -> tuple[tuple[str, str], ...]:
    return tuple(option(v) for v in value.split(",") if v.strip())


def node_flags(p: Parser, node_required: bool) -> None:
    # The kubelet's own default node name is the host name in lower case.
    flag(p, "--node-name", "NODE_NAME", None if node_required else socket.gethostname().lower(),
          "name of this node (the ResourceSlice pool name)")
    flag(p, "--driver-name", "DRIVER_NAME", DEFAULT_DRIVER_NAME, "DRA driver name")
    flag(p, "--profiles", "PROFILES", ("npu-910",), "comma-separated device profiles to load", type=comma_list)
    flag(p, "--fake-devices", "FAKE_DEVICES", 4, "number of simulated devices (fake profile, simulated tiers)",
          type=int)
    flag(p, "--npu-smi", "NPU_SMI", "npu-smi", "npu-smi executable")
    flag(p, "--dev-root", "DEV_ROOT", Path("/dev"), "where device nodes are looked for", type=path)
    flag(p, "--sys-root", "SYS_ROOT", Path("/sys"), "where sysfs is read", type=path)
    p.add_argument("--profile-option", action="append", type=option, default=[], metavar="PROFILE.KEY=VALUE",
                   help="a profile option, repeatable, e.g. npu-910.simulate=fallback; env PROFILE_OPTIONS takes "
                        "a comma-separated list [env PROFILE_OPTIONS; default none]")


def log_flags(p: Parser) -> None:
    from ascend_dra.observe.logs import THIRD_PARTY

    flag(p, "--log-level", "LOG_LEVEL", "info",
          f"debug, info, warning or error; third-party libraries ({', '.join(THIRD_PARTY)}) stay at warning "
          "unless named: debug,grpclib=debug (docs/logging.md)", type=log_level)
    flag(p, "--log-format", "LOG_FORMAT", "text", "text or json", choices=("text", "json"))


def kubelet_dir_flags(p: Parser) -> None:
    """The kubelet's root dir and the two dirs under it (derived unless given)."""
    flag(p, "--kubelet-root-dir", "KUBELET_ROOT_DIR", Path("/var/lib/kubelet"),
          "the kubelet's --root-dir; the DRA socket must be inside it (kubelet 1.38 checks)", type=path)
    flag(p, "--kubelet-registrar-directory-path", "KUBELET_REGISTRAR_DIRECTORY_PATH", "<root-dir>/plugins_registry",
          "kubelet plugin registration directory", type=path)
    flag(p, "--kubelet-plugins-directory-path", "KUBELET_PLUGINS_DIRECTORY_PATH", "<root-dir>/plugins",
          "kubelet plugins directory (our data dir is <this>/<driver>)", type=path)


def kubelet_dirs(args: argparse.Namespace) -> tuple[Path, Path]:
    """``(registration dir, plugins dir)`` from the flags: given ones as is, the others under the root dir."""
    registrar, plugins = args.kubelet_registrar_directory_path, args.kubelet_plugins_directory_path
    root = args.kubelet_root_dir
    return (root / "plugins_registry" if str(registrar) == "<root-dir>/plugins_registry" else registrar,
            root / "plugins" if str(plugins) == "<root-dir>/plugins" else plugins)


class VersionAction(argparse.Action):
    """``--version``: print ``ascend-dra <version> (<python>)`` and exit 0 (the version is looked up
    only when asked, so ``--help`` stays fast)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the version of ascend-dra and of the Python running it, and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from ascend_dra.version import describe

        print(describe())
        parser.exit()
