"""The daemon's own requests to the API server (apiclient.py ``KubeApi``), in-process against the real
API server: answers and refusals, a bearer token refreshed by kubernetes-asyncio's hook (how an
in-cluster token is rotated), our User-Agent, and no detour through ``ApiClient.call_api``."""

from __future__ import annotations

import uuid

import anyio
import anyio.lowlevel
import pytest

from ascend_dra.cluster import apiclient
from tests.claimfiles import claim_object, create_in_api
from tests.cluster.test_slice_watch import close_api

pytestmark = [pytest.mark.cluster, pytest.mark.anyio]

RES = "/apis/resource.k8s.io/v1"


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_answers_refusals_and_unreachable_servers(cp, monkeypatch):
    from kubernetes_asyncio.client import ApiClient

    claim = create_in_api(cp, claim_object(f"api-{uuid.uuid4().hex[:8]}", node=cp.node_name,  # no such device:
                                           results=[("npu", "npu-apiclient-0")]))  # it takes none from a test
    path = f"{RES}/namespaces/{claim['metadata']['namespace']}/resourceclaims/{claim['metadata']['name']}"
    api = await apiclient.connect_api(str(cp.kubeconfig))
    detours: list[str] = []
    monkeypatch.setattr(ApiClient, "call_api", lambda self, *a, **k: detours.append(a[0]))
    try:
        got = await api.call("GET", path)
        assert got["metadata"]["uid"] == claim["metadata"]["uid"]
        with pytest.raises(apiclient.ApiError) as missing:
            await api.call("GET", path + "-gone")
        assert missing.value.status == 404
        assert "not found" in str(missing.value)  # the Status object's message, not just the reason
        with pytest.raises(apiclient.ApiError) as invalid:  # a body is sent, and its refusal explained
            await api.call("PATCH", path + "/status", query=[("fieldManager", "t")],
                           content_type="application/merge-patch+json",
                           body={"status": {"devices": [{"driver": "x"}]}})
        assert invalid.value.status == 422 and "pool" in str(invalid.value)
    finally:
        await close_api(api)
        cp.api("DELETE", path)
    assert detours == []


async def test_a_server_that_does_not_answer_is_status_0():
    from kubernetes_asyncio import client

    api = apiclient.KubeApi(client.ApiClient(client.Configuration(host="http://127.0.0.1:1")))  # refused
    try:
        with pytest.raises(apiclient.ApiError) as refused:
            await api.call("GET", f"{RES}/resourceslices")
    finally:
        await api.client.close()
    assert refused.value.status == 0 and str(refused.value).startswith(f"GET {RES}/resourceslices: ")


async def test_a_server_that_accepts_and_never_answers_is_said_to_time_out(monkeypatch):
    """With etcd down the GET took the whole timeout and the message ended in an empty cause
    ("...resourceclaims/x: "): str() of a TimeoutError is "" (an audit of API faults)."""
    import socket

    from kubernetes_asyncio import client

    monkeypatch.setattr(apiclient, "REQUEST_TIMEOUT_S", 0.5)
    silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody answers
    api = apiclient.KubeApi(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{silent.getsockname()[1]}")))
    try:
        with pytest.raises(apiclient.ApiError) as timed_out:
            await api.call("GET", f"{RES}/resourceslices")
    finally:
        await api.client.close()
        silent.close()
    assert str(timed_out.value) == f"GET {RES}/resourceslices: no answer within 0.5 s"


async def test_the_bearer_token_is_asked_for_on_every_request_so_a_rotated_one_is_used(cp):
    api = await apiclient.connect_api(str(cp.kubeconfig))
    cfg = api.client.configuration
    real = cfg.api_key["BearerToken"]
    try:
        cfg.api_key["BearerToken"] = "expired-token"
        with pytest.raises(apiclient.ApiError) as refused:
            await api.call("GET", f"{RES}/resourceslices")
        assert refused.value.status in (401, 403)  # refused, or served as system:anonymous
        refreshed: list[int] = []

        def refresh(config) -> None:  # kubernetes-asyncio's hook, as load_incluster_config installs one
            refreshed.append(1)
            config.api_key["BearerToken"] = real

        cfg.refresh_api_key_hook = refresh
        assert "items" in await api.call("GET", f"{RES}/resourceslices")
        assert refreshed
    finally:
        await close_api(api)


async def test_requests_carry_our_user_agent():
    """A local HTTP server stands in for the API server: it records what a request carries."""
    from aiohttp import web
    from kubernetes_asyncio import client

    seen: list[dict] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append({"ua": request.headers.get("User-Agent"), "auth": request.headers.get("Authorization"),
                     "type": request.headers.get("Content-Type"), "body": await request.read()})
        return web.json_response({"kind": "Status", "code": 200})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    cfg = client.Configuration(host=f"http://127.0.0.1:{port}")
    cfg.api_key = {"BearerToken": "t0k"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    api = apiclient.KubeApi(client.ApiClient(cfg))
    try:
        await api.call("PATCH", "/x", body={"a": 1}, content_type="application/apply-patch+yaml")
        await api.call("GET", "/y", query=[("fieldSelector", "a=b,c=d")])
    finally:
        await api.client.close()
        await runner.cleanup()
        await anyio.lowlevel.checkpoint()
    assert seen[0] == {"ua": apiclient.USER_AGENT, "auth": "Bearer t0k", "type": "application/apply-patch+yaml",
                       "body": b'{"a":1}'}
    assert seen[1]["ua"].startswith("ascend-dra/") and seen[1]["body"] == b""


async def test_a_claim_replaced_by_one_not_yet_allocated_is_said_to_be_replaced(cp):
    """The kubelet asks for the old uid; the claim of that name is a new one the scheduler has not
    allocated yet. It was refused as "not allocated", hiding that it is another claim (an audit)."""
    from ascend_dra.cluster.apiserver import ApiClaimSource
    from ascend_dra.state.claims import ClaimError

    name = f"replaced-{uuid.uuid4().hex[:6]}"
    status, new = cp.api("POST", f"{RES}/namespaces/default/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "npu", "exactly": {"deviceClassName": "fake"}}]}}})
    assert status == 201, new
    source = ApiClaimSource(str(cp.kubeconfig), "ascend.project-hami.io")
    old = str(uuid.uuid4())
    try:
        with pytest.raises(ClaimError) as refused:
            await source.get("default", name, old)
    finally:
        await source.aclose()
        cp.api("DELETE", f"{RES}/namespaces/default/resourceclaims/{name}")
    assert str(refused.value) == (f"ResourceClaim default/{name}: uid {old} was requested but the claim has uid "
                                  f"{new['metadata']['uid']} (it got replaced)")


async def test_gone_tells_a_deleted_replaced_or_deallocated_claim_from_one_in_use(cp):
    """ApiClaimSource.gone, which a guard refusal asks about its holders: a holder deleted without
    its Unprepare is named as gone, so that the operator knows to release it."""
    from ascend_dra.cluster.apiserver import ApiClaimSource

    name = f"holder-{uuid.uuid4().hex[:6]}"
    base = f"{RES}/namespaces/default/resourceclaims"
    stored = create_in_api(cp, claim_object(name, node=cp.node_name))
    uid = stored["metadata"]["uid"]
    source = ApiClaimSource(str(cp.kubeconfig), "ascend.project-hami.io")
    try:
        here = cp.node_name
        assert await source.gone("default", name, uid, here) is None  # allocated here and reserved: in use
        assert await source.gone("default", name, uid, "node-9") == f"is allocated on another node now (pool {here})"
        assert await source.gone("default", name, str(uuid.uuid4()), here) == (
            f"was deleted (the name now belongs to a claim with uid {uid})")
        stored["status"] = {}
        assert cp.api("PUT", f"{base}/{name}/status", stored)[0] == 200
        assert await source.gone("default", name, uid, here) == (
            "is not allocated any more (status.allocation is empty)")
        assert cp.api("DELETE", f"{base}/{name}")[0] == 200
        assert await source.gone("default", name, uid, here) == "no longer exists in the API server"
    finally:
        await source.aclose()
        cp.api("DELETE", f"{base}/{name}")
    unreachable = ApiClaimSource(str(cp.kubeconfig), "ascend.project-hami.io")
    try:
        api = await unreachable._get_api()
        api._base = "https://127.0.0.1:1"  # nothing listens: cannot tell, so None
        assert await unreachable.gone("default", name, uid, cp.node_name) is None
    finally:
        await unreachable.aclose()
