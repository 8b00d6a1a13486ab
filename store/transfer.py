"""Copy a store, or a subset of it, between locations, chunk by chunk: ``pull`` and ``push``.

``pull(url, dir, runs=…, lengths=…, layers=…)`` makes a valid local store from a remote one
(any fsspec URL) by fetching only what the subset needs:

1. the source's root ``zarr.json``, whose consolidated snapshot (S32) lists every node, so
   nothing is listed on the remote; the snapshot entries used are checked against the
   digests in ``layerstate-metadata.json`` (S34) when the source has them;
2. the chunk keys of the selected runs, lengths (every kind: ``len_``, ``cfclean_``, …) and
   layers, enumerated from each array's own metadata (shape and chunk grid). A group with a
   completion record (S23) gives only the blocks it records as written; a group without one
   (written in one go, e.g. by plain xarray) gives every chunk of its grid. A group's layers
   are its ``spec.layers``, or, without a ``spec``, the values of its ``layer`` coordinate
   (read from the source). An array chunked one layer per chunk (S21) gives a layer subset
   as a subset of chunk files, renumbered along that axis; an array whose chunks hold several
   layers has each needed chunk fetched whole, decoded, and the kept layers re-encoded with
   the same codecs, one layer per chunk;
3. each chunk fetched (several at once) and checked as it arrives: its crc32c where the
   array's codecs end in one (and its size, for raw arrays); otherwise (another tool's
   codecs, e.g. xarray's zstd alone) by decoding it with the array's codecs, which catches a
   truncated or garbled chunk but not a change that still decodes. It is written under a
   temporary name and renamed;
4. node metadata for the subset: a layer subset shrinks the arrays' layer dim, and rewrites
   the ``layer`` coordinate, the group's ``spec.layers`` and the sites of dropped layers; then
   the root document, and a consolidation (snapshot + digests) makes it a store.

A chunk the source does not hold is damage where a completion record vouches for it (a
recorded block; the weights of a group marked ``complete``), and an error. Elsewhere it was
never written and reads as the fill value (S6): the copy does not hold it either, and it is
remembered in the marker so that a resumed copy does not ask for it again.

Progress is the target itself: a marker file (``layerstate-transfer.json``) names the source,
the selection and the chunks found absent at the source, and a chunk already in the target
with its expected size (and, on a local disk, its crc32c) is not fetched again. So a pull
killed at any point (``kill -9``) and run again fetches only what is missing, and ends
bit-identical to an uninterrupted pull (every file the target holds is a function of the
source and the selection; no timestamps). Until the root document is written at the end the
target is not a store, so a half-finished pull cannot be analysed by mistake.

``push(dir, url)`` is the same copy the other way (checked the same way, resumable the same
way: objects already at the target with their expected size are not sent again).

Only zarr, fsspec and this package's own helpers are used here.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import re
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import crc32c
import fsspec.asyn
import numpy as np
import zarr
import zarr.storage
from zarr.core.buffer import default_buffer_prototype
from zarr.core.metadata import ArrayV3Metadata

from . import metadata as M
from . import schema as S
from .core import Store
from .errors import (
    CorruptStoreError,
    LayerstateError,
    MissingError,
    NotAStoreError,
    RunConflictError,
)
from .lengths import completion
from .location import Location
from .zarrutil import quiet

#: The marker of an unfinished copy, at the target's root (removed when the copy is done).
MARKER = "layerstate-transfer.json"
MARKER_FORMAT = "layerstate-transfer/1"
#: Chunks fetched per request round (s3fs/http fetch a list concurrently).
ROUND = 16


class TransferError(LayerstateError, OSError):
    """The source could not be reached or read (network, permissions, a missing object)."""


@dataclass
class Selection:
    """What to copy: ``None`` means everything of that kind."""

    runs: list[str] | None = None
    lengths: list[int] | None = None
    layers: list[str] | None = None
    weights: bool = True

    @property
    def whole(self) -> bool:
        return self.runs is None and self.lengths is None and self.layers is None and self.weights

    def record(self) -> dict[str, Any]:
        return {"runs": self.runs, "lengths": self.lengths, "layers": self.layers,
                "weights": self.weights}


@dataclass
class TransferReport:
    """What a copy did. ``fetched_bytes`` counts every body read from the source (chunks and
    metadata); ``target_bytes`` is the size of everything the target holds afterwards."""

    source: str
    target: str
    runs: list[str]
    lengths: dict[str, list[int]]
    layers: dict[str, list[str]]
    chunks: int = 0
    copied: int = 0
    skipped: int = 0
    absent: int = 0        # chunks the source never stored (no record vouches for them)
    fetched_bytes: int = 0
    target_bytes: int = 0


@dataclass
class _Cut:
    """The kept layers of a source chunk that holds several: decoded, sliced along ``axis``
    and re-encoded one layer per target chunk."""

    axis: int
    src_doc: dict[str, Any]                 # the source array as one chunk (for decoding)
    dst_doc: dict[str, Any]                 # the target array as one chunk (for encoding)
    parts: list[tuple[str, int]] = field(default_factory=list)  # (target key, index in the chunk)
    size: int | None = None                 # expected size of each part (raw + crc32c), if known


@dataclass
class _Chunk:
    src: str               # key in the source
    dst: str               # key in the target (the first part's, for a cut)
    size: int | None       # expected stored size (raw + crc32c arrays), None if unknown
    crc: bool              # the codec chain ends in crc32c
    required: bool = True  # a completion record vouches for it: absent at the source is damage
    doc: dict[str, Any] | None = None  # without crc32c: the array as one chunk, to decode it
    cut: _Cut | None = None

    def targets(self) -> list[tuple[str, int | None]]:
        """Every target key this chunk fills, with its expected size where known."""
        if self.cut is None:
            return [(self.dst, self.size)]
        return [(k, self.cut.size) for k, _i in self.cut.parts]


@dataclass
class _Plan:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)   # path -> document to write
    chunks: list[_Chunk] = field(default_factory=list)
    layer_coords: dict[str, list[str]] = field(default_factory=dict)  # array path -> values
    fetched: int = 0  # bytes read from the source while planning (layer coordinates)
    runs: list[str] = field(default_factory=list)
    lengths: dict[str, list[int]] = field(default_factory=dict)
    layers: dict[str, list[str]] = field(default_factory=dict)


# ---------------------------------------------------------------------- entry points
def pull(
    url: str,
    target: str | os.PathLike[str],
    *,
    runs: Sequence[str] | None = None,
    lengths: Sequence[int] | None = None,
    layers: Sequence[str] | None = None,
    weights: bool = True,
    storage_options: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> TransferReport:
    """Copy the selected runs / lengths / layers of the store at ``url`` into a new local
    store at ``target`` (resumes an unfinished pull of the same selection there).

    Raises
    ------
    TransferError
        ``url`` cannot be reached or read.
    NotAStoreError
        ``url`` holds no layerstate store.
    MissingError
        A run, length or layer asked for is not in the store (the valid ones are listed).
    RunConflictError
        ``target`` exists and is not an unfinished pull of the same selection.
    CorruptStoreError
        A chunk fails its checksum (or is missing) in the source.
    """
    sel = Selection(_opt_list(runs), _opt_list(lengths, int), _opt_list(layers), weights)
    return copy_store(Location(url, storage_options or {}), Location(os.fspath(target)), sel,
                      progress=progress)


def push(
    source: str | os.PathLike[str],
    url: str,
    *,
    runs: Sequence[str] | None = None,
    lengths: Sequence[int] | None = None,
    layers: Sequence[str] | None = None,
    weights: bool = True,
    storage_options: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> TransferReport:
    """Copy a local store (or the selected part of it) to ``url``: the same checks as
    :func:`pull` (every chunk's crc32c before it is sent), resumable the same way."""
    sel = Selection(_opt_list(runs), _opt_list(lengths, int), _opt_list(layers), weights)
    return copy_store(Location(os.fspath(source)), Location(url, storage_options or {}), sel,
                      progress=progress)


def copy_store(src: Location, dst: Location, sel: Selection, *,
               progress: Callable[[int, int], None] | None = None) -> TransferReport:
    """Copy ``sel`` of the store at ``src`` to ``dst`` (see the module's docs)."""
    if src.is_zip or dst.is_zip:
        raise ValueError("pull/push copy directory stores and URLs; unpack a zip first "
                         "(`layerstate unpack`), or pack the copy afterwards")
    source = _Side(src)
    root_doc, fetched = _read_root(source)
    entries, _ = M.snapshot_entries(root_doc)
    if entries is None:
        raise NotAStoreError(
            f"{src} holds no consolidated metadata snapshot, so what to copy cannot be told "
            "without listing it; open it once for writing with layerstate (any write "
            "consolidates), or `layerstate repair` it"
        )
    fetched += _check_digests(source, root_doc, entries)
    plan = _plan(root_doc, entries, sel, str(src), source)
    fetched += plan.fetched
    target = _Side(dst)
    key = _plan_key(str(src), sel, plan)
    marker = _claim(target, key, src, dst, sel)
    absent = set(cast("list[str]", marker.get("absent") or []))
    report = TransferReport(str(src), str(dst), plan.runs, plan.lengths, plan.layers,
                            chunks=len(plan.chunks), fetched_bytes=fetched)
    have = target.sizes()
    todo = [c for c in plan.chunks if c.src not in absent and not _already(target, have, c)]
    report.absent = sum(c.src in absent for c in plan.chunks)
    report.skipped = len(plan.chunks) - len(todo) - report.absent
    done = len(plan.chunks) - len(todo)
    for batch in _rounds(todo, ROUND):
        got = source.fetch([c.src for c in batch])
        writes: dict[str, bytes] = {}
        found_absent = []
        for c in batch:
            data = got[c.src]
            if data is None:
                if c.required:
                    raise CorruptStoreError(
                        f"{src}: chunk {c.src} is missing though the store records it as written; "
                        f"`layerstate validate {src}` names every damaged chunk"
                    )
                found_absent.append(c.src)  # never written: reads as the fill value there and here
                continue
            report.fetched_bytes += len(data)
            sizes = dict(c.targets())  # a cut killed half-way: only the parts not yet there
            writes.update({k: v for k, v in _produce(data, c, str(src)).items()
                           if not _part_ok(target, have, k, sizes[k], c.crc)})
        target.put_many(writes)
        if found_absent:  # remembered, so that a resumed copy does not ask for them again
            absent.update(found_absent)
            target.put(MARKER, _marker(marker, absent))
        report.copied += len(batch) - len(found_absent)
        report.absent += len(found_absent)
        done += len(batch)
        if progress is not None:
            progress(done, len(plan.chunks))
    _write_nodes(target, plan, root_doc, sel, str(src))
    target.delete(MARKER)
    report.target_bytes = sum(target.sizes().values())
    return report


# ---------------------------------------------------------------------- the two sides
class _Side:
    """One end of a copy: raw bytes by store key, through fsspec (plain files when local)."""

    def __init__(self, loc: Location) -> None:
        self.loc = loc
        try:
            self.fs, root = loc.filesystem()
        except Exception as exc:  # an unknown protocol, a missing fsspec backend, bad options
            raise TransferError(f"cannot use {loc}: {type(exc).__name__}: {_first_line(exc)}") from None
        self.root = root.rstrip("/")
        self.local = loc.is_local

    def path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def get(self, key: str) -> bytes | None:
        return self.fetch([key])[key]

    def fetch(self, keys: list[str]) -> dict[str, bytes | None]:
        """Bodies by key (None where absent); several at once on remote filesystems."""
        if self.local:
            out: dict[str, bytes | None] = {}
            for k in keys:
                try:
                    out[k] = Path(self.path(k)).read_bytes()
                except (FileNotFoundError, NotADirectoryError):
                    out[k] = None
            return out
        paths = [self.path(k) for k in keys]
        try:
            got = self._cat(paths)
        except Exception as exc:
            raise TransferError(f"cannot read {self.loc}: {type(exc).__name__}: {_first_line(exc)}") from None
        out = {}
        for k, p in zip(keys, paths, strict=True):
            body = got[p]
            if isinstance(body, FileNotFoundError) or body is None:
                out[k] = None
            elif isinstance(body, BaseException):
                raise TransferError(f"cannot read {self.loc}/{k}: {type(body).__name__}: "
                                    f"{_first_line(body)}")
            else:
                out[k] = bytes(body)
        return out

    def _cat(self, paths: list[str]) -> dict[str, Any]:
        """Each object's body (or the exception reading it raised): one GET per object,
        all at once on async filesystems (``fs.cat`` of a list asks for each object's size
        first, doubling the requests)."""
        if getattr(self.fs, "async_impl", False):
            async def one(p: str) -> Any:
                try:
                    return await self.fs._cat_file(p)
                except Exception as exc:  # returned, so the caller names the object
                    return exc

            async def every() -> list[Any]:
                return await asyncio.gather(*(one(p) for p in paths))

            return dict(zip(paths, fsspec.asyn.sync(self.fs.loop, every), strict=True))
        out: dict[str, Any] = {}
        for p in paths:
            try:
                out[p] = self.fs.cat_file(p)
            except Exception as exc:
                out[p] = exc
        return out

    def put_many(self, items: dict[str, bytes]) -> None:
        if not items:
            return
        if self.local:
            for k, data in items.items():
                _write_file(Path(self.path(k)), data)
            return
        try:
            self.fs.pipe({self.path(k): v for k, v in items.items()})
        except Exception as exc:
            raise TransferError(f"cannot write to {self.loc}: {type(exc).__name__}: {_first_line(exc)}") from None

    def put(self, key: str, data: bytes) -> None:
        self.put_many({key: data})

    def delete(self, key: str) -> None:
        if self.local:
            Path(self.path(key)).unlink(missing_ok=True)
            return
        if self.fs.exists(self.path(key)):
            self.fs.rm(self.path(key))

    def exists(self) -> bool:
        try:
            return self.loc.exists()
        except Exception:
            return False

    def sizes(self) -> dict[str, int]:
        """Every key under the root with its size (one listing)."""
        if self.local:
            base = Path(self.root)
            if not base.exists():
                return {}
            out = {}
            for dirpath, _dirs, files in os.walk(base):
                for name in files:
                    if name.endswith(".partial"):
                        continue
                    p = Path(dirpath) / name
                    out[p.relative_to(base).as_posix()] = p.stat().st_size
            return out
        try:
            found = self.fs.find(self.root, detail=True)
        except FileNotFoundError:
            return {}
        strip = self.fs._strip_protocol(self.root).rstrip("/") + "/"
        return {p[len(strip):]: int(info.get("size") or 0) for p, info in found.items()
                if p.startswith(strip)}


def _write_file(path: Path, data: bytes) -> None:
    """Write ``data`` under a temporary name and rename it: a kill leaves no torn file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------- reading the source
def _read_root(source: _Side) -> tuple[dict[str, Any], int]:
    loc = source.loc
    raw = source.get(M.ZARR_JSON)
    if raw is None:
        what = "does not exist" if not source.exists() else "holds no zarr.json at its root"
        raise NotAStoreError(f"{loc} {what}: not a layerstate store; check the URL (a store's "
                             "root holds zarr.json and runs/)")
    doc, why = M.parse(raw)
    if doc is None:
        raise CorruptStoreError(f"{loc}/zarr.json is damaged ({why}); `layerstate repair` it at its source")
    schema = (doc.get("attributes") or {}).get("schema")
    if doc.get("node_type") != "group" or schema is None:
        raise NotAStoreError(f"{loc} is a Zarr node but not a layerstate store (no 'schema' attribute)")
    refusal = S.schema_refusal(schema)
    if refusal is not None:
        from .errors import SchemaVersionError

        raise SchemaVersionError(f"{loc} {refusal}")
    return doc, len(raw)


def _check_digests(source: _Side, root: dict[str, Any], entries: dict[str, Any]) -> int:
    """Compare the snapshot with the digests recorded beside it (S34), when there are any."""
    raw = source.get(S.METADATA_COPY)
    if raw is None:
        return 0
    copy, _ = M.parse(raw)
    digests = (copy or {}).get("digests")
    if not isinstance(digests, dict):
        return len(raw)
    bad = [p for p, e in entries.items() if p in digests and digests[p] != M.digest(M.own_document(e))]
    if bad:
        raise CorruptStoreError(
            f"{source.loc}: the metadata snapshot disagrees with its recorded digests at {bad[0]}"
            f"{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}; run `layerstate validate` "
            "and `layerstate repair` on the source first"
        )
    return len(raw)


# ---------------------------------------------------------------------- the plan
def _plan(root: dict[str, Any], entries: dict[str, Any], sel: Selection, where: str,
          source: _Side) -> _Plan:
    plan = _Plan()
    runs_here = sorted(p.split("/")[1] for p in entries if re.fullmatch(rf"{S.RUNS}/[^/]+", p))
    runs = runs_here if sel.runs is None else sel.runs
    missing = [r for r in runs if r not in runs_here]
    if missing:
        raise MissingError(f"{where} has no run {missing[0]!r}; its runs: {', '.join(runs_here) or '(none)'}")
    plan.runs = list(runs)
    for p in (S.RUNS, S.RESULTS):
        if p in entries:
            plan.nodes[p] = M.own_document(entries[p])
    groups: dict[str, dict[str, tuple[str, int]]] = {}
    for p in entries:
        parts = p.split("/")
        if len(parts) == 3 and parts[0] == S.RUNS and parts[1] in runs:
            parsed = S.parse_length_group(parts[2])
            if parsed is not None:
                groups.setdefault(parts[1], {})[p] = parsed
    all_lengths = sorted({L for g in groups.values() for (_k, L) in g.values()})
    if sel.lengths is not None:
        for L in sel.lengths:
            have = [r for r in runs if any(k == "len" and n == L for k, n in groups.get(r, {}).values())]
            if not have:
                raise MissingError(
                    f"no selected run has length {L}; lengths stored: "
                    f"{', '.join(map(str, all_lengths)) or '(none)'}"
                )
    chosen: dict[str, dict[str, Any]] = {}  # length-group path -> its document
    for r in runs:
        for gp, (_kind, L) in sorted(groups.get(r, {}).items()):
            if sel.lengths is None or L in sel.lengths:
                chosen[gp] = entries[gp]
                plan.lengths.setdefault(r, [])
                if L not in plan.lengths[r]:
                    plan.lengths[r].append(L)
    layers_of = {gp: _group_layers(source, gp, entries, plan, where, need=sel.layers is not None)
                 for gp in chosen}
    if sel.layers is not None:
        stored = list(dict.fromkeys(lay for ls in layers_of.values() for lay in ls))
        for lay in sel.layers:
            if lay not in stored:
                raise MissingError(f"no selected length group has layer {lay!r}; layers stored: "
                                   f"{', '.join(stored) or '(none)'}")
    for path, entry in sorted(entries.items()):
        parts = path.split("/")
        if parts[0] == S.RESULTS and len(parts) > 1:
            if sel.whole:
                _add_node(plan, path, M.own_document(entry))
            continue
        if parts[0] != S.RUNS or len(parts) < 2 or parts[1] not in runs:
            continue
        if len(parts) == 2:
            plan.nodes[path] = M.own_document(entry)
            continue
        child = parts[2]
        gp = "/".join(parts[:3])
        if child == S.WEIGHTS:
            if sel.weights:  # weights marked complete (S15) vouch for every chunk they hold
                done = bool((M.own_document(entries[gp]).get("attributes") or {}).get(S.ATTR_COMPLETE))
                _add_node(plan, path, M.own_document(entry), required=done)
            continue
        if S.parse_length_group(child) is not None:
            if gp in chosen:
                _add_length_node(plan, path, gp, M.own_document(entry), M.own_document(chosen[gp]),
                                 layers_of[gp], sel)
            continue
        _add_node(plan, path, M.own_document(entry))  # anything else a run holds: copied whole
    return plan


def _spec(group_doc: dict[str, Any]) -> dict[str, Any]:
    return cast("dict[str, Any]", (group_doc.get("attributes") or {}).get("spec") or {})


def _group_layers(source: _Side, gp: str, entries: dict[str, Any], plan: _Plan, where: str, *,
                  need: bool) -> list[str]:
    """A length group's layers: its ``spec.layers`` (layerstate's writer), else, when a layer
    subset needs them, the values of its ``layer`` coordinate, read from the source (S18);
    [] when neither says (nothing is then dropped)."""
    layers = _spec(M.own_document(entries[gp])).get("layers")
    if isinstance(layers, list) and layers:
        return [str(x) for x in layers]
    coord = entries.get(f"{gp}/layer")
    if not need or not isinstance(coord, dict) or coord.get("node_type") != "array":
        return []
    values, n = _read_array(source, f"{gp}/layer", M.own_document(coord), where)
    plan.fetched += n
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values.ravel().tolist()]


def _read_array(source: _Side, path: str, doc: dict[str, Any], where: str) -> tuple[np.ndarray, int]:
    """A small array read whole from the source (its chunks fetched and decoded here); and
    the bytes fetched."""
    meta = _meta(path, doc)
    shape = list(doc["shape"])
    chunk = list(doc["chunk_grid"]["configuration"]["chunk_shape"])
    keys = [meta.encode_chunk_key(tuple(c)) for c in _product([range(-(-s // c)) for s, c in
                                                                 zip(shape, chunk, strict=True)])]
    got = source.fetch([f"{path}/{k}" for k in keys]) if 0 not in shape else {}
    proto = default_buffer_prototype()
    items = {M.ZARR_JSON: proto.buffer.from_bytes(json.dumps(doc).encode())}
    n = 0
    for k in keys:
        body = got.get(f"{path}/{k}")
        if body is not None:
            items[k] = proto.buffer.from_bytes(body)
            n += len(body)
    try:
        with quiet():
            values = np.asarray(zarr.open_array(store=zarr.storage.MemoryStore(items), mode="r",
                                                zarr_format=3)[...])
    except Exception as exc:
        raise CorruptStoreError(
            f"{where}: {path} does not decode with its codecs ({type(exc).__name__}: {_first_line(exc)}); "
            f"`layerstate validate {where}`"
        ) from None
    return values, n


def _site_layer(name: str, layers: Sequence[str]) -> str | None:
    """The layer an extra site variable belongs to (``site_L1_cell`` -> ``L1``), if any."""
    if not name.startswith("site_"):
        return None
    rest = name[len("site_"):]
    for lay in sorted(layers, key=len, reverse=True):
        if rest == lay or rest.startswith(lay + "_"):
            return lay
    return None


def _add_length_node(plan: _Plan, path: str, gp: str, doc: dict[str, Any], group_doc: dict[str, Any],
                     all_layers: list[str], sel: Selection) -> None:
    idx = [i for i, lay in enumerate(all_layers) if sel.layers is None or lay in sel.layers]
    kept = [all_layers[i] for i in idx]
    dropped = set(all_layers) - set(kept)
    name = path[len(gp) + 1:] if path != gp else ""
    run = gp.split("/")[1]
    if path == gp:  # the group itself: its layout follows the subset
        attrs = dict(doc.get("attributes") or {})
        spec = dict(attrs.get("spec") or {})
        if dropped and spec:
            spec["layers"] = kept
            spec["extra"] = {k: v for k, v in (spec.get("extra") or {}).items()
                             if _site_layer(k, all_layers) not in dropped}
            attrs["spec"] = spec
            if isinstance(attrs.get("sites"), list):
                attrs["sites"] = [s for s in attrs["sites"] if str(s).split(".")[0] not in dropped]
        plan.nodes[path] = {**doc, "attributes": attrs}
        plan.layers[run] = kept
        return
    if _site_layer(name, all_layers) in dropped:
        return
    # A completion record (S23) lists the blocks written; without one the group was written
    # in one go and every chunk of its grid is data (a chunk not stored reads as fill, S6).
    attrs = group_doc.get("attributes") or {}
    recorded = completion(attrs).recorded
    done = set(cast("list[int]", attrs.get(S.ATTR_COMPLETED) or [])) if recorded else None
    dims = list(doc.get("dimension_names") or [])
    if doc.get("node_type") != "array":
        plan.nodes[path] = doc
        return
    if name == "layer" and dropped:  # the coordinate: rewritten with the kept names
        plan.nodes[path] = _resized(doc, 0, len(kept), chunk=max(len(kept), 1))
        plan.layer_coords[path] = kept
        return
    layer_axis = dims.index("layer") if "layer" in dims and dropped else None
    out = doc if layer_axis is None else _resized(doc, layer_axis, len(kept), chunk=1)
    plan.nodes[path] = out
    seq_axis = 0 if dims[:1] == ["sequence"] and name != "sequence" else None
    _add_chunks(plan, path, doc, out, seq_axis=seq_axis, blocks=done, layer_axis=layer_axis,
                layer_index=idx, required=recorded)


def _resized(doc: dict[str, Any], axis: int, n: int, *, chunk: int | None = None) -> dict[str, Any]:
    """An array document with ``axis`` of length ``n`` (and chunks of ``chunk`` along it, the
    inner chunks of a sharded array too, if given)."""
    out = json.loads(json.dumps(doc))
    out["shape"][axis] = n
    if chunk is not None:
        out["chunk_grid"]["configuration"]["chunk_shape"][axis] = chunk
        for codec in out.get("codecs") or []:
            conf = codec.get("configuration") if isinstance(codec, dict) else None
            if codec.get("name") == "sharding_indexed" and isinstance(conf, dict) and "chunk_shape" in conf:
                conf["chunk_shape"][axis] = chunk
    return out


def _add_node(plan: _Plan, path: str, doc: dict[str, Any], *, required: bool = True) -> None:
    plan.nodes[path] = doc
    if doc.get("node_type") == "array":
        _add_chunks(plan, path, doc, required=required)


def _meta(path: str, doc: dict[str, Any]) -> ArrayV3Metadata:
    try:
        with quiet():
            return ArrayV3Metadata.from_dict(dict(doc))
    except Exception as exc:
        raise CorruptStoreError(f"metadata of {path} is not valid Zarr v3 ({exc}); run `layerstate validate`") from None


def _add_chunks(plan: _Plan, path: str, doc: dict[str, Any], out: dict[str, Any] | None = None, *,
                seq_axis: int | None = None, blocks: set[int] | None = None,
                layer_axis: int | None = None, layer_index: Sequence[int] = (),
                required: bool = True) -> None:
    """The chunks of one array, enumerated from its metadata: every chunk of the grid, or
    only recorded ``blocks`` along ``seq_axis``; along ``layer_axis`` only the kept layers
    (``layer_index``: their source indices), renumbered in order. ``out`` is the target's
    document (one layer per chunk along ``layer_axis``); a source chunk holding several layers
    becomes a cut (decoded, sliced, re-encoded)."""
    out = doc if out is None else out
    meta, meta_out = _meta(path, doc), _meta(path, out)
    shape = list(out["shape"])
    chunk = list(out["chunk_grid"]["configuration"]["chunk_shape"])
    if any(s == 0 for s in shape):
        return
    grid = [range(-(-s // c)) for s, c in zip(shape, chunk, strict=True)]
    size, crc = _stored_size(doc)
    check = None if crc else _one_chunk(doc)  # no checksum: each chunk is decoded as it arrives
    step = 1 if layer_axis is None else int(doc["chunk_grid"]["configuration"]["chunk_shape"][layer_axis])
    cuts: dict[str, _Chunk] = {}
    one_src, one_out = (_one_chunk(doc), _one_chunk(out)) if step > 1 else ({}, {})
    for coord in _product(grid):
        if seq_axis is not None and blocks is not None and coord[seq_axis] not in blocks:
            continue
        dst = f"{path}/{meta_out.encode_chunk_key(tuple(coord))}"
        src = list(coord)
        if layer_axis is not None:
            src[layer_axis] = layer_index[coord[layer_axis]] // step
        key = f"{path}/{meta.encode_chunk_key(tuple(src))}"
        if step == 1:
            plan.chunks.append(_Chunk(key, dst, size, crc, required, check))
            continue
        assert layer_axis is not None
        c = cuts.get(key)
        if c is None:
            cut = _Cut(layer_axis, one_src, one_out, size=_stored_size(out)[0])
            c = cuts[key] = _Chunk(key, dst, size, crc, required, None, cut)
            plan.chunks.append(c)
        assert c.cut is not None
        c.cut.parts.append((dst, layer_index[coord[layer_axis]] % step))


def _product(grid: Sequence[range]) -> Iterator[tuple[int, ...]]:
    if not grid:
        yield ()
        return
    yield from np.ndindex(*(len(r) for r in grid))


def _stored_size(doc: dict[str, Any]) -> tuple[int | None, bool]:
    """(stored chunk size if the array is raw bytes + crc32c, whether it ends in crc32c)."""
    codecs = doc.get("codecs") or []
    crc = bool(codecs) and isinstance(codecs[-1], dict) and codecs[-1].get("name") == "crc32c"
    if not crc or len(codecs) != 2 or codecs[0].get("name") != "bytes":
        return None, crc
    if (codecs[0].get("configuration") or {}).get("endian", "little") != "little":
        return None, crc
    try:
        dtype = np.dtype(doc["data_type"])
    except (TypeError, KeyError):
        return None, crc
    if dtype.kind not in "biuf":
        return None, crc
    chunk = doc["chunk_grid"]["configuration"]["chunk_shape"]
    return math.prod(chunk) * dtype.itemsize + 4, crc


def _verify(data: bytes, c: _Chunk, where: str) -> None:
    if c.size is not None and len(data) != c.size:
        raise CorruptStoreError(f"{where}: chunk {c.src} has {len(data)} bytes, expected {c.size} "
                                f"(truncated?); `layerstate validate {where}`")
    if c.crc and not _crc_ok(data):
        raise CorruptStoreError(f"{where}: chunk {c.src} fails its crc32c (corrupt at the source, or "
                                f"damaged in transit); `layerstate validate {where}`")
    if c.doc is not None:  # no checksum: what can be checked is that it decodes
        _decode(c.doc, data, c.src, where)


def _crc_ok(data: bytes) -> bool:
    return len(data) >= 4 and crc32c.crc32c(data[:-4]) == int.from_bytes(data[-4:], "little")


def _produce(data: bytes, c: _Chunk, where: str) -> dict[str, bytes]:
    """The target bodies one fetched chunk gives, after checking it: the chunk as it is, or,
    for a cut, each kept layer re-encoded with the array's codecs."""
    _verify(data, c, where)
    if c.cut is None:
        return {c.dst: data}
    cut = c.cut
    values = _decode(cut.src_doc, data, c.src, where)
    out = {}
    for key, i in cut.parts:
        index: list[Any] = [slice(None)] * values.ndim
        index[cut.axis] = slice(i, i + 1)
        out[key] = _encode(cut.dst_doc, values[tuple(index)])
    return out


def _one_chunk(doc: dict[str, Any]) -> dict[str, Any]:
    """An array document whose shape is its chunk shape: a store holding one chunk of it."""
    out = json.loads(json.dumps(doc))
    out["shape"] = list(doc["chunk_grid"]["configuration"]["chunk_shape"])
    out.pop("consolidated_metadata", None)
    return out


def _chunk_store(doc: dict[str, Any], body: bytes | None) -> tuple[Any, dict[str, Any], str]:
    """A memory store holding the one-chunk array ``doc`` (and its chunk, if given)."""
    proto = default_buffer_prototype()
    key = ArrayV3Metadata.from_dict(dict(doc)).encode_chunk_key((0,) * len(doc["shape"]))
    items = {M.ZARR_JSON: proto.buffer.from_bytes(json.dumps(doc).encode())}
    if body is not None:
        items[key] = proto.buffer.from_bytes(body)
    return zarr.storage.MemoryStore(items), items, key


def _decode(doc: dict[str, Any], body: bytes, key: str, where: str) -> np.ndarray:
    """One chunk's values, decoded with the array's own codecs (``doc`` from :func:`_one_chunk`)."""
    try:
        with quiet():
            ms, _items, _k = _chunk_store(doc, body)
            return np.asarray(zarr.open_array(store=ms, mode="r", zarr_format=3)[...])
    except Exception as exc:  # any codec's failure: zstd, gzip, blosc, sharding, a short body
        raise CorruptStoreError(
            f"{where}: chunk {key} does not decode with its array's codecs ({type(exc).__name__}: "
            f"{_first_line(exc)}): damaged at the source or in transit; `layerstate validate {where}`"
        ) from None


def _encode(doc: dict[str, Any], values: np.ndarray) -> bytes:
    """The stored body of one chunk holding ``values`` (``doc`` from :func:`_one_chunk`)."""
    with quiet():
        ms, items, key = _chunk_store(doc, None)
        arr = zarr.open_array(store=ms, mode="r+", zarr_format=3, config={"write_empty_chunks": True})
        arr[...] = values
    return cast("bytes", items[key].to_bytes())


def _part_ok(target: _Side, have: dict[str, int], key: str, size: int | None, crc: bool) -> bool:
    """The target holds ``key`` whole (files are renamed into place whole, objects written
    whole) with its expected size; on a local disk its checksum is checked too."""
    if key not in have or (size is not None and have[key] != size):
        return False
    if target.local and crc:
        return _crc_ok(Path(target.path(key)).read_bytes())
    return True


def _already(target: _Side, have: dict[str, int], c: _Chunk) -> bool:
    """Every target body of this chunk is there already (no transfer)."""
    return all(_part_ok(target, have, key, size, c.crc) for key, size in c.targets())


def _rounds(items: list[_Chunk], n: int) -> Iterable[list[_Chunk]]:
    for i in range(0, len(items), n):
        yield items[i: i + n]


# ---------------------------------------------------------------------- the target
def _plan_key(src: str, sel: Selection, plan: _Plan) -> str:
    body = json.dumps({"source": src, "selection": sel.record(),
                       "nodes": {p: M.digest(d) for p, d in sorted(plan.nodes.items())}},
                      sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _marker(marker: dict[str, Any], absent: set[str]) -> bytes:
    return json.dumps({**marker, "absent": sorted(absent)}, indent=1, sort_keys=True).encode()


def _claim(target: _Side, key: str, src: Location, dst: Location, sel: Selection) -> dict[str, Any]:
    """Start a copy at ``target``, or resume the unfinished copy of the same plan there; the
    marker (with the chunks found absent at the source so far)."""
    if target.exists():
        raw = target.get(MARKER)
        found, _ = M.parse(raw) if raw is not None else (None, None)
        if found is None:
            listing = target.sizes()
            if listing:
                what = "a store" if M.ZARR_JSON in listing else "files"
                raise RunConflictError(f"{dst} exists and holds {what}; copy into a new directory or URL")
        elif found.get("plan") != key:
            raise RunConflictError(
                f"{dst} holds an unfinished copy of {found.get('source')} with another selection "
                f"or an older version of it ({found.get('selection')}); finish that one with the "
                "same options, or copy into a new directory"
            )
        else:
            if target.local:  # a killed copy leaves at most temp files: clear them
                for stray in Path(target.root).rglob("*.partial"):
                    stray.unlink(missing_ok=True)
            return found
    marker = {"format": MARKER_FORMAT, "plan": key, "source": str(src), "selection": sel.record()}
    target.put(MARKER, _marker(marker, set()))
    return marker


def _write_nodes(target: _Side, plan: _Plan, root: dict[str, Any], sel: Selection, src: str) -> None:
    """Every node's document, the rewritten ``layer`` coordinates, then the root document and a
    consolidation (snapshot + digests): only then is the target a store."""
    docs = {M.file_of(p): M.render(d) for p, d in sorted(plan.nodes.items())}
    target.put_many(docs)
    attrs = dict(root.get("attributes") or {})
    if not sel.whole:
        attrs["copied_from"] = {"url": src, **sel.record()}
    root_doc = {**M.own_document(root), "attributes": attrs}
    target.put(M.ZARR_JSON, M.render(root_doc))
    if plan.layer_coords:
        zs = target.loc.zarr_store(read_only=False, guarded=False)
        with quiet():
            for path, values in plan.layer_coords.items():
                arr = zarr.open_array(store=zs, path=path, mode="r+", zarr_format=3)
                arr[...] = np.asarray(values, dtype=str)
    with warnings.catch_warnings():  # zarr notes the marker file when it lists the root
        warnings.filterwarnings("ignore", message=f"Object at {re.escape(MARKER)} is not recognized")
        st = Store.open(target.loc.url, mode="r+", storage_options=target.loc.storage_options)
        st.consolidate()


# ---------------------------------------------------------------------- helpers
def _opt_list(values: Sequence[Any] | None, conv: Callable[[Any], Any] = str) -> list[Any] | None:
    if values is None:
        return None
    out = [conv(v) for v in values]
    return out or None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def format_report(rep: TransferReport) -> str:
    """One line: what was copied, how much was fetched."""
    runs = ", ".join(rep.runs) or "(none)"
    return (f"{rep.target}: {len(rep.runs)} run(s) ({runs}) from {rep.source}; "
            f"{rep.copied} chunk(s) copied, {rep.skipped} already there"
            f"{f', {rep.absent} never stored at the source (read as fill)' if rep.absent else ''}; "
            f"{rep.fetched_bytes / 2**20:.1f} MiB read for {rep.target_bytes / 2**20:.1f} MiB stored")
