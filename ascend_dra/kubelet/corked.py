"""grpclib's server with its writes coalesced: one ``send`` per answer instead of one per HTTP/2 frame.

grpclib writes to the transport after each step of an answer (initial headers, the message, the
trailers) and after each batch of events read: three or four ``send`` syscalls for one unary RPC,
each waking the kubelet's reader. :class:`CorkedServer` hands its connections a transport that
collects what is written during one turn of the event loop and sends it at the end of that turn,
in order, as one write. Nothing is held longer than the turn that produced it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from grpclib.protocol import H2Protocol
from grpclib.server import Server

__all__ = ("CorkedServer", "CorkedTransport")


class CorkedTransport:
    """Wraps an asyncio transport: :meth:`write` buffers until the current loop turn ends.

    Every other attribute is the wrapped transport's. ``close`` sends what is buffered first;
    ``abort`` drops it, as the wrapped transport's own ``abort`` drops its buffer.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        """Send what is buffered, as one write (a closed transport drops it, as it would have)."""
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _CorkedProtocol(H2Protocol):
    def connection_made(self, transport: Any) -> None:
        super().connection_made(CorkedTransport(transport, asyncio.get_running_loop()))


class CorkedServer(Server):
    """:class:`grpclib.server.Server` whose connections write through :class:`CorkedTransport`."""

    def _protocol_factory(self) -> H2Protocol:
        protocol = super()._protocol_factory()
        protocol.__class__ = _CorkedProtocol  # same state, corked connection_made
        return protocol
