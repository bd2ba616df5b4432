"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
on 127.0.0.1 for tests, with a fake Node object and no kubelet.

Stdlib + PyYAML only: imported by the pytest fixtures (tests/cluster/conftest.py) and used as a CLI:

    python tests/cluster/controlplane.py up   --dir .cluster   # start detached, return when ready
    python tests/cluster/controlplane.py down --dir .cluster   # stop what `up` started
    python tests/cluster/controlplane.py status --dir .cluster

Binaries come from tests/cluster/build.sh (``--bin-dir`` / $ASCEND_DRA_CONTROLPLANE_BIN, default: the
folder that ``build.sh --print-bin-dir`` names). The Kubernetes minor version is ``--k8s MINOR`` or
$ASCEND_DRA_K8S (default 1.35, see :func:`k8s_minor`); each has its wrapper module ``go-k8s-<minor>/``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
BUILD_SH = HERE / "build.sh"

#: The Kubernetes minor version used when $ASCEND_DRA_K8S is not set.
DEFAULT_K8S = "1.35"

#: DRA feature gates turned on for every component. All of them exist in 1.35 (the alpha ones are off
#: by default there; DRAAdminAccess / DRAPrioritizedList / DRAResourceClaimDeviceStatus are beta-on) and
#: in 1.36/1.37 (where the GA ones are locked on, and setting them to true is accepted). DRAExtendedResource
#: (KEP-5004) is left at its default on purpose: off (alpha) in 1.35, on in 1.36 (beta) and 1.37 (GA), so the tests see
#: what a default cluster of each version does with ``extendedResourceName``.
DEFAULT_FEATURE_GATES: dict[str, bool] = {
    "DRAConsumableCapacity": True,
    "DRAPartitionableDevices": True,
    "DRADeviceTaints": True,
    "DRADeviceBindingConditions": True,
    "DRAResourceClaimDeviceStatus": True,
    "DRAPrioritizedList": True,
    "DRAAdminAccess": True,
}

#: kube-controller-manager controllers. Explicit list: no node-lifecycle-controller (there is no kubelet,
#: it would mark our fake Node NotReady and taint it), no node-ipam, no cloud/volume controllers.
DEFAULT_CONTROLLERS: tuple[str, ...] = (
    "serviceaccount-token-controller",
    "serviceaccount-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "resourceclaim-controller",
    "device-taint-eviction-controller",  # only runs with DRADeviceTaints on
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "daemonset-controller",
    "job-controller",
)

ADMIN_USER = "ascend-dra-admin"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/24"  # config only: nothing routes to it
STATE_FILE = "state.json"


class ControlPlaneError(RuntimeError):
    """Start-up, readiness or shutdown failure. The message contains the tail of the relevant log."""


def k8s_minor() -> str:
    """The Kubernetes minor version the tests use: $ASCEND_DRA_K8S (``1.35``, ``1.37``), default 1.35."""
    return os.environ.get("ASCEND_DRA_K8S") or DEFAULT_K8S


def default_bin_dir(k8s: str | None = None) -> Path:
    env = os.environ.get("ASCEND_DRA_CONTROLPLANE_BIN")
    if env:
        return Path(env)
    out = subprocess.run(
        ["bash", str(BUILD_SH), "--k8s", k8s or k8s_minor(), "--print-bin-dir"], check=True, capture_output=True,
        text=True,
    ).stdout.strip()
    return Path(out)


def missing_binaries(bin_dir: Path) -> list[str]:
    names = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
    return [n for n in names if not os.access(bin_dir / n, os.X_OK)]


def exit_on_sigterm() -> None:
    """Make SIGTERM raise ``SystemExit`` in this process (call from the main thread), so a script
    stopped by ``timeout`` or ``kill`` runs its ``finally: cp.stop()``: by default SIGTERM ends
    Python at once and the control plane it started keeps running (and is measured by the next
    benchmark as load)."""

    def _exit(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


#: Test servers' ports are picked below the kernel's ephemeral range (free_port).
_LOWEST_PORT = 20000  # above the usual fixed ports (10250 kubelet, 10257/10259 controller/scheduler, ...)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A TCP port no socket holds now, below the kernel's ephemeral range, for a server a test starts.

    A port the kernel chose for ``bind(0)`` and the test released is an ephemeral one: before the
    server bound it, an outgoing connection (a client of the API server) could be given it, and
    the server failed with "Address already in use" (a 1.37 CI run went red so). Ports below
    ``net.ipv4.ip_local_port_range`` are never given to outgoing connections; the pick is random,
    so parallel runs rarely meet. Falls back to a kernel-chosen port when that range starts low.
    """
    high = _ephemeral_low() - 1
    for _ in range(200 if high > _LOWEST_PORT else 0):
        port = random.randint(_LOWEST_PORT, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _free_ports(n: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port())
    return sorted(ports)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    return "\n".join(data.splitlines()[-lines:])


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped) counts as stopped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) counts as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pid_cmdline(pid: int) -> list[str]:
    """The arguments ``pid`` was started with; [] once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


class _Proc:
    """One component process, handled by pid only.

    Started with ``os.posix_spawn`` in its own session (no terminal signals; survives the exit of
    ``controlplane.py up``) rather than ``subprocess.Popen``: a Popen object of a process that outlives it
    (CLI ``up``, a restart done by a pytest session on a ``make cluster-up`` cluster) raises a
    ResourceWarning, an error under ``filterwarnings = error``. Our own children are reaped with
    ``waitpid``; processes of another session (``attach``) are checked through /proc.
    """

    def __init__(self, name: str, argv: list[str], log: Path, pid: int | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log = log
        self.pid = pid
        self.returncode: int | None = None

    def start(self) -> None:
        with open(self.log, "ab") as logf:
            logf.write(f"\n==== {_dt.datetime.now().isoformat()} starting: {' '.join(self.argv)}\n".encode())
            logf.flush()
            self.pid = os.posix_spawn(
                self.argv[0],
                self.argv,
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, logf.fileno(), 1),
                    (os.POSIX_SPAWN_DUP2, logf.fileno(), 2),
                ],
                setsid=True,
            )
        self.returncode = None

    def _reap(self) -> bool | None:
        """True/False if ``pid`` is our child (exited/running), None if it is not our child."""
        assert self.pid is not None
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if pid == 0:
            return False
        self.returncode = os.waitstatus_to_exitcode(status)
        return True

    def alive(self) -> bool:
        if self.pid is None or self.returncode is not None:
            return False
        reaped = self._reap()
        if reaped is not None:
            return not reaped
        # Not our child (attached by pid): guard against pid reuse, it must still run our binary.
        cmd = pid_cmdline(self.pid)
        return pid_alive(self.pid) and bool(cmd) and cmd[0] == self.argv[0]

    def exit_code(self) -> int | None:
        return self.returncode

    def _signal(self, sig: int) -> None:
        if self.pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL."""
        if self.pid is None:
            return
        if self.alive():
            self._signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.alive():
                self._signal(signal.SIGKILL)
                deadline = time.monotonic() + 5
                while self.alive() and time.monotonic() < deadline:
                    time.sleep(0.05)
        if self.alive():
            raise ControlPlaneError(f"{self.name} (pid {self.pid}) survived SIGKILL")
        self.pid = None


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on 127.0.0.1.

    >>> cp = ControlPlane(workdir, bin_dir); cp.start()   # ready when start() returns
    >>> cp.kubeconfig                                      # admin kubeconfig (token, system:masters)
    >>> cp.restart_apiserver(); cp.stop()
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        bin_dir: str | os.PathLike[str] | None = None,
        *,
        node_name: str = "node-1",
        feature_gates: dict[str, bool] | None = None,
        controllers: Iterable[str] = DEFAULT_CONTROLLERS,
        extra_apiserver_args: Sequence[str] = (),
        ready_timeout: float = 90.0,
        verbosity: int = 1,
        fake_node: bool = True,
        address: str = "127.0.0.1",
        extra_users: Sequence[str] = (),
        extra_controller_manager_args: Sequence[str] = (),
    ) -> None:
        """``fake_node=False``: create no Node object (a real kubelet registers ``node_name``, tests/kubelet).
        ``address``: where kube-apiserver listens and what it advertises (tests/e2e: the host's address
        on the test bed's bridge, which the nodes' network namespaces reach); etcd, the scheduler and the
        controller manager stay on 127.0.0.1. ``extra_users``: more token users in group
        ``system:masters`` (:meth:`user_kubeconfig`), so the audit log tells their requests apart (tests/scale)."""
        self.workdir = Path(workdir).resolve()
        self.address = address
        self.bin_dir = Path(bin_dir).resolve() if bin_dir is not None else default_bin_dir()
        self.node_name = node_name
        self.feature_gates = dict(DEFAULT_FEATURE_GATES if feature_gates is None else feature_gates)
        self.controllers = tuple(controllers)
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.ready_timeout = ready_timeout
        self.verbosity = verbosity
        self.fake_node = fake_node
        self.extra_users = tuple(extra_users)
        self.extra_controller_manager_args = list(extra_controller_manager_args)
        self.token = ""
        self.user_tokens: dict[str, str] = {}
        self.ports: dict[str, int] = {}
        self.procs: dict[str, _Proc] = {}
        self.startup_seconds: float | None = None

    # ------------------------------------------------------------------ paths / properties
    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.ports['apiserver']}"

    @property
    def ca_file(self) -> Path:
        # Written by kube-apiserver itself (--cert-dir): serving cert + its self-signed CA.
        return self.workdir / "pki" / "apiserver.crt"

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    # ------------------------------------------------------------------ start
    def start(self) -> ControlPlane:
        t0 = time.monotonic()
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ControlPlaneError(
                f"missing control-plane binaries in {self.bin_dir}: {', '.join(missing)}; run {BUILD_SH}"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._prepare_files()
            p = _free_ports(5)
            self.ports = dict(zip(("etcd", "etcd_peer", "apiserver", "kcm", "scheduler"), p, strict=True))
            self._define_procs()
            self._start_and_wait("etcd", self._etcd_ready)
            self._start_and_wait("kube-apiserver", self._apiserver_ready)
            self._write_kubeconfig()
            self.procs["kube-controller-manager"].start()
            self.procs["kube-scheduler"].start()
            self._wait("kube-controller-manager", self._https_healthz(self.ports["kcm"]))
            self._wait("kube-scheduler", self._https_healthz(self.ports["scheduler"]))
            if self.fake_node:
                self.ensure_node()
            # The serviceaccount controller creating default/default proves kcm talks to the apiserver
            # (and pods in "default" are admitted only once that ServiceAccount exists).
            self._wait(
                "kube-controller-manager",
                lambda: self._api_status("GET", "/api/v1/namespaces/default/serviceaccounts/default") == 200,
                what="ServiceAccount default/default",
            )
            self._write_state()
        except BaseException:
            with contextlib.suppress(Exception):
                self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _prepare_files(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        sa_key, sa_pub = pki / "sa.key", pki / "sa.pub"
        if not sa_key.exists():
            subprocess.run(
                ["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(sa_key)],
                check=True,
                capture_output=True,
            )
            subprocess.run(
                ["openssl", "pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub)],
                check=True,
                capture_output=True,
            )
        # Client (and request-header) CA: nobody gets client certificates, but with them kube-apiserver
        # fully publishes kube-system/extension-apiserver-authentication, which the delegated authentication of
        # kube-scheduler / kube-controller-manager waits for (error spam otherwise).
        ca_key, ca_crt = pki / "client-ca.key", pki / "client-ca.crt"
        if not ca_crt.exists():
            subprocess.run(
                [
                    "openssl",
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-keyout",
                    str(ca_key),
                    "-out",
                    str(ca_crt),
                    "-days",
                    "3650",
                    "-subj",
                    "/CN=ascend-dra-test-client-ca",
                ],
                check=True,
                capture_output=True,
            )
        tokens = self.workdir / "tokens.csv"
        if not tokens.exists():
            lines = [f'{os.urandom(24).hex()},{user},{user},"system:masters"\n'
                     for user in (ADMIN_USER, *self.extra_users)]
            tokens.write_text("".join(lines))
            tokens.chmod(0o600)
        for line in tokens.read_text().splitlines():
            token, user = line.split(",")[:2]
            self.user_tokens[user] = token
        self.token = self.user_tokens[ADMIN_USER]

    def _gates(self) -> str:
        return ",".join(f"{k}={'true' if v else 'false'}" for k, v in self.feature_gates.items())

    def _define_procs(self) -> None:
        w, p = self.workdir, self.ports
        etcd = [
            self._bin("etcd"),
            "--name=default",
            f"--data-dir={w / 'etcd-data'}",
            f"--listen-client-urls=http://127.0.0.1:{p['etcd']}",
            f"--advertise-client-urls=http://127.0.0.1:{p['etcd']}",
            f"--listen-peer-urls=http://127.0.0.1:{p['etcd_peer']}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{p['etcd_peer']}",
            f"--initial-cluster=default=http://127.0.0.1:{p['etcd_peer']}",
            "--unsafe-no-fsync=true",  # test data only; makes writes fast on slow disks
            "--log-level=warn",
        ]
        apiserver = [
            self._bin("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
            f"--bind-address={self.address}",
            f"--advertise-address={self.address}",
            f"--secure-port={p['apiserver']}",
            f"--cert-dir={w / 'pki'}",
            f"--token-auth-file={w / 'tokens.csv'}",
            f"--client-ca-file={w / 'pki' / 'client-ca.crt'}",
            f"--requestheader-client-ca-file={w / 'pki' / 'client-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={w / 'pki' / 'sa.pub'}",
            f"--service-account-signing-key-file={w / 'pki' / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # 127.0.0.1 is not a valid endpoint address: do not maintain the `kubernetes` endpoints then.
            f"--endpoint-reconciler-type={'none' if self.address.startswith('127.') else 'lease'}",
            # The admission plugin would taint every new Node not-ready; only the node lifecycle
            # controller (not running: no kubelet) would remove that taint again.
            "--disable-admission-plugins=TaintNodesByCondition",
            # Without it SIGTERM hangs ~60 s on the open watches of kcm/scheduler; with it: ~1 s.
            "--shutdown-watch-termination-grace-period=1s",
            "--allow-privileged=true",
            "--profiling=false",
            f"--feature-gates={self._gates()}",
            f"--v={self.verbosity}",
            *self.extra_apiserver_args,
        ]
        kc = str(self.kubeconfig)
        common = [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--profiling=false",
            f"--feature-gates={self._gates()}",
            f"--v={self.verbosity}",
        ]
        kcm = [
            self._bin("kube-controller-manager"),
            *common,
            f"--secure-port={p['kcm']}",
            f"--cert-dir={w / 'pki' / 'kcm'}",
            f"--controllers={','.join(self.controllers)}",
            "--use-service-account-credentials=false",
            f"--service-account-private-key-file={w / 'pki' / 'sa.key'}",
            f"--root-ca-file={self.ca_file}",
            *self.extra_controller_manager_args,
        ]
        scheduler = [
            self._bin("kube-scheduler"),
            *common,
            f"--secure-port={p['scheduler']}",
            f"--cert-dir={w / 'pki' / 'scheduler'}",
        ]
        for name, argv in (
            ("etcd", etcd),
            ("kube-apiserver", apiserver),
            ("kube-controller-manager", kcm),
            ("kube-scheduler", scheduler),
        ):
            self.procs[name] = _Proc(name, argv, w / f"{name}.log")

    def user_kubeconfig(self, user: str, path: Path) -> Path:
        """Write a kubeconfig at ``path`` for ``user`` (one of ``extra_users``); returns ``path``."""
        cfg = yaml.safe_load(self.kubeconfig.read_text())
        cfg["users"] = [{"name": user, "user": {"token": self.user_tokens[user]}}]
        cfg["contexts"][0]["context"]["user"] = user
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        path.chmod(0o600)
        return path

    def _write_kubeconfig(self) -> None:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "ascend-dra-test",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": ADMIN_USER, "user": {"token": self.token}}],
            "contexts": [{"name": "ascend-dra-test", "context": {"cluster": "ascend-dra-test", "user": ADMIN_USER}}],
            "current-context": "ascend-dra-test",
        }
        tmp = self.kubeconfig.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(cfg, sort_keys=False))
        tmp.chmod(0o600)
        tmp.replace(self.kubeconfig)

    def _write_state(self) -> None:
        state = {
            "node_name": self.node_name,
            "address": self.address,
            "bin_dir": str(self.bin_dir),
            "ports": self.ports,
            "token": self.token,
            "feature_gates": self.feature_gates,
            "procs": {n: {"pid": pr.pid, "argv": pr.argv, "log": str(pr.log)} for n, pr in self.procs.items()},
        }
        (self.workdir / STATE_FILE).write_text(json.dumps(state, indent=2))

    @classmethod
    def attach(cls, workdir: str | os.PathLike[str]) -> ControlPlane:
        """Re-create a handle for a control plane that `up` started (from workdir/state.json)."""
        workdir = Path(workdir).resolve()
        state = json.loads((workdir / STATE_FILE).read_text())
        cp = cls(workdir, state["bin_dir"], node_name=state["node_name"], feature_gates=state["feature_gates"],
                 address=state.get("address", "127.0.0.1"))
        cp.ports = {k: int(v) for k, v in state["ports"].items()}
        cp.token = state["token"]
        for name, pr in state["procs"].items():
            cp.procs[name] = _Proc(name, pr["argv"], Path(pr["log"]), pid=pr["pid"])
        return cp

    # ------------------------------------------------------------------ readiness
    def _start_and_wait(self, name: str, probe: Any) -> None:
        self.procs[name].start()
        self._wait(name, probe)

    def _wait(self, name: str, probe: Any, what: str = "ready", timeout: float | None = None) -> None:
        timeout = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        last_err = ""
        while True:
            proc = self.procs[name]
            if not proc.alive():
                raise ControlPlaneError(
                    f"{name} exited (code {proc.exit_code()}) before being {what}; "
                    f"last lines of {proc.log}:\n{_tail(proc.log)}"
                )
            try:
                if probe():
                    return
            except Exception as e:  # connection refused, TLS not up yet, ...
                last_err = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{name} not {what} after {timeout:.0f}s (last probe error: {last_err or 'none'}); "
                    f"last lines of {proc.log}:\n{_tail(proc.log)}"
                )
            time.sleep(0.2)

    def _etcd_ready(self) -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['etcd']}/health", timeout=2) as r:
            return json.loads(r.read()).get("health") == "true"

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _apiserver_ready(self) -> bool:
        return self._api_status("GET", "/readyz") == 200

    def _https_healthz(self, port: int) -> Any:
        def probe() -> bool:
            req = urllib.request.Request(f"https://127.0.0.1:{port}/healthz")
            with urllib.request.urlopen(req, timeout=2, context=self._ssl()) as r:
                return r.status == 200

        return probe

    # ------------------------------------------------------------------ tiny API client (stdlib)
    def api(self, method: str, path: str, body: Any = None, content_type: str = "application/json", *,
            json_style: str = "python") -> tuple[int, Any]:
        """One request. ``json_style`` is how the body is encoded, as different clients do: ``python``
        (json.dumps defaults, spaces), ``go`` (compact, keys in the given order, as Go structs) or
        ``kubectl`` (compact, keys sorted, as kubectl's YAML-to-JSON). Opaque parameters are stored
        byte for byte as sent, which matters to later patches of the object."""
        if body is None:
            data = None
        elif json_style == "python":
            data = json.dumps(body).encode()
        else:
            data = json.dumps(body, separators=(",", ":"), sort_keys=json_style == "kubectl").encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=10, context=self._ssl()) as r:
                raw = r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode("utf-8", "replace")

    def _api_status(self, method: str, path: str) -> int:
        return self.api(method, path)[0]

    def server_version(self) -> str:
        """``MAJOR.MINOR`` that kube-apiserver reports on ``/version`` (e.g. ``1.37``)."""
        status, obj = self.api("GET", "/version")
        if status != 200:
            raise ControlPlaneError(f"GET /version: HTTP {status}: {obj}")
        return f"{obj['major']}.{obj['minor'].rstrip('+')}"

    def ensure_node(self, name: str | None = None) -> None:
        """Create (or repair) the fake Node ``name`` (default: ``node_name``): Ready, 8 CPU / 32Gi /
        110 pods, no taints."""
        name = name or self.node_name
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        status, obj = self.api("GET", f"/api/v1/nodes/{name}")
        if status == 404:
            status, obj = self.api(
                "POST",
                "/api/v1/nodes",
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}},
            )
            if status != 201:
                raise ControlPlaneError(f"creating Node {name}: HTTP {status}: {obj}")
        elif status != 200:
            raise ControlPlaneError(f"reading Node {name}: HTTP {status}: {obj}")
        if obj.get("spec", {}).get("taints") or obj.get("spec", {}).get("unschedulable"):
            status, obj = self.api(
                "PATCH",
                f"/api/v1/nodes/{name}",
                {"spec": {"taints": None, "unschedulable": None}},
                content_type="application/merge-patch+json",
            )
            if status != 200:
                raise ControlPlaneError(f"untainting Node {name}: HTTP {status}: {obj}")
        now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        res = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        node_status = {
            "capacity": res,
            "allocatable": res,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake node of the ascend-dra test control plane (no kubelet)",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": f"v{self.server_version()}.0-fake",
                "kubeProxyVersion": "",
                "containerRuntimeVersion": "fake://0",
                "bootID": "",
                "machineID": "",
                "systemUUID": "",
                "kernelVersion": "",
                "osImage": "fake",
            },
        }
        status, obj = self.api(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": node_status},
            content_type="application/merge-patch+json",
        )
        if status != 200:
            raise ControlPlaneError(f"setting Node {name} status: HTTP {status}: {obj}")

    # ------------------------------------------------------------------ lifecycle
    def restart_apiserver(self, grace: float = 15.0) -> None:
        """Stop kube-apiserver and start it again on the same port; return when /readyz is 200."""
        self.stop_apiserver(grace)
        self.start_apiserver()

    def stop_apiserver(self, grace: float = 15.0) -> None:
        """Stop kube-apiserver only (an API server outage); :meth:`start_apiserver` brings it back."""
        self.procs["kube-apiserver"].stop(grace=grace)

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on its port; return when /readyz is 200.

        kube-scheduler and kube-controller-manager are restarted too: after an outage their
        informers reconnect with back-off, and for tens of seconds the scheduler allocated from
        stale ResourceSlices (a device tainted meanwhile) and the controller-manager did not see
        new ResourceClaimTemplates. What the tests check is our daemon's recovery, not theirs.
        """
        self.procs["kube-apiserver"].start()
        self._wait("kube-apiserver", self._apiserver_ready, what="ready after restart")
        for name, port in (("kube-controller-manager", "kcm"), ("kube-scheduler", "scheduler")):
            self.procs[name].stop()
            self.procs[name].start()
            self._wait(name, self._https_healthz(self.ports[port]), what="healthy after the API-server restart")
        if (self.workdir / STATE_FILE).exists():
            self._write_state()

    def set_feature_gates(self, gates: dict[str, bool]) -> None:
        """Restart kube-apiserver, kube-controller-manager and kube-scheduler with ``gates`` (etcd,
        and what it stores, stay): an operator turning a gate on. Returns when they are ready."""
        running = self.procs
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver"):
            running[name].stop(grace=15)
        self.feature_gates = dict(gates)
        self._define_procs()  # the new command lines; the etcd process stays the one that runs
        fresh, self.procs = self.procs, running
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            running[name].argv = fresh[name].argv
        self.start_apiserver()

    def stop(self, grace: float = 5.0) -> None:
        """Terminate every component (reverse start order): SIGTERM, SIGKILL after ``grace`` seconds."""
        errors = []
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self.procs.get(name)
            if proc is None:
                continue
            try:
                proc.stop(grace=grace)
            except Exception as e:
                errors.append(f"{name}: {e}")
        with contextlib.suppress(FileNotFoundError):
            (self.workdir / STATE_FILE).unlink()
        if errors:
            raise ControlPlaneError("; ".join(errors))

    def alive(self) -> dict[str, bool]:
        return {n: p.alive() for n, p in self.procs.items()}

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------- CLI
def _cmd_up(args: argparse.Namespace) -> int:
    workdir = Path(args.dir)
    if (workdir / STATE_FILE).exists():
        cp = ControlPlane.attach(workdir)
        if all(cp.alive().values()):
            print(f"already running; KUBECONFIG={cp.kubeconfig}")
            return 0
        print("stale state found, stopping leftovers", file=sys.stderr)
        cp.stop()
    bin_dir = Path(args.bin_dir) if args.bin_dir else default_bin_dir(args.k8s)
    if missing_binaries(bin_dir):
        if args.build:
            subprocess.run(["bash", str(BUILD_SH), "--k8s", args.k8s], check=True)
        else:
            print(f"missing binaries in {bin_dir}: run {BUILD_SH}", file=sys.stderr)
            return 1
    cp = ControlPlane(workdir, bin_dir, node_name=args.node_name, ready_timeout=args.timeout)
    try:
        cp.start()
    except ControlPlaneError as e:
        print(f"control plane failed to start: {e}", file=sys.stderr)
        return 1
    # Detach: the children run in their own sessions and are re-parented to init when we exit.
    print(f"control plane ready in {cp.startup_seconds:.1f}s: {cp.server}")
    print(f"export KUBECONFIG={cp.kubeconfig}")
    print(f"export ASCEND_DRA_KUBECONFIG={cp.kubeconfig}")
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    workdir = Path(args.dir)
    if not (workdir / STATE_FILE).exists():
        print(f"nothing to stop ({workdir / STATE_FILE} not found)")
        return 0
    ControlPlane.attach(workdir).stop()
    print("control plane stopped")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    workdir = Path(args.dir)
    if not (workdir / STATE_FILE).exists():
        print("not running")
        return 1
    cp = ControlPlane.attach(workdir)
    alive = cp.alive()
    for n, a in alive.items():
        print(f"{n:25s} pid {cp.procs[n].pid:<8} {'running' if a else 'DEAD'}")
    print(f"server {cp.server}  kubeconfig {cp.kubeconfig}")
    return 0 if all(alive.values()) else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start detached and wait until ready")
    up.add_argument("--dir", default=".cluster")
    up.add_argument("--bin-dir", default=None)
    up.add_argument("--node-name", default="node-1")
    up.add_argument("--timeout", type=float, default=120.0)
    up.add_argument("--build", action="store_true", help="run build.sh if binaries are missing")
    up.add_argument("--k8s", default=k8s_minor(), help="Kubernetes minor version (default $ASCEND_DRA_K8S or 1.35)")
    up.set_defaults(func=_cmd_up)
    down = sub.add_parser("down", help="stop a control plane started by `up`")
    down.add_argument("--dir", default=".cluster")
    down.set_defaults(func=_cmd_down)
    st = sub.add_parser("status")
    st.add_argument("--dir", default=".cluster")
    st.set_defaults(func=_cmd_status)
    args = ap.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
