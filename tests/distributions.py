"""Throw-away Python distributions for tests: a dist-info with entry points plus module files.

Put the directory on a daemon's ``PYTHONPATH`` and ``importlib.metadata`` finds the profiles like
any installed wheel's.
"""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path


def write_distribution(root: Path, dist_name: str, profiles: dict[str, str]) -> None:
    """A distribution ``dist_name`` 1.0 in ``root`` registering ``profiles`` (entry-point name -> module source)."""
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for ep_name, source in profiles.items():
        module = f"vendor_{uuid.uuid4().hex[:10]}"
        (root / f"{module}.py").write_text(textwrap.dedent(source))
        lines.append(f"{ep_name} = {module}:factory")
    info = root / f"{dist_name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ascend_dra.profiles]\n" + "\n".join(lines) + "\n")
