"""Test certificates for the webhook, made with the openssl CLI (OpenSSL 3): a CA, and serving
certificates it signs for 127.0.0.1 (the API server checks the IP SAN of a ``url`` webhook)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ("encrypted_key", "issue", "make_ca")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(directory: Path, name: str = "ca") -> tuple[Path, Path]:
    """A self-signed CA; returns ``(cert, key)`` paths."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN=ascend-dra-webhook-test-{name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return cert, key


def issue(directory: Path, ca: tuple[Path, Path], name: str) -> tuple[Path, Path]:
    """A serving certificate for ``127.0.0.1`` and ``localhost`` signed by ``ca``; returns ``(cert, key)``."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl("req", "-x509", "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
             "-subj", f"/CN=ascend-dra-webhook-{name}", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
             "-addext", "basicConstraints=critical,CA:FALSE", "-addext", "extendedKeyUsage=serverAuth")
    return cert, key


def encrypted_key(key: Path, into: Path) -> Path:
    """``key`` encrypted with AES-256 and the passphrase ``secret`` (PKCS#8), written to ``into``."""
    _openssl("pkey", "-in", str(key), "-aes256", "-passout", "pass:secret", "-out", str(into))
    return into
