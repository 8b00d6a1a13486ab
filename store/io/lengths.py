"""Length groups: ``runs/<run_id>/<kind>_<LLL>``, read lazily or whole, written whole.

What a reader needs of a group is what docs/store-format.md marks MUST (the variables, their
dims and dtypes, at least one label); completion records, the declared labels and the declared
target are bookkeeping, used when present (:func:`completion`, :func:`label_names`,
:func:`declared_target`), so a group another tool wrote with plain xarray reads like one of
ours. :func:`layout_problems` names what breaks a MUST; readers refuse such a group in one line.

Reads go through a :class:`~store.zarrutil.CheckedStore`, so a chunk that fails its checksum
is named by the error itself; whole-array loads use :func:`store.io.chunks.read_whole` (pool
threads fetch, check and place chunks). Streaming writes are :class:`~store.io.writer.LengthWriter`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import xarray as xr
import zarr
from zarr.core.metadata import ArrayV3Metadata

from .. import schema
from ..errors import IncompleteError, InvalidArrayError, MissingError
from ..zarrutil import CheckedStore, array, from_snapshot, group, naming_corruption, ordered, quiet
from .chunks import read_whole


def lengths(run: zarr.Group, kind: str = "len") -> list[int]:
    """Sequence lengths stored in a run group for groups of ``kind``."""
    out = []
    for name, _ in run.groups():
        parsed = schema.parse_length_group(name)
        if parsed and parsed[0] == kind:
            out.append(parsed[1])
    return sorted(out)


def length_group(run: zarr.Group, run_id: str, length: int, kind: str = "len") -> zarr.Group:
    """The ``kind`` group of ``length``; :class:`MissingError` naming the stored lengths."""
    name = schema.length_group(length, kind)
    if name not in run:
        have = lengths(run, kind)
        raise MissingError(
            f"run {run_id!r} has no {kind} group for length {length}; stored lengths: "
            f"{', '.join(map(str, have)) or '(none)'} — capture it with `layerstate capture`"
        )
    return group(run, name)


# ----------------------------------------------------------------------------- what a group holds
@dataclass(frozen=True)
class Completion:
    """A group's completion record, read as docs/store-format.md S23-S24 say.

    ``recorded``: the group has a completion record (``complete``, ``completed_blocks`` or
    ``n_blocks``; layerstate's writer creates every group with one). A group without any was
    written in one go by another tool and is complete. A group with one is complete only when
    its ``complete`` attribute is true.
    """

    complete: bool
    recorded: bool
    done: int
    n_blocks: int | None

    @property
    def blocks(self) -> str:
        """``"3/4"``; ``"-"`` for a group without a completion record."""
        return f"{self.done}/{self.n_blocks}" if self.recorded else "-"


def completion(attrs: Mapping[str, Any]) -> Completion:
    """The completion state of a length group from its attributes."""
    recorded = any(k in attrs for k in (schema.ATTR_COMPLETE, schema.ATTR_COMPLETED, "n_blocks"))
    done = len(cast("list[int]", attrs.get(schema.ATTR_COMPLETED) or []))
    n = attrs.get("n_blocks")
    return Completion(
        complete=bool(attrs.get(schema.ATTR_COMPLETE)) or not recorded,
        recorded=recorded, done=done, n_blocks=None if n is None else int(n),
    )


def dim_names(arr: zarr.Array) -> tuple[str | None, ...]:
    """An array's dimension names; () if it has none (Zarr v2 arrays never do)."""
    md = arr.metadata
    return tuple(md.dimension_names or ()) if isinstance(md, ArrayV3Metadata) else ()


def dtype_kind(arr: zarr.Array) -> str:
    """numpy's kind letter of an array's dtype (``f``, ``i``, ``u``, ``b``, ``U``, ``T``, ...)."""
    try:
        return np.dtype(arr.dtype).kind  # type: ignore[arg-type]
    except TypeError:
        return "?"


def _arrays(grp: zarr.Group) -> dict[str, zarr.Array]:
    return {name: arr for name, arr in grp.arrays()}


def inferred_labels(arrays: Mapping[str, zarr.Array]) -> list[str]:
    """The label variables of a group that declares none: every integer variable of dims
    exactly ``(sequence, position)`` other than ``tokens`` (S19), sorted by name."""
    reserved = {*schema.CORE_VARS, "sequence", "position", "layer"}
    return sorted(
        name for name, arr in arrays.items()
        if name not in reserved and dim_names(arr) == schema.LABEL_DIMS and dtype_kind(arr) in "iu"
    )


def label_names(grp: zarr.Group, arrays: Mapping[str, zarr.Array] | None = None) -> list[str]:
    """The group's label variables: its ``labels`` attribute, else :func:`inferred_labels`."""
    declared = grp.attrs.get("labels")
    if isinstance(declared, list):
        return [str(x) for x in declared]
    return inferred_labels(_arrays(grp) if arrays is None else arrays)


def declared_target(attrs: Mapping[str, Any], labels: list[str], run_attrs: Mapping[str, Any]) -> str | None:
    """The label analyses use by default: the group's ``target`` (or its spec's), else the
    run's ``target`` when it is one of the labels, else the only label; None when there are
    several labels and none is declared (analyses then ask for one, S23)."""
    spec = attrs.get("spec")
    for tgt in (attrs.get("target"), spec.get("target") if isinstance(spec, Mapping) else None,
                run_attrs.get("target")):
        if isinstance(tgt, str) and tgt in labels:
            return tgt
    return labels[0] if len(labels) == 1 else None


def require_target(ds: xr.Dataset, where: str) -> str:
    """The target of an opened length group (``ds.attrs["target"]``, filled by
    :func:`open_length`), or :class:`MissingError` asking for ``--target``."""
    tgt = ds.attrs.get("target")
    if isinstance(tgt, str) and tgt in ds:
        return tgt
    labels = list(ds.attrs.get("labels", []))
    raise MissingError(
        f"{where} has {len(labels)} labels ({', '.join(labels) or 'none'}) and declares no target; "
        "pass --target LABEL (Python: target=...) naming the one to analyse"
    )


def layout_problems(grp: zarr.Group, where: str, arrays: Mapping[str, zarr.Array] | None = None) -> list[str]:
    """What in a length group breaks a MUST of docs/store-format.md (S17-S19), one line each
    with the fix; empty for a group every analysis can read. Reads metadata only."""
    arrs = _arrays(grp) if arrays is None else dict(arrays)
    out: list[str] = []
    fix = "(docs/store-format.md, S17): rewrite the group with it"
    for var, kinds, what in (("hidden", "f", "float"), ("tokens", "iu", "integer"), ("mask", "b", "bool")):
        dims = schema.DIMS[var]
        if var not in arrs:
            out.append(f"{where}: no variable {var!r} {_dimstr(dims)} {fix}")
            continue
        out += _var_problems(arrs[var], f"{where}/{var}", dims, kinds, what)
    if "logits" in arrs:
        out += _var_problems(arrs["logits"], f"{where}/logits", schema.DIMS["logits"], "f", "float")
    if "layer" not in arrs:
        out.append(f"{where}: no coordinate 'layer' (one name per layer of hidden) {fix}")
    elif dim_names(arrs["layer"]) != ("layer",) or dtype_kind(arrs["layer"]) not in "UOTS":
        out.append(f"{where}/layer: the layer coordinate must be strings of dims ('layer',); "
                   f"it has {dtype_kind(arrs['layer'])!r} values of dims {dim_names(arrs['layer'])}")
    for name, arr in sorted(arrs.items()):
        if name not in schema.CORE_VARS and not dim_names(arr):
            out.append(f"{where}/{name}: no dimension_names (S2): xarray cannot open the group; "
                       "write every array with its dims named")
    labels = label_names(grp, arrs)
    if not labels:
        out.append(f"{where}: no label variable (an integer variable of dims (sequence, position), "
                   "-1 where undefined) (docs/store-format.md, S17): add one")
    reserved = {*schema.CORE_VARS, "sequence", "position", "layer"}
    for lab in labels:
        if lab in reserved:
            out.append(f"{where}: label name {lab!r} clashes with a store variable (S19): rename it")
        elif lab not in arrs:
            out.append(f"{where}: declared label {lab!r} has no variable: write it, or drop it from "
                       "the group's 'labels' attribute")
        else:
            out += _var_problems(arrs[lab], f"{where}/{lab}", schema.LABEL_DIMS, "iu", "integer")
    if out:
        return out
    # Sizes: every variable's leading (sequence, position) agree, the layer coordinate matches.
    shape = tuple(arrs["tokens"].shape)
    for var in ("hidden", "mask", *labels, *(["logits"] if "logits" in arrs else [])):
        if tuple(arrs[var].shape[:2]) != shape:
            out.append(f"{where}/{var}: shape {tuple(arrs[var].shape)} does not match tokens {shape} "
                       "in (sequence, position) (S17): write every variable for the same sequences "
                       "and positions")
    if arrs["layer"].shape[0] != arrs["hidden"].shape[2]:
        out.append(f"{where}/layer: {arrs['layer'].shape[0]} names for {arrs['hidden'].shape[2]} "
                   "layers of hidden (S18): name every layer once")
    for coord, axis in (("sequence", 0), ("position", 1)):
        if coord in arrs and tuple(arrs[coord].shape) != (shape[axis],):
            out.append(f"{where}/{coord}: shape {tuple(arrs[coord].shape)}, expected ({shape[axis]},) (S18)")
    return out


def _dimstr(dims: tuple[str, ...]) -> str:
    return "(" + ", ".join(dims) + ")"


def _var_problems(arr: zarr.Array, path: str, dims: tuple[str, ...], kinds: str, what: str) -> list[str]:
    got = dim_names(arr)
    if got != dims:
        shown = _dimstr(tuple(str(d) for d in got)) if got else "no dimension names"
        return [f"{path}: dims {shown}, expected {_dimstr(dims)} (S17): name the dims as the "
                "spec does when writing it"]
    if dtype_kind(arr) not in kinds:
        return [f"{path}: dtype {arr.dtype}, expected {what} (S17): cast it when writing it"]
    return []


def open_length(grp: zarr.Group, run_id: str, length: int, run_attrs: dict, *,
                allow_incomplete: bool = False, lazy: str = "dask") -> xr.Dataset:
    """The Dataset of length group ``grp`` (see :meth:`Store.open_length`)."""
    attrs = dict(grp.attrs)
    state = completion(attrs)
    if not state.complete and not allow_incomplete:
        total = "?" if state.n_blocks is None else state.n_blocks
        raise IncompleteError(
            f"run {run_id!r} length {length} is incomplete ({state.done} of {total} blocks written); "
            "finish it by re-running the capture (it resumes), or pass allow_incomplete=True"
        )
    if lazy not in ("dask", "xarray"):
        raise ValueError(f"lazy must be 'dask' or 'xarray', got {lazy!r}")
    arrays = _arrays(grp)
    problems = layout_problems(grp, f"{schema.RUNS}/{run_id}/{grp.basename}", arrays)
    if problems:
        raise InvalidArrayError(problems[0])
    with quiet():
        ds = xr.open_zarr(
            CheckedStore(grp.store), group=grp.path, consolidated=from_snapshot(grp),
            zarr_format=3, chunks={} if lazy == "dask" else None,
        )
    # Bookkeeping another writer may have left out, filled in as the spec reads it (S23).
    labels = label_names(grp, arrays)
    ds.attrs["labels"] = labels
    target = declared_target(attrs, labels, run_attrs)
    if target is None:
        ds.attrs.pop("target", None)
    else:
        ds.attrs["target"] = target
    ds.attrs["run_id"] = run_id
    ds.attrs["run"] = run_attrs
    return ds


def load_length(ds: xr.Dataset, grp: zarr.Group, where: object) -> xr.Dataset:
    """``ds`` (opened with ``lazy="xarray"`` from ``grp``) read fully into memory: whole
    arrays by :func:`~store.io.chunks.read_whole`, the rest by zarr."""
    with naming_corruption(where):
        fast = {}
        for name, var in ds.data_vars.items():
            values = read_whole(array(grp, str(name)))
            if values is not None:
                fast[name] = var.copy(data=values)
        return ds.assign(fast).compute()


def write_length(
    open_writer: Callable[..., Any],
    length: int | None,
    *,
    hidden: Any,
    tokens: Any,
    labels: Mapping[str, Any],
    mask: Any = None,
    logits: Any = None,
    layers: list[str] | None = None,
) -> None:
    """Write a whole length through ``open_writer(length, n_sequences=, n_features=, labels=,
    layers=, n_classes=)`` (a :class:`~store.io.writer.LengthWriter` with the caller's other
    settings); see :meth:`Store.write_length`."""
    hidden = ordered(hidden, schema.DIMS["hidden"], "hidden")
    n, L, n_layer, n_feat = hidden.shape
    if length is not None and length != L:
        raise InvalidArrayError(
            f"length={length} but hidden has {L} positions; pass length={L} or fix the array"
        )
    logits_arr = None if logits is None else ordered(logits, schema.DIMS["logits"], "logits")
    with open_writer(
        L, n_sequences=n, layers=layers or schema.layer_names(n_layer - 1),
        n_features=n_feat, labels=list(labels),
        n_classes=None if logits_arr is None else logits_arr.shape[-1],
    ) as w:
        if w.complete:
            return
        w.append(hidden=hidden, tokens=tokens, labels=labels, mask=mask, logits=logits_arr)
