"""The two copies of every node's metadata and their digests: reading, writing and
consolidating them.

Every node (group or array) of a store has its own ``zarr.json`` and a copy in the
consolidated snapshot held by the root's ``zarr.json``. At each consolidation the store also
writes :data:`~store.schema.METADATA_COPY` beside the root: a copy of the root's own document
(its attributes have no other copy) and a digest of every node's document (SHA-256 of its
canonical JSON, first 16 hex digits), itself covered by a digest. So a change that still
parses (a digit of a shape, a letter of a dtype) is caught, and the digest tells which of two
disagreeing copies is the one recorded at the last consolidation (docs/store-format.md,
"Metadata copies and digests"); :mod:`store.metadata.damage` makes that comparison.

Here:

* :func:`canonical`, :func:`digest`, :func:`document_problem` (is this a readable Zarr v3
  document?);
* the guarded zarr stores (:class:`GuardedLocalStore`, …): every ``zarr.json`` zarr reads
  through them is parsed first, and a damaged one fails with a
  :class:`~store.errors.MetadataDamagedError` naming the file and the fix, instead of a JSON
  parser's message;
* :func:`consolidate_once` (zarr's snapshot from a fresh listing, then
  :func:`record_digests`), which :class:`~store.core.Store` runs under the store's
  consolidation lease (S40).

Per write the cost is one read of the root document and one small write, once per
consolidation; recording a block (a group's attributes) costs nothing more.
"""


from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import threading
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import zarr
import zarr.core.group as zarr_group
import zarr.storage
from zarr.core.buffer import default_buffer_prototype
from zarr.core.buffer.cpu import Buffer as CPUBuffer
from zarr.core.group import AsyncGroup, ConsolidatedMetadata, GroupMetadata
from zarr.core.metadata import ArrayV3Metadata
from zarr.core.sync import sync

from ..errors import MetadataDamagedError
from ..schema import METADATA_COPY
from ..zarrutil import quiet

ZARR_JSON = "zarr.json"
#: Format name of the metadata copy file.
COPY_FORMAT = "layerstate-metadata/1"
#: Run-group attributes that never change once a run exists (S10).
IDENTITY = ("task", "arch", "variant", "seed", "model_config", "task_config", "config_hash")


# ---------------------------------------------------------------------- documents
def canonical(doc: Any) -> bytes:
    """The canonical JSON of a metadata document: sorted keys, no spaces, UTF-8."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=True).encode()


def digest(doc: Any) -> str:
    """First 16 hex digits of SHA-256 over :func:`canonical` (whitespace does not count)."""
    return hashlib.sha256(canonical(doc)).hexdigest()[:16]


def own_document(doc: dict[str, Any]) -> dict[str, Any]:
    """A node's document without the consolidated snapshot zarr adds to groups."""
    return {k: v for k, v in doc.items() if k != "consolidated_metadata"}


def file_of(path: str) -> str:
    """The metadata file of node ``path`` (``""`` is the root), relative to the store."""
    return f"{path}/{ZARR_JSON}" if path else ZARR_JSON


def parse(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """``(document, None)``, or ``(None, why it is not a JSON object)``."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    except ValueError as exc:
        return None, f"not valid JSON: {exc}"
    if not isinstance(doc, dict):
        return None, f"not a JSON object but {type(doc).__name__}"
    return doc, None


def document_problem(doc: dict[str, Any]) -> str | None:
    """Why ``doc`` (without a snapshot) is not a readable Zarr v3 node document, or None."""
    if doc.get("zarr_format") != 3:
        return f"zarr_format is {doc.get('zarr_format')!r}, expected 3"
    kind = doc.get("node_type")
    if kind not in ("array", "group"):
        return f"node_type is {kind!r}, expected 'array' or 'group'"
    if not isinstance(doc.get("attributes", {}), dict):
        return "attributes is not a JSON object"
    try:
        with quiet():
            if kind == "array":
                ArrayV3Metadata.from_dict(dict(doc))
            else:
                GroupMetadata.from_dict(own_document(doc))
    except Exception as exc:  # zarr raises ValueError, TypeError, KeyError, … for bad fields
        return f"not valid Zarr v3 {kind} metadata ({type(exc).__name__}: {exc})"
    return None


def snapshot_entries(root: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The consolidated snapshot of a root document as ``{path: entry}``, or why not."""
    cm = root.get("consolidated_metadata")
    if cm is None:
        return None, "holds no consolidated snapshot"
    if not isinstance(cm, dict) or cm.get("kind") != "inline" or not isinstance(cm.get("metadata"), dict):
        return None, "its consolidated snapshot is not an inline 'metadata' object"
    return dict(cm["metadata"]), None


def render(doc: dict[str, Any]) -> bytes:
    """A node document as zarr writes it (``json.dumps(indent=2)``), so a file restored from
    its snapshot copy is byte for byte the file zarr wrote."""
    return json.dumps(doc, indent=2, allow_nan=True).encode()


# ---------------------------------------------------------------------- raw access
def get(zs: Any, key: str) -> bytes | None:
    """The bytes stored at ``key``, None if absent (local files are read directly: no hop
    through zarr's event loop per file)."""
    if isinstance(zs, zarr.storage.LocalStore):
        try:
            return (Path(zs.root) / key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
    if not zs._is_open:  # zarr opens a store on first use; zip stores need it before a read
        sync(zs._ensure_open())
    buf = sync(zs.get(key, prototype=default_buffer_prototype()))
    return None if buf is None else buf.to_bytes()


def list_dir(zs: Any, prefix: str) -> list[str] | None:
    """Names directly under ``prefix``; None where the store cannot list (plain HTTP)."""
    if isinstance(zs, zarr.storage.LocalStore):
        try:
            return [e.name for e in os.scandir(Path(zs.root) / prefix)]
        except (FileNotFoundError, NotADirectoryError):
            return []
    async def go() -> list[str]:
        await zs._ensure_open()
        return [k async for k in zs.list_dir(prefix)]

    try:
        return sync(go())
    except Exception:  # stores that cannot list raise all sorts (HTTP status errors, …)
        return None


def put(zs: Any, key: str, data: bytes) -> None:
    """Write ``data`` at ``key`` atomically: on a local disk a temp file, fsynced, renamed
    over the old file and the directory fsynced; elsewhere one object write."""
    if isinstance(zs, zarr.storage.LocalStore):
        path = Path(zs.root) / key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return
    if not zs._is_open:
        sync(zs._ensure_open())
    sync(zs.set(key, CPUBuffer.from_bytes(data)))


# ---------------------------------------------------------------------- guarded stores
def damaged_message(where: str, key: str, reason: str) -> str:
    """One line: which file is damaged, why, and the fix."""
    what = f"{where}/{key}" + (" (the store's root metadata)" if key == ZARR_JSON else "")
    return (f"{what} is damaged: {reason}; run `layerstate repair {where}` to rebuild it from its "
            f"second copy (`layerstate validate {where}` lists every damaged file; a packed or "
            "read-only store: repair a writable copy), or restore the store from a backup")


class _SoundDocuments:
    """The metadata documents already found sound, by their exact bytes (a bounded LRU).

    A store's documents are read again and again (the root's, with its snapshot of every node,
    at each open), and checking one parses it twice (JSON, then zarr's own model): 7-8% of the
    test suite's time went there. A document byte-for-byte equal to one found sound is sound;
    any other byte is checked afresh, so damage is never missed."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self._docs: OrderedDict[tuple[bool, bytes], None] = OrderedDict()
        self._bytes = 0
        self._max = max_bytes
        self._lock = threading.Lock()

    def __contains__(self, key: tuple[bool, bytes]) -> bool:
        with self._lock:
            if key not in self._docs:
                return False
            self._docs.move_to_end(key)
            return True

    def add(self, key: tuple[bool, bytes]) -> None:
        if len(key[1]) > self._max // 4:
            return
        with self._lock:
            if key in self._docs:
                return
            self._docs[key] = None
            self._bytes += len(key[1])
            while self._bytes > self._max:
                old, _ = self._docs.popitem(last=False)
                self._bytes -= len(old[1])


_SOUND = _SoundDocuments()


def document_damage(key: str, raw: bytes) -> str | None:
    """Why the ``zarr.json`` at ``key`` is not readable (the root's: not a JSON object; any
    other: not a Zarr v3 node document), or None; remembered for documents found sound."""
    entry = (key == ZARR_JSON, raw)
    if entry in _SOUND:
        return None
    doc, why = parse(raw)
    if why is None and doc is not None and key != ZARR_JSON:
        why = document_problem(doc)
    if why is None:
        _SOUND.add(entry)
    return why


class _Guard:
    """Parses every ``zarr.json`` zarr reads before zarr does (mixed into a zarr store)."""

    #: set by :meth:`store.access.location.Location.zarr_store`: how messages name the store
    where: str = ""

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        buf = await super().get(key, prototype, byte_range)  # type: ignore[misc]
        if buf is not None and byte_range is None and (key == ZARR_JSON or key.endswith("/" + ZARR_JSON)):
            why = document_damage(key, buf.to_bytes())
            if why is not None:
                raise MetadataDamagedError(damaged_message(self.where or str(self), key, why))
        return buf


class GuardedLocalStore(_Guard, zarr.storage.LocalStore):  # type: ignore[misc]
    """A local directory store whose metadata reads are checked (:class:`_Guard`)."""

    def with_read_only(self, read_only: bool = False) -> GuardedLocalStore:
        out = type(self)(root=self.root, read_only=read_only)
        out.where = self.where
        return out


class GuardedZipStore(_Guard, zarr.storage.ZipStore):  # type: ignore[misc]
    """A zip store whose metadata reads are checked (:class:`_Guard`)."""


class GuardedFsspecStore(_Guard, zarr.storage.FsspecStore):  # type: ignore[misc]
    """An fsspec store whose metadata reads are checked (:class:`_Guard`)."""

    def with_read_only(self, read_only: bool = False) -> GuardedFsspecStore:
        out = type(self)(fs=self.fs, path=self.path, read_only=read_only,
                         allowed_exceptions=self.allowed_exceptions)
        out.where = self.where
        return out


# ---------------------------------------------------------------------- the copy file
def copy_document(root: dict[str, Any]) -> dict[str, Any]:
    """The metadata copy file for a root document that holds a fresh snapshot."""
    entries, _ = snapshot_entries(root)
    digests = {"": digest(own_document(root))}
    digests.update({p: digest(own_document(e)) for p, e in sorted((entries or {}).items())})
    body = {"format": COPY_FORMAT, "root": own_document(root), "digests": digests}
    return {**body, "digest": digest(body)}


def record_digests(zs: Any) -> bytes:
    """After a consolidation: write the metadata copy file from the root document (a copy
    of the root's own document and the digest of every node's); returns that root document
    as read."""
    raw = get(zs, ZARR_JSON)
    root, why = parse(raw) if raw is not None else (None, "missing")
    if root is None or raw is None:  # a root zarr just wrote is always readable
        raise MetadataDamagedError(f"{ZARR_JSON} unreadable right after consolidation: {why}")
    put(zs, METADATA_COPY, json.dumps(copy_document(root), indent=1).encode())
    return raw


# ---------------------------------------------------------------------- consolidation
def forget_listings(zs: Any) -> None:
    """Drop the directory listings an fsspec file system cached (s3fs keeps them): a
    consolidation must list what other processes wrote since, not what this one saw."""
    fs = getattr(zs, "fs", None)
    if fs is not None and hasattr(fs, "invalidate_cache"):
        fs.invalidate_cache()


def consolidate_once(zs: Any) -> bytes:
    """One consolidation of the whole store: every node listed afresh and its document
    copied into the root's snapshot (zarr), then the metadata copy file (S34). Returns the
    root document as written. The caller holds the store's consolidation lease (S40)."""
    forget_listings(zs)
    with quiet(), warnings.catch_warnings():
        # objects that are no Zarr node (the lease directory, a writer's temporary file)
        warnings.filterwarnings("ignore", message=r"Object at .* is not recognized")
        if not (isinstance(zs, zarr.storage.LocalStore) and _consolidate_local(zs)):
            zarr.consolidate_metadata(zs)
    return record_digests(zs)


#: Zarr's model of the node documents consolidations have read, by their exact bytes: a store's
#: documents barely change between two consolidations (a result write adds a few dozen of
#: thousands), and building zarr's model of each was most of a consolidation's time.
_PARSED: dict[bytes, Any] = {}
_PARSED_LOCK = threading.Lock()
_PARSED_MAX = 200_000


def _node_metadata(where: str, key: str, raw: bytes, build: Any) -> Any:
    """Zarr's model of the node document ``raw`` read at ``key`` (checked as the guarded stores
    check what zarr reads: a damaged one fails naming the file and the fix)."""
    with _PARSED_LOCK:
        md = _PARSED.get(raw)
    if md is None:
        why = document_damage(key, raw)
        if why is not None:
            raise MetadataDamagedError(damaged_message(where, key, why))
        md = build(json.loads(raw))
        with _PARSED_LOCK:
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[raw] = md
    return md


def _consolidate_local(zs: zarr.storage.LocalStore) -> bool:
    """:func:`zarr.consolidate_metadata` for a store on a local disk, the same snapshot byte for
    byte: the nodes listed afresh with the operating system's own calls and read directly, not
    as zarr does, through its event loop one node at a time (2 s a consolidation of a store of
    4,000 nodes against 0.5 s; docs/measured.md, "CI time, 2026-12-08"). False, having written
    nothing, where this zarr lacks what it uses (then zarr's own consolidation runs)."""
    build = getattr(zarr_group, "_build_metadata_v3", None)
    flat_to_nested = getattr(ConsolidatedMetadata, "_flat_to_nested", None)
    if build is None or flat_to_nested is None or not hasattr(AsyncGroup, "_save_metadata"):
        return False  # pragma: no cover - a zarr built otherwise inside
    where = getattr(zs, "where", "") or str(zs)
    members: dict[str, Any] = {}

    def walk(folder: str, prefix: str) -> None:
        with os.scandir(folder) as entries:
            subfolders = [e for e in entries if e.is_dir()]
        for e in subfolders:
            try:
                with open(os.path.join(e.path, ZARR_JSON), "rb") as f:
                    raw = f.read()
            except (FileNotFoundError, NotADirectoryError):
                continue  # no Zarr node (the lease directory, a writer's temporary folder)
            key = prefix + e.name
            md = _node_metadata(where, f"{key}/{ZARR_JSON}", raw, build)
            members[key] = md
            if isinstance(md, GroupMetadata):
                walk(e.path, key + "/")

    group = sync(AsyncGroup.open(zs, zarr_format=3, use_consolidated=False))
    zs._check_writable()
    walk(str(zs.root), "")
    # as zarr.consolidate_metadata does: an empty group says so, then the snapshot is nested
    for k, v in members.items():
        if isinstance(v, GroupMetadata) and v.consolidated_metadata is None:
            members[k] = dataclasses.replace(v, consolidated_metadata=ConsolidatedMetadata(metadata={}))
    flat_to_nested(members)
    metadata = dataclasses.replace(group.metadata, consolidated_metadata=ConsolidatedMetadata(metadata=members))
    sync(dataclasses.replace(group, metadata=metadata)._save_metadata())
    return True


def root_is(zs: Any, raw: bytes) -> bool:
    """Whether the root document is still ``raw`` (no other writer replaced the snapshot)."""
    return get(zs, ZARR_JSON) == raw

