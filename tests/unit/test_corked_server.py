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
from ascend_dra.kubelet.corked import READ_STEP, CorkedServer

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


def burst(calls: int) -> tuple[h2.connection.H2Connection, bytes]:
    """A client's HTTP/2 preface and ``calls`` unary Health.Check requests (HEADERS + DATA each, as
    grpc-go and grpcio send them), as one byte string."""
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
