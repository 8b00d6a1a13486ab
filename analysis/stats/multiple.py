"""Multiple-comparison control over any dims of a p-value array.

Holm (family-wise error) and Benjamini-Hochberg (false discovery rate). Benjamini-Hochberg is
statsmodels ``multipletests``; Holm is the same step-down computed here (:func:`holm_np`,
bit-identical to statsmodels', tested), because statsmodels' Holm branch calls
``gc.collect()`` on every call: 77 ms in a process holding an analysis or a test session,
where a single adjustment takes microseconds, and claims and calibration loops make hundreds.
The family is every p-value along ``dims``; other dims index separate families (e.g.
``dims=("task", "layer")`` corrects within each architecture). NaN p-values (cells that were
not tested) are left out of the family and stay NaN.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import xarray as xr
from statsmodels.stats.multitest import multipletests

from analysis.stats import validate

METHODS = {"holm": "holm", "bh": "fdr_bh", "fdr_bh": "fdr_bh"}
_NAMES = {"holm": "Holm (family-wise error)", "fdr_bh": "Benjamini-Hochberg (false discovery rate)"}


def holm_np(p: np.ndarray, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down over one family: (reject, p_adjusted), as statsmodels computes them.

    The adjusted p-value of the i-th smallest of m is the running maximum of
    ``p_(j) * (m - j)`` over j <= i, capped at 1; a hypothesis is rejected while every smaller
    p-value so far is at or below ``alpha / (m - j)``. Ties get the same adjusted value
    whatever their order.
    """
    p = np.asarray(p, dtype=float)
    m = p.size
    order = np.argsort(p)
    ps = p[order]
    above = ps > alpha / np.arange(m, 0, -1)
    reject_sorted = np.ones(m, dtype=bool)
    if above.any():
        reject_sorted[int(np.argmax(above)):] = False
    adj_sorted = np.minimum(np.maximum.accumulate(ps * np.arange(m, 0, -1)), 1.0)
    reject, adj = np.empty(m, dtype=bool), np.empty(m)
    reject[order], adj[order] = reject_sorted, adj_sorted
    return reject, adj


def adjust_np(p: np.ndarray, method: str, alpha: float = 0.05, axis=-1):
    """Corrected p-values and rejections over ``axis``, one family per other index.

    Parameters
    ----------
    p : ndarray
        Raw p-values; NaN entries are excluded from their family.
    method : {"holm", "fdr_bh"}
        ``multipletests`` method name (Holm through :func:`holm_np`).
    alpha : float
    axis : int or tuple of int
        Axes spanning one family.

    Returns
    -------
    p_adjusted : ndarray of float, shape of ``p``
    reject : ndarray of bool, shape of ``p``
    """
    p = np.asarray(p, dtype=float)
    axes = tuple(np.atleast_1d(axis) % max(p.ndim, 1))
    moved = np.moveaxis(p, axes, tuple(range(-len(axes), 0)))
    flat = moved.reshape(moved.shape[: p.ndim - len(axes)] + (-1,)).reshape(
        -1, int(np.prod([p.shape[a] for a in axes]))
    )
    adjusted = np.full(flat.shape, np.nan)
    reject = np.zeros(flat.shape, dtype=bool)
    for p_row, adj_row, rej_row in zip(flat, adjusted, reject, strict=True):
        tested = np.isfinite(p_row)
        if tested.any():
            if method == "holm":
                rej, adj = holm_np(p_row[tested], alpha)
            else:
                rej, adj, _, _ = multipletests(p_row[tested], alpha=alpha, method=method)
            adj_row[tested], rej_row[tested] = adj, rej
    back = tuple(range(-len(axes), 0))
    return (
        np.moveaxis(adjusted.reshape(moved.shape), back, axes),
        np.moveaxis(reject.reshape(moved.shape), back, axes),
    )


def adjust_pvalues(
    pvalues: xr.DataArray,
    *,
    method: str = "holm",
    dims: Sequence[Hashable] | None = None,
    alpha: float = 0.05,
) -> xr.Dataset:
    """Holm or Benjamini-Hochberg correction over the named dims of a p-value array.

    Parameters
    ----------
    pvalues : xarray.DataArray
        Raw p-values, any dims.
    method : {"holm", "bh"}
        ``"holm"`` controls the family-wise error rate; ``"bh"`` (alias ``"fdr_bh"``) the false
        discovery rate.
    dims : sequence of str, optional
        Dims spanning one family; default all dims of ``pvalues``.
    alpha : float
        Level for ``reject``.

    Returns
    -------
    xarray.Dataset
        Same dims as ``pvalues``: ``p_adjusted``, ``reject``; attrs ``method``, ``alpha``,
        ``family_dims``, ``family_size`` (tests per family, NaN excluded, largest family).
    """
    validate.check_dataarray(pvalues, "pvalues")
    validate.check_choice(method, METHODS, "method")
    validate.check_probability(alpha, "alpha")
    dims = list(pvalues.dims) if dims is None else list(dims)
    validate.check_dims(pvalues, dims, "pvalues")
    adjusted, reject = xr.apply_ufunc(
        adjust_np,
        pvalues,
        input_core_dims=[dims],
        output_core_dims=[dims, dims],
        kwargs=dict(method=METHODS[method], alpha=alpha, axis=tuple(range(-len(dims), 0))),
        dask="parallelized",
        output_dtypes=[float, bool],
    )
    out = xr.Dataset({"p_adjusted": adjusted, "reject": reject}).transpose(*pvalues.dims)
    out.attrs = {
        "method": _NAMES[METHODS[method]],
        "alpha": alpha,
        "family_dims": [str(d) for d in dims],
        "family_size": int(pvalues.notnull().sum(dims).max()),
    }
    return out
