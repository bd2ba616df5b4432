"""listen.py: the probe and metrics listeners reach IPv4 and IPv6 clients by default (an IPv6
single-stack cluster probes the pod's IPv6 address; ``0.0.0.0`` answered IPv4 only)."""

from __future__ import annotations

import errno
import socket

import pytest

from ascend_dra.system import listen


def _reaches(family: socket.AddressFamily, host: str, port: int) -> bool:
    with socket.socket(family, socket.SOCK_STREAM) as client:
        client.settimeout(2)
        try:
            client.connect((host, port))
        except OSError:
            return False
        return True


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _has_ipv6_loopback(), reason="this kernel has no IPv6 loopback")


@needs_ipv6
@pytest.mark.parametrize("address", ["*", "", "::", "[::]"])
def test_every_address_reaches_ipv4_and_ipv6_clients(address):
    with listen.tcp_listener(address, 0) as server:
        port = server.getsockname()[1]
        assert _reaches(socket.AF_INET, "127.0.0.1", port)
        assert _reaches(socket.AF_INET6, "::1", port)


@needs_ipv6
def test_one_family_only_when_asked():
    with listen.tcp_listener("0.0.0.0", 0) as v4:
        port = v4.getsockname()[1]
        assert _reaches(socket.AF_INET, "127.0.0.1", port) and not _reaches(socket.AF_INET6, "::1", port)
    with listen.tcp_listener("[::1]", 0) as v6:
        port = v6.getsockname()[1]
        assert _reaches(socket.AF_INET6, "::1", port) and not _reaches(socket.AF_INET, "127.0.0.1", port)


def test_a_kernel_without_ipv6_gets_ipv4_for_the_default_and_an_error_for_an_ipv6_address(monkeypatch):
    real = socket.create_server

    def no_ipv6(address, *, family=socket.AF_INET, **kwargs):
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(address, family=family, **kwargs)

    monkeypatch.setattr(socket, "create_server", no_ipv6)
    with listen.tcp_listener("*", 0) as server:
        assert server.family == socket.AF_INET
        assert _reaches(socket.AF_INET, "127.0.0.1", server.getsockname()[1])
    with pytest.raises(OSError) as refused:
        listen.tcp_listener("::", 0)
    assert refused.value.errno == errno.EAFNOSUPPORT


def test_a_port_in_use_is_an_error_not_a_fallback():
    with listen.tcp_listener("*", 0) as first:
        with pytest.raises(OSError) as busy:
            listen.tcp_listener("*", first.getsockname()[1])
    assert busy.value.errno == errno.EADDRINUSE
