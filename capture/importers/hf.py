"""Hugging Face ``datasets`` directories: SAELens' cached activations in, any store out.

**In** (:func:`import_hf_datasets`, format ``saelens``): a directory written by
``Dataset.save_to_disk`` with one row per sequence: one ``Array2D(shape=(position, d))``
column per hook (SAELens' ``CacheActivationsRunner`` names them by hook, e.g.
``blocks.3.hook_resid_pre``) and ``token_ids`` (``Sequence(int32, length=position)``). Hook
columns become layers (:func:`~capture.importers.common.named_plan`: TransformerLens hook
names map onto the residual stream, ``blocks.<i>.hook_resid_pre`` being the output of block
``i - 1``); other fixed-length integer columns are labels, a boolean ``mask`` column the mask.
Each block of rows is read from the memory-mapped Arrow table without conversion per row.

**Out** (:func:`export_hf_datasets`, ``layerstate export STORE --format hf-datasets OUT``):
one such directory per (run, length), ``OUT/<run>/len_<L>/``, readable by
``datasets.load_from_disk`` and so by SAELens' activation loading (``hook_name`` = a layer
name, ``context_size`` = the length): a column per selected layer (``Array2D``), ``token_ids``,
``mask``, one column per label, ``logits`` when stored, and ``sequence``. Written block by block
(bounded memory) under a temporary name, renamed when complete; an existing OUT is refused.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Unpack

import numpy as np

from store import InvalidArrayError, MissingError, RunConflictError, Store
from store.errors import MissingFileError
from store.schema import length_group

from .common import (
    Arrays,
    ImportOptions,
    ImportResult,
    Labels,
    RunInfo,
    options_plan,
    require,
    write_with,
)
from .registry import register_format

_HOOK_TYPES = ("Array2D", "Array3D", "Array4D", "Array5D")


class DatasetSource:
    """A ``datasets`` directory as a ranged source."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        datasets = require("datasets", "importing a Hugging Face datasets directory")
        p = Path(path)
        if not p.exists():
            raise MissingFileError(f"{p} does not exist; give the directory `datasets.save_to_disk` "
                                   "wrote")
        try:
            ds = datasets.load_from_disk(str(p))
        except Exception as exc:
            raise InvalidArrayError(f"{p} is not a datasets directory written by save_to_disk "
                                    f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
        if not isinstance(ds, datasets.Dataset):
            raise InvalidArrayError(f"{p} holds several splits ({', '.join(ds)}); import one: {p}/<split>")
        self.ds, self.what = ds, str(p)
        self.n_sequences = len(ds)
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.labels: list[str] = []
        self.mask: str | None = None
        for name, feat in ds.features.items():
            kind = type(feat).__name__
            if kind in _HOOK_TYPES:
                self.shapes[name] = (self.n_sequences, *feat.shape)
            elif kind in ("List", "Sequence") and getattr(feat, "length", -1) not in (-1, None):
                dtype = str(getattr(getattr(feat, "feature", None), "dtype", ""))
                shape = (self.n_sequences, int(feat.length))
                if name in ("token_ids", "tokens", "input_ids"):
                    self.shapes[name] = shape
                elif dtype == "bool" and name == "mask":
                    self.mask = name
                elif dtype.startswith(("int", "uint")):
                    self.labels.append(name)
        self.names = list(self.shapes)
        self.fast = getattr(ds, "_indices", None) is None

    @property
    def fingerprint(self) -> str | None:
        """The dataset's own fingerprint (``datasets`` records one with ``save_to_disk``)."""
        fp = getattr(self.ds, "_fingerprint", None)
        return None if fp is None else f"{fp}:{self.n_sequences}"

    def read(self, names: Sequence[str], start: int, stop: int) -> Arrays:
        return {n: self.column(n, start, stop) for n in names}

    def dtype(self, name: str) -> np.dtype:
        return np.dtype(self.ds.features[name].dtype)

    def column(self, name: str, start: int, stop: int) -> np.ndarray:
        m = stop - start
        if self.fast:  # the Arrow buffers themselves: no per-row Python objects
            arr = self.ds.data.table.column(name).slice(start, m).combine_chunks()
            values = arr.storage if hasattr(arr, "storage") else arr
            while hasattr(values.type, "value_type"):
                values = values.flatten()
            out = values.to_numpy(zero_copy_only=False)
            return out.reshape(m, *self.ds.features[name].shape) if name in self.shapes and len(
                self.shapes[name]) > 2 else out.reshape(m, -1)
        return np.asarray(self.ds.with_format("numpy")[start:stop][name])

    def read_into(self, name: str, start: int, stop: int, out: np.ndarray) -> None:
        """Rows ``[start, stop)`` of column ``name`` copied straight into ``out`` (contiguous,
        ``(stop - start, …)``): one copy from the memory-mapped Arrow buffers, chunk by chunk
        (``column`` first joins the chunks, a second copy)."""
        if not self.fast:
            out[...] = self.column(name, start, stop).reshape(out.shape)
            return
        flat = out.reshape(stop - start, -1)
        pos = 0
        for chunk in self.ds.data.table.column(name).slice(start, stop - start).chunks:
            values = chunk.storage if hasattr(chunk, "storage") else chunk
            while hasattr(values.type, "value_type"):
                values = values.flatten()  # respects the slice's offset
            k = len(chunk)
            flat[pos:pos + k] = values.to_numpy(zero_copy_only=False).reshape(k, -1)
            pos += k
        if pos != stop - start:
            raise InvalidArrayError(f"{self.what}: column {name!r} has {pos} rows in [{start}, {stop})")

    def labels_and_mask(self) -> Labels:
        out = Labels()
        for name in self.labels:
            out.labels[name] = self.column(name, 0, self.n_sequences).astype("int32")
        if self.mask:
            out.mask = self.column(self.mask, 0, self.n_sequences).astype(bool)
        return out


def import_hf_datasets(store: Store | str, run: RunInfo | str, path: str | os.PathLike[str],
                       **options: Unpack[ImportOptions]) -> ImportResult:
    """Import a ``datasets`` directory (SAELens' cached activations, or an export of ours);
    keywords: :class:`~capture.importers.writer.ImportOptions` (``labels`` default: the
    directory's own label and mask columns)."""
    src = DatasetSource(path)
    if not src.names:
        raise MissingError(f"{path} has no activation columns (Array2D); its columns: "
                           f"{', '.join(src.ds.column_names)}")
    plan = options_plan(src.names, options)
    if options.get("labels") is None and (src.labels or src.mask):
        options["labels"] = src.labels_and_mask()
    return write_with(store, run, src, plan, options, fmt="saelens", arch="saelens")


# ---------------------------------------------------------------------- export
def export_hf_datasets(
    store: Store | str,
    out: str | os.PathLike[str],
    *,
    runs: Sequence[str] | None = None,
    lengths: Sequence[int] | None = None,
    layers: Sequence[str] | None = None,
    dtype: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> list[Path]:
    """Write the selected runs / lengths / layers of ``store`` as ``datasets`` directories,
    ``out/<run>/len_<L>/`` (see the module's docs); their paths."""
    datasets = require("datasets", "exporting to Hugging Face datasets")
    from datasets.arrow_writer import ArrowWriter  # noqa: PLC0415 -- optional; `require` checked it

    st = store if isinstance(store, Store) else Store.open(store, storage_options=storage_options)
    out = Path(out)
    if out.exists():
        raise RunConflictError(f"{out} exists; export into a new directory")
    have = st.run_ids()
    chosen = list(runs) if runs else have
    for r in chosen:
        if r not in have:
            raise MissingError(f"no run {r!r} in {st.location}; its runs: {', '.join(have) or '(none)'}")
    todo = []
    for r in chosen:
        ls = st.lengths(r)
        for L in (lengths or ls):
            if L in ls:
                todo.append((r, L))
    if lengths:
        stored = sorted({L for r in chosen for L in st.lengths(r)})
        for L in lengths:
            if L not in stored:
                raise MissingError(f"no selected run has length {L}; lengths stored: "
                                   f"{', '.join(map(str, stored)) or '(none)'}")
    opened = {(r, L): st.open_length(r, L, lazy="xarray") for r, L in todo}
    if layers:
        stored_layers = sorted({str(x) for ds in opened.values() for x in ds.layer.values})
        for lay in layers:
            if lay not in stored_layers:
                raise MissingError(f"no selected length has layer {lay!r}; layers stored: "
                                   f"{', '.join(stored_layers)}")
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.partial")
    written = []
    quiet_bars = not datasets.utils.logging.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        for (r, L), ds in opened.items():
            rel = Path(r) / length_group(L)
            _export_one(datasets, ArrowWriter, ds, tmp / rel, layers, dtype)
            written.append(out / rel)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not quiet_bars:
            datasets.enable_progress_bars()
    return written


def _export_one(datasets: Any, ArrowWriter: Any, ds: Any, target: Path, layers: Sequence[str] | None,
                dtype: str | None) -> None:
    names = [str(x) for x in ds.layer.values]
    keep = [n for n in names if not layers or n in layers]
    n, L = ds.sizes["sequence"], ds.sizes["position"]
    d = ds.sizes["feature"]
    float_t = dtype or str(ds.hidden.dtype)
    labels = [str(k) for k in (ds.attrs.get("labels") or []) if k in ds]
    if not labels:
        labels = [str(k) for k, v in ds.data_vars.items()
                  if v.dims == ("sequence", "position") and k not in ("tokens", "mask")]
    f = datasets.Features({
        **{lay: datasets.Array2D(shape=(L, d), dtype=float_t) for lay in keep},
        "token_ids": datasets.Sequence(datasets.Value("int32"), length=L),
        "mask": datasets.Sequence(datasets.Value("bool"), length=L),
        **{lab: datasets.Sequence(datasets.Value("int32"), length=L) for lab in labels},
        **({"logits": datasets.Array2D(shape=(L, ds.sizes["class"]), dtype=float_t)} if "logits" in ds else {}),
        "sequence": datasets.Value("int64"),
    })
    target.parent.mkdir(parents=True, exist_ok=True)
    arrow = target.parent / f".{target.name}.arrow"
    step = int(ds.hidden.encoding.get("chunks", (256,))[0] or 256)
    idx = [names.index(k) for k in keep]
    with ArrowWriter(features=f, path=str(arrow)) as writer:
        for start in range(0, n, step):
            stop = min(n, start + step)
            block = ds.isel(sequence=slice(start, stop))
            hidden = block.hidden.values
            cols: dict[str, Any] = {lay: hidden[:, :, i, :].astype(float_t) for lay, i in zip(keep, idx, strict=True)}
            cols["token_ids"] = block.tokens.values.astype("int32")
            cols["mask"] = block["mask"].values
            for lab in labels:
                cols[lab] = block[lab].values.astype("int32")
            if "logits" in ds:
                cols["logits"] = block.logits.values.astype(float_t)
            cols["sequence"] = np.arange(start, stop, dtype="int64")
            writer.write_table(datasets.Dataset.from_dict(cols, features=f).data.table)
        writer.finalize()
    datasets.Dataset.from_file(str(arrow)).save_to_disk(str(target))
    arrow.unlink()


@register_format("saelens", "a Hugging Face datasets directory (SAELens' cached activations, or an export of ours)")
def read_saelens(store: Store | str, run: RunInfo | str, source: str | os.PathLike[str],
                 options: ImportOptions) -> ImportResult:
    """The ``saelens`` format: :func:`import_hf_datasets`."""
    return import_hf_datasets(store, run, source, **options)
