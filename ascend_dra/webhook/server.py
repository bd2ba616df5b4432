"""The webhook's HTTPS server (aiohttp) and the process around it (``ascend-dra webhook``).

Endpoints on ``--port`` (TLS, certificate reloaded on change, :mod:`.tls`):

- ``POST /validate-resource-claim-parameters``: :mod:`.validate` (ResourceClaim, ResourceClaimTemplate);
- ``POST /mutate-pods``: :mod:`.mutate` (Pod CREATE, and Volcano Job CREATE: :mod:`.volcano`);
- ``GET /healthz`` (the event loop answers) and ``GET /readyz`` (profiles loaded, certificate
  loaded, and in claim mode the owner loop has listed the pods once).

On ``--metrics-port`` (plain HTTP): ``GET /metrics`` (:mod:`.metrics`).

Every review is answered with an AdmissionReview, also when it goes wrong: a body we cannot read a
uid from gets HTTP 400 with a ``metav1.Status`` naming the problem; a readable one gets a denial
with code 400; a bug in a handler is logged once with its traceback and answered with a denial
(code 500) whose message names the exception, never with the traceback.

aiohttp, because it is already in the dependency tree (kubernetes-asyncio's transport), is
maintained by aio-libs, serves TLS through an ``ssl.SSLContext`` we own (which is what makes the
certificate reload possible), and its client does the webhook's few API calls too.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import attrs
from aiohttp import web
from anyio.abc import TaskStatus

from ascend_dra.hami.chips import chip_names
from ascend_dra.hami.convert import Mode
from ascend_dra.profiles.base import Profile
from ascend_dra.system.listen import bind_problem, tcp_listener
from ascend_dra.system.signals import run_until_signal
from ascend_dra.webhook import review
from ascend_dra.webhook.metrics import WebhookMetrics
from ascend_dra.webhook.mutate import PodMutator
from ascend_dra.webhook.settings import WebhookSettings
from ascend_dra.webhook.tls import ServingCertificate
from ascend_dra.webhook.validate import VERSIONS, claim_problems, denial_message

__all__ = ("Webhook", "build_app", "main", "serve")

logger = logging.getLogger(__name__)

JSON = "application/json"
Handler = Callable[[review.ReviewRequest], Awaitable[tuple[bytes, str]]]


class Webhook:
    """The request handlers.

    :param profiles: loaded profiles by name (their config kinds are validated).
    :param mutator: the pod converter, None to answer ``/mutate-pods`` with "allowed" (tests, bench).
    """

    def __init__(self, driver_name: str, profiles: Mapping[str, Profile], mutator: PodMutator | None,
                 metrics: WebhookMetrics) -> None:
        self.driver_name = driver_name
        self.profiles = profiles
        self.mutator = mutator
        self.metrics = metrics
        self.ready = False

    async def validate(self, request: review.ReviewRequest) -> tuple[bytes, str]:
        """Answer a ResourceClaim / ResourceClaimTemplate review."""
        if request.group != "resource.k8s.io" or request.kind not in ("ResourceClaim", "ResourceClaimTemplate"):
            return review.allowed(request.uid), "allowed"
        if request.version not in VERSIONS:
            return review.denied(request.uid, f"resource.k8s.io/{request.version} is not one of {', '.join(VERSIONS)}; "
                                 "list only those in the webhook's rules", code=400, reason="BadRequest"), "denied"
        if request.operation not in ("CREATE", "UPDATE") or request.object is None:
            return review.allowed(request.uid), "allowed"
        if request.operation == "UPDATE" and request.old_object is not None and \
                request.old_object.get("spec") == request.object.get("spec"):
            # The spec is immutable; an UPDATE changes metadata (a finalizer, a label). Refusing it for a
            # config stored while the webhook was away would leave the claim undeletable.
            return review.allowed(request.uid), "allowed"
        problems = claim_problems(request.object, request.kind, request.version, self.driver_name, self.profiles)
        if not problems:
            return review.allowed(request.uid), "allowed"
        name = request.name or str((request.object.get("metadata") or {}).get("name", ""))
        return review.denied(request.uid, denial_message(request.kind, request.namespace, name, problems)), "denied"

    async def mutate(self, request: review.ReviewRequest) -> tuple[bytes, str]:
        if self.mutator is None:
            return review.allowed(request.uid), "allowed"
        return await self.mutator.review(request)

    async def answer(self, http: web.Request, endpoint: str, handler: Handler) -> web.Response:
        """Read, dispatch and answer one review, recording its outcome and latency."""
        start = time.perf_counter()
        outcome = "error"
        try:
            try:
                body = await http.read()
            except web.HTTPRequestEntityTooLarge:
                outcome = "malformed"
                return web.Response(status=413, content_type=JSON, body=review.bad_request_status(
                    f"body larger than {review.MAX_BODY_BYTES} bytes"))
            try:
                request = review.parse_review(body)
            except review.ReviewError as exc:
                outcome = "malformed"
                if exc.uid is None:
                    return web.Response(status=400, content_type=JSON, body=review.bad_request_status(exc.message))
                return web.Response(content_type=JSON, body=review.denied(
                    exc.uid, f"malformed AdmissionReview: {exc.message}", code=400, reason="BadRequest"))
            try:
                payload, outcome = await handler(request)
            except Exception as exc:
                logger.exception("review failed", extra={"endpoint": endpoint, "review_uid": request.uid})
                outcome = "error"
                payload = review.denied(request.uid, f"the ascend-dra webhook failed: {type(exc).__name__}: {exc}",
                                        code=500, reason="InternalError")
            return web.Response(content_type=JSON, body=payload)
        finally:
            self.metrics.observe(endpoint, outcome, time.perf_counter() - start)


def build_app(webhook: Webhook) -> web.Application:
    """The aiohttp application with the review, health and readiness routes."""
    app = web.Application(client_max_size=review.MAX_BODY_BYTES)

    async def validate(http: web.Request) -> web.Response:
        return await webhook.answer(http, "validate-resource-claim-parameters", webhook.validate)

    async def mutate(http: web.Request) -> web.Response:
        return await webhook.answer(http, "mutate-pods", webhook.mutate)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        return web.Response(text="ok") if webhook.ready else web.Response(status=503, text="not ready")

    app.router.add_post("/validate-resource-claim-parameters", validate)
    app.router.add_post("/mutate-pods", mutate)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


def _metrics_app(metrics: WebhookMetrics) -> web.Application:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    async def serve_metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", serve_metrics)
    return app


def load_profiles(names: tuple[str, ...]) -> dict[str, Profile]:
    """Import only the named profiles. :raises SystemExit: naming each broken one."""
    from ascend_dra.profiles.registry import load_profiles as load

    loaded = load(names)
    broken = [entry for entry in loaded if entry.profile is None]
    if broken:
        raise SystemExit("ascend-dra webhook: " + "; ".join(str(entry.error) for entry in broken))
    return {entry.name: entry.profile for entry in loaded if entry.profile is not None}


def _port(site: web.BaseSite) -> int:
    server: Any = site._server  # aiohttp keeps the asyncio server private; its socket holds the bound port
    return int(server.sockets[0].getsockname()[1])


@attrs.frozen
class Prepared:
    """What :func:`prepare` made: the metrics, the certificate, the profiles and the bound listeners
    (``metrics_listener`` None without ``--metrics-port``)."""

    metrics: WebhookMetrics
    certificate: ServingCertificate
    profiles: dict[str, Profile]
    listener: socket.socket
    metrics_listener: socket.socket | None


def _listen(flag: str, address: str, port: int) -> socket.socket:
    """:raises ValueError: one line naming ``flag`` (in use, not an address of this host, no permission)."""
    try:
        return tcp_listener(address, port)
    except OSError as exc:
        raise ValueError(bind_problem(flag, port, address, exc)) from None


def listeners(settings: WebhookSettings) -> tuple[socket.socket, socket.socket | None]:
    """The bound webhook and metrics sockets (the second None without ``--metrics-port``): bound
    before anything else starts, so that a port in use is one line, not an error inside the
    server's task group after the start-up log.

    :raises ValueError: a port cannot be bound (the message names its flag).
    """
    listener = _listen("--port", settings.address, settings.port)
    try:
        return listener, (None if settings.metrics_port is None else
                          _listen("--metrics-port", settings.metrics_address, settings.metrics_port))
    except BaseException:
        listener.close()
        raise


def prepare(settings: WebhookSettings, bound: tuple[socket.socket, socket.socket | None] | None = None) -> Prepared:
    """What must work before serving: the certificate pair, the profiles and the listening sockets.

    :param bound: from :func:`listeners`; bound here when None.
    :raises TlsError: the certificate or key cannot be used.
    :raises ValueError: a port cannot be bound (the message names its flag).
    :raises SystemExit: a named profile is missing or broken (the message names it).
    """
    metrics = WebhookMetrics()
    certificate = ServingCertificate(settings.tls_cert_file, settings.tls_private_key_file, metrics)
    profiles = load_profiles(settings.profiles)
    listener, metrics_listener = bound or listeners(settings)
    return Prepared(metrics, certificate, profiles, listener, metrics_listener)


async def serve(settings: WebhookSettings, *, task_status: TaskStatus[dict[str, int]] = anyio.TASK_STATUS_IGNORED,
                prepared: Prepared | None = None) -> None:
    """Run the webhook until cancelled; reports ``{"port": ..., "metrics_port": ...}`` once serving.

    :param prepared: the result of :func:`prepare`, made here when None.
    :raises ValueError: no kubeconfig and not in a pod (from :meth:`KubeApi.open`).
    """
    from ascend_dra.webhook.kubeapi import KubeApi
    from ascend_dra.webhook.owners import OwnerLoop

    prepared = prepared or prepare(settings)
    metrics, certificate, profiles = prepared.metrics, prepared.certificate, prepared.profiles
    api = KubeApi.open(settings.kubeconfig)
    api.on_request = metrics.api_request
    mutator = PodMutator(api, settings.conversion_mode, settings.driver_name, settings.hami_chips, metrics)
    webhook = Webhook(settings.driver_name, profiles, mutator, metrics)
    runners = []
    try:
        runner = web.AppRunner(build_app(webhook), access_log=None, handle_signals=False, shutdown_timeout=5)
        await runner.setup()
        runners.append(runner)
        site = web.SockSite(runner, prepared.listener, ssl_context=certificate.server_context, backlog=512)
        await site.start()
        ports = {"port": _port(site)}
        if prepared.metrics_listener is not None:
            metrics_runner = web.AppRunner(_metrics_app(metrics), access_log=None, handle_signals=False)
            await metrics_runner.setup()
            runners.append(metrics_runner)
            metrics_site = web.SockSite(metrics_runner, prepared.metrics_listener)
            await metrics_site.start()
            ports["metrics_port"] = _port(metrics_site)
        async with anyio.create_task_group() as tg:
            await tg.start(certificate.watch)
            await tg.start(mutator.templates.run)  # listed before the first review (or its list failed)
            owners = OwnerLoop(api, metrics, grace_s=settings.orphan_grace_s, chips=settings.hami_chips)
            if settings.conversion_mode is Mode.CLAIM:
                await tg.start(owners.run)  # ready once it has listed the pods: it owns what we create
            else:
                tg.start_soon(owners.run)  # adopts HAMi-DRA's claims, cleans up an earlier claim mode's
            webhook.ready = True
            logger.info("webhook serving", extra={**ports, "profiles": ",".join(profiles),
                                                  "conversion_mode": settings.conversion_mode.value,
                                                  "hami_chips": chip_names(settings.hami_chips),
                                                  "sha256": certificate.fingerprint})
            task_status.started(ports)
            await anyio.sleep_forever()
    finally:
        webhook.ready = False
        with anyio.CancelScope(shield=True):
            for runner in reversed(runners):
                await runner.cleanup()
            await api.close()


async def _main(settings: WebhookSettings, bound: tuple[socket.socket, socket.socket | None]) -> None:
    from ascend_dra.webhook.kubeapi import KubeApi

    prepared = prepare(settings, bound)  # start-up errors reach the caller as they are, not in an exception group
    await KubeApi.open(settings.kubeconfig).close()  # an unusable kubeconfig is said now, not at the first review
    await run_until_signal(lambda: serve(settings, prepared=prepared), logger)


def main(settings: WebhookSettings) -> int:
    """Run ``ascend-dra webhook`` until SIGTERM/SIGINT; returns the exit code."""
    from ascend_dra.observe.logs import setup_logging

    bound = listeners(settings)  # before the first log line: a port in use is the only line
    setup_logging(settings.log_level, settings.log_format)
    for line in settings.warnings:
        logger.warning(line)
    anyio.run(_main, settings, bound)
    return 0
