"""The daemon's API connections stay warm: the pool a burst of Prepares opened is still open after a
quiet spell (aiohttp's default 15 s keep-alive closed it: 13 new TLS connections for the next burst).

Connections are counted from the kernel's view: the daemon's socket inodes (``/proc/<pid>/fd``)
that ``/proc/net/tcp`` shows connected to the API server's port.
"""

from __future__ import annotations

import os
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.cluster.test_publish import RES, ok, our_slices, wait_until
from tests.integration.daemon import Kubelet

pytestmark = pytest.mark.cluster


def api_connections(pid: int, port: int) -> set[int]:
    """Socket inodes of ``pid`` connected to 127.0.0.1:``port``."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    connected = set()
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            remote_port = int(fields[2].split(":")[1], 16)
            if remote_port == port and fields[3] == "01" and int(fields[9]) in inodes:  # 01: ESTABLISHED
                connected.add(int(fields[9]))
    return connected


def test_a_burst_after_a_quiet_spell_reuses_the_pooled_connections(cp, start_daemon):
    d = start_daemon()
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    port = urllib.parse.urlsplit(cp.server).port
    claims = []
    for _ in range(16):  # not allocated: each Prepare still GETs its claim, then fails that claim
        name = f"warm-{uuid.uuid4().hex[:8]}"
        claims.append(ok(cp, "POST", f"{RES}/namespaces/default/resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "npu", "exactly": {
                "deviceClassName": "fake.ascend.project-hami.io"}}]}}}))
    k = Kubelet(d)
    try:
        def burst() -> None:
            with ThreadPoolExecutor(16) as pool:
                replies = list(pool.map(lambda c: k.prepare(c).claims[c["metadata"]["uid"]].error, claims))
            assert all(e.endswith("is not allocated (status.allocation is empty)") for e in replies), replies

        burst()
        warm = api_connections(d.proc.pid, port)
        assert len(warm) > 1  # the burst opened a pool (the publisher's watch holds one more)
        time.sleep(20)  # longer than aiohttp's default keep-alive (15 s), shorter than ours
        still = api_connections(d.proc.pid, port)
        closed = warm - still
        assert closed == set(), f"{len(closed)} of {len(warm)} pooled API connections closed after 20 s idle"
        burst()  # served from the pool (how many a burst needs varies with timing; none had to be re-opened)
    finally:
        k.close()
        for c in claims:
            cp.api("DELETE", f"{RES}/namespaces/default/resourceclaims/{c['metadata']['name']}")


@pytest.mark.anyio
async def test_an_api_request_runs_on_the_loop_without_worker_threads(cp, monkeypatch):
    """Each request used to hop to a worker thread twice (aiohttp ``trust_env``: ``~/.netrc`` and the
    proxy variables looked up per request), 0.65 ms of CPU of a 1 ms claim GET."""
    import asyncio

    from ascend_dra.cluster.apiclient import KubeApi, open_api

    api = KubeApi(await open_api(str(cp.kubeconfig)))
    loop = asyncio.get_running_loop()
    hops = []
    real = loop.run_in_executor
    monkeypatch.setattr(loop, "run_in_executor", lambda *a: hops.append(a) or real(*a))
    try:
        for _ in range(10):
            assert (await api.call("GET", "/api/v1/namespaces/default"))["metadata"]["name"] == "default"
    finally:
        await api.client.close()
    assert hops == []


def test_the_proxy_variables_are_read_once_with_no_proxy_honoured(monkeypatch):
    from ascend_dra.cluster.apiclient import _env_proxy

    for name in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert _env_proxy("https://10.0.0.1:6443") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert _env_proxy("https://10.0.0.1:6443") == "http://proxy.example:3128"
    monkeypatch.setenv("NO_PROXY", "10.0.0.1,.svc")
    assert _env_proxy("https://10.0.0.1:6443") is None
    assert _env_proxy("https://kubernetes.default.svc:443") is None
    assert _env_proxy("https://api.example:6443") == "http://proxy.example:3128"


def test_64_prepares_in_flight_open_at_most_the_pool_limit(cp, start_daemon):
    """Each TLS connection holds a 256 KiB read buffer: a pool as wide as the burst (kubernetes-asyncio's
    default allows 100) grew the daemon by 17 MiB at 64 in flight."""
    from ascend_dra.cluster.apiclient import MAX_CONNECTIONS

    d = start_daemon()
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    port = urllib.parse.urlsplit(cp.server).port
    claims = [{"metadata": {"namespace": "default", "name": f"absent-{i}", "uid": str(uuid.uuid4())}}
              for i in range(64)]  # absent: each Prepare GETs its claim (404) and fails that claim alone
    k = Kubelet(d)
    try:
        most = 0
        with ThreadPoolExecutor(64) as pool:
            futures = [pool.submit(lambda c=c: k.prepare(c).claims[c["metadata"]["uid"]].error) for c in claims * 3]
            while not all(f.done() for f in futures):
                most = max(most, len(api_connections(d.proc.pid, port)))
                time.sleep(0.005)
        assert all("does not exist" in f.result() for f in futures)
        assert 1 < most <= MAX_CONNECTIONS + 1  # the publisher's watch holds one more
    finally:
        k.close()
