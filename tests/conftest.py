"""Shared test settings: async tests run on anyio's asyncio backend (grpclib and aiohttp need asyncio)."""

import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def short_tmp():
    """A fresh directory with a short path: unix socket paths must stay under 108 bytes, which
    pytest's ``tmp_path`` (``/tmp/pytest-of-root/pytest-N/<test name>/``) can exceed."""
    path = Path(tempfile.mkdtemp(prefix="adra-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
