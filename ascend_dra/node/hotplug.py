"""Hot-plug: watch the device-node directory and ask for a rediscovery when accelerator nodes come or go.

Uses watchfiles (inotify) on ``--dev-root`` without recursion, filtered to the names of Ascend and
NVIDIA device nodes (``davinciN``, ``davinci_manager``, ``devmm_svm``, ``hisi_hdc``, ``nvidiaN``).
Changes are debounced (200 ms) so a driver reload that creates eight nodes triggers one
rediscovery. The periodic rediscovery in the daemon remains the safety net for changes that
leave no trace in ``/dev`` (health, firmware).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

import anyio
from watchfiles import Change, awatch

__all__ = ("DEVICE_NODE", "watch_device_nodes")

log = logging.getLogger(__name__)

#: Device-node names whose appearance or disappearance changes what profiles discover.
DEVICE_NODE = re.compile(r"^(davinci\d+|davinci_manager|devmm_svm|hisi_hdc|dvpp_cmdlist|nvidia\d+|nvidiactl)$")


def _interesting(_: Change, path: str) -> bool:
    return bool(DEVICE_NODE.fullmatch(Path(path).name))


async def watch_device_nodes(dev_root: Path, on_change: Callable[[], None], *, debounce_ms: int = 200) -> None:
    """Call ``on_change()`` after each debounced batch of device-node changes under ``dev_root``.

    Also calls it once as soon as the watch is active: a node that appeared between the first
    discovery and that moment left no event, and this rediscovery sees it. Runs until cancelled.
    A missing ``dev_root`` is logged and the watch is not started.
    """
    if not await anyio.Path(dev_root).is_dir():
        log.warning("device directory does not exist; hot-plug is off", extra={"dev_root": str(dev_root)})
        return
    active = False
    # rust_timeout bounds how long the watcher thread blocks: anyio cannot abandon that thread, so
    # on shutdown the daemon waits for it (watchfiles' default, 5 s, made every SIGTERM take 5 s).
    # yield_on_timeout makes the first (possibly empty) batch tell us the watch is active.
    async for changes in awatch(dev_root, watch_filter=_interesting, debounce=debounce_ms, step=50,
                                recursive=False, rust_timeout=250, yield_on_timeout=True):
        if not active:
            active = True
            log.debug("watching device nodes", extra={"dev_root": str(dev_root)})
            on_change()
            continue
        if not changes:
            continue
        log.info("device nodes changed; rediscovering",
                 extra={"changes": ",".join(sorted(f"{c.name}:{Path(p).name}" for c, p in changes))})
        on_change()
