"""grpclib's server with its writes coalesced (one ``send`` per answer instead of one per HTTP/2
frame) and a burst of requests read in steps.

grpclib writes to the transport after each step of an answer (initial headers, the message, the
trailers) and after each batch of events read: three or four ``send`` syscalls for one unary RPC,
each waking the kubelet's reader. :class:`CorkedServer` hands its connections a transport that
collects what is written and sends it, in order, as one write: at once when the bytes end a stream
(a HEADERS or DATA frame with END_STREAM: the trailers of an answer) and no other request of the
connection still waits for its answer (a stream that already streams answers, the kubelet's health
watch, does not count), else at the end of the loop turn that wrote them. Nothing is held longer
than that turn.

Waiting for the end of the turn alone cost a lone answer one more pass of the event loop: an empty
``NodePrepareResources`` one at a time took 0.08 to 0.12 ms longer than with grpclib uncorked, on 2
cores (docs/performance.md). With calls in flight the answers of one turn still leave in one write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from grpclib.protocol import H2Protocol
from grpclib.server import Server

__all__ = ("CorkedServer", "CorkedTransport", "ends_a_stream")


#: HTTP/2 frame types that can carry END_STREAM (RFC 9113 sections 6.1 and 6.2) and the flag's bit.
_DATA, _HEADERS, _END_STREAM = 0x0, 0x1, 0x1


def ends_a_stream(data: bytes) -> bool:
    """Whether ``data`` (whole HTTP/2 frames, as h2's ``data_to_send`` returns them) holds a DATA or
    HEADERS frame with END_STREAM. Reads the 9-byte frame headers only (RFC 9113 section 4.1: 24-bit length,
    type, flags, stream id); a frame cut short at the end is not looked into."""
    offset, size = 0, len(data)
    while offset + 9 <= size:
        if data[offset + 3] in (_DATA, _HEADERS) and data[offset + 4] & _END_STREAM:
            return True
        offset += 9 + int.from_bytes(data[offset:offset + 3], "big")
    return False


class CorkedTransport:
    """Wraps an asyncio transport: :meth:`write` buffers until the bytes end a stream or the
    current loop turn ends, whichever comes first.

    Every other attribute is the wrapped transport's. ``close`` sends what is buffered first;
    ``abort`` drops it, as the wrapped transport's own ``abort`` drops its buffer.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        #: How many requests of the connection still wait for their answer (open streams that
        #: have sent nothing yet); while some do, an ended answer waits for the end of the turn,
        #: so the answers one turn completes still leave in one write.
        self.streams_open: Callable[[], int] = lambda: 0

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)
        if ends_a_stream(data) and not self.streams_open():
            self.flush()  # the last answer in flight is complete: the scheduled flush then finds nothing

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


#: Bytes of received HTTP/2 frames handed to h2 and grpclib per turn of the event loop. A burst of
#: 64 Prepares (~9 KiB: headers compressed to a few bytes, each message ~100 bytes of claim
#: namespace, name and uid) parsed, and its 64 handlers started, in one callback held the loop
#: 6-12 ms (docs/performance.md#getinfo-and-the-event-loop); 512 bytes is about four such requests.
READ_STEP = 512


class _CorkedProtocol(H2Protocol):
    """grpclib's protocol, corked, reading a large burst in steps of :data:`READ_STEP` bytes.

    The rest of a burst waits in ``_backlog`` while the loop runs what the step started (and any
    other socket, the kubelet's GetInfo on the registration socket); what arrives meanwhile queues
    behind it, so the bytes reach h2 in order. The peer cannot send more than the HTTP/2 flow-control
    windows allow, and h2 opens them only for what it was fed, so the backlog stays bounded. A
    connection lost mid-burst drops the rest: no answer to it could be sent.
    """

    _backlog: bytearray | None = None
    _lost = False

    def connection_made(self, transport: Any) -> None:
        self._loop = asyncio.get_running_loop()
        corked = CorkedTransport(transport, self._loop)
        super().connection_made(corked)
        # grpclib's H2Connection of this connection (private to grpclib: without it, as before, an
        # answer waits for the end of the loop turn; test_corked_server.py checks it is found).
        h2 = getattr(getattr(self, "connection", None), "_connection", None)
        if h2 is not None:
            corked.streams_open = lambda: _unanswered(h2)

    def data_received(self, data: bytes) -> None:
        if self._backlog is not None:
            self._backlog += data
        elif len(data) <= READ_STEP:
            super().data_received(data)
        else:
            self._backlog = bytearray(data)
            self._read_step()

    def _read_step(self) -> None:
        backlog = self._backlog
        if backlog is None or self._lost:
            return
        chunk = bytes(backlog[:READ_STEP])
        del backlog[:READ_STEP]
        if not backlog:
            self._backlog = None
        try:
            super().data_received(chunk)
        finally:
            if self._backlog is not None:
                self._loop.call_soon(self._read_step)  # after the handlers this step started

    def connection_lost(self, exc: BaseException | None) -> None:
        self._lost, self._backlog = True, None
        super().connection_lost(exc)


def _unanswered(h2: Any) -> int:
    """Requests of an h2 connection still waiting for their answer's first bytes: open streams
    that have sent no headers. A server stream that already answers (the kubelet's
    ``NodeWatchResources``, open for the connection's life) is not one, so it never holds the
    answers of other calls. Reads h2's per-stream state; if that is not there, 1 (wait for the turn)."""
    try:
        return sum(1 for stream in h2.streams.values()
                   if not stream.closed and not stream.state_machine.headers_sent)
    except AttributeError:
        return 1


class CorkedServer(Server):
    """:class:`grpclib.server.Server` whose connections write through :class:`CorkedTransport`."""

    def _protocol_factory(self) -> H2Protocol:
        protocol = super()._protocol_factory()
        protocol.__class__ = _CorkedProtocol  # same state, corked connection_made
        return protocol
