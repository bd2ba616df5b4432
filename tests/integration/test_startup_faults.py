"""Configuration and permission faults, as an operator meets them through the real ``ascend-dra`` script.

Every case must stop start-up with exactly one line on stderr that names the flag, environment
variable or option (and what it accepts), exit non-zero, print no traceback and leave no socket.
The permission cases run the script without the capabilities that let root ignore mode bits
(CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) when the suite runs as root, so the kernel refuses it exactly
as it refuses an unprivileged user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.daemon import DaemonProcess

SCRIPT = str(Path(sys.executable).parent / "ascend-dra")
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"  # util-linux, on every Debian
BASE_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}


def script(*args: str, env: dict[str, str] | None = None, unprivileged: bool = False,
           timeout: float = 60) -> subprocess.CompletedProcess[str]:
    # setpriv (util-linux) drops the capabilities from the bounding set and execs: nothing runs in a
    # forked child of this threaded process before exec, as a preexec_fn would (it can deadlock).
    prefix = [SETPRIV, "--bounding-set", "-dac_override,-dac_read_search", "--"] \
        if unprivileged and os.geteuid() == 0 else []
    return subprocess.run([*prefix, SCRIPT, *args], capture_output=True, text=True,
                          env={**BASE_ENV, **(env or {})}, timeout=timeout, cwd="/tmp")


def sockets_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_socket()] if root.exists() else []


def assert_one_line(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture
def standalone() -> Iterator[Path]:
    """A short directory (pytest's tmp paths can pass the 107-byte unix socket limit)."""
    path = Path(tempfile.mkdtemp(prefix="adra-"))
    yield path / "node"
    shutil.rmtree(path)


def run_args(directory: Path, *extra: str) -> list[str]:
    return ["run", "--node-name", "n1", "--profiles", "fake", "--standalone", str(directory), *extra]


@pytest.mark.parametrize(("extra", "env", "needles"), [
    (["--log-level", "verbose"], {}, ["--log-level", "'verbose'", "debug, info, warning, error"]),
    (["--log-level", "debug,grpclib=loud"], {}, ["--log-level", "'loud'", "debug, info, warning, error"]),
    (["--log-format", "xml"], {}, ["--log-format", "'xml'", "text", "json"]),
    ([], {"LOG_LEVEL": "verbose"}, ["LOG_LEVEL", "--log-level", "debug, info, warning, error"]),
    ([], {"LOG_FORMAT": "xml"}, ["LOG_FORMAT", "--log-format", "text, json"]),
    ([], {"FAKE_DEVICES": "four"}, ["FAKE_DEVICES", "--fake-devices", "an integer"]),
    ([], {"METRICS_PORT": "abc"}, ["METRICS_PORT", "--metrics-port", "an integer"]),
    ([], {"TAINT_UNHEALTHY": "maybe"}, ["TAINT_UNHEALTHY", "true or false"]),
    (["--metrics-port", "abc"], {}, ["--metrics-port", "'abc'"]),
    (["--claim-status", "maybe"], {}, ["--claim-status", "'maybe' is not true or false (true, false"]),
    (["--profile-option", "fake.bogus=1"], {}, ["fake.bogus", "unknown", "fake takes"]),
    (["--profile-option", "bogus=1"], {}, ["bogus", "unknown"]),
    (["--profile-option", "npu-910.simulate=always"], {}, ["npu-910.simulate", "not loaded", "--profiles fake"]),
    (["--profile-option", "novalue"], {}, ["--profile-option", "KEY=VALUE"]),
    ([], {"PROFILE_OPTIONS": "fake.bogus=1"}, ["PROFILE_OPTIONS", "fake.bogus"]),
    ([], {"PROFILE_OPTIONS": "novalue"}, ["PROFILE_OPTIONS", "KEY=VALUE"]),
    (["--profiles", "fake,nosuch"], {}, ["--profiles", "nosuch", "installed:"]),
])
def test_run_configuration_error_is_one_line(standalone: Path, extra: list[str], env: dict[str, str],
                                             needles: list[str]) -> None:
    args = run_args(standalone, *extra)
    if "--profiles" in extra:  # replace the default "fake"
        at = args.index("--profiles")
        del args[at:at + 2]
    result = script(*args, env=env)
    assert_one_line(result, *needles)
    assert sockets_under(standalone) == []


@pytest.mark.parametrize(("profile", "option", "needles"), [
    ("npu-910", "npu-910.simulate=sometimes", ["npu-910.simulate", "'sometimes'", "never, fallback, always"]),
    ("npu-310P", "simulate=sometimes", ["simulate", "'sometimes'", "never, fallback, always"]),
    ("gpu", "gpu.simulate=yes", ["gpu.simulate", "'yes'", "never, fallback, always"]),
    ("HAMivNPUCore", "HAMivNPUCore.driverDir=relative/path", ["HAMivNPUCore.driverDir", "absolute path"]),
    ("HAMivNPUCore", "HAMivNPUCore.nope=1", ["HAMivNPUCore.nope", "hostRoot", "simulate"]),
    ("hard-vNPU", "hard-vNPU.vnpu-dev-dir=dev", ["hard-vNPU.vnpu-dev-dir", "absolute path"]),
])
def test_each_profile_checks_its_own_options(standalone: Path, profile: str, option: str,
                                             needles: list[str]) -> None:
    result = script("run", "--node-name", "n1", "--profiles", profile, "--standalone", str(standalone),
                    "--profile-option", option)
    assert_one_line(result, *needles)
    assert sockets_under(standalone) == []


def _path_options() -> list[tuple[str, str, str]]:
    """``(profile, option key, "directory" | "file")`` of every option an installed profile declares
    as naming a path, read from the profiles themselves so that a new one is tested too."""
    from ascend_dra.profiles.registry import load_profiles

    names = ("fake", "gpu", "npu-310P", "npu-910", "hard-vNPU", "HAMivNPUCore")
    return [(e.name, key, option.path) for e in load_profiles(list(names), log=False) if e.profile is not None
            for key, option in getattr(e.profile, "profile_options", {}).items() if getattr(option, "path", None)]


PATH_OPTIONS = _path_options()


def test_the_path_options_are_the_ones_the_profiles_read() -> None:
    assert PATH_OPTIONS == [
        ("hard-vNPU", "vnpu-dev-dir", "directory"), ("hard-vNPU", "boot-id-file", "file"),
        ("hard-vNPU", "host-root", "directory"), ("HAMivNPUCore", "hostRoot", "directory"),
        ("HAMivNPUCore", "vnpuCoreDir", "directory"), ("HAMivNPUCore", "sharedRegionDir", "directory"),
        ("HAMivNPUCore", "driverDir", "directory"), ("HAMivNPUCore", "installInfo", "file")]


@pytest.mark.parametrize(("profile", "key", "kind"), PATH_OPTIONS, ids=[f"{p}.{k}" for p, k, _ in PATH_OPTIONS])
@pytest.mark.parametrize("fault", ["missing", "wrong-kind"])
@pytest.mark.parametrize("command", ["run", "discover"])
def test_a_path_option_that_names_nothing_of_its_kind_stops_start_up_in_one_line(
        standalone: Path, profile: str, key: str, kind: str, fault: str, command: str) -> None:
    """A trial of issue 40: ``HAMivNPUCore.hostRoot=/nonexistent`` started a daemon that served with
    warnings, while a missing ``--dev-root`` stopped it. A path this host lacks: exit code 1 (README)."""
    standalone.parent.joinpath("a-file").write_text("x\n")
    path = standalone.parent / ("nonexistent" if fault == "missing" else "a-file" if kind == "directory" else "")
    if fault == "wrong-kind" and kind == "file":
        path = standalone.parent  # a directory where a file belongs
    args = ["--node-name", "n1", "--standalone", str(standalone)] if command == "run" else []
    result = script(command, *args, "--profiles", profile, "--profile-option", f"{profile}.{key}={path}")
    what = "does not exist" if fault == "missing" else f"is not a {kind}"
    assert_one_line(result, f"--profile-option {profile}.{key}: {path} {what} (a {kind}: ")
    assert result.returncode == 1
    assert not standalone.exists()


def test_an_existing_path_option_starts_and_a_bare_key_is_checked_too(standalone: Path) -> None:
    """The check follows the option as the profiles read it: ``hostRoot`` without the profile's name
    is HAMivNPUCore's; given as an existing directory, discovery runs."""
    missing = script("discover", "--profiles", "HAMivNPUCore", "--profile-option", "hostRoot=/nonexistent")
    assert_one_line(missing, "--profile-option hostRoot: /nonexistent does not exist (a directory: ")
    assert missing.returncode == 1
    fine = script("discover", "--profiles", "HAMivNPUCore", "--profile-option", f"hostRoot={standalone.parent}",
                  "--profile-option", "HAMivNPUCore.simulate=always", "--fake-devices", "1")
    assert fine.returncode == 0, fine.stderr


def test_a_socket_path_over_the_unix_limit_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / "node"
    result = script(*run_args(deep))
    assert_one_line(result, "--standalone", "107-byte unix socket limit", "shorter directory")
    assert sockets_under(tmp_path) == []


def test_the_gpu_profile_without_pynvml_names_the_extra(standalone: Path) -> None:
    result = script("run", "--node-name", "n1", "--profiles", "fake,gpu", "--standalone", str(standalone))
    assert_one_line(result, "profile gpu needs the pynvml module", "pip install 'ascend-dra[gpu]'",
                    "gpu.simulate=always")
    assert sockets_under(standalone) == []
    listed = script("discover", "--profiles", "gpu")
    assert_one_line(listed, "ascend-dra[gpu]")
    simulated = script("discover", "--profiles", "gpu", "--profile-option", "gpu.simulate=always")
    assert simulated.returncode == 0, simulated.stderr
    assert "gpu-0" in simulated.stdout and "simulated" in simulated.stdout


def test_discover_rejects_a_bad_profile_option_in_one_line() -> None:
    result = script("discover", "--profiles", "npu-910", "--profile-option", "npu-910.simulate=sometimes")
    assert_one_line(result, "npu-910.simulate", "never, fallback, always")
    result = script("discover", "--profiles", "fake", "--profile-option", "fake.bogus=1")
    assert_one_line(result, "fake.bogus", "unknown")


def test_webhook_rejects_bad_log_settings_in_one_line(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    tls = ["--tls-cert-file", str(cert), "--tls-private-key-file", str(key)]
    assert_one_line(script("webhook", *tls, "--log-level", "loud"), "--log-level", "debug, info, warning, error")
    assert_one_line(script("webhook", *tls, env={"LOG_FORMAT": "xml"}), "LOG_FORMAT", "text, json")
    assert_one_line(script("webhook", *tls, env={"WEBHOOK_PORT": "https"}), "WEBHOOK_PORT", "an integer")


def test_an_env_twin_of_run_does_not_break_other_commands(tmp_path: Path) -> None:
    bad = {"FAKE_DEVICES": "x", "METRICS_PORT": "abc", "LOG_LEVEL": "loud", "DISCOVERY_TIMEOUT": "soon",
           "TAINT_UNHEALTHY": "maybe", "CONVERSION_MODE": "nope", "ORPHAN_GRACE": "later"}
    listed = script("profiles", env=bad)
    assert listed.returncode == 0, listed.stderr
    assert "fake" in listed.stdout
    called = script("call", "--standalone", str(tmp_path), "register", env=bad)
    assert_one_line(called, "does not exist", "ascend-dra run")  # about the socket, not the env
    assert "METRICS_PORT" not in called.stderr


# -- permissions ------------------------------------------------------------------------------------


@pytest.fixture
def locked_dir() -> Iterator[Path]:
    """A directory the unprivileged user can enter but not write (not under pytest's 0700 tmp dirs)."""
    path = Path(tempfile.mkdtemp(prefix="ascend-dra-perm-"))
    try:
        (path / "ro").mkdir()
        path.chmod(0o755)
        (path / "ro").chmod(0o555)
        yield path
    finally:
        (path / "ro").chmod(0o755)
        shutil.rmtree(path)


def test_non_root_cluster_mode_says_to_run_as_root_or_pick_dirs(locked_dir: Path) -> None:
    result = script("run", "--node-name", "n1", "--profiles", "fake",
                    "--kubelet-root-dir", str(locked_dir / "ro" / "kubelet"), unprivileged=True)
    assert_one_line(result, str(locked_dir / "ro" / "kubelet"), "permission denied", "run as root",
                    "--kubelet-root-dir", "--standalone")


def test_non_root_unwritable_standalone_dir(locked_dir: Path) -> None:
    result = script(*run_args(locked_dir / "ro" / "node"), unprivileged=True)
    assert_one_line(result, str(locked_dir / "ro" / "node"), "permission denied", "--standalone")


def test_non_root_unwritable_cdi_root(locked_dir: Path) -> None:
    writable = locked_dir / "rw"
    writable.mkdir(mode=0o777)
    writable.chmod(0o777)
    result = script("run", "--node-name", "n1", "--profiles", "fake", "--kubelet-root-dir", str(writable),
                    "--cdi-root", str(locked_dir / "ro" / "cdi"), unprivileged=True)
    assert_one_line(result, "--cdi-root", str(locked_dir / "ro" / "cdi"), "permission denied", "run as root")
    assert sockets_under(writable) == []


def test_unreadable_boot_id_file(standalone: Path, locked_dir: Path) -> None:
    boot_id = locked_dir / "boot_id"
    boot_id.write_text("0f6c5b2e-0000-4000-8000-000000000000\n")
    boot_id.chmod(0o000)
    node = locked_dir / "node"
    node.mkdir(mode=0o777)
    node.chmod(0o777)
    result = script(*run_args(node, "--boot-id-file", str(boot_id)), unprivileged=True)
    assert_one_line(result, "--boot-id-file", str(boot_id), "permission denied")
    assert sockets_under(node) == []
    missing = script(*run_args(standalone, "--boot-id-file", str(locked_dir / "absent")))
    assert_one_line(missing, "--boot-id-file", "does not exist")


# -- ascend-dra call against a daemon that is gone ----------------------------------------------


def test_call_against_a_dead_daemon_is_one_line(standalone: Path) -> None:
    import socket

    registrar, plugin = standalone / "plugins_registry", standalone / "plugins" / "ascend.project-hami.io"
    for directory in (registrar, plugin):
        directory.mkdir(parents=True)
    # Socket files a killed daemon left: they exist, but nobody listens (ECONNREFUSED).
    for path in (registrar / "ascend.project-hami.io-reg.sock", plugin / "dra.sock"):
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(str(path))
        stale.close()
    for action in (["register"], ["health"], ["--uid", "u-1", "prepare", "default/c"],
                   ["--uid", "u-1", "unprepare", "default/c"]):
        result = script("call", "--standalone", str(standalone), *action)
        assert_one_line(result, "does not answer", "ascend-dra run")


def test_a_profile_that_finds_no_devices_says_so_at_start_up(short_tmp):
    """A new user's `PROFILE=fake` (for PROFILES) left the default npu-910 loaded on a machine with
    no NPU: it published an empty pool, said only INFO `devices=0`, and ran on. A WARNING now names
    the profile; the daemon still serves (a node may be waiting for its driver)."""
    d = DaemonProcess(short_tmp / "empty", profiles="npu-910",
                      extra_args=["--npu-smi", "/bin/false", "--dev-root", str(short_tmp)]).start()
    try:
        assert "a profile found no devices; it publishes none profile=npu-910" in d.log_text()
    finally:
        d.stop()
