"""The CDI spec directory (``--cdi-root``, default ``/var/run/cdi``): atomic writes, removal, listing.

Specs are written as JSON, which is YAML, into ``*.yaml`` files (docs/architecture.md#names names them so) through
:func:`ascend_dra.system.atomicfile.write_atomic`, so a runtime never reads a torn file. They are not
fsynced: the CDI dir is a tmpfs on real nodes (``/var/run/cdi``), every spec is re-created when the
kubelet prepares its claim after a reboot (new boot id), and an orphan is removed at start-up, so
the rename's atomicity is the whole guarantee a runtime needs; the checkpoint is what must survive
(docs/durable-state.md). The methods block only for small page-cache writes with no fsync, so the
daemon calls them on the event loop.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import orjson

from ascend_dra.cdi import naming
from ascend_dra.cdi.spec import Spec
from ascend_dra.system.atomicfile import remove_durably, write_atomic

__all__ = ("CdiStore",)


class CdiStore:
    """Writes and removes our spec files under ``root``.

    :param root: the CDI spec directory; created (mode 0755) if missing.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def ensure_root(self) -> None:
        """Create the spec directory if it is missing."""
        self.root.mkdir(mode=0o755, parents=True, exist_ok=True)

    def path(self, filename: str) -> Path:
        return self.root / filename

    def write(self, filename: str, spec: Spec) -> Path:
        """Validate ``spec`` and write it as ``root/filename``, replacing any older file.

        :raises SpecError: if the spec is invalid (nothing is written).
        :raises OSError: if the directory is full or read-only (the old file stays).
        """
        spec.validate()
        # JSON is YAML (1.2; the CDI library reads spec files with a YAML parser that takes JSON), and
        # orjson encodes a spec in microseconds where PyYAML's representer took ~0.4 ms per Prepare.
        data = orjson.dumps(spec.to_dict(), option=orjson.OPT_INDENT_2) + b"\n"
        path = self.path(filename)
        write_atomic(path, data, durable=False,
                     fault="cdi-common" if filename.endswith(f"_{naming.COMMON_DEVICE}.yaml") else "cdi-claim")
        return path

    def remove(self, filename: str) -> bool:
        """Remove ``root/filename``; return False if it was not there."""
        return remove_durably(self.path(filename), durable=False)

    def claim_specs(self, kinds: Iterable[str]) -> dict[str, list[str]]:
        """Return ``{claim_uid: [file names]}`` for every per-claim spec of ``kinds`` in the directory.

        A file belongs to the kind with the longest matching stem: a CDI class may hold ``_``, so
        ``<vendor>-npu_x_common.yaml`` (the common spec of class ``npu_x``) also starts with the stem
        ``<vendor>-npu_`` of class ``npu``, and read with that stem it would pass for the spec of a
        claim ``x_common``. Each file is listed once, whatever the number of kinds it matches.
        """
        prefixes = sorted({naming.spec_file_prefix(k) + "_" for k in kinds}, key=len, reverse=True)
        found: dict[str, list[str]] = {}
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return found
        for name in names:
            if not name.endswith(".yaml"):
                continue
            prefix = next((p for p in prefixes if name.startswith(p)), None)
            if prefix is not None:
                uid = name[len(prefix):-len(".yaml")]
                if uid != naming.COMMON_DEVICE:
                    found.setdefault(uid, []).append(name)
        return found
