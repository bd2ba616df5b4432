"""A small asyncio client of the test API server for the bed's kubelet stand-ins, load generator and
observers: JSON requests and watches over one aiohttp session, a bearer token per identity.

Not the daemon's client (ascend_dra/cluster/apiclient.py): the bed's own requests are sent under other
user names and user agents, so the API server's audit log tells them from the drivers' own.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson

__all__ = ("Api", "ApiError")


class ApiError(Exception):
    """A non-2xx answer (``status``) or none (``status`` 0)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}")


class Api:
    """Requests to ``server`` with ``token``, verified against ``cafile``.

    :param limit: connections at most (the load generator sends hundreds at once in a burst).
    """

    def __init__(self, server: str, token: str, cafile: str, *, user_agent: str, limit: int = 64) -> None:
        self.server = server.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json", "User-Agent": user_agent}
        context = ssl.create_default_context(cafile=cafile)
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=limit),
                                              trust_env=False, read_bufsize=2**21)

    async def close(self) -> None:
        await self._session.close()

    async def __aenter__(self) -> Api:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _url(self, path: str, query: dict[str, str] | None) -> str:
        return self.server + path + (f"?{urlencode(query)}" if query else "")

    async def call(self, method: str, path: str, body: Any = None, *, query: dict[str, str] | None = None,
                   content_type: str = "application/json", ok: tuple[int, ...] = ()) -> Any:
        """One request; the decoded answer. :raises ApiError: a status outside 2xx and ``ok``."""
        headers = dict(self._headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = orjson.dumps(body)
        raw = await self._raw(method, path, query, data, headers, ok)
        return orjson.loads(raw) if raw else None

    async def text(self, path: str) -> str:
        """A GET answered in plain text (``/metrics``). :raises ApiError: a status outside 2xx."""
        return (await self._raw("GET", path, None, None, self._headers, ())).decode()

    async def _raw(self, method: str, path: str, query: dict[str, str] | None, data: bytes | None,
                   headers: dict[str, str], ok: tuple[int, ...]) -> bytes:
        """The answer's bytes. :raises ApiError: no answer, or a status outside 2xx and ``ok``."""
        try:
            async with self._session.request(method, self._url(path, query), data=data, headers=headers,
                                             timeout=aiohttp.ClientTimeout(total=60)) as response:
                raw = await response.read()
                status = response.status
        except (OSError, TimeoutError, aiohttp.ClientError) as exc:
            raise ApiError(0, f"{method} {path}: {exc or type(exc).__name__}") from None
        if not (200 <= status < 300 or status in ok):
            raise ApiError(status, f"{method} {path}: {raw[:300]!r}")
        return raw

    async def watch(self, path: str, query: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
        """The events of one watch request (``watch=true`` is added), until the server ends it.

        :raises ApiError: refused, or an ``ERROR`` event (its Status code, 410 for an expired version).
        """
        url = self._url(path, {**query, "watch": "true", "allowWatchBookmarks": "true"})
        timeout = aiohttp.ClientTimeout(sock_connect=30, sock_read=None)
        async with self._session.get(url, headers=self._headers, timeout=timeout) as response:
            if response.status != 200:
                raise ApiError(response.status, f"watch {path}: {(await response.read())[:300]!r}")
            buffer = bytearray()
            async for chunk in response.content.iter_any():
                buffer += chunk
                while (end := buffer.find(b"\n")) != -1:
                    line = bytes(buffer[:end])
                    del buffer[:end + 1]
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiError(int(status.get("code") or 0), str(status.get("message")))
                    yield event

    async def informer(self, path: str, query: dict[str, str]) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """LIST then WATCH from the list's version, resumed after each end, listed again after a 410,
        as client-go's reflector does: yields ``(type, object)``; the LIST's items come as ADDED
        (again after a relist: the caller's handlers are idempotent). Runs until cancelled."""
        while True:
            listed = await self.call("GET", path, query=query)
            version = listed["metadata"]["resourceVersion"]
            for item in listed.get("items") or []:
                yield "ADDED", item
            while True:
                try:
                    async for event in self.watch(path, {**query, "resourceVersion": version,
                                                         "timeoutSeconds": "300"}):
                        obj = event.get("object") or {}
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        if event["type"] != "BOOKMARK":
                            yield event["type"], obj
                except ApiError as exc:
                    if exc.status == 410:
                        break  # relist
                    raise
