"""The hard-vNPU ledger: which vNPUs this daemon is about to create or has created, on disk.

One JSON file per vNPU under ``<ProfileContext.state_dir>/hard-vNPU/``, written durably
(:func:`ascend_dra.system.atomicfile.write_atomic`: fsync of the file and of its directory) **before**
the create is asked of either tier (``dcmi_create_vdevice`` or ``npu-smi set -t create-vnpu``,
:mod:`.calls`) and removed only after the vNPU is destroyed, or is known never to have been made (a
create whose outcome is unknown keeps it, docs/hard-vnpu.md#through-dcmi). It is the proof
of ownership the crash repair needs: the checkpoint learns of a vNPU only after
``prepare_side_effects`` returns, so a kill -9 between the create and that record leaves a vNPU
that only the ledger knows. A vNPU that no ledger entry names was not made by us and is never
destroyed (docs/architecture.md#durable-state; issue 11).

An entry names the chip by NPU ID and chip ID (what npu-smi's ``-i``/``-c`` take, reference
docs/ascend-hardware.md#the-ids), the vNPU ID, the template, the claim and device it was made for, and the boot id.
Whether an entry of an earlier boot still names a vNPU that exists depends on npu-smi's
vnpu-cfg-recover mode: enabled (the default) the device restores its vNPUs after a restart, so the
entry still proves ownership; disabled the vNPUs died with the boot and the entry proves nothing
(:meth:`.vnpu_ops.VnpuOps.recovers`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import attrs

from ascend_dra.system.atomicfile import remove_durably, write_atomic

__all__ = ("LEDGER_DIR", "Ledger", "LedgerEntry")

logger = logging.getLogger(__name__)

#: Directory under ``ProfileContext.state_dir``.
LEDGER_DIR = "hard-vNPU"


@attrs.frozen
class LedgerEntry:
    """One vNPU we create (or created). JSON-able through :meth:`to_json` / :meth:`from_json`."""

    npu_id: int
    chip_id: int
    vnpu_id: int
    template: str
    claim_uid: str
    device: str
    boot_id: str

    @property
    def file_name(self) -> str:
        """``vnpu-<npuID>-<chipID>-<vnpuID>.json``: one file per vNPU ID of a chip."""
        return f"vnpu-{self.npu_id}-{self.chip_id}-{self.vnpu_id}.json"

    def to_json(self) -> dict[str, Any]:
        """The entry as a JSON object (also what the checkpoint stores as side effects)."""
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> LedgerEntry:
        """Decode :meth:`to_json` output.

        :raises ValueError: a field is missing or has the wrong type.
        """
        if not isinstance(data, dict):
            raise ValueError(f"a vNPU record must be a JSON object, got {type(data).__name__}")
        fields = {f.name: f.type for f in attrs.fields(cls)}
        values = {}
        for name, kind in fields.items():
            value = data.get(name)
            want = int if kind in (int, "int") else str
            if not isinstance(value, want) or isinstance(value, bool):
                raise ValueError(f"vNPU record field {name}: expected {want.__name__}, got {value!r}")
            values[name] = value
        return cls(**values)


class Ledger:
    """The ledger directory. Methods block (file I/O): call them from a worker thread.

    :param root: ``<state_dir>/hard-vNPU``.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, entry: LedgerEntry) -> Path:
        return self.root / entry.file_name

    def write(self, entry: LedgerEntry) -> None:
        """Record ``entry`` durably (replacing an entry for the same vNPU ID)."""
        self.root.mkdir(mode=0o750, parents=True, exist_ok=True)
        write_atomic(self.path(entry), json.dumps(entry.to_json(), sort_keys=True).encode(), fault="hard-vnpu-ledger")

    def read(self, npu_id: int, chip_id: int, vnpu_id: int) -> LedgerEntry | None:
        """The entry for that vNPU ID, or None (an unreadable file counts as none, with a warning)."""
        probe = LedgerEntry(npu_id, chip_id, vnpu_id, "", "", "", "")
        return self._load(self.path(probe))

    def remove(self, entry: LedgerEntry) -> None:
        """Drop the entry for ``entry``'s vNPU, if the file still names the same claim (idempotent)."""
        current = self._load(self.path(entry))
        if current is not None and current.claim_uid == entry.claim_uid:
            remove_durably(self.path(entry))

    def files(self) -> list[Path]:
        """Every entry file, readable or not, sorted by name (each says a vNPU was made or was about
        to be: evidence that a claim was prepared, docs/durable-state.md)."""
        return sorted(self.root.glob("vnpu-*.json")) if self.root.is_dir() else []

    def entries(self) -> list[LedgerEntry]:
        """Every readable entry, sorted by file name."""
        found = []
        for path in self.files():
            entry = self._load(path)
            if entry is not None:
                found.append(entry)
        return found

    def _load(self, path: Path) -> LedgerEntry | None:
        try:
            return LedgerEntry.from_json(json.loads(path.read_bytes()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.warning("unreadable hard-vNPU ledger entry ignored", extra={"file": str(path), "error": str(exc)})
            return None
