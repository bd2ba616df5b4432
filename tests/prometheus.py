"""A real Prometheus (Debian's package, hack/install-observe-deps.sh) scraping one target, for tests.

:class:`Prometheus` writes a config that scrapes ``target`` every second with ``honor_labels``
(our series carry ``namespace`` and ``pod`` labels of their own, docs/monitoring.md), starts the
server on a free port under a temporary directory, and answers instant queries through the HTTP API
(``/api/v1/query``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.controlplane import free_port

INSTALL = "hack/install-observe-deps.sh"


def prometheus_binary() -> str:
    """The ``prometheus`` on ``$PATH``; fail (with what to run) when it is missing."""
    path = shutil.which("prometheus")
    if path is None:
        pytest.fail(f"prometheus is not installed: run {INSTALL} (Debian's package; `make test` runs it)",
                    pytrace=False)
    return path


class Prometheus:
    """One Prometheus server scraping ``target`` (``host:port``) every second."""

    def __init__(self, root: Path, target: str) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "prometheus.log"
        root.mkdir(parents=True, exist_ok=True)
        (root / "prometheus.yml").write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "ascend-dra", "honor_labels": True,
                                "static_configs": [{"targets": [target]}]}],
        }))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, within: float = 60.0) -> Prometheus:
        """Start the server and wait until it says it is ready."""
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [prometheus_binary(), f"--config.file={self.root / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.root / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--log.level=warn"], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + within
        while True:
            assert self.proc.poll() is None, f"prometheus exited:\n{self.log_path.read_text()}"
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                pass
            assert time.monotonic() < deadline, f"prometheus not ready after {within} s:\n{self.log_path.read_text()}"
            time.sleep(0.2)

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The result vector of the instant query ``expr``: ``[{"metric": {labels}, "value": [t, v]}]``."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            body = json.load(reply)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def wait_query(self, expr: str, what: str, within: float = 30.0) -> list[dict[str, Any]]:
        """:meth:`query` until it returns series (scrapes take a second or two to land)."""
        deadline = time.monotonic() + within
        while not (result := self.query(expr)):
            assert time.monotonic() < deadline, f"{what}: no series for {expr}"
            time.sleep(0.5)
        return result

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.log.close()
