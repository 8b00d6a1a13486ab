"""``validate``: every metadata file, the schema, the completion records and every chunk's
checksum.

Every node's ``zarr.json`` is parsed and compared with its copy in the consolidated snapshot
and with the digest recorded at the last consolidation (:func:`store.metadata.check`). Zarr
reads a missing chunk silently as its fill value, so existence is checked against the
completion records, and every present chunk is decoded, which verifies its crc32c.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import zarr
from zarr.core.metadata import ArrayV3Metadata
from zarr.core.sync import sync

from . import metadata as M
from . import schema as S
from .core import PairedStore, Store
from .errors import LayerstateError, MetadataDamagedError
from .location import Location
from .zarrutil import array, chunk_key, group, iter_arrays, quiet


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
    metadata: M.MetadataCheck | None = None
    #: ``(array path, chunk index, group path or None)`` of each damaged or missing chunk
    damaged_chunks: list[tuple[str, tuple[int, ...], str | None]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def validate(store: Store | str, *, check_chunks: bool = True,
             storage_options: dict | None = None) -> Report:
    """Check a store against schema ``layerstate/1``: every metadata file, then every chunk.

    ``store`` is an open :class:`Store` or its URL; a URL whose root metadata is damaged is
    still checked (a :class:`Store` could not be opened on it).

    Returns
    -------
    Report
        ``problems`` names each damaged or disagreeing metadata file and each failing group,
        array and chunk; ``warnings`` lists things that are legal but worth knowing
        (incomplete lengths, non-finite data allowed, a snapshot older than a write in
        progress).
    """
    if isinstance(store, PairedStore):  # the source, then its results store
        rep = validate(store.source, check_chunks=check_chunks)
        other = validate(store.results_store, check_chunks=check_chunks)
        where = f"results store {store.results_location}"
        rep.problems += [f"{where}: {p}" for p in other.problems]
        rep.warnings += [f"{where}: {w}" for w in other.warnings]
        rep.n_arrays += other.n_arrays
        rep.n_chunks += other.n_chunks
        rep.n_metadata += other.n_metadata
        rep.damaged_chunks += other.damaged_chunks
        return rep
    loc = store.location if isinstance(store, Store) else Location(store, storage_options or {})
    rep = Report(str(loc))
    with quiet():
        meta = M.check(loc.zarr_store(read_only=True, guarded=False), str(loc))
    rep.metadata, rep.n_metadata = meta, meta.n_nodes
    rep.problems += [f.line() for f in meta.problems]
    rep.warnings += [f.line() for f in meta.warnings]
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


def _check_store(store: Store, rep: Report, check_chunks: bool) -> None:
    attrs = store.attrs
    for key in S.ROOT_REQUIRED_ATTRS:
        if key not in attrs:
            rep.problems.append(f"root: missing attribute {key!r}")
    if S.RUNS not in store.root:
        rep.problems.append("root: missing group 'runs'")
        return
    for rid in store.run_ids():
        try:
            _check_run(store, rid, rep, check_chunks)
        except MetadataDamagedError:  # named by the metadata check above
            rep.warnings.append(f"runs/{rid}: not checked further (damaged metadata)")
    if check_chunks and S.RESULTS in store.root:
        try:
            for path, arr in iter_arrays(group(store.root, S.RESULTS), f"{S.RESULTS}/"):
                _check_chunks(arr, path, None, rep)
        except MetadataDamagedError:
            rep.warnings.append("results: not checked further (damaged metadata)")


def _check_run(store: Store, rid: str, rep: Report, check_chunks: bool) -> None:
    run = store.run_group(rid)
    a = dict(run.attrs)
    for key in S.RUN_REQUIRED_ATTRS:
        if key not in a:
            rep.problems.append(f"runs/{rid}: missing attribute {key!r}")
    for name, grp in run.groups():
        path = f"runs/{rid}/{name}"
        if name == S.WEIGHTS:
            if not grp.attrs.get("complete"):
                rep.warnings.append(f"{path}: weights incomplete (training interrupted?)")
            if check_chunks:
                for apath, arr in iter_arrays(grp, f"{path}/"):
                    _check_chunks(arr, apath, None, rep, path)
            continue
        if S.parse_length_group(name):
            _check_length(grp, path, rep, check_chunks)


def _check_length(grp: zarr.Group, path: str, rep: Report, check_chunks: bool) -> None:
    ga = dict(grp.attrs)
    spec = cast("dict[str, Any] | None", ga.get("spec"))
    if spec is None:
        rep.warnings.append(f"{path}: layout never finished (writer killed while creating it)")
        return
    for var in ("hidden", "tokens", "mask", "sequence", "position", "layer", *spec["labels"]):
        if var not in grp:
            rep.problems.append(f"{path}: missing variable {var!r}")
            return
    for var, dims in {**S.DIMS, **{lab: S.LABEL_DIMS for lab in spec["labels"]}}.items():
        if var in grp:
            got = _dims(array(grp, var))
            if got != dims:
                rep.problems.append(f"{path}/{var}: dims {got}, expected {dims}")
    done = set(cast("list[int]", ga.get(S.ATTR_COMPLETED, [])))
    if not ga.get(S.ATTR_COMPLETE):
        rep.warnings.append(
            f"{path}: incomplete, {len(done)} of {ga.get('n_blocks')} blocks written (resume the capture)"
        )
    if ga.get("nonfinite_allowed"):
        rep.warnings.append(f"{path}: written with allow_nonfinite=True (may hold NaN/Inf)")
    if check_chunks:
        for name, arr in grp.arrays():
            names = _dims(arr)
            seq_axis = 0 if names and names[0] == "sequence" and name != "sequence" else None
            _check_chunks(arr, f"{path}/{name}", (seq_axis, done), rep, path)


def _dims(arr: zarr.Array) -> tuple[str | None, ...]:
    """An array's dimension names; () if it has none (Zarr v2 arrays never do)."""
    md = arr.metadata
    return tuple(md.dimension_names or ()) if isinstance(md, ArrayV3Metadata) else ()


def _check_chunks(arr: zarr.Array, path: str, blocks: tuple | None, rep: Report,
                  group_path: str | None = None) -> None:
    """Decode every expected chunk; a chunk of a completed block must exist."""
    rep.n_arrays += 1
    store = arr.store_path.store
    grid = arr.cdata_shape
    for idx in np.ndindex(*grid):
        expected = True
        if blocks is not None and blocks[0] is not None:
            expected = idx[blocks[0]] in blocks[1]
        key = chunk_key(arr, idx)
        present = _exists(store, key)
        if not present:
            if expected:
                rep.problems.append(f"{path}: chunk {idx} is missing ({key}) though recorded as written")
                rep.damaged_chunks.append((path, idx, group_path))
            continue
        rep.n_chunks += 1
        try:
            arr.get_block_selection(idx)
        except Exception as exc:  # crc32c mismatch, truncated chunk, undecodable bytes
            rep.problems.append(f"{path}: chunk {idx} ({key}) is corrupt: {type(exc).__name__}: {exc}")
            rep.damaged_chunks.append((path, idx, group_path))


def _exists(store, key: str) -> bool:
    return bool(sync(store.exists(key)))

