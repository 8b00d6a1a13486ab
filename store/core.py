"""The activation store: a Zarr v3 hierarchy that plain xarray opens.

Layout (schema ``layerstate/1``, DESIGN.md)::

    <store>/                  attrs: schema, title, created, tool_version, provenance
      runs/<run_id>/          attrs: task, arch, variant, seed, model/task config, config_hash, …
         weights/             one array per parameter tensor (no pickle)
         len_040/             hidden (sequence, position, layer, feature), tokens, mask,
                              logits (sequence, position, class), one int array per label
      results/<name>/         analysis outputs (xarray Datasets)

Reading is lazy (dask arrays aligned with stored chunks). Writing goes through
:class:`~store.writer.LengthWriter`, which writes chunk-aligned blocks of sequences and
records each finished block in the store, so a killed writer resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

import numpy as np
import pandas as pd
import xarray as xr
import zarr
from zarr.codecs import Crc32cCodec

from . import schema as S
from .errors import (
    CorruptStoreError,
    IncompleteError,
    InvalidArrayError,
    LayerstateError,
    MissingError,
    NotAStoreError,
    RunConflictError,
    SchemaVersionError,
)
from .location import Location, RunLock
from .provenance import now, provenance, tool_version

#: Codecs of every array we write: raw bytes plus a crc32c checksum per chunk. Float16
#: activations barely compress (1.06-1.09x) and compression costs 2-3x write speed (NOTES.md).
CHECKSUM = (Crc32cCodec(),)
TARGET_CHUNK_BYTES = 4 * 2**20


def config_hash(config: Mapping[str, Any]) -> str:
    """A stable short hash of a JSON-able config (key order does not matter)."""
    blob = json.dumps(_jsonable(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def run_identity(
    task: str, arch: str, variant: str, seed: int,
    model_config: Mapping | None = None, task_config: Mapping | None = None,
) -> dict[str, Any]:
    """What defines a run; its :func:`config_hash` is the run's ``config_hash`` attribute."""
    return {
        "task": task, "arch": arch, "variant": variant, "seed": int(seed),
        "model_config": dict(model_config or {}), "task_config": dict(task_config or {}),
    }


def _jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays and tuples so attrs stay plain JSON."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return obj


class Store:
    """A layerstate store at a path, zip file or fsspec URL.

    Use :meth:`create` for a new store and :meth:`open` for an existing one.

    Examples
    --------
    >>> st = Store.create("acts.zarr", title="demo")                      # doctest: +SKIP
    >>> st.add_run("r0", task="parity", arch="lstm", seed=0)              # doctest: +SKIP
    >>> with st.length_writer("r0", 40, n_sequences=256, n_layers=4,      # doctest: +SKIP
    ...                       n_features=128, labels=["parity"], n_classes=2) as w:
    ...     w.append(hidden=h, tokens=t, labels={"parity": y}, mask=m, logits=z)
    >>> st.open_length("r0", 40).hidden                                    # doctest: +SKIP
    """

    def __init__(self, location: Location, root: zarr.Group, read_only: bool) -> None:
        self.location = location
        self.root = root
        self.read_only = read_only
        self._zstore = root.store
        self._defer = 0
        self._stale = False

    # ------------------------------------------------------------------ open/create
    @classmethod
    def create(
        cls,
        url: str | Any,
        *,
        title: str = "",
        storage_options: dict | None = None,
        exist_ok: bool = False,
    ) -> Store:
        """Create an empty store (or open it for writing if ``exist_ok`` and it is one).

        Raises
        ------
        RunConflictError
            If something already exists at ``url`` (a store without ``exist_ok``, or any
            other file or directory): nothing there is touched.
        """
        loc = Location(url, storage_options or {})
        if loc.is_zip:
            raise ValueError(
                f"{loc}: a zip is write-once; create a directory store, then `layerstate pack` it"
            )
        if loc.exists():
            if exist_ok:
                return cls.open(url, mode="r+", storage_options=storage_options)
            what = "a store" if _looks_like_store(loc) else "a file or directory"
            raise RunConflictError(
                f"{loc} already exists and is {what}; choose a new path, or open it with "
                "Store.open(..., mode='r+') to add to it"
            )
        root = zarr.open_group(store=loc.zarr_store(read_only=False), mode="w-", zarr_format=3)
        root.attrs.update(
            {
                "schema": S.SCHEMA,
                "title": title,
                "created": now(),
                "tool_version": tool_version(),
                "provenance": provenance(),
            }
        )
        root.require_group(S.RUNS)
        root.require_group(S.RESULTS)
        st = cls(loc, root, read_only=False)
        st.consolidate()
        return st

    @classmethod
    def open(
        cls, url: str | Any, *, mode: str = "r", storage_options: dict | None = None
    ) -> Store:
        """Open an existing store read-only (``mode="r"``) or for writing (``"r+"``).

        Raises
        ------
        NotAStoreError
            The path does not exist or holds no layerstate store.
        SchemaVersionError
            The store was written with a newer schema than this layerstate understands.
        """
        if mode not in ("r", "r+"):
            raise ValueError(f"mode must be 'r' or 'r+', got {mode!r}")
        loc = Location(url, storage_options or {})
        if not loc.exists():
            raise NotAStoreError(
                f"{loc} does not exist; check the path, or create a store with `layerstate capture`"
            )
        read_only = mode == "r"
        try:
            zstore = loc.zarr_store(read_only=read_only)
            # Writers never trust consolidated metadata: it is a snapshot taken at the
            # last finished write, and stale membership would hide their own groups.
            root = zarr.open_group(
                store=zstore, mode="r" if read_only else "r+", zarr_format=3,
                use_consolidated=None if read_only else False,
            )
        except LayerstateError:
            raise
        except (FileNotFoundError, KeyError, ValueError, zarr.errors.BaseZarrError):
            raise NotAStoreError(
                f"{loc} is not a layerstate store (no Zarr v3 group at its root); "
                "point at a directory made by `layerstate capture` or a file made by `layerstate pack`"
            ) from None
        _check_schema(loc, dict(root.attrs))
        return cls(loc, root, read_only)

    def consolidate(self) -> None:
        """Refresh consolidated metadata, the snapshot that read-only openers see.

        Inside :meth:`deferred_consolidation` this only marks the snapshot stale: one
        consolidation at the end replaces one per finished write, which re-reads every
        metadata document of the store and so made a many-run capture quadratic.
        """
        if self.read_only:
            return
        if self._defer:
            self._stale = True
            return
        zarr.consolidate_metadata(self._zstore)

    @contextlib.contextmanager
    def deferred_consolidation(self) -> Iterator[Store]:
        """Consolidate once when the block ends (also on error), not after every write."""
        self._defer += 1
        try:
            yield self
        finally:
            self._defer -= 1
            if not self._defer and self._stale:
                self._stale = False
                self.consolidate()

    # ------------------------------------------------------------------ runs
    @property
    def attrs(self) -> dict:
        return dict(self.root.attrs)

    def _runs_group(self) -> zarr.Group:
        return _group(self.root, S.RUNS)

    def run_ids(self) -> list[str]:
        """All run ids, sorted."""
        return sorted(name for name, _ in self._runs_group().groups())

    def _run(self, run_id: str) -> zarr.Group:
        runs = self._runs_group()
        if run_id not in runs:
            raise MissingError(
                f"run {run_id!r} is not in {self.location}; runs there: "
                f"{', '.join(self.run_ids()) or '(none)'}"
            )
        return _group(runs, run_id)

    def run_attrs(self, run_id: str) -> dict:
        """The attributes of one run (task, arch, variant, seed, configs, metrics, …)."""
        return dict(self._run(run_id).attrs)

    def runs(self) -> pd.DataFrame:
        """One row per run: task, arch, variant, seed, stored lengths, weights present."""
        rows = []
        for rid in self.run_ids():
            a = self.run_attrs(rid)
            rows.append(
                {
                    "run": rid,
                    "task": a.get("task"),
                    "arch": a.get("arch"),
                    "variant": a.get("variant"),
                    "seed": a.get("seed"),
                    "lengths": self.lengths(rid),
                    "weights": self.has_weights(rid),
                }
            )
        cols = ["run", "task", "arch", "variant", "seed", "lengths", "weights"]
        return pd.DataFrame(rows, columns=cols).set_index("run")

    def select(self, **filters: Any) -> list[str]:
        """Run ids whose attributes match every filter.

        A filter value may be a single value or a list of accepted values, e.g.
        ``select(task="s3", arch=["lstm", "mamba"])``. Unknown attribute names raise.
        """
        out = []
        for rid in self.run_ids():
            a = self.run_attrs(rid)
            for key in filters:
                if key not in a:
                    raise KeyError(
                        f"runs have no attribute {key!r}; filter on one of: {', '.join(sorted(a))}"
                    )
            if all(_matches(a[k], v) for k, v in filters.items()):
                out.append(rid)
        return out

    def add_run(
        self,
        run_id: str,
        *,
        task: str,
        arch: str,
        seed: int,
        variant: str = "default",
        model_config: Mapping | None = None,
        task_config: Mapping | None = None,
        **attrs: Any,
    ) -> str:
        """Add a run, or confirm that an identical one exists (idempotent).

        The config hash covers task, arch, variant, seed and both configs; adding a run id
        that exists with a different hash raises :class:`RunConflictError` and changes nothing.
        """
        self._writable()
        S.check_run_id(run_id)
        identity = run_identity(task, arch, variant, seed, model_config, task_config)
        h = config_hash(identity)
        runs = self._runs_group()
        if run_id in runs:
            old = runs[run_id].attrs.get("config_hash")
            if old != h:
                raise RunConflictError(
                    f"run {run_id!r} already exists in {self.location} with a different config "
                    f"(hash {old} vs {h}); use a new run id, or a new store for the new config"
                )
            return run_id
        grp = runs.create_group(run_id)
        grp.attrs.update(_jsonable({**identity, **attrs, "config_hash": h, "created": now()}))
        self.consolidate()
        return run_id

    def update_run_attrs(self, run_id: str, **attrs: Any) -> None:
        """Add or replace run attributes (training metrics, evaluation, …); identity is fixed."""
        self._writable()
        frozen = set(attrs) & {"task", "arch", "variant", "seed", "model_config", "task_config", "config_hash"}
        if frozen:
            raise RunConflictError(
                f"cannot change {sorted(frozen)} of run {run_id!r}: they define it; add a new run instead"
            )
        self._run(run_id).attrs.update(_jsonable(attrs))

    # ------------------------------------------------------------------ weights
    def write_weights(self, run_id: str, state_dict: Mapping[str, Any], *, overwrite: bool = False) -> None:
        """Store a model's parameters, one array per tensor (bf16 is widened to float32).

        Accepts numpy arrays or torch tensors. Weights are marked complete only after every
        array is written, so a killed writer never leaves weights that look usable.
        """
        self._writable()
        run = self._run(run_id)
        if S.WEIGHTS in run:
            if run[S.WEIGHTS].attrs.get("complete") and not overwrite:
                raise RunConflictError(
                    f"run {run_id!r} already has weights; pass overwrite=True to replace them"
                )
            del run[S.WEIGHTS]
        grp = run.create_group(S.WEIGHTS)
        dtypes = {}
        for name, value in state_dict.items():
            arr, orig = _to_numpy(value)
            dtypes[name] = orig
            chunks = _row_chunks(arr.shape, arr.dtype.itemsize, 8 * 2**20)
            a = grp.create_array(
                name, shape=arr.shape, dtype=arr.dtype, chunks=chunks, fill_value=0,
                compressors=CHECKSUM, config={"write_empty_chunks": True},
                # Plain xarray needs dim names on every array: one private dim per axis.
                dimension_names=[f"{name}:{i}" for i in range(arr.ndim)],
            )
            a[...] = arr
        grp.attrs.update({"complete": True, "dtypes": dtypes, "names": list(state_dict)})
        self.consolidate()

    def has_weights(self, run_id: str) -> bool:
        run = self._run(run_id)
        return S.WEIGHTS in run and bool(run[S.WEIGHTS].attrs.get("complete"))

    def read_weights(self, run_id: str) -> dict[str, np.ndarray]:
        """The stored parameters as numpy arrays, in the order they were written."""
        if not self.has_weights(run_id):
            raise MissingError(
                f"run {run_id!r} has no (complete) weights in {self.location}; "
                "train it first with `layerstate train`"
            )
        grp = _group(self._run(run_id), S.WEIGHTS)
        names = cast("list[str] | None", grp.attrs.get("names")) or sorted(n for n, _ in grp.arrays())
        return {n: np.asarray(_array(grp, n)[...]) for n in names}

    # ------------------------------------------------------------------ lengths
    def lengths(self, run_id: str, kind: str = "len") -> list[int]:
        """Sequence lengths stored for a run (``kind="cf"`` for counterfactual groups)."""
        out = []
        for name, _ in self._run(run_id).groups():
            parsed = S.parse_length_group(name)
            if parsed and parsed[0] == kind:
                out.append(parsed[1])
        return sorted(out)

    def length_writer(self, run_id: str, length: int, **kwargs: Any):
        """A :class:`~store.writer.LengthWriter` for one run and length (see its docs)."""
        from .writer import LengthWriter

        self._writable()
        self._run(run_id)
        return LengthWriter(self, run_id, length, **kwargs)

    def write_length(
        self,
        run_id: str,
        length: int | None = None,
        *,
        hidden: Any,
        tokens: Any,
        labels: Mapping[str, Any],
        mask: Any = None,
        logits: Any = None,
        layers: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Write a whole length at once from in-memory arrays (activations captured elsewhere).

        ``hidden`` is ``(sequence, position, layer, feature)``: a numpy/torch array in that
        order or an ``xarray.DataArray`` with those dims in any order. ``mask`` defaults to
        "every position labelled"; ``logits`` may be omitted.
        """
        hidden = _ordered(hidden, S.DIMS["hidden"], "hidden")
        n, L, n_layer, n_feat = hidden.shape
        if length is not None and length != L:
            raise InvalidArrayError(
                f"length={length} but hidden has {L} positions; pass length={L} or fix the array"
            )
        logits_arr = None if logits is None else _ordered(logits, S.DIMS["logits"], "logits")
        with self.length_writer(
            run_id, L, n_sequences=n, layers=layers or S.layer_names(n_layer - 1),
            n_features=n_feat, labels=list(labels),
            n_classes=None if logits_arr is None else logits_arr.shape[-1], **kwargs,
        ) as w:
            if w.complete:
                return
            w.append(hidden=hidden, tokens=tokens, labels=labels, mask=mask, logits=logits_arr)

    def _length_group(self, run_id: str, length: int, kind: str = "len") -> zarr.Group:
        run = self._run(run_id)
        name = S.length_group(length, kind)
        if name not in run:
            have = self.lengths(run_id, kind)
            raise MissingError(
                f"run {run_id!r} has no {kind} group for length {length}; stored lengths: "
                f"{', '.join(map(str, have)) or '(none)'} — capture it with `layerstate capture`"
            )
        return _group(run, name)

    def open_length(
        self,
        run_id: str,
        length: int,
        *,
        kind: str = "len",
        allow_incomplete: bool = False,
        lazy: str = "dask",
    ) -> xr.Dataset:
        """One run and length as a lazy, dask-backed Dataset (chunks = stored chunks).

        Returns
        -------
        xarray.Dataset
            ``hidden (sequence, position, layer, feature)``, ``tokens``, ``mask``, one int
            variable per label (all ``(sequence, position)``), ``logits`` if stored; the run's
            attributes under ``attrs["run"]``.

        ``lazy="dask"`` (default) backs variables with dask arrays whose chunks are the
        stored chunks; ``lazy="xarray"`` uses xarray's own lazy indexing without dask, which
        loads whole arrays 2-3x faster (see :meth:`load_length`).

        Raises
        ------
        IncompleteError
            If the length is still being written (or a writer was killed) and
            ``allow_incomplete`` is False: unwritten chunks would read as NaN/fill values.
        """
        grp = self._length_group(run_id, length, kind)
        attrs = dict(grp.attrs)
        if not attrs.get(S.ATTR_COMPLETE) and not allow_incomplete:
            done = len(cast("list[int]", attrs.get(S.ATTR_COMPLETED, [])))
            total = attrs.get("n_blocks", "?")
            raise IncompleteError(
                f"run {run_id!r} length {length} is incomplete ({done} of {total} blocks written); "
                "finish it by re-running the capture (it resumes), or pass allow_incomplete=True"
            )
        path = f"{S.RUNS}/{run_id}/{S.length_group(length, kind)}"
        if lazy not in ("dask", "xarray"):
            raise ValueError(f"lazy must be 'dask' or 'xarray', got {lazy!r}")
        ds = xr.open_zarr(
            self._zstore, group=path, consolidated=False, zarr_format=3,
            chunks={} if lazy == "dask" else None,
        )
        ds.attrs["run_id"] = run_id
        ds.attrs["run"] = self.run_attrs(run_id)
        return ds

    def load_length(self, run_id: str, length: int, **kwargs: Any) -> xr.Dataset:
        """One run and length read fully into memory (the fast path for whole arrays:
        chunks fetched, checked and placed by a thread pool, ``store.chunks.read_whole``)."""
        from .chunks import read_whole

        ds = self.open_length(run_id, length, lazy="xarray", **kwargs)
        grp = self._length_group(run_id, length, kwargs.get("kind", "len"))

        def load() -> xr.Dataset:
            fast = {}
            for name, var in ds.data_vars.items():
                values = read_whole(_array(grp, str(name)))
                if values is not None:
                    fast[name] = var.copy(data=values)
            return ds.assign(fast).compute()

        return self._guarded(load)

    def label_names(self, run_id: str, length: int, kind: str = "len") -> list[str]:
        return list(cast("list[str]", self._length_group(run_id, length, kind).attrs.get("labels", [])))

    # ------------------------------------------------------------------ results
    def write_result(self, name: str, ds: xr.Dataset, *, overwrite: bool = True) -> None:
        """Store an analysis result Dataset under ``results/<name>`` (checksummed, no pickle)."""
        self._writable()
        if not isinstance(ds, xr.Dataset):
            raise TypeError(f"results must be an xarray.Dataset, got {type(ds).__name__}")
        for v in ds.variables.values():
            if v.dtype == object:
                raise InvalidArrayError(
                    f"result {name!r} variable has object dtype; convert it to numbers or fixed strings"
                )
        if not overwrite and name in self.results():
            raise RunConflictError(f"result {name!r} exists; pass overwrite=True to replace it")
        # Fixed-width numpy strings have no Zarr v3 spec; variable-length strings do.
        ds = ds.copy()
        for var in [k for k, v in ds.variables.items() if v.dtype.kind == "U"]:
            ds[var] = ds[var].astype(np.dtypes.StringDType())
        enc = {v: {"compressors": CHECKSUM} for v in ds.variables}
        ds.attrs = _jsonable(ds.attrs)
        # Every chunk is written, even all-fill ones: validate treats a missing chunk as damage.
        with zarr.config.set({"array.write_empty_chunks": True}):
            ds.to_zarr(
                self._zstore, group=f"{S.RESULTS}/{name}", mode="w", zarr_format=3,
                consolidated=False, encoding=enc,
            )
        self.consolidate()

    def results(self) -> list[str]:
        """Names of stored results (nested names use ``/``)."""
        if S.RESULTS not in self.root:
            return []
        out = []
        for path, node in _group(self.root, S.RESULTS).members(max_depth=None):
            if isinstance(node, zarr.Group) and any(True for _ in node.arrays()):
                out.append(path)
        return sorted(out)

    def read_result(self, name: str) -> xr.Dataset:
        """A stored result, loaded into memory."""
        if name not in self.results():
            raise MissingError(
                f"no result {name!r} in {self.location}; stored results: "
                f"{', '.join(self.results()) or '(none)'}"
            )
        with xr.open_zarr(
            self._zstore, group=f"{S.RESULTS}/{name}", consolidated=False, zarr_format=3
        ) as ds:
            return ds.load()

    # ------------------------------------------------------------------ helpers
    def compute(self, obj: Any) -> Any:
        """Compute a lazy xarray object, naming the array and chunk if a checksum fails."""
        return self._guarded(obj.compute)

    def _guarded(self, fn: Any) -> Any:
        """``fn()``, turning a checksum/decoding failure into a CorruptStoreError that names
        the array and chunk (found by re-checking the store)."""
        try:
            return fn()
        except Exception as exc:  # zarr raises plain ValueErrors on checksum mismatch
            if not _is_corruption(exc):
                raise
            from .integrity import find_corruption

            problems = find_corruption(self)
            detail = problems[0] if problems else str(exc)
            raise CorruptStoreError(
                f"corrupted data in {self.location}: {detail}; re-run the capture for that run "
                "(it rewrites the block) or restore the store from a copy"
            ) from None

    def lock(self, run_id: str) -> RunLock:
        return RunLock(self.location, run_id)

    def _writable(self) -> None:
        if self.read_only:
            raise PermissionError(
                f"{self.location} was opened read-only; open it with Store.open(..., mode='r+')"
            )

    def __repr__(self) -> str:
        return f"<layerstate.Store {self.location} runs={len(self.run_ids())}>"


def open_store(url: str | Any, mode: str = "r", **kwargs: Any) -> Store:
    """Shorthand for :meth:`Store.open`."""
    return Store.open(url, mode=mode, **kwargs)


def create_store(url: str | Any, **kwargs: Any) -> Store:
    """Shorthand for :meth:`Store.create`."""
    return Store.create(url, **kwargs)


# ---------------------------------------------------------------------- internals
def _group(parent: zarr.Group, name: str) -> zarr.Group:
    """``parent[name]``, which the schema says is a group (KeyError if it is absent)."""
    node = parent[name]
    if not isinstance(node, zarr.Group):
        raise CorruptStoreError(
            f"{_node_path(parent, name)} is an array where schema {S.SCHEMA!r} expects a group; "
            "the store was changed by another tool: re-create it or restore it from a copy"
        )
    return node


def _array(parent: zarr.Group, name: str) -> zarr.Array:
    """``parent[name]``, which the schema says is an array (KeyError if it is absent)."""
    node = parent[name]
    if not isinstance(node, zarr.Array):
        raise CorruptStoreError(
            f"{_node_path(parent, name)} is a group where schema {S.SCHEMA!r} expects an array; "
            "the store was changed by another tool: re-create it or restore it from a copy"
        )
    return node


def _node_path(parent: zarr.Group, name: str) -> str:
    return "/".join(p for p in (parent.path, name) if p)


def _looks_like_store(loc: Location) -> bool:
    try:
        fs, root = loc.filesystem()
        return fs.exists(f"{root}/zarr.json")
    except Exception:
        return False


def _check_schema(loc: Location, attrs: dict) -> None:
    schema = attrs.get("schema")
    if schema is None:
        raise NotAStoreError(
            f"{loc} is a Zarr group but not a layerstate store (no 'schema' attribute); "
            "create stores with `layerstate capture` or Store.create"
        )
    name, _, ver = str(schema).partition("/")
    if name != S.SCHEMA_NAME or not ver.isdigit():
        raise SchemaVersionError(f"{loc} has unknown schema {schema!r}; expected {S.SCHEMA!r}")
    if int(ver) > S.SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{loc} uses schema {schema!r}, newer than this layerstate understands ({S.SCHEMA}); "
            "upgrade layerstate (pip install -U layerstate)"
        )


def _matches(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, list | tuple | set):
        return value in wanted
    return value == wanted


def _to_numpy(value: Any) -> tuple[np.ndarray, str]:
    if hasattr(value, "detach"):  # a torch tensor; store never imports torch
        orig = str(value.dtype).removeprefix("torch.")
        t = value.detach().cpu()
        if orig == "bfloat16":
            t = t.float()
        return t.numpy(), orig
    arr = np.asarray(value)
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise InvalidArrayError(f"weights must be numeric arrays, got dtype {arr.dtype}")
    return arr, str(arr.dtype)


def _row_chunks(shape: tuple[int, ...], itemsize: int, target: int) -> tuple[int, ...]:
    """Chunk only along the first axis, keeping each chunk at most ``target`` bytes."""
    if not shape:
        return ()
    row = max(1, math.prod(shape[1:]) * itemsize)
    return (max(1, min(shape[0], target // row)),) + tuple(shape[1:])


def _ordered(value: Any, dims: tuple[str, ...], name: str) -> np.ndarray:
    """A DataArray (any dim order) or array (storage order) as a numpy array in storage order."""
    if isinstance(value, xr.DataArray):
        if set(value.dims) != set(dims):
            raise InvalidArrayError(
                f"{name} has dims {value.dims}; expected {dims} (rename or transpose the DataArray)"
            )
        return np.asarray(value.transpose(*dims).values)
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.ndim != len(dims):
        raise InvalidArrayError(
            f"{name} has {arr.ndim} dims {arr.shape}; expected {len(dims)} dims {dims}"
        )
    return arr


def _is_corruption(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(s in text for s in ("checksum", "crc32c", "buffer size", "cannot reshape", "decod"))


def iter_arrays(group: zarr.Group, prefix: str = "") -> Iterable[tuple[str, zarr.Array]]:
    """Every array below a group, with its path."""
    for path, node in group.members(max_depth=None):
        if isinstance(node, zarr.Array):
            yield (f"{prefix}{path}", node)
