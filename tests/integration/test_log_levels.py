"""``--log-level debug`` shows our debug lines, not the protocol libraries' (grpclib, h2, hpack, asyncio);
``debug,LOGGER=debug`` brings one library's back."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.claimfiles import claim_object, write_claim
from tests.integration.daemon import DaemonProcess, Kubelet

NOISY = ("grpclib", "h2", "hpack", "asyncio", "aiohttp", "kubernetes_asyncio", "urllib3")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ll-") as root:
        yield Path(root)


def loggers_at_debug(log: str) -> set[str]:
    """Logger names of the DEBUG lines of a text-format log."""
    return {m.group(1) for m in re.finditer(r"^\S+ DEBUG\s+(\S+?):", log, re.M)}


def exercise(root: Path, level: str) -> str:
    """Start a daemon at ``level``, register and prepare a claim over gRPC, stop it; return its log."""
    daemon = DaemonProcess(root, extra_args=["--log-level", level]).start()
    try:
        claim = write_claim(daemon.root, claim_object("c1", node=daemon.node, results=[("npu", "npu-0-0")]))
        kubelet = Kubelet(daemon)
        try:
            kubelet.get_info()
            assert kubelet.prepare(claim).claims[claim["metadata"]["uid"]].error == ""
        finally:
            kubelet.close()
    finally:
        assert daemon.stop() == 0
    return daemon.log_text()


def test_debug_shows_our_lines_and_not_the_protocol_libraries(short_dir: Path) -> None:
    at_debug = loggers_at_debug(exercise(short_dir / "a", "debug"))
    assert any(name.startswith("ascend_dra.") for name in at_debug), at_debug
    assert not {name for name in at_debug if name.split(".")[0] in NOISY}, at_debug


def test_a_named_library_can_be_turned_up(short_dir: Path) -> None:
    at_debug = loggers_at_debug(exercise(short_dir / "b", "debug,hpack=debug"))
    assert any(name.startswith("hpack") for name in at_debug), at_debug
    assert not {name for name in at_debug if name.split(".")[0] in NOISY and name.split(".")[0] != "hpack"}
