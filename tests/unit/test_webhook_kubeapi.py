"""The webhook's API client against a real HTTPS server (ascend_dra/webhook/kubeapi.py)."""

from __future__ import annotations

import ssl

import pytest
import yaml
from aiohttp import web

from ascend_dra.webhook import kubeapi
from ascend_dra.webhook.kubeapi import ApiError, KubeApi
from tests.webhook_certs import issue, make_ca

pytestmark = pytest.mark.anyio


@pytest.fixture
async def apiserver(tmp_path):
    """An HTTPS server that answers like the API server: the bearer token seen, or a Status on errors."""
    ca = make_ca(tmp_path / "pki")
    cert, key = issue(tmp_path / "pki", ca, "api")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def echo(request: web.Request) -> web.Response:
        if request.path.endswith("/missing"):
            return web.json_response({"kind": "Status", "reason": "NotFound", "message": "x not found", "code": 404},
                                     status=404)
        return web.json_response({"authorization": request.headers.get("Authorization"),
                                  "query": dict(request.query), "body": await request.text()})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    yield {"port": site._server.sockets[0].getsockname()[1], "ca": ca[0], "dir": tmp_path}
    await runner.cleanup()


async def test_kubeconfig_with_token_and_ca_file(apiserver):
    kubeconfig = apiserver["dir"] / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{apiserver['port']}",
                                               "certificate-authority": str(apiserver["ca"])}}],
        "users": [{"name": "u", "user": {"token": "t0k"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "current-context": "x"}))
    api = KubeApi.open(str(kubeconfig))
    try:
        reply = await api.request("POST", "/apis/x", body={"a": 1}, query={"dryRun": "All"})
        assert reply == {"authorization": "Bearer t0k", "query": {"dryRun": "All"}, "body": '{"a":1}'}
        with pytest.raises(ApiError) as caught:
            await api.request("GET", "/apis/missing")
        assert (caught.value.status, caught.value.reason, caught.value.message) == (404, "NotFound", "x not found")
    finally:
        await api.close()


async def test_service_account_token_is_read_again_when_it_rotates(apiserver, tmp_path, monkeypatch):
    account = tmp_path / "sa"
    account.mkdir()
    (account / "ca.crt").write_bytes(apiserver["ca"].read_bytes())
    (account / "token").write_text("first\n")
    monkeypatch.setattr(kubeapi, "SERVICE_ACCOUNT", account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(apiserver["port"]))
    api = KubeApi.open(None)
    try:
        assert (await api.request("GET", "/api"))["authorization"] == "Bearer first"
        (account / "token").write_text("second\n")
        assert (await api.request("GET", "/api"))["authorization"] == "Bearer first"  # within the minute
        monkeypatch.setattr(kubeapi, "_TOKEN_TTL_S", 0.0)
        assert (await api.request("GET", "/api"))["authorization"] == "Bearer second"
    finally:
        await api.close()


async def test_no_answer_is_an_api_error_with_status_zero(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "x", "context": {"cluster": "c"}}], "current-context": "x"}))
    api = KubeApi.open(str(kubeconfig))
    try:
        with pytest.raises(ApiError) as caught:
            await api.request("GET", "/api")
        assert caught.value.status == 0 and caught.value.message.startswith("GET /api: ClientConnectorError")
    finally:
        await api.close()
