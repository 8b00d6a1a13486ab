"""Seed-level intervals of a probe result's profiles, stored beside its per-seed metrics.

Per (task, arch, variant), length and layer: the probe's held-out accuracy pooled over
positions and sequences (``sum correct / sum labelled``, bootstrapped seeds then sequences,
:func:`analysis.interventions.intervals.group_intervals`; without per-sequence counts the
fold-and-position mean of ``accuracy`` per seed with a seed-level t interval), and the
majority baseline, control-task accuracy and selectivity (fold-and-position means per seed,
seed-level t intervals, :func:`seed_t_interval`). :func:`add_probe_intervals` stores them as
``<metric>_estimate/_lower/_upper/_n_seeds/_method`` over ``(cell, length, layer)``
(``analysis.interventions.intervals.frame_variables``); the report reads them back with
:func:`stored_probe_intervals`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from analysis.behaviour import by_factors

#: Interval level of the stored probe intervals.
CI_LEVEL = 0.95
#: The stored metric -> the probe result's per-seed variable (accuracy: see the module).
METRICS = {"accuracy": "accuracy", "baseline": "baseline", "control": "control_accuracy",
           "selectivity": "selectivity"}


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


def pooled_counts(ds: xr.Dataset) -> tuple[xr.DataArray, xr.DataArray]:
    """Correct and labelled per (run, length, layer, sequence), pooled over positions; positions
    that were never scored (``n_test`` 0) count in neither."""
    correct, labelled = ds["correct"].astype("float64"), ds["labelled"].astype("float64")
    if "n_test" in ds:
        scored = ds["n_test"].sum("fold") > 0 if "fold" in ds["n_test"].dims else ds["n_test"] > 0
        labelled = labelled.where(scored, 0.0)
        correct = correct.where(scored, 0.0)
    if "position" in correct.dims:
        correct, labelled = correct.sum("position"), labelled.sum("position")
    labelled = labelled.broadcast_like(correct)
    # sequences without any labelled row are padding (NaN), not zero-accuracy sequences
    return correct.where(labelled > 0), labelled.where(labelled > 0)


def seed_level(per_run: xr.DataArray, store) -> pd.DataFrame:
    """Per-run values (run, ...) -> seed-level t interval per (task, arch, variant, ...)."""
    res = seed_t_interval(by_factors(per_run, store))
    frame = res.to_dataframe().reset_index()
    frame["method"] = res.attrs["method"]
    return frame[np.isfinite(frame["estimate"])].reset_index(drop=True)


def has_counts(ds: xr.Dataset) -> bool:
    """Whether the accuracy interval bootstraps per-sequence counts (else per-seed means)."""
    return "correct" in ds and "labelled" in ds


def probe_interval_frames(ds: xr.Dataset, store) -> dict[str, pd.DataFrame]:
    """The interval rows of every metric of :data:`METRICS` ``ds`` holds (see the module)."""
    from analysis.interventions.intervals import group_intervals

    over = [d for d in ("fold", "position") if d in ds["accuracy"].dims]
    out = {}
    if has_counts(ds):
        out["accuracy"] = group_intervals(*pooled_counts(ds), store)
    else:
        out["accuracy"] = seed_level(ds["accuracy"].mean(over), store)
    for short, var in METRICS.items():
        if short != "accuracy" and var in ds:
            out[short] = seed_level(ds[var].mean([d for d in over if d in ds[var].dims]), store)
    return out


def add_probe_intervals(ds: xr.Dataset, store) -> xr.Dataset:
    """``ds`` (a probe result) with :func:`probe_interval_frames` stored as
    ``<metric>_estimate/_lower/_upper/_n_seeds/_method`` over ``(cell, length, layer)``,
    coords ``cell_task``, ``cell_arch``, ``cell_variant``; attrs ``interval_metrics`` and
    ``ci_level``. A result without ``accuracy`` is returned as it is."""
    from analysis.interventions.intervals import frame_cells, frame_variables, with_cells

    if "accuracy" not in ds or "run" not in ds.dims:
        return ds
    frames = probe_interval_frames(ds, store)
    cells = sorted(frame_cells(frames.values()))
    index = {c: i for i, c in enumerate(cells)}
    new = {}
    for metric, frame in frames.items():
        what = ("sum(correct) / sum(labelled), pooled over positions" if metric == "accuracy" and has_counts(ds)
                else f"mean of {METRICS[metric]} over folds and positions, per seed")
        new.update(frame_variables(ds, metric, frame, index, {"what": what}))
    out = with_cells(ds.assign(new), cells)
    out.attrs.update(interval_metrics=list(frames), ci_level=CI_LEVEL)
    return out


def stored_probe_intervals(ds: xr.Dataset, metric: str) -> pd.DataFrame | None:
    """The stored intervals of ``metric`` as :func:`probe_interval_frames` computes them (the
    same rows; columns task, arch, variant, length, layer, estimate, lower, upper, n_seeds,
    method, and ``ci_level`` where the accuracy bootstraps counts), or None when ``ds`` does
    not hold them."""
    from analysis.interventions.intervals import stored_intervals

    frame = stored_intervals(ds, metric)
    if frame is None:
        return None
    if not (metric == "accuracy" and has_counts(ds)):
        frame = frame.drop(columns="ci_level")
    return frame
