"""Host paths of the HAMivNPUCore soft split, from profile options, and the mounts they give a container.

Layout (docs/ascend-hardware.md#vnpu-core-host-layout, the peer chart's init container): ``/usr/local/hami-vnpu-core``
holds ``libvnpu.so`` (and, from the installer, an ``ld.so.preload`` we do not use: each claim gets
its own, :mod:`.vnpu_core_assets`); its ``containers/<claimUID>/`` are the per-claim dirs (the
claim's ``ld.so.preload`` and its local dirs, mode **0777**); ``/usr/local/hami-shared-region``
(``mkdir -m 0777``) holds the per-chip global registries. The driver paths are those of
docs/ascend-hardware.md#driver-paths.

Profile options (``--profile-option HAMivNPUCore.KEY=VALUE``; every value an absolute host path):

=================== ====================================================== =====================
key                 meaning                                                default
=================== ====================================================== =====================
``hostRoot``        prefix of every default below (a lab's fake host root)  ``/``
``vnpuCoreDir``     hami-vnpu-core assets and per-claim local dirs          ``/usr/local/hami-vnpu-core``
``sharedRegionDir`` the shared region (per-chip global registries)          ``/usr/local/hami-shared-region``
``driverDir``       the Ascend driver                                       ``/usr/local/Ascend/driver``
``installInfo``     the driver's install record                             ``/etc/ascend_install.info``
``simulate``        discovery chain option, as for ``npu-310P``             ``never``
=================== ====================================================== =====================

The daemon must see these paths where the host has them (the DaemonSet mounts them at the same
paths, as the peer chart does): they are probed at discovery and written into CDI specs as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

import attrs

from ascend_dra.profiles.ascend.dcmi.client import DCMI_OPTION
from ascend_dra.profiles.options import ProfileOption, path_option, simulate_option

__all__ = (
    "CONTAINER_LOCAL_DIR",
    "CONTAINER_SHARED_REGION",
    "CONTAINER_VNPU_CORE_DIR",
    "MAX_CONTAINERS",
    "OPTIONS",
    "OPTION_KEYS",
    "VnpuCoreHost",
    "max_shares",
)

#: Where the assets directory appears in the container (each claim's ``ld.so.preload`` names
#: ``/hami-vnpu-core/libvnpu.so``; docs/ascend-hardware.md#vnpu-core-container-edits).
CONTAINER_VNPU_CORE_DIR = "/hami-vnpu-core"
#: Where the shared region appears (``NPU_GLOBAL_SHM_PATH`` lives here, docs/ascend-hardware.md#vnpu-core-environment).
CONTAINER_SHARED_REGION = "/hami-shared-region"
#: Where the per-claim local dir appears (``NPU_LOCAL_SHM_PATH`` lives here,
#: docs/ascend-hardware.md#vnpu-core-environment).
CONTAINER_LOCAL_DIR = "/hami-vnpu-shmem"

_DEFAULTS = {
    "vnpuCoreDir": "usr/local/hami-vnpu-core",
    "sharedRegionDir": "usr/local/hami-shared-region",
    "driverDir": "usr/local/Ascend/driver",
    "installInfo": "etc/ascend_install.info",
}
#: Every option key this profile reads (``<profile>.<key>``).
OPTION_KEYS = ("hostRoot", *_DEFAULTS, "simulate", "maxShares")
#: hami-vnpu-core manages at most this many containers per chip (``MAX_MANAGERS``,
#: docs/ascend-hardware.md#vnpu-core-limiter): the most claims one chip can take.
MAX_CONTAINERS = 64


def _shares(value: str) -> None:
    if not (value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_CONTAINERS):
        raise ValueError(f"is not a whole number from 1 to {MAX_CONTAINERS} (claims per chip)")


def max_shares(options: Mapping[str, str], profile: str) -> int:
    """``<profile>.maxShares``: how many claims one chip may take at once (its ``containers``
    capacity), default :data:`MAX_CONTAINERS`; HAMi's Ascend device plugin caps a chip at its
    ``VDeviceCount`` (7 on a 310P3 by default). Checked by :meth:`VnpuCoreHost.from_options`."""
    return int(options.get(f"{profile}.maxShares", MAX_CONTAINERS))


#: The declarations checked before start-up (:mod:`ascend_dra.profiles.options`).
OPTIONS: Mapping[str, ProfileOption] = {
    "hostRoot": path_option("the prefix of every default path below, for a lab's fake host root", "directory"),
    **{key: path_option(f"host path, default /{default} under hostRoot",
                        "file" if key == "installInfo" else "directory") for key, default in _DEFAULTS.items()},
    "simulate": simulate_option(),
    "dcmi": DCMI_OPTION,
    "maxShares": ProfileOption(f"claims one chip may take at once, 1..{MAX_CONTAINERS} (default {MAX_CONTAINERS}, the "
                               "limiter's most; HAMi's device plugin allows 7 per 310P3)", check=_shares),
}


@attrs.frozen
class VnpuCoreHost:
    """The host paths of one node (all absolute, as strings for CDI)."""

    host_root: str = "/"
    vnpu_core_dir: str = "/usr/local/hami-vnpu-core"
    shared_region_dir: str = "/usr/local/hami-shared-region"
    driver_dir: str = "/usr/local/Ascend/driver"
    install_info: str = "/etc/ascend_install.info"

    @classmethod
    def from_options(cls, options: Mapping[str, str], profile: str) -> VnpuCoreHost:
        """Read ``<profile>.<key>`` options (see the module docstring).

        :raises ValueError: naming the option, for a key this profile does not know (listing the
            known ones) or a value that is not an absolute path.
        """
        prefix = f"{profile}."
        mine = {k[len(prefix):]: v for k, v in options.items() if k.startswith(prefix)}
        problems = [f"profile option {prefix}{k}: unknown (allowed: {', '.join(OPTION_KEYS)})"
                    for k in sorted(mine) if k not in OPTION_KEYS]
        for key in ("hostRoot", *_DEFAULTS):
            if key in mine and not PurePosixPath(mine[key]).is_absolute():
                problems.append(f"profile option {prefix}{key}: {mine[key]!r} is not an absolute path")
        if "maxShares" in mine and (problem := OPTIONS["maxShares"].problem(mine["maxShares"])):
            problems.append(f"profile option {prefix}maxShares: {problem}")
        if problems:
            raise ValueError("; ".join(problems))
        root = PurePosixPath(mine.get("hostRoot", "/"))
        paths = {key: mine.get(key, str(root / default)) for key, default in _DEFAULTS.items()}
        return cls(host_root=str(root), vnpu_core_dir=paths["vnpuCoreDir"], shared_region_dir=paths["sharedRegionDir"],
                   driver_dir=paths["driverDir"], install_info=paths["installInfo"])

    def on_host(self, path: str) -> str:
        """A standard absolute path (``/usr/local/bin/npu-smi``) under ``hostRoot``."""
        return str(PurePosixPath(self.host_root) / path.lstrip("/"))

    @property
    def libvnpu(self) -> str:
        """The interceptor library, ``<vnpuCoreDir>/libvnpu.so``."""
        return f"{self.vnpu_core_dir}/libvnpu.so"

    @property
    def containers_dir(self) -> str:
        """Parent of the per-claim dirs, ``<vnpuCoreDir>/containers``."""
        return f"{self.vnpu_core_dir}/containers"

    @property
    def version_info(self) -> str:
        """``<driverDir>/version.info`` (the driver release, docs/ascend-hardware.md#driver-paths)."""
        return f"{self.driver_dir}/version.info"

    @property
    def driver_libs(self) -> str:
        """``<driverDir>/lib64/driver`` (libascend_hal and friends, mounted read-only,
        docs/ascend-hardware.md#vnpu-core-container-edits)."""
        return f"{self.driver_dir}/lib64/driver"

    def claim_dir(self, claim_uid: str) -> str:
        """The per-claim local dir of ``claim_uid`` (checked by the caller to be one path component)."""
        return f"{self.containers_dir}/{claim_uid}"
