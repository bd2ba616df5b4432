"""The bed itself, before anything of ours runs on it: two real kubelet 1.37 nodes, each a host of
its own (its own network namespace and address), pods on a real network that reaches the other
node's pods, the host, and kube-apiserver through the ``kubernetes`` Service.
"""

from __future__ import annotations

import ipaddress
import os
import urllib.request
import uuid

import pytest

from tests.e2e.bed import E2E_K8S
from tests.kubelet.images import BUSYBOX_REF
from tests.kubelet.pods import create_namespace, delete_pod, ok, wait_for, wait_running

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

PORT = 18080


def web_pod(name: str, node: str, *, host_network: bool = False, script: str = "") -> dict:
    """A busybox pod on ``node`` serving its own name on :data:`PORT`, after running ``script``
    (whose output goes to the pod's log)."""
    command = (f"mkdir -p /www; echo {name} > /www/index.html; {script} echo --done--; "
               f"exec httpd -f -p {PORT} -h /www")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "hostNetwork": host_network,
                     "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": BUSYBOX_REF, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", command]}]}}


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def test_two_nodes_of_1_37_each_with_its_own_address_and_network_namespace(bed):
    cp = bed.cp
    host_netns = os.readlink("/proc/self/ns/net")
    netns = set()
    for name, node in bed.nodes.items():
        obj = ok(cp, "GET", f"/api/v1/nodes/{name}")
        assert obj["status"]["nodeInfo"]["kubeletVersion"].startswith(f"v{E2E_K8S}."), obj["status"]["nodeInfo"]
        addresses = {a["type"]: a["address"] for a in obj["status"]["addresses"]}
        assert addresses["InternalIP"] == node.node_ip
        assert ipaddress.ip_address(node.node_ip) in ipaddress.ip_network("198.18.0.0/15")
        netns.add(os.readlink(f"/proc/{node.holder.pid}/ns/net"))
    assert len(netns) == len(bed.nodes) and host_netns not in netns


def test_pods_get_the_network_of_their_node_and_reach_each_other_the_host_and_the_api_server(bed):
    """A pod on each node: pod IPs from the node's pod network; the host (where kube-apiserver runs)
    reaches both; a pod on node-a reaches the pod on node-b, and kube-apiserver's port at the
    ``kubernetes`` Service's ClusterIP (the daemon pods' TLS calls through it: test_chart.py);
    hostNetwork pods on both nodes bind the same port, as on two machines."""
    cp = bed.cp
    ns = f"bed-{uuid.uuid4().hex[:6]}"
    create_namespace(cp, ns)
    try:
        ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", web_pod("web-b", "node-b"))
        ip_b = wait_running(cp, ns, "web-b")["status"]["podIP"]
        # busybox speaks no TLS that kube-apiserver accepts (handshake failure): plain HTTP to its TLS
        # port gets Go's answer to that, which only a Go TLS server gives.
        script = (f"wget -qO- http://{ip_b}:{PORT}/; "
                  "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 10.96.0.1 443;")
        ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", web_pod("web-a", "node-a", script=script))
        ip_a = wait_running(cp, ns, "web-a")["status"]["podIP"]
        for ip, node in ((ip_a, "node-a"), (ip_b, "node-b")):
            assert ipaddress.ip_address(ip) in ipaddress.ip_network(bed.nodes[node].network.pod_cidr), (ip, node)
        assert http_get(f"http://{ip_a}:{PORT}/").strip() == "web-a"
        assert http_get(f"http://{ip_b}:{PORT}/").strip() == "web-b"

        def log() -> str | None:
            status, text = cp.api("GET", f"/api/v1/namespaces/{ns}/pods/web-a/log")
            return text if status == 200 and isinstance(text, str) and "--done--" in text else None

        text = wait_for(log, "web-a's log", within=30)
        assert "web-b" in text, text  # node-a's pod reached node-b's pod
        assert "Client sent an HTTP request to an HTTPS server" in text, text  # ... and the Service
        for node in ("node-a", "node-b"):
            ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods", web_pod(f"host-{node}", node, host_network=True))
        for node in ("node-a", "node-b"):
            wait_running(cp, ns, f"host-{node}")
            assert http_get(f"http://{bed.nodes[node].node_ip}:{PORT}/").strip() == f"host-{node}"
    finally:
        for name in ("web-a", "web-b", "host-node-a", "host-node-b"):
            if cp.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}")[0] == 200:
                delete_pod(cp, ns, name)
        cp.api("DELETE", f"/api/v1/namespaces/{ns}")
