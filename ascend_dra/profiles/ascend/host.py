"""The node's Ascend device nodes and driver files that a container needs, and which of them exist.

Sources (docs/ascend-hardware.md#device-nodes, docs/ascend-hardware.md#driver-paths): every NPU container needs
``/dev/davinci<physicalID>`` and
the shared ``/dev/davinci_manager``, ``/dev/devmm_svm``, ``/dev/hisi_hdc`` (the Ascend Docker
Runtime and mind-cluster's CDI inject these four); ``/dev/dvpp_cmdlist`` exists on 310P/910 for
media work. The driver is mounted read-only: ``/usr/local/Ascend/driver/lib64`` (libdcmi,
libascend_hal) and ``/usr/local/Ascend/driver/version.info``; the tools ``/usr/local/dcmi`` and
``/usr/local/bin/npu-smi`` come from the runtime's ``base.list``.

A CDI edit that names a missing host path makes the container fail to start. The shared device
nodes every supported family needs (:data:`MANDATORY_DEVICE_NODES`; only 310B / Atlas 200 lack
``devmm_svm`` and ``hisi_hdc``, and we do not serve those) are always named for real chips, so a
node where the driver has not created them yet fails the Prepare with a message naming them (the
daemon checks every device node of a spec at Prepare time) instead of handing out a spec without
them. Optional nodes and the driver mounts are probed (:func:`probe`) and injected only when
present. The paths here are the standard ones (``/dev/...``); the probe reads device nodes under
``dev_root`` and driver paths under ``host_root``, and the profiles write a device node's host path
with ``ProfileContext.device_node`` (under ``--dev-root-on-host``, docs/architecture.md "Device nodes").
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs

__all__ = ("DRIVER_MOUNTS", "MANDATORY_DEVICE_NODES", "OPTIONAL_DEVICE_NODES", "TOOL_MOUNTS", "HostLayout", "probe")

logger = logging.getLogger(__name__)

MANDATORY_DEVICE_NODES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
OPTIONAL_DEVICE_NODES = ("/dev/dvpp_cmdlist",)
DRIVER_MOUNTS = ("/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info")
TOOL_MOUNTS = ("/usr/local/dcmi", "/usr/local/bin/npu-smi")


@attrs.frozen
class HostLayout:
    """Which shared device nodes and driver paths exist on the node (host paths)."""

    device_nodes: tuple[str, ...] = MANDATORY_DEVICE_NODES
    driver_mounts: tuple[str, ...] = DRIVER_MOUNTS
    tool_mounts: tuple[str, ...] = TOOL_MOUNTS


def probe(dev_root: Path, host_root: Path) -> HostLayout:
    """Return the paths of this module that exist (blocking; run it in a worker thread).

    :param dev_root: where ``/dev`` is seen (``ProfileContext.dev_root``).
    :param host_root: where ``/`` of the host is seen, for ``/usr/local/...``.
    """
    def in_dev(path: str) -> Path:
        return dev_root / path.removeprefix("/dev/")

    def in_host(path: str) -> Path:
        return host_root / path.lstrip("/")

    nodes = tuple(p for p in (*MANDATORY_DEVICE_NODES, *OPTIONAL_DEVICE_NODES) if in_dev(p).exists())
    missing = [p for p in MANDATORY_DEVICE_NODES if p not in nodes]
    if missing:
        logger.warning("shared Ascend device nodes missing; containers will not see them",
                       extra={"missing": missing, "dev_root": str(dev_root)})
    driver = tuple(p for p in DRIVER_MOUNTS if in_host(p).exists())
    tools = tuple(p for p in TOOL_MOUNTS if in_host(p).exists())
    absent = [p for p in (*DRIVER_MOUNTS, *TOOL_MOUNTS) if p not in driver + tools]
    if absent:
        logger.warning("Ascend driver paths missing; they are not mounted",
                       extra={"missing": absent, "host_root": str(host_root)})
    return HostLayout(device_nodes=nodes, driver_mounts=driver, tool_mounts=tools)
