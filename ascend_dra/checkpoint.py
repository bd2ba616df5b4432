"""Durable records of prepared claims: versioned, checksummed JSON, replaced atomically (DESIGN §6).

File ``<plugin data dir>/checkpoint.json``::

    {"kind": "AscendDRACheckpoint", "version": 1, "checksum": "sha256:<hex>", "data": {...}}

``checksum`` covers the canonical bytes of ``data`` (orjson, sorted keys), so a truncated or
bit-flipped file is detected while a newer driver's extra fields (kept by the tolerant decoder
and ignored) do not break it. A checkpoint that cannot be read is never overwritten: the daemon
refuses to start and says what to do (STYLE §1: losing every other claim's record is worse).

Each claim moves ``PrepareStarted`` -> ``PrepareCompleted``; Unprepare removes its record.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any, Literal

import attrs
import cattrs
import orjson

from ascend_dra.atomicfile import write_atomic

__all__ = (
    "CHECKPOINT_FILE",
    "CHECKPOINT_VERSION",
    "CheckpointCorrupt",
    "CheckpointData",
    "ClaimRecord",
    "DeviceRecord",
    "RecordTable",
    "load",
    "save",
)

CHECKPOINT_FILE = "checkpoint.json"
CHECKPOINT_VERSION = 1
_KIND = "AscendDRACheckpoint"

PREPARE_STARTED = "PrepareStarted"
PREPARE_COMPLETED = "PrepareCompleted"


class CheckpointCorrupt(Exception):
    """Raised by :func:`load` when the checkpoint exists but cannot be trusted.

    :ivar path: the file; it is left untouched for inspection.
    :ivar reason: what is wrong (truncated JSON, checksum mismatch, unknown version, ...).
    """

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"checkpoint {path} is unreadable: {reason}. It records which claims are prepared on this node, "
            "so the daemon will not start over it. Inspect it, then either restore it from a backup or move it "
            "away (the kubelet will prepare the claims of running pods again; their CDI specs will be rewritten)"
        )


@attrs.frozen
class DeviceRecord:
    """One prepared device: what the kubelet was told, plus what the double-allocation guard needs.

    :ivar consumed_capacity: capacity name -> Quantity string (shared devices only).
    """

    request: str
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...] = ()
    share_id: str | None = None
    consumed_capacity: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class ClaimRecord:
    """A claim's durable state.

    :ivar state: ``PrepareStarted`` (devices chosen, CDI spec / side effects maybe half done) or
        ``PrepareCompleted`` (CDI spec written, kubelet may have been told).
    :ivar boot_id: the node's boot id when the claim was prepared; a different one means the
        node rebooted and tmpfs CDI specs and node side effects must be re-created.
    :ivar cdi_specs: spec file names written for the claim (under ``--cdi-root``).
    :ivar side_effects: per profile name, what ``prepare_side_effects`` returned.
    """

    uid: str
    namespace: str
    name: str
    state: Literal["PrepareStarted", "PrepareCompleted"]
    boot_id: str
    devices: tuple[DeviceRecord, ...] = ()
    cdi_specs: tuple[str, ...] = ()
    side_effects: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class CheckpointData:
    """Everything in the checkpoint: the boot id of the last write and the claim records by UID."""

    boot_id: str = ""
    claims: Mapping[str, ClaimRecord] = attrs.field(factory=dict)


# Tolerant: fields a newer driver added are ignored rather than fatal (STYLE §1).
_converter = cattrs.Converter(forbid_extra_keys=False)


def _canonical(data: Any) -> bytes:
    return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)


def _checksum(data_bytes: bytes) -> str:
    return "sha256:" + hashlib.sha256(data_bytes).hexdigest()


def encode(data: CheckpointData) -> bytes:
    """Serialize ``data`` as the checkpoint file's bytes."""
    return encode_raw(_converter.unstructure(data))


def encode_raw(raw: Mapping[str, Any]) -> bytes:
    """Serialize already unstructured checkpoint data; ``data`` is dumped once and the document is
    built around those bytes (the same bytes a sorted dump of the whole document gives)."""
    data = _canonical(raw)
    return b"".join((b'{"checksum":"', _checksum(data).encode(), b'","data":', data,
                     b',"kind":"', _KIND.encode(), b'","version":', str(CHECKPOINT_VERSION).encode(), b"}"))


class RecordTable(MutableMapping[str, ClaimRecord]):
    """Claim records by UID, keeping each record's unstructured form beside it.

    A save then serializes cached dicts instead of unstructuring every record again: with 1,000
    prepared claims that was most of a Prepare's time (bench/bench_prepare.py).
    """

    def __init__(self, records: Mapping[str, ClaimRecord] | None = None) -> None:
        self._records: dict[str, ClaimRecord] = {}
        self._raw: dict[str, Any] = {}
        for uid, record in (records or {}).items():
            self[uid] = record

    def __getitem__(self, uid: str) -> ClaimRecord:
        return self._records[uid]

    def __setitem__(self, uid: str, record: ClaimRecord) -> None:
        self._records[uid] = record
        self._raw[uid] = _converter.unstructure(record)

    def __delitem__(self, uid: str) -> None:
        del self._records[uid]
        del self._raw[uid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def encode(self, boot_id: str) -> bytes:
        """The checkpoint file's bytes for these records (what :func:`save` would write)."""
        return encode_raw({"boot_id": boot_id, "claims": self._raw})


def decode(blob: bytes, path: Path) -> CheckpointData:
    """Parse the checkpoint file's bytes.

    :raises CheckpointCorrupt: unparsable JSON, wrong kind, unknown version, checksum mismatch or
        records of the wrong shape.
    """
    try:
        doc = orjson.loads(blob)
    except orjson.JSONDecodeError as exc:
        raise CheckpointCorrupt(path, f"not valid JSON ({exc}); the file is probably truncated") from None
    if not isinstance(doc, dict) or doc.get("kind") != _KIND:
        raise CheckpointCorrupt(path, f"kind is not {_KIND}")
    if doc.get("version") != CHECKPOINT_VERSION:
        raise CheckpointCorrupt(path, f"version {doc.get('version')!r} is not {CHECKPOINT_VERSION} "
                                "(written by another ascend-dra release)")
    raw = doc.get("data")
    if _checksum(_canonical(raw)) != doc.get("checksum"):
        raise CheckpointCorrupt(path, "checksum mismatch (the file was modified or damaged)")
    try:
        return _converter.structure(raw, CheckpointData)
    except Exception as exc:
        detail = "; ".join(cattrs.transform_error(exc, path="data"))
        raise CheckpointCorrupt(path, f"records of an unexpected shape: {detail}") from None


def load(path: Path) -> CheckpointData:
    """Read the checkpoint; a missing file is an empty checkpoint.

    Blocking (file I/O): call from a worker thread.

    :raises CheckpointCorrupt: see :func:`decode`.
    """
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return CheckpointData()
    return decode(blob, path)


def save(path: Path, data: CheckpointData | bytes) -> None:
    """Write the checkpoint atomically and durably (temp file, fsync, rename, fsync of the dir).

    :param data: the records, or bytes from :meth:`RecordTable.encode`.

    Blocking: call from a worker thread. :raises OSError: the old checkpoint is then intact.
    """
    write_atomic(path, data if isinstance(data, bytes) else encode(data), mode=0o600)


def read_boot_id(path: Path = Path("/proc/sys/kernel/random/boot_id")) -> str:
    """Return the kernel's boot id (changes on every boot; source: ``proc(5)``)."""
    return path.read_text().strip()


def checkpoint_path(plugin_dir: Path) -> Path:
    return Path(os.fspath(plugin_dir)) / CHECKPOINT_FILE
