"""A real node for tests: containerd 2.x (CRI, CDI) and the kubelet, registered as a Node of a
:class:`~tests.cluster.controlplane.ControlPlane`, with nothing outside ``workdir`` changed.

Layout under ``workdir`` (keep it short: unix socket paths stay under 108 bytes)::

    ns/          upper/work dirs of the mount namespace's overlays, fake sysctl files
    ctrd/        containerd root/, state/, opt/, config.toml, containerd.sock, containerd.log
    kl/          the kubelet --root-dir (plugins_registry/, plugins/, pods/), config.yaml, kubelet.log;
                 our daemon runs with --kubelet-root-dir kl/ and writes its CDI specs to kl/cdi/
    logs/        the kubelet's podLogsDir
    cni/         a loopback-only CNI config (the CRI reports NetworkReady; test pods use hostNetwork)
    images/      the OCI tarballs of :mod:`tests.kubelet.images`

How the host is left alone:

* containerd, its shims and the kubelet run in a private mount namespace (``unshare --mount``, held
  by a ``sleep``; the host has no shared mounts, so nothing propagates back). There ``/var/lib``,
  ``/var/log`` and ``/run`` are overlays whose upper dirs are in ``ns/``. What lands there is fixed in
  the binaries, not configurable: the shims' sockets (``/run/containerd/s``), runc's state, the
  device-plugin socket (``/var/lib/kubelet/device-plugins``) and ``/var/log/containers`` (kubelet).
* Sysctls: the kubelet sets six kernel sysctls (e.g. ``vm.overcommit_memory=1``) unless they hold its
  values already, and with ``protectKernelDefaults`` it refuses to start instead. In the namespace the
  differing ones are bind-mounted from files holding the kubelet's values: it reads what it wants and
  writes nothing; the host keeps its own.
* cgroups: the kubelet's ``cgroupRoot`` is ``/<cgroup_name>`` (made here in every hierarchy, cgroupfs
  driver); :meth:`stop` kills every process in it and removes it. ``volumePluginDir`` and
  ``podLogsDir`` are under ``workdir`` (their defaults are /usr/libexec/kubernetes and /var/log/pods).
* Ports: the kubelet serves on a free port of the host's address (it refuses a loopback node IP) and
  accepts only clients with a certificate of the control plane's client CA (the API server, see
  :func:`kubelet_client_pki`); healthz is on 127.0.0.1; containerd's streaming port is the kernel's.
* Without CAP_SYS_RESOURCE (this sandbox's root lacks it) runc cannot set the negative
  ``oom_score_adj`` the kubelet asks for sandboxes; containerd then clamps it (``restrict_oom_score_adj``).

:class:`NodeError` carries the tail of the relevant log.
"""

from __future__ import annotations

import calendar
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.controlplane import ControlPlane, _tail, free_port
from tests.kubelet import images
from tests.kubelet.hostns import NodeNetwork, PidProcess, path_in, zombie

RUNC = "/usr/sbin/runc"
CNI_BIN = "/usr/lib/cni"
#: containerd runtime handlers, all runc: the default, and ``ascend`` (RuntimeClass of Lab 18, docs/ascend-hardware.md).
RUNTIME_HANDLERS = ("runc", "ascend")
#: What the kubelet's setupKernelTunables wants (pkg/kubelet/cm/container_manager_linux.go).
#: Host dirs the kubelet or containerd write to whatever their config says (see the module docstring),
#: overlaid in the mount namespace: /var/log/containers (kubelet), /run/containerd/s (shims), ...
OVERLAYS = ("/var/lib", "/var/log", "/run")
KUBELET_SYSCTLS = {"vm/overcommit_memory": 1, "vm/panic_on_oom": 0, "kernel/panic": 10,
                   "kernel/panic_on_oops": 1, "kernel/keys/root_maxkeys": 1000000,
                   "kernel/keys/root_maxbytes": 25000000}


class NodeError(RuntimeError):
    """A node component failed to start, to become ready or to stop."""


def cgroup_mounts() -> tuple[int, list[Path]]:
    """``(version, mount points)``: the cgroup v1 hierarchies (one per controller set, plus the v2
    mount of a hybrid host) or the v2 root."""
    v1, v2 = [], []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mnt, fstype, *_ = line.split()
        if fstype == "cgroup":
            v1.append(Path(mnt))
        elif fstype == "cgroup2":
            v2.append(Path(mnt))
    # Hybrid hosts (v1 plus a v2 "unified" mount): runc makes the container's cgroup in both.
    return (1, v1 + v2) if v1 else (2, v2[:1])


def _status_field(name: str) -> str:
    """A field of /proc/self/status (``CapEff`` → ``000001fffeffffff``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    raise KeyError(name)


def _kill_and_wait(pids: set[int], timeout: float = 10.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        pids = {p for p in pids if Path(f"/proc/{p}").exists() and not zombie(p)}
        time.sleep(0.05)


def host_ip() -> str:
    """The address of the default route's interface: the kubelet refuses a loopback node IP.

    :raises NodeError: the machine has no route off loopback.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))  # no packet is sent: connect() on UDP only picks the route
        except OSError as e:
            raise NodeError(f"no non-loopback IPv4 address for the kubelet's node IP: {e}") from e
        return s.getsockname()[0]


def kubelet_client_pki(pki: Path) -> list[str]:
    """Before :meth:`ControlPlane.start`: the client CA (the control plane keeps an existing one) and a
    certificate from it for the API server's calls to the kubelet (logs, exec); returns the API server
    flags that use it. The kubelet accepts only clients of that CA (no anonymous access)."""
    pki.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ca_key, ca_crt, key, csr, crt = (pki / n for n in ("client-ca.key", "client-ca.crt", "kubelet-client.key",
                                                      "kubelet-client.csr", "kubelet-client.crt"))
    if not ca_crt.exists():
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca_crt),
                "-days", "3650", "-subj", "/CN=ascend-dra-test-client-ca")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
            "-subj", "/O=system:masters/CN=kube-apiserver-kubelet-client")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(crt), "-days", "3650")
    return [f"--kubelet-client-certificate={crt}", f"--kubelet-client-key={key}",
            "--kubelet-preferred-address-types=InternalIP"]


class Node:
    """containerd + kubelet as Node ``node_name`` of ``cp``.

    >>> node = Node(workdir, cp, kubelet_bin, containerd_bin).start()   # returns when the Node is Ready
    >>> node.restart_kubelet(); node.stop()

    :param feature_gates: the kubelet's gates (the control plane's plus what the tests need).
    :param snapshotter: containerd's snapshotter (``overlayfs``; ``native`` copies layers instead).
    :param network: a network namespace of the node's own (tests/e2e); without, the host's network
        (the kubelet on a free port of the host's address, pods with ``hostNetwork`` only).
    :param kubelet_root: the kubelet's ``--root-dir`` as the node's processes see it (default
        ``workdir/kl``; tests/e2e: ``/var/lib/kubelet``, under the namespace's overlay of /var/lib).
    :param cdi_dir: containerd's CDI spec dir, seen the same way (default ``kubelet_root/cdi``).
    :param extra_overlays: more host dirs overlaid in the namespace (``/usr/local``, ``/etc``, ``/dev``:
        a simulated NPU node's driver files and device nodes land in the upper dirs).
    :param setup: shell lines run in the namespace once the overlays are mounted, as root.
    """

    def __init__(self, workdir: Path, cp: ControlPlane, kubelet_bin: Path, containerd_bin: Path, *,
                 node_name: str = "node-1", feature_gates: dict[str, bool] | None = None,
                 snapshotter: str = "overlayfs", network: NodeNetwork | None = None,
                 kubelet_root: Path | None = None, cdi_dir: Path | None = None,
                 extra_overlays: Sequence[str] = (), setup: Sequence[str] = ()) -> None:
        self.workdir = Path(workdir).resolve()
        self.network = network
        self.own_netns = network is not None
        self._kubelet_root = Path(kubelet_root) if kubelet_root is not None else self.workdir / "kl"
        self._cdi_dir = Path(cdi_dir) if cdi_dir is not None else self._kubelet_root / "cdi"
        self.overlays = (*OVERLAYS, *extra_overlays)
        self.setup = tuple(setup)
        self.cp = cp
        self.kubelet_bin = Path(kubelet_bin)
        self.containerd_bin = Path(containerd_bin)
        self.node_name = node_name
        self.feature_gates = dict(cp.feature_gates if feature_gates is None else feature_gates)
        self.snapshotter = snapshotter
        #: CAP_SYS_RESOURCE (bit 24) missing from our effective set: clamp containers' oom_score_adj.
        self.restrict_oom = not int(_status_field("CapEff"), 16) & (1 << 24)
        self.cgroup_name = f"ascend-dra-{self.workdir.parent.name}-{self.workdir.name}"
        self.cgroup_version, self._cgroup_mounts = cgroup_mounts()
        self.holder: subprocess.Popen[bytes] | PidProcess | None = None
        self.containerd: subprocess.Popen[bytes] | PidProcess | None = None
        self.kubelet: subprocess.Popen[bytes] | PidProcess | None = None
        self.kubelet_port = 0
        self.node_ip = network.node_ip if network is not None else host_ip()
        self._logs: list[Any] = []

    # ------------------------------------------------------------------ paths
    @property
    def kubelet_root(self) -> Path:
        """The kubelet's ``--root-dir`` in the node's namespace (the host sees it at :meth:`host_path`)."""
        return self._kubelet_root

    @property
    def cdi_dir(self) -> Path:
        """Where containerd reads CDI specs (our daemon with ``--kubelet-root-dir kl/``: its default)."""
        return self._cdi_dir

    @property
    def config_dir(self) -> Path:
        """The kubelet's config.yaml and log (``workdir/kl``: the kubelet root dir unless one was given)."""
        return self.workdir / "kl"

    def host_path(self, path: Path | str) -> Path:
        """``path`` of the node's mount namespace as the host reaches it (``/proc/<holder>/root/...``
        while the node runs); see :func:`path_in`."""
        assert self.holder is not None, "the node is not running"
        return path_in(self.holder.pid, path)

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "ctrd" / "containerd.sock"

    @property
    def kubelet_log(self) -> Path:
        return self.config_dir / "kubelet.log"

    @property
    def containerd_log(self) -> Path:
        return self.workdir / "ctrd" / "containerd.log"

    def cgroup_dirs(self) -> list[Path]:
        return [m / self.cgroup_name for m in self._cgroup_mounts]

    # ------------------------------------------------------------------ start
    def start(self) -> Node:
        for d in ("ns", "ctrd", "kl", "logs", "cni", "images"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        try:
            self._make_cgroups()
            self._start_namespace()
            if self.network is not None:
                assert self.holder is not None
                self.network.attach(self.holder.pid)
            self._start_containerd()
            self.import_image(images.busybox_image(self.workdir / "images" / "pause.tar", images.PAUSE_REF,
                                                   ["/bin/sleep", "infinity"]))
            self.import_image(images.busybox_image(self.workdir / "images" / "busybox.tar", images.BUSYBOX_REF,
                                                   ["/bin/sh"]))
            self._write_kubelet_config()
            self.start_kubelet()
        except BaseException:
            with contextlib.suppress(Exception):
                self.stop()
            raise
        return self

    def _make_cgroups(self) -> None:
        for d in self.cgroup_dirs():
            d.mkdir(exist_ok=True)
            if (d / "cpuset.cpus").exists():  # v1 cpuset: a new group starts with no CPUs/memory nodes
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (d / f).write_text((d.parent / f).read_text())
        if self.cgroup_version == 2:
            root = self.cgroup_dirs()[0]
            wanted = set((root.parent / "cgroup.subtree_control").read_text().split())
            (root / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(wanted)))

    def nsenter(self) -> list[str]:
        """The ``nsenter`` prefix that runs a command in the node's namespaces (mount, and network)."""
        assert self.holder is not None
        ns = [f"--mount=/proc/{self.holder.pid}/ns/mnt"]
        if self.own_netns:
            ns.append(f"--net=/proc/{self.holder.pid}/ns/net")
        return ["nsenter", *ns, "--"]

    def _spawn(self, argv: list[str], log: Path, *, in_namespace: bool = True) -> subprocess.Popen[bytes]:
        if in_namespace:
            argv = [*self.nsenter(), *argv]
        f = open(log, "ab")
        self._logs.append(f)
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def _start_namespace(self) -> None:
        ns = self.workdir / "ns"
        script = ["set -e"]
        for target in self.overlays:
            name = target.strip("/").replace("/", "-")
            (ns / f"{name}-up").mkdir(exist_ok=True)
            (ns / f"{name}-work").mkdir(exist_ok=True)
            script.append(f"mount -t overlay overlay -o lowerdir={target},upperdir={ns}/{name}-up,"
                          f"workdir={ns}/{name}-work {target}")
            if target == "/dev":  # an overlay hides the mounts under /dev: new ones of our own
                script += ["mkdir -p /dev/pts /dev/shm /dev/mqueue",
                           "mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts",
                           "mount -t tmpfs -o mode=1777 shm /dev/shm", "mount -t mqueue mqueue /dev/mqueue"]
        for key, want in KUBELET_SYSCTLS.items():
            if int(Path("/proc/sys", key).read_text().split()[0]) != want:
                fake = ns / f"sysctl-{key.replace('/', '.')}"
                fake.write_text(f"{want}\n")
                script.append(f"mount --bind {fake} /proc/sys/{key}")
        script += [f"mkdir -p {self.kubelet_root} {self.cdi_dir}", *self.setup, f"touch {ns}/ready",
                   "exec sleep infinity"]
        (ns / "ready").unlink(missing_ok=True)
        unshare = ["unshare", "--mount", "--propagation", "private", *(["--net"] if self.own_netns else [])]
        self.holder = self._spawn([*unshare, "sh", "-c", "\n".join(script)], ns / "holder.log", in_namespace=False)
        self._wait(lambda: (ns / "ready").exists(), "mount namespace", self.holder, ns / "holder.log", 10)

    def _start_containerd(self) -> None:
        c = self.workdir / "ctrd"
        q = repr  # TOML literal strings: our paths hold no quotes or backslashes
        # "ascend": the handler of RuntimeClass ascend, which Lab 18's pods name (the Ascend Docker
        # Runtime there); here plain runc: the device edits come from our CDI specs alone.
        runtimes = "".join(f"""    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.{name}]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.{name}.options]
        BinaryName = {q(RUNC)}
        SystemdCgroup = false
""" for name in RUNTIME_HANDLERS)
        config = f"""version = 3
root = {q(str(c / 'root'))}
state = {q(str(c / 'state'))}
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = {q(str(self.containerd_socket))}
[plugins."io.containerd.internal.v1.opt"]
  path = {q(str(c / 'opt'))}
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = {q(self.snapshotter)}
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = {q(images.PAUSE_REF)}
[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true
  cdi_spec_dirs = [{q(str(self.cdi_dir))}]
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = {str(self.restrict_oom).lower()}
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [{q(CNI_BIN)}]
    conf_dir = {q(str(self.workdir / 'cni'))}
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
{runtimes}"""
        (c / "config.toml").write_text(config.replace("'", '"'))
        if self.network is not None:
            (self.workdir / "cni" / "10-bed.conflist").write_text(self.network.cni_config())
        else:
            (self.workdir / "cni" / "10-loopback.conflist").write_text(
                '{"cniVersion": "1.0.0", "name": "ascend-dra-test", "plugins": [{"type": "loopback"}]}\n')
        env_path = f"{self.containerd_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        argv = ["env", f"PATH={env_path}", str(self.containerd_bin / "containerd"), "--config", str(c / "config.toml")]
        self.containerd = self._spawn(argv, self.containerd_log)
        self._wait(lambda: self.ctr("version", check=False).returncode == 0, "containerd", self.containerd,
                   self.containerd_log, 30)

    def ctr(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``ctr -n k8s.io ARGS`` against our containerd (outside the namespace: only its socket counts)."""
        return subprocess.run([str(self.containerd_bin / "ctr"), "--address", str(self.containerd_socket),
                               "-n", "k8s.io", *args], capture_output=True, text=True, check=check, timeout=timeout)

    def import_image(self, tarball: Path) -> None:
        self.ctr("images", "import", "--snapshotter", self.snapshotter, "--platform", "linux/amd64", str(tarball))

    def _write_kubelet_config(self) -> None:
        # In a network namespace of its own the kubelet has its usual ports to itself.
        self.kubelet_port = 10250 if self.network is not None else free_port()
        cfg: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.node_ip,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248 if self.network is not None else free_port(),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.cp.workdir / "pki" / "client-ca.crt")}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup_name}",
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": ["pods"],
            "failCgroupV1": False,
            "failSwapOn": False,
            "cpuManagerPolicy": "none",
            "memoryManagerPolicy": "None",
            "topologyManagerPolicy": "none",
            "makeIPTablesUtilChains": False,
            "protectKernelDefaults": False,
            "podLogsDir": str(self.workdir / "logs"),
            "volumePluginDir": str(self.kubelet_root / "volume-plugins"),
            "staticPodPath": "",
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "evictionPressureTransitionPeriod": "5s",
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
            "shutdownGracePeriod": "0s",
            "featureGates": self.feature_gates,
        }
        (self.config_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    def start_kubelet(self) -> None:
        """Start the kubelet (again); return when the Node reports Ready."""
        argv = [str(self.kubelet_bin), f"--config={self.config_dir / 'config.yaml'}",
                f"--kubeconfig={self.cp.kubeconfig}", f"--root-dir={self.kubelet_root}",
                f"--cert-dir={self.kubelet_root / 'pki'}", f"--hostname-override={self.node_name}",
                f"--node-ip={self.node_ip}", "--v=3"]  # 3: DRA registration and slice wiping
        t_start = time.time()
        self.kubelet = self._spawn(argv, self.kubelet_log)
        self._wait(lambda: self._ready_since(t_start), f"Node {self.node_name} Ready", self.kubelet,
                   self.kubelet_log, 90)

    def _ready_since(self, t: float) -> bool:
        status, node = self.cp.api("GET", f"/api/v1/nodes/{self.node_name}")
        if status != 200:
            return False
        ready = [c for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
        if not ready or ready[0]["status"] != "True":
            return False
        return calendar.timegm(time.strptime(ready[0]["lastHeartbeatTime"], "%Y-%m-%dT%H:%M:%SZ")) >= int(t)

    def stop_kubelet(self, sig: int = signal.SIGTERM) -> None:
        self._stop(self.kubelet, sig)
        self.kubelet = None

    def restart_kubelet(self) -> None:
        self.stop_kubelet()
        self.start_kubelet()

    def _wait(self, probe: Callable[[], bool], what: str, proc: subprocess.Popen[bytes] | None, log: Path,
              timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if proc is not None and proc.poll() is not None:
                raise NodeError(f"{what}: process exited with {proc.returncode}; last lines of {log}:\n{_tail(log)}")
            with contextlib.suppress(Exception):
                if probe():
                    return
            if time.monotonic() > deadline:
                raise NodeError(f"{what}: not ready after {timeout:.0f} s; last lines of {log}:\n{_tail(log)}")
            time.sleep(0.2)

    # ------------------------------------------------------------------ stop
    @staticmethod
    def _stop(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, grace: float = 10.0) -> None:
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def _cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        for d in self.cgroup_dirs():
            for procs in d.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in procs.read_text().split())
        return pids

    def _namespace_pids(self) -> set[int]:
        if self.holder is None or self.holder.poll() is not None:
            return set()
        try:
            ns = os.readlink(f"/proc/{self.holder.pid}/ns/mnt")
        except OSError:
            return set()
        pids = set()
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(p / "ns" / "mnt") == ns:
                        pids.add(int(p.name))
        return pids

    def stop(self) -> None:
        """Stop the kubelet, containerd, every shim and container; remove the cgroups. Idempotent."""
        errors = []
        self._stop(self.kubelet)
        self._stop(self.containerd)
        # Containers (in our cgroups) and shims (in our mount namespace, reparented to init).
        holder_pid = self.holder.pid if self.holder is not None else -1
        _kill_and_wait((self._cgroup_pids() | self._namespace_pids()) - {holder_pid, os.getpid()})
        self._stop(self.holder, signal.SIGKILL)
        for d in self.cgroup_dirs():
            if d.exists():
                for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                    self._rmdir(sub, errors)
                self._rmdir(d, errors)
        for f in self._logs:
            f.close()
        self._logs.clear()
        self.kubelet = self.containerd = self.holder = None
        if errors:
            raise NodeError("; ".join(errors))

    @staticmethod
    def _rmdir(d: Path, errors: list[str]) -> None:
        for _ in range(50):
            try:
                d.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as e:  # EBUSY while the last tasks exit
                err = e
                time.sleep(0.1)
        errors.append(f"cannot remove cgroup {d}: {err}")

    def state(self) -> dict[str, Any]:
        """What :meth:`attach` needs to stop this node from another process (``make e2e-down``)."""
        procs = {"holder": self.holder, "containerd": self.containerd, "kubelet": self.kubelet}
        return {"workdir": str(self.workdir), "node_name": self.node_name, "node_ip": self.node_ip,
                "kubelet_bin": str(self.kubelet_bin), "containerd_bin": str(self.containerd_bin),
                "kubelet_root": str(self.kubelet_root), "cdi_dir": str(self.cdi_dir), "own_netns": self.own_netns,
                "pids": {name: p.pid for name, p in procs.items() if p is not None}}

    @classmethod
    def attach(cls, state: dict[str, Any], cp: ControlPlane) -> Node:
        """A handle on a node another process started (from :meth:`state`): :meth:`stop`,
        :meth:`host_path`, :meth:`ctr` and :meth:`nsenter` work on it."""
        node = cls(Path(state["workdir"]), cp, Path(state["kubelet_bin"]), Path(state["containerd_bin"]),
                   node_name=state["node_name"], kubelet_root=Path(state["kubelet_root"]),
                   cdi_dir=Path(state["cdi_dir"]))
        node.own_netns, node.node_ip = state["own_netns"], state["node_ip"]
        pids = state["pids"]
        node.holder, node.containerd, node.kubelet = (PidProcess(pids[n]) if n in pids else None
                                                      for n in ("holder", "containerd", "kubelet"))
        return node

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def pods_iter(cp: ControlPlane, namespace: str) -> Iterator[dict]:
    """The pods of ``namespace`` (one GET)."""
    status, reply = cp.api("GET", f"/api/v1/namespaces/{namespace}/pods")
    if status != 200:
        raise NodeError(f"listing pods of {namespace}: HTTP {status}: {reply}")
    yield from reply["items"]
