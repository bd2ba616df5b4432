"""CorkedServer (kubelet/corked.py) over a real unix socket: one write per unary answer, same answers."""

from __future__ import annotations

import asyncio
import asyncio.selector_events
import itertools
import socket

import anyio
import h2.config
import h2.connection
import h2.events
import pytest
from grpclib.client import Channel
from grpclib.server import Server

from ascend_dra.kubelet._gen.grpc.health.v1 import (
    HealthBase,
    HealthCheckRequest,
    HealthCheckResponse,
    HealthCheckResponseServingStatus,
    HealthStub,
)
from ascend_dra.kubelet.corked import READ_STEP, CorkedServer, CorkedTransport, ends_a_stream

SERVING = HealthCheckResponseServingStatus.SERVING


class Health(HealthBase):
    """A unary service to answer (grpclib's own health module would register a second copy of
    grpc/health/v1/health.proto in protobuf's pool beside the tests' one)."""

    async def check(self, message: HealthCheckRequest) -> HealthCheckResponse:
        return HealthCheckResponse(status=SERVING)

pytestmark = pytest.mark.anyio
CALLS = 50


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def server_writes(server_class: type[Server], path: str, monkeypatch) -> tuple[list[int], list[int]]:
    """(sizes of the server side's socket writes during CALLS Check calls, the statuses answered)."""
    server = server_class([Health()])
    await server.start(path=path)
    writes: list[int] = []
    original = asyncio.selector_events._SelectorSocketTransport.write

    def counting(transport, data):
        if transport.get_extra_info("sockname") == path:  # the accepted (server) side, not the client's
            writes.append(len(data))
        return original(transport, data)

    channel = Channel(path=path)
    try:
        stub = HealthStub(channel)
        await stub.check(HealthCheckRequest())  # connection and HTTP/2 settings exchanged first
        monkeypatch.setattr(asyncio.selector_events._SelectorSocketTransport, "write", counting)
        answers = [(await stub.check(HealthCheckRequest())).status for _ in range(CALLS)]
        monkeypatch.setattr(asyncio.selector_events._SelectorSocketTransport, "write", original)
    finally:
        channel.close()
        server.close()
        await server.wait_closed()
    return writes, answers


async def test_a_unary_answer_is_one_socket_write(tmp_path, monkeypatch):
    plain, plain_answers = await server_writes(Server, str(tmp_path / "plain.sock"), monkeypatch)
    corked, corked_answers = await server_writes(CorkedServer, str(tmp_path / "corked.sock"), monkeypatch)
    assert corked_answers == plain_answers == [SERVING] * CALLS
    assert len(plain) >= 3 * CALLS  # headers, message, trailers: one write each
    assert len(corked) == CALLS
    assert sum(corked) == sum(plain)  # the same bytes, coalesced


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame (RFC 9113 section 4.1)."""
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


HEADERS, DATA, END_STREAM, END_HEADERS = 0x1, 0x0, 0x1, 0x4


def test_end_stream_is_found_in_data_and_headers_frames_only():
    assert ends_a_stream(frame(HEADERS, END_HEADERS | END_STREAM, 1))
    assert ends_a_stream(frame(HEADERS, END_HEADERS, 1, b"x" * 20) + frame(DATA, END_STREAM, 1, b"abc"))
    assert not ends_a_stream(frame(HEADERS, END_HEADERS, 1, b"\x01" * 9) + frame(DATA, 0, 1, b"abc"))
    assert not ends_a_stream(frame(0x4, 0x1, 0))  # a SETTINGS ACK: flag 0x1 is ACK there
    assert not ends_a_stream(frame(0x6, 0x1, 0, bytes(8)))  # a PING ACK
    assert not ends_a_stream(frame(HEADERS, END_HEADERS, 1, b"x" * 20)[:12])  # cut short


async def test_an_answer_goes_out_when_its_trailers_are_written_not_a_loop_turn_later():
    """Flushing only at the end of the loop turn cost each unary answer one more pass of the loop
    (0.08-0.12 ms one at a time, docs/performance.md); the bytes of an answer still go in one write."""
    loop = asyncio.get_running_loop()
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
    try:
        corked = CorkedTransport(transport, loop)
        headers, message = frame(HEADERS, END_HEADERS, 1, b"h" * 5), frame(DATA, 0, 1, b"m" * 7)
        corked.write(headers)
        corked.write(message)
        with pytest.raises(BlockingIOError):
            peer.recv(4096)  # held: the answer is not complete
        corked.write(frame(HEADERS, END_HEADERS | END_STREAM, 1, b"t" * 3))
        assert peer.recv(4096) == headers + message + frame(HEADERS, END_HEADERS | END_STREAM, 1, b"t" * 3)
        corked.write(frame(DATA, 0, 3, b"s"))  # a stream's message without its end: at the end of the turn
        with pytest.raises(BlockingIOError):
            peer.recv(4096)
        await asyncio.sleep(0)
        assert peer.recv(4096) == frame(DATA, 0, 3, b"s")
    finally:
        transport.close()
        peer.close()


async def test_the_server_tells_its_corked_transport_how_many_requests_are_being_answered():
    """An ended answer goes out at once only when it was the last one in flight: CorkedServer wires
    the count of the connection's open streams into its transport (from grpclib's H2Connection)."""
    loop = asyncio.get_running_loop()
    ours, peer = socket.socketpair()
    server = CorkedServer([Health()])
    _, protocol = await loop.connect_accepted_socket(server._protocol_factory, ours)
    try:
        corked = protocol.connection._transport
        assert isinstance(corked, CorkedTransport) and corked.streams_open() == 0
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        client.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", "/grpc.health.v1.Health/Check"),
                                (":authority", "localhost"), ("te", "trailers"), ("content-type", "application/grpc")])
        peer.sendall(client.data_to_send())  # a request begun, its message not sent yet
        for _ in range(50):
            await asyncio.sleep(0.01)
            if corked.streams_open() == 1:
                break
        assert corked.streams_open() == 1
    finally:
        protocol.connection_lost(None)
        peer.close()
        ours.close()


async def test_a_health_watch_open_on_the_connection_does_not_hold_the_answers_of_other_calls(tmp_path):
    """The kubelet keeps NodeWatchResources open on the connection it prepares on: a stream that
    already answers is not a request waiting for its answer, so the count stays 0 beside it (with
    h2's open streams it was 1 for the connection's life and no answer went out early)."""
    first = asyncio.Event()

    class Watching(Health):
        async def watch(self, message: HealthCheckRequest):
            yield HealthCheckResponse(status=SERVING)
            first.set()
            await asyncio.sleep(60)

    made = []

    class Recording(CorkedServer):
        def _protocol_factory(self):
            made.append(super()._protocol_factory())
            return made[-1]

    path = str(tmp_path / "watch.sock")
    server = Recording([Watching()])
    await server.start(path=path)
    channel = Channel(path=path)
    try:
        stub = HealthStub(channel)
        assert (await stub.check(HealthCheckRequest())).status is SERVING
        watch = asyncio.create_task(anext(stub.watch(HealthCheckRequest())))
        with anyio.fail_after(10):
            await first.wait()
            await watch
        [protocol] = made
        corked = protocol.connection._transport
        assert corked.streams_open() == 0
        assert (await stub.check(HealthCheckRequest())).status is SERVING  # answered beside it
    finally:
        channel.close()
        server.close()
        await server.wait_closed()


async def test_the_answers_of_calls_that_arrive_together_leave_in_one_write(tmp_path, monkeypatch):
    """Two requests in one read: the first answer waits for the second (its request still waits),
    and the second sends both, one write; flushing every ended answer at once would make two."""
    path = str(tmp_path / "two.sock")
    server = CorkedServer([Health()])
    await server.start(path=path)
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    writes: list[int] = []
    original = asyncio.selector_events._SelectorSocketTransport.write

    def counting(transport, data):
        if transport.get_extra_info("sockname") == path:
            writes.append(len(data))
        return original(transport, data)

    try:
        await loop.sock_connect(sock, path)
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        await loop.sock_sendall(sock, client.data_to_send())  # settings exchanged first
        with anyio.fail_after(10):
            while not any(isinstance(e, h2.events.SettingsAcknowledged)
                          for e in client.receive_data(await loop.sock_recv(sock, 65536))):
                pass
        _, data = burst(2, client)
        monkeypatch.setattr(asyncio.selector_events._SelectorSocketTransport, "write", counting)
        await loop.sock_sendall(sock, data)
        ended: set[int] = set()
        with anyio.fail_after(10):
            while len(ended) < 2:
                for event in client.receive_data(await loop.sock_recv(sock, 65536)):
                    if isinstance(event, h2.events.StreamEnded):
                        ended.add(event.stream_id)
        monkeypatch.setattr(asyncio.selector_events._SelectorSocketTransport, "write", original)
    finally:
        sock.close()
        server.close()
        await server.wait_closed()
    assert ended == {1, 3}
    assert len(writes) == 1, writes


def burst(calls: int, conn: h2.connection.H2Connection | None = None) -> tuple[h2.connection.H2Connection, bytes]:
    """A client's HTTP/2 preface (unless ``conn``, a client already connected, is given) and
    ``calls`` unary Health.Check requests (HEADERS + DATA each, as grpc-go and grpcio send them),
    as one byte string."""
    if conn is None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
    message = bytes(HealthCheckRequest(service="default/" + "c" * 40 + "/" + "u" * 36))  # a claim's size
    for i in range(calls):
        stream = 2 * i + 1
        conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", "/grpc.health.v1.Health/Check"),
                                   (":authority", "localhost"), ("te", "trailers"),
                                   ("content-type", "application/grpc")])
        conn.send_data(stream, b"\0" + len(message).to_bytes(4, "big") + message, end_stream=True)
    return conn, conn.data_to_send()


async def test_a_burst_of_requests_is_read_in_steps_and_every_one_answered(tmp_path):
    """64 requests that arrive in one read were parsed, and their 64 handlers started, in one
    callback (6-12 ms of the loop). Read in steps of READ_STEP bytes, a few handlers start per turn
    of the loop, other callbacks run in between, and every request is answered."""
    started: list[int] = []
    turns: list[int] = []  # how many handlers had started at each turn of the loop

    class Counting(Health):
        async def check(self, message: HealthCheckRequest) -> HealthCheckResponse:
            started.append(1)
            return await super().check(message)

    loop = asyncio.get_running_loop()
    ticking = True

    def tick() -> None:
        turns.append(len(started))
        if ticking:
            loop.call_soon(tick)

    path = str(tmp_path / "burst.sock")
    server = CorkedServer([Counting()])
    await server.start(path=path)
    client, data = burst(64)
    assert len(data) > 4 * READ_STEP
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    ended: set[int] = set()
    try:
        await loop.sock_connect(sock, path)
        tick()
        await loop.sock_sendall(sock, data)
        with anyio.fail_after(10):
            while len(ended) < 64:
                received = await loop.sock_recv(sock, 65536)
                assert received, "the server closed the connection"
                for event in client.receive_data(received):
                    if isinstance(event, h2.events.StreamEnded):
                        ended.add(event.stream_id)
                await loop.sock_sendall(sock, client.data_to_send())
        ticking = False
    finally:
        sock.close()
        server.close()
        await server.wait_closed()
    assert len(started) == 64
    most_in_one_turn = max(b - a for a, b in itertools.pairwise(turns))
    assert most_in_one_turn <= 32, most_in_one_turn  # all 64 in one turn before
