"""The image's Python environment, built as the Dockerfile's builder stage builds it, without an
image: from the files the stage copies (and only those), a fresh venv, ``pip install -c
requirements.lock .``, ``pip check``; then both commands start from it.

No registry is reachable on the test bed, so ``podman build`` itself cannot run here (its base
image); this is what can be checked of it. Needs PyPI or pip's cache (~35 s with a warm cache).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _builder_copies() -> list[str]:
    """The sources of the builder stage's COPY lines (the part of the Dockerfile before the 2nd FROM)."""
    text = (ROOT / "Dockerfile").read_text()
    builder = text.split("\nFROM ", 2)[1]
    sources: list[str] = []
    for line in builder.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            sources += line.split()[1:-1]
    return sources


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


@pytest.mark.timeout(180)
def test_the_builder_stage_environment_installs_from_the_lock_and_runs(tmp_path):
    context = tmp_path / "context"
    context.mkdir()
    sources = _builder_copies()
    assert sources == ["pyproject.toml", "README.md", "requirements.lock", "ascend_dra"]
    for name in sources:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, context / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, context / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--quiet", "-c", "requirements.lock", "."], cwd=context, check=True,
                   timeout=150)
    check = subprocess.run([*pip, "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    frozen = subprocess.run([*pip, "freeze", "--exclude", "ascend-dra"], capture_output=True, text=True,
                            check=True).stdout
    installed = {re.sub(r"[-_.]+", "-", n).lower(): v for n, v in
                 (line.split("==") for line in frozen.splitlines() if "==" in line)}
    # The lock is complete and exact: nothing unpinned came in, no pin is stale.
    assert installed == _lock()

    exe = venv / "bin" / "ascend-dra"
    for args in (["--help"], ["run", "--help"], ["webhook", "--help"], ["profiles"]):
        proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"ascend-dra {' '.join(args)}: {proc.stdout}{proc.stderr}"
    listed = subprocess.run([str(exe), "profiles"], capture_output=True, text=True).stdout
    for profile in ("fake", "npu-310P", "npu-910", "HAMivNPUCore", "hard-vNPU"):
        assert profile in listed
