"""The numpy kernels of :mod:`analysis.stats.bootstrap` (arrays with an ``axis=`` of seeds and one
of sequences): per-seed ratios and the estimate, the seed-level t interval and its exact
joint draws, and the hierarchical resampling (seeds, then sequences within each seed) with
percentile and BCa intervals. The estimators and the calibration behind the default are
described in :mod:`analysis.stats.bootstrap`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.stats
from scipy.special import ndtr, ndtri


class Resamples(NamedTuple):
    """Random numbers shared by every cell of one bootstrap (drawn once, from one Generator).

    For ``"t"``: ``xi`` (n_boot, seed) standard normals and ``chi2`` (n_boot,) chi-square(n-1).
    For ``"percentile"``/``"bca"``: ``seed_idx`` (n_boot, seed) resampled seeds per slot and
    ``counts`` (n_boot, seed, sequence) how often each sequence of the slot's seed was drawn.
    """

    xi: np.ndarray | None = None
    chi2: np.ndarray | None = None
    seed_idx: np.ndarray | None = None
    counts: np.ndarray | None = None


# --------------------------------------------------------------------------- numpy kernels


def _to_end(x: np.ndarray, axis: tuple[int, int]) -> np.ndarray:
    """Move the (seed, sequence) axes to the end: (..., seed, sequence)."""
    return np.moveaxis(np.asarray(x, dtype=float), axis, (-2, -1))


def _zero_invalid(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Zero padded sequences so that they add nothing to sums (NaN * 0 would stay NaN)."""
    return np.where(mask, x, 0.0)


def _valid(num: np.ndarray, den: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The shared (seed, sequence) mask, or, if None, each cell's own finite values."""
    return np.isfinite(num) & np.isfinite(den) if mask is None else mask


def seed_ratios_np(
    num: np.ndarray, den: np.ndarray, mask: np.ndarray, axis: tuple[int, int] = (-2, -1)
) -> np.ndarray:
    """Ratio of sums over the valid sequences of each seed.

    Parameters
    ----------
    num, den : ndarray
        Per-sequence sums, shape (..., seed, sequence) after moving ``axis`` to the end.
    mask : ndarray of bool or None
        Shape (seed, sequence): which sequences exist (ragged seeds are padded). None: every
        cell uses its own finite values (cells may then hold different sequences).
    axis : tuple of int
        Positions of the seed and sequence axes in ``num`` and ``den``.

    Returns
    -------
    ndarray
        Shape (..., seed); NaN where a seed has no valid sequence in a cell.
    """
    num, den = _to_end(num, axis), _to_end(den, axis)
    valid = _valid(num, den, mask)
    with np.errstate(invalid="ignore", divide="ignore"):
        return _zero_invalid(num, valid).sum(-1) / _zero_invalid(den, valid).sum(-1)


def point_estimate_np(
    num: np.ndarray, den: np.ndarray, mask: np.ndarray, weighting: str, axis=(-2, -1)
) -> np.ndarray:
    """The estimator of a cell: mean of per-seed ratios, or ratio of grand sums. Shape (...)."""
    if weighting == "seed":
        return seed_ratios_np(num, den, mask, axis).mean(-1)
    num, den = _to_end(num, axis), _to_end(den, axis)
    valid = _valid(num, den, mask)
    with np.errstate(invalid="ignore", divide="ignore"):
        return _zero_invalid(num, valid).sum((-2, -1)) / _zero_invalid(den, valid).sum((-2, -1))


def draw_resamples(
    rng: np.random.Generator,
    mask: np.ndarray | None,
    shape: tuple[int, int],
    n_boot: int,
    method: str,
) -> Resamples:
    """Draw the random numbers of one bootstrap, shared by all cells.

    Parameters
    ----------
    rng : numpy.random.Generator
    mask : ndarray of bool, shape (seed, sequence), or None (only for ``method="t"``)
    shape : (int, int)
        Number of seeds and of (padded) sequences.
    n_boot : int
    method : {"t", "percentile", "bca"}

    Returns
    -------
    Resamples
        For the hierarchical methods ``counts`` takes ``8 * n_boot * seed * sequence`` bytes
        (32 MB for 2000 draws of 5 x 400).
    """
    n_seeds, n_seq = shape
    if method == "t":
        xi = rng.standard_normal((n_boot, n_seeds))
        return Resamples(xi=xi, chi2=rng.chisquare(n_seeds - 1, n_boot))
    assert mask is not None, "the hierarchical methods always have a shared mask (_prepare)"
    seed_idx = rng.integers(0, n_seeds, size=(n_boot, n_seeds))  # (draw, slot)
    counts = np.zeros((n_boot, n_seeds, n_seq))
    for s in range(n_seeds):
        draw, slot = np.nonzero(seed_idx == s)  # the slots that drew seed s
        valid = np.flatnonzero(mask[s])
        n = valid.size
        # each such slot draws n of the seed's n valid sequences with replacement; picks are
        # indices into `valid`, counted per slot with one bincount
        picks = rng.integers(0, n, size=(draw.size, n))
        flat = (np.arange(draw.size)[:, None] * n + picks).ravel()
        drawn = np.bincount(flat, minlength=draw.size * n)
        counts[draw[:, None], slot[:, None], valid] = drawn.reshape(draw.size, n)
    return Resamples(seed_idx=seed_idx, counts=counts)


def hierarchical_draws_np(
    num: np.ndarray,
    den: np.ndarray,
    mask: np.ndarray,
    resamples: Resamples,
    weighting: str,
    axis: tuple[int, int] = (-2, -1),
) -> np.ndarray:
    """Bootstrap draws of the estimator, all cells in one pass.

    For every seed ``s`` and slot ``j``, the draws whose slot ``j`` drew ``s`` take their
    sequence counts (k, sequence) times that seed's numerators and denominators side by side
    (sequence, 2 * cell): one matrix product per (seed, slot), whatever the grid, over the
    seed's valid sequences only. Each product's ratios are added to their draws' rows of one
    (draw, cell) array; ``"pooled"`` sums the counts of the slots that drew ``s`` first (one
    product per seed). Integer data (counts of positions) are multiplied in float32 when that
    is exact (:func:`_exact_dtype`).

    Why this shape (measured on the ``python -m bench.stats`` grid: 512 cells, 5 seeds, 2000
    draws, one core): scattering the products into a (draw, slot, cell) array and reducing
    over slots cost more than the products themselves (two 40 MB temporaries, which suffer
    most when other processes compete for memory); adding the ratios into rows of
    (draw, cell) takes ~20 ms in all, into columns of (cell, draw) it took ~140 ms.

    Parameters
    ----------
    num, den : ndarray, shape (..., seed, sequence) after moving ``axis``
    mask : ndarray of bool, shape (seed, sequence)
    resamples : Resamples with ``seed_idx`` and ``counts``
    weighting : {"seed", "pooled"}
    axis : tuple of int

    Returns
    -------
    ndarray, shape (..., draw), C-contiguous (draws of one cell adjacent)
    """
    num, den = _to_end(num, axis), _to_end(den, axis)
    cells = num.shape[:-2]
    n_seeds, n_seq = num.shape[-2:]
    num = num.reshape(-1, n_seeds, n_seq)  # (cell, seed, sequence)
    den = den.reshape(-1, n_seeds, n_seq)
    n_cells = num.shape[0]
    seed_idx, counts = resamples.seed_idx, resamples.counts
    assert seed_idx is not None and counts is not None, "hierarchical resamples expected"
    n_boot, n_slots = seed_idx.shape
    pooled = weighting == "pooled"
    acc = np.zeros((n_boot, 2 * n_cells if pooled else n_cells))  # (draw, [num,] den or ratio)
    with np.errstate(invalid="ignore", divide="ignore"):
        for s in range(n_seeds):
            valid = np.flatnonzero(mask[s])  # padding never enters a product
            data = np.concatenate([num[:, s, valid], den[:, s, valid]]).T  # (sequence, 2 * cell)
            rows = [np.flatnonzero(seed_idx[:, j] == s) for j in range(n_slots)]
            if pooled:
                weights = np.zeros((n_boot, valid.size))  # (draw, sequence)
                for j, r in enumerate(rows):
                    weights[r] += counts[r, j][:, valid]
                dtype = _exact_dtype(data, float(weights.sum(-1).max()))
                acc += weights.astype(dtype) @ data.astype(dtype)
                continue
            dtype = _exact_dtype(data, float(valid.size))  # a slot draws len(valid) sequences
            data = data.astype(dtype)
            for j, r in enumerate(rows):
                if r.size:
                    sums = counts[r, j][:, valid].astype(dtype) @ data  # (k, 2 * cell)
                    acc[r] += np.divide(sums[:, :n_cells], sums[:, n_cells:], dtype=float)
        draws = acc[:, :n_cells] / acc[:, n_cells:] if pooled else acc / n_slots
    return np.ascontiguousarray(draws.T).reshape(cells + (n_boot,))


def _exact_dtype(data: np.ndarray, weight_total: float) -> type:
    """float32 where a product ``counts @ data`` is exact in it, else float64.

    Counts are integers; when the data are integers too (correct and labelled positions per
    sequence, the usual input) and ``weight_total * max|data| < 2**24``, every partial sum of
    the product is an integer that float32 holds exactly, in any summation order: the result
    is bit for bit the float64 one, from a product ~3x faster (measured here: 151 against
    45 GFLOP/s on one core).
    """
    if data.size == 0 or not np.isfinite(data).all():
        return np.float64
    small = weight_total * float(np.abs(data).max()) < 2**24
    return np.float32 if small and np.array_equal(data, np.rint(data)) else np.float64


def t_draws_np(theta: np.ndarray, resamples: Resamples) -> np.ndarray:
    """Draws of ``mean + se * T(n-1)`` from per-seed estimates, joint over cells.

    Parameters
    ----------
    theta : ndarray, shape (..., seed)
    resamples : Resamples with ``xi`` (draw, seed) and ``chi2`` (draw,)

    Returns
    -------
    ndarray, shape (..., draw)
    """
    assert resamples.xi is not None and resamples.chi2 is not None, "t resamples expected"
    n = theta.shape[-1]
    mean = theta.mean(-1, keepdims=True)
    normal = (theta - mean) @ resamples.xi.T / np.sqrt(n * (n - 1))  # (..., draw) ~ N(0, se^2)
    return mean + normal * np.sqrt((n - 1) / resamples.chi2)


def t_interval_np(theta: np.ndarray, ci_level: float, axis: int = -1):
    """Seed-level Student-t interval.

    Parameters
    ----------
    theta : ndarray
        Per-seed estimates; seeds along ``axis``.
    ci_level : float

    Returns
    -------
    estimate, lower, upper : ndarray
        Shape of ``theta`` without ``axis``.
    """
    theta = np.moveaxis(np.asarray(theta, dtype=float), axis, -1)
    n = theta.shape[-1]
    est = theta.mean(-1)
    se = theta.std(-1, ddof=1) / np.sqrt(n)
    half = scipy.stats.t.ppf(0.5 + ci_level / 2, n - 1) * se
    return est, est - half, est + half


def quantile_per_cell_np(draws: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Quantiles of ``draws`` (..., draw) at levels ``q`` (..., k) that may differ per cell.

    Linear interpolation between order statistics, computed as ``numpy.quantile``'s default
    (``"linear"``, the same two-sided lerp), so the two agree bit for bit; a cell with a NaN
    draw gets NaN, as there. Sorting is faster than ``numpy.quantile``'s partition here
    (numpy 2 sorts floats with SIMD: 15 ms against 45 ms for 512 cells x 2000 draws).
    Returns shape (..., k).
    """
    ordered = np.sort(draws, axis=-1)
    n = ordered.shape[-1]
    h = (n - 1) * np.clip(q, 0.0, 1.0)
    lo = np.floor(h).astype(np.intp)
    hi = np.minimum(lo + 1, n - 1)
    x_lo = np.take_along_axis(ordered, lo, axis=-1)
    x_hi = np.take_along_axis(ordered, hi, axis=-1)
    t = h - lo
    step = x_hi - x_lo
    out = np.where(t >= 0.5, x_hi - step * (1 - t), x_lo + step * t)
    return np.where(np.isnan(ordered[..., -1:]), np.nan, out)  # NaN sorts last


def percentile_interval_np(draws: np.ndarray, ci_level: float, axis: int = -1):
    """Percentile interval of ``draws`` along ``axis``. Returns (lower, upper)."""
    draws = np.moveaxis(draws, axis, -1)
    alpha = (1.0 - ci_level) / 2
    q = np.broadcast_to([alpha, 1.0 - alpha], draws.shape[:-1] + (2,))
    bounds = quantile_per_cell_np(draws, q)
    return bounds[..., 0], bounds[..., 1]


def jackknife_np(
    num: np.ndarray, den: np.ndarray, mask: np.ndarray, weighting: str, axis=(-2, -1)
) -> np.ndarray:
    """Leave-one-out estimates over the top resampled level, shape (..., unit).

    Units are seeds when there are at least two, else the valid sequences of the one seed.
    """
    num, den = _to_end(num, axis), _to_end(den, axis)
    num, den = _zero_invalid(num, mask), _zero_invalid(den, mask)
    with np.errstate(invalid="ignore", divide="ignore"):
        if num.shape[-2] == 1:
            n_i, d_i = num[..., 0, mask[0]], den[..., 0, mask[0]]  # (..., sequence)
            return (n_i.sum(-1, keepdims=True) - n_i) / (d_i.sum(-1, keepdims=True) - d_i)
        if weighting == "seed":
            theta = num.sum(-1) / den.sum(-1)  # (..., seed)
            return (theta.sum(-1, keepdims=True) - theta) / (theta.shape[-1] - 1)
        n_s, d_s = num.sum(-1), den.sum(-1)
        return (n_s.sum(-1, keepdims=True) - n_s) / (d_s.sum(-1, keepdims=True) - d_s)


def bca_interval_np(draws: np.ndarray, estimate: np.ndarray, jack: np.ndarray, ci_level: float):
    """Bias-corrected and accelerated interval (Efron 1987), per cell.

    Parameters
    ----------
    draws : ndarray, shape (..., draw)
    estimate : ndarray, shape (...)
    jack : ndarray, shape (..., unit): jackknife estimates for the acceleration
    ci_level : float

    Returns
    -------
    lower, upper : ndarray, shape (...)

    Notes
    -----
    The share of draws below the estimate is clipped to [1/(2B), 1 - 1/(2B)] so that a cell
    whose draws all lie on one side gets the extreme draw rather than an infinite ``z0``.
    """
    n_boot = draws.shape[-1]
    share = np.mean(draws < estimate[..., None], axis=-1)
    z0 = ndtri(np.clip(share, 0.5 / n_boot, 1 - 0.5 / n_boot))[..., None]
    dev = jack.mean(-1, keepdims=True) - jack
    with np.errstate(invalid="ignore", divide="ignore"):
        accel = (dev**3).sum(-1) / (6 * ((dev**2).sum(-1)) ** 1.5)
    accel = np.where(np.isfinite(accel), accel, 0.0)[..., None]
    alpha = (1.0 - ci_level) / 2
    z = ndtri(np.array([alpha, 1 - alpha]))
    q = ndtr(z0 + (z0 + z) / (1 - accel * (z0 + z)))  # (..., 2)
    bounds = quantile_per_cell_np(draws, q)
    return bounds[..., 0], bounds[..., 1]


def bootstrap_np(
    num: np.ndarray,
    den: np.ndarray,
    mask: np.ndarray,
    resamples: Resamples,
    *,
    method: str,
    ci_level: float,
    weighting: str,
    axis: tuple[int, int] = (-2, -1),
):
    """The whole statistic for a block of cells.

    Parameters
    ----------
    num, den : ndarray, shape (..., seed, sequence) after moving ``axis``
    mask : ndarray of bool, shape (seed, sequence); may be None for ``method="t"``
    resamples : Resamples from :func:`draw_resamples` (the same for every block of cells)
    method, ci_level, weighting : see :func:`hierarchical_bootstrap`
    axis : tuple of int

    Returns
    -------
    draws : ndarray, shape (..., draw)
    estimate, lower, upper : ndarray, shape (...)
    """
    num, den = _to_end(num, axis), _to_end(den, axis)
    if method == "t":
        theta = seed_ratios_np(num, den, mask)
        est, lower, upper = t_interval_np(theta, ci_level)
        return t_draws_np(theta, resamples), est, lower, upper
    est = point_estimate_np(num, den, mask, weighting)
    draws = hierarchical_draws_np(num, den, mask, resamples, weighting)
    if method == "percentile":
        lower, upper = percentile_interval_np(draws, ci_level)
    else:
        jack = jackknife_np(num, den, mask, weighting)
        lower, upper = bca_interval_np(draws, est, jack, ci_level)
    return draws, est, lower, upper
