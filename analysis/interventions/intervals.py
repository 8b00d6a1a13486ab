"""Seed-level intervals of the intervention results, stored beside the per-sequence counts.

Every ratio-of-sums metric an intervention result carries (an ablation's accuracy drop, a
patch's recovery, an interchange's restoration, ...) gets one interval per (task, arch,
variant) and cell, each (task, arch, variant) on its own seeds (:func:`group_intervals`).
:func:`add_intervals` stores them in the result as ``<metric>_estimate``, ``_lower``,
``_upper``, ``_n_seeds`` and ``_method`` over ``(cell, <the metric's dims>)``, a cell being
one (``cell_task``, ``cell_arch``, ``cell_variant``) as in the behaviour result; the report
reads them back with :func:`stored_intervals` and computes nothing of its own.

Which metrics each kind of result gets is :data:`METRICS`: (metric, numerator, denominator,
runs), where ``numerator`` may be ``"a-b"`` (a difference of two variables) and ``runs`` is
``"all"`` or ``"moved"`` (runs whose corruption moves the clean answer, :func:`flat_runs`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from analysis.interventions import MIN_GAP

#: Interval level of the stored intervals.
CI_LEVEL = 0.95
#: The seed of the percentile bootstrap a one-seed cell's interval draws.
BOOTSTRAP_SEED = 0
#: What each stored interval is the estimate of: ``estimate, lower, upper, n_seeds, method``.
PARTS = ("estimate", "lower", "upper", "n_seeds", "method")

#: kind -> (metric, numerator, denominator, runs) of every interval the result stores.
METRICS: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "ablation": (
        ("drop", "correct_clean-correct", "n_labelled", "all"),
        ("accuracy", "correct", "n_labelled", "all"),
        ("residual", "probe_correct", "n_labelled", "all"),
        ("residual_clean", "probe_correct_clean", "n_labelled", "all"),
    ),
    "patching": (
        ("recovery", "recovered", "gap", "all"),
        ("damage", "damaged", "gap", "all"),
        ("recovery_prob", "recovered_prob", "gap_prob", "all"),
        ("damage_prob", "damaged_prob", "gap_prob", "all"),
        ("recovery_subspace", "recovered_subspace", "gap", "all"),
    ),
    "interchange": (
        ("restoration", "restored", "gap", "moved"),
        ("restoration_all", "restored", "gap", "all"),
        ("damage", "damaged", "gap", "all"),
        ("restoration_logit", "restored_logit", "gap_logit", "all"),
        ("damage_logit", "damaged_logit", "gap_logit", "all"),
    ),
}


# ---------------------------------------------------------------------- computing
def factor_table(store, runs: Sequence[str]) -> pd.DataFrame:
    """task, arch, variant, seed of each run (index ``run``), from the run attributes."""
    from analysis.behaviour import FACTORS

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
    from analysis.stats import hierarchical_bootstrap, interval_table

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


def flat_runs(ds: xr.Dataset, min_gap: float = MIN_GAP) -> list[str]:
    """Runs whose corruption barely moves the clean answer's probability (mean ``p_clean -
    p_corrupt`` below ``min_gap``): a restoration there is a ratio over a ~0 gap, noise that
    can read 3 or -7, so restoration intervals, claims and mechanism labels leave them out."""
    if "p_clean" not in ds or "p_corrupt" not in ds:
        return []
    gap = (ds["p_clean"] - ds["p_corrupt"]).mean([d for d in ("layer", "sequence") if d in ds["p_clean"].dims])
    return [str(r) for r, g in zip(ds["run"].values, gap.values, strict=True) if not g >= min_gap]


def _operands(ds: xr.Dataset, numerator: str, denominator: str) -> tuple[xr.DataArray, xr.DataArray] | None:
    names = numerator.split("-")
    if any(n not in ds for n in (*names, denominator)):
        return None
    num = ds[names[0]] if len(names) == 1 else ds[names[0]] - ds[names[1]]
    den = ds[denominator]
    return num, (den.astype(float) if denominator == "n_labelled" else den)


def metric_intervals(ds: xr.Dataset, kind: str, store, *, only: Collection[str] | None = None,
                     ci_level: float = CI_LEVEL, rng: int = BOOTSTRAP_SEED) -> dict[str, pd.DataFrame]:
    """:func:`group_intervals` of every metric of :data:`METRICS` ``[kind]`` (or of ``only``)
    that ``ds`` holds the variables of (metric -> rows; a metric whose runs are all left out
    is absent)."""
    out: dict[str, pd.DataFrame] = {}
    flat = flat_runs(ds) if kind == "interchange" else []
    for metric, numerator, denominator, which in METRICS[kind]:
        if only is not None and metric not in only:
            continue
        sub = ds.drop_sel(run=flat) if which == "moved" and flat else ds
        if not sub.sizes["run"]:
            continue
        operands = _operands(sub, numerator, denominator)
        if operands is not None:
            out[metric] = group_intervals(*operands, store, ci_level=ci_level, rng=rng)
    return out


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


def add_intervals(ds: xr.Dataset, kind: str, store, *, ci_level: float = CI_LEVEL,
                  rng: int = BOOTSTRAP_SEED) -> xr.Dataset:
    """``ds`` with the seed-level interval of every metric of :data:`METRICS` ``[kind]`` it
    holds, as ``<metric>_estimate/_lower/_upper`` (float), ``_n_seeds`` (int, 0 where the
    cell has no estimate) and ``_method`` (str) over ``(cell, <metric dims>)``; coords
    ``cell_task``, ``cell_arch``, ``cell_variant`` along ``cell``. Each ``_estimate``'s attrs
    say what it is (``numerator``, ``denominator``, ``runs``); the Dataset's attrs
    ``interval_metrics``, ``ci_level``, ``bootstrap_seed``."""
    frames = metric_intervals(ds, kind, store, ci_level=ci_level, rng=rng)
    matched = matched_grid(ds, store, ci_level=ci_level) if kind == "ablation" else None
    cells = sorted(frame_cells(frames.values())
                   | ({(str(t), str(a), str(v)) for t, a, v in matched.indexes["cell"]} if matched is not None
                      else set()))
    index = {c: i for i, c in enumerate(cells)}
    spec = {m: (n, d, w) for m, n, d, w in METRICS[kind]}
    new: dict[str, Any] = {}
    for metric, frame in frames.items():
        numerator, denominator, which = spec[metric]
        new.update(frame_variables(ds, metric, frame, index, {
            "numerator": numerator.replace("-", " - "), "denominator": denominator,
            "runs": "runs whose corruption moves the clean answer (mean p_clean - p_corrupt >= "
                    f"{MIN_GAP:g})" if which == "moved" else "every run",
        }))
    if matched is not None:
        matched_rows = np.array([index[(str(t), str(a), str(v))] for t, a, v in matched.indexes["cell"]], dtype=int)
        for name in MATCHED:
            var = matched[name]
            flag = name == "flagged"
            values = np.full((len(cells), *var.shape[1:]), False if flag else np.nan, dtype=bool if flag else float)
            values[matched_rows] = var.values
            new[f"matched_{name}"] = xr.Variable(var.dims, values)
        new["matched_estimate"].attrs.update(
            method=matched.attrs["method"], n_seeds=int(matched.attrs["n_seeds"]),
            what="drop(S) - drop(matched:S) per seed, S along matched_setting (paired t over seeds, "
                 "analysis.interventions.matched_comparison)")
    out = ds.assign(new)
    if matched is not None:
        out = out.assign_coords(matched_setting=matched["matched_setting"].values)
    out = with_cells(out, cells)
    out.attrs.update(interval_metrics=[*frames, *(["matched"] if matched is not None else [])], ci_level=ci_level, bootstrap_seed=rng,
                     interval_method="seed-level t across seeds (2 or more seeds); percentile bootstrap over "
                                     "sequences (one seed: sequence sampling only)")
    return out


_CELL = ("cell_task", "cell_arch", "cell_variant")
#: The variables of :func:`analysis.interventions.matched_comparison` an ablation result stores
#: as ``matched_<name>``.
MATCHED = ("estimate", "lower", "upper", "statistic", "p", "sd", "setting_drop", "matched_drop",
           "variance_removed", "flagged")


def matched_grid(ds: xr.Dataset, store, *, ci_level: float = CI_LEVEL) -> xr.Dataset | None:
    """:func:`analysis.interventions.matched_comparison` of every setting S with a
    ``matched:S`` control, at every length, with (task, arch, variant) stacked into ``cell``
    and S along ``matched_setting``; None without matched controls or with one seed."""
    from analysis.interventions.matched import matched_comparison

    if "setting" not in ds.dims or "variance_removed" not in ds:
        return None
    names = [str(v) for v in ds["setting"].values]
    if not any(f"matched:{s}" in names for s in names):
        return None
    try:
        test = matched_comparison(ds, store=store, ci_level=ci_level)
    except ValueError:
        return None  # one seed per model: no paired test
    test = test.reindex({d: ds[d].values for d in ("length", "layer") if d in test.dims})
    test = test.rename(setting="matched_setting").stack(cell=["task", "arch", "variant"])
    keep = test["setting_drop"].notnull().any([d for d in test["setting_drop"].dims if d != "cell"])
    test = test.isel(cell=np.flatnonzero(keep.values))
    test = test.transpose("cell", *[d for d in test[MATCHED[0]].dims if d != "cell"])
    return test


def stored_matched(ds: xr.Dataset, length: int) -> xr.Dataset | None:
    """The stored matched comparison at ``length`` in the layout of
    :func:`analysis.interventions.matched_comparison` (dims layer, setting, task, arch,
    variant), or None when ``ds`` does not hold it."""
    if "matched_estimate" not in ds:
        return None
    part = ds[[f"matched_{n}" for n in MATCHED]].sel(length=length)
    part = part.drop_vars([c for c in part.coords if c not in part.dims and c not in _CELL])
    part = part.rename({f"matched_{n}": n for n in MATCHED}).rename(matched_setting="setting")
    part = part.assign_coords(task=("cell", part["cell_task"].values), arch=("cell", part["cell_arch"].values),
                              variant=("cell", part["cell_variant"].values)).drop_vars(list(_CELL))
    grid = part.set_index(cell=["task", "arch", "variant"]).unstack("cell")
    grid["flagged"] = grid["flagged"].fillna(False).astype(bool)
    grid.attrs = {"method": ds["matched_estimate"].attrs.get("method", ""),
                  "n_seeds": int(ds["matched_estimate"].attrs.get("n_seeds", 0))}
    return grid


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
