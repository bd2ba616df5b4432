"""The command line as an operator uses it: --help, and `ascend-dra call` against a running daemon."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.claimfiles import claim_object, write_claim
from tests.integration.daemon import DRIVER, DaemonProcess

RUN_FLAGS = {
    "--node-name": ("NODE_NAME", "none"),
    "--driver-name": ("DRIVER_NAME", DRIVER),
    "--profiles": ("PROFILES", "npu-910"),
    "--fake-devices": ("FAKE_DEVICES", "4"),
    "--npu-smi": ("NPU_SMI", "npu-smi"),
    "--dev-root": ("DEV_ROOT", "/dev"),
    "--sys-root": ("SYS_ROOT", "/sys"),
    "--standalone": ("STANDALONE_DIR", "none"),
    "--kubeconfig": ("KUBECONFIG", "none"),
    "--cdi-root": ("CDI_ROOT", "/var/run/cdi"),
    "--kubelet-root-dir": ("KUBELET_ROOT_DIR", "/var/lib/kubelet"),
    "--kubelet-registrar-directory-path": ("KUBELET_REGISTRAR_DIRECTORY_PATH", "<root-dir>/plugins_registry"),
    "--kubelet-plugins-directory-path": ("KUBELET_PLUGINS_DIRECTORY_PATH", "<root-dir>/plugins"),
    "--dev-root-on-host": ("DEV_ROOT_ON_HOST", "none"),
    "--boot-id-file": ("BOOT_ID_FILE", "/proc/sys/kernel/random/boot_id"),
    "--discovery-timeout": ("DISCOVERY_TIMEOUT", "30.0"),
    "--rediscover-interval": ("REDISCOVER_INTERVAL", "60.0"),
    "--health-interval": ("HEALTH_INTERVAL", "10.0"),
    "--unhealthy-devices": ("UNHEALTHY_DEVICES", "taint"),
    "--taint-unhealthy": ("TAINT_UNHEALTHY", "none"),
    "--health-service": ("HEALTH_SERVICE", "True"),
    "--claim-status": ("CLAIM_STATUS", "True"),
    "--metrics-port": ("METRICS_PORT", "0"),
    "--metrics-address": ("METRICS_ADDRESS", "*"),
    "--log-level": ("LOG_LEVEL", "info"),
    "--log-format": ("LOG_FORMAT", "text"),
}


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ascend_dra.cli", *args], capture_output=True, text=True,
                          env=env, timeout=60, cwd=cwd)


def test_run_help_lists_every_flag_with_its_env_var_and_default():
    out = " ".join(cli("run", "--help", env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"}).stdout.split())
    for flag, (env, default) in RUN_FLAGS.items():
        assert flag in out
        assert f"[env {env}; default {default}]" in out, flag


def test_env_vars_set_the_defaults():
    out = " ".join(cli("run", "--help", env={"COLUMNS": "400", "FAKE_DEVICES": "9", "PATH": "/usr/bin:/bin"})
                   .stdout.split())
    assert "[env FAKE_DEVICES; default 4]" in out  # the documented default stays what the code defaults to
    parsed = subprocess.run(
        [sys.executable, "-c", "from ascend_dra.cli.main import build_parser; "
         "print(build_parser().parse_args(['run']).fake_devices)"],
        capture_output=True, text=True, env={"FAKE_DEVICES": "9", "PATH": "/usr/bin:/bin"}, check=True)
    assert parsed.stdout.strip() == "9"


def test_help_does_not_import_grpc_or_kubernetes():
    probe = ("import sys; from ascend_dra.cli.main import build_parser; build_parser(); "
             "print(sorted(m for m in ('grpclib', 'kubernetes_asyncio', 'betterproto2', 'aiohttp', 'yaml') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_run_without_node_name_says_what_is_missing():
    result = cli("run", "--profiles", "fake", env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert "--node-name (or NODE_NAME) is required" in result.stderr


@pytest.fixture
def daemon(short_tmp):
    d = DaemonProcess(short_tmp / "sa").start()
    yield d
    d.stop()


def test_call_register_prepare_unprepare_print_what_came_back(daemon):
    claim = write_claim(daemon.root, claim_object("cli-claim", results=[("npu", "npu-3-0")]))
    uid = claim["metadata"]["uid"]
    root = str(daemon.root)

    register = cli("call", "--standalone", root, "register")
    assert register.returncode == 0, register.stderr
    first = json.loads(register.stdout.split("\n}\n")[0] + "\n}")
    assert first["getInfo"]["supportedVersions"] == ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                                                     "v1alpha1.DRAResourceHealth"]

    prepare = cli("call", "--standalone", root, "prepare", "default/cli-claim")
    assert prepare.returncode == 0, prepare.stderr
    reply, _, spec = prepare.stdout.partition("--- CDI spec ")
    assert json.loads(reply)["claims"][uid]["devices"][0]["deviceName"] == "npu-3-0"
    path, _, body = spec.partition("\n")
    assert path == f"{daemon.cdi_dir}/k8s.{DRIVER}-npu_{uid}.yaml"
    printed = yaml.safe_load(body)  # the file as written: JSON, which is YAML
    assert printed["cdiVersion"] == "0.5.0"
    assert "ASCEND_VISIBLE_DEVICES=3" in printed["devices"][0]["containerEdits"]["env"]

    beta = cli("call", "--standalone", root, "--api", "v1beta1", "prepare", "default/cli-claim")
    assert beta.returncode == 0, beta.stderr

    unprepare = cli("call", "--standalone", root, "unprepare", "default/cli-claim")
    assert unprepare.returncode == 0
    assert json.loads(unprepare.stdout) == {"claims": {uid: {}}}


def test_call_without_namespace_slash_name_is_a_usage_error(daemon):
    result = cli("call", "--standalone", str(daemon.root), "prepare", "npu-claim")
    assert (result.returncode, result.stderr) == (2, "ascend-dra call prepare: give the claim as NAMESPACE/NAME\n")


def test_call_reports_a_failed_claim_with_exit_code_1(daemon):
    write_claim(daemon.root, claim_object("ghost-device", results=[("npu", "npu-42-0")]))
    result = cli("call", "--standalone", str(daemon.root), "prepare", "default/ghost-device")
    assert result.returncode == 1
    assert "device node-1/npu-42-0 was never published" in result.stdout


def test_call_without_a_daemon_says_so(short_tmp):
    result = cli("call", "--standalone", str(short_tmp), "register")
    assert result.returncode == 1
    assert "does not exist; is `ascend-dra run` serving there?" in result.stderr


def test_call_names_the_sockets_of_a_daemon_run_with_a_rolling_update_id(short_tmp):
    # A README trial: with the daemon started with --rolling-update-id, `call` only said the usual
    # socket does not exist. It now names the sockets it found and the flag to give.
    (short_tmp / "plugins_registry").mkdir()
    (short_tmp / "plugins" / DRIVER).mkdir(parents=True)
    listening = []
    for path in (short_tmp / "plugins_registry" / f"{DRIVER}-blue-reg.sock",
                 short_tmp / "plugins" / DRIVER / "dra-blue.sock"):
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        listening.append(sock)
    try:
        result = cli("call", "--standalone", str(short_tmp), "register")
    finally:
        for sock in listening:
            sock.close()
    assert result.returncode == 1
    assert result.stderr == (f"ascend-dra call: {short_tmp}/plugins_registry/{DRIVER}-reg.sock does not exist; "
                             f"{DRIVER}-blue-reg.sock there belongs to a daemon run with --rolling-update-id: give "
                             "call the same --rolling-update-id (or ROLLING_UPDATE_ID)\n")


BASE_ENV = {"PATH": "/usr/bin:/bin"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--driver-name", "Bad Driver"], "--driver-name 'Bad Driver' must be a lower-case DNS subdomain"),
        (["--node-name", "Demo_Node"], "--node-name 'Demo_Node' must be the node's name: a lower-case DNS subdomain"),
        (["--profiles", ""], "--profiles (PROFILES) is empty: name at least one profile"),
        (["--profiles", "fake,fake"], "--profiles fake,fake names a profile twice"),
        (["--fake-devices", "-1"], "--fake-devices -1 must be from 0 to 10000"),
        (["--fake-devices", "1000000000"], "--fake-devices 1000000000 must be from 0 to 10000"),
        # nan passed `<= 0`: the daemon served, then died in anyio.sleep with an 80-line traceback.
        (["--health-interval", "nan"], "--health-interval nan must be a number of seconds, more than 0"),
        (["--discovery-timeout", "inf"], "--discovery-timeout inf must be a number of seconds, more than 0"),
        (["--profile-option", "novalue"], "'novalue' is not KEY=VALUE"),
        (["--dev-root-on-host", "dev"], "--dev-root-on-host 'dev' must be an absolute path (the host's device "
                                        "directory, /dev, as the container runtime sees it)"),
        # A README trial: the daemon loaded its profiles, then logged "cannot listen on bogus:19090:
        # Unknown error -2" between two other lines.
        (["--metrics-port", "19090", "--metrics-address", "no-such-host.invalid"],
         "--metrics-address 'no-such-host.invalid' is neither an IP address nor a name this host resolves "
         "(*: every address, IPv4 and IPv6; '::' dual-stack; '0.0.0.0' IPv4 only)"),
        (["--healthcheck-port", "19091", "--healthcheck-address", "1.2.3.4.5"],
         "--healthcheck-address '1.2.3.4.5' is neither an IP address nor a name this host resolves"),
    ],
    ids=["driver-name", "node-name", "no-profiles", "twice", "negative-devices", "billion-devices", "nan-interval",
         "inf-timeout", "option-format", "relative-dev-root-on-host", "metrics-address", "healthcheck-address"],
)
def test_bad_flags_are_refused_before_anything_starts(short_tmp, args, message):
    result = cli("run", "--node-name", "n", "--profiles", "fake", "--standalone", str(short_tmp), *args,
                 env=BASE_ENV)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (short_tmp / "plugins").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--fake-devices", "-1"], "ascend-dra discover: --fake-devices -1 must be from 0 to 10000\n"),
    (["--fake-devices", "10001"], "ascend-dra discover: --fake-devices 10001 must be from 0 to 10000\n"),
    (["--bogus", "1"], "ascend-dra discover: unrecognized arguments: --bogus 1 (see ascend-dra discover --help)\n"),
], ids=["negative-devices", "too-many-devices", "unknown-flag"])
def test_discover_refuses_what_run_refuses(args, message):
    """A README trial: discover printed "(no devices)" for -1 and 10,002 lines for 10001, rc 0,
    where run refuses both; an unknown flag pointed at the top-level --help, which lists no flag."""
    result = cli("discover", "--profiles", "fake", *args, env=BASE_ENV)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", message)


@pytest.mark.parametrize("flag", ["--standalone", "--cdi-root", "--dev-root", "--kubelet-root-dir"])
def test_an_empty_path_is_refused_not_read_as_the_working_directory(short_tmp, flag):
    """A README trial: ``--standalone ''`` ran the daemon with its files in the working directory."""
    args = ["--standalone", str(short_tmp)] if flag != "--standalone" else []
    result = cli("run", "--node-name", "n", "--profiles", "fake", *args, flag, "", env=BASE_ENV, cwd=short_tmp)
    assert (result.returncode, result.stderr) == (
        2, f"ascend-dra run: argument {flag}: is empty: give a path (see ascend-dra run --help)\n")
    assert list(short_tmp.iterdir()) == []


def test_a_missing_boot_id_file_stops_run_before_any_directory_is_made(short_tmp):
    """A README trial: the refusal was one line, but the standalone dir had cdi/ and plugins/ made."""
    result = cli("run", "--node-name", "n", "--profiles", "fake", "--standalone", str(short_tmp / "sa"),
                 "--boot-id-file", str(short_tmp / "no-boot-id"), env=BASE_ENV)
    assert (result.returncode, result.stderr) == (
        1, f"ascend-dra run: --boot-id-file {short_tmp}/no-boot-id does not exist (the kernel's is "
           "/proc/sys/kernel/random/boot_id)\n")
    assert not (short_tmp / "sa").exists()


def test_a_malformed_kubeconfig_stops_run_in_one_line(short_tmp):
    """A README trial: three lines (the YAML parser's what, where and mark), after a line of stall figures."""
    (short_tmp / "bad.kc").write_text("garbage: [\n")
    dirs = ["--cdi-root", str(short_tmp / "cdi"), "--kubelet-root-dir", str(short_tmp),
            "--kubelet-registrar-directory-path", str(short_tmp / "reg"),
            "--kubelet-plugins-directory-path", str(short_tmp / "plugins")]
    result = cli("run", "--node-name", "n", "--profiles", "fake", "--kubeconfig", str(short_tmp / "bad.kc"),
                 "--log-level", "warning", *dirs, env=BASE_ENV)
    assert result.returncode == 1
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert "refusing to start: cluster mode cannot use the kubeconfig" in line and "while parsing" in line, line


@pytest.mark.parametrize("command", ["run", "webhook"])
def test_profiles_set_empty_is_refused_not_read_as_the_default(short_tmp, command):
    """A chart rendered with ``profiles: []`` sets PROFILES=""; the daemon loaded npu-910, which nobody named."""
    (short_tmp / "tls.crt").write_text("")
    args = (["--node-name", "n", "--standalone", str(short_tmp)] if command == "run" else
            ["--tls-cert-file", str(short_tmp / "tls.crt"), "--tls-private-key-file", str(short_tmp / "tls.crt")])
    result = cli(command, *args, env={**BASE_ENV, "PROFILES": ""})
    assert result.returncode == 2
    assert "--profiles (PROFILES) is empty: name" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (short_tmp / "plugins").exists()


def test_a_bad_number_in_an_env_var_is_named():
    assert cli("--help", env={**BASE_ENV, "FAKE_DEVICES": "abc"}).returncode == 0  # read only by `run`
    result = cli("run", "--node-name", "n", env={**BASE_ENV, "FAKE_DEVICES": "abc"})
    assert result.returncode == 2
    # Without int()'s own words (a README trial found them Python internals, not news).
    assert result.stderr.strip() == ("ascend-dra run: environment variable FAKE_DEVICES='abc' (the twin of "
                                     "--fake-devices) is not an integer")


def test_a_bad_profile_options_env_var_is_a_configuration_error_as_the_flag_is(short_tmp):
    # A README trial: `--profile-option garbage` exited 2 and PROFILE_OPTIONS=...,garbage exited 1.
    result = cli("run", "--node-name", "n", "--profiles", "fake", "--standalone", str(short_tmp),
                 env={**BASE_ENV, "PROFILE_OPTIONS": "npu-910.simulate=always,garbage"})
    assert (result.returncode, result.stderr) == (2, "ascend-dra run: environment variable PROFILE_OPTIONS: "
                                                     "'garbage' is not KEY=VALUE (e.g. npu-910.simulate=fallback)\n")


def test_an_unknown_profile_name_stops_the_daemon_with_the_installed_names(short_tmp):
    result = cli("run", "--node-name", "n", "--profiles", "fake,gpuu", "--standalone", str(short_tmp),
                 env=BASE_ENV)
    assert result.returncode == 2
    assert result.stderr.startswith("ascend-dra run: --profiles fake,gpuu: no profile 'gpuu' is installed; "
                                    "installed:")


def test_cluster_mode_without_a_cluster_says_what_to_pass(short_tmp):
    dirs = ["--cdi-root", str(short_tmp / "cdi"), "--kubelet-root-dir", str(short_tmp),
            "--kubelet-registrar-directory-path", str(short_tmp / "reg"),
            "--kubelet-plugins-directory-path", str(short_tmp / "plugins")]
    result = cli("run", "--node-name", "n", "--profiles", "fake", *dirs, env=BASE_ENV)
    assert result.returncode == 1
    assert result.stderr.startswith("ascend-dra run: cluster mode cannot use the in-cluster configuration "
                                    "(no KUBERNETES_SERVICE_HOST")
    assert "pass --kubeconfig FILE, run inside a pod with a service account, or use --standalone DIR" in result.stderr
    assert result.stderr.count("\n") == 1  # one line: no start-up log lines around it
    missing = cli("run", "--node-name", "n", "--profiles", "fake", *dirs, "--kubeconfig", "nokubeconfig",
                  env=BASE_ENV)
    assert missing.returncode == 1
    assert missing.stderr == "ascend-dra run: --kubeconfig nokubeconfig does not exist\n"
    assert not (short_tmp / "reg").exists() or not any((short_tmp / "reg").iterdir())
    # A directory was said not to exist; kubectl's colon list was read as one path (an audit).
    for given, said in ((str(short_tmp), f"--kubeconfig {short_tmp} is not a file"),
                        ("a:b", "--kubeconfig a:b: one file is read, not a list of files as kubectl's KUBECONFIG "
                                "(merge them with kubectl config view --flatten)")):
        wrong = cli("run", "--node-name", "n", "--profiles", "fake", *dirs, "--kubeconfig", given, env=BASE_ENV)
        assert (wrong.returncode, wrong.stderr) == (1, f"ascend-dra run: {said}\n")
    broken = short_tmp / "broken-kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\n")
    unusable = cli("run", "--node-name", "n", "--profiles", "fake", *dirs, "--kubeconfig", str(broken),
                   env=BASE_ENV)
    assert unusable.returncode == 1
    assert f"refusing to start: cluster mode cannot use the kubeconfig {broken}:" in unusable.stderr


@pytest.mark.parametrize("which", ["registration", "dra"])
def test_a_file_where_a_socket_belongs_is_refused_before_anything_is_published(short_tmp, which):
    """It was found when the socket was bound, after the slices were published (an audit)."""
    path = (short_tmp / "plugins_registry" / f"{DRIVER}-reg.sock" if which == "registration"
            else short_tmp / "plugins" / DRIVER / "dra.sock")
    path.parent.mkdir(parents=True)
    path.write_text("")
    result = cli("run", "--node-name", "n", "--profiles", "fake", "--standalone", str(short_tmp), env=BASE_ENV)
    assert result.returncode == 1
    assert result.stderr == (f"ascend-dra run: --standalone: {path} exists and is not a socket; the daemon replaces "
                             "only a socket there, so move it away\n")
    assert not (short_tmp / "resourceslices").exists()


@pytest.mark.parametrize(("flag", "message"), [
    ("--dev-root", "--dev-root {path} is not a directory (where device nodes are looked for; the host's is /dev)"),
    ("--sys-root", "--sys-root {path} is not a directory (where sysfs is read; the host's is /sys)"),
    ("--npu-smi", "--npu-smi {path} does not exist (give the executable's path, or the bare name npu-smi to look "
                  "on $PATH and in the driver's install locations)"),
])
@pytest.mark.parametrize("command", ["run", "discover"])
def test_a_mistyped_node_path_stops_run_and_discover_in_one_line(short_tmp, flag, message, command):
    # A README trial: these started a daemon that served an empty pool, with warnings only, and
    # discover exited 0.
    path = short_tmp / "no-such-path"
    args = ["--standalone", str(short_tmp / "sa")] if command == "run" else []
    result = cli(command, "--node-name", "n", "--profiles", "npu-910", *args, flag, str(path), env=BASE_ENV)
    assert (result.returncode, result.stderr) == (1, f"ascend-dra {command}: {message.format(path=path)}\n")
    assert not (short_tmp / "sa").exists()


def test_a_bare_npu_smi_name_not_on_path_is_refused(short_tmp):
    """Another bare name than npu-smi is looked up on $PATH only: mistyped, it served an empty pool
    with warnings (an audit of configuration errors)."""
    result = cli("run", "--node-name", "n", "--profiles", "npu-910", "--standalone", str(short_tmp / "sa"),
                 "--npu-smi", "npu-smii", env=BASE_ENV)
    assert (result.returncode, result.stderr) == (1, "ascend-dra run: --npu-smi npu-smii is not on $PATH (give the "
                                                     "executable's path, or the bare name npu-smi to look on $PATH "
                                                     "and in the driver's install locations)\n")


def test_a_standalone_dir_too_long_for_a_socket_is_one_clear_line(short_tmp):
    deep = short_tmp / ("d" * 90)
    result = cli("run", "--node-name", "n", "--profiles", "fake", "--standalone", str(deep), env=BASE_ENV)
    assert result.returncode == 1
    assert "over the 107-byte unix socket limit; use a shorter directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_discover_takes_profile_options_and_fails_on_unknown_profiles():
    # /bin/false: an npu-smi that fails if it is ever run (simulate=always must not run it); a path that
    # does not exist is refused at start (test_a_mistyped_node_path_stops_run_and_discover_in_one_line).
    simulated = cli("discover", "--profiles", "npu-910", "--profile-option", "npu-910.simulate=always",
                    "--fake-devices", "2", "--npu-smi", "/bin/false", env=BASE_ENV)
    assert simulated.returncode == 0, simulated.stderr
    rows = [line.split() for line in simulated.stdout.splitlines()[1:] if line.strip()]
    assert [(r[0], r[1], r[-1]) for r in rows] == [("npu-910", "npu-0-0", "simulated"),
                                                   ("npu-910", "npu-1-0", "simulated")]
    typo = cli("discover", "--profiles", "fakee", env=BASE_ENV)
    assert typo.returncode == 2
    assert "no profile 'fakee' is installed" in typo.stdout + typo.stderr


def test_discover_refuses_a_node_name_run_would_refuse():
    """A name that is no DNS subdomain went into the printed slices' nodeName and generateName."""
    bad = cli("discover", "--profiles", "fake", "--node-name", "Bad_Node", "-o", "yaml", env=BASE_ENV)
    assert bad.returncode == 2
    assert bad.stderr == ("ascend-dra discover: --node-name 'Bad_Node' must be the node's name: a lower-case DNS "
                          "subdomain\n")
    assert bad.stdout == ""


def test_call_with_a_missing_kubeconfig_is_one_line_naming_it(short_tmp):
    """kubernetes-asyncio printed "Config not found" and the message blamed the file's content."""
    result = cli("call", "--kubelet-root-dir", str(short_tmp), "--kubeconfig", str(short_tmp / "nokc"),
                 "prepare", "default/npu-claim", env=BASE_ENV)
    assert result.returncode != 0
    assert result.stderr == f"ascend-dra call: --kubeconfig {short_tmp / 'nokc'} does not exist\n"


def test_call_prints_every_cdi_spec_of_a_claim_and_names_bad_yaml(short_tmp):
    d = DaemonProcess(short_tmp / "sa", profiles="fake,gpu",
                      extra_args=["--profile-option", "gpu.simulate=always"]).start()
    try:
        claim = write_claim(d.root, claim_object("two-kinds", results=[("npu", "npu-0-0"), ("gpu", "gpu-0")]))
        uid = claim["metadata"]["uid"]
        out = cli("call", "--standalone", str(d.root), "prepare", "default/two-kinds")
        assert out.returncode == 0, out.stdout
        assert out.stdout.count("--- CDI spec ") == 2
        assert f"k8s.{DRIVER}-npu_{uid}.yaml" in out.stdout and f"k8s.{DRIVER}-gpu_{uid}.yaml" in out.stdout
        (d.root / "claims" / "default" / "broken.yaml").write_text("metadata: [unclosed\n")
        bad = cli("call", "--standalone", str(d.root), "prepare", "default/broken")
        assert bad.returncode == 1
        assert f"claim file {d.root}/claims/default/broken.yaml is not valid YAML" in bad.stderr
        assert bad.stderr.count("\n") == 1  # one line, not PyYAML's three (a README trial)
    finally:
        d.stop()


def test_a_configuration_the_kubelet_would_reject_is_refused_at_start_up_in_one_line(short_tmp):
    base = ["run", "--node-name", "n", "--profiles", "fake", "--kubeconfig", "nokubeconfig"]
    bad_name = cli(*base, "--driver-name", "Ascend_NPU", "--kubelet-root-dir", str(short_tmp), env=BASE_ENV)
    assert bad_name.returncode == 2
    assert bad_name.stderr.splitlines() == [
        "ascend-dra run: --driver-name 'Ascend_NPU' must be a lower-case DNS subdomain of at most 63 characters "
        "(e.g. ascend.project-hami.io); it is the CDI vendor and the slices' driver"]
    outside = cli(*base, "--kubelet-root-dir", str(short_tmp / "kubelet"), "--kubelet-plugins-directory-path",
                  str(short_tmp / "run"), env=BASE_ENV)
    assert outside.returncode == 2
    assert outside.stderr.splitlines() == [
        f"ascend-dra run: DRA socket {short_tmp}/run/{DRIVER}/dra.sock: the kubelet accepts only endpoints inside "
        f"its root dir {short_tmp}/kubelet (--kubelet-root-dir); put --kubelet-plugins-directory-path under it"]
    long_root = short_tmp / ("k" * 80)
    too_long = cli(*base, "--kubelet-root-dir", str(long_root), env=BASE_ENV)
    assert too_long.returncode == 2
    [line] = too_long.stderr.splitlines()
    assert line.startswith(f"ascend-dra run: DRA socket {long_root}/plugins/{DRIVER}/dra.sock: ")
    assert line.endswith("bytes long; the kubelet accepts only endpoints shorter than 108 bytes (a unix socket "
                         "limit): use a shorter --kubelet-plugins-directory-path or --kubelet-root-dir")
    assert not (short_tmp / "kubelet").exists() and not long_root.exists()  # refused before creating anything


def test_call_reaches_a_rolling_update_instance_by_its_id(short_tmp):
    """A rolling-update instance's sockets carry its id: without --rolling-update-id (env
    ROLLING_UPDATE_ID, set in the chart's pod) `call` looked for the plain names and found nothing."""
    d = DaemonProcess(short_tmp / "ru", rolling_update_id="pod-7").start()
    try:
        claim = write_claim(d.root, claim_object("ru-claim", results=[("npu", "npu-1-0")]))
        plain = cli("call", "--standalone", str(d.root), "register")
        assert plain.returncode != 0
        health = cli("call", "--standalone", str(d.root), "register", env={"ROLLING_UPDATE_ID": "pod-7"})
        assert health.returncode == 0, health.stderr
        prepare = cli("call", "--standalone", str(d.root), "--rolling-update-id", "pod-7", "prepare",
                      "default/ru-claim")
        assert prepare.returncode == 0, prepare.stderr
        assert json.loads(prepare.stdout.partition("--- CDI spec ")[0])["claims"][claim["metadata"]["uid"]][
            "devices"][0]["deviceName"] == "npu-1-0"
    finally:
        d.stop()


def test_discover_log_level_sets_what_goes_to_stderr_and_never_touches_stdout():
    """It logged at warning, always (found by the new-user trial): nothing said which tier ran or
    which npu-smi command failed."""
    args = ("discover", "--profiles", "npu-910", "--profile-option", "npu-910.simulate=fallback",
            "--fake-devices", "1", "--npu-smi", "/bin/false")
    default = cli(*args, env=BASE_ENV)
    debug = cli(*args, "--log-level", "debug", env=BASE_ENV)
    quiet = cli(*args, "--log-level", "error", env=BASE_ENV)
    assert default.returncode == debug.returncode == quiet.returncode == 0, default.stderr
    assert default.stdout == debug.stdout == quiet.stdout and "simulated" in default.stdout
    assert "discovery tier failed" in default.stderr and " DEBUG " not in default.stderr
    assert "running npu-smi" in debug.stderr and "discovery tier used" in debug.stderr
    assert quiet.stderr == ""
    bad = cli(*args, "--log-level", "loud", env=BASE_ENV)
    assert bad.returncode == 2 and "'loud' is not one of debug, info, warning, error" in bad.stderr


def test_a_claim_gone_without_its_unprepare_is_named_and_released_by_the_command_named(daemon):
    """A prepared claim whose object went away with no Unprepare (the kubelet lost its state) held
    its device for good, and the refusal of every later claim named it as if it still ran. The
    refusal now says it is gone and names the command that releases it; that command frees the device."""
    from tests.integration.daemon import Kubelet

    root = str(daemon.root)
    k = Kubelet(daemon)
    try:
        gone = write_claim(daemon.root, claim_object("gone-a", results=[("npu", "npu-1-0")]))
        uid = gone["metadata"]["uid"]
        assert k.prepare(gone).claims[uid].error == ""
        (daemon.root / "claims" / "default" / "gone-a.yaml").unlink()
        later = write_claim(daemon.root, claim_object("later-b", results=[("npu", "npu-1-0")]))
        error = k.prepare(later).claims[later["metadata"]["uid"]].error
        assert error.startswith(f"ResourceClaim default/later-b: device npu-1-0 is already prepared for "
                                f"ResourceClaim default/gone-a (uid {uid}) and does not allow multiple allocations. ")
        assert error.endswith(f"ResourceClaim default/gone-a (uid {uid}) has no claim file any more "
                              f"({daemon.root / 'claims' / 'default' / 'gone-a.yaml'}): if no pod on this node uses it "
                              "any more (its NodeUnprepareResources never came), release it with "
                              f"`ascend-dra call unprepare default/gone-a --uid {uid}`")
        assert "a prepared claim holds devices but is gone" in daemon.log_text()
        action, *rest = error.rsplit("`ascend-dra ", 1)[1].rstrip("`").split()
        assert cli(action, "--standalone", root, *rest).returncode == 0
        assert k.prepare(later).claims[later["metadata"]["uid"]].error == ""
        # A holder that is still there is named as before, with nothing added.
        third = write_claim(daemon.root, claim_object("third-c", results=[("npu", "npu-1-0")]))
        assert k.prepare(third).claims[third["metadata"]["uid"]].error.endswith("does not allow multiple allocations")
    finally:
        k.close()


def test_call_health_shows_every_device_with_its_health_unknown_included(short_tmp):
    """A device of unknown health (the enum's 0) was printed without a ``health`` key at all."""
    d = DaemonProcess(short_tmp / "hc", extra_args=["--health-interval", "0.2"]).start()
    try:
        marks = d.root / "plugins" / DRIVER / "profiles" / "fake-health"
        marks.mkdir(parents=True)
        (marks / "npu-3-0").write_text("unknown\n")
        deadline = time.monotonic() + 15
        while True:
            result = cli("call", "--standalone", str(d.root), "health")
            assert result.returncode == 0, result.stderr
            devices = {x["device"]["deviceName"]: x.get("health") for x in json.loads(result.stdout)["devices"]}
            if devices.get("npu-3-0") != "HEALTHY" or time.monotonic() > deadline:
                break
        assert devices == {"npu-0-0": "HEALTHY", "npu-1-0": "HEALTHY", "npu-2-0": "HEALTHY", "npu-3-0": "UNKNOWN"}
    finally:
        d.stop()


def test_a_misspelled_variable_is_named_in_a_warning_at_start_up_and_a_plain_start_warns_of_nothing(short_tmp):
    """A new user's ``PROFILE=fake`` (for PROFILES) left the default npu-910 profile running with no
    device, and no line said why."""
    plain = DaemonProcess(short_tmp / "plain").start()
    plain.stop()
    assert "is not a setting" not in plain.log_text()  # the test runner's own environment is not flagged
    d = DaemonProcess(short_tmp / "typo", env={"PROFILE": "npu-910", "FAKE_DEVICE": "8"}).start()
    try:
        log = d.log_text()
        assert ("environment variable PROFILE is not a setting of ascend-dra run and is ignored; "
                "did you mean PROFILES?") in log
        assert "environment variable FAKE_DEVICE is not a setting" in log and "did you mean FAKE_DEVICES?" in log
    finally:
        d.stop()
