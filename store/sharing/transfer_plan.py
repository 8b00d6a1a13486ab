"""What a copy of a store (``pull``/``push``, :mod:`store.sharing.transfer`) will write: reading the
source's root and snapshot, then the plan of nodes and chunks for the selection.

The source's root ``zarr.json`` holds a consolidated snapshot (S32) of every node, so nothing
is listed on the remote; the snapshot entries are checked against the digests in
``layerstate-metadata.json`` (S34) when the source has them. The chunk keys of the selected
runs, lengths (every kind: ``len_``, ``cfclean_``, …) and layers are enumerated from each
array's own metadata (shape and chunk grid): a group with a completion record (S23) gives
only the blocks it records as written, one without gives every chunk of its grid. A layer
subset of an array chunked one layer per chunk (S21) is a subset of chunk files, renumbered;
an array whose chunks hold several layers is cut (:class:`LayerCut`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import zarr
import zarr.storage
from zarr.core.buffer import default_buffer_prototype
from zarr.core.metadata import ArrayV3Metadata

from store.errors import SchemaVersionError

from ..errors import CorruptStoreError, MissingError, NotAStoreError
from ..io.lengths import completion
from ..metadata.digests import ZARR_JSON, digest, own_document, parse
from ..schema import (
    ATTR_COMPLETE,
    ATTR_COMPLETED,
    METADATA_COPY,
    RESULTS,
    RUNS,
    WEIGHTS,
    parse_length_group,
    schema_refusal,
)
from ..zarrutil import quiet
from .transfer_side import first_line

if TYPE_CHECKING:
    from .transfer_side import Side


@dataclass
class CopySelection:
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
class LayerCut:
    """The kept layers of a source chunk that holds several: decoded, sliced along ``axis``
    and re-encoded one layer per target chunk."""

    axis: int
    src_doc: dict[str, Any]                 # the source array as one chunk (for decoding)
    dst_doc: dict[str, Any]                 # the target array as one chunk (for encoding)
    parts: list[tuple[str, int]] = field(default_factory=list)  # (target key, index in the chunk)
    size: int | None = None                 # expected size of each part (raw + crc32c), if known


@dataclass
class ChunkCopy:
    src: str               # key in the source
    dst: str               # key in the target (the first part's, for a cut)
    size: int | None       # expected stored size (raw + crc32c arrays), None if unknown
    crc: bool              # the codec chain ends in crc32c
    required: bool = True  # a completion record vouches for it: absent at the source is damage
    doc: dict[str, Any] | None = None  # without crc32c: the array as one chunk, to decode it
    cut: LayerCut | None = None

    def targets(self) -> list[tuple[str, int | None]]:
        """Every target key this chunk fills, with its expected size where known."""
        if self.cut is None:
            return [(self.dst, self.size)]
        return [(k, self.cut.size) for k, _i in self.cut.parts]


@dataclass
class CopyPlan:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)   # path -> document to write
    chunks: list[ChunkCopy] = field(default_factory=list)
    layer_coords: dict[str, list[str]] = field(default_factory=dict)  # array path -> values
    fetched: int = 0  # bytes read from the source while planning (layer coordinates)
    runs: list[str] = field(default_factory=list)
    lengths: dict[str, list[int]] = field(default_factory=dict)
    layers: dict[str, list[str]] = field(default_factory=dict)

# ---------------------------------------------------------------------- reading the source
def read_root(source: Side) -> tuple[dict[str, Any], int]:
    loc = source.loc
    raw = source.get(ZARR_JSON)
    if raw is None:
        what = "does not exist" if not source.exists() else "holds no zarr.json at its root"
        raise NotAStoreError(f"{loc} {what}: not a layerstate store; check the URL (a store's "
                             "root holds zarr.json and runs/)")
    doc, why = parse(raw)
    if doc is None:
        raise CorruptStoreError(f"{loc}/zarr.json is damaged ({why}); `layerstate repair` it at its source")
    schema = (doc.get("attributes") or {}).get("schema")
    if doc.get("node_type") != "group" or schema is None:
        raise NotAStoreError(f"{loc} is a Zarr node but not a layerstate store (no 'schema' attribute)")
    refusal = schema_refusal(schema)
    if refusal is not None:
        raise SchemaVersionError(f"{loc} {refusal}")
    return doc, len(raw)


def check_digests(source: Side, root: dict[str, Any], entries: dict[str, Any]) -> int:
    """Compare the snapshot with the digests recorded beside it (S34), when there are any."""
    raw = source.get(METADATA_COPY)
    if raw is None:
        return 0
    copy, _ = parse(raw)
    digests = (copy or {}).get("digests")
    if not isinstance(digests, dict):
        return len(raw)
    bad = [p for p, e in entries.items() if p in digests and digests[p] != digest(own_document(e))]
    if bad:
        raise CorruptStoreError(
            f"{source.loc}: the metadata snapshot disagrees with its recorded digests at {bad[0]}"
            f"{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}; run `layerstate validate` "
            "and `layerstate repair` on the source first"
        )
    return len(raw)


# ---------------------------------------------------------------------- the plan
def plan_copy(root: dict[str, Any], entries: dict[str, Any], sel: CopySelection, where: str,
          source: Side) -> CopyPlan:
    plan = CopyPlan()
    runs_here = sorted(p.split("/")[1] for p in entries if re.fullmatch(rf"{RUNS}/[^/]+", p))
    runs = runs_here if sel.runs is None else sel.runs
    missing = [r for r in runs if r not in runs_here]
    if missing:
        raise MissingError(f"{where} has no run {missing[0]!r}; its runs: {', '.join(runs_here) or '(none)'}")
    plan.runs = list(runs)
    for p in (RUNS, RESULTS):
        if p in entries:
            plan.nodes[p] = own_document(entries[p])
    groups: dict[str, dict[str, tuple[str, int]]] = {}
    for p in entries:
        parts = p.split("/")
        if len(parts) == 3 and parts[0] == RUNS and parts[1] in runs:
            parsed = parse_length_group(parts[2])
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
        if parts[0] == RESULTS and len(parts) > 1:
            if sel.whole:
                _add_node(plan, path, own_document(entry))
            continue
        if parts[0] != RUNS or len(parts) < 2 or parts[1] not in runs:
            continue
        if len(parts) == 2:
            plan.nodes[path] = own_document(entry)
            continue
        child = parts[2]
        gp = "/".join(parts[:3])
        if child == WEIGHTS:
            if sel.weights:  # weights marked complete (S15) vouch for every chunk they hold
                done = bool((own_document(entries[gp]).get("attributes") or {}).get(ATTR_COMPLETE))
                _add_node(plan, path, own_document(entry), required=done)
            continue
        if parse_length_group(child) is not None:
            if gp in chosen:
                _add_length_node(plan, path, gp, own_document(entry), own_document(chosen[gp]),
                                 layers_of[gp], sel)
            continue
        _add_node(plan, path, own_document(entry))  # anything else a run holds: copied whole
    return plan


def _spec(group_doc: dict[str, Any]) -> dict[str, Any]:
    return cast("dict[str, Any]", (group_doc.get("attributes") or {}).get("spec") or {})


def _group_layers(source: Side, gp: str, entries: dict[str, Any], plan: CopyPlan, where: str, *,
                  need: bool) -> list[str]:
    """A length group's layers: its ``spec.layers`` (layerstate's writer), else, when a layer
    subset needs them, the values of its ``layer`` coordinate, read from the source (S18);
    [] when neither says (nothing is then dropped)."""
    layers = _spec(own_document(entries[gp])).get("layers")
    if isinstance(layers, list) and layers:
        return [str(x) for x in layers]
    coord = entries.get(f"{gp}/layer")
    if not need or not isinstance(coord, dict) or coord.get("node_type") != "array":
        return []
    values, n = _read_array(source, f"{gp}/layer", own_document(coord), where)
    plan.fetched += n
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values.ravel().tolist()]


def _read_array(source: Side, path: str, doc: dict[str, Any], where: str) -> tuple[np.ndarray, int]:
    """A small array read whole from the source (its chunks fetched and decoded here); and
    the bytes fetched."""
    meta = _meta(path, doc)
    shape = list(doc["shape"])
    chunk = list(doc["chunk_grid"]["configuration"]["chunk_shape"])
    keys = [meta.encode_chunk_key(tuple(c)) for c in _product([range(-(-s // c)) for s, c in
                                                                 zip(shape, chunk, strict=True)])]
    got = source.fetch([f"{path}/{k}" for k in keys]) if 0 not in shape else {}
    proto = default_buffer_prototype()
    items = {ZARR_JSON: proto.buffer.from_bytes(json.dumps(doc).encode())}
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
            f"{where}: {path} does not decode with its codecs ({type(exc).__name__}: {first_line(exc)}); "
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


def _add_length_node(plan: CopyPlan, path: str, gp: str, doc: dict[str, Any], group_doc: dict[str, Any],
                     all_layers: list[str], sel: CopySelection) -> None:
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
    done = set(cast("list[int]", attrs.get(ATTR_COMPLETED) or [])) if recorded else None
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


def _add_node(plan: CopyPlan, path: str, doc: dict[str, Any], *, required: bool = True) -> None:
    plan.nodes[path] = doc
    if doc.get("node_type") == "array":
        _add_chunks(plan, path, doc, required=required)


def _meta(path: str, doc: dict[str, Any]) -> ArrayV3Metadata:
    try:
        with quiet():
            return ArrayV3Metadata.from_dict(dict(doc))
    except Exception as exc:
        raise CorruptStoreError(f"metadata of {path} is not valid Zarr v3 ({exc}); run `layerstate validate`") from None


def _add_chunks(plan: CopyPlan, path: str, doc: dict[str, Any], out: dict[str, Any] | None = None, *,
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
    check = None if crc else one_chunk_doc(doc)  # no checksum: each chunk is decoded as it arrives
    step = 1 if layer_axis is None else int(doc["chunk_grid"]["configuration"]["chunk_shape"][layer_axis])
    cuts: dict[str, ChunkCopy] = {}
    one_src, one_out = (one_chunk_doc(doc), one_chunk_doc(out)) if step > 1 else ({}, {})
    for coord in _product(grid):
        if seq_axis is not None and blocks is not None and coord[seq_axis] not in blocks:
            continue
        dst = f"{path}/{meta_out.encode_chunk_key(tuple(coord))}"
        src = list(coord)
        if layer_axis is not None:
            src[layer_axis] = layer_index[coord[layer_axis]] // step
        key = f"{path}/{meta.encode_chunk_key(tuple(src))}"
        if step == 1:
            plan.chunks.append(ChunkCopy(key, dst, size, crc, required, check))
            continue
        assert layer_axis is not None
        c = cuts.get(key)
        if c is None:
            cut = LayerCut(layer_axis, one_src, one_out, size=_stored_size(out)[0])
            c = cuts[key] = ChunkCopy(key, dst, size, crc, required, None, cut)
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


# ---------------------------------------------------------------------- helpers
def one_chunk_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """An array document whose shape is its chunk shape: a store holding one chunk of it."""
    out = json.loads(json.dumps(doc))
    out["shape"] = list(doc["chunk_grid"]["configuration"]["chunk_shape"])
    out.pop("consolidated_metadata", None)
    return out


