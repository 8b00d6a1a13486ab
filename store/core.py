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
# Over 600 lines: the Store facade (each method a short hand-over to the module that owns that part), with PairedStore and open_analysis, which Store.open calls: apart they would import each other.

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
import zarr

from .access import pairing as _pairing
from .access.lease import Lease, RunLease, consolidation_lease, lease_seconds, location_key
from .access.location import Location
from .contents import checkpoints as _checkpoints
from .contents import results as _results
from .contents import runs as _runs
from .contents import weights as _weights
from .contents.runs import config_hash, run_identity
from .errors import (
    LayerstateError,
    MetadataDamagedError,
    MissingError,
    NotAStoreError,
    ReadOnlyStoreError,
    RunConflictError,
    SchemaVersionError,
    WriterLockedError,
)
from .integrity import metadata as _metadata
from .io import lengths as _lengths
from .io.writer import LengthWriter
from .provenance import now, provenance, tool_version
from .schema import RESULTS, RUNS, SCHEMA, schema_refusal
from .zarrutil import naming_corruption, quiet

__all__ = ["PairedStore", "Store", "config_hash", "open_analysis", "run_identity"]


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
        consolidated: bool | None = None, results: str | Any | None = None,
        results_options: dict | None = None,
    ) -> Store:
        """Open an existing store read-only (``mode="r"``) or for writing (``"r+"``).

        ``consolidated``: read-only opens use the consolidated snapshot when there is one
        (``None``); ``False`` reads every node's own ``zarr.json`` (as writers always do).

        ``results``: a separate results store (directory or URL, created if missing when
        ``mode="r+"``): returns a :class:`PairedStore` that reads ``url`` (never written)
        and keeps analysis results there. See also :func:`open_analysis`.

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
        if results is not None:
            return _pair(Location(url, storage_options or {}), Location(results, results_options or {}),
                         write=mode == "r+")
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
            damage = _metadata.root_damage(loc.zarr_store(read_only=True, guarded=False), str(loc))
            if damage is not None:
                raise MetadataDamagedError(damage) from None
            raise NotAStoreError(loc.not_a_store()) from None
        attrs = dict(root.attrs)
        try:
            _check_schema(loc, attrs)
        except (NotAStoreError, SchemaVersionError):
            changed = _metadata.root_changed(loc.zarr_store(read_only=True, guarded=False), str(loc), attrs)
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
        :func:`store.integrity.metadata.record_digests`).

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
        _consolidate(self.location, self.root.store)

    def set_root_attrs(self, **attrs: Any) -> None:
        """Add or replace attributes of the root group, then consolidate.

        The root document also holds the snapshot that every consolidation rewrites, so this
        reads it afresh and writes it under the consolidation lease: an attribute set while
        another process consolidates is never lost (S40).
        """
        self._writable()
        with _consolidating(self.location):
            with quiet():
                fresh = zarr.open_group(store=self.root.store, mode="r+", zarr_format=3,
                                        use_consolidated=False)
                fresh.attrs.update(attrs)
                self.root = zarr.open_group(store=self.root.store, mode="r+", zarr_format=3,
                                            use_consolidated=False)
            _consolidate(self.location, self.root.store)

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
        _consolidate(self.location, self.root.store)

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

    def length_writer(self, run_id: str, length: int, **kwargs: Any) -> LengthWriter:
        """A :class:`~store.io.writer.LengthWriter` for one run and length (see its docs)."""
        self._writable()
        self.run_group(run_id)
        return LengthWriter(self, run_id, length, **kwargs)

    def write_length(self, run_id: str, length: int | None = None, **arrays: Any) -> None:
        """Write a whole length at once from in-memory arrays (activations captured elsewhere).

        Keywords as :func:`store.io.lengths.write_length`: ``hidden``, ``tokens``, ``labels``
        (required), ``mask``, ``logits``, ``layers`` and the writer's. ``hidden`` is
        ``(sequence, position, layer, feature)``: a numpy/torch array in that order or an
        ``xarray.DataArray`` with those dims in any order. ``mask`` defaults to "every
        position labelled"; ``logits`` may be omitted.
        """
        _lengths.write_length(lambda L, **kw: self.length_writer(run_id, L, **kw), length, **arrays)

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

    def load_length(self, run_id: str, length: int, **kwargs: Any) -> xr.Dataset:
        """One run and length read fully into memory (the fast path for whole arrays:
        chunks fetched, checked and placed by a thread pool, ``store.io.chunks.read_whole``)."""
        ds = self.open_length(run_id, length, lazy="xarray", **kwargs)
        grp = self._length_group(run_id, length, kwargs.get("kind", "len"))
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
        from .contents.forget import forget_result

        forget_result(self, name)

    def forget_captures(self, run_id: str, lengths: Any = None) -> list[str]:
        """Remove the run's captured groups at ``lengths`` (default all); returns their names."""
        from .contents.forget import forget_captures

        return forget_captures(self, run_id, lengths)

    def forget_run(self, run_id: str) -> None:
        """Remove a run: record, weights and captures."""
        from .contents.forget import forget_run

        forget_run(self, run_id)

    def read_result(self, name: str) -> xr.Dataset:
        """A stored result, loaded into memory."""
        return _results.read_result(self.root, name, self.location)

    def result_attrs(self, name: str) -> dict:
        """A stored result's attributes, without reading its arrays."""
        return _results.result_attrs(self.root, name, self.location)

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


class PairedStore(Store):
    """A store read from one place, with its analysis results kept in another.

    Everything a :class:`Store` reads comes from ``source`` (opened read-only: a zip, a
    read-only directory, a URL); :meth:`write_result` writes to ``results_store``, and
    :meth:`results` / :meth:`read_result` see both, the results store first. So analysis
    code written against a :class:`Store` runs unchanged on a store it cannot write. The
    results store records which source it belongs to (:mod:`store.access.pairing`); pairing it with
    another source is refused.
    """

    def __init__(self, source: Store, results: Store, *, created: bool = False) -> None:
        super().__init__(source.location, source.root, read_only=True)
        self.source = source
        self.results_store = results
        #: The results store was created by this opening (:meth:`discard_if_unused` may remove it).
        self.created = created

    def discard_if_unused(self) -> bool:
        """Remove the results store this opening created if nothing was written to it (a
        command that failed, or found nothing to do, leaves no empty store behind). Returns
        whether it was removed; a results store that was there before is never touched."""
        if not self.created or self.results_store.results():
            return False
        fs, root = self.results_location.filesystem()
        if fs.exists(root):
            fs.rm(root, recursive=True)
        self.created = False
        return True

    @property
    def results_location(self) -> Location:
        return self.results_store.location

    def write_result(self, name: str, ds: xr.Dataset, *, overwrite: bool = True) -> None:
        """Store an analysis result in the results store (the source is never written)."""
        self.results_store.write_result(name, ds, overwrite=overwrite)

    def results(self) -> list[str]:
        """Names of the results in the results store and in the source, sorted."""
        return sorted(set(self.results_store.results()) | set(self.source.results()))

    def read_result(self, name: str) -> xr.Dataset:
        """A result from the results store, else from the source."""
        if name in self.results_store.results():
            return self.results_store.read_result(name)
        if name in self.source.results():
            return self.source.read_result(name)
        raise self._missing(name)

    def result_attrs(self, name: str) -> dict:
        """A result's attributes (results store first, then the source), arrays unread."""
        for st in (self.results_store, self.source):
            if name in st.results():
                return st.result_attrs(name)
        raise self._missing(name)

    def _missing(self, name: str) -> MissingError:
        return MissingError(
            f"no result {name!r} in {self.location} or its results store {self.results_location}; "
            f"stored results: {', '.join(self.results()) or '(none)'}"
        )

    def consolidate(self) -> None:
        self.results_store.consolidate()

    @contextlib.contextmanager
    def deferred_consolidation(self) -> Iterator[Store]:
        with self.results_store.deferred_consolidation():
            yield self

    def __repr__(self) -> str:
        return f"<layerstate.PairedStore {self.location} results={self.results_location}>"


def open_analysis(
    url: str | Any,
    *,
    results: str | Any | None = None,
    write: bool = True,
    storage_options: dict | None = None,
    results_options: dict | None = None,
    say: Any = None,
) -> Store:
    """Open a store for an analysis: results inside it when it can be written, else beside it.

    * ``results`` given: the store is read (never written) and results go to that results
      store (a :class:`PairedStore`; created if missing when ``write``).
    * ``url`` names a results store (one that records its source): it is paired with the
      source it records.
    * ``write`` and the store can be written: the store itself, results inside (as always).
    * ``write`` and a local store that cannot be written (a zip, a read-only directory):
      results go to a sidecar results store beside it (``acts.results.zarr`` next to
      ``acts.zip``), and ``say`` is told where.
    * ``write`` and a remote store that cannot be written (HTTP): :class:`ReadOnlyStoreError`
      asking for ``results``.
    * not ``write`` (inspect, report): the store read-only, together with its sidecar if one
      exists.
    """
    if isinstance(url, Store):
        return url
    opts = storage_options or {}
    loc = Location(url, opts)
    if results is not None:
        paired = _pair(loc, Location(results, results_options or {}), write=write)
        if write and say is not None:
            say(f"results go to {paired.results_location} (the store {loc} is only read)")
        return paired
    if loc.exists():
        try:
            rec = _pairing.recorded_source(Store.open(url, storage_options=opts).root)
        except LayerstateError:
            rec = None  # opening it again below says what is wrong
        if rec is not None:  # a results store named as the store: read it with its source
            return _pair(Location(rec["url"]), loc, write=write)
    if not write:
        side = _pairing.sidecar(loc) if loc.is_local else None
        if side is not None and side.exists():
            return _pair(loc, side, write=False)
        return Store.open(url, storage_options=opts)
    try:
        return Store.open(url, mode="r+", storage_options=opts)
    except ReadOnlyStoreError:
        if not loc.is_local:
            raise ReadOnlyStoreError(
                f"{loc} cannot be written (a read-only URL): give --results DIR|URL for this "
                "command's results (e.g. --results ./results.zarr; Python: results=...)"
            ) from None
        side = _pairing.sidecar(loc)
        if not side.exists() and not _pairing.writable_dir(side.local_path.parent):
            raise ReadOnlyStoreError(
                f"{loc} cannot be written, nor can its directory (for {side.local_path.name}): "
                "give --results DIR|URL for this command's results"
            ) from None
        what = "a packed store" if loc.is_zip else "read-only"
        if say is not None:
            say(f"{loc} is {what}: results go to {side} beside it")
        return _pair(loc, side, write=True)


def _pair(src: Location, res: Location, *, write: bool) -> PairedStore:
    """The source at ``src`` (read-only) with its results store at ``res``."""
    src_url, res_url = _pairing.absolute_url(src), _pairing.absolute_url(res)
    if src_url == res_url:
        raise RunConflictError(f"--results {res} is the store itself; give another directory")
    source = Store.open(src.url, storage_options=src.storage_options)
    identity = _pairing.source_identity(source.root)
    rec = _pairing.record(src_url, identity, source.attrs)
    if not res.exists():
        if not write:
            raise NotAStoreError(
                f"no results store at {res}; `layerstate probe {src} --results {res}` (or ablate, "
                "patch, stats) writes one"
            )
        results = Store.create(res.url, title=f"results for {source.attrs.get('title') or src_url}",
                               storage_options=res.storage_options)
        results.set_root_attrs(**{_pairing.RESULTS_FOR: rec})
        return PairedStore(source, results, created=True)
    results = Store.open(res.url, mode="r+" if write else "r", storage_options=res.storage_options)
    found = results.attrs.get(_pairing.RESULTS_FOR)
    if found is None:
        if results.run_ids():
            raise RunConflictError(
                f"{res} is a store with runs of its own, not a results store; give --results a new "
                "directory"
            )
        if write:
            results.set_root_attrs(**{_pairing.RESULTS_FOR: rec})
    else:
        _pairing.check_record(found, str(res), src_url, identity)
    return PairedStore(source, results)


def _looks_like_store(loc: Location) -> bool:
    try:
        fs, root = loc.filesystem()
        return fs.exists(f"{root}/zarr.json")
    except Exception:
        return False


def _writable(loc: Location) -> bool:
    """Whether a store's location accepts writes (local: the root directory is writable;
    elsewhere assumed so: the first write says otherwise)."""
    import os

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


# ---------------------------------------------------------------------- consolidation (S40)
#: Per store: threads of one process consolidate one at a time (the lease is per process).
_THREAD_LOCKS: dict[str, Any] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _consolidation_wait() -> float:
    """How long a consolidation waits for another one to finish before giving up."""
    return max(600.0, 10 * lease_seconds())


@contextlib.contextmanager
def _consolidating(loc: Location) -> Iterator[Lease]:
    """Hold the store's consolidation lease (and this process's lock for it): one
    consolidation, or root-attribute write, at a time across every process and host."""
    key = location_key(loc)
    with _THREAD_LOCKS_GUARD:
        lock = _THREAD_LOCKS.setdefault(key, threading.RLock())
    with lock:
        lease = consolidation_lease(loc)
        lease.acquire(wait=_consolidation_wait())
        try:
            yield lease
        finally:
            lease.release()


def _consolidate(loc: Location, zs: Any) -> None:
    """One consolidation under the lease, checked: the root read back afterwards must still
    be the document written, and the lease still this process's (else it is done again)."""
    for _ in range(3):
        with _consolidating(loc) as lease:
            written = _metadata.consolidate_once(zs)
            if lease.lost is None and _metadata.root_is(zs, written):
                return
    raise WriterLockedError(
        f"{loc}: the consolidated metadata was replaced by another process three times while "
        "this one wrote it (its consolidation lease was taken over: a process paused for longer "
        "than the lease lasts?); run `layerstate repair` on the store once its writers finish"
    )
