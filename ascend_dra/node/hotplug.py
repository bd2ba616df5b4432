"""Hot-plug: watch the device-node directory and ask for a rediscovery when accelerator nodes come or go.

One inotify watch on ``--dev-root`` (asyncinotify: the inotify descriptor is read by the event loop
when the kernel has an event, nothing polls), without recursion, asking the kernel only for the
events that make or remove a name: created, deleted, moved in or out, and the directory itself
deleted or moved. A write to a device node is no hot-plug, and in ``/dev`` every write to
``/dev/null`` is one: watchfiles, used before, asked for those too and polled its own thread
four times a second, 3 ms of CPU a second in an idle daemon on every node (issue 37). Names are
filtered to Ascend and NVIDIA device nodes (``davinciN``, ``davinci_manager``, ``devmm_svm``,
``hisi_hdc``, ``nvidiaN``). Changes are debounced (200 ms) so a driver reload that creates eight
nodes triggers one rediscovery. The periodic rediscovery in the daemon remains the safety net for
changes that leave no trace in ``/dev`` (health, firmware).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

import anyio
from anyio.abc import ObjectSendStream
from asyncinotify import Event, Inotify, Mask

__all__ = ("DEVICE_NODE", "WATCHED", "watch_device_nodes")

log = logging.getLogger(__name__)

#: Device-node names whose appearance or disappearance changes what profiles discover.
DEVICE_NODE = re.compile(r"^(davinci\d+|davinci_manager|devmm_svm|hisi_hdc|dvpp_cmdlist|nvidia\d+|nvidiactl)$")

#: The inotify events asked for: a name made, removed or renamed; the directory itself gone.
WATCHED = (Mask.CREATE | Mask.DELETE | Mask.MOVED_FROM | Mask.MOVED_TO | Mask.DELETE_SELF | Mask.MOVE_SELF
           | Mask.ONLYDIR)

_GONE = Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.IGNORED


def _change(event: Event) -> str | None:
    """``added:<name>`` / ``deleted:<name>`` for a device node's event, None for any other name."""
    if event.name is None or not DEVICE_NODE.fullmatch(event.name.name):
        return None
    return f"{'added' if event.mask & (Mask.CREATE | Mask.MOVED_TO) else 'deleted'}:{event.name.name}"


async def _read(inotify: Inotify, send: ObjectSendStream[Event]) -> None:
    """Pass the watch's events on (one reader: a cancelled read would drop what it had read)."""
    async with send:
        async for event in inotify:
            await send.send(event)


async def watch_device_nodes(dev_root: Path, on_change: Callable[[], None], *, debounce_ms: int = 200) -> None:
    """Call ``on_change()`` after each debounced batch of device-node changes under ``dev_root``.

    Also calls it once as soon as the watch is active: a node that appeared between the first
    discovery and that moment left no event, and this rediscovery sees it. Runs until cancelled,
    or until ``dev_root`` is removed or moved (logged: hot-plug is off from then on). A missing
    ``dev_root`` is logged and the watch is not started.
    """
    if not await anyio.Path(dev_root).is_dir():
        log.warning("device directory does not exist; hot-plug is off", extra={"dev_root": str(dev_root)})
        return
    send, receive = anyio.create_memory_object_stream[Event](1024)
    with Inotify() as inotify:
        inotify.add_watch(dev_root, WATCHED)
        log.debug("watching device nodes", extra={"dev_root": str(dev_root)})
        on_change()
        async with anyio.create_task_group() as tg, receive:
            tg.start_soon(_read, inotify, send)
            while True:
                batch = [await receive.receive()]
                with anyio.move_on_after(debounce_ms / 1000):
                    while True:
                        batch.append(await receive.receive())
                changes = sorted({c for c in map(_change, batch) if c})
                if changes:
                    log.info("device nodes changed; rediscovering", extra={"changes": ",".join(changes)})
                    on_change()
                if any(event.mask & _GONE and event.name is None for event in batch):
                    log.warning("device directory was removed or moved; hot-plug is off",
                                extra={"dev_root": str(dev_root)})
                    tg.cancel_scope.cancel()
                    return
