"""The serving certificate, reloaded from its files without a restart and without dropping a request.

The server listens with one :class:`ssl.SSLContext` whose ``sni_callback`` hands every new TLS
handshake the context of the newest good certificate (Python's ``ssl`` docs: the callback may set
``SSLObject.context``; it runs for every ClientHello, with ``server_name`` None when the client sent
no SNI, as the API server does for an IP address). A reload builds a fresh context from one read of
both files, so a certificate and key written at different moments never meet: if they do not match
yet (a ``cert-manager`` or ``kubectl`` update writes them one after the other), the old context stays
and the next change is tried. Connections already open keep the certificate they started with.

Changes are seen through watchfiles on the files' directories (a Secret volume swaps a ``..data``
symlink, which is a directory event), with a re-check every ``recheck_s`` seconds in case an event
is missed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import tempfile
import time
from pathlib import Path

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus

from ascend_dra.webhook.metrics import WebhookMetrics

__all__ = ("ServingCertificate", "TlsError")

logger = logging.getLogger(__name__)


class TlsError(ValueError):
    """Raised by :class:`ServingCertificate` when the certificate or key cannot be used (at start-up)."""


def _fingerprint(pem: bytes) -> str:
    """SHA-256 of the first certificate's DER, as ``openssl x509 -fingerprint -sha256`` prints it (no colons)."""
    text = pem.decode(errors="replace")
    start = text.find("-----BEGIN CERTIFICATE-----")
    end = text.find("-----END CERTIFICATE-----", start)
    if start < 0 or end < 0:
        return "?"
    der = ssl.PEM_cert_to_DER_cert(text[start:end + len("-----END CERTIFICATE-----")])
    return hashlib.sha256(der).hexdigest().upper()


def _no_passphrase() -> bytes:
    # Given as load_cert_chain's password callback: without one, OpenSSL prompts on the terminal
    # for an encrypted key, and a webhook started from a shell would hang there.
    raise TlsError("encrypted key")


def _problem(cert_file: Path, key_file: Path, cert_pem: bytes, key_pem: bytes, exc: Exception) -> str:
    """What is wrong with a certificate and key pair that :func:`_context` refused, naming the flag.

    OpenSSL says only ``[SSL] PEM lib`` for a file that holds no PEM block of the kind it wants, so
    the blocks are looked for here (PEM markers, RFC 7468 section 2).
    """
    if b"-----BEGIN CERTIFICATE-----" not in cert_pem:
        return f"--tls-cert-file {cert_file} holds no PEM certificate (a '-----BEGIN CERTIFICATE-----' block)"
    if b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in key_pem or b"Proc-Type: 4,ENCRYPTED" in key_pem:
        return (f"--tls-private-key-file {key_file} is encrypted; the webhook needs the key unencrypted (it has no "
                "passphrase)")
    if not any(f"-----BEGIN {kind}PRIVATE KEY-----".encode() in key_pem for kind in ("", "RSA ", "EC ")):
        return (f"--tls-private-key-file {key_file} holds no PEM private key (a '-----BEGIN PRIVATE KEY-----' "
                "block, or its RSA or EC form)")
    if "KEY_VALUES_MISMATCH" in str(exc):
        return (f"--tls-private-key-file {key_file} is not the key of the certificate in --tls-cert-file {cert_file} "
                f"({exc})")
    return f"--tls-cert-file {cert_file} / --tls-private-key-file {key_file}: {exc}"


def _context(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="ascend-dra-tls-") as tmp:
        cert, key = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        for path, data in ((cert, cert_pem), (key, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        context.load_cert_chain(cert, key, password=_no_passphrase)
    return context


def _read(path: Path, flag: str) -> bytes:
    """A certificate or key file's bytes (at start-up); :raises TlsError: naming ``flag``."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise TlsError(f"{flag} {path} does not exist") from None
    except OSError as exc:
        raise TlsError(f"{flag} {path} cannot be read: {exc.strerror or exc}") from None


class ServingCertificate:
    """The certificate the webhook serves.

    :param cert_file: PEM certificate chain (``--tls-cert-file``).
    :param key_file: PEM private key (``--tls-private-key-file``).
    :raises TlsError: when the files cannot be read or do not form a certificate with its key.
    """

    def __init__(self, cert_file: Path, key_file: Path, metrics: WebhookMetrics) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.metrics = metrics
        self._files = (_read(self.cert_file, "--tls-cert-file"), _read(self.key_file, "--tls-private-key-file"))
        try:
            self._current = _context(*self._files)
        except (ssl.SSLError, TlsError) as exc:
            raise TlsError(_problem(self.cert_file, self.key_file, *self._files, exc)) from exc
        self.fingerprint = _fingerprint(self._files[0])
        #: The context the server listens with; it only dispatches to the newest good one.
        self.server_context = _context(*self._files)
        self.server_context.sni_callback = self._pick

    def _pick(self, ssl_object: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        ssl_object.context = self._current

    def reload(self) -> bool:
        """Read both files; switch to them if they changed and form a usable pair.

        :returns: True when new handshakes now get the new certificate. Blocking (file reads):
            called in a worker thread by :meth:`watch`.
        """
        try:
            files = (self.cert_file.read_bytes(), self.key_file.read_bytes())
        except OSError as exc:
            logger.warning("serving certificate not readable, keeping the old one", extra={"error": str(exc)})
            self.metrics.tls_reloads.labels("error").inc()
            return False
        if files == self._files:
            return False
        try:
            context = _context(*files)
        except (ssl.SSLError, TlsError) as exc:
            # Often the cert is written and the key not yet: the next change event completes the pair.
            logger.warning("serving certificate not usable yet, keeping the old one", extra={"error": str(exc)})
            self.metrics.tls_reloads.labels("error").inc()
            return False
        self._current, self._files = context, files
        self.fingerprint = _fingerprint(files[0])
        self.metrics.tls_reloads.labels("ok").inc()
        logger.info("serving certificate reloaded", extra={"sha256": self.fingerprint})
        return True

    async def watch(self, *, recheck_s: float = 30.0,
                    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Reload on every change of the files (or their directories) until cancelled."""
        import watchfiles

        directories = sorted({str(self.cert_file.parent.resolve()), str(self.key_file.parent.resolve())})
        task_status.started()
        last = time.monotonic()
        # A short rust_timeout: cancelling awatch waits for its worker thread, which returns at the timeout.
        async for changes in watchfiles.awatch(*directories, yield_on_timeout=True, rust_timeout=1000,
                                               debounce=50, step=20):
            if changes or time.monotonic() - last >= recheck_s:
                last = time.monotonic()
                await anyio.to_thread.run_sync(self.reload)
