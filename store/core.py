"""The activation store: a Zarr v3 hierarchy that plain xarray opens.

Layout (schema ``layerstate/1``; docs/store-format.md, "Overview")::

    <store>/                  attrs: schema, title, created, tool_version, provenance
      runs/<run_id>/          attrs: task, arch, variant, seed, model/task config, config_hash, …
         weights/             one array per parameter tensor (no pickle)
         checkpoint/          an unfinished training's state, removed once weights exist
         len_040/             hidden (sequence, position, layer, feature), tokens, mask,
                              logits (sequence, position, class), one int array per label
      results/<name>/         analysis outputs (xarray Datasets)

:class:`Store` opens or creates a store and keeps its consolidated-metadata snapshot; each
of its other methods hands over to the module that owns that part of the layout:
:mod:`store.contents.runs`, :mod:`store.contents.weights`, :mod:`store.io.lengths` (reads
lazily or whole, and whole writes), :class:`store.io.writer.LengthWriter` (streaming,
resumable writes) and :mod:`store.contents.results`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
import zarr

from store.contents.forget import forget_captures, forget_result, forget_run

from .access.consolidation import consolidate_checked, consolidating
from .access.lease import RunLease
from .access.location import Location
from .contents import checkpoints as _checkpoints
from .contents import results as _results
from .contents import runs as _runs
from .contents import weights as _weights
from .contents.runs import config_hash, run_identity
from .errors import (
    LayerstateError,
    MetadataDamagedError,
    NotAStoreError,
    ReadOnlyStoreError,
    RunConflictError,
    SchemaVersionError,
)
from .io import lengths as _lengths
from .io.writer import LengthWriter
from .metadata.damage import root_changed, root_damage
from .provenance import now, provenance, tool_version
from .schema import RESULTS, RUNS, SCHEMA, schema_refusal
from .zarrutil import naming_corruption, quiet

__all__ = ["Store", "config_hash", "run_identity"]


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
        with quiet():
            root = zarr.open_group(store=loc.zarr_store(read_only=False), mode="w-", zarr_format=3)
            root.attrs.update(
                {
                    "schema": SCHEMA,
                    "title": title,
                    "created": now(),
                    "tool_version": tool_version(),
                    "provenance": provenance(),
                }
            )
            root.require_group(RUNS)
            root.require_group(RESULTS)
        st = cls(loc, root, read_only=False)
        st.consolidate()
        return st

    @classmethod
    def open(
        cls, url: str | Any, *, mode: str = "r", storage_options: dict | None = None,
        consolidated: bool | None = None,
    ) -> Store:
        """Open an existing store read-only (``mode="r"``) or for writing (``"r+"``).

        ``consolidated``: read-only opens use the consolidated snapshot when there is one
        (``None``); ``False`` reads every node's own ``zarr.json`` (as writers always do).

        A store read here with its analysis results kept elsewhere (a zip, a read-only
        directory): :func:`store.paired.open_analysis`.

        Raises
        ------
        NotAStoreError
            The path does not exist or holds no layerstate store.
        MetadataDamagedError
            The store's root metadata is damaged (named, with the fix: ``layerstate repair``).
        ReadOnlyStoreError
            ``mode="r+"`` on a store that cannot be written (a zip, a read-only location).
        SchemaVersionError
            The store's schema is not ``layerstate/1``: a newer version, another tool's, or a
            version that does not exist (docs/store-format.md, "Versions").
        """
        if mode not in ("r", "r+"):
            raise ValueError(f"mode must be 'r' or 'r+', got {mode!r}")
        loc = Location(url, storage_options or {})
        if not loc.exists():
            raise NotAStoreError(loc.missing())
        read_only = mode == "r"
        if not read_only and (loc.is_zip or loc.url.startswith(("http://", "https://"))):
            what = "a packed (zip) store" if loc.is_zip else "served over HTTP"
            raise ReadOnlyStoreError(
                f"{loc} is {what}, which cannot be written: analyse it with --results DIR|URL "
                "(results go there), or copy it to a directory (`layerstate unpack`) to add to it"
            )
        try:
            zstore = loc.zarr_store(read_only=read_only)
            # Writers never trust consolidated metadata: it is a snapshot taken at the
            # last finished write, and stale membership would hide their own groups.
            with quiet():
                root = zarr.open_group(
                    store=zstore, mode="r" if read_only else "r+", zarr_format=3,
                    use_consolidated=(consolidated if read_only else False),
                )
        except (FileNotFoundError, KeyError, ValueError, TypeError, zarr.errors.BaseZarrError) as exc:
            if isinstance(exc, LayerstateError) and not isinstance(exc, MetadataDamagedError):
                raise
            damage = root_damage(loc.zarr_store(read_only=True, guarded=False), str(loc))
            if damage is not None:
                raise MetadataDamagedError(damage) from None
            raise NotAStoreError(loc.not_a_store()) from None
        attrs = dict(root.attrs)
        try:
            _check_schema(loc, attrs)
        except (NotAStoreError, SchemaVersionError):
            changed = root_changed(loc.zarr_store(read_only=True, guarded=False), str(loc), attrs)
            if changed is not None:
                raise MetadataDamagedError(changed) from None
            raise
        if not read_only and not _writable(loc):
            raise ReadOnlyStoreError(
                f"{loc} cannot be written (read-only location); analyse it with --results DIR "
                "(results go there), or copy it somewhere writable"
            )
        return cls(loc, root, read_only)

    def consolidate(self) -> None:
        """Refresh consolidated metadata, the snapshot that read-only openers see, and the
        metadata copy file beside it (the root's own document and every node's digest,
        :func:`store.metadata.digests.record_digests`).

        Several processes (on several hosts) may write different runs of one store at once:
        each consolidation holds the store's consolidation lease (:mod:`store.access.lease`), lists
        every node afresh and is checked afterwards, so the last one to finish takes in
        every write finished before it and none is left out of the snapshot
        (docs/store-format.md, S40).

        Inside :meth:`deferred_consolidation` this only marks the snapshot stale: one
        consolidation at the end replaces one per finished write, which re-reads every
        metadata document of the store and so made a many-run capture quadratic.
        """
        if self.read_only:
            return
        if self._defer:
            self._stale = True
            return
        consolidate_checked(self.location, self.root.store)

    def set_root_attrs(self, **attrs: Any) -> None:
        """Add or replace attributes of the root group, then consolidate.

        The root document also holds the snapshot that every consolidation rewrites, so this
        reads it afresh and writes it under the consolidation lease: an attribute set while
        another process consolidates is never lost (S40).
        """
        self._writable()
        with consolidating(self.location):
            with quiet():
                fresh = zarr.open_group(store=self.root.store, mode="r+", zarr_format=3,
                                        use_consolidated=False)
                fresh.attrs.update(attrs)
                self.root = zarr.open_group(store=self.root.store, mode="r+", zarr_format=3,
                                            use_consolidated=False)
            consolidate_checked(self.location, self.root.store)

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

    def run_ids(self) -> list[str]:
        """All run ids, sorted."""
        return _runs.run_ids(self.root)

    def run_group(self, run_id: str) -> zarr.Group:
        """The zarr group of one run (:class:`MissingError` naming the runs there if absent)."""
        return _runs.run_group(self.root, run_id, self.location)

    def run_attrs(self, run_id: str) -> dict:
        """The attributes of one run (task, arch, variant, seed, configs, metrics, …)."""
        return dict(self.run_group(run_id).attrs)

    def runs(self) -> pd.DataFrame:
        """One row per run: task, arch, variant, seed, stored lengths, weights present."""
        return _runs.runs_table(self)

    def select(self, **filters: Any) -> list[str]:
        """Run ids whose attributes match every filter.

        A filter value may be a single value or a list of accepted values, e.g.
        ``select(task="s3", arch=["lstm", "mamba"])``. Unknown attribute names raise.
        """
        return _runs.select({rid: self.run_attrs(rid) for rid in self.run_ids()}, filters)

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
        identity = run_identity(task, arch, variant, seed, model_config, task_config)
        if _runs.add_run(self.root, run_id, identity, attrs, self.location):
            self.consolidate()
        return run_id

    def update_run_attrs(self, run_id: str, **attrs: Any) -> None:
        """Add or replace run attributes (training metrics, evaluation, …); identity is fixed."""
        self._writable()
        _runs.update_run_attrs(self.run_group(run_id), run_id, attrs)
        self.consolidate()  # readers of the snapshot see them; one per deferred block

    # ------------------------------------------------------------------ weights
    def write_weights(self, run_id: str, state_dict: Mapping[str, Any], *, overwrite: bool = False) -> None:
        """Store a model's parameters, one array per tensor (bf16 is widened to float32).

        Accepts numpy arrays or torch tensors. Weights are marked complete only after every
        array is written, so a killed writer never leaves weights that look usable.
        """
        self._writable()
        _weights.write_weights(self.run_group(run_id), run_id, state_dict, overwrite=overwrite)
        self.consolidate()

    def has_weights(self, run_id: str) -> bool:
        return _weights.has_weights(self.run_group(run_id))

    def read_weights(self, run_id: str) -> dict[str, np.ndarray]:
        """The stored parameters as numpy arrays, in the order they were written."""
        return _weights.read_weights(self.run_group(run_id), run_id, self.location)

    # ------------------------------------------------------------------ checkpoints
    def write_checkpoint(self, run_id: str, step: int, sections: Mapping[str, Mapping[str, Any]],
                         state: Mapping[str, Any]) -> None:
        """Store an unfinished training's state at ``step`` (S46): ``sections`` of arrays
        (numpy or torch) and a JSON ``state``. The previous checkpoint is removed only after
        this one is complete.

        Consolidates even inside :meth:`deferred_consolidation`: the snapshot is what
        read-only openers see (``layerstate inspect`` shows a training's last checkpoint), and
        one consolidation per checkpoint (minutes apart) costs little."""
        self._writable()
        _checkpoints.write_checkpoint(self.run_group(run_id), step, sections, state)
        consolidate_checked(self.location, self.root.store)

    def read_checkpoint(self, run_id: str) -> _checkpoints.Checkpoint | None:
        """The run's newest complete training checkpoint, or None."""
        return _checkpoints.read_checkpoint(self.run_group(run_id))

    def delete_checkpoint(self, run_id: str) -> None:
        """Remove the run's training checkpoints (done when its weights are written)."""
        self._writable()
        if _checkpoints.delete_checkpoint(self.run_group(run_id)):
            self.consolidate()

    # ------------------------------------------------------------------ lengths
    def lengths(self, run_id: str, kind: str = "len") -> list[int]:
        """Sequence lengths stored for a run (``kind="cf"`` for counterfactual groups)."""
        return _lengths.lengths(self.run_group(run_id), kind)

    def length_writer(self, run_id: str, length: int, *, n_sequences: int, n_features: int,
                      labels: Sequence[str], layers: Sequence[str] | None = None, n_layers: int | None = None,
                      n_classes: int | None = None, target: str | None = None, dtype: str = "float16",
                      block_size: int | None = None, kind: str = "len", allow_nonfinite: bool = False,
                      attrs: Mapping[str, Any] | None = None,
                      extra: Mapping[str, tuple[Sequence[str], Sequence[int], str]] | None = None,
                      in_flight: int = 0) -> LengthWriter:
        """A :class:`~store.io.writer.LengthWriter` for one run and length (the parameters are its)."""
        self._writable()
        self.run_group(run_id)
        return LengthWriter(self, run_id, length, n_sequences=n_sequences, n_features=n_features, labels=labels,
                            layers=layers, n_layers=n_layers, n_classes=n_classes, target=target, dtype=dtype,
                            block_size=block_size, kind=kind, allow_nonfinite=allow_nonfinite, attrs=attrs,
                            extra=extra, in_flight=in_flight)

    def write_length(self, run_id: str, length: int | None = None, *, hidden: Any, tokens: Any,
                     labels: Mapping[str, Any], mask: Any = None, logits: Any = None,
                     layers: list[str] | None = None, target: str | None = None, dtype: str = "float16",
                     block_size: int | None = None, allow_nonfinite: bool = False,
                     attrs: Mapping[str, Any] | None = None) -> None:
        """Write a whole length at once from in-memory arrays (activations captured elsewhere).

        ``hidden`` is ``(sequence, position, layer, feature)``: a numpy/torch array in that order
        or an ``xarray.DataArray`` with those dims in any order; ``tokens`` and each label
        ``(sequence, position)``; ``mask`` defaults to "every position labelled"; ``logits`` may
        be omitted. ``target``, ``dtype``, ``block_size``, ``allow_nonfinite`` and ``attrs`` are
        the writer's (:meth:`length_writer`).
        """
        def open_writer(L: int, *, n_sequences: int, n_features: int, labels: Sequence[str],
                        layers: Sequence[str], n_classes: int | None) -> LengthWriter:
            return self.length_writer(run_id, L, n_sequences=n_sequences, n_features=n_features, labels=labels,
                                      layers=layers, n_classes=n_classes, target=target, dtype=dtype,
                                      block_size=block_size, allow_nonfinite=allow_nonfinite, attrs=attrs)

        _lengths.write_length(open_writer, length, hidden=hidden, tokens=tokens, labels=labels, mask=mask,
                              logits=logits, layers=layers)

    def _length_group(self, run_id: str, length: int, kind: str = "len") -> zarr.Group:
        return _lengths.length_group(self.run_group(run_id), run_id, length, kind)

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
        loads whole arrays 2-3x faster (see :meth:`load_length`). A chunk that fails its
        checksum when read names itself (compute through :meth:`compute` for a one-line error).

        Raises
        ------
        IncompleteError
            If the length is still being written (or a writer was killed) and
            ``allow_incomplete`` is False: unwritten chunks would read as NaN/fill values.
        """
        return _lengths.open_length(
            self._length_group(run_id, length, kind), run_id, length, self.run_attrs(run_id),
            allow_incomplete=allow_incomplete, lazy=lazy,
        )

    def load_length(self, run_id: str, length: int, *, kind: str = "len",
                    allow_incomplete: bool = False) -> xr.Dataset:
        """One run and length read fully into memory (the fast path for whole arrays:
        chunks fetched, checked and placed by a thread pool, ``store.io.chunks.read_whole``);
        ``kind`` and ``allow_incomplete`` as in :meth:`open_length`."""
        ds = self.open_length(run_id, length, kind=kind, allow_incomplete=allow_incomplete, lazy="xarray")
        grp = self._length_group(run_id, length, kind)
        return _lengths.load_length(ds, grp, self.location)

    def label_names(self, run_id: str, length: int, kind: str = "len") -> list[str]:
        return _lengths.label_names(self._length_group(run_id, length, kind))

    # ------------------------------------------------------------------ results
    def write_result(self, name: str, ds: xr.Dataset, *, overwrite: bool = True) -> None:
        """Store an analysis result Dataset under ``results/<name>`` (checksummed, no pickle)."""
        self._writable()
        _results.write_result(self.root, name, ds, overwrite=overwrite)
        self.consolidate()

    def results(self) -> list[str]:
        """Names of stored results (nested names use ``/``)."""
        return _results.result_names(self.root)

    # ------------------------------------------------------------------ removing (store.contents.forget)
    def forget_result(self, name: str) -> None:
        """Remove ``results/<name>``."""
        forget_result(self, name)

    def forget_captures(self, run_id: str, lengths: Any = None) -> list[str]:
        """Remove the run's captured groups at ``lengths`` (default all); returns their names."""
        return forget_captures(self, run_id, lengths)

    def forget_run(self, run_id: str) -> None:
        """Remove a run: record, weights and captures."""
        forget_run(self, run_id)

    def read_result(self, name: str) -> xr.Dataset:
        """A stored result, loaded into memory."""
        return _results.read_result(self.root, name, self.location)

    def result_attrs(self, name: str) -> dict:
        """A stored result's attributes, without reading its arrays."""
        return _results.result_attrs(self.root, name, self.location)

    def result_runs(self, name: str) -> list[str] | None:
        """The runs a stored result holds (None: it has no ``run`` dimension), its other arrays unread."""
        return _results.result_runs(self.root, name, self.location)

    # ------------------------------------------------------------------ helpers
    def compute(self, obj: Any) -> Any:
        """Compute a lazy xarray object, naming the array and chunk if a checksum fails."""
        with naming_corruption(self.location):
            return obj.compute()

    def lock(self, run_id: str) -> RunLease:
        """The writer lock of run ``run_id``: its lease in the store, so a second writer is
        refused across processes, hosts and object stores (S41), plus a local ``flock``.
        Held by :class:`~store.io.writer.LengthWriter` and by training; re-entrant."""
        return RunLease(self.location, run_id)

    def _writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError(
                f"{self.location} was opened read-only; open it with Store.open(..., mode='r+')"
            )

    def __repr__(self) -> str:
        return f"<layerstate.Store {self.location} runs={len(self.run_ids())}>"


def _looks_like_store(loc: Location) -> bool:
    try:
        fs, root = loc.filesystem()
        return fs.exists(f"{root}/zarr.json")
    except Exception:
        return False


def _writable(loc: Location) -> bool:
    """Whether a store's location accepts writes (local: the root directory is writable;
    elsewhere assumed so: the first write says otherwise)."""
    if loc.is_local:
        return os.access(loc.local_path, os.W_OK)
    return not loc.url.startswith(("http://", "https://"))


def _check_schema(loc: Location, attrs: dict) -> None:
    schema = attrs.get("schema")
    if schema is None:
        raise NotAStoreError(
            f"{loc} is a Zarr group but not a layerstate store (no 'schema' attribute); "
            "create stores with `layerstate capture` or Store.create"
        )
    refusal = schema_refusal(schema)
    if refusal is not None:  # docs/store-format.md, "Versions": no other name or version
        raise SchemaVersionError(f"{loc} {refusal}")
