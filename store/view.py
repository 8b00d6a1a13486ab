"""Several stores read as one (:class:`StoreView`), or one store's first seeds (``seed_below``:
a stage of a sequential design), or a store without some runs (``leave_out``): the parts of a grid run one task at a time,
each in its own store, seen as one set of runs and results, so a claim that reads cells of
several parts (a profile compared across tasks) is evaluated on them where they lie. Nothing is
copied and nothing is written: the view is read-only.

Each run belongs to the one part that holds it; a run id held by two parts is refused (they
would be two trained models under one name). A result name held by two parts (each part's
``claims``, say) is read from the first part that holds it, in the order the parts were given;
results named per task (``probes/<task>``, ``behaviour/<task>``) are each held once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import xarray as xr
import zarr

from store.errors import NotAStoreError

from .contents import runs as _runs
from .core import Store
from .errors import InvalidArgumentError, LayerstateError, MissingError


class ReadOnlyViewError(LayerstateError, PermissionError):
    """Something tried to write through a :class:`StoreView`."""


class StoreView:
    """The runs and results of ``parts`` (open :class:`~store.Store` objects) as one store, for
    reading: the methods an analysis reads with, each answered by the part that holds the run or
    the result."""

    def __init__(self, parts: Sequence[Store], names: Sequence[str] | None = None, *,
                 seed_below: int | None = None, leave_out: Sequence[str] = ()) -> None:
        if not parts:
            raise InvalidArgumentError("a store view needs at least one store; give each part's store")
        self.parts = list(parts)
        self.names = list(names) if names is not None else [str(getattr(p, "location", i)) for i, p in
                                                               enumerate(parts)]
        self.seed_below = seed_below
        self._run_part: dict[str, int] = {}
        for i, part in enumerate(self.parts):
            for rid in part.run_ids():
                if seed_below is not None and int(part.run_attrs(rid).get("seed", 0)) >= seed_below:
                    continue  # a stage of a sequential design sees its first seeds only
                if rid in leave_out:
                    continue  # runs set aside (a plan without the seeds that did not learn)
                if rid in self._run_part:
                    raise InvalidArgumentError(
                        f"run {rid!r} is in two parts ({self.names[self._run_part[rid]]} and {self.names[i]}); "
                        "give each part once, or rename one run")
                self._run_part[rid] = i
        self._result_part: dict[str, int] = {}
        for i, part in enumerate(self.parts):
            for name in part.results():
                self._result_part.setdefault(name, i)

    @classmethod
    def open(cls, urls: Sequence[str], *, storage_options: dict | None = None) -> StoreView | None:
        """The stores at ``urls`` read as one, or None when one of them is not a store (a
        part given as a report's claims table rather than its store)."""
        try:
            stores = [Store.open(u, storage_options=storage_options) for u in urls]
        except (NotAStoreError, FileNotFoundError, OSError):
            return None
        return cls(stores, names=list(urls))

    def __repr__(self) -> str:
        return f"<layerstate.StoreView of {len(self.parts)} stores, runs={len(self._run_part)}>"

    # -------------------------------------------------------------- runs
    def _part(self, run_id: str) -> Store:
        try:
            return self.parts[self._run_part[run_id]]
        except KeyError:
            raise MissingError(f"run {run_id!r} is in none of the {len(self.parts)} parts; runs: "
                               f"{', '.join(sorted(self._run_part)) or 'none'}") from None

    def run_ids(self) -> list[str]:
        return sorted(self._run_part)

    def run_group(self, run_id: str) -> zarr.Group:
        return self._part(run_id).run_group(run_id)

    def run_attrs(self, run_id: str) -> dict:
        return self._part(run_id).run_attrs(run_id)

    def has_weights(self, run_id: str) -> bool:
        return self._part(run_id).has_weights(run_id)

    def lengths(self, run_id: str, kind: str = "len") -> list[int]:
        return self._part(run_id).lengths(run_id, kind)

    def open_length(self, run_id: str, length: int, *, kind: str = "len", allow_incomplete: bool = False,
                    lazy: str = "dask") -> xr.Dataset:
        """As :meth:`store.Store.open_length`, from the part that holds the run."""
        return self._part(run_id).open_length(run_id, length, kind=kind, allow_incomplete=allow_incomplete, lazy=lazy)

    def runs(self) -> pd.DataFrame:
        """One row per run of every part, as :meth:`store.Store.runs`."""
        return _runs.runs_table(self)

    def compute(self, obj: Any) -> Any:
        return self.parts[0].compute(obj)

    # -------------------------------------------------------------- results
    def results(self) -> list[str]:
        return sorted(self._result_part)

    def _result(self, name: str) -> Store:
        if name not in self._result_part:
            raise MissingError(f"no result {name!r} in any part; stored results: {', '.join(self.results()) or 'none'}")
        return self.parts[self._result_part[name]]

    def read_result(self, name: str) -> xr.Dataset:
        """The result, restricted to the view's runs (a result may hold runs the view leaves out)."""
        ds = self._result(name).read_result(name)
        if "run" in ds.dims:
            keep = [i for i, r in enumerate(ds.run.values) if str(r) in self._run_part]
            if len(keep) < ds.sizes["run"]:
                ds = ds.isel(run=keep)
        return ds

    def result_attrs(self, name: str) -> dict:
        return self._result(name).result_attrs(name)

    def write_result(self, name: str, ds: xr.Dataset, *, overwrite: bool = True) -> None:
        raise ReadOnlyViewError(f"cannot store {name!r}: a view of several stores is read-only; "
                                "write results into one part's store, or give --out for tables")
