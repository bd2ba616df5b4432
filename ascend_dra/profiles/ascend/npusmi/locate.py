"""Finding the npu-smi executable: ``--npu-smi`` as given, else ``$PATH``, else the driver's install locations.

The driver package installs npu-smi at ``/usr/local/bin/npu-smi``, ``/usr/local/sbin/npu-smi`` or
``/usr/local/Ascend/driver/tools/npu-smi`` (docs/ascend-hardware.md#npu-smi "Binary locations" and
docs/ascend-hardware.md#driver-paths).
These are often not on the ``PATH`` of a DaemonSet's container or of a systemd unit, and a node
whose npu-smi is not found falls back to the devfs tier and loses uuid, memory and AI cores. So
when ``--npu-smi`` is the default bare name and ``$PATH`` lacks it, those locations are searched
too, under ``host_root`` (``/`` on a node; a tree in tests). A path (anything with a ``/``) or
another bare name is used as the operator gave it: an explicit choice is never second-guessed.
All look-ups here are blocking file-system calls; run :func:`locate_npu_smi` in a worker thread.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import attrs

__all__ = ("DEFAULT_NPU_SMI", "STANDARD_LOCATIONS", "LocatedNpuSmi", "locate_npu_smi")

#: The default of ``--npu-smi`` (``ProfileContext.npu_smi``): a bare name, looked up.
DEFAULT_NPU_SMI = "npu-smi"
#: Where the driver package puts npu-smi, in the order docs/ascend-hardware.md#npu-smi lists them (host paths).
STANDARD_LOCATIONS = (
    "/usr/local/bin/npu-smi",
    "/usr/local/sbin/npu-smi",
    "/usr/local/Ascend/driver/tools/npu-smi",
)

#: How the executable was found (``LocatedNpuSmi.how``).
AS_GIVEN = "as given"
ON_PATH = "on PATH"
STANDARD = "standard location"
NOT_FOUND = "not found"


@attrs.frozen
class LocatedNpuSmi:
    """The outcome of :func:`locate_npu_smi`.

    :ivar executable: what to run: the found path, or ``requested`` unchanged when nothing was
        found (running it then fails with :class:`.errors.NpuSmiNotFound`).
    :ivar requested: ``--npu-smi`` as given.
    :ivar how: ``as given`` (a path, or a bare name other than the default), ``on PATH``,
        ``standard location`` or ``not found``.
    :ivar searched: the places looked at, in order (``$PATH`` first, then the standard
        locations as paths under ``host_root``); empty when ``requested`` was used as given.
    """

    executable: str
    requested: str
    how: str
    searched: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        """False when the default name was searched for and not found anywhere."""
        return self.how != NOT_FOUND

    def describe(self) -> str:
        """One line for logs and ``ascend-dra discover``: which binary, and how it was chosen."""
        if self.how == NOT_FOUND:
            return f"{self.requested} not found (searched $PATH, {', '.join(self.searched[1:])})"
        if self.how == STANDARD:
            return f"{self.executable} (not on $PATH; found in the driver's install location)"
        return f"{self.executable} ({self.how})"


def locate_npu_smi(requested: str, *, host_root: Path = Path("/"), search_path: str | None = None) -> LocatedNpuSmi:
    """Return the npu-smi executable to run (see the module docstring). Blocking.

    :param requested: ``--npu-smi`` (``ProfileContext.npu_smi``).
    :param host_root: where the host's ``/`` is seen; the standard locations are read under it.
    :param search_path: the ``$PATH`` to search, ``os.pathsep``-separated; None = the process's own.
    """
    if "/" in requested or requested != DEFAULT_NPU_SMI:
        return LocatedNpuSmi(executable=requested, requested=requested, how=AS_GIVEN)
    path = os.environ.get("PATH", os.defpath) if search_path is None else search_path
    found = shutil.which(requested, path=path)
    candidates = tuple(str(host_root / location.lstrip("/")) for location in STANDARD_LOCATIONS)
    searched = (f"$PATH={path}", *candidates)
    if found is not None:
        return LocatedNpuSmi(executable=found, requested=requested, how=ON_PATH, searched=searched)
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return LocatedNpuSmi(executable=candidate, requested=requested, how=STANDARD, searched=searched)
    return LocatedNpuSmi(executable=requested, requested=requested, how=NOT_FOUND, searched=searched)
