"""``validate``: every metadata file, the schema, the completion records and every chunk's
checksum.

Every node's ``zarr.json`` is parsed and compared with its copy in the consolidated snapshot
and with the digest recorded at the last consolidation (:func:`store.metadata.damage.check`). Zarr
reads a missing chunk silently as its fill value, so existence is checked against the
completion records, and every present chunk is decoded, which verifies its crc32c.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import numpy as np
import zarr
from zarr.codecs import ShardingCodec
from zarr.core.metadata import ArrayV3Metadata
from zarr.core.sync import sync

from ..access.location import Location
from ..core import Store
from ..errors import LayerstateError, MetadataDamagedError, NotAStoreError
from ..io import lengths
from ..metadata import damage, digests
from ..paired import PairedStore
from ..schema import (
    ATTR_COMPLETED,
    METADATA_COPY,
    RESULTS,
    ROOT_REQUIRED_ATTRS,
    RUN_REQUIRED_ATTRS,
    RUNS,
    WEIGHTS,
    check_run_id,
    parse_length_group,
    schema_refusal,
)
from ..zarrutil import chunk_key, group, iter_arrays, quiet


@dataclass
class Report:
    """What ``validate`` found: ``problems`` is empty for a healthy store."""

    location: str
    n_arrays: int = 0
    n_chunks: int = 0
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: metadata files checked (every node's zarr.json, the root and its copy)
    n_metadata: int = 0
    #: what the metadata comparison found (``repair`` acts on it); None if not run
    metadata: damage.MetadataCheck | None = None
    #: ``(array path, chunk index, group path or None, blocks)`` of each damaged or missing
    #: chunk (a shard, in a sharded array); ``blocks``: the blocks (S21) its rows belong to, ()
    #: for an array not laid out by sequence
    damaged_chunks: list[tuple[str, tuple[int, ...], str | None, tuple[int, ...]]] = field(
        default_factory=list)
    #: numeric arrays whose chunks carry no crc32c (S4): damage to them cannot be detected
    unchecksummed: list[str] = field(default_factory=list)
    #: chunks not stored in groups without a completion record (read as the fill value, S6)
    absent: list[str] = field(default_factory=list)
    #: warnings were turned into problems (``validate --strict``)
    strict: bool = False
    #: every length group checked -> its layers (what :mod:`store.integrity.assess` counts as intact)
    groups: dict[str, list[str]] = field(default_factory=dict)
    #: length group -> what its damaged chunks lose: layer names (a ``hidden`` chunk), ``logits``,
    #: a label's or site's name, or ``*`` (a chunk every analysis of the group reads)
    lost: dict[str, set[str]] = field(default_factory=dict)
    #: runs whose weights hold a damaged chunk
    weights_damaged: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def validate(store: Store | str, *, check_chunks: bool = True,
             storage_options: dict | None = None, strict: bool = False) -> Report:
    """Check a store against schema ``layerstate/1``: every metadata file, then every chunk.

    ``store`` is an open :class:`Store` or its URL; a URL whose root metadata is damaged is
    still checked (a :class:`Store` could not be opened on it).

    Graded as docs/store-format.md grades its rules: a broken MUST (a missing variable, wrong
    dims, a damaged chunk, non-finite values where finite ones are required, ...) is a
    problem; a missing SHOULD (checksums, every chunk stored, a declared target among several
    labels, metadata digests, ...) or a state worth knowing (an incomplete length, a write in
    progress) is a warning. ``strict``: warnings count as problems too.

    Returns
    -------
    Report
        ``problems`` names each damaged or disagreeing metadata file and each failing group,
        array and chunk; ``warnings`` lists things that are legal but worth knowing.
    """
    rep = _validate(store, check_chunks=check_chunks, storage_options=storage_options)
    if strict:
        rep.problems += [f"{w} (a warning; --strict)" for w in rep.warnings]
        rep.warnings, rep.strict = [], True
    return rep


def _is_a_store(loc: Location) -> None:
    """Refuse, as opening it would, a path that does not exist or holds no store at all (no
    root metadata and no copy of it): nothing there to validate or repair."""
    if not loc.exists():
        raise NotAStoreError(loc.missing())
    if loc.is_zip:  # a zip is a store or a damaged one: validate says which
        return
    zs = loc.zarr_store(read_only=True, guarded=False)
    if not sync(zs.exists("zarr.json")) and not sync(zs.exists(METADATA_COPY)):
        raise NotAStoreError(loc.not_a_store())


def _validate(store: Store | str, *, check_chunks: bool, storage_options: dict | None) -> Report:
    if isinstance(store, PairedStore):  # the source, then its results store
        rep = _validate(store.source, check_chunks=check_chunks, storage_options=None)
        other = _validate(store.results_store, check_chunks=check_chunks, storage_options=None)
        where = f"results store {store.results_location}"
        rep.problems += [f"{where}: {p}" for p in other.problems]
        rep.warnings += [f"{where}: {w}" for w in other.warnings]
        rep.n_arrays += other.n_arrays
        rep.n_chunks += other.n_chunks
        rep.n_metadata += other.n_metadata
        rep.damaged_chunks += other.damaged_chunks
        rep.groups.update(other.groups)
        rep.lost.update(other.lost)
        rep.weights_damaged += other.weights_damaged
        rep.unchecksummed += other.unchecksummed
        rep.absent += other.absent
        return rep
    loc = store.location if isinstance(store, Store) else Location(store, storage_options or {})
    if not isinstance(store, Store):
        _is_a_store(loc)
    rep = Report(str(loc))
    with quiet():
        meta = damage.check(loc.zarr_store(read_only=True, guarded=False), str(loc))
    rep.metadata, rep.n_metadata = meta, meta.n_nodes
    no_snapshot = _no_snapshot(loc)
    for f in meta.findings:
        # A store written without a consolidated snapshot (S32 is a SHOULD: only readers that
        # cannot list, like a plain web server, need it) is read by listing: a warning.
        problem = f.problem and not (no_snapshot and f.path == "" and f.action == "consolidate")
        (rep.problems if problem else rep.warnings).append(f.line())
    if not meta.root_ok:
        rep.warnings.append("schema and chunks not checked: the root metadata must be repaired first")
        return rep
    use_snapshot = meta.snapshot_parses and not meta.snapshot_damaged
    try:
        if not isinstance(store, Store) or not use_snapshot:
            store = Store.open(loc.url, storage_options=loc.storage_options,
                               consolidated=None if use_snapshot else False)
    except LayerstateError as exc:
        rep.problems.append(str(exc))
        return rep
    with quiet():
        _check_store(store, rep, check_chunks)
    return rep


def _no_snapshot(loc: Location) -> bool:
    """Whether the root document parses and simply has no consolidated snapshot."""
    raw = digests.get(loc.zarr_store(read_only=True, guarded=False), "zarr.json")
    doc = None if raw is None else digests.parse(raw)[0]
    return doc is not None and doc.get("consolidated_metadata") is None


def _check_store(store: Store, rep: Report, check_chunks: bool) -> None:
    attrs = store.attrs
    for key in ROOT_REQUIRED_ATTRS:
        if key not in attrs:
            rep.problems.append(f"root: missing attribute {key!r}")
    refusal = schema_refusal(attrs.get("schema")) if "schema" in attrs else None
    if refusal is not None:  # (Store.open refuses such a store: kept for an open Store)
        rep.problems.append(f"root {refusal} (docs/store-format.md, 'Versions')")
    if RUNS not in store.root:
        rep.problems.append("root: missing group 'runs' (S7): create it, with one group per run")
        return
    for rid in store.run_ids():
        try:
            _check_run(store, rid, rep, check_chunks)
        except MetadataDamagedError:  # named by the metadata check above
            rep.warnings.append(f"runs/{rid}: not checked further (damaged metadata)")
    if check_chunks and RESULTS in store.root:
        try:
            for path, arr in iter_arrays(group(store.root, RESULTS), f"{RESULTS}/"):
                _check_chunks(arr, path, rep, _Expect())
        except MetadataDamagedError:
            rep.warnings.append("results: not checked further (damaged metadata)")
    if rep.unchecksummed:
        n = len(rep.unchecksummed)
        rep.warnings.append(
            f"{n} array{'s' if n > 1 else ''} without a crc32c checksum codec (first: "
            f"{rep.unchecksummed[0]}) (S4): damage to their chunks cannot be detected; write "
            "numeric arrays with a crc32c codec"
        )


def _check_run(store: Store, rid: str, rep: Report, check_chunks: bool) -> None:
    run = store.run_group(rid)
    a = dict(run.attrs)
    try:
        check_run_id(rid)
    except ValueError as exc:
        rep.problems.append(f"runs/{rid}: {exc} (S8)")
    missing = [key for key in RUN_REQUIRED_ATTRS if key not in a]
    for key in missing:
        rep.problems.append(f"runs/{rid}: missing attribute {key!r} (S9): every run needs "
                            "task, arch, variant and seed")
    for key in ("task", "arch", "variant"):
        if key in a and not isinstance(a[key], str):
            rep.problems.append(f"runs/{rid}: attribute {key!r} is {a[key]!r}; it must be a string (S9)")
    if "seed" in a and (isinstance(a["seed"], bool) or not isinstance(a["seed"], int)):
        rep.problems.append(f"runs/{rid}: attribute 'seed' is {a['seed']!r}; it must be an integer (S9)")
    for name, grp in run.groups():
        path = f"runs/{rid}/{name}"
        if name == WEIGHTS:
            if not grp.attrs.get("complete"):
                rep.warnings.append(f"{path}: weights incomplete (training interrupted?)")
            if check_chunks:
                before = len(rep.damaged_chunks)
                for apath, arr in iter_arrays(grp, f"{path}/"):
                    _check_chunks(arr, apath, rep, _Expect(group=path, finite=True))
                if len(rep.damaged_chunks) > before:
                    rep.weights_damaged.append(rid)
            continue
        if parse_length_group(name):
            _check_length(grp, path, rep, check_chunks, a)


def _check_length(grp: zarr.Group, path: str, rep: Report, check_chunks: bool, run_attrs: dict) -> None:
    ga = dict(grp.attrs)
    state = lengths.completion(ga)
    if "spec" not in ga and state.recorded and not state.done and "n_blocks" not in ga:
        # layerstate's writer creates a group with an empty record and adds its spec last
        rep.warnings.append(f"{path}: layout never finished (writer killed while creating it)")
        return
    arrays = dict(grp.arrays())
    rep.problems += lengths.layout_problems(grp, path, arrays)
    labels = lengths.label_names(grp, arrays)
    declared = ga.get("target")
    if declared is not None and declared not in labels:
        rep.problems.append(f"{path}: target {declared!r} is not one of its labels "
                            f"({', '.join(labels) or 'none'}) (S23): name one of them")
    elif len(labels) > 1 and lengths.declared_target(ga, labels, run_attrs) is None:
        rep.warnings.append(
            f"{path}: {len(labels)} labels ({', '.join(labels)}) and no declared target (S23): "
            "analyses need --target; set the group attribute 'target'"
        )
    if "layer" in arrays and lengths.dtype_kind(arrays["layer"]) == "U":
        rep.warnings.append(
            f"{path}/layer: fixed-width strings ({arrays['layer'].dtype}) have no Zarr v3 data type "
            "spec (S2): other Zarr readers may not read them; write variable-length strings"
        )
    if not state.complete:
        rep.warnings.append(
            f"{path}: incomplete, {state.done} of {state.n_blocks} blocks written (resume the capture)"
        )
    allowed = bool(ga.get("nonfinite_allowed"))
    if allowed:
        rep.warnings.append(f"{path}: written with allow_nonfinite=True (may hold NaN/Inf)")
    if not check_chunks:
        return
    done = set(cast("list[int]", ga.get(ATTR_COMPLETED) or [])) if state.recorded else None
    absent_before, damaged_before = len(rep.absent), len(rep.damaged_chunks)
    layers = _layers(ga, arrays)
    rep.groups[path] = layers
    for name, arr in arrays.items():
        names = lengths.dim_names(arr)
        seq_axis = 0 if names and names[0] == "sequence" and name != "sequence" else None
        _check_chunks(arr, f"{path}/{name}", rep, _Expect(group=path, seq_axis=seq_axis, blocks=done,
                                                          finite=not allowed))
    for apath, idx, _group, _held in rep.damaged_chunks[damaged_before:]:
        name = apath.rsplit("/", 1)[-1]
        rep.lost.setdefault(path, set()).update(_loses(name, idx, arrays[name], layers, labels))
    absent = rep.absent[absent_before:]
    if absent:
        rep.warnings.append(
            f"{path}: {len(absent)} chunk(s) not stored (first: {absent[0]}), read as their fill "
            "value (S6): write every chunk (zarr's write_empty_chunks=True)"
        )


def _layers(ga: dict, arrays: dict[str, zarr.Array]) -> list[str]:
    """A length group's layer names: its spec's, else its ``layer`` coordinate, else by index."""
    spec = ga.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("layers"), list):
        return [str(x) for x in spec["layers"]]
    try:
        return [str(x) for x in np.asarray(arrays["layer"][:])]
    except Exception:  # absent or damaged itself: by position along the layer axis
        hidden = arrays.get("hidden")
        n = hidden.shape[2] if hidden is not None and hidden.ndim == 4 else 0
        return [f"layer {i}" for i in range(n)]


def _loses(name: str, idx: tuple[int, ...], arr: zarr.Array, layers: list[str], labels: list[str]) -> set[str]:
    """What analyses of a length group cannot read when chunk ``idx`` of its array ``name`` is
    damaged: the layers a ``hidden`` chunk spans, ``logits``, a label or a site by name, or
    ``*`` for the arrays every analysis reads (tokens, mask, the coordinates)."""
    if name == "hidden" and len(idx) == 4 and len(layers) == arr.shape[2]:
        step = _stored_shape(arr)[2]
        return set(layers[idx[2] * step:(idx[2] + 1) * step])
    if name == "logits" or name.startswith("site_") or name in labels:
        return {name}
    return {"*"}


def _has_crc32c(arr: zarr.Array) -> bool:
    """Whether ``arr``'s chunk data ends in a crc32c codec. In a sharded array that is the
    inner chunks' codecs: the crc32c zarr puts on a shard's index protects only the offsets."""
    md = arr.metadata
    if not isinstance(md, ArrayV3Metadata):
        return False
    codecs = tuple(md.codecs)
    while len(codecs) == 1 and isinstance(codecs[0], ShardingCodec):  # shards of shards too
        codecs = tuple(codecs[0].codecs)
    return any(c.to_dict().get("name") == "crc32c" for c in codecs)


def _stored_shape(arr: zarr.Array) -> tuple[int, ...]:
    """The shape of what one store key holds: a shard of a sharded array, else a chunk.

    ``arr.chunks`` and ``arr.cdata_shape`` count a sharded array's *inner* chunks, which
    have no key of their own; a shard is read and decoded whole (its index, then every inner
    chunk with its codecs), so ``validate`` walks the grid of shards.
    """
    return tuple(arr.shards or arr.chunks)


@dataclass
class _Expect:
    """Which chunks of an array must be stored and whether its values must be finite.

    ``blocks``: the recorded blocks along ``seq_axis`` (a chunk outside them may be absent);
    None for an array without a completion record, whose absent chunks are noted (S6). A
    block is one (inner) chunk along ``seq_axis``, as layerstate's writer lays them out (S21).
    ``finite``: count NaN/inf in float chunks that must be stored (S20).
    """

    group: str | None = None
    seq_axis: int | None = None
    blocks: set[int] | None = field(default_factory=set)
    finite: bool = False

    @property
    def recorded(self) -> bool:
        return self.blocks is not None

    def rows(self, arr: zarr.Array, idx: tuple[int, ...], stored: tuple[int, ...]) -> np.ndarray | bool:
        """Which rows (along ``seq_axis``) of stored chunk ``idx`` belong to recorded blocks:
        True (all of them, or the array has no completion record), False (none), or a mask
        (a shard holding several blocks, only some recorded)."""
        if self.blocks is None or self.seq_axis is None:
            return True
        ax = self.seq_axis
        start = idx[ax] * stored[ax]
        rows = np.arange(start, min(start + stored[ax], arr.shape[ax]))
        mask = np.isin(rows // arr.chunks[ax], sorted(self.blocks))
        return True if mask.all() else (False if not mask.any() else mask)

    def blocks_of(self, arr: zarr.Array, idx: tuple[int, ...], stored: tuple[int, ...]) -> tuple[int, ...]:
        """The blocks (inner chunks along ``seq_axis``) that stored chunk ``idx`` holds rows of:
        one for a plain chunk, several for a shard spanning blocks; () without a sequence axis."""
        if self.seq_axis is None or not idx:
            return ()
        ax = self.seq_axis
        start = idx[ax] * stored[ax]
        stop = min(start + stored[ax], arr.shape[ax])
        return tuple(range(start // arr.chunks[ax], -(-stop // arr.chunks[ax])))


def _check_chunks(arr: zarr.Array, path: str, rep: Report, expect: _Expect) -> None:
    """Decode every chunk there is (which verifies its crc32c); a chunk of a recorded block
    must exist; float chunks that hold data must be finite where ``expect.finite``.

    A sharded array is checked shard by shard (its store keys, :func:`_stored_shape`): an
    absent shard is an absent chunk; a present one is decoded whole. An inner chunk a shard's
    index marks as never written reads as the fill value, like an absent chunk (S6), and is
    counted as such by the NaN/inf check when the fill value is NaN.
    """
    rep.n_arrays += 1
    kind = lengths.dtype_kind(arr)
    if kind in "biuf" and not _has_crc32c(arr):
        rep.unchecksummed.append(path)
    count_nonfinite = expect.finite and kind == "f"
    what = "shard" if arr.shards else "chunk"
    nonfinite = bad_chunks = 0
    store = arr.store_path.store
    stored = _stored_shape(arr)
    grid = tuple(-(-s // c) for s, c in zip(arr.shape, stored, strict=True))
    for idx in np.ndindex(*grid):
        rows = expect.rows(arr, idx, stored)
        key = chunk_key(arr, idx)
        if not _exists(store, key):
            if not expect.recorded:  # another tool's group: zarr may skip chunks of fill values
                rep.absent.append(f"{path} {what} {idx}")
                if count_nonfinite and not np.isfinite(arr.fill_value):
                    n = int(np.prod(_chunk_shape(arr, idx, stored)))
                    nonfinite, bad_chunks = nonfinite + n, bad_chunks + 1
            elif rows is not False:
                rep.problems.append(f"{path}: {what} {idx} is missing ({key}) though recorded as written")
                rep.damaged_chunks.append((path, idx, expect.group, expect.blocks_of(arr, idx, stored)))
            continue
        rep.n_chunks += 1
        try:
            decoded = np.asarray(arr.get_block_selection(idx))  # by store keys: shards if sharded
        except Exception as exc:  # crc32c mismatch, truncated chunk, undecodable bytes
            if rows is False:  # only blocks not recorded as written: no reader reads it, a resumed write replaces it
                rep.warnings.append(f"{path}: {what} {idx} ({key}) is corrupt but holds only blocks not "
                                    "recorded as written (a forgotten or unfinished block): the capture that "
                                    "resumes rewrites it")
                continue
            rep.problems.append(f"{path}: {what} {idx} ({key}) is corrupt: {type(exc).__name__}: {exc}")
            rep.damaged_chunks.append((path, idx, expect.group, expect.blocks_of(arr, idx, stored)))
            continue
        if count_nonfinite and rows is not False:
            if rows is not True:
                assert expect.seq_axis is not None
                decoded = np.compress(rows, decoded, axis=expect.seq_axis)
            n = _count_nonfinite(decoded)
            if n:
                nonfinite, bad_chunks = nonfinite + n, bad_chunks + 1
    if nonfinite:
        rep.problems.append(
            f"{path}: {nonfinite} non-finite value(s) (NaN/inf) in {bad_chunks} {what}(s) (S20): "
            "write finite values, or set the group attribute nonfinite_allowed=true if they are meant"
        )


def _count_nonfinite(values: np.ndarray) -> int:
    """NaN and ±inf in a float array. float16 by its exponent bits (all ones: inf or NaN),
    4x faster than numpy's isfinite on half floats, which keeps validate's extra pass small."""
    if values.dtype == np.float16:
        bits = np.ascontiguousarray(values).view(np.uint16)
        return int(np.count_nonzero((bits & 0x7C00) == 0x7C00))
    return int(values.size - np.count_nonzero(np.isfinite(values)))


def _chunk_shape(arr: zarr.Array, idx: tuple[int, ...], stored: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of stored chunk ``idx`` of ``arr`` whose chunks (or shards) are ``stored``
    (the last one along an axis may be short)."""
    return tuple(min(c, s - i * c) for i, c, s in zip(idx, stored, arr.shape, strict=True))


def _exists(store, key: str) -> bool:
    return bool(sync(store.exists(key)))

