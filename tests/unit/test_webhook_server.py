"""The webhook's HTTPS server over real TLS on loopback (ascend_dra/webhook/server.py, tls.py, review.py)."""

from __future__ import annotations

import base64
import io
import ssl
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import orjson
import pytest
from aiohttp import ClientSession, TCPConnector, web

from ascend_dra.profiles import fake, gpu
from ascend_dra.webhook.metrics import WebhookMetrics
from ascend_dra.webhook.server import Webhook, build_app
from ascend_dra.webhook.tls import ServingCertificate, _fingerprint
from tests.webhook_certs import issue, make_ca

pytestmark = pytest.mark.anyio
DRIVER = "ascend.project-hami.io"


def review_body(obj, kind="ResourceClaim", version="v1", uid="u-1") -> bytes:
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "resource.k8s.io", "version": version, "kind": kind},
        "operation": "CREATE", "namespace": "ns", "name": "c", "object": obj}})


BAD = {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
    "deviceClassName": "gpu.example.com"}}], "config": [{"opaque": {"driver": DRIVER, "parameters": {
        "apiVersion": f"{DRIVER}/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "Bogus"}}}}]}}}


@pytest.fixture
async def server(tmp_path):
    ca = make_ca(tmp_path)
    cert, key = issue(tmp_path, ca, "serving")
    metrics = WebhookMetrics()
    certificate = ServingCertificate(cert, key, metrics)
    webhook = Webhook(DRIVER, {"gpu": gpu.factory(), "fake": fake.factory()}, None, metrics)
    webhook.ready = True
    runner = web.AppRunner(build_app(webhook), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=certificate.server_context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    client_ctx = ssl.create_default_context(cafile=str(ca[0]))
    async with anyio.create_task_group() as tg:
        await tg.start(certificate.watch)
        yield {"url": f"https://127.0.0.1:{port}", "ssl": client_ctx, "certificate": certificate, "ca": ca,
               "dir": tmp_path, "metrics": metrics, "port": port}
        tg.cancel_scope.cancel()
    await runner.cleanup()


async def post(server, path: str, body: bytes | io.BytesIO) -> tuple[int, dict]:
    async with ClientSession(connector=TCPConnector(ssl=server["ssl"])) as session:
        async with session.post(server["url"] + path, data=body, headers={"Content-Type": "application/json"}) as r:
            return r.status, orjson.loads(await r.read())


async def test_bad_config_is_denied_with_the_field_and_allowed_values(server):
    status, doc = await post(server, "/validate-resource-claim-parameters", review_body(BAD))
    assert status == 200
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
    assert doc["response"] == {"uid": "u-1", "allowed": False, "status": {
        "status": "Failure", "reason": "Invalid", "code": 422, "message":
        "ResourceClaim ns/c: 1 problem in opaque configs for our driver: spec.devices.config[0].opaque.parameters."
        "sharing.strategy: 'Bogus' is not one of TimeSlicing, SpacePartitioning (for all requests)"}}


async def test_good_config_and_other_kinds_are_allowed(server):
    good = orjson.loads(orjson.dumps(BAD))
    good["spec"]["devices"]["config"][0]["opaque"]["parameters"]["sharing"] = {"strategy": "SpacePartitioning"}
    assert (await post(server, "/validate-resource-claim-parameters", review_body(good)))[1]["response"] == {
        "uid": "u-1", "allowed": True}
    assert (await post(server, "/validate-resource-claim-parameters", review_body(BAD, kind="DeviceClass")))[1][
        "response"]["allowed"] is True


async def test_update_that_keeps_the_spec_is_allowed_so_finalizers_can_go(server):
    doc = orjson.loads(review_body(BAD))
    doc["request"]["operation"] = "UPDATE"
    doc["request"]["oldObject"] = {**BAD, "metadata": {"name": "c", "finalizers": ["x"]}}
    assert (await post(server, "/validate-resource-claim-parameters", orjson.dumps(doc)))[1]["response"] == {
        "uid": "u-1", "allowed": True}
    doc["request"]["oldObject"] = {"metadata": {"name": "c"}, "spec": {}}
    assert (await post(server, "/validate-resource-claim-parameters", orjson.dumps(doc)))[1]["response"][
        "allowed"] is False


@pytest.mark.parametrize(("body", "status", "message"), [
    (b"{not json", 400, "malformed AdmissionReview: body is not JSON (invalid at character 1)"),
    (b"[]", 400, "malformed AdmissionReview: body must be a JSON object (an AdmissionReview), got list"),
    (b'{"request": {}}', 400, "malformed AdmissionReview: request.uid is missing or not a string"),
], ids=["not JSON", "not an object", "no uid"])
async def test_unreadable_review_gets_a_400_status_not_a_traceback(server, body, status, message):
    got_status, doc = await post(server, "/validate-resource-claim-parameters", body)
    assert (got_status, doc) == (status, {"apiVersion": "v1", "kind": "Status", "status": "Failure",
                                          "reason": "BadRequest", "code": 400, "message": message})


async def test_review_with_a_uid_but_wrong_envelope_gets_a_denial(server):
    body = orjson.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
                         "request": {"uid": "u-2", "kind": {}}})
    status, doc = await post(server, "/mutate-pods", body)
    assert status == 200
    assert doc["response"]["uid"] == "u-2" and doc["response"]["allowed"] is False
    assert doc["response"]["status"]["code"] == 400
    assert "is not admission.k8s.io/v1/AdmissionReview" in doc["response"]["status"]["message"]


async def test_oversized_body_is_refused_with_413(server):
    status, doc = await post(server, "/validate-resource-claim-parameters", io.BytesIO(b" " * (9 * 1024 * 1024)))
    assert status == 413 and doc["message"] == "malformed AdmissionReview: body larger than 8388608 bytes"


async def test_health_and_readiness(server):
    async with ClientSession(connector=TCPConnector(ssl=server["ssl"])) as session:
        for path in ("/healthz", "/readyz"):
            async with session.get(server["url"] + path) as reply:
                assert (reply.status, await reply.text()) == (200, "ok")


def _served_fingerprint(port: int, ca: Path) -> str:
    pem = ssl.get_server_certificate(("127.0.0.1", port), ca_certs=str(ca))
    return _fingerprint(pem.encode())


async def test_certificate_rotation_while_reviews_flow_loses_none(server):
    """New handshakes get the new certificate; every review on fresh and kept-alive connections succeeds,
    also while the key and certificate are written one after the other."""
    old = server["certificate"].fingerprint
    new_cert, new_key = issue(server["dir"] / "next", server["ca"], "serving")
    answered, failures = 0, []
    done = anyio.Event()

    async def reviews(fresh: bool) -> None:
        nonlocal answered
        session = ClientSession(connector=TCPConnector(ssl=server["ssl"], force_close=fresh))
        async with session:
            while not done.is_set():
                try:
                    async with session.post(server["url"] + "/validate-resource-claim-parameters",
                                            data=review_body(BAD)) as reply:
                        doc = orjson.loads(await reply.read())
                        assert doc["response"]["allowed"] is False
                        answered += 1
                except Exception as exc:
                    failures.append(repr(exc))

    async with anyio.create_task_group() as tg:
        tg.start_soon(reviews, True)
        tg.start_soon(reviews, False)
        await anyio.sleep(0.3)
        # Written the way a careless tool would: key first (now mismatching), then the certificate.
        (server["dir"] / "serving.key").write_bytes(new_key.read_bytes())
        await anyio.sleep(0.3)
        (server["dir"] / "serving.crt").write_bytes(new_cert.read_bytes())
        for _ in range(200):  # the reload follows the file event within ~0.1 s; 10 s at most
            if server["certificate"].fingerprint != old:
                break
            await anyio.sleep(0.05)
        await anyio.sleep(0.3)
        done.set()
    assert failures == []
    assert answered > 10
    served = await anyio.to_thread.run_sync(_served_fingerprint, server["port"], server["ca"][0])
    assert served == server["certificate"].fingerprint != old
    assert server["metrics"].tls_reloads.labels("ok")._value.get() == 1


def test_webhook_process_imports_no_kubelet_grpc_nor_unneeded_profiles():
    code = ("import sys; from ascend_dra.webhook import server, owners, mutate, kubeapi; "
            "server.load_profiles(('fake',)); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpclib', 'betterproto2', "
            "'kubernetes_asyncio', 'grpc') or m.startswith(('ascend_dra.kubelet', 'ascend_dra.state', "
            "'ascend_dra.profiles.gpu', 'ascend_dra.profiles.ascend', 'ascend_dra.node', 'ascend_dra.cdi.store'))))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_patch_is_base64_json_patch():
    from ascend_dra.webhook.review import patched

    doc = orjson.loads(patched("u", [{"op": "add", "path": "/a", "value": 1}]))
    assert doc["response"]["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(doc["response"]["patch"])) == [{"op": "add", "path": "/a", "value": 1}]
