"""tests.cluster.controlplane.free_port: ports for test servers, never from the ephemeral range."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.cluster import controlplane
from tests.cluster.controlplane import free_port


def test_ports_come_from_below_the_ephemeral_range_and_are_free():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(50):
        port = free_port()
        assert 20000 <= port < low  # an outgoing connection is never given such a port
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_skipped(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        spare = free_port()
        picks = iter([busy, spare])
        monkeypatch.setattr(controlplane, "_ephemeral_low", lambda: 65000)
        monkeypatch.setattr(controlplane.random, "randint", lambda a, b: next(picks))
        assert free_port() == spare
