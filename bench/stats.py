"""Benchmark: the vectorised hierarchical bootstrap over a grid vs scipy.stats.bootstrap per cell.

Side by side in one process on the same data; prints ONE JSON line. Two configurations:

* ``grid``: 5 seeds x 100-200 sequences x 512 cells (run x layer x length), 2000 draws,
  percentile. layerstate resamples seeds, then sequences within seeds, with one set of indices
  for the whole grid. scipy has no nested levels, so it runs an ordinary bootstrap of the
  pooled sequences for each cell (less work per draw than the two-level resample, so the ratio
  understates the gain). scipy is timed on every cell (``SCIPY_CELLS`` can lower that; the
  time is then extrapolated per cell, and the JSON says so).
* ``one_seed``: one seed, where both compute the same estimator and distribution; reports
  the timing ratio, the gaps between interval endpoints in bootstrap-SD units, and each
  method's bootstrap SD over the exact one (``sd(x) / sqrt(n)`` for a mean; labelled counts
  are constant here). layerstate's draws share one resample across all cells, so its Monte
  Carlo error is one realisation common to every cell (SD within a few % of exact at 2000
  draws), while scipy's averages out over cells.

Run: ``python bench/stats.py`` (``make bench``); ~20 s on one core.
"""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # docs/measured.md, "Threads"
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import scipy.stats  # noqa: E402
import xarray as xr  # noqa: E402

from analysis.stats import hierarchical_bootstrap  # noqa: E402

GRID = {"run": 4, "layer": 8, "length": 16}  # 512 cells
N_BOOT = 2000
SCIPY_CELLS = 512


def make_data(rng, n_seeds, seq_range, grid=GRID):
    """Per-sequence correct/labelled counts, dims (*grid, seed, sequence), NaN-padded."""
    lo, hi = seq_range
    n_seq = rng.integers(lo, hi + 1, n_seeds)
    mask = np.arange(hi) < n_seq[:, None]
    shape = tuple(grid.values()) + (n_seeds, hi)
    labelled = np.full(shape, 40.0)
    logit = 1.2 + rng.normal(0, 0.3, shape[:-1] + (1,)) + rng.normal(0, 1.0, (n_seeds, hi))
    correct = rng.binomial(40, 1 / (1 + np.exp(-logit))).astype(float)
    dims = tuple(grid) + ("seed", "sequence")
    pad = lambda x: xr.DataArray(np.where(mask, x, np.nan), dims=dims)  # noqa: E731
    return pad(correct), pad(labelled), mask


def ratio(n, d, axis=-1):
    return n.sum(axis) / d.sum(axis)


def scipy_per_cell(num, den, mask, n_cells, rng):
    """scipy.stats.bootstrap on the pooled sequences of each of the first ``n_cells`` cells."""
    flat_n = num.values.reshape(-1, *num.shape[-2:])
    flat_d = den.values.reshape(-1, *den.shape[-2:])
    lows, highs, sds = [], [], []
    start = time.perf_counter()
    for k in range(n_cells):
        res = scipy.stats.bootstrap(
            (flat_n[k][mask], flat_d[k][mask]),
            ratio,
            paired=True,
            vectorized=True,
            n_resamples=N_BOOT,
            method="percentile",
            rng=rng,
        )
        lows.append(res.confidence_interval.low)
        highs.append(res.confidence_interval.high)
        sds.append(res.bootstrap_distribution.std())
    return ((time.perf_counter() - start) / n_cells, np.array(lows), np.array(highs), np.array(sds))


def timed(func):
    start = time.perf_counter()
    out = func()
    return time.perf_counter() - start, out


def grid_config(rng):
    num, den, mask = make_data(rng, 5, (100, 200))
    ours_s, res = timed(
        lambda: hierarchical_bootstrap(num, den, rng=rng, method="percentile", n_boot=N_BOOT)
    )
    per_cell, _, _, _ = scipy_per_cell(num, den, mask, SCIPY_CELLS, rng)
    cells = int(np.prod(list(GRID.values())))
    return {
        "cells": cells,
        "seeds": 5,
        "sequences_per_seed": res.interval.attrs["n_sequences_per_seed"],
        "n_boot": N_BOOT,
        "method": "percentile",
        "layerstate_s": round(ours_s, 3),
        "scipy_s_per_cell": round(per_cell, 4),
        "scipy_cells_timed": SCIPY_CELLS,
        "scipy_s": round(per_cell * cells, 2),
        "speedup": round(per_cell * cells / ours_s, 1),
    }


def one_seed_config(rng):
    grid = {"layer": 8, "position": 64}  # 512 cells
    num, den, mask = make_data(rng, 1, (400, 400), grid)
    ours_s, res = timed(
        lambda: hierarchical_bootstrap(num, den, rng=rng, method="percentile", n_boot=N_BOOT)
    )
    per_cell, lows, highs, sds = scipy_per_cell(num, den, mask, SCIPY_CELLS, rng)
    rate = (num / den).values.reshape(-1, 400)[:SCIPY_CELLS]
    exact = rate.std(-1) / np.sqrt(rate.shape[-1])  # the bootstrap SD of a mean
    sd = res.draws.std("draw").values.ravel()[:SCIPY_CELLS]
    gap = np.concatenate(
        [
            np.abs(res.interval.lower.values.ravel()[:SCIPY_CELLS] - lows) / sd,
            np.abs(res.interval.upper.values.ravel()[:SCIPY_CELLS] - highs) / sd,
        ]
    )
    cells = int(np.prod(list(grid.values())))
    return {
        "cells": cells,
        "sequences": 400,
        "layerstate_s": round(ours_s, 3),
        "scipy_s_per_cell": round(per_cell, 4),
        "scipy_s": round(per_cell * cells, 2),
        "speedup": round(per_cell * cells / ours_s, 1),
        "median_endpoint_gap_in_sd": round(float(np.median(gap)), 3),
        "max_endpoint_gap_in_sd": round(float(gap.max()), 3),
        "layerstate_sd_over_exact": round(float(np.mean(sd / exact)), 4),
        "scipy_sd_over_exact": round(float(np.mean(sds / exact)), 4),
    }


def main():
    rng = np.random.default_rng(0)
    grid = grid_config(rng)
    one = one_seed_config(rng)
    print(
        json.dumps(
            {
                "bench": "stats",
                "what": "vectorised hierarchical bootstrap over a grid vs scipy.stats.bootstrap per cell",
                "speedup": grid["speedup"],
                "goal": 20,
                "grid": grid,
                "one_seed": one,
                "note": f"scipy timed on {SCIPY_CELLS} of {grid['cells']} cells"
                + (" and extrapolated per cell" if SCIPY_CELLS < grid["cells"] else "")
                + "; in 'grid' scipy runs a one-level bootstrap of pooled sequences (it has no "
                "nested levels), in 'one_seed' both compute the same distribution",
            }
        )
    )


if __name__ == "__main__":
    main()
