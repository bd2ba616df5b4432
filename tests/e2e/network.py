"""The test bed's network: a bridge on the host and, per node, a network namespace wired to it.

Addresses come from 198.18.0.0/15, the benchmarking range (RFC 2544), which no real network uses.
One bed takes a *slot* S (1..63, the first free one, picked under a lock so that two beds on one
machine never share one):

* the bridge ``adra-e2e<S>`` holds ``198.18.S.1/24``: the host's address on the bed, where
  kube-apiserver listens (the nodes reach nothing else of the host);
* node ``i`` (0..3) gets ``198.18.S.(i+2)/24`` on its ``eth0`` (a veth whose peer ``adra<S>n<i>`` is a
  port of the bridge), and the pod network ``198.19.(4S+i).0/24``: the CNI ``bridge`` plugin makes
  ``cni0`` there (gateway ``.1``) and ``host-local`` hands out the rest;
* routes: the host reaches each node's pods through that node's address (kube-apiserver calls the
  webhook pod and the kubelet), each node reaches the other nodes' pods the same way, and the
  Service range through the host; no node has a default route, so nothing leaves the bed;
* in each node's namespace, two iptables DNAT rules stand in for kube-proxy for the one Service pods
  call, ``kubernetes`` (``10.96.0.1:443`` → kube-apiserver at ``198.18.S.1``): our daemon and
  webhook use the in-cluster configuration. No other ClusterIP is served (kube-apiserver reaches the
  webhook pod by its endpoint, ``--enable-aggregator-routing``, see tests/e2e/README.md).

Everything the host keeps is the bridge (its routes go with it): :meth:`Bridge.delete` removes it;
the namespaces, veths, ``cni0`` and the iptables rules vanish with the nodes' processes.
The CNI plugins are Debian's ``containernetworking-plugins`` (``/usr/lib/cni``, a dependency of
podman, which ``make container-deps`` installs).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

#: The Service range of the test control plane (tests/cluster/controlplane.py) and its ``kubernetes`` IP.
SERVICE_RANGE = "10.96.0.0/24"
KUBERNETES_SERVICE_IP = "10.96.0.1"
MAX_NODES = 4
SLOTS = range(1, 64)
BRIDGE_PREFIX = "adra-e2e"


class NetworkError(RuntimeError):
    """An ``ip``/``iptables``/``sysctl`` call failed; the message holds the command and its stderr."""


def run(*argv: str, netns_pid: int | None = None) -> str:
    """Run ``argv`` (in the network namespace of ``netns_pid``); return stdout.

    :raises NetworkError: non-zero exit.
    """
    cmd = [*(["nsenter", f"--net=/proc/{netns_pid}/ns/net", "--"] if netns_pid else []), *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NetworkError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


@contextlib.contextmanager
def _slot_lock() -> Iterator[None]:
    lock = Path(os.environ.get("ASCEND_DRA_CACHE", Path.home() / ".cache" / "ascend-dra")) / ".e2e-net.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _taken() -> tuple[set[str], list[ipaddress.IPv4Network]]:
    """Link names and the IPv4 networks of every address and route the host has."""
    links = {link["ifname"] for link in json.loads(run("ip", "-j", "link", "show"))}
    nets = [ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network
            for link in json.loads(run("ip", "-j", "-4", "addr", "show")) for a in link.get("addr_info", [])]
    for route in json.loads(run("ip", "-j", "-4", "route", "show", "table", "all")):
        with contextlib.suppress(ValueError):
            if route["dst"] != "default":
                nets.append(ipaddress.ip_network(route["dst"] if "/" in route["dst"] else f"{route['dst']}/32",
                                                 strict=False))
    return links, nets


class Bridge:
    """The bed's bridge in slot ``slot`` (see the module docstring); :meth:`create` makes one."""

    def __init__(self, slot: int) -> None:
        if slot not in SLOTS:
            raise ValueError(f"slot {slot}: must be in 1..63")
        self.slot = slot
        self.name = f"{BRIDGE_PREFIX}{slot}"
        self.host_ip = f"198.18.{slot}.1"
        self.subnet = ipaddress.ip_network(f"198.18.{slot}.0/24")

    def networks(self) -> list[ipaddress.IPv4Network]:
        """Every network this slot uses: the bridge's subnet and the pod networks of its nodes."""
        return [self.subnet, *(ipaddress.ip_network(self.pod_cidr(i)) for i in range(MAX_NODES))]

    def node_ip(self, index: int) -> str:
        return f"198.18.{self.slot}.{index + 2}"

    def pod_cidr(self, index: int) -> str:
        if not 0 <= index < MAX_NODES:
            raise ValueError(f"node index {index}: a bed has at most {MAX_NODES} nodes")
        return f"198.19.{4 * self.slot + index}.0/24"

    @classmethod
    def create(cls) -> Bridge:
        """Make the bridge of the first slot whose networks and name the host does not use.

        :raises NetworkError: no free slot, or ``ip`` failed.
        """
        with _slot_lock():
            links, nets = _taken()
            for slot in SLOTS:
                bridge = cls(slot)
                if bridge.name in links or any(n.overlaps(m) for n in bridge.networks() for m in nets):
                    continue
                bridge._make()
                return bridge
        raise NetworkError("no free slot for a test bed: 198.18.0.0/15 is taken (ip -4 addr; ip -4 route)")

    def _make(self) -> None:
        run("ip", "link", "add", self.name, "type", "bridge")
        try:
            # No IPv6 on the bed (no link-local chatter, no router solicitations).
            Path(f"/proc/sys/net/ipv6/conf/{self.name}/disable_ipv6").write_text("1\n")
            run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.name)
            run("ip", "link", "set", self.name, "up")
        except BaseException:
            self.delete()
            raise

    def veth(self, index: int) -> str:
        """The host end of node ``index``'s veth (its other end is the node's eth0)."""
        return f"adra{self.slot}n{index}"

    def delete(self) -> None:
        """Remove the nodes' veths and the bridge (and the routes through it). Idempotent.

        A veth goes with its namespace too, but the kernel cleans a namespace up a moment after its
        last process: deleted here, nothing is left when this returns.
        """
        for link in [*(self.veth(i) for i in range(MAX_NODES)), self.name]:
            proc = subprocess.run(["ip", "link", "del", link], capture_output=True, text=True)
            if proc.returncode != 0 and "Cannot find device" not in proc.stderr:
                raise NetworkError(f"ip link del {link}: {proc.stderr.strip()}")

    def node(self, index: int, apiserver_port: int, nodes: int) -> NodeNet:
        """The network of node ``index`` of ``nodes``, its Service DNAT aimed at ``apiserver_port``."""
        return NodeNet(self, index, apiserver_port, nodes)


class NodeNet:
    """One node's network namespace on ``bridge`` (implements tests.kubelet.hostns.NodeNetwork)."""

    def __init__(self, bridge: Bridge, index: int, apiserver_port: int, nodes: int) -> None:
        self.bridge = bridge
        self.index = index
        self.node_ip = bridge.node_ip(index)
        self.pod_cidr = bridge.pod_cidr(index)
        self.apiserver_port = apiserver_port
        self.nodes = nodes
        self.host_veth = bridge.veth(index)

    def attach(self, pid: int) -> None:
        """Wire the namespace of ``pid`` up: eth0, routes, forwarding, the Service DNAT, and the
        host's route to this node's pods."""
        b = self.bridge
        run("ip", "link", "add", self.host_veth, "type", "veth", "peer", "name", "eth0", "netns", str(pid))
        Path(f"/proc/sys/net/ipv6/conf/{self.host_veth}/disable_ipv6").write_text("1\n")
        run("ip", "link", "set", self.host_veth, "master", b.name, "up")
        inside = [
            ("ip", "link", "set", "lo", "up"),
            ("ip", "addr", "add", f"{self.node_ip}/24", "dev", "eth0"),
            ("ip", "link", "set", "eth0", "up"),
            ("ip", "route", "add", SERVICE_RANGE, "via", b.host_ip),
            *(("ip", "route", "add", b.pod_cidr(j), "via", b.node_ip(j)) for j in range(self.nodes) if j != self.index),
            ("sysctl", "-qw", "net.ipv4.ip_forward=1"),
        ]
        target = f"{b.host_ip}:{self.apiserver_port}"
        for chain in ("PREROUTING", "OUTPUT"):  # from pods, and from the node itself
            inside.append(("iptables", "-t", "nat", "-A", chain, "-d", f"{KUBERNETES_SERVICE_IP}/32", "-p", "tcp",
                           "--dport", "443", "-j", "DNAT", "--to-destination", target))
        for argv in inside:
            run(*argv, netns_pid=pid)
        run("ip", "route", "replace", self.pod_cidr, "via", self.node_ip, "dev", b.name)

    def cni_config(self) -> str:
        """bridge + host-local on this node's pod network; no masquerading (the host sees pod IPs)."""
        return json.dumps({
            "cniVersion": "1.0.0", "name": "ascend-dra-bed",
            "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                         "ipam": {"type": "host-local", "ranges": [[{"subnet": self.pod_cidr}]],
                                  "routes": [{"dst": "0.0.0.0/0"}]}}],
        }, indent=1) + "\n"
