"""Whether a probe's held-out accuracy at a layer is above chance, per run and length.

Chance is the majority-class baseline the probe result stores (``baseline``: the training
fold's majority class scored on the held-out fold), averaged like the accuracy over folds and
positions, or a guess among the classes (one over their number) where that is higher. A layer is above chance when a one-sided lower bound of its accuracy exceeds it:
the accuracy pooled over positions and sequences (``sum correct / sum labelled``), its standard
error over sequences, the unit the folds split by (a ratio estimator's, so positions of one
sequence count together), at level ``alpha`` Bonferroni-corrected over the layers; a result
stored without per-sequence counts uses the folds' accuracies instead (a t bound over folds).
A shuffled label then reads as "no layer above chance" rather than naming a best layer.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy import stats

from .intervals import pooled_counts


def chance_level(ds: xr.Dataset) -> xr.DataArray:
    """Chance per (run, length, layer): the majority-class baseline averaged over folds and
    positions, or one over the number of classes where that is higher (a balanced label's
    held-out majority scores below a guess, as the training fold's majority is not always the
    test fold's)."""
    base = ds["baseline"].mean([d for d in ("fold", "position") if d in ds["baseline"].dims])
    k = int(ds.sizes.get("class", 0))
    return base.clip(min=1.0 / k) if k > 1 else base


def accuracy_lower_bound(ds: xr.Dataset, alpha: float = 0.05) -> xr.DataArray:
    """One-sided lower bound of held-out accuracy per (run, length, layer), at ``alpha``
    Bonferroni-corrected over the layers (see the module)."""
    k = max(int(ds.sizes.get("layer", 1)), 1)
    level = alpha / k
    if "correct" in ds and "labelled" in ds:
        c, n = pooled_counts(ds)
        c, n = c.fillna(0.0), n.fillna(0.0)
        total = n.sum("sequence")
        ratio = c.sum("sequence") / total.where(total > 0)
        m = (n > 0).sum("sequence")
        resid = c - ratio * n
        var = (resid ** 2).where(n > 0, 0.0).sum("sequence") / total ** 2 * m / (m - 1).where(m > 1)
        z = float(stats.norm.ppf(1 - level))
        return ratio - z * np.sqrt(var)
    acc = ds["accuracy"].mean([d for d in ("position",) if d in ds["accuracy"].dims])
    folds = acc.count("fold")
    t = xr.apply_ufunc(lambda f: stats.t.ppf(1 - level, np.maximum(f - 1, 1)), folds)
    return acc.mean("fold") - t * acc.std("fold", ddof=1) / np.sqrt(folds)


def above_chance(ds: xr.Dataset, alpha: float = 0.05) -> xr.DataArray:
    """True per (run, length, layer) where the accuracy's lower bound exceeds chance."""
    return accuracy_lower_bound(ds, alpha) > chance_level(ds)
