"""Length groups: ``runs/<run_id>/<kind>_<LLL>``, read lazily or whole, written whole.

Reads go through a :class:`~store.zarrutil.CheckedStore`, so a chunk that fails its checksum
is named by the error itself; whole-array loads use :func:`store.chunks.read_whole` (pool
threads fetch, check and place chunks). Streaming writes are :class:`~store.writer.LengthWriter`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import xarray as xr
import zarr

from . import schema as S
from .chunks import read_whole
from .errors import IncompleteError, InvalidArrayError, MissingError
from .zarrutil import CheckedStore, array, from_snapshot, group, naming_corruption, ordered, quiet


def lengths(run: zarr.Group, kind: str = "len") -> list[int]:
    """Sequence lengths stored in a run group for groups of ``kind``."""
    out = []
    for name, _ in run.groups():
        parsed = S.parse_length_group(name)
        if parsed and parsed[0] == kind:
            out.append(parsed[1])
    return sorted(out)


def length_group(run: zarr.Group, run_id: str, length: int, kind: str = "len") -> zarr.Group:
    """The ``kind`` group of ``length``; :class:`MissingError` naming the stored lengths."""
    name = S.length_group(length, kind)
    if name not in run:
        have = lengths(run, kind)
        raise MissingError(
            f"run {run_id!r} has no {kind} group for length {length}; stored lengths: "
            f"{', '.join(map(str, have)) or '(none)'} — capture it with `layerstate capture`"
        )
    return group(run, name)


def label_names(grp: zarr.Group) -> list[str]:
    return list(cast("list[str]", grp.attrs.get("labels", [])))


def open_length(grp: zarr.Group, run_id: str, length: int, run_attrs: dict, *,
                allow_incomplete: bool = False, lazy: str = "dask") -> xr.Dataset:
    """The Dataset of length group ``grp`` (see :meth:`Store.open_length`)."""
    attrs = dict(grp.attrs)
    if not attrs.get(S.ATTR_COMPLETE) and not allow_incomplete:
        done = len(cast("list[int]", attrs.get(S.ATTR_COMPLETED, [])))
        total = attrs.get("n_blocks", "?")
        raise IncompleteError(
            f"run {run_id!r} length {length} is incomplete ({done} of {total} blocks written); "
            "finish it by re-running the capture (it resumes), or pass allow_incomplete=True"
        )
    if lazy not in ("dask", "xarray"):
        raise ValueError(f"lazy must be 'dask' or 'xarray', got {lazy!r}")
    with quiet():
        ds = xr.open_zarr(
            CheckedStore(grp.store), group=grp.path, consolidated=from_snapshot(grp),
            zarr_format=3, chunks={} if lazy == "dask" else None,
        )
    ds.attrs["run_id"] = run_id
    ds.attrs["run"] = run_attrs
    return ds


def load_length(ds: xr.Dataset, grp: zarr.Group, where: object) -> xr.Dataset:
    """``ds`` (opened with ``lazy="xarray"`` from ``grp``) read fully into memory: whole
    arrays by :func:`~store.chunks.read_whole`, the rest by zarr."""
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
    **kwargs: Any,
) -> None:
    """Write a whole length through ``open_writer(length, **writer_kwargs)`` (a
    :class:`~store.writer.LengthWriter`); see :meth:`Store.write_length`."""
    hidden = ordered(hidden, S.DIMS["hidden"], "hidden")
    n, L, n_layer, n_feat = hidden.shape
    if length is not None and length != L:
        raise InvalidArrayError(
            f"length={length} but hidden has {L} positions; pass length={L} or fix the array"
        )
    logits_arr = None if logits is None else ordered(logits, S.DIMS["logits"], "logits")
    with open_writer(
        L, n_sequences=n, layers=layers or S.layer_names(n_layer - 1),
        n_features=n_feat, labels=list(labels),
        n_classes=None if logits_arr is None else logits_arr.shape[-1], **kwargs,
    ) as w:
        if w.complete:
            return
        w.append(hidden=hidden, tokens=tokens, labels=labels, mask=mask, logits=logits_arr)
