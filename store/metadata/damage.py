"""What is wrong with a store's metadata: every node's ``zarr.json`` compared with its copy in
the consolidated snapshot and with the digest recorded at the last consolidation
(:mod:`store.metadata.digests`).

:func:`check` is the comparison that ``validate`` reports and ``repair`` acts on: per node,
which copy is intact and what to do about the other; changes a legitimate unfinished write
makes (blocks recorded, a growing group) are told apart from damage. :func:`root_damage` and
:func:`root_changed` say, when a store fails to open, whether its root is damaged rather than
absent or of another schema.
"""


from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..schema import ATTR_COMPLETE, ATTR_COMPLETED, METADATA_COPY, RUNS
from .digests import (
    COPY_FORMAT,
    ZARR_JSON,
    damaged_message,
    digest,
    document_problem,
    file_of,
    get,
    list_dir,
    own_document,
    parse,
    snapshot_entries,
)


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
            if not name or name == ZARR_JSON or (not prefix and name == METADATA_COPY):
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
    copy = _read_copy(zs, METADATA_COPY, node=False)
    digests: dict[str, str] = {}
    copy_intact = False
    if not copy.present:
        out.add("", False, "no metadata digests recorded (a store written before they were, or the "
                "file was deleted): changes that still parse cannot be told from intact metadata; "
                "`layerstate repair` records them", "consolidate", file=METADATA_COPY)
    else:
        why = _copy_problem(copy.doc) if copy.doc is not None else copy.why
        if why is not None:
            out.add("", True, f"damaged ({why}); `layerstate repair` writes it again from the "
                    "snapshot and the nodes", "consolidate", file=METADATA_COPY)
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
    fix = f"the copy in {METADATA_COPY} is intact: `layerstate repair` restores it"
    if root.doc is None:
        what = "missing" if not root.present else f"damaged ({root.why})"
        if copy_intact:
            out.add("", True, f"the root's metadata is {what}; {fix} and rebuilds the snapshot "
                    "from the nodes", "restore_root")
        else:
            out.add("", True, f"the root's metadata is {what}, and {METADATA_COPY} holds no intact "
                    "copy of it: restore the store from a backup", "refuse")
        return
    mine = own_document(root.doc)
    if recorded is None or digest(mine) == recorded:
        return
    assert out.root_copy is not None
    if digest(out.root_copy) == recorded:
        out.add("", True, f"the root's own metadata differs from the digest recorded at the last "
                f"consolidation ({_diff(out.root_copy, mine, where=(METADATA_COPY, 'zarr.json'))}): damaged; {fix}", "restore_root")
    else:
        out.add("", True, "the root's own metadata matches neither its recorded digest nor the copy "
                f"in {METADATA_COPY}: no intact copy can be told; restore the store from a backup",
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
    if ("spec" in a and "spec" in b and not a.get(ATTR_COMPLETE) and _growing(a, b)
            and changed <= {ATTR_COMPLETED, ATTR_COMPLETE}):
        return f"{len(b.get(ATTR_COMPLETED, []))} of {b.get('n_blocks')} blocks recorded by an unfinished write"
    added = set(b) - set(a)
    if added and all(k in b and a[k] == b[k] for k in a):
        return f"attributes {', '.join(sorted(added))} added since"
    return None


def _pending_alone(doc: dict[str, Any] | None) -> bool:
    """True for a length group still being written (its completion records move on)."""
    attrs = (doc or {}).get("attributes") or {}
    return doc is not None and doc.get("node_type") == "group" and "spec" in attrs and not attrs.get(ATTR_COMPLETE)


def _growing(a: dict[str, Any], b: dict[str, Any]) -> bool:
    done_a, done_b = a.get(ATTR_COMPLETED) or [], b.get(ATTR_COMPLETED) or []
    n = b.get("n_blocks")
    return (isinstance(done_a, list) and isinstance(done_b, list) and set(done_a) <= set(done_b)
            and isinstance(n, int) and all(isinstance(x, int) and 0 <= x < n for x in done_b)
            and (not b.get(ATTR_COMPLETE) or len(set(done_b)) == n))


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
    ours = get(zs, METADATA_COPY) is not None or get(zs, f"{RUNS}/{ZARR_JSON}") is not None
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
    raw = get(zs, METADATA_COPY)
    doc, _ = parse(raw) if raw is not None else (None, None)
    if doc is None or _copy_problem(doc) is not None:
        return None
    if doc["root"].get("attributes") == attrs:
        return None
    diff = _diff(doc["root"].get("attributes"), attrs, where=(METADATA_COPY, "zarr.json"))
    return damaged_message(where, ZARR_JSON, f"its attributes differ from the copy recorded at the last "
                           f"consolidation: {diff}")

