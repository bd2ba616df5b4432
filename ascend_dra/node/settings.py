"""Daemon settings: one frozen attrs class, built from flags and their environment twins (cli/main.py).

In standalone mode (``--standalone DIR``) every path lives under DIR (docs/architecture.md#standalone-mode)::

    DIR/plugins_registry/<driver>-reg.sock     registration socket (<driver>-<uid>-reg.sock with
                                               --rolling-update-id <uid>)
    DIR/plugins/<driver>/dra.sock              DRA service socket (dra-<uid>.sock)
    DIR/plugins/<driver>/checkpoint.json       prepared claims
    DIR/cdi/                                   CDI specs
    DIR/resourceslices/                        the ResourceSlices it would publish, as YAML
    DIR/claims/<namespace>/<name>.yaml         allocated claims, as `kubectl get -o yaml` prints them

In cluster mode the kubelet's root dir (``--kubelet-root-dir``, the kubelet's ``--root-dir``,
default ``/var/lib/kubelet``) gives the registration dir ``<root>/plugins_registry`` and the
plugins dir ``<root>/plugins`` unless those are given, and the configuration must pass the checks
the 1.38 kubelet makes at registration (:func:`ascend_dra.kubelet.rules.registration_problems`).
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from ascend_dra.kubelet.rules import UNIX_PATH_MAX, endpoint_problems
from ascend_dra.system.listen import address_problem

__all__ = ("DEFAULT_DRIVER_NAME", "Settings", "SettingsError", "fake_devices_problem", "name_problems",
           "rolling_update_sockets")

#: What a --rolling-update-id may be: it goes into socket file names (a pod UID is 36 characters).
_ROLLING_UPDATE_ID = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,62}")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def fake_devices_problem(count: int) -> str | None:
    """What is wrong with ``--fake-devices`` (``run`` and ``discover`` alike), or None: a billion
    held the event loop for minutes."""
    if 0 <= count <= MAX_FAKE_DEVICES:
        return None
    return f"--fake-devices {count} must be from 0 to {MAX_FAKE_DEVICES}"


def name_problems(driver_name: str, node_name: str) -> list[str]:
    """What is wrong with ``--driver-name`` and ``--node-name`` (``run`` and ``discover`` alike), each
    naming the flag and what it accepts: both end up in ResourceSlice names and fields."""
    found = []
    if not (len(driver_name) <= 63 and _DNS_SUBDOMAIN.fullmatch(driver_name)):
        found.append(f"--driver-name {driver_name!r} must be a lower-case DNS subdomain of at most 63 "
                     "characters (e.g. ascend.project-hami.io); it is the CDI vendor and the slices' driver")
    if not (len(node_name) <= 253 and _DNS_SUBDOMAIN.fullmatch(node_name)):
        found.append(f"--node-name {node_name!r} must be the node's name: a lower-case DNS subdomain")
    return found


def _digest(text: str, length: int) -> str:
    """``length`` characters of the URL-safe base64 of ``sha256(text)`` (safe in a file name)."""
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).decode()[:length]


def _first_that_fits(directory: Path, names: Sequence[str]) -> Path:
    """The first of ``names`` whose path in ``directory`` fits a unix socket address; else the first
    (binding it then fails with a message naming the limit)."""
    for name in names:
        if len(os.fsencode(directory / name)) < UNIX_PATH_MAX:  # sun_path holds the NUL too
            return directory / name
    return directory / names[0]


def rolling_update_sockets(registrar_dir: Path, plugin_dir: Path, driver: str, uid: str) -> tuple[Path, Path]:
    """The sockets of the instance with rolling-update id ``uid``, named as the Go helper names them:
    ``<registrar dir>/<driver>-<uid>-reg.sock`` and ``<plugin dir>/dra-<uid>.sock``. Where a path would
    not fit a unix socket address, a hash replaces the uid: ``<driver>-<8 characters>-reg.sock``, then
    ``dra-<16 characters of the hash of driver and uid>-reg.sock``; ``dra-<16 characters>.sock``. The
    kubelet accepts any socket name in its registration directory."""
    return (_first_that_fits(registrar_dir, (f"{driver}-{uid}-reg.sock", f"{driver}-{_digest(uid, 8)}-reg.sock",
                                             f"dra-{_digest(driver + chr(0) + uid, 16)}-reg.sock")),
            _first_that_fits(plugin_dir, (f"dra-{uid}.sock", f"dra-{_digest(uid, 16)}.sock")))


#: ``--unhealthy-devices``: what becomes of a device its profile reports unhealthy (Settings.unhealthy_devices).
UNHEALTHY_DEVICES = ("taint", "withdraw", "publish")


class SettingsError(ValueError):
    """Raised by :class:`Settings` when flags are wrong; ``problems`` lists each, naming the flag."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))

#: Ascend profiles publish under HAMi's driver name so HAMi's DeviceClasses and webhook work as is
#: (docs/architecture.md#names).
DEFAULT_DRIVER_NAME = "ascend.project-hami.io"

#: The most simulated devices (``--fake-devices``): far beyond any node, short of a pool whose
#: discovery holds the event loop for minutes.
MAX_FAKE_DEVICES = 10_000


@attrs.frozen
class Settings:
    """Everything ``ascend-dra run`` needs. Durations in seconds.

    :ivar profiles: profile entry-point names, in order (``--profiles fake,gpu``).
    :ivar standalone: DIR of a local run with no cluster, or None in cluster mode.
    :ivar fake_devices: simulated devices per simulating profile.
    :ivar discovery_timeout: how long one profile's discovery may take before it is skipped.
    :ivar rediscover_interval: seconds between periodic rediscoveries (hot-plug also triggers one).
    :ivar health_interval: seconds between device health checks (and health-stream messages).
    :ivar unhealthy_devices: what the ResourceSlices say of a device its profile reports
        unhealthy (:data:`UNHEALTHY_DEVICES`): ``taint`` (a ``<driver>/unhealthy: NoSchedule``
        taint; where the API server drops taints, gate DRADeviceTaints off, the device is withdrawn
        instead), ``withdraw`` (left out of the slices until healthy) or ``publish`` (as if healthy:
        only the kubelet's health stream tells).
    :ivar metrics_port: TCP port of the Prometheus ``/metrics`` endpoint; 0 turns it off.
    :ivar kubelet_root_dir: the kubelet's ``--root-dir``; ``registrar_dir`` and ``plugins_dir``
        default to ``<root>/plugins_registry`` and ``<root>/plugins``.
    :ivar health_service: serve (and advertise) the KEP-4680 health stream, v1 and v1alpha1.
    :ivar claim_status: write ``status.devices`` of prepared claims (cluster mode, KEP-4817).
    :ivar device_metadata: give prepared claims device metadata files for their containers (KEP-5304).
    :ivar rolling_update_id: the pod UID: sockets of this instance's own names, the checkpoint
        shared with other instances under a lock (docs/durable-state.md); None: one instance at a time.
    :ivar healthcheck_port: TCP port of the ``grpc.health.v1.Health`` service; 0 turns it off.
    :ivar warnings: lines the CLI found worth a WARNING at start-up (a deprecated flag or variable
        given, with what to give instead; a variable named almost like a setting, ignored).
    """

    node_name: str
    profiles: tuple[str, ...] = ("npu-910",)
    driver_name: str = DEFAULT_DRIVER_NAME
    standalone: Path | None = None
    kubeconfig: str | None = None
    cdi_root: Path = Path("/var/run/cdi")
    kubelet_root_dir: Path = Path("/var/lib/kubelet")
    registrar_dir: Path | None = None
    plugins_dir: Path | None = None
    health_service: bool = True
    claim_status: bool = True
    device_metadata: bool = True
    fake_devices: int = 4
    npu_smi: str = "npu-smi"
    dev_root: Path = Path("/dev")
    dev_root_on_host: Path | None = None
    sys_root: Path = Path("/sys")
    boot_id_file: Path = Path("/proc/sys/kernel/random/boot_id")
    discovery_timeout: float = 30.0
    rediscover_interval: float = 60.0
    health_interval: float = 10.0
    unhealthy_devices: str = "taint"
    profile_options: Mapping[str, str] = attrs.field(factory=dict)
    metrics_port: int = 0
    metrics_address: str = "*"  # listen.py: every address, IPv4 and IPv6
    rolling_update_id: str | None = None
    healthcheck_port: int = 0
    healthcheck_address: str = "*"
    log_level: str = "info"
    log_format: str = "text"
    warnings: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        # Paths end up in CDI specs and PluginInfo.endpoint, which must be absolute.
        for name in ("standalone", "cdi_root", "kubelet_root_dir", "registrar_dir", "plugins_dir", "dev_root"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value).absolute())
        if self.standalone is not None:
            root = self.standalone
            object.__setattr__(self, "kubelet_root_dir", root)
            object.__setattr__(self, "registrar_dir", root / "plugins_registry")
            object.__setattr__(self, "plugins_dir", root / "plugins")
            object.__setattr__(self, "cdi_root", root / "cdi")
        if self.registrar_dir is None:
            object.__setattr__(self, "registrar_dir", self.kubelet_root_dir / "plugins_registry")
        if self.plugins_dir is None:
            object.__setattr__(self, "plugins_dir", self.kubelet_root_dir / "plugins")
        problems = self.problems()
        if problems:
            raise SettingsError(problems)

    def problems(self) -> list[str]:
        """What is wrong with these settings, each naming the flag and what it accepts."""
        found = name_problems(self.driver_name, self.node_name)
        if self.rolling_update_id is not None and not _ROLLING_UPDATE_ID.fullmatch(self.rolling_update_id):
            found.append(f"--rolling-update-id {self.rolling_update_id!r} must be the pod UID (letters, digits, "
                         "'-', '_' and '.', at most 63 characters): it goes into the socket file names")
        for flag, port in (("--metrics-port", self.metrics_port), ("--healthcheck-port", self.healthcheck_port)):
            if not 0 <= port <= 65535:
                found.append(f"{flag} {port} must be a TCP port (1-65535) or 0 (off)")
        for flag, port, address in (("--metrics-address", self.metrics_port, self.metrics_address),
                                    ("--healthcheck-address", self.healthcheck_port, self.healthcheck_address)):
            if port and (problem := address_problem(flag, address)) is not None:
                found.append(problem)
        if self.metrics_port and self.metrics_port == self.healthcheck_port:
            found.append(f"--metrics-port and --healthcheck-port are both {self.metrics_port}; give them different "
                         "ports")
        if self.unhealthy_devices not in UNHEALTHY_DEVICES:
            found.append(f"--unhealthy-devices {self.unhealthy_devices!r} is not one of {', '.join(UNHEALTHY_DEVICES)}")
        if not self.profiles:
            found.append("--profiles (PROFILES) is empty: name at least one profile (`ascend-dra profiles` lists them)")
        elif len(set(self.profiles)) != len(self.profiles):
            found.append(f"--profiles {','.join(self.profiles)} names a profile twice")
        if (problem := fake_devices_problem(self.fake_devices)) is not None:
            found.append(problem)
        if self.dev_root_on_host is not None and not self.dev_root_on_host.is_absolute():
            # A host path, written into CDI specs: the daemon's working directory means nothing there.
            found.append(f"--dev-root-on-host {str(self.dev_root_on_host)!r} must be an absolute path (the host's "
                         "device directory, /dev, as the container runtime sees it)")
        for name in ("discovery_timeout", "rediscover_interval", "health_interval"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):  # nan passed `<= 0`
                found.append(f"--{name.replace('_', '-')} {getattr(self, name)} must be a number of seconds, more "
                             "than 0")
        if self.standalone is None and not found:  # a kubelet checks these only in cluster mode
            found += endpoint_problems(str(self.dra_socket), str(self.kubelet_root_dir))
        return found

    @property
    def plugin_dir(self) -> Path:
        """``<plugins dir>/<driver>``: sockets and checkpoint (persists across reboots)."""
        assert self.plugins_dir is not None  # set in __attrs_post_init__
        return self.plugins_dir / self.driver_name

    @property
    def dra_socket(self) -> Path:
        """``<plugin dir>/dra.sock``; with a rolling-update id see :func:`rolling_update_sockets`."""
        if self.rolling_update_id is None:
            return self.plugin_dir / "dra.sock"
        return self.rolling_update_sockets(self.rolling_update_id)[1]

    @property
    def registration_socket(self) -> Path:
        """``<registrar dir>/<driver>-reg.sock``; with a rolling-update id see :func:`rolling_update_sockets`."""
        assert self.registrar_dir is not None  # set in __attrs_post_init__
        if self.rolling_update_id is None:
            return self.registrar_dir / f"{self.driver_name}-reg.sock"
        return self.rolling_update_sockets(self.rolling_update_id)[0]

    def rolling_update_sockets(self, uid: str) -> tuple[Path, Path]:
        """``(registration socket, DRA socket)`` of the instance with rolling-update id ``uid``
        (this one's, or another's whose sockets are to be cleaned up): see :func:`rolling_update_sockets`."""
        assert self.registrar_dir is not None
        return rolling_update_sockets(self.registrar_dir, self.plugin_dir, self.driver_name, uid)

    @property
    def slices_dir(self) -> Path | None:
        return self.standalone / "resourceslices" if self.standalone is not None else None

    @property
    def claims_dir(self) -> Path | None:
        return self.standalone / "claims" if self.standalone is not None else None
