"""Analysis results: ``results/<name>``, each an xarray Dataset (checksummed, no pickle)."""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import xarray as xr
import zarr
import zarr.storage

from .. import schema
from ..errors import CorruptStoreError, InvalidArrayError, MissingError, RunConflictError
from ..provenance import now, tool_version
from ..zarrutil import (
    CHECKSUM,
    CheckedStore,
    PrefixStore,
    from_snapshot,
    group,
    jsonable,
    naming_corruption,
    quiet,
)

#: A stored result's attribute holding the digest of its data (:func:`data_digest`).
DIGEST_ATTR = "data_digest"


def result_names(root: zarr.Group) -> list[str]:
    """Names of stored results (nested names use ``/``): the groups under ``results/`` that
    hold an array."""
    if isinstance(root.store, zarr.storage.LocalStore) and root.metadata.consolidated_metadata is None:
        return _local_result_names(Path(root.store.root) / root.path / schema.RESULTS)
    if schema.RESULTS not in root:
        return []
    out = []
    for path, node in group(root, schema.RESULTS).members(max_depth=None):
        if isinstance(node, zarr.Group) and any(True for _ in node.arrays()):
            out.append(path)
    return sorted(out)


def _local_result_names(top: Path) -> list[str]:
    """:func:`result_names` read from the files of a store on a local disk. A writer's store
    has no snapshot to list from, and zarr's walk of the results tree built every array of
    every result, each read through its event loop: 0.5-1 s a call in a store of a dozen
    results, and a pipeline stage asks for the names several times (docs/measured.md, "CI
    time, 2026-12-08")."""
    out: list[str] = []

    def walk(folder: Path, name: str) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return
        holds_array = False
        for e in entries:
            if not e.is_dir():
                continue
            try:
                doc = json.loads((Path(e.path) / "zarr.json").read_bytes())
            except (FileNotFoundError, NotADirectoryError, ValueError):
                continue  # no zarr node (a lease folder, a writer's temporary file)
            kind = doc.get("node_type") if isinstance(doc, dict) else None
            if kind == "array":
                holds_array = True
            elif kind == "group":
                walk(Path(e.path), f"{name}/{e.name}" if name else e.name)
        if holds_array and name:
            out.append(name)

    try:
        doc = json.loads((top / "zarr.json").read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        return []
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("node_type") != "group":
        raise CorruptStoreError(
            f"{schema.RESULTS} is not a group, as the layerstate schema expects; the store was "
            "changed by another tool: re-create it or restore it from a copy")
    walk(top, "")
    return sorted(out)


def _result_group(root: zarr.Group, name: str, where: object) -> zarr.Group:
    """The group of the stored result ``name`` (one :func:`result_names` lists), found by its
    path rather than by listing every result (a walk of the whole results tree, 0.05-0.1 s a
    call in a store of a dozen results, repeated for every read); :class:`MissingError` listing
    the stored results when there is none."""
    parts = name.split("/")
    if all(p and p not in (".", "..") for p in parts):
        try:
            node = root[f"{schema.RESULTS}/{name}"]
        except (KeyError, FileNotFoundError):
            node = None
        if isinstance(node, zarr.Group) and any(True for _ in node.arrays()):
            return node
    names = result_names(root)
    raise MissingError(f"no result {name!r} in {where}; stored results: {', '.join(names) or '(none)'}")


def write_result(root: zarr.Group, name: str, ds: xr.Dataset, *, overwrite: bool = True) -> None:
    """Store ``ds`` under ``results/<name>``; object dtypes are refused."""
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"results must be an xarray.Dataset, got {type(ds).__name__}")
    for v in ds.variables.values():
        if v.dtype == object:
            raise InvalidArrayError(
                f"result {name!r} variable has object dtype; convert it to numbers or fixed strings"
            )
    if not overwrite and name in result_names(root):
        raise RunConflictError(f"result {name!r} exists; pass overwrite=True to replace it")
    # Fixed-width numpy strings have no Zarr v3 spec; variable-length strings do.
    ds = ds.copy()
    if any(v.chunks is not None for v in ds.variables.values()):
        ds = ds.load()  # computed once, for its digest and its write
    ds.attrs = {**made_by(), **ds.attrs, DIGEST_ATTR: data_digest(ds)}
    for var in [k for k, v in ds.variables.items() if v.dtype.kind == "U"]:
        ds[var] = ds[var].astype(np.dtypes.StringDType())
    enc = {v: {"compressors": CHECKSUM} for v in ds.variables}
    ds.attrs = jsonable(ds.attrs)
    # Every chunk is written, even all-fill ones: validate treats a missing chunk as damage.
    path = f"{schema.RESULTS}/{name}"
    with quiet(), zarr.config.set({"array.write_empty_chunks": True}):
        # the result's parent groups through the store, then the result through a view rooted at
        # it: zarr then parses no parent document but the result's own for each array it creates
        # (the store root's holds every node's snapshot; store.zarrutil.PrefixStore)
        zarr.open_group(root.store, path=path.rpartition("/")[0], mode="a", zarr_format=3)
        ds.to_zarr(PrefixStore(root.store, path), mode="w", zarr_format=3, consolidated=False, encoding=enc)


#: What every stored result records about how it was made (unless its writer says otherwise),
#: and the digest of its data.
MADE_ATTRS = ("created", "command", "tool_version", DIGEST_ATTR)
#: The attributes that tell two results of one kind apart, in the order they are shown.
SETTING_ATTRS = ("target", "positions", "folds", "control", "train_length", "method", "settings",
                 "mode", "fit_length", "length", "corruption", "subspace")


def made_by() -> dict:
    """``created`` (UTC), ``command`` (the command line, or the Python program) and
    ``tool_version``: who and what made a result."""
    prog = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    command = " ".join(["layerstate", *sys.argv[1:]]) if prog == "layerstate" else f"python ({prog})"
    return {"created": now(), "command": command, "tool_version": tool_version()}


def describe_settings(attrs: dict) -> str:
    """A result's settings and origin in a few words: ``"target top, positions pooled, folds 3,
    control permute, train_length none; made 2026-12-04 by layerstate run"``."""
    parts = []
    for key in SETTING_ATTRS:
        if key not in attrs:
            continue
        value = attrs[key]
        if key == "train_length" and value in (-1, None):
            value = "none (fitted at each length)"
        elif isinstance(value, list | tuple):
            value = ",".join(map(str, value))
        parts.append(f"{key} {value}")
    made = str(attrs.get("created", ""))[:10]
    by = attrs.get("command") or ("layerstate run" if "pipeline_request" in attrs else "")
    origin = " ".join(x for x in (made and f"made {made}", by and f"by {by}") if x)
    return "; ".join(x for x in (", ".join(parts), origin) if x) or "no settings recorded"


def result_attrs(root: zarr.Group, name: str, where: object) -> dict:
    """A stored result's attributes, without reading its arrays."""
    return dict(_result_group(root, name, where).attrs)


def result_runs(root: zarr.Group, name: str, where: object) -> list[str] | None:
    """The runs a stored result holds (its ``run`` coordinate, read alone), or None for a result
    with no ``run`` dimension (a claims table, a design's stages)."""
    _note_read(name)
    grp = _result_group(root, name, where)
    if "run" not in grp:
        return None
    run = grp["run"]
    if not isinstance(run, zarr.Array):
        return None
    return [str(r) for r in np.asarray(run[...]).ravel()]


#: The names of the results read while :func:`recording_reads` is open (this thread and context).
_READS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("layerstate_result_reads", default=None)


@contextlib.contextmanager
def recording_reads() -> Iterator[list[str]]:
    """The names of the stored results read (:func:`read_result`, :func:`result_runs`) inside
    the block, each once, in the order first read: what a verdict was decided on. Whatever
    kind of store they are read through (a store, a store and its results store, a view)."""
    seen: list[str] = []
    token = _READS.set(seen)
    try:
        yield seen
    finally:
        _READS.reset(token)


def _note_read(name: str) -> None:
    seen = _READS.get()
    if seen is not None and name not in seen:
        seen.append(name)


def data_digest(ds: xr.Dataset) -> str:
    """A digest of a result's data: every variable's name, dimensions, type and values (not its
    attributes: ``created`` changes at every write). Two results with equal digests hold the
    same numbers; a result computed again on other runs or settings gets another."""
    h = hashlib.sha256()
    for name in sorted(map(str, ds.variables)):
        values = np.asarray(ds.variables[name].values)
        kind = "str" if values.dtype.kind in "UOST" else values.dtype.str
        h.update(json.dumps([name, list(map(str, ds.variables[name].dims)), list(values.shape), kind]).encode())
        if kind == "str":
            h.update(json.dumps([str(x) for x in values.ravel()]).encode())
        else:
            h.update(np.ascontiguousarray(values).tobytes())
    return h.hexdigest()[:32]


def read_result(root: zarr.Group, name: str, where: object) -> xr.Dataset:
    """A stored result, loaded into memory."""
    _note_read(name)
    _result_group(root, name, where)
    # chunks=None: read by zarr alone, not through a dask graph per array (a result is small
    # and read whole; the graph took half of each read)
    with quiet(), naming_corruption(where), xr.open_zarr(
        CheckedStore(root.store), group=f"{schema.RESULTS}/{name}", consolidated=from_snapshot(root),
        zarr_format=3, chunks=None,
    ) as ds:
        return ds.load()
