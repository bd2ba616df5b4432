"""Fixtures shared by the integration tests."""

from __future__ import annotations

import os

import pytest


def _mount_tmpfs(path, size="64k"):
    path.mkdir(parents=True, exist_ok=True)
    if os.system(f"mount -t tmpfs -o size={size} tmpfs {path}") != 0:
        pytest.fail("mounting a tmpfs failed; these tests need root (CI runs as root)")


@pytest.fixture
def small_cdi(short_tmp):
    root = short_tmp / "sa"
    _mount_tmpfs(root / "cdi")
    yield root
    os.system(f"umount {root / 'cdi'}")
