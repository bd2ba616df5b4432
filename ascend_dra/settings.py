"""Daemon settings: one frozen attrs class, built from flags and their environment twins (cli.py).

In standalone mode (``--standalone DIR``) every path lives under DIR (DESIGN §1)::

    DIR/plugins_registry/<driver>-reg.sock     registration socket
    DIR/plugins/<driver>/dra.sock              DRA service socket
    DIR/plugins/<driver>/checkpoint.json       prepared claims
    DIR/cdi/                                   CDI specs
    DIR/resourceslices/                        the ResourceSlices it would publish, as YAML
    DIR/claims/<namespace>/<name>.yaml         allocated claims, as `kubectl get -o yaml` prints them
"""

from __future__ import annotations

from pathlib import Path

import attrs

__all__ = ("DEFAULT_DRIVER_NAME", "Settings")

#: Ascend profiles publish under HAMi's driver name so HAMi's DeviceClasses and webhook work as is (DESIGN §5).
DEFAULT_DRIVER_NAME = "ascend.project-hami.io"


@attrs.frozen
class Settings:
    """Everything ``ascend-dra run`` needs. Durations in seconds.

    :ivar profiles: profile entry-point names, in order (``--profiles fake,gpu``).
    :ivar standalone: DIR of a local run with no cluster, or None in cluster mode.
    :ivar fake_devices: simulated devices per simulating profile.
    :ivar discovery_timeout: how long one profile's discovery may take before it is skipped.
    :ivar rediscover_interval: seconds between periodic rediscoveries (hot-plug also triggers one).
    :ivar metrics_port: TCP port of the Prometheus ``/metrics`` endpoint; 0 turns it off.
    """

    node_name: str
    profiles: tuple[str, ...] = ("npu-910",)
    driver_name: str = DEFAULT_DRIVER_NAME
    standalone: Path | None = None
    kubeconfig: str | None = None
    cdi_root: Path = Path("/var/run/cdi")
    registrar_dir: Path = Path("/var/lib/kubelet/plugins_registry")
    plugins_dir: Path = Path("/var/lib/kubelet/plugins")
    fake_devices: int = 4
    npu_smi: str = "npu-smi"
    dev_root: Path = Path("/dev")
    sys_root: Path = Path("/sys")
    boot_id_file: Path = Path("/proc/sys/kernel/random/boot_id")
    discovery_timeout: float = 30.0
    rediscover_interval: float = 60.0
    metrics_port: int = 0
    metrics_address: str = "0.0.0.0"
    log_level: str = "info"
    log_format: str = "text"

    def __attrs_post_init__(self) -> None:
        # Paths end up in CDI specs and PluginInfo.endpoint, which must be absolute.
        for name in ("standalone", "cdi_root", "registrar_dir", "plugins_dir"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value).absolute())
        if self.standalone is not None:
            root = self.standalone
            object.__setattr__(self, "registrar_dir", root / "plugins_registry")
            object.__setattr__(self, "plugins_dir", root / "plugins")
            object.__setattr__(self, "cdi_root", root / "cdi")

    @property
    def plugin_dir(self) -> Path:
        """``<plugins dir>/<driver>``: sockets and checkpoint (persists across reboots)."""
        return self.plugins_dir / self.driver_name

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registrar_dir / f"{self.driver_name}-reg.sock"

    @property
    def slices_dir(self) -> Path | None:
        return self.standalone / "resourceslices" if self.standalone is not None else None

    @property
    def claims_dir(self) -> Path | None:
        return self.standalone / "claims" if self.standalone is not None else None
