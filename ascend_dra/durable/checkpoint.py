"""Durable records of prepared claims: versioned, checksummed JSON, replaced atomically
(docs/architecture.md#durable-state).

File ``<plugin data dir>/checkpoint.json``::

    {"kind": "AscendDRACheckpoint", "version": 1, "checksum": "sha256:<hex>", "data": {...}}

``checksum`` covers the canonical bytes of ``data`` (orjson, sorted keys), so a truncated or
bit-flipped file is detected while a newer driver's extra fields (kept by the tolerant decoder
and ignored) do not break it. A checkpoint that cannot be read is never overwritten: the daemon
refuses to start and says what to do (docs/architecture.md#conventions: losing every other claim's record is worse).

Each claim moves ``PrepareStarted`` -> ``PrepareCompleted``; Unprepare removes its record.

Compatibility in both directions (docs/durable-state.md): ``version`` is the envelope's version and
stays 1 while records evolve additively. A reader keeps going over what it does not know: unknown
fields are ignored and kept when the record is rewritten, ``null`` stands for a field's default,
a record in a state it does not know is kept as is (its claim is refused loudly, its devices stay
held), and a record that does not decode at all is kept byte for byte as an
:class:`UnreadableRecord`. Only a damaged file (bad JSON, checksum, kind, version) stops start-up,
and even then a file that names no claim is set aside instead, when nothing else on the node says a
claim was prepared (:attr:`CheckpointCorrupt.records_nothing`, records.py).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import attrs
import cattrs
import orjson

from ascend_dra.system.atomicfile import write_atomic

__all__ = (
    "CHECKPOINT_FILE",
    "CHECKPOINT_VERSION",
    "CheckpointCorrupt",
    "CheckpointData",
    "ClaimRecord",
    "DeviceRecord",
    "RecordTable",
    "UnreadableRecord",
    "decode_records",
    "load",
    "save",
)

CHECKPOINT_FILE = "checkpoint.json"
CHECKPOINT_VERSION = 1
_KIND = "AscendDRACheckpoint"

PREPARE_STARTED = "PrepareStarted"
PREPARE_COMPLETED = "PrepareCompleted"
KNOWN_STATES = frozenset((PREPARE_STARTED, PREPARE_COMPLETED))


class CheckpointCorrupt(Exception):
    """Raised by :func:`load` when the checkpoint exists but cannot be trusted.

    :ivar path: the file; it is left untouched for inspection.
    :ivar reason: what is wrong (truncated JSON, checksum mismatch, unknown version, ...).
    :ivar records_nothing: the file names no claim (zero bytes, or JSON whose ``data`` names none).
        That alone proves nothing (a truncated file names none either): the daemon sets it aside only
        when nothing else says a claim was prepared (records.py).
    """

    def __init__(self, path: Path, reason: str, *, records_nothing: bool = False) -> None:
        self.path = path
        self.reason = reason
        self.records_nothing = records_nothing
        super().__init__(
            f"checkpoint {path} is unreadable: {reason}. It records which claims are prepared on this node, "
            "so the daemon will not start over it. Inspect it, then either restore it from a backup or move it "
            "away (the kubelet will prepare the claims of running pods again; their CDI specs will be rewritten)"
        )


@attrs.frozen
class DeviceRecord:
    """One prepared device: what the kubelet was told, plus what the double-allocation guard needs.

    :ivar consumed_capacity: capacity name -> Quantity string (shared devices only).
    :ivar admin_access: the result was allocated with ``adminAccess`` (KEP-5018): it neither holds
        the device nor is refused by other claims' holds.
    """

    request: str
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...] = ()
    share_id: str | None = None
    consumed_capacity: Mapping[str, str] = attrs.field(factory=dict)
    admin_access: bool = False

    @property
    def holds_exclusively(self) -> bool:
        """Whether this hold takes the whole device: an allocation with no share ID was made while the
        device allowed one allocation only, whatever the device publishes now (docs/architecture.md#durable-state)."""
        return not self.admin_access and self.share_id is None


@attrs.frozen
class ClaimRecord:
    """A claim's durable state.

    :ivar state: ``PrepareStarted`` (devices chosen, CDI spec / side effects maybe half done) or
        ``PrepareCompleted`` (CDI spec written, kubelet may have been told); any other value was
        written by a newer release (see :data:`KNOWN_STATES`).
    :ivar boot_id: the node's boot id when the claim was prepared; a different one means the
        node rebooted and tmpfs CDI specs and node side effects must be re-created.
    :ivar cdi_specs: spec file names written for the claim (under ``--cdi-root``).
    :ivar side_effects: per profile name, what ``prepare_side_effects`` returned.
    :ivar device_nodes: host paths of the device nodes the claim's CDI specs name (checked to
        exist before the claim is answered, again on every replay).
    """

    uid: str
    namespace: str
    name: str
    state: str
    boot_id: str
    devices: tuple[DeviceRecord, ...] = ()
    cdi_specs: tuple[str, ...] = ()
    side_effects: Mapping[str, Any] = attrs.field(factory=dict)
    device_nodes: tuple[str, ...] = ()


@attrs.frozen
class UnreadableRecord:
    """A claim record this release cannot decode (another release's shape), kept byte for byte.

    Its claim is refused loudly; its devices (as far as :attr:`device_names` can tell) stay held.

    :ivar raw: the record as found in ``data.claims``.
    :ivar reason: why it does not decode (cattrs' error, with the field path).
    """

    uid: str
    raw: Any
    reason: str

    @property
    def device_names(self) -> tuple[str, ...]:
        """The ``devices[].device`` strings of the raw record, where it has them."""
        devices = self.raw.get("devices") if isinstance(self.raw, Mapping) else None
        if not isinstance(devices, list):
            return ()
        return tuple(d["device"] for d in devices if isinstance(d, Mapping) and isinstance(d.get("device"), str))

    @property
    def cdi_specs(self) -> tuple[str, ...]:
        """The ``cdi_specs`` strings of the raw record, where it has them."""
        specs = self.raw.get("cdi_specs") if isinstance(self.raw, Mapping) else None
        return tuple(s for s in specs if isinstance(s, str)) if isinstance(specs, list) else ()


@attrs.frozen
class CheckpointData:
    """Everything in the checkpoint: the boot id of the last write and the claim records by UID.

    :ivar raw: each decoded record as stored, so that fields of a newer release survive a rewrite.
    """

    boot_id: str = ""
    claims: Mapping[str, ClaimRecord] = attrs.field(factory=dict)
    unreadable: Mapping[str, UnreadableRecord] = attrs.field(factory=dict)
    raw: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)


# Tolerant: fields a newer driver added are ignored rather than fatal (docs/architecture.md#conventions), and a null
# stands for the field's default (an older or newer release may write one).
_converter = cattrs.Converter(forbid_extra_keys=False)


def _without_nulls(cls: type) -> Any:
    structure = _converter.gen_structure_attrs_fromdict(cls)

    def hook(value: Any, _: type) -> Any:
        if isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if v is not None}
        return structure(value, cls)
    return hook


for _cls in (DeviceRecord, ClaimRecord):
    _converter.register_structure_hook(_cls, _without_nulls(_cls))


def _canonical(data: Any) -> bytes:
    return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)


def _checksum(data_bytes: bytes) -> str:
    return "sha256:" + hashlib.sha256(data_bytes).hexdigest()


def encode(data: CheckpointData) -> bytes:
    """Serialize ``data`` as the checkpoint file's bytes (its unreadable records as they were read)."""
    return RecordTable.from_data(data).encode(data.boot_id)


def encode_raw(raw: Mapping[str, Any]) -> bytes:
    """Serialize already unstructured checkpoint data; ``data`` is dumped once and the document is
    built around those bytes (the same bytes a sorted dump of the whole document gives)."""
    data = _canonical(raw)
    return b"".join((b'{"checksum":"', _checksum(data).encode(), b'","data":', data,
                     b',"kind":"', _KIND.encode(), b'","version":', str(CHECKPOINT_VERSION).encode(), b"}"))


class RecordTable(MutableMapping[str, ClaimRecord]):
    """Claim records by UID, keeping each record's unstructured form beside it.

    A save then serializes cached dicts instead of unstructuring every record again: with 1,000
    prepared claims that was most of a Prepare's time (bench/bench_prepare.py). Fields a newer
    release stored in a record are carried into its rewrites; :attr:`unreadable` records are
    written back exactly as they were read.
    """

    def __init__(self, records: Mapping[str, ClaimRecord] | None = None, *,
                 unreadable: Mapping[str, UnreadableRecord] | None = None,
                 raw: Mapping[str, Any] | None = None,
                 on_change: Callable[[str, ClaimRecord | UnreadableRecord | None], None] | None = None) -> None:
        self._on_change = on_change or (lambda uid, record: None)
        self._records: dict[str, ClaimRecord] = {}
        self._raw: dict[str, Any] = {}
        self._foreign: dict[str, dict[str, Any]] = {}  # uid -> fields this release does not know
        self._unreadable: dict[str, UnreadableRecord] = dict(unreadable or {})
        self._dirty: set[str] = set()  # uids changed since the last take_dirty()
        for uid, record in (records or {}).items():
            stored = (raw or {}).get(uid)
            if isinstance(stored, Mapping):
                known = _converter.unstructure(record)
                self._foreign[uid] = {k: v for k, v in stored.items() if k not in known}
            self[uid] = record
        self._dirty.clear()  # loaded records are stored already
        for uid, bad in self._unreadable.items():
            self._on_change(uid, bad)

    @property
    def unreadable(self) -> Mapping[str, UnreadableRecord]:
        """Records another release wrote that this one cannot decode (kept as they were read)."""
        return self._unreadable

    def drop_unreadable(self, uid: str) -> None:
        """Forget an unreadable record (its claim was unprepared)."""
        del self._unreadable[uid]
        self._dirty.add(uid)
        self._on_change(uid, None)

    @classmethod
    def from_data(cls, data: CheckpointData,
                  on_change: Callable[[str, ClaimRecord | UnreadableRecord | None], None] | None = None
                  ) -> RecordTable:
        """The table of a loaded checkpoint (unknown fields and unreadable records included).

        :param on_change: called with ``(uid, record or None)`` for every record loaded and every
            change after (the guard's hold index follows the table this way).
        """
        return cls(data.claims, unreadable=data.unreadable, raw=data.raw, on_change=on_change)

    def __getitem__(self, uid: str) -> ClaimRecord:
        return self._records[uid]

    def __setitem__(self, uid: str, record: ClaimRecord) -> None:
        self._records[uid] = record
        raw = _converter.unstructure(record)
        foreign = self._foreign.get(uid)
        self._raw[uid] = {**foreign, **raw} if foreign else raw
        self._dirty.add(uid)
        self._on_change(uid, record)

    def __delitem__(self, uid: str) -> None:
        del self._records[uid]
        del self._raw[uid]
        self._foreign.pop(uid, None)
        self._dirty.add(uid)
        self._on_change(uid, None)

    def apply_stored(self, uid: str, stored: Any) -> None:
        """Take another instance's change as it is stored (``None``: deleted) without marking it
        dirty: it is on disk already (shared mode, records.py)."""
        self._foreign.pop(uid, None)
        self._records.pop(uid, None)
        self._raw.pop(uid, None)
        self._unreadable.pop(uid, None)
        self._dirty.discard(uid)
        if stored is None:
            self._on_change(uid, None)
            return
        data = decode_records({uid: stored})
        if uid in data.unreadable:
            self._unreadable[uid] = data.unreadable[uid]
            self._on_change(uid, data.unreadable[uid])
            return
        record = data.claims[uid]
        known = _converter.unstructure(record)
        if isinstance(stored, Mapping):
            self._foreign[uid] = {k: v for k, v in stored.items() if k not in known}
        self._records[uid] = record
        self._raw[uid] = stored
        self._on_change(uid, record)

    def take_dirty(self) -> list[tuple[str, Any]]:
        """The changes since the last call, as ``(uid, record as stored or None if deleted)``, and
        forget them (a failed write gives them back with :meth:`requeue`)."""
        changes = [(uid, self.stored(uid)) for uid in sorted(self._dirty)]
        self._dirty.clear()
        return changes

    @property
    def has_dirty(self) -> bool:
        """Whether a change waits for :meth:`take_dirty`."""
        return bool(self._dirty)

    def is_dirty(self, uid: str) -> bool:
        """Whether a change of ``uid`` (a deletion too) waits for :meth:`take_dirty`."""
        return uid in self._dirty

    def requeue(self, uids: Iterable[str]) -> None:
        """Mark ``uids`` as changed again (their write failed); the next write carries their current state."""
        self._dirty.update(uids)

    def stored(self, uid: str) -> Any:
        """The record of ``uid`` as it is stored (an unreadable one as read), or None."""
        if uid in self._raw:
            return self._raw[uid]
        bad = self._unreadable.get(uid)
        return bad.raw if bad is not None else None

    def snapshot_claims(self) -> dict[str, Any]:
        """``{uid: record as stored}`` of every record, unreadable ones included (a shallow copy:
        stored records are never changed in place, so another thread may encode it)."""
        claims = {uid: u.raw for uid, u in self._unreadable.items()}
        claims.update(self._raw)
        return claims

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def encode(self, boot_id: str) -> bytes:
        """The checkpoint file's bytes for these records (what :func:`save` would write)."""
        return encode_raw({"boot_id": boot_id, "claims": self.snapshot_claims()})


def decode(blob: bytes, path: Path) -> CheckpointData:
    """Parse the checkpoint file's bytes.

    A record that does not decode is returned in :attr:`CheckpointData.unreadable` rather than
    failing the whole file: one claim of another release's shape must not stop every other claim.

    :raises CheckpointCorrupt: unparsable JSON, wrong kind, unknown version, checksum mismatch, or a
        ``data`` that is not an object of records.
    """
    try:
        doc = orjson.loads(blob)
    except orjson.JSONDecodeError as exc:
        raise CheckpointCorrupt(path, f"not valid JSON ({exc}); the file is probably truncated",
                                records_nothing=not blob.strip()) from None
    if not isinstance(doc, dict) or doc.get("kind") != _KIND:
        raise CheckpointCorrupt(path, f"kind is not {_KIND}", records_nothing=_names_no_claim(doc))
    if doc.get("version") != CHECKPOINT_VERSION:
        raise CheckpointCorrupt(path, f"version {doc.get('version')!r} is not {CHECKPOINT_VERSION} "
                                "(written by another ascend-dra release)")
    raw = doc.get("data")
    if _checksum(_canonical(raw)) != doc.get("checksum"):
        raise CheckpointCorrupt(path, "checksum mismatch (the file was modified or damaged)",
                                records_nothing=_names_no_claim(doc))
    if not isinstance(raw, dict) or not isinstance(raw.get("claims", {}), dict) \
            or not isinstance(raw.get("boot_id") or "", str):
        raise CheckpointCorrupt(path, "data is not an object with a boot_id string and a claims object")
    return decode_records(raw.get("claims") or {}, boot_id=raw.get("boot_id") or "")


def decode_records(raw_claims: Mapping[str, Any], *, boot_id: str = "") -> CheckpointData:
    """Structure stored records one by one (``{uid: record as stored}``); a record that does not
    decode becomes an :class:`UnreadableRecord` instead of failing the others."""
    claims: dict[str, ClaimRecord] = {}
    unreadable: dict[str, UnreadableRecord] = {}
    for uid, record in raw_claims.items():
        try:
            claims[uid] = _converter.structure(record, ClaimRecord)
        except Exception as exc:
            detail = "; ".join(cattrs.transform_error(exc, path=f"data.claims[{uid!r}]"))
            unreadable[uid] = UnreadableRecord(uid, record, detail)
    return CheckpointData(boot_id=boot_id, claims=claims, unreadable=unreadable, raw=dict(raw_claims))


def _names_no_claim(doc: Any) -> bool:
    """Whether a damaged document names no claim: nothing at all, or a ``data`` object whose
    ``claims`` is there and empty. A missing ``data`` or ``claims`` does not count: one flipped bit
    in the key's name hides every record under it."""
    if not isinstance(doc, dict):
        return doc is None or doc == [] or doc == ""
    if not doc:
        return True
    if "data" in doc and doc["data"] is None:
        return True
    data = doc.get("data")
    return isinstance(data, dict) and data.get("claims", None) in ({}, None) and "claims" in data


def load(path: Path) -> CheckpointData:
    """Read the checkpoint; a missing file is an empty checkpoint.

    Blocking (file I/O): call from a worker thread.

    :raises CheckpointCorrupt: see :func:`decode`.
    """
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        if path.is_symlink():  # a link to a volume not mounted yet: its records are somewhere
            raise CheckpointCorrupt(path, f"it is a symbolic link to {os.readlink(path)}, which does not exist "
                                    "(a volume not mounted?)") from None
        return CheckpointData()
    return decode(blob, path)


def save(path: Path, data: CheckpointData | bytes) -> None:
    """Write the checkpoint atomically and durably (temp file, fsync, rename, fsync of the dir).

    :param data: the records, or bytes from :meth:`RecordTable.encode`.

    Blocking: call from a worker thread. :raises OSError: the old checkpoint is then intact.
    """
    write_atomic(path, data if isinstance(data, bytes) else encode(data), mode=0o600, fault="snapshot")


def read_boot_id(path: Path = Path("/proc/sys/kernel/random/boot_id")) -> str:
    """Return the kernel's boot id (changes on every boot; source: ``proc(5)``)."""
    return path.read_text().strip()


def checkpoint_path(plugin_dir: Path) -> Path:
    return Path(os.fspath(plugin_dir)) / CHECKPOINT_FILE
