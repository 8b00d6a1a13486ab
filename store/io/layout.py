"""The layout of one length group, and the checks that let a writer resume it.

A group's *spec* (sizes, layers, labels, dtype, block size, extra variables) is decided
before anything is written and stored as its ``spec`` attribute, last, once every array
exists at full size (resizing arrays one by one is not crash-safe). A writer that finds the
group again compares specs: the same spec resumes (stray temp files of killed chunk writes
are removed), a different one is refused once any block is finished, except for the dtype
(float32 after a float16 overflow was refused); an unfinished group with another layout is
replaced with a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

import numpy as np
import zarr
from zarr.storage import LocalStore

from .. import schema
from ..errors import InvalidArrayError, RunConflictError
from ..zarrutil import CHECKSUM, TARGET_CHUNK_BYTES, group, jsonable, quiet

FLOAT_DTYPES = ("float16", "float32")


class Spec(TypedDict):
    """A group's layout, stored as its ``spec`` attribute (a resumed writer must match it)."""

    n_sequences: int
    n_features: int
    layers: list[str]
    labels: list[str]
    target: str
    n_classes: int | None
    dtype: str
    block_size: int
    #: name -> [dims after 'sequence', their sizes, dtype]: a JSON list, so not a tuple.
    extra: dict[str, list[Any]]


def make_spec(
    length: int,
    *,
    n_sequences: int,
    n_features: int,
    labels: Sequence[str],
    layers: Sequence[str] | None,
    n_layers: int | None,
    n_classes: int | None,
    target: str | None,
    dtype: str,
    block_size: int | None,
    extra: Mapping[str, tuple[Sequence[str], Sequence[int], str]] | None,
) -> Spec:
    """The spec a :class:`~store.io.writer.LengthWriter` was asked for, checked (its arguments)."""
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"dtype must be one of {FLOAT_DTYPES}, got {dtype!r}")
    if layers is None:
        if n_layers is None:
            raise ValueError("give layers=[...] or n_layers=N (number of blocks)")
        layers = schema.layer_names(n_layers)
    labels = list(labels)
    if not labels:
        raise InvalidArrayError("at least one label is needed (e.g. labels=['parity'])")
    reserved = {*schema.CORE_VARS, "sequence", "position", "layer"}
    clash = set(labels) & reserved
    if clash:
        raise InvalidArrayError(f"label names {sorted(clash)} clash with store variables; rename them")
    for n, what in ((n_sequences, "n_sequences"), (n_features, "n_features"), (length, "length")):
        if int(n) < 1:
            raise InvalidArrayError(f"{what} must be positive, got {n}")
    itemsize = np.dtype(dtype).itemsize
    auto = max(1, TARGET_CHUNK_BYTES // (int(length) * n_features * itemsize))
    spec: Spec = {
        "n_sequences": int(n_sequences),
        "n_features": int(n_features),
        "layers": list(layers),
        "labels": labels,
        "target": target or labels[0],
        "n_classes": None if n_classes is None else int(n_classes),
        "dtype": dtype,
        "block_size": int(min(block_size or auto, n_sequences)),
        "extra": {k: [list(d), [int(x) for x in sh], str(dt)] for k, (d, sh, dt) in (extra or {}).items()},
    }
    clash = set(spec["extra"]) & {*labels, *reserved}
    if clash:
        raise InvalidArrayError(f"extra variables {sorted(clash)} clash with store variables; rename them")
    if spec["target"] not in labels:
        raise InvalidArrayError(f"target {target!r} is not one of the labels {labels}")
    return spec


def float_dtypes(spec: Spec) -> dict[str, str]:
    """The float variables and their stored dtypes (checked for NaN/Inf on write)."""
    out = {"hidden": spec["dtype"]}
    if spec["n_classes"]:
        out["logits"] = spec["dtype"]
    out.update({k: dt for k, (_d, _s, dt) in spec["extra"].items() if np.dtype(dt).kind == "f"})
    return out


def open_or_create(run: zarr.Group, run_id: str, name: str, spec: Spec, attrs: Mapping[str, Any]) -> zarr.Group:
    """Group ``name`` of ``run`` laid out as ``spec``: resumed if it matches, else created.

    ``attrs`` are the group attributes written with a new layout. The caller holds the
    run's lock, so no other writer is using an unfinished group.
    """
    if name in run:
        grp = group(run, name)
        old = cast("dict[str, Any] | None", grp.attrs.get("spec"))
        if old is None and not _has_record(grp):
            # No spec and no completion record: another tool wrote it in one go (S23), so it
            # is complete data, never a layout of ours cut short.
            raise RunConflictError(
                f"run {run_id!r} {name} exists, written by another tool (no completion record); "
                "write to a new store or run id, or delete the group first"
            )
        if old is None:  # killed while creating arrays: nothing was written yet
            del run[name]
        elif old != jsonable(spec):
            _refuse_or_replace(grp, old, spec, run_id, name)
            del run[name]
        else:
            if not grp.attrs.get(schema.ATTR_COMPLETE):  # a resume: clear what a kill left
                remove_partial_files(grp)
            return grp
    return create(run, name, spec, attrs)


def _refuse_or_replace(grp: zarr.Group, old: dict[str, Any], spec: Spec, run_id: str, name: str) -> None:
    """Refuse a changed layout for a group with finished blocks (unless only the dtype
    changed); otherwise warn that the unfinished group is about to be replaced."""
    diff = {k: (old.get(k), v) for k, v in jsonable(spec).items() if old.get(k) != v}
    done = cast("list[int]", grp.attrs.get(schema.ATTR_COMPLETED, []))
    if grp.attrs.get(schema.ATTR_COMPLETE) or (done and set(diff) != {"dtype"}):
        raise RunConflictError(
            f"run {run_id!r} {name} exists with a different layout {diff} "
            "(stored vs requested); write to a new store or run id"
        )
    # An unfinished group is unreadable (open_length refuses it) and no writer holds it
    # (the caller holds the run lock). It is replaced when nothing in it is finished, or
    # when only the dtype changes (float32 after a float16 overflow was refused).
    warnings.warn(
        f"replacing the unfinished {name} of run {run_id!r} (layout changed: {diff})",
        stacklevel=5,  # the caller of Store.length_writer / write_length
    )


def n_blocks(spec: Spec) -> int:
    return -(-spec["n_sequences"] // spec["block_size"])


def _has_record(grp: zarr.Group) -> bool:
    return any(k in grp.attrs for k in (schema.ATTR_COMPLETE, schema.ATTR_COMPLETED, "n_blocks"))


def create(run: zarr.Group, name: str, spec: Spec, attrs: Mapping[str, Any]) -> zarr.Group:
    """Create group ``name`` with every array at full size; ``spec`` is written last.

    The group is born with an empty completion record, so a layout cut short is incomplete
    (a group without any record counts as written in one go, S23)."""
    with quiet():
        grp = run.create_group(name, attributes={schema.ATTR_COMPLETED: [], schema.ATTR_COMPLETE: False})
        _create_arrays(grp, spec, int(attrs["length"]))
        grp.attrs.update(jsonable({**attrs, "spec": spec}))  # last: the layout is complete
    return grp


def _create_arrays(grp: zarr.Group, sp: Spec, L: int) -> None:
    n, blk = sp["n_sequences"], sp["block_size"]

    def arr(var, shape, chunks, dtype, fill, dims):
        return grp.create_array(
            var, shape=shape, chunks=chunks, dtype=dtype, fill_value=fill,
            dimension_names=list(dims), compressors=CHECKSUM,
            config={"write_empty_chunks": True},
        )

    n_layer = len(sp["layers"])
    # One chunk = one block of sequences x all positions x ONE layer x all features:
    # reading a layer touches only that layer's bytes (docs/store-format.md, "Chunks").
    arr("hidden", (n, L, n_layer, sp["n_features"]), (blk, L, 1, sp["n_features"]),
        sp["dtype"], np.nan, schema.DIMS["hidden"])
    arr("tokens", (n, L), (blk, L), "int32", -1, schema.DIMS["tokens"])
    arr("mask", (n, L), (blk, L), "bool", False, schema.DIMS["mask"])
    for lab in sp["labels"]:
        arr(lab, (n, L), (blk, L), "int32", -1, schema.LABEL_DIMS)
    if sp["n_classes"]:
        arr("logits", (n, L, sp["n_classes"]), (blk, L, sp["n_classes"]),
            sp["dtype"], np.nan, schema.DIMS["logits"])
    for var, (dims, shape, dtype) in sp["extra"].items():
        fill = np.nan if np.dtype(dtype).kind == "f" else (False if dtype == "bool" else -1)
        arr(var, (n, *shape), (blk, *shape), dtype, fill, ("sequence", *dims))
    # Coordinates are small: written at creation, whole.
    arr("sequence", (n,), (n,), "int64", -1, ("sequence",))[...] = np.arange(n)
    arr("position", (L,), (L,), "int64", -1, ("position",))[...] = np.arange(L)
    lay = grp.create_array("layer", shape=(n_layer,), dtype=str, dimension_names=["layer"])
    lay[...] = np.asarray(sp["layers"], dtype=str)


def remove_partial_files(grp: zarr.Group) -> None:
    """Delete the temp files of chunk writes cut short by a kill (``*.partial``, local disks).

    A chunk is written to a temp file and renamed into place, so a killed writer leaves at
    most stray temp files, never a torn chunk; the resumed writer (which holds the run lock)
    rewrites the unrecorded blocks and removes these.
    """
    store = grp.store_path.store
    if isinstance(store, LocalStore):
        for stray in (Path(store.root) / grp.store_path.path).rglob("*.partial"):
            stray.unlink(missing_ok=True)
