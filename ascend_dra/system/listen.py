"""TCP listeners for the probe and metrics ports, on IPv4, IPv6 or both.

The kubelet probes a pod at its pod IP, which is IPv6 in an IPv6 single-stack cluster, so an
IPv4-only listener (``0.0.0.0``) fails every probe there. The default address ``*`` (or ``""``)
listens on every address of both families: one IPv6 socket that also accepts IPv4 (``IPV6_V6ONLY`` off), or
an IPv4 one alone where the kernel has no IPv6 (booted with ``ipv6.disable=1``).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket

__all__ = ("ALL_ADDRESSES", "address_problem", "describe", "tcp_listener")

#: The address flags' default: every address, both families where the kernel has IPv6.
ALL_ADDRESSES = "*"

#: errno values of a kernel without IPv6 (no AF_INET6 sockets, or no address to bind "::" to).
_NO_IPV6 = {errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT}


def tcp_listener(address: str, port: int) -> socket.socket:
    """A bound, listening TCP socket (blocking mode) on ``address:port``.

    :param address: ``*`` or ``""`` every address of both families; ``::`` IPv6 and IPv4 (dual-stack);
        an IPv6 literal (brackets allowed) IPv6 only; anything else (``0.0.0.0``, an IPv4
        literal, a host name) IPv4.
    :param port: 0 picks a free one (read it from ``getsockname()``).
    :raises OSError: the address cannot be bound (in use, not local, no IPv6 for an IPv6 literal).
    """
    host = address.strip("[]")
    every = address in (ALL_ADDRESSES, "")
    if every or host == "::":
        try:
            return socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True)
        except OSError as exc:
            if not every or exc.errno not in _NO_IPV6:
                raise
        return socket.create_server(("0.0.0.0", port))
    if ":" in host:
        return socket.create_server((host, port), family=socket.AF_INET6)
    return socket.create_server((host, port))


def address_problem(flag: str, address: str) -> str | None:
    """Why ``address`` cannot be listened on, naming ``flag``, or None: ``*``, ``""``, an IP literal
    (IPv6 in brackets or not) and a host name this host resolves (``getaddrinfo``, once, at start-up)
    are accepted. Whether it is one of this host's addresses is found when it is bound."""
    host = address.strip("[]")
    if address in (ALL_ADDRESSES, ""):
        return None
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        return None
    except (OSError, UnicodeError):
        return (f"{flag} {address!r} is neither an IP address nor a name this host resolves (*: every address, "
                "IPv4 and IPv6; '::' dual-stack; '0.0.0.0' IPv4 only)")


def describe(address: str) -> str:
    """How a log line names ``address`` (the empty default reads as "every address")."""
    return "every address (IPv4 and IPv6)" if address in (ALL_ADDRESSES, "") else address


def bind_problem(flag: str, port: int, address: str, exc: OSError) -> str:
    """A failed bind as one line naming ``flag``: ``--port 8443: cannot listen on *:8443: Address
    already in use`` (``strerror`` alone: ``socket.create_server`` appends the address to it)."""
    return f"{flag} {port}: cannot listen on {address or '*'}:{port}: {os.strerror(exc.errno) if exc.errno else exc}"
