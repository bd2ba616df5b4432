"""The daemon's one client of the kube-apiserver: plain JSON requests on kubernetes-asyncio's session.

kubernetes-asyncio supplies the configuration (kubeconfig or in-cluster, with its token refresh)
and the aiohttp session; the requests themselves are sent here. Its ``ApiClient.call_api`` walks
every body to sanitise it, encodes and decodes with the standard ``json`` module and rebuilds its
headers per call: 0.07 ms of a claim GET's 0.4 ms of client CPU, and far more for a ResourceSlice
of a thousand devices, all of it on the event loop (docs/performance.md#what-the-daemon-adds-and-how-it-is-kept-small).
kubernetes-asyncio is imported only in cluster mode (docs/architecture.md#import-cost).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import orjson

from ascend_dra.version import version

__all__ = (
    "RESOURCE_V1", "ApiError", "KubeApi", "check_cluster_access", "connect_api", "import_client_modules", "open_api",
)

#: The resource.k8s.io API group, version v1 (GA in Kubernetes 1.34): claims and slices.
RESOURCE_V1 = "/apis/resource.k8s.io/v1"

#: Sent with every request, so the API server's logs and audit name us (and our release).
USER_AGENT = f"ascend-dra/{version()}"

#: Seconds one request may take in all (connecting, sending, answering).
REQUEST_TIMEOUT_S = 30.0


class ApiError(Exception):
    """Raised by :class:`KubeApi` for a non-2xx answer; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}" if status else message)


class KubeApi:
    """Raw JSON requests to the API server with a kubernetes-asyncio ``ApiClient``'s configuration
    and session (created inside the running loop; :func:`open_api`)."""

    def __init__(self, api_client: Any) -> None:
        import aiohttp

        self.client = api_client
        self._config = api_client.configuration
        self._base = self._config.host.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)

    async def call(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
                   body: Any = None, content_type: str = "application/json") -> Any:
        """One request; returns the decoded JSON answer (None for an empty one).

        :param path: from the API root, e.g. ``/apis/resource.k8s.io/v1/resourceslices``.
        :param body: a JSON-able object, sent as ``content_type``; ``application/apply-patch+yaml``
            makes a PATCH a server-side apply (JSON is YAML).
        :raises ApiError: a non-2xx answer (its ``status`` and the Status object's ``message``), an
            answer that is not JSON, or no answer at all (status 0: refused, reset, timed out, or
            the bearer token could not be read).
        """
        data = None if body is None else orjson.dumps(body)
        async with self._open(method, path, query, content_type if body is not None else None, data,
                              self._timeout) as response:
            raw = await response.read()
            if not 200 <= response.status < 300:
                raise ApiError(response.status, _status_message(raw, response.reason))
            status = response.status
        try:
            return orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:  # not the API server (a proxy's page, say)
            raise ApiError(status, f"{method} {path}: the answer is not JSON: {raw[:200]!r}") from None

    @contextlib.asynccontextmanager
    async def stream(self, path: str, *, query: list[tuple[str, str]], limits: Any) -> AsyncIterator[Any]:
        """A GET whose answer is read as it comes (a watch): yields the aiohttp response, released at exit.

        :param limits: an ``aiohttp.ClientTimeout`` (a watch needs a read timeout, not a total one).
        :raises ApiError: a non-2xx answer, or none.
        """
        async with self._open("GET", path, query, None, None, limits) as response:
            if response.status != 200:
                raise ApiError(response.status, _status_message(await response.read(), response.reason))
            yield response

    @contextlib.asynccontextmanager
    async def _open(self, method: str, path: str, query: list[tuple[str, str]] | None, content_type: str | None,
                    data: bytes | None, limits: Any) -> AsyncIterator[Any]:
        """One request, its response yielded; no answer, while sending or while the caller reads
        (and the bearer token unreadable), is ``ApiError`` status 0."""
        import aiohttp

        try:
            request = await self._request(method, path, query, content_type)
            async with self.client.rest_client.pool_manager.request(data=data, timeout=limits, **request) as response:
                yield response
        except (OSError, TimeoutError, aiohttp.ClientError) as exc:
            # str() of a timeout is "": the message said nothing after its colon (an etcd outage)
            total = getattr(limits, "total", None)
            reason = str(exc) or (f"no answer within {total:g} s" if isinstance(exc, TimeoutError) and total
                                  else type(exc).__name__)
            raise ApiError(0, f"{method} {path}: {reason}") from None

    async def _request(self, method: str, path: str, query: list[tuple[str, str]] | None,
                       content_type: str | None) -> dict[str, Any]:
        """The keyword arguments of ``ClientSession.request`` but body and timeout: URL, headers
        (the bearer token asked for anew: ``get_api_key_with_prefix`` runs the configuration's
        refresh hook, which the in-cluster configuration installs to re-read the rotated token
        file), and the proxy and TLS server name it was configured with."""
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if content_type is not None:
            headers["Content-Type"] = content_type
        if "BearerToken" in self._config.api_key:
            token = await self._config.get_api_key_with_prefix("BearerToken")
            if token:
                headers["Authorization"] = token
        rest = self.client.rest_client
        url = self._base + path + (f"?{urlencode(query)}" if query else "")
        request: dict[str, Any] = {"method": method, "url": url, "headers": headers}
        if rest.proxy:
            request["proxy"] = rest.proxy
            if rest.proxy_headers:
                request["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            request["server_hostname"] = rest.server_hostname
        return request


def _status_message(raw: bytes, reason: str | None) -> str:
    """The ``message`` of a refusal's Status object, else the HTTP reason phrase."""
    try:
        return str(orjson.loads(raw).get("message") or reason)
    except (orjson.JSONDecodeError, AttributeError):
        return str(reason or raw[:200])


async def open_api(kubeconfig: str | None) -> Any:
    """Return a kubernetes-asyncio ``ApiClient`` for ``kubeconfig`` (a path), or the in-cluster config.

    Must be called inside the running event loop (aiohttp). The caller closes it.
    """
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    api = client.ApiClient(cfg)
    await _keep_connections(api, cfg)
    return api


async def connect_api(kubeconfig: str | None) -> KubeApi:
    """The daemon's one API client (kubeconfig read, TLS contexts made; no request is sent).

    Built once, before the kubelet sockets are bound (that work takes tens of milliseconds of the
    loop, which a GetInfo must not wait for), and shared by the claim source, the publisher and the
    claim-status writer, so a Prepare finds warm pooled connections. The caller closes ``.client``.

    :raises RuntimeError: the kubeconfig or in-cluster configuration cannot be used.
    """
    try:
        return KubeApi(await open_api(kubeconfig))
    except Exception as exc:  # an unusable kubeconfig: a configuration error, not a crash
        where = f"the kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster configuration"
        raise RuntimeError(f"cluster mode cannot use {where}: {exc}") from None


#: Seconds an idle API connection stays pooled. aiohttp's default (15 s) made a burst of Prepares
#: after a quiet spell open new TLS connections (57-75 ms each instead of 30-39 ms warm); the
#: kube-apiserver closes idle HTTP/1.1 connections after 90 s, so stay under that.
KEEPALIVE_S = 60.0


#: Connections to the API server at most (kubernetes-asyncio's default is 100). Each TLS connection
#: holds a 256 KiB read buffer (asyncio's SSL protocol): 64 Prepares in flight opened 64 of them,
#: 17 MiB of the daemon's RSS; 16 serve thousands of GETs a second (one takes ~1.4 ms), more than
#: the API server answers one node.
MAX_CONNECTIONS = 16


async def _keep_connections(api: Any, cfg: Any) -> None:
    """Give ``api`` an HTTP session whose pooled connections outlive a quiet spell.

    kubernetes-asyncio builds its aiohttp connector with the library default keep-alive; the
    session is replaced with one configured the same way (TLS from ``cfg``, same pool size and read
    buffer) but for :data:`KEEPALIVE_S`, and with ``trust_env`` off: with it on, aiohttp looks up
    ``~/.netrc`` and the proxy variables in a worker thread on every request (two thread hops, 0.65
    of the 1 ms of client CPU a claim GET cost). The proxy variables are read once here instead
    (:func:`_env_proxy`); the API server's auth is the bearer token or client certificate, never netrc.
    """
    import ssl

    import aiohttp

    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
    if not cfg.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if getattr(cfg, "disable_strict_ssl_verification", False):
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    connector = aiohttp.TCPConnector(limit=min(cfg.connection_pool_maxsize, MAX_CONNECTIONS), ssl=context,
                                     keepalive_timeout=KEEPALIVE_S)
    old = api.rest_client.pool_manager
    api.rest_client.pool_manager = aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=2**21)
    if not api.rest_client.proxy:
        api.rest_client.proxy = _env_proxy(cfg.host)
    await old.close()


def _env_proxy(url: str) -> str | None:
    """The proxy ``HTTPS_PROXY``/``HTTP_PROXY`` name for ``url`` unless ``NO_PROXY`` exempts it, or None.

    The same variables ``trust_env`` would have read per request, read once (urllib's rules).
    """
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme or "https")
    if not proxy or not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return proxy


def import_client_modules() -> None:
    """Import what cluster mode needs before the event loop starts (~0.5 s): on the loop, the
    import held it for 475 ms in one step, most of it aiohttp making its default TLS contexts
    (the system CA bundle) at import; and an import on the serving loop would hold GetInfo past the
    kubelet's 1 s deadline (docs/architecture.md#import-cost)."""
    import aiohttp  # noqa: F401
    import kubernetes_asyncio.client
    import kubernetes_asyncio.config  # noqa: F401


SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def cluster_access_problem(kubeconfig: str | None) -> str | None:
    """Why cluster mode has nothing to connect with, or None: cheap checks only (two ``stat``), made
    before the client is (:func:`connect_api` reports a kubeconfig that exists but is unusable).

    :return: no such kubeconfig file, or no in-cluster service account, as one line naming the flag.
    """
    if kubeconfig:
        if ":" in kubeconfig and not os.path.exists(kubeconfig):
            return (f"--kubeconfig {kubeconfig}: one file is read, not a list of files as kubectl's KUBECONFIG "
                    "(merge them with kubectl config view --flatten)")
        if not os.path.exists(kubeconfig):
            return f"--kubeconfig {kubeconfig} does not exist"
        if not os.path.isfile(kubeconfig):
            return f"--kubeconfig {kubeconfig} is not a file"
        if not os.access(kubeconfig, os.R_OK):
            return f"--kubeconfig {kubeconfig}: permission denied"
        return None
    if not (os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.isfile(SERVICE_ACCOUNT_TOKEN)):
        return ("cluster mode cannot use the in-cluster configuration (no KUBERNETES_SERVICE_HOST or "
                f"no {SERVICE_ACCOUNT_TOKEN}); pass --kubeconfig FILE, run inside a pod with a "
                "service account, or use --standalone DIR for a local run")
    return None


async def check_cluster_access(kubeconfig: str | None) -> None:
    """Fail before serving anything when cluster mode has nothing to connect with
    (:func:`cluster_access_problem`; the CLI's preflight says it first, as one line).

    :raises RuntimeError: no such kubeconfig file, or no in-cluster service account.
    """
    problem = cluster_access_problem(kubeconfig)
    if problem is not None:
        raise RuntimeError(problem)
