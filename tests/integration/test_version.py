"""``ascend-dra --version``: one line with the installed version and the Python running it."""

from __future__ import annotations

import platform
from importlib import metadata

from tests.integration.test_cli import cli


def test_version_prints_the_installed_version_and_python_and_exits_0():
    result = cli("--version", env={"PATH": "/usr/bin:/bin"})
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (f"ascend-dra {metadata.version('ascend-dra')} "
                             f"({platform.python_implementation()} {platform.python_version()})\n")
