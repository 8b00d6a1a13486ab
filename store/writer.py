"""Resumable, chunk-aligned writes of one (run, length) group.

The unit of work is a *block*: ``block_size`` consecutive sequences, exactly one chunk
along ``sequence`` in every array, so no two writes ever share a chunk (zarr does not
check this for numpy writes, NOTES.md). Arrays are created at full size up front —
resizing arrays one by one is not crash-safe — and each block, once all its arrays are
written, is recorded in the group's attributes (an atomic rename on local disks). A
writer killed at any point therefore leaves finished blocks recorded and unfinished ones
simply unrecorded; running it again redoes only those, and deterministic producers give a
bit-identical store.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

import numpy as np
import zarr
from zarr.storage import LocalStore

from . import schema as S
from .chunks import ChunkWriter, NotFinite, all_finite, make_durable, wait_all
from .core import CHECKSUM, TARGET_CHUNK_BYTES, Store, _array, _group, _jsonable, _ordered
from .errors import IncompleteError, InvalidArrayError, RunConflictError

_FLOAT_DTYPES = ("float16", "float32")


class _Spec(TypedDict):
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


class LengthWriter:
    """Write the activations of one run at one sequence length.

    Parameters
    ----------
    store, run_id, length
        Where to write; the run must exist (:meth:`Store.add_run`).
    n_sequences
        Total number of sequences this group will hold (fixed up front).
    n_features
        Width of the hidden states (``feature`` dim).
    labels
        Names of the per-position integer labels, e.g. ``["depth", "top"]``.
    layers
        The ``layer`` coordinate (default ``embed, L0, …`` from ``n_layers``).
    n_layers
        Number of blocks, if ``layers`` is not given.
    n_classes
        Width of ``logits``; ``None`` stores no logits.
    target
        The label the model was trained on (recorded; default the first label).
    dtype
        ``"float16"`` (default) or ``"float32"`` for hidden states and logits.
    block_size
        Sequences per chunk; default keeps one layer's chunk near 4 MB.
    kind
        Group prefix: ``"len"`` for activations, ``"cf"`` etc. for other captures.
    allow_nonfinite
        Accept NaN/Inf in ``hidden`` (recorded in the group's attrs); refused by default.
    attrs
        Extra JSON-able attributes for the group (e.g. which sites were captured).
    extra
        More per-sequence variables: ``{name: (dims after 'sequence', their sizes, dtype)}``,
        e.g. ``{"corrupt_position": ((), (), "int64")}`` or an extra activation site
        ``{"site_L0_cell": (("position", "site_L0_cell_feature"), (40, 162), "float16")}``.

    Notes
    -----
    Use as a context manager. :meth:`write_block` writes block ``b`` (any order);
    :meth:`append` buffers arbitrary batches into blocks. ``missing_blocks()`` tells a
    resumed producer what is left to do.
    """

    def __init__(
        self,
        store: Store,
        run_id: str,
        length: int,
        *,
        n_sequences: int,
        n_features: int,
        labels: Sequence[str],
        layers: Sequence[str] | None = None,
        n_layers: int | None = None,
        n_classes: int | None = None,
        target: str | None = None,
        dtype: str = "float16",
        block_size: int | None = None,
        kind: str = "len",
        allow_nonfinite: bool = False,
        attrs: Mapping[str, Any] | None = None,
        extra: Mapping[str, tuple[Sequence[str], Sequence[int], str]] | None = None,
    ) -> None:
        if dtype not in _FLOAT_DTYPES:
            raise ValueError(f"dtype must be one of {_FLOAT_DTYPES}, got {dtype!r}")
        if layers is None:
            if n_layers is None:
                raise ValueError("give layers=[...] or n_layers=N (number of blocks)")
            layers = S.layer_names(n_layers)
        labels = list(labels)
        if not labels:
            raise InvalidArrayError("at least one label is needed (e.g. labels=['parity'])")
        clash = set(labels) & {*S.CORE_VARS, "sequence", "position", "layer"}
        if clash:
            raise InvalidArrayError(f"label names {sorted(clash)} clash with store variables; rename them")
        for n, what in ((n_sequences, "n_sequences"), (n_features, "n_features"), (length, "length")):
            if int(n) < 1:
                raise InvalidArrayError(f"{what} must be positive, got {n}")
        self.store, self.run_id, self.length, self.kind = store, run_id, int(length), kind
        itemsize = np.dtype(dtype).itemsize
        auto = max(1, TARGET_CHUNK_BYTES // (self.length * n_features * itemsize))
        self.spec: _Spec = {
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
        clash = set(self.spec["extra"]) & {*labels, *S.CORE_VARS, "sequence", "position", "layer"}
        if clash:
            raise InvalidArrayError(f"extra variables {sorted(clash)} clash with store variables; rename them")
        if self.spec["target"] not in labels:
            raise InvalidArrayError(f"target {target!r} is not one of the labels {labels}")
        self.allow_nonfinite = allow_nonfinite
        self._extra_attrs = dict(attrs or {})
        self._lock = store.lock(run_id).acquire()
        try:
            self.group = self._open_or_create()
        except BaseException:
            self._lock.release()
            raise
        self._buffer: list[dict[str, Any]] = []
        self._buffered = 0
        self._chunks: ChunkWriter | None = None
        self._inflight: list[tuple[int, list[Any]]] = []  # blocks submitted, not yet recorded
        self._arrays: dict[str, zarr.Array] = {}
        self._cursor = self.n_written

    # ------------------------------------------------------------------ layout
    @property
    def block_size(self) -> int:
        return self.spec["block_size"]

    @property
    def n_sequences(self) -> int:
        return self.spec["n_sequences"]

    @property
    def n_blocks(self) -> int:
        return math.ceil(self.n_sequences / self.block_size)

    def block_range(self, b: int) -> tuple[int, int]:
        """Sequences ``[start, stop)`` of block ``b``."""
        if not 0 <= b < self.n_blocks:
            raise IndexError(f"block {b} out of range 0..{self.n_blocks - 1}")
        start = b * self.block_size
        return start, min(start + self.block_size, self.n_sequences)

    def completed_blocks(self) -> set[int]:
        """Blocks recorded as written (after waiting for any still being stored)."""
        self.flush()
        return self._recorded()

    def _recorded(self) -> set[int]:
        return set(cast("list[int]", self.group.attrs.get(S.ATTR_COMPLETED, [])))

    def missing_blocks(self) -> list[int]:
        done = self.completed_blocks()
        return [b for b in range(self.n_blocks) if b not in done]

    @property
    def complete(self) -> bool:
        self.flush()
        return bool(self.group.attrs.get(S.ATTR_COMPLETE))

    @property
    def n_written(self) -> int:
        """Sequences durably written from the start without a gap (where ``append`` resumes)."""
        done = self.completed_blocks()
        b = 0
        while b in done:
            b += 1
        return self.n_sequences if b >= self.n_blocks else b * self.block_size

    def _open_or_create(self) -> zarr.Group:
        run = self.store._run(self.run_id)
        name = S.length_group(self.length, self.kind)
        if name in run:
            grp = _group(run, name)
            old = cast("dict[str, Any] | None", grp.attrs.get("spec"))
            if old is None:  # killed while creating arrays: nothing was written yet
                del run[name]
            elif old != _jsonable(self.spec):
                diff = {k: (old.get(k), v) for k, v in _jsonable(self.spec).items() if old.get(k) != v}
                done = cast("list[int]", grp.attrs.get(S.ATTR_COMPLETED, []))
                if grp.attrs.get(S.ATTR_COMPLETE) or (done and set(diff) != {"dtype"}):
                    raise RunConflictError(
                        f"run {self.run_id!r} {name} exists with a different layout {diff} "
                        "(stored vs requested); write to a new store or run id"
                    )
                # An unfinished group is unreadable (open_length refuses it) and no writer
                # holds it (we hold the run lock). It is replaced when nothing in it is
                # finished, or when only the dtype changes (float32 after a float16 overflow
                # was refused); any other change to a half-written group is refused.
                warnings.warn(
                    f"replacing the unfinished {name} of run {self.run_id!r} "
                    f"(layout changed: {diff})", stacklevel=3,
                )
                del run[name]
            else:
                if not grp.attrs.get(S.ATTR_COMPLETE):  # a resume: clear what a kill left
                    _remove_partial_files(grp)
                return grp
        return self._create(run, name)

    def _create(self, run: zarr.Group, name: str) -> zarr.Group:
        sp, L = self.spec, self.length
        n, blk = sp["n_sequences"], sp["block_size"]
        grp = run.create_group(name)

        def arr(var, shape, chunks, dtype, fill, dims):
            return grp.create_array(
                var, shape=shape, chunks=chunks, dtype=dtype, fill_value=fill,
                dimension_names=list(dims), compressors=CHECKSUM,
                config={"write_empty_chunks": True},
            )

        n_layer = len(sp["layers"])
        # One chunk = one block of sequences x all positions x ONE layer x all features:
        # reading a layer touches only that layer's bytes.
        arr("hidden", (n, L, n_layer, sp["n_features"]), (blk, L, 1, sp["n_features"]),
            sp["dtype"], np.nan, S.DIMS["hidden"])
        arr("tokens", (n, L), (blk, L), "int32", -1, S.DIMS["tokens"])
        arr("mask", (n, L), (blk, L), "bool", False, S.DIMS["mask"])
        for lab in sp["labels"]:
            arr(lab, (n, L), (blk, L), "int32", -1, S.LABEL_DIMS)
        if sp["n_classes"]:
            arr("logits", (n, L, sp["n_classes"]), (blk, L, sp["n_classes"]),
                sp["dtype"], np.nan, S.DIMS["logits"])
        for var, (dims, shape, dtype) in sp["extra"].items():
            fill = np.nan if np.dtype(dtype).kind == "f" else (False if dtype == "bool" else -1)
            arr(var, (n, *shape), (blk, *shape), dtype, fill, ("sequence", *dims))
        # Coordinates are small: written at creation, whole.
        arr("sequence", (n,), (n,), "int64", -1, ("sequence",))[...] = np.arange(n)
        arr("position", (L,), (L,), "int64", -1, ("position",))[...] = np.arange(L)
        lay = grp.create_array("layer", shape=(n_layer,), dtype=str, dimension_names=["layer"])
        lay[...] = np.asarray(sp["layers"], dtype=str)
        grp.attrs.update(
            _jsonable(
                {
                    **self._extra_attrs,
                    "length": L,
                    "labels": sp["labels"],
                    "target": sp["target"],
                    "n_blocks": self.n_blocks,
                    S.ATTR_BLOCK: blk,
                    "nonfinite_allowed": self.allow_nonfinite,
                    S.ATTR_COMPLETED: [],
                    S.ATTR_COMPLETE: False,
                    "spec": self.spec,  # last: its presence means the layout is complete
                }
            )
        )
        return grp

    # ------------------------------------------------------------------ writing
    def write_block(
        self,
        b: int,
        *,
        hidden: Any,
        tokens: Any,
        labels: Mapping[str, Any],
        mask: Any = None,
        logits: Any = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Write block ``b`` (all its sequences, every array) and record it as done.

        Shapes: ``hidden (m, length, layer, feature)``, ``tokens``/``mask``/each label
        ``(m, length)``, ``logits (m, length, class)``, where ``m`` is the block's size.
        """
        start, stop = self.block_range(b)
        data = self._check(start, stop - start, hidden, tokens, labels, mask, logits)
        data.update(self._check_extra(start, stop - start, extra or {}))
        sl = slice(start, stop)
        floats = self._float_dtypes()
        # Rewriting a block already recorded (or about to be): check everything before
        # touching it, so a refused rewrite cannot leave a recorded block half replaced.
        eager = b in self._recorded() or any(b == prev for prev, _ in self._inflight)
        if eager:
            for var in floats.keys() & data.keys():
                data[var] = self._cast_finite(data[var], var, start, floats[var])
        # write_empty_chunks is a runtime setting, not stored with the array: without it zarr
        # compares every float16 chunk with the fill value, which made writes ~4x slower.
        # Whole chunks go through ChunkWriter (same bytes as zarr, ~2x faster, store/chunks.py):
        # its threads cast, check (NaN/Inf after the cast) and encode each chunk in one pass,
        # and this call returns once the checks pass; the chunks are stored while the caller
        # prepares the next block. A block is recorded as done only after all of its chunks
        # are stored (see _settle); a refused block is never recorded.
        if self._chunks is None:
            self._chunks = ChunkWriter()
        stored: list[Any] = []
        checks: list[tuple[str, list[Any]]] = []
        try:
            with zarr.config.set({"array.write_empty_chunks": True}):
                for var, values in data.items():
                    arr = self._arrays.get(var)
                    if arr is None:  # opening reads its metadata: once per writer, not per block
                        arr = self._arrays[var] = _array(self.group, var)
                    check = var in floats and not eager and not self.allow_nonfinite
                    submitted = self._chunks.write_row(arr, b, values, check_finite=check)
                    if submitted is None:
                        if var in floats and not eager:
                            values = self._cast_finite(values, var, start, floats[var])
                        arr[sl] = values
                    else:
                        stored.extend(submitted.stored)
                        checks.append((var, submitted.checked))
            # the blocks before this one: fsynced and recorded while the threads work on it
            self._settle(keep=0)
            for var, futures in checks:
                for fut in futures:
                    try:
                        fut.result()
                    except NotFinite:  # say where, and what to do (the chunk was not written)
                        self._cast_finite(data[var], var, start, floats[var])
                        raise
        except BaseException:
            with contextlib.suppress(BaseException):
                wait_all(stored)  # no write of this block may outlive the error
            raise
        self._inflight.append((b, stored))

    def flush(self) -> None:
        """Wait until every block written so far is stored, and record them."""
        self._settle(keep=0)

    def _settle(self, keep: int) -> None:
        """Record the blocks in flight whose chunks are all stored, waiting for all but the
        newest ``keep``; a failed chunk write is raised and its block stays unrecorded.
        Local chunk files are fsynced first: a recorded block survives a power cut."""
        ready, paths, error = [], [], None
        while len(self._inflight) > keep:
            b, futures = self._inflight.pop(0)
            try:
                paths += [p for p in wait_all(futures) if p is not None]
            except BaseException as exc:  # the other blocks may still be recorded
                error = error or exc
                continue
            ready.append(b)
        if ready:
            make_durable(paths)
            done = self._recorded() | set(ready)
            self.group.attrs[S.ATTR_COMPLETED] = sorted(done)
            if len(done) == self.n_blocks:
                self._finish()
        if error is not None:
            raise error

    def append(
        self,
        *,
        hidden: Any,
        tokens: Any,
        labels: Mapping[str, Any],
        mask: Any = None,
        logits: Any = None,
    ) -> None:
        """Add a batch of any size after the sequences written so far.

        After a restart, ``n_written`` says how many sequences are already stored: skip
        those before appending again.
        """
        hidden = _ordered(hidden, S.DIMS["hidden"], "hidden")
        m = hidden.shape[0]
        if self._cursor + self._buffered + m > self.n_sequences:
            raise InvalidArrayError(
                f"appending {m} sequences would exceed n_sequences={self.n_sequences} "
                f"({self._cursor + self._buffered} already written or buffered)"
            )
        self._buffer.append(
            {
                "hidden": hidden,
                "tokens": _ordered(tokens, S.DIMS["tokens"], "tokens"),
                "labels": {k: _ordered(v, S.LABEL_DIMS, f"label {k!r}") for k, v in labels.items()},
                "mask": None if mask is None else _ordered(mask, S.DIMS["mask"], "mask"),
                "logits": None if logits is None else _ordered(logits, S.DIMS["logits"], "logits"),
            }
        )
        self._buffered += m
        self._flush(final=False)

    def _flush(self, final: bool) -> None:
        while self._buffered:
            b = self._cursor // self.block_size
            start, stop = self.block_range(b)
            need = stop - start
            if self._buffered < need:
                return
            batch = _take(self._buffer, need)
            self._buffered -= need
            self.write_block(b, **batch)
            self._cursor = stop

    def close(self) -> None:
        """Flush, consolidate metadata and release the run lock."""
        try:
            if self._buffered:
                raise IncompleteError(
                    f"{self._buffered} appended sequences do not fill block "
                    f"{self._cursor // self.block_size}; append all {self.n_sequences} sequences"
                )
            self.flush()
            self.store.consolidate()
        finally:
            self._release()

    def __enter__(self) -> LengthWriter:
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # blocks whose chunks did get stored are still recorded: a resume skips them
            with contextlib.suppress(Exception):
                self.flush()
        finally:
            self._release()

    def _release(self) -> None:
        try:
            if self._chunks is not None:
                chunks, self._chunks = self._chunks, None
                # every write is waited for (none outlives the lock); their failures were
                # raised by write_block or flush already, or an exception is on its way out
                chunks.close(raise_errors=False)
        finally:
            self._lock.release()

    def _finish(self) -> None:
        self.group.attrs[S.ATTR_COMPLETE] = True

    # ------------------------------------------------------------------ checks
    def _check(self, start, m, hidden, tokens, labels, mask, logits) -> dict[str, np.ndarray]:
        sp, L = self.spec, self.length
        hidden = _ordered(hidden, S.DIMS["hidden"], "hidden")
        want = (m, L, len(sp["layers"]), sp["n_features"])
        if hidden.shape != want:
            raise InvalidArrayError(
                f"hidden has shape {hidden.shape}; expected {want} "
                "(sequence, position, layer, feature) for this block"
            )
        _numeric(hidden, "hidden")
        out = {"hidden": hidden}  # float arrays are cast and checked as they are written
        out["tokens"] = self._int2d(tokens, "tokens", m)
        if set(labels) != set(sp["labels"]):
            raise InvalidArrayError(
                f"labels {sorted(labels)} do not match the declared labels {sorted(sp['labels'])}"
            )
        for name, val in labels.items():
            out[name] = self._int2d(val, f"label {name!r}", m)
        if mask is None:
            out["mask"] = out[sp["target"]] >= 0
        else:
            mk = _ordered(mask, S.DIMS["mask"], "mask")
            if mk.shape != (m, L):
                raise InvalidArrayError(f"mask has shape {mk.shape}; expected {(m, L)} like tokens")
            if mk.dtype != bool:
                raise InvalidArrayError(f"mask must be boolean, got dtype {mk.dtype}")
            out["mask"] = mk
        if sp["n_classes"]:
            if logits is None:
                raise InvalidArrayError("this group stores logits: pass logits=(m, length, class)")
            lg = _ordered(logits, S.DIMS["logits"], "logits")
            if lg.shape != (m, L, sp["n_classes"]):
                raise InvalidArrayError(f"logits has shape {lg.shape}; expected {(m, L, sp['n_classes'])}")
            _numeric(lg, "logits")
            out["logits"] = lg
        return out

    def _float_dtypes(self) -> dict[str, str]:
        """The float variables and their stored dtypes (checked for NaN/Inf on write)."""
        out = {"hidden": self.spec["dtype"]}
        if self.spec["n_classes"]:
            out["logits"] = self.spec["dtype"]
        out.update({k: dt for k, (_d, _s, dt) in self.spec["extra"].items() if np.dtype(dt).kind == "f"})
        return out

    def _cast_finite(self, values: np.ndarray, name: str, start: int, dtype: str | None = None) -> np.ndarray:
        """``values`` in the stored dtype, refusing NaN/Inf — including values that only
        become Inf in the cast (float16 tops out at 65504) — unless ``allow_nonfinite``."""
        dtype = dtype or self.spec["dtype"]
        with np.errstate(over="ignore", invalid="ignore"):
            stored = values.astype(dtype, copy=False)
        if self.allow_nonfinite or all_finite(stored):
            return stored
        bad = np.argwhere(~np.isfinite(stored))[0]
        where = f"sequence {bad[0] + start}" + (f", position {bad[1]}" if bad.size > 1 else "")
        if name == "hidden":
            where += f", layer {self.spec['layers'][bad[2]]}"
        if all_finite(values):
            big = float(np.abs(values.astype("float64")).max())
            fix = ("store it as float32 (dtype='float32'; in an experiment, [capture] dtype = \"float32\")"
                   if np.dtype(dtype).itemsize < 4 else "rescale the values or fix the model")
            raise InvalidArrayError(f"{name} exceeds the {dtype} range (|x| up to {big:.4g}, first at {where}); {fix}")
        raise InvalidArrayError(
            f"{name} contains NaN or Inf (first at {where}); fix the model or pass "
            "allow_nonfinite=True to store it anyway (recorded in the store)"
        )

    def _check_extra(self, start: int, m: int, extra: Mapping[str, Any]) -> dict[str, np.ndarray]:
        want = self.spec["extra"]
        if set(extra) != set(want):
            raise InvalidArrayError(
                f"extra variables {sorted(extra)} do not match the declared ones {sorted(want)}"
            )
        out = {}
        for name, value in extra.items():
            _dims, shape, dtype = want[name]
            arr = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
            if arr.shape != (m, *shape):
                raise InvalidArrayError(f"extra {name!r} has shape {arr.shape}; expected {(m, *shape)}")
            if dtype != "bool":
                _numeric(arr, name)
            if np.dtype(dtype).kind == "f":
                out[name] = arr  # cast and checked as it is written
            else:
                out[name] = arr.astype(dtype, copy=False)
        return out

    def _int2d(self, value: Any, name: str, m: int) -> np.ndarray:
        arr = _ordered(value, S.DIMS["tokens"], name)
        if arr.shape != (m, self.length):
            raise InvalidArrayError(
                f"{name} has shape {arr.shape}; expected {(m, self.length)} (sequence, position) like hidden"
            )
        if arr.dtype.kind not in "iub":
            raise InvalidArrayError(f"{name} must be integers, got dtype {arr.dtype}")
        return arr.astype("int32", copy=False)


def _remove_partial_files(grp: zarr.Group) -> None:
    """Delete the temp files of chunk writes cut short by a kill (``*.partial``, local disks).

    A chunk is written to a temp file and renamed into place, so a killed writer leaves at
    most stray temp files, never a torn chunk; the resumed writer (which holds the run lock)
    rewrites the unrecorded blocks and removes these.
    """
    store = grp.store_path.store
    if isinstance(store, LocalStore):
        for stray in (Path(store.root) / grp.store_path.path).rglob("*.partial"):
            stray.unlink(missing_ok=True)


def _numeric(arr: np.ndarray, name: str) -> None:
    if arr.dtype.kind not in "fiu":
        raise InvalidArrayError(f"{name} must be a numeric array, got dtype {arr.dtype}")


def _take(buffer: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """Pop exactly ``n`` sequences off the front of a list of batches, concatenated."""
    parts: list[dict[str, Any]] = []
    got = 0
    while got < n:
        batch = buffer[0]
        m = np.asarray(_ordered(batch["hidden"], S.DIMS["hidden"], "hidden")).shape[0]
        k = min(m, n - got)
        parts.append(_slice(batch, 0, k))
        if k == m:
            buffer.pop(0)
        else:
            buffer[0] = _slice(batch, k, m)
        got += k
    return _concat(parts)


def _slice(batch: dict[str, Any], a: int, b: int) -> dict[str, Any]:
    def cut(v):
        return None if v is None else _as_np(v)[a:b]

    return {
        "hidden": cut(batch["hidden"]),
        "tokens": cut(batch["tokens"]),
        "labels": {k: cut(v) for k, v in batch["labels"].items()},
        "mask": cut(batch["mask"]),
        "logits": cut(batch["logits"]),
    }


def _as_np(v: Any) -> np.ndarray:
    if hasattr(v, "dims") and hasattr(v, "values"):
        return np.asarray(v.values)
    if hasattr(v, "detach"):
        return v.detach().cpu().numpy()
    return np.asarray(v)


def _concat(parts: list[dict[str, Any]]) -> dict[str, Any]:
    if len(parts) == 1:
        return parts[0]

    def cat(key):
        vals = [p[key] for p in parts]
        return None if vals[0] is None else np.concatenate(vals)

    return {
        "hidden": cat("hidden"),
        "tokens": cat("tokens"),
        "labels": {k: np.concatenate([p["labels"][k] for p in parts]) for k in parts[0]["labels"]},
        "mask": cat("mask"),
        "logits": cat("logits"),
    }
