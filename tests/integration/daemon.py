"""A real daemon process in standalone mode, and a grpcio (C-core) client playing the kubelet."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import grpc

from tests.kubelet_pb.dra.v1 import api_pb2 as v1_pb2
from tests.kubelet_pb.dra.v1 import api_pb2_grpc as v1_grpc
from tests.kubelet_pb.dra.v1beta1 import api_pb2 as v1beta1_pb2
from tests.kubelet_pb.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from tests.kubelet_pb.dra_health.v1 import api_pb2 as health_v1_pb2
from tests.kubelet_pb.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from tests.kubelet_pb.dra_health.v1alpha1 import api_pb2 as health_pb2
from tests.kubelet_pb.dra_health.v1alpha1 import api_pb2_grpc as health_grpc
from tests.kubelet_pb.pluginregistration import api_pb2 as reg_pb2
from tests.kubelet_pb.pluginregistration import api_pb2_grpc as reg_grpc

DRIVER = "ascend.project-hami.io"


class DaemonProcess:
    """``ascend-dra run --standalone DIR`` as a child process."""

    def __init__(self, root: Path, *, node: str = "node-1", profiles: str = "fake", fake_devices: int = 4,
                 env: dict[str, str] | None = None, extra_args: Sequence[str] = (),
                 cwd: Path | None = None, kubeconfig: Path | None = None,
                 rolling_update_id: str | None = None) -> None:
        """``root`` is the standalone DIR; with ``cwd`` it is passed relative to ``cwd``. With
        ``kubeconfig`` the daemon runs in cluster mode and ``root`` holds its sockets and CDI dir.
        With ``rolling_update_id`` it runs with ``--rolling-update-id`` (sockets named after it)
        and logs to ``daemon-<id>.log``."""
        self.rolling_update_id = rolling_update_id
        self.cwd = cwd
        self.kubeconfig = kubeconfig
        self.root = root
        self.node = node
        self.profiles = profiles
        self.fake_devices = fake_devices
        self.env = env or {}
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.boot_id_file = root / "boot_id"
        if not self.boot_id_file.exists():
            self.boot_id_file.parent.mkdir(parents=True, exist_ok=True)
            self.boot_id_file.write_text("boot-1\n")
        self.log_path = root / ("daemon.log" if rolling_update_id is None else f"daemon-{rolling_update_id}.log")

    @property
    def registration_socket(self) -> Path:
        uid = self.rolling_update_id
        return self.root / "plugins_registry" / (f"{DRIVER}-reg.sock" if uid is None else f"{DRIVER}-{uid}-reg.sock")

    @property
    def dra_socket(self) -> Path:
        uid = self.rolling_update_id
        return self.root / "plugins" / DRIVER / ("dra.sock" if uid is None else f"dra-{uid}.sock")

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def checkpoint(self) -> Path:
        """The checkpoint snapshot (a running daemon's latest changes are in the journal beside it)."""
        return self.root / "plugins" / DRIVER / "checkpoint.json"

    def records(self) -> dict:
        """The durable claim records as stored (snapshot plus journal), by claim uid."""
        from ascend_dra.durable.journal import load_state

        return dict(load_state(self.checkpoint.parent).raw)

    def start(self, *, wait: bool = True, extra_env: dict[str, str] | None = None) -> DaemonProcess:
        env = {**os.environ, **self.env, **(extra_env or {})}
        if self.kubeconfig is None:
            standalone = self.root.relative_to(self.cwd) if self.cwd else self.root
            mode = ["--standalone", str(standalone)]
        else:
            mode = ["--kubeconfig", str(self.kubeconfig), "--cdi-root", str(self.cdi_dir),
                    "--kubelet-root-dir", str(self.root)]
        args = [sys.executable, "-m", "ascend_dra.cli", "run", "--profiles", self.profiles, *mode,
                "--node-name", self.node, "--fake-devices", str(self.fake_devices),
                "--boot-id-file", str(self.boot_id_file), *self.extra_args]
        if self.rolling_update_id is not None:
            args += ["--rolling-update-id", self.rolling_update_id]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.cwd)
        if wait:
            self.wait_serving()
        return self

    def wait_serving(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.log_text()}")
            published = self.kubeconfig is not None or any((self.root / "resourceslices").glob("*.yaml"))
            if accepts(self.registration_socket) and published:
                return
            time.sleep(0.05)
        raise TimeoutError(f"daemon not serving after {timeout} s:\n{self.log_text()}")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_exit(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        self.log.close()
        return code

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.wait_exit()

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None and not self.log.closed:
                self.log.close()
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.wait_exit(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.wait_exit()


def _no_inherited_sighup_ignore() -> None:
    """Let the daemons this module starts get SIGHUP at its default action, as a kubelet or
    containerd starts a container. A test run under ``nohup`` ignores SIGHUP, an ignored signal
    stays ignored across exec, and a SIGHUP sent before the daemon installs its own handler was
    then lost (the daemon kept serving: test_signals.py saw that). A handled signal is reset to its
    default at exec, so this process handles SIGHUP by doing nothing: it still survives a hangup,
    and no code runs in the child between fork and exec (a ``preexec_fn`` did, and with the test's
    threads a child deadlocked before its exec)."""
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        with contextlib.suppress(ValueError):  # not the main thread: leave it
            signal.signal(signal.SIGHUP, lambda signum, frame: None)


_no_inherited_sighup_ignore()


class Kubelet:
    """grpcio stubs on the daemon's sockets, one channel per socket (as the kubelet keeps one)."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.reg_channel = grpc.insecure_channel(f"unix://{daemon.registration_socket}")
        self.dra_channel = grpc.insecure_channel(f"unix://{daemon.dra_socket}")
        self.registration = reg_grpc.RegistrationStub(self.reg_channel)
        self.v1 = v1_grpc.DRAPluginStub(self.dra_channel)
        self.v1beta1 = v1beta1_grpc.DRAPluginStub(self.dra_channel)
        self.health = health_grpc.DRAResourceHealthStub(self.dra_channel)
        self.health_v1 = health_v1_grpc.DRAResourceHealthStub(self.dra_channel)

    def close(self) -> None:
        self.reg_channel.close()
        self.dra_channel.close()

    def get_info(self) -> reg_pb2.PluginInfo:
        return self.registration.GetInfo(reg_pb2.InfoRequest(), timeout=1)

    def prepare(self, *claims: dict, api: str = "v1"):
        stub = self.v1 if api == "v1" else self.v1beta1
        return stub.NodePrepareResources(self.prepare_request(*claims, api=api), timeout=45)

    def unprepare(self, *claims: dict, api: str = "v1"):
        stub = self.v1 if api == "v1" else self.v1beta1
        return stub.NodeUnprepareResources(self.unprepare_request(*claims, api=api), timeout=45)

    @staticmethod
    def prepare_request(*claims: dict, api: str = "v1"):
        pb = v1_pb2 if api == "v1" else v1beta1_pb2
        return pb.NodePrepareResourcesRequest(claims=[_claim(pb, c) for c in claims])

    @staticmethod
    def unprepare_request(*claims: dict, api: str = "v1"):
        pb = v1_pb2 if api == "v1" else v1beta1_pb2
        return pb.NodeUnprepareResourcesRequest(claims=[_claim(pb, c) for c in claims])

    def first_health(self, api: str = "v1alpha1"):
        stub, pb = (self.health, health_pb2) if api == "v1alpha1" else (self.health_v1, health_v1_pb2)
        stream = stub.NodeWatchResources(pb.NodeWatchResourcesRequest(), timeout=10)
        message = next(stream)
        stream.cancel()
        return message


def accepts(path: Path) -> bool:
    """Whether a server listens on the unix socket (a stale socket file left by kill -9 refuses)."""
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def _claim(pb, obj: dict):
    meta = obj["metadata"]
    return pb.Claim(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
