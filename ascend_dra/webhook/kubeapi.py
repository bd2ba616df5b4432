"""A small JSON client of the Kubernetes API server on aiohttp (the webhook's own server stack).

The webhook makes a handful of calls (create, get, patch, delete, list, watch) on plain JSON
objects; kubernetes-asyncio would cost ~60 MB and ~0.4 s of imports for them (docs/architecture.md#import-cost),
so this module speaks HTTP itself. Credentials come from a kubeconfig (``server``,
``certificate-authority[-data]``, ``insecure-skip-tls-verify``, ``token``/``tokenFile``,
``client-certificate[-data]``/``client-key[-data]``) or, without one, from the pod's service
account (``KUBERNETES_SERVICE_HOST``/``_PORT``, ``/var/run/secrets/kubernetes.io/serviceaccount``);
the token file is read again every minute, since bound tokens rotate.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import yaml

__all__ = ("ApiError", "KubeApi")

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_TOKEN_TTL_S = 60.0
#: The verbs of ``ascend_dra_webhook_api_requests_total`` by HTTP method (a GET of a collection is ``list``).
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def verb_and_resource(method: str, path: str) -> tuple[str, str]:
    """The Kubernetes verb and resource plural of a call, as the API server's audit log names them:
    ``("list", "pods")`` for ``GET /api/v1/pods``, ``("get", "resourceclaimtemplates")`` for
    ``GET /apis/resource.k8s.io/v1/namespaces/ns/resourceclaimtemplates/t``."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]  # after /api/v1 or /apis/<group>/<version>
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] if rest else ""
    if method == "GET":
        return ("get" if len(rest) > 1 else "list"), resource
    return _VERBS.get(method, method.lower()), resource


class ApiError(Exception):
    """Raised by :class:`KubeApi` for an answer outside 2xx, or no answer (``status`` 0).

    :ivar status: the HTTP status; :ivar reason: the ``metav1.Status`` reason (``AlreadyExists``,
        ``NotFound``, ``Conflict``, ...); :ivar message: the server's message.
    """

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"HTTP {status} {reason}: {message}" if status else message)


def _data_file(data: str, directory: str, name: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(base64.b64decode(data))
    return path


def _named(doc: dict, section: str, inner: str, kubeconfig: str) -> dict[str, dict]:
    """A kubeconfig's ``contexts``/``clusters``/``users`` as name -> its ``context``/``cluster``/``user``.

    :raises ValueError: an entry without a name or without its mapping, naming it (``contexts[0]``).
    """
    found: dict[str, dict] = {}
    entries = doc.get(section) or []
    for index, entry in enumerate(entries if isinstance(entries, list) else [entries]):
        body = entry.get(inner) if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or "name" not in entry or not isinstance(body, dict | None):
            raise ValueError(f"kubeconfig {kubeconfig}: {section}[{index}] must be a mapping with name and {inner}")
        found[str(entry["name"])] = body or {}
    return found


class KubeApi:
    """JSON calls to one API server. Open with :meth:`open` inside the event loop; :meth:`close` ends it."""

    def __init__(self, server: str, ssl_context: ssl.SSLContext, token: str | None = None,
                 token_file: Path | None = None) -> None:
        #: Called with ``(verb, resource, HTTP status or 0)`` after every call and every watch opened
        #: (:meth:`WebhookMetrics.api_request <ascend_dra.webhook.metrics.WebhookMetrics.api_request>`).
        self.on_request: Callable[[str, str, int], None] | None = None
        self.server = server.rstrip("/")
        self._ssl = ssl_context
        self._token = token
        self._token_file = token_file
        self._token_read = 0.0
        # A watch event is one line; a pod can exceed aiohttp's default 64 KiB line buffer.
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_context, limit=32),
                                              read_bufsize=4 * 1024 * 1024)

    @classmethod
    def open(cls, kubeconfig: str | None) -> KubeApi:
        """A client from ``kubeconfig`` (a path), or from the service account when it is None.

        :raises ValueError: when the kubeconfig is not one or lacks a server.
        :raises OSError: when it, or a file it names, cannot be read.
        """
        if not kubeconfig:
            host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise ValueError("no --kubeconfig and not in a pod (KUBERNETES_SERVICE_HOST is unset)")
            ctx = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
            host = f"[{host}]" if ":" in host else host
            return cls(f"https://{host}:{port}", ctx, token_file=SERVICE_ACCOUNT / "token")
        try:
            doc = yaml.safe_load(Path(kubeconfig).read_text())
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ValueError(f"kubeconfig {kubeconfig} is not YAML: {' '.join(str(exc).split())}") from None
        if not isinstance(doc, dict):
            raise ValueError(f"kubeconfig {kubeconfig} is not a kubeconfig (a YAML mapping)")
        base = Path(kubeconfig).parent
        contexts = _named(doc, "contexts", "context", kubeconfig)
        context = contexts.get(doc.get("current-context")) or next(iter(contexts.values()), {})
        cluster = _named(doc, "clusters", "cluster", kubeconfig).get(context.get("cluster"), {})
        user = _named(doc, "users", "user", kubeconfig).get(context.get("user"), {})
        if not cluster.get("server"):
            raise ValueError(f"kubeconfig {kubeconfig}: the current context has no cluster server")
        ctx = ssl.create_default_context()
        if cluster.get("insecure-skip-tls-verify"):
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            ctx.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif cluster.get("certificate-authority"):
            ctx.load_verify_locations(cafile=str(base / cluster["certificate-authority"]))
        if user.get("client-certificate") or user.get("client-certificate-data"):
            with tempfile.TemporaryDirectory() as tmp:
                cert = (_data_file(user["client-certificate-data"], tmp, "c") if user.get("client-certificate-data")
                        else str(base / user["client-certificate"]))
                key = (_data_file(user["client-key-data"], tmp, "k") if user.get("client-key-data")
                       else str(base / user["client-key"]))
                ctx.load_cert_chain(cert, key)
        token_file = base / user["tokenFile"] if user.get("tokenFile") else None
        return cls(cluster["server"], ctx, token=user.get("token"), token_file=token_file)

    async def _authorization(self) -> dict[str, str]:
        if self._token_file is not None and time.monotonic() - self._token_read > _TOKEN_TTL_S:
            self._token = (await anyio.Path(self._token_file).read_text()).strip()
            self._token_read = time.monotonic()
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    async def request(self, method: str, path: str, *, body: Any = None, query: Mapping[str, str] | None = None,
                      content_type: str = "application/json", timeout_s: float = 10.0) -> Any:
        """One call; returns the decoded JSON answer.

        :param path: e.g. ``/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims``.
        :param content_type: ``application/merge-patch+json`` for a merge patch.
        :raises ApiError: for a non-2xx answer (with the server's reason and message) or no answer.
        """
        headers = {"Accept": "application/json", **await self._authorization()}
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = content_type
        try:
            async with self._session.request(method, self.server + path, data=data, params=query, headers=headers,
                                             timeout=aiohttp.ClientTimeout(total=timeout_s)) as reply:
                raw = await reply.read()
                status = reply.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._count(method, path, 0)
            raise ApiError(0, "", f"{method} {path}: {type(exc).__name__}: {exc}") from None
        self._count(method, path, status)
        doc = orjson.loads(raw) if raw else None
        if not 200 <= status < 300:
            reason = doc.get("reason", "") if isinstance(doc, dict) else ""
            message = doc.get("message", "") if isinstance(doc, dict) else raw.decode(errors="replace")[:500]
            raise ApiError(status, reason, message)
        return doc

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch (``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}``).

        Ends when the server closes the stream (after its timeout); the caller lists and watches again.

        :raises ApiError: when the watch cannot be opened.
        """
        params = {**query, "watch": "1", "allowWatchBookmarks": "true"}
        headers = {"Accept": "application/json", **await self._authorization()}
        try:
            async with self._session.get(self.server + path, params=params, headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=None, sock_read=330)) as reply:
                self._count("WATCH", path, reply.status)
                if reply.status != 200:
                    raise ApiError(reply.status, "", (await reply.read()).decode(errors="replace")[:500])
                async for line in reply.content:
                    if line.strip():
                        yield orjson.loads(line)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ApiError(0, "", f"watch {path}: {type(exc).__name__}: {exc}") from None

    def _count(self, method: str, path: str, status: int) -> None:
        if self.on_request is not None:
            verb, resource = ("watch", verb_and_resource("GET", path)[1]) if method == "WATCH" \
                else verb_and_resource(method, path)
            self.on_request(verb, resource, status)

    async def close(self) -> None:
        await self._session.close()
