"""CorkedServer (kubelet/corked.py) over a real unix socket: one write per unary answer, same answers."""

from __future__ import annotations

import asyncio.selector_events

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
from ascend_dra.kubelet.corked import CorkedServer

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
