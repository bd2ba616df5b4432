"""The installed ascend-dra version (``ascend-dra --version``, ``ascend_dra_build_info``)."""

from __future__ import annotations

import platform
from importlib import metadata

__all__ = ("describe", "version")


def version() -> str:
    """The version of the installed ``ascend-dra`` distribution; ``0+unknown`` when the package
    runs from a tree that was never installed."""
    try:
        return metadata.version("ascend-dra")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def describe() -> str:
    """``ascend-dra <version> (<implementation> <python version>)``, one line."""
    return f"ascend-dra {version()} ({platform.python_implementation()} {platform.python_version()})"
