"""The command line as an operator uses it: --help, and `ascend-dra call` against a running daemon."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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
    "--kubelet-registrar-directory-path": ("KUBELET_REGISTRAR_DIRECTORY_PATH", "/var/lib/kubelet/plugins_registry"),
    "--kubelet-plugins-directory-path": ("KUBELET_PLUGINS_DIRECTORY_PATH", "/var/lib/kubelet/plugins"),
    "--boot-id-file": ("BOOT_ID_FILE", "/proc/sys/kernel/random/boot_id"),
    "--discovery-timeout": ("DISCOVERY_TIMEOUT", "30.0"),
    "--rediscover-interval": ("REDISCOVER_INTERVAL", "60.0"),
    "--metrics-port": ("METRICS_PORT", "0"),
    "--metrics-address": ("METRICS_ADDRESS", "0.0.0.0"),
    "--log-level": ("LOG_LEVEL", "info"),
    "--log-format": ("LOG_FORMAT", "text"),
}


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ascend_dra.cli", *args], capture_output=True, text=True,
                          env=env, timeout=60)


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
        [sys.executable, "-c", "from ascend_dra.cli import build_parser; "
         "print(build_parser().parse_args(['run']).fake_devices)"],
        capture_output=True, text=True, env={"FAKE_DEVICES": "9", "PATH": "/usr/bin:/bin"}, check=True)
    assert parsed.stdout.strip() == "9"


def test_help_does_not_import_grpc_or_kubernetes():
    probe = ("import sys; from ascend_dra.cli import build_parser; build_parser(); "
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
    assert first["getInfo"]["supportedVersions"] == ["v1.DRAPlugin", "v1beta1.DRAPlugin",
                                                     "v1alpha1.DRAResourceHealth"]

    prepare = cli("call", "--standalone", root, "prepare", "default/cli-claim")
    assert prepare.returncode == 0, prepare.stderr
    reply, _, spec = prepare.stdout.partition("--- CDI spec ")
    assert json.loads(reply)["claims"][uid]["devices"][0]["deviceName"] == "npu-3-0"
    assert spec.startswith(f"{daemon.cdi_dir}/k8s.{DRIVER}-npu_{uid}.yaml\ncdiVersion: 0.5.0\n")
    assert "ASCEND_VISIBLE_DEVICES=3" in spec

    beta = cli("call", "--standalone", root, "--api", "v1beta1", "prepare", "default/cli-claim")
    assert beta.returncode == 0, beta.stderr

    unprepare = cli("call", "--standalone", root, "unprepare", "default/cli-claim")
    assert unprepare.returncode == 0
    assert json.loads(unprepare.stdout) == {"claims": {uid: {}}}


def test_call_reports_a_failed_claim_with_exit_code_1(daemon):
    write_claim(daemon.root, claim_object("ghost-device", results=[("npu", "npu-42-0")]))
    result = cli("call", "--standalone", str(daemon.root), "prepare", "default/ghost-device")
    assert result.returncode == 1
    assert "device node-1/npu-42-0 was never published" in result.stdout


def test_call_without_a_daemon_says_so(short_tmp):
    result = cli("call", "--standalone", str(short_tmp), "register")
    assert result.returncode == 1
    assert "does not exist; is `ascend-dra run` serving there?" in result.stderr
