"""Numbers for the page: intervals across seeds, run factors, and how a number is written.

Every number a report shows has its interval beside it, written ``0.934 [0.901, 0.960]``;
where no interval exists (one seed, a permutation statistic) the text says so instead of
leaving the interval out silently.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TypeVar

import numpy as np
import pandas as pd
import xarray as xr

from analysis.behaviour import FACTORS, by_factors

Xr = TypeVar("Xr", xr.DataArray, xr.Dataset)
CI_LEVEL = 0.95


# ---------------------------------------------------------------------- writing numbers
def fmt(x: float | None, digits: int = 3, signed: bool = False) -> str:
    """One number, or an en dash for a missing one."""
    if x is None or not np.isfinite(x):
        return "–"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def fmt_ci(
    est: float, lower: float, upper: float, digits: int = 3, *, signed: bool = False,
    why_none: str = "no interval",
) -> str:
    """``0.934 [0.901, 0.960]``; ``0.934 [no interval]`` when an end is missing."""
    if est is None or not np.isfinite(est):
        return "–"
    if lower is None or upper is None or not (np.isfinite(lower) and np.isfinite(upper)):
        return f"{fmt(est, digits, signed)} [{why_none}]"
    return f"{fmt(est, digits, signed)} [{fmt(lower, digits, signed)}, {fmt(upper, digits, signed)}]"


def fmt_p(p: float) -> str:
    """A p-value: three significant digits, ``<0.001`` below that."""
    if p is None or not np.isfinite(p):
        return "–"
    return "<0.001" if p < 1e-3 else f"{p:.3g}"


def fmt_layer_ci(pos: float, lower: float, upper: float, labels: Sequence[str]) -> str:
    """A layer statistic given as positions along ``layer``: ``L2 [L1, L3]``; NaN = never."""

    def name(x: float) -> str:
        if x is None or not np.isfinite(x):
            return "never"
        i = int(round(x))
        return labels[i] if 0 <= i < len(labels) else str(i)

    if pos is None or not np.isfinite(pos):
        return "never"
    return f"{name(pos)} [{name(lower)}, {name(upper)}]"


# ---------------------------------------------------------------------- intervals over seeds
def seed_t_interval(per_seed: xr.DataArray, ci_level: float = CI_LEVEL, seed_dim: str = "seed") -> xr.Dataset:
    """Seed-level Student-t interval per cell, using each cell's finite seeds.

    Cells may hold different numbers of seeds (a missing seed is NaN): cells are grouped by
    their number of finite seeds and each group goes through
    :func:`analysis.stats.resample.t_interval_np`, so a missing seed never turns a cell into
    NaN and never counts as a zero.

    Parameters
    ----------
    per_seed : xarray.DataArray
        Dims (..., seed): one estimate per seed and cell.

    Returns
    -------
    xarray.Dataset
        Dims (...): ``estimate``, ``lower``, ``upper`` (NaN with fewer than 2 seeds) and
        ``n_seeds``; attrs ``method``, ``ci_level``.
    """
    from analysis.stats.resample import t_interval_np

    da = per_seed.transpose(..., seed_dim)
    vals = np.asarray(da.values, dtype=float)
    flat = vals.reshape(-1, vals.shape[-1])
    n = np.isfinite(flat).sum(-1)
    est, lo, hi = (np.full(flat.shape[0], np.nan) for _ in range(3))
    for k in np.unique(n):
        rows = np.flatnonzero(n == k)
        if k == 0:
            continue
        packed = np.stack([r[np.isfinite(r)] for r in flat[rows]])  # (cells, k)
        if k == 1:
            est[rows] = packed[:, 0]
            continue
        e, lower, upper = t_interval_np(packed, ci_level)
        est[rows], lo[rows], hi[rows] = e, lower, upper
    shape = vals.shape[:-1]
    dims = da.dims[:-1]
    coords = {k: v for k, v in da.coords.items() if seed_dim not in v.dims}
    out = xr.Dataset(
        {
            "estimate": (dims, est.reshape(shape)),
            "lower": (dims, lo.reshape(shape)),
            "upper": (dims, hi.reshape(shape)),
            "n_seeds": (dims, n.reshape(shape)),
        },
        coords=coords,
        attrs={"method": "seed-level t (each cell's finite seeds)", "ci_level": ci_level},
    )
    return out


# ---------------------------------------------------------------------- runs and factors
def run_factors(store, runs: Iterable[str]) -> pd.DataFrame:
    """task, arch, variant, seed of each run (index ``run``), from the run attributes."""
    rows = []
    for rid in runs:
        a = store.run_attrs(rid)
        rows.append({"run": rid, **{f: a.get(f) for f in FACTORS}})
    return pd.DataFrame(rows, columns=["run", *FACTORS]).set_index("run")


def by_seed(obj: Xr, store) -> Xr:
    """Replace a ``run`` dim by ``task, arch, variant, seed`` dims (missing combinations NaN):
    :func:`analysis.behaviour.by_factors`."""
    return by_factors(obj, store)


def finite_rows(frame: pd.DataFrame, column: str = "estimate") -> pd.DataFrame:
    """Drop rows whose ``column`` is NaN (combinations that do not exist)."""
    return frame[np.isfinite(frame[column].astype(float))].reset_index(drop=True)


def is_finite(x: object) -> bool:
    try:
        return math.isfinite(float(x))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def group_intervals(
    numerator: xr.DataArray,
    denominator: xr.DataArray | None,
    store,
    *,
    ci_level: float = CI_LEVEL,
    rng: int = 0,
) -> pd.DataFrame:
    """Intervals of a per-sequence ratio-of-sums metric, one per cell and (task, arch, variant).

    Each (task, arch, variant) is bootstrapped on its own seeds, so cells never mix seed sets:
    seed-level t with two or more seeds (:func:`analysis.stats.hierarchical_bootstrap`,
    ``method="t"``), a percentile bootstrap over sequences with one (its interval covers
    sequence sampling only; the ``method`` column says which).

    Parameters
    ----------
    numerator, denominator : xarray.DataArray
        Dims (run, ..., sequence): per-sequence sums (e.g. correct and labelled positions);
        ``denominator`` ``None`` means plain means. Other dims are cells.
    store : Store
        For the runs' task, arch, variant and seed.

    Returns
    -------
    pandas.DataFrame
        Columns task, arch, variant, the cell dims, estimate, lower, upper, n_seeds, method.
    """
    from analysis.stats import hierarchical_bootstrap, interval_table

    table = run_factors(store, [str(r) for r in numerator["run"].values])
    frames = []
    for (task, arch, variant), grp in table.groupby(["task", "arch", "variant"], dropna=False):
        runs = list(grp.index)
        num = _by_seed_dim(numerator.sel(run=runs), grp)
        den = None if denominator is None else _by_seed_dim(denominator.sel(run=runs), grp)
        if den is not None:
            num, den = xr.broadcast(num, den)
            den = den.transpose(*num.dims)
        method = "t" if len(runs) >= 2 else "percentile"
        for cell_num, cell_den in _cells_for(num, den, method):
            res = hierarchical_bootstrap(cell_num, cell_den, rng=rng, method=method, ci_level=ci_level)
            frame = interval_table(res.interval)
            frame.insert(0, "variant", variant)
            frame.insert(0, "arch", arch)
            frame.insert(0, "task", task)
            frame["n_seeds"] = len(runs)
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["task", "arch", "variant", "estimate", "lower", "upper", "n_seeds", "method"])
    out = pd.concat(frames, ignore_index=True)
    return out[np.isfinite(out["estimate"].astype(float))].reset_index(drop=True)


def _by_seed_dim(da: xr.DataArray, grp: pd.DataFrame) -> xr.DataArray:
    """``run`` -> ``seed`` (the runs of one task/arch/variant differ only in their seed)."""
    seeds = [int(s) for s in grp["seed"]]
    # Non-index coordinates go first: results may carry a per-run ``seed`` coordinate of
    # their own, which would clash with the renamed dimension.
    bare = da.drop_vars([c for c in da.coords if c not in da.dims])
    return bare.rename(run="seed").assign_coords(seed=seeds)


def _cells_for(num: xr.DataArray, den: xr.DataArray | None, method: str):
    """The whole grid at once; for the bootstrap methods, cells whose padding differs
    (e.g. lengths holding different numbers of sequences) are resampled separately."""
    if method == "t":
        yield num, den
        return
    from analysis.stats import sequence_mask

    try:
        sequence_mask(num, den)
        yield num, den
        return
    except ValueError:
        pass
    cells = [d for d in num.dims if d not in ("seed", "sequence")]
    stacked = num.stack(_cell=cells)
    stacked_den = None if den is None else den.stack(_cell=cells)
    for k in range(stacked.sizes["_cell"]):
        one = stacked.isel(_cell=[k])
        if not bool(one.notnull().any()):
            continue
        # one cell: its own NaN padding is its mask
        yield one.unstack("_cell"), (None if stacked_den is None else stacked_den.isel(_cell=[k]).unstack("_cell"))


def plain_strings(ds: xr.Dataset) -> xr.Dataset:
    """Variable-length strings read back from Zarr v3 (numpy ``StringDType``) as fixed-width
    ``str`` arrays, which pandas and ``astype(str)`` handle everywhere."""
    fixed = {}
    for name, var in ds.variables.items():
        if var.dtype.kind == "T":
            values = np.array([str(v) for v in np.ravel(var.values)], dtype=str).reshape(var.shape)
            fixed[name] = (var.dims, values, var.attrs)
    coords = {k: v for k, v in fixed.items() if k in ds.coords}
    data = {k: v for k, v in fixed.items() if k not in ds.coords}
    return ds.assign_coords(coords).assign(data)


def read_result(store, name: str) -> xr.Dataset:
    """``store.read_result(name)`` with plain strings (see :func:`plain_strings`)."""
    return plain_strings(store.read_result(name))

