"""Checks ``ascend-dra run`` makes before it logs anything or binds a socket, so that a configuration
or permission error stops start-up with one line naming the flag and what to do.

In order: the profiles named by ``--profiles`` are loaded (an unknown name, or every one broken, is an
error); the profile options are checked against what the loaded profiles declare
(:func:`ascend_dra.profiles.options.option_problems`); the host paths the profiles read are checked
(``--dev-root``, ``--sys-root``, an ``--npu-smi`` path, the profile options that name a path); the
directories the daemon writes are created (the plugin and registration dirs, the CDI dir); the boot id
is read. The CLI runs them in that order
(``cli._preflight``; ``discover`` the first three). The daemon then repeats the loading with logging
on, and does the rest.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ascend_dra.node.settings import Settings

if TYPE_CHECKING:
    from ascend_dra.profiles.registry import LoadedProfile

#: Longest unix socket path Linux takes (``sun_path`` is 108 bytes with the terminating NUL).
MAX_SOCKET_PATH = 107

__all__ = ("MAX_SOCKET_PATH", "PreflightError", "check_installed", "check_node_paths", "check_option_paths",
           "check_paths", "check_profiles")


class PreflightError(Exception):
    """Start-up cannot go on; ``str(exc)`` is the one line to print (flag, problem, what to do)."""


def check_installed(profiles: tuple[str, ...]) -> list[LoadedProfile]:
    """Load ``profiles`` quietly; return their registry entries (loaded or broken).

    :raises PreflightError: a name no installed distribution provides (the first, with the installed names).
    """
    from ascend_dra.profiles.registry import load_profiles

    entries = load_profiles(list(profiles), log=False)
    unknown = [e for e in entries if e.error is not None and not e.target]
    if unknown:
        raise PreflightError(f"--profiles {','.join(profiles)}: {unknown[0].error.reason if unknown[0].error else ''}")
    return entries


def broken_profiles(entries: Sequence[LoadedProfile]) -> None:
    """:raises PreflightError: naming every entry that did not load, with its distribution and why."""
    broken = [e for e in entries if e.profile is None]
    if broken:
        raise PreflightError("; ".join(str(e.error) if e.error is not None else f"profile {e.name!r} did not load"
                                       for e in broken))


def check_profiles(profiles: tuple[str, ...], options: Mapping[str, Mapping[str, str]]) -> dict[str, object]:
    """Load ``profiles`` quietly and check ``options`` against their declarations.

    :param options: source (``--profile-option``, ``PROFILE_OPTIONS``) -> key -> value.
    A loaded profile with a ``preflight(options)`` method is asked whether it can start (the gpu
    profile: is pynvml installed); what it raises is reported.

    :return: the loaded profiles by name (for :func:`check_option_paths`).

    :raises PreflightError: an uninstalled profile name, a named profile that does not load (a
        daemon without a profile it was told to run would serve a pool short of its devices: a
        configuration error, unlike a discovery that fails, which is retried), bad options, or a
        profile's preflight refusal (all of them, ``; ``-joined).
    """
    from ascend_dra.profiles.options import option_problems

    entries = check_installed(profiles)
    broken_profiles(entries)
    loaded = {e.name: e.profile for e in entries if e.profile is not None}
    problems = [p for source, given in options.items() for p in option_problems(given, loaded, source=source)]
    if problems:
        raise PreflightError("; ".join(problems))
    merged = {k: v for given in options.values() for k, v in given.items()}
    for name, profile in loaded.items():
        hook = getattr(profile, "preflight", None)
        if callable(hook):
            try:
                hook(merged)
            except (Exception, SystemExit) as exc:  # a profile's own readiness check: its message is the line
                problems.append(str(exc) or f"profile {name}: {type(exc).__name__}")
    if problems:
        raise PreflightError("; ".join(problems))
    return loaded


def check_option_paths(loaded: Mapping[str, object], options: Mapping[str, Mapping[str, str]]) -> None:
    """The profile options that name a path on the node (``ProfileOption.path``: ``hostRoot``,
    ``driverDir``, ``vnpu-dev-dir``, ``boot-id-file``, ...) must name an existing directory or file,
    as ``--dev-root`` must: a mistyped one was accepted, and the daemon served with warnings only.

    :param loaded: what :func:`check_profiles` returned.
    :raises PreflightError: naming every such option given that names nothing of its kind (``; ``-joined).
    """
    from ascend_dra.profiles.options import option_path_problems

    problems = [p for source, given in options.items() for p in option_path_problems(given, loaded, source=source)]
    if problems:
        raise PreflightError("; ".join(problems))


def _advice(flag: str, standalone: bool) -> str:
    if standalone:
        return "pass a --standalone DIR this user can write"
    if flag == "--cdi-root":
        return ("run as root (the container runtime reads CDI specs from a root-owned directory), or pass "
                "--cdi-root DIR")
    return ("run as root (the kubelet's directories belong to root), or pass --kubelet-root-dir DIR, "
            "or --standalone DIR for a local run")


def _make_dir(path: Path, mode: int, flag: str, standalone: bool, *, writable: bool = True) -> None:
    """Create ``path``; with ``writable``, also check a file can be made in it."""
    try:
        path.mkdir(mode=mode, parents=True, exist_ok=True)
        if not path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
        if writable:
            probe = path / ".ascend-dra-write-check"
            probe.touch()
            probe.unlink()
    except PermissionError as exc:
        where = f" (at {exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
        raise PreflightError(f"{flag} {path}: permission denied{where}; {_advice(flag, standalone)}") from None
    except OSError as exc:
        raise PreflightError(f"{flag} {path}: cannot create or write it: {exc.strerror or exc}") from None


def check_paths(settings: Settings) -> None:
    """Check the socket paths' length, read the boot id, and create the directories the daemon writes.

    :raises PreflightError: a boot id file that is missing, unreadable or empty, a directory that
        cannot be created or written (permission denied says to run as root or which flag picks
        another directory), and then, in cluster mode, no kubeconfig file and no in-cluster service
        account (:func:`~ascend_dra.cluster.apiclient.cluster_access_problem`).
    """
    standalone = settings.standalone is not None
    flag_plugins = "--standalone" if standalone else "--kubelet-plugins-directory-path (or --kubelet-root-dir)"
    flag_registrar = "--standalone" if standalone else "--kubelet-registrar-directory-path (or --kubelet-root-dir)"
    assert settings.registrar_dir is not None
    for socket, flag in ((settings.dra_socket, flag_plugins), (settings.registration_socket, flag_registrar)):
        if len(os.fsencode(socket)) > MAX_SOCKET_PATH:
            raise PreflightError(f"{flag}: the socket path {socket} is {len(os.fsencode(socket))} bytes, over the "
                                 f"{MAX_SOCKET_PATH}-byte unix socket limit; use a shorter directory")
        if os.path.lexists(socket) and not stat.S_ISSOCK(os.lstat(socket).st_mode):
            # Found here, before anything is published, not when the socket is bound.
            raise PreflightError(f"{flag}: {socket} exists and is not a socket; the daemon replaces only a socket "
                                 "there, so move it away")
    path = settings.boot_id_file  # read before any directory is made for a daemon that cannot start
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        raise PreflightError(f"--boot-id-file {path} does not exist (the kernel's is "
                             "/proc/sys/kernel/random/boot_id)") from None
    except PermissionError:
        raise PreflightError(f"--boot-id-file {path}: permission denied; run as root or pass a readable "
                             "--boot-id-file") from None
    except OSError as exc:
        raise PreflightError(f"--boot-id-file {path}: cannot be read: {exc.strerror or exc}") from None
    if not text:
        raise PreflightError(f"--boot-id-file {path} is empty")
    _make_dir(settings.plugin_dir, 0o750, flag_plugins, standalone)
    _make_dir(settings.registrar_dir, 0o755, flag_registrar, standalone)  # shared: the kubelet's mode
    # An existing read-only CDI dir is not refused: the daemon serves and reports each spec it cannot
    # write or remove on its claim (docs/durable-state.md), so only its creation is checked here.
    _make_dir(settings.cdi_root, 0o755, "--standalone" if standalone else "--cdi-root", standalone, writable=False)
    if not standalone:  # after the paths: a run as non-root is told about those first
        from ascend_dra.cluster.apiclient import cluster_access_problem

        if (problem := cluster_access_problem(settings.kubeconfig)) is not None:
            raise PreflightError(problem)


def check_node_paths(dev_root: Path, sys_root: Path, npu_smi: str) -> None:
    """The host paths the profiles read, as ``run`` and ``discover`` got them: ``--dev-root`` and
    ``--sys-root`` must be directories, and an ``--npu-smi`` given as a path must exist and be
    executable. A mistyped one made a daemon that served an empty pool, with warnings only. A bare
    name (the default ``npu-smi``) is looked up at each discovery (docs/ascend-discovery.md).

    :raises PreflightError: naming the flag.
    """
    for flag, path, what, host in (("--dev-root", dev_root, "where device nodes are looked for", "/dev"),
                                   ("--sys-root", sys_root, "where sysfs is read", "/sys")):
        if not os.path.isdir(path):
            raise PreflightError(f"{flag} {path} is not a directory ({what}; the host's is {host})")
    if "/" in npu_smi:
        if not os.path.exists(npu_smi):
            raise PreflightError(f"--npu-smi {npu_smi} does not exist (give the executable's path, or the bare name "
                                 "npu-smi to look on $PATH and in the driver's install locations)")
        if not os.path.isfile(npu_smi) or not os.access(npu_smi, os.X_OK):
            raise PreflightError(f"--npu-smi {npu_smi} is not an executable file")
    elif npu_smi != "npu-smi" and shutil.which(npu_smi) is None:
        # Another bare name is looked up on $PATH only; a mistyped one served an empty pool.
        raise PreflightError(f"--npu-smi {npu_smi} is not on $PATH (give the executable's path, or the bare name "
                             "npu-smi to look on $PATH and in the driver's install locations)")
