"""The two copies of every node's metadata, their digests, and what is wrong with them.

Every node (group or array) of a store has its own ``zarr.json`` and a copy in the
consolidated snapshot held by the root's ``zarr.json``. At each consolidation the store also
writes :data:`~store.schema.METADATA_COPY` beside the root: a copy of the root's own document
(its attributes have no other copy) and a digest of every node's document (SHA-256 of its
canonical JSON, first 16 hex digits), itself covered by a digest. So a change that still
parses (a digit of a shape, a letter of a dtype) is caught, and the digest tells which of two
disagreeing copies is the one recorded at the last consolidation (docs/store-format.md,
"Metadata copies and digests").

Here:

* :func:`canonical`, :func:`digest`, :func:`document_problem` (is this a readable Zarr v3
  document?);
* the guarded zarr stores (:class:`GuardedLocalStore`, …): every ``zarr.json`` zarr reads
  through them is parsed first, and a damaged one fails with a
  :class:`~store.errors.MetadataDamagedError` naming the file and the fix, instead of a JSON
  parser's message;
* :func:`consolidate_once` (zarr's snapshot from a fresh listing, then
  :func:`record_digests`), which :class:`~store.core.Store` runs under the store's
  consolidation lease (S40), and :func:`check`, the
  comparison of every node with its snapshot copy and digest that ``validate`` reports and
  ``repair`` acts on.

Per write the cost is one read of the root document and one small write, once per
consolidation; recording a block (a group's attributes) costs nothing more.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zarr
import zarr.storage
from zarr.core.buffer import default_buffer_prototype
from zarr.core.buffer.cpu import Buffer as CPUBuffer
from zarr.core.group import GroupMetadata
from zarr.core.metadata import ArrayV3Metadata
from zarr.core.sync import sync

from . import schema as S
from .errors import MetadataDamagedError
from .zarrutil import quiet

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


class _Guard:
    """Parses every ``zarr.json`` zarr reads before zarr does (mixed into a zarr store)."""

    #: set by :meth:`store.location.Location.zarr_store`: how messages name the store
    where: str = ""

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        buf = await super().get(key, prototype, byte_range)  # type: ignore[misc]
        if buf is not None and byte_range is None and (key == ZARR_JSON or key.endswith("/" + ZARR_JSON)):
            doc, why = parse(buf.to_bytes())
            if why is None and doc is not None and key != ZARR_JSON:
                why = document_problem(doc)
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
    put(zs, S.METADATA_COPY, json.dumps(copy_document(root), indent=1).encode())
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
        zarr.consolidate_metadata(zs)
    return record_digests(zs)


def root_is(zs: Any, raw: bytes) -> bool:
    """Whether the root document is still ``raw`` (no other writer replaced the snapshot)."""
    return get(zs, ZARR_JSON) == raw


# ---------------------------------------------------------------------- the check
@dataclass
class Copy:
    """One copy of a node's document: ``doc`` if readable, else ``why`` (or both None: absent)."""

    doc: dict[str, Any] | None = None
    why: str | None = None

    @property
    def ok(self) -> bool:
        return self.doc is not None

    @property
    def present(self) -> bool:
        return self.doc is not None or self.why is not None

    @property
    def digest(self) -> str | None:
        return None if self.doc is None else digest(self.doc)


@dataclass
class Finding:
    """Something wrong (``problem``) or worth knowing (``warning``) about one file.

    ``action`` is what ``repair`` does: ``restore`` (write the node's file from its snapshot
    copy), ``restore_root`` (the root's attributes from the metadata copy file),
    ``consolidate`` (rebuild the snapshot and the digests from the nodes), or ``refuse``
    (no intact copy can be told; nothing is changed). None: nothing to do.
    """

    file: str
    problem: bool
    text: str
    action: str | None = None
    path: str = ""

    def line(self) -> str:
        return f"{self.file}: {self.text}"


@dataclass
class MetadataCheck:
    """Every node compared with its snapshot copy and its recorded digest."""

    where: str
    findings: list[Finding] = field(default_factory=list)
    #: readable snapshot entries (path -> own document) for repair
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the root's own document from the copy file, if intact
    root_copy: dict[str, Any] | None = None
    root_ok: bool = False
    #: every snapshot entry parses (zarr can open the root with it)
    snapshot_parses: bool = False
    #: the snapshot is missing, or some entry of it is damaged or missing
    snapshot_damaged: bool = True
    listed: bool = True
    n_nodes: int = 0

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.problem]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if not f.problem]

    @property
    def refusals(self) -> list[Finding]:
        return [f for f in self.findings if f.action == "refuse"]

    def add(self, path: str, problem: bool, text: str, action: str | None = None, file: str | None = None) -> None:
        self.findings.append(Finding(file or file_of(path), problem, text, action, path))


def _read_copy(zs: Any, key: str, *, node: bool = True) -> Copy:
    raw = get(zs, key)
    if raw is None:
        return Copy()
    doc, why = parse(raw)
    if doc is not None and node:
        why = document_problem(doc)
        if why is not None:
            doc = None
    return Copy(doc, why)


def walk(zs: Any) -> tuple[dict[str, Copy], bool]:
    """Every node found by listing the store from its root: ``({path: own copy}, listed)``.

    Groups are descended into, arrays are not (below them are chunks); a node whose document
    is unreadable is descended into as well, in case it was a group. ``listed`` is False on
    stores that cannot list (plain HTTP): then only the paths the snapshot names are known.
    """
    found: dict[str, Copy] = {}
    todo = [""]
    listed = True
    while todo:
        prefix = todo.pop()
        names = list_dir(zs, prefix)
        if names is None:
            listed = False
            continue
        for name in sorted({n.rstrip("/") for n in names}):
            if not name or name == ZARR_JSON or (not prefix and name == S.METADATA_COPY):
                continue
            path = f"{prefix}/{name}" if prefix else name
            copy = _read_copy(zs, file_of(path))
            if not copy.present:
                continue
            found[path] = copy
            if copy.doc is None or copy.doc.get("node_type") == "group":
                todo.append(path)
    return found, listed


def check(zs: Any, where: str) -> MetadataCheck:
    """Compare every node's own ``zarr.json`` with its copy in the consolidated snapshot and
    with the digest recorded at the last consolidation (see the module docs and
    docs/store-format.md, S34-S36, for what is reported and what ``repair`` would do)."""
    out = MetadataCheck(where)
    # the root document: its own part and the snapshot
    root = _read_copy(zs, ZARR_JSON, node=False)
    snapshot: dict[str, Any] | None = None
    if root.doc is not None:
        why = document_problem(own_document(root.doc))
        if why is not None:
            root = Copy(None, why)
    if root.doc is not None:
        out.root_ok = True
        snapshot, why = snapshot_entries(root.doc)
        if snapshot is None:
            out.add("", True, f"the root document {why}; readers of packed and remote stores "
                    "need it to find the nodes: `layerstate repair` rebuilds it", "consolidate")
    # the copy file
    copy = _read_copy(zs, S.METADATA_COPY, node=False)
    digests: dict[str, str] = {}
    copy_intact = False
    if not copy.present:
        out.add("", False, "no metadata digests recorded (a store written before they were, or the "
                "file was deleted): changes that still parse cannot be told from intact metadata; "
                "`layerstate repair` records them", "consolidate", file=S.METADATA_COPY)
    else:
        why = _copy_problem(copy.doc) if copy.doc is not None else copy.why
        if why is not None:
            out.add("", True, f"damaged ({why}); `layerstate repair` writes it again from the "
                    "snapshot and the nodes", "consolidate", file=S.METADATA_COPY)
        else:
            assert copy.doc is not None
            copy_intact = True
            digests = dict(copy.doc["digests"])
            out.root_copy = copy.doc["root"]
    _judge_root(out, root, digests, copy_intact)
    # every node: found by listing, named by the snapshot, or recorded in the digests
    nodes, out.listed = walk(zs)
    entries: dict[str, Copy] = {}
    for p, e in (snapshot or {}).items():
        if isinstance(e, dict):
            e = own_document(e)
            why = document_problem(e)
            entries[p] = Copy(None if why else e, why)
        else:
            entries[p] = Copy(None, f"not a JSON object but {type(e).__name__}")
    out.entries = {p: c.doc for p, c in entries.items() if c.doc is not None}
    paths = set(nodes) | set(entries) | (set(digests) - {""})
    for p in sorted(paths):
        node = nodes[p] if p in nodes else _read_copy(zs, file_of(p))
        _judge(out, zs, p, node, entries.get(p, Copy()), digests.get(p), snapshot is not None)
    out.snapshot_parses = snapshot is not None and all(c.ok for c in entries.values())
    out.snapshot_damaged = snapshot is None or any(
        f.problem and f.file.startswith(f"{ZARR_JSON} (snapshot") for f in out.findings)
    out.n_nodes = len(paths) + 1
    return out


def _copy_problem(doc: dict[str, Any]) -> str | None:
    body = {k: doc.get(k) for k in ("format", "root", "digests")}
    if doc.get("format") != COPY_FORMAT:
        return f"format is {doc.get('format')!r}, expected {COPY_FORMAT!r}"
    if not isinstance(doc.get("digests"), dict) or not isinstance(doc.get("root"), dict):
        return "no 'digests' or 'root' object"
    if doc.get("digest") != digest(body):
        return "its own digest does not match its content"
    return None


def _judge_root(out: MetadataCheck, root: Copy, digests: dict[str, str], copy_intact: bool) -> None:
    recorded = digests.get("")
    fix = f"the copy in {S.METADATA_COPY} is intact: `layerstate repair` restores it"
    if root.doc is None:
        what = "missing" if not root.present else f"damaged ({root.why})"
        if copy_intact:
            out.add("", True, f"the root's metadata is {what}; {fix} and rebuilds the snapshot "
                    "from the nodes", "restore_root")
        else:
            out.add("", True, f"the root's metadata is {what}, and {S.METADATA_COPY} holds no intact "
                    "copy of it: restore the store from a backup", "refuse")
        return
    mine = own_document(root.doc)
    if recorded is None or digest(mine) == recorded:
        return
    assert out.root_copy is not None
    if digest(out.root_copy) == recorded:
        out.add("", True, f"the root's own metadata differs from the digest recorded at the last "
                f"consolidation ({_diff(out.root_copy, mine, where=(S.METADATA_COPY, 'zarr.json'))}): damaged; {fix}", "restore_root")
    else:
        out.add("", True, "the root's own metadata matches neither its recorded digest nor the copy "
                f"in {S.METADATA_COPY}: no intact copy can be told; restore the store from a backup",
                "refuse")


def _judge(out: MetadataCheck, zs: Any, p: str, node: Copy, entry: Copy, recorded: str | None,
           have_snapshot: bool) -> None:
    """One node: its own file, its snapshot entry, its recorded digest."""
    repair = "`layerstate repair` restores it from the snapshot"
    if node.ok and entry.ok:
        if node.digest == entry.digest:
            if recorded is not None and recorded != node.digest:
                out.add(p, False, "this file and its snapshot copy agree, but not with the digest recorded "
                        "at the last consolidation (the snapshot was rewritten by another tool?); "
                        "`layerstate repair` records the digests again", "consolidate")
            return
        assert node.doc is not None and entry.doc is not None
        diff = _diff(entry.doc, node.doc)
        pending = _pending(entry.doc, node.doc)
        if recorded == entry.digest:
            if pending:
                out.add(p, False, f"newer than the snapshot ({pending}); readers of the snapshot see "
                        "the older copy until the writer finishes (or `layerstate repair` refreshes "
                        "it)", "consolidate")
            elif _same_shape(entry.doc, node.doc):
                out.add(p, True, f"differs from its snapshot copy ({diff}), which matches the digest "
                        f"recorded at the last consolidation: damaged; {repair} (if a write to it was "
                        "interrupted instead, run that write again)", "restore")
            else:
                out.add(p, True, f"differs from its snapshot copy in its structure ({diff}): rewritten "
                        "by a write that did not finish, or damaged; run the interrupted write again, "
                        "or restore the store from a backup", "refuse")
        elif recorded == node.digest:
            out.add(p, True, f"its copy in the consolidated snapshot (in {ZARR_JSON}) differs ({diff}) "
                    "and this file matches the recorded digest: the snapshot is damaged; "
                    "`layerstate repair` rebuilds it from the nodes", "consolidate",
                    file=f"{ZARR_JSON} (snapshot entry {p})")
        elif pending:
            out.add(p, False, f"newer than the snapshot ({pending}); `layerstate repair` refreshes "
                    "the snapshot", "consolidate")
        else:
            why = "no digest was recorded" if recorded is None else "neither matches the recorded digest"
            out.add(p, True, f"differs from its snapshot copy ({diff}) and {why}: which copy is intact "
                    "cannot be told; restore the store from a backup", "refuse")
        return
    if node.ok:
        if entry.present:  # an unreadable snapshot entry
            ok = recorded in (None, node.digest)
            out.add(p, True, f"its copy in the consolidated snapshot is damaged ({entry.why})"
                    + ("; `layerstate repair` rebuilds the snapshot from the nodes" if ok else
                       " and this file does not match its recorded digest: no intact copy"),
                    "consolidate" if ok else "refuse", file=f"{ZARR_JSON} (snapshot entry {p})")
        elif not have_snapshot:
            if recorded is not None and recorded != node.digest and not _pending_alone(node.doc):
                out.add(p, True, "differs from the digest recorded at the last consolidation and the "
                        "snapshot is unreadable: no intact copy can be told", "refuse")
        elif recorded is not None and recorded == node.digest:
            out.add(p, True, "missing from the consolidated snapshot, which held it at the last "
                    "consolidation: the snapshot is damaged; `layerstate repair` rebuilds it",
                    "consolidate", file=f"{ZARR_JSON} (snapshot entry {p})")
        elif recorded is not None:
            out.add(p, False, "not in the consolidated snapshot and changed since the last consolidation "
                    "(a write that has not finished); `layerstate repair` refreshes the snapshot",
                    "consolidate")
        else:
            out.add(p, False, "not in the consolidated snapshot (written after the last consolidation: "
                    "a writer still running or interrupted); readers of the snapshot do not see it "
                    "until `layerstate repair` or the next write refreshes it", "consolidate")
        return
    if node.present:  # this file is unreadable
        if entry.ok and recorded in (None, entry.digest):
            out.add(p, True, f"damaged ({node.why}); {repair}", "restore")
        elif entry.ok:
            out.add(p, True, f"damaged ({node.why}), and its snapshot copy does not match the recorded "
                    "digest: no intact copy; restore the store from a backup", "refuse")
        else:
            out.add(p, True, f"damaged ({node.why}), and the snapshot holds no intact copy"
                    f"{' (' + entry.why + ')' if entry.why else ''}: restore the store from a backup",
                    "refuse")
        return
    # this file is absent
    if entry.ok:
        held = list_dir(zs, p)
        if held:
            ok = recorded in (None, entry.digest)
            out.add(p, True, "missing, though the node's data is there"
                    + (f"; {repair}" if ok else " and its snapshot copy does not match the recorded "
                       "digest: restore the store from a backup"), "restore" if ok else "refuse")
        else:
            out.add(p, False, "in the consolidated snapshot but gone (deleted after the last "
                    "consolidation); `layerstate repair` refreshes the snapshot", "consolidate",
                    file=f"{ZARR_JSON} (snapshot entry {p})")
    elif entry.present:
        out.add(p, True, f"its snapshot entry is damaged ({entry.why}) and the node is gone; "
                "`layerstate repair` rebuilds the snapshot from the nodes", "consolidate",
                file=f"{ZARR_JSON} (snapshot entry {p})")
    elif have_snapshot:
        out.add(p, True, "recorded at the last consolidation but missing from the snapshot and "
                "from the store: deleted since, or damage; `layerstate repair` refreshes the "
                "snapshot and the digests", "consolidate")


# ---------------------------------------------------------------------- legitimate changes
def _pending(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """How ``new`` (a node's own file) legitimately moved on from ``old`` (its snapshot copy)
    during a write that has not been consolidated yet, in words; None if it did not.

    Only group attributes change while a write runs: an unfinished length group's completion
    records grow, and attributes are added to a run (training metrics). Anything else is not
    a write in progress.
    """
    if old.get("node_type") != "group" or own_document({**old, "attributes": None}) != own_document(
            {**new, "attributes": None}):
        return None
    a, b = old.get("attributes") or {}, new.get("attributes") or {}
    changed = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    if ("spec" in a and "spec" in b and not a.get(S.ATTR_COMPLETE) and _growing(a, b)
            and changed <= {S.ATTR_COMPLETED, S.ATTR_COMPLETE}):
        return f"{len(b.get(S.ATTR_COMPLETED, []))} of {b.get('n_blocks')} blocks recorded by an unfinished write"
    added = set(b) - set(a)
    if added and all(k in b and a[k] == b[k] for k in a):
        return f"attributes {', '.join(sorted(added))} added since"
    return None


def _pending_alone(doc: dict[str, Any] | None) -> bool:
    """True for a length group still being written (its completion records move on)."""
    attrs = (doc or {}).get("attributes") or {}
    return doc is not None and doc.get("node_type") == "group" and "spec" in attrs and not attrs.get(S.ATTR_COMPLETE)


def _growing(a: dict[str, Any], b: dict[str, Any]) -> bool:
    done_a, done_b = a.get(S.ATTR_COMPLETED) or [], b.get(S.ATTR_COMPLETED) or []
    n = b.get("n_blocks")
    return (isinstance(done_a, list) and isinstance(done_b, list) and set(done_a) <= set(done_b)
            and isinstance(n, int) and all(isinstance(x, int) and 0 <= x < n for x in done_b)
            and (not b.get(S.ATTR_COMPLETE) or len(set(done_b)) == n))


def _same_shape(a: Any, b: Any) -> bool:
    """True if ``a`` and ``b`` have the same structure: as many keys, in the same order, and
    lists of the same lengths, everywhere (scalars and key names may differ). That is what a
    change in place (a flipped byte, a changed digit) leaves, unlike a node rewritten by a
    write with another layout."""
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(_same_shape(x, y) for x, y in zip(a.values(), b.values(), strict=True))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_shape(x, y) for x, y in zip(a, b, strict=True))
    return not isinstance(a, dict | list) and not isinstance(b, dict | list)


def _diff(old: Any, new: Any, limit: int = 2, where: tuple[str, str] = ("the snapshot", "this file")) -> str:
    """The first differences between two documents: ``key: <old> in the snapshot, <new> in
    this file``."""
    out: list[str] = []
    for key, x, y in _leaves(old, new, ""):
        out.append(f"{key or 'document'}: {_short(x)} in {where[0]}, {_short(y)} in {where[1]}")
        if len(out) >= limit:
            break
    return "; ".join(out) or "whitespace only"


def _leaves(a: Any, b: Any, key: str) -> Iterable[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            yield from _leaves(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{key}.{k}" if key else k)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _leaves(x, y, f"{key}[{i}]")
    elif a != b:
        yield key, a, b


def _short(v: Any) -> str:
    s = json.dumps(v) if not isinstance(v, str) or v != "<absent>" else "absent"
    return s if len(s) <= 40 else s[:37] + "..."


# ---------------------------------------------------------------------- opening
def root_damage(zs: Any, where: str) -> str | None:
    """Why the root of a store that failed to open is damaged (one line with the fix), or
    None if the location simply holds no layerstate store.

    A root ``zarr.json`` that is not valid JSON, or not a readable Zarr v3 group document, or
    whose snapshot zarr cannot parse, is damage; so is a missing root document beside a
    metadata copy file or a ``runs`` group. A readable document of another kind (Zarr v2,
    an array) with neither is not a layerstate store.
    """
    raw = get(zs, ZARR_JSON)
    ours = get(zs, S.METADATA_COPY) is not None or get(zs, f"{S.RUNS}/{ZARR_JSON}") is not None
    if raw is None:
        return damaged_message(where, ZARR_JSON, "the file is missing") if ours else None
    doc, why = parse(raw)
    if doc is None:
        return damaged_message(where, ZARR_JSON, str(why))
    why = document_problem(own_document(doc))
    if why is not None:
        return damaged_message(where, ZARR_JSON, why) if ours or doc.get("zarr_format") == 3 else None
    entries, why = snapshot_entries(doc)
    for p, e in (entries or {}).items():
        bad = document_problem(own_document(e)) if isinstance(e, dict) else "not a JSON object"
        if bad is not None:
            return damaged_message(where, ZARR_JSON, f"snapshot entry {p}: {bad}")
    return None


def root_changed(zs: Any, where: str, attrs: dict[str, Any]) -> str | None:
    """If the root's attributes differ from the intact copy recorded at the last
    consolidation, why (one line with the fix); used when its ``schema`` looks wrong, so a
    damaged root is not reported as another schema or as not a layerstate store."""
    raw = get(zs, S.METADATA_COPY)
    doc, _ = parse(raw) if raw is not None else (None, None)
    if doc is None or _copy_problem(doc) is not None:
        return None
    if doc["root"].get("attributes") == attrs:
        return None
    diff = _diff(doc["root"].get("attributes"), attrs, where=(S.METADATA_COPY, "zarr.json"))
    return damaged_message(where, ZARR_JSON, f"its attributes differ from the copy recorded at the last "
                           f"consolidation: {diff}")
