"""Per-cell intervals across seeds, and how a result stores them beside its per-seed values.

The machinery both the probe results (:mod:`analysis.probes.intervals`) and the intervention
results (:mod:`analysis.interventions.intervals`) use, below both:

- computing: :func:`group_intervals`, the interval of a per-sequence ratio-of-sums metric per
  cell and (task, arch, variant), each on its own seeds (seed-level t with two or more seeds,
  a percentile bootstrap over sequences with one); :func:`seed_t_interval`, a seed-level t
  interval per cell over each cell's finite seeds; :func:`factor_table`, the run factors they
  group by.
- storing: :func:`frame_variables` turns the rows of such a table into ``<metric>_estimate``,
  ``_lower``, ``_upper``, ``_n_seeds`` and ``_method`` over ``(cell, <the metric's dims>)``, a
  cell being one (``cell_task``, ``cell_arch``, ``cell_variant``) (:func:`frame_cells`,
  :func:`with_cells`); :func:`stored_intervals` reads them back as :func:`group_intervals`
  returns them, so the report computes nothing of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
import xarray as xr

from analysis.behaviour import FACTORS
from analysis.stats import hierarchical_bootstrap, interval_table, sequence_mask
from analysis.stats.resample import t_interval_np

#: Interval level of the stored intervals.
CI_LEVEL = 0.95
#: The seed of the percentile bootstrap a one-seed cell's interval draws.
BOOTSTRAP_SEED = 0
#: What each stored interval is the estimate of: ``estimate, lower, upper, n_seeds, method``.
PARTS = ("estimate", "lower", "upper", "n_seeds", "method")


# ---------------------------------------------------------------------- computing
def factor_table(store, runs: Sequence[str]) -> pd.DataFrame:
    """task, arch, variant, seed of each run (index ``run``), from the run attributes."""
    rows = [{"run": rid, **{f: store.run_attrs(rid).get(f) for f in FACTORS}} for rid in runs]
    return pd.DataFrame(rows, columns=["run", *FACTORS]).set_index("run")


def group_intervals(
    numerator: xr.DataArray,
    denominator: xr.DataArray | None,
    store,
    *,
    ci_level: float = CI_LEVEL,
    rng: int = BOOTSTRAP_SEED,
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
        Columns task, arch, variant, the cell dims, estimate, lower, upper, method,
        ci_level, n_seeds (rows with no estimate left out).
    """
    table = factor_table(store, [str(r) for r in numerator["run"].values])
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
    return xr.Dataset(
        {
            "estimate": (dims, est.reshape(shape)),
            "lower": (dims, lo.reshape(shape)),
            "upper": (dims, hi.reshape(shape)),
            "n_seeds": (dims, n.reshape(shape)),
        },
        coords=coords,
        attrs={"method": "seed-level t (each cell's finite seeds)", "ci_level": ci_level},
    )



def per_run_intervals(store, ds: xr.Dataset, ci_level: float = CI_LEVEL) -> pd.DataFrame:
    """Every per-run number of a result (each numeric variable along ``run``) as a seed-level t
    interval per cell (task, arch, variant) and the variable's other coordinates.

    What an analysis added from outside is shown as (``layerstate show``, the report) when it
    says nothing of its own: the seeds of one cell are its runs; a cell with one finite seed has
    an estimate and no interval.

    Returns
    -------
    pandas.DataFrame
        One row per (variable, cell, coordinates): ``variable``, ``task``, ``arch``,
        ``variant``, the variable's other dims, ``estimate``, ``lower``, ``upper``, ``n_seeds``.
    """
    rows = []
    factors = factor_table(store, [str(r) for r in ds["run"].values]) if "run" in ds.dims else None
    for name, da in ds.data_vars.items():
        if factors is None or "run" not in da.dims or not np.issubdtype(da.dtype, np.number):
            continue
        frame = da.astype(float).to_dataframe(name="value").reset_index()
        frame = frame.merge(factors.drop(columns="seed").fillna(""), left_on="run", right_index=True)
        keys = ["task", "arch", "variant", *(d for d in da.dims if d != "run")]
        for key, group in frame.groupby(keys, sort=False, dropna=False):
            values = group["value"].to_numpy()
            values = values[np.isfinite(values)]
            est = lo = hi = np.nan
            if len(values) == 1:
                est = float(values[0])
            elif len(values) > 1:
                e, lower, upper = t_interval_np(values, ci_level)
                est, lo, hi = float(e), float(lower), float(upper)
            rows.append({"variable": str(name), **dict(zip(keys, key, strict=True)), "estimate": est,
                         "lower": lo, "upper": hi, "n_seeds": len(values)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------- storing and reading
def frame_cells(frames: Iterable[pd.DataFrame]) -> set[tuple[str, str, str]]:
    """The (task, arch, variant) cells of :func:`group_intervals`-like frames."""
    return {(str(t), str(a), str(v)) for f in frames for t, a, v in zip(f["task"], f["arch"], f["variant"], strict=True)}


def frame_variables(ds: xr.Dataset, metric: str, frame: pd.DataFrame, index: dict[tuple[str, str, str], int],
                    attrs: dict | None = None) -> dict[str, xr.Variable]:
    """The rows of a :func:`group_intervals`-like frame (task, arch, variant, dims of ``ds``,
    estimate, lower, upper, n_seeds, method) as ``<metric>_estimate/_lower/_upper/_n_seeds/
    _method`` over ``(cell, <its dims>)``, the cell of each row at ``index[(task, arch,
    variant)]``; ``attrs`` go on ``_estimate``."""
    dims = [c for c in frame.columns if c in ds.dims]
    shape = (len(index), *(ds.sizes[d] for d in dims))
    est, lo, hi = (np.full(shape, np.nan) for _ in range(3))
    n_seeds = np.zeros(shape, dtype=np.int64)
    method = np.full(shape, "", dtype=object)
    positions = [pd.Index(ds[d].values).get_indexer(frame[d].to_numpy()) for d in dims]
    rows = [index[(str(t), str(a), str(v))] for t, a, v in zip(frame["task"], frame["arch"], frame["variant"],
                                                               strict=True)]
    at = (np.asarray(rows, dtype=int), *positions)
    est[at] = frame["estimate"].astype(float).to_numpy()
    lo[at] = frame["lower"].astype(float).to_numpy()
    hi[at] = frame["upper"].astype(float).to_numpy()
    n_seeds[at] = frame["n_seeds"].astype(int).to_numpy()
    method[at] = frame["method"].astype(str).to_numpy()
    vdims = ("cell", *dims)
    return {
        f"{metric}_estimate": xr.Variable(vdims, est, dict(attrs or {})),
        f"{metric}_lower": xr.Variable(vdims, lo),
        f"{metric}_upper": xr.Variable(vdims, hi),
        f"{metric}_n_seeds": xr.Variable(vdims, n_seeds),
        f"{metric}_method": xr.Variable(vdims, method.astype(str)),
    }


def with_cells(ds: xr.Dataset, cells: Sequence[tuple[str, str, str]]) -> xr.Dataset:
    """``ds`` with the ``cell_task``, ``cell_arch``, ``cell_variant`` coords of ``cells``."""
    if not cells:
        return ds
    return ds.assign_coords(cell_task=("cell", [c[0] for c in cells]), cell_arch=("cell", [c[1] for c in cells]),
                            cell_variant=("cell", [c[2] for c in cells]))


def stored_intervals(ds: xr.Dataset, metric: str) -> pd.DataFrame | None:
    """The stored intervals of ``metric`` as :func:`group_intervals` returns them (same
    columns and rows, in the same order), or None when ``ds`` does not hold them."""
    names = [f"{metric}_{p}" for p in PARTS]
    if any(n not in ds for n in names):
        return None
    dims = list(ds[names[0]].dims)
    frame = ds[names].to_dataframe(dim_order=dims).reset_index()
    frame = frame[np.isfinite(frame[names[0]].astype(float))].reset_index(drop=True)
    cells = dims[1:]
    out = pd.DataFrame({
        "task": frame["cell_task"].astype(str), "arch": frame["cell_arch"].astype(str),
        "variant": frame["cell_variant"].astype(str),
        **{d: frame[d] for d in cells},
        "estimate": frame[names[0]].astype(float), "lower": frame[names[1]].astype(float),
        "upper": frame[names[2]].astype(float), "method": frame[names[4]].astype(str),
        "ci_level": float(ds.attrs.get("ci_level", CI_LEVEL)),
        "n_seeds": frame[names[3]].astype(int),
    })
    return out
