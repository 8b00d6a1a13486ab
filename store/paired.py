"""A store read from one place with its analysis results kept in another, and the policy that
chooses where an analysis writes (:func:`open_analysis`): inside the store when it can be
written, else a results store beside it (``acts.results.zarr`` next to ``acts.zip``), or the
one named with ``--results``. The pairing record that ties a results store to its source is
:mod:`store.access.pairing`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import xarray as xr

from .access import pairing as _pairing
from .access.location import Location
from .core import Store
from .errors import (
    LayerstateError,
    MissingError,
    NotAStoreError,
    ReadOnlyStoreError,
    RunConflictError,
)

__all__ = ["PairedStore", "ResultsBeside", "open_analysis", "results_home"]


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

    def result_runs(self, name: str) -> list[str] | None:
        """The runs a result holds (results store first, then the source)."""
        for st in (self.results_store, self.source):
            if name in st.results():
                return st.result_runs(name)
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


class ResultsBeside:
    """The results store beside a read-only store, as ``forget`` sees it: its own results
    (removable) and those inside its source (named in the refusal, never removable)."""

    def __init__(self, own: Store, inside: list[str], source: Location) -> None:
        self.own, self.inside, self.location, self.source = own, inside, own.location, source

    def results(self) -> list[str]:
        return self.own.results()

    def run_ids(self) -> list[str]:
        return []

    def forget_result(self, name: str) -> None:
        self.own.forget_result(name)

    def check(self, names: Sequence[str]) -> None:
        """Refuse (one line, with the fix) to remove a result inside the read-only source."""
        stuck = [n for n in names if n in self.inside]
        if stuck:
            raise ReadOnlyStoreError(
                f"result {stuck[0]!r} is inside {self.source}, which cannot be written; only results in "
                f"{self.location} can be removed ({', '.join(self.own.results()) or 'none'}); to change the "
                f"store itself, unpack it: layerstate unpack {self.source} DIR")


def results_home(url: str, results: str | None = None, *, write: bool = True,
                 storage_options: dict | None = None) -> Store | ResultsBeside:
    """The store whose results ``forget --result`` removes: ``results`` when given, else the
    store itself when it can be written, else the results store beside it (:class:`ResultsBeside`);
    a read-only store with none beside it is returned read-only (it names nothing removable)."""
    opts = storage_options or {}
    mode = "r+" if write else "r"
    view = open_analysis(url, results=results, write=False, storage_options=opts, results_options=opts)
    if not isinstance(view, PairedStore):
        try:
            return Store.open(url, mode=mode, storage_options=opts)
        except ReadOnlyStoreError:
            return view
    own = Store.open(view.results_location.url, mode=mode, storage_options=opts)
    inside = [n for n in view.source.results() if n not in own.results()]
    return ResultsBeside(own, inside, view.location)
