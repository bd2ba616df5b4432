"""The watch of our ResourceSlices that wakes the publisher's reconcile loop (apiserver.py).

The publisher (:class:`~ascend_dra.cluster.apiserver.ApiPublisher`) reconciles on a timer and whenever this
watch reports a change it did not make itself: slices someone else deleted (the kubelet wipes a
node's slices when it starts) or changed come back within seconds
(docs/architecture.md#resourceslice-publishing).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anyio
import orjson

from ascend_dra.cluster.apiclient import RESOURCE_V1, ApiError, KubeApi

__all__ = ("RELIST_WAIT_S", "WATCH_BACKOFF_MAX_S", "WATCH_S", "SliceWatchMixin")

log = logging.getLogger("ascend_dra.cluster.apiserver")  # the publisher's lines, one logger (docs/logging.md)

#: Seconds one watch of our slices lasts before the API server ends it and it is begun again.
WATCH_S = 300

#: The longest pause before a watch that failed, or ended at once, is begun again.
WATCH_BACKOFF_MAX_S = 30.0

#: Seconds a watch begun again after a 410 Gone waits, at most, for the LIST of the reconcile it
#: woke; past them (the API server down, say) it begins at "now".
RELIST_WAIT_S = 10.0


class SliceWatchMixin:
    """The watch half of :class:`~ascend_dra.cluster.apiserver.ApiPublisher`: it reads and sets the
    publisher's wake event, its own-write versions and its first-attempt event."""

    driver_name: str
    node_name: str
    first_attempt: anyio.Event
    _api: KubeApi | None
    _wake: anyio.Event
    _syncing: bool
    _own_versions: set[tuple[str, str]]
    _held_events: list[tuple[str, str | None, str | None]]
    _watch_version: str | None
    _list_version: str | None
    _listed: anyio.Event
    _streaming_since_sync: bool
    #: True while a watch request streams (its answer began, it has not ended).
    _streaming: bool = False

    def slice_selector(self) -> str:
        """The field selector of our slices (``spec.driver`` and ``spec.nodeName``), one string for
        the LIST and the watch: a watch that selected otherwise than the LIST would resume wrongly."""
        return f"spec.driver={self.driver_name},spec.nodeName={self.node_name}"

    def _is_own_write(self, kind: str, name: str | None, resource_version: str | None) -> bool:
        """Whether a watch event only reports a slice as our last write left it."""
        return kind in ("ADDED", "MODIFIED") and (name, resource_version) in self._own_versions

    async def _watch(self) -> None:
        """Wake the reconcile loop on every change to our slices (someone deleting them, say).

        A plain watch request (``?watch=true``) on the shared client, each event parsed with
        orjson; only its type, name and resourceVersion are kept. kubernetes-asyncio's ``Watch``
        built an ``ApiClient`` of its own each time the watch began (loading the system CA bundle on
        the loop: 55 ms) and turned every event, our own writes included, into model objects.
        A watch that fails or ends at once is begun again after a pause that doubles up to
        :data:`WATCH_BACKOFF_MAX_S`; a refusal (4xx) is logged as a warning. The next watch begins at
        the last resourceVersion seen (events and bookmarks), as an informer does, and the first one,
        once the first reconcile ended, at the version of its LIST: begun at "now", a deletion between
        a LIST and the watch (the first reconcile's; the one that the end of a watch woke; a back-off)
        went unseen until the next resync. A version the server no longer has (410 Gone) wakes a
        reconcile, and the next watch begins at the version of its LIST (at "now" if none came
        within :data:`RELIST_WAIT_S`): begun at "now" beside that reconcile, a deletion after its LIST
        and before the watch went unseen until the next resync, as above. 410s in a row back off as
        other failures do.
        """
        assert self._api is not None
        query = [("fieldSelector", self.slice_selector()), ("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(WATCH_S))]
        # The server ends the watch after WATCH_S; a connection silent for longer is dead.
        limits = aiohttp.ClientTimeout(sock_connect=30, sock_read=WATCH_S + 30)
        pause = 1.0
        await self.first_attempt.wait()  # its LIST's version, when it got one, is where the watch begins
        while True:
            began = time.monotonic()
            self._watch_version = self._watch_version or self._list_version
            since = [("resourceVersion", self._watch_version)] if self._watch_version else []
            expired = False
            try:
                await self._watch_once(query + since, limits)
            except Exception as exc:  # the API server went away or refused: back off, then watch again
                expired = isinstance(exc, ApiError) and exc.status == 410 and self._watch_version is not None
                refused = isinstance(exc, ApiError) and 400 <= exc.status < 500 and exc.status != 410  # 410: expired
                (log.warning if refused else log.debug)("the watch of our ResourceSlices failed", extra={
                    "error": str(exc)})
            self._wake.set()  # the watch ended (its timeout) or failed: look once, events may be missed
            if expired:  # (a restarted API server has none of the old versions): the reconcile just woken
                self._watch_version = self._list_version = None  # lists afresh; watch from that LIST's version
                self._listed = anyio.Event()  # set by the next LIST to answer (no await since the wake)
                with anyio.move_on_after(RELIST_WAIT_S):
                    await self._listed.wait()
            # At once after a watch that lasted; else a pause, doubled each time (410s in a row included:
            # each costs a LIST, and a server that keeps answering 410 must not be asked in a loop).
            if time.monotonic() - began > 10:
                pause = 1.0
                continue
            await anyio.sleep(pause)
            pause = min(pause * 2, WATCH_BACKOFF_MAX_S)

    async def _watch_once(self, query: list[tuple[str, str]], limits: aiohttp.ClientTimeout) -> None:
        """One watch request, until the server ends it. :raises ApiError: it was refused."""
        assert self._api is not None
        async with self._api.stream(f"{RESOURCE_V1}/resourceslices", query=query, limits=limits) as response:
            self._streaming = True
            if self._list_version is not None and ("resourceVersion", self._list_version) in query:
                self._streaming_since_sync = True  # it began where the last LIST ended: nothing missed
            try:
                await self._events(response)
            finally:  # a break in the stream: the next resync looks again (events may be missed)
                self._streaming = self._streaming_since_sync = False

    async def _events(self, response: Any) -> None:
        """Read one watch's events until it ends. :raises ApiError: an ERROR event."""
        async for line in _lines(response.content):
            event = orjson.loads(line)
            kind = event.get("type")
            if kind == "ERROR":  # e.g. the watch expired: a Status object; watch again
                raise ApiError(int((event.get("object") or {}).get("code") or 0),
                               str((event.get("object") or {}).get("message")))
            meta = (event.get("object") or {}).get("metadata") or {}
            if meta.get("resourceVersion"):
                self._watch_version = meta["resourceVersion"]
            if kind not in ("DELETED", "MODIFIED", "ADDED"):
                continue  # BOOKMARK: only its version
            key = (kind, meta.get("name"), meta.get("resourceVersion"))
            if self._is_own_write(*key):
                continue
            if self._syncing and kind != "DELETED":
                self._held_events.append(key)  # perhaps of the write under way
            else:
                self._wake.set()


async def _lines(stream: Any) -> AsyncIterator[bytes]:
    """The non-empty lines of an aiohttp response body. Not ``readline``: it refuses a line over
    128 KiB, and one watch event of a full ResourceSlice can be longer."""
    buffer = bytearray()
    async for chunk in stream.iter_any():
        searched = len(buffer)  # the bytes before hold no newline: look in the new ones only
        buffer += chunk
        while (end := buffer.find(b"\n", searched)) != -1:
            line = bytes(buffer[:end])
            del buffer[:end + 1]
            searched = 0
            if line.strip():
                yield line
    if buffer.strip():
        yield bytes(buffer)
