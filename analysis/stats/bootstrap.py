"""Intervals for metrics of nested data: sequences within seeds.

The data are per-sequence sums: a numerator (e.g. correctly predicted positions) and a
denominator (labelled positions) for every (seed, sequence), for every cell of a grid
(run, layer, position, length, ...). Positions are never resampled: positions of one sequence
are not independent (docs/science.md, "Statistics the papers did not do"). The estimator of a
cell is **ours**: the ratio of sums within each seed (``sum num / sum den`` over its
sequences), averaged over seeds with equal weight
(``weighting="seed"``: seeds are the replicates, the estimand is the expected metric of a new
seed), or the ratio of grand sums (``weighting="pooled"``). Plain means are denominator 1.

Three interval methods:

``"t"`` (default)
    Seed-level Student-t interval on the per-seed estimates, ``df = n_seeds - 1``. With ~5 seeds
    this is the honest choice: per-seed estimates already carry their sequence-level noise, and
    the t quantile pays for estimating the seed variance from 5 numbers. Its draws (for arviz)
    are exact draws of ``estimate + se * T(df)``, joint over cells: ``g = sum_s xi_s (theta_s -
    mean) / sqrt(n (n-1))`` with ``xi ~ N(0, 1)`` shared by all cells, scaled by
    ``sqrt((n-1)/V)`` with one ``V ~ chi2(n-1)`` per draw. Each cell's draws are then exactly
    the seed-level t distribution, and the draws of any difference of cells are exactly the
    paired t on per-seed differences. In 2000 simulated experiments shaped like ours
    (``tests/analysis/test_stats_calibration.py``) its 95% intervals covered the truth 94.4%
    of the time. It assumes roughly normal per-seed estimates: with large seed offsets near a
    ceiling (logit sd 0.6) coverage fell to ~93.8%.
``"percentile"`` / ``"bca"``
    Hierarchical bootstrap: resample seeds with replacement, then, within every resampled seed,
    its sequences with replacement. One set of resample indices serves every cell, so a whole
    grid is resampled in one vectorised pass and paired differences between cells come out
    right. BCa's acceleration is a jackknife over seeds (over sequences when there is one seed).
    With ~5 seeds these undercover (docs/measured.md, "Statistics"): nominal 95% intervals
    covered 85.8% (percentile) and 85.3% (BCa) in 300 of the same simulated experiments. Keep
    them for many seeds or for a within-seed (one seed) interval.

Layers: numpy kernels with ``axis=`` (``*_np``), the xarray wrapper :func:`hierarchical_bootstrap`
(named dims, method and level in attrs, lazy on dask), and :func:`bootstrap_reference`, the
obvious per-cell loop over scipy with the same signature.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.stats
import xarray as xr
from scipy.special import ndtr, ndtri

from analysis.stats import validate

METHODS = ("t", "percentile", "bca")
WEIGHTINGS = ("seed", "pooled")


class BootstrapResult(NamedTuple):
    """What :func:`hierarchical_bootstrap` returns.

    Attributes
    ----------
    draws : xarray.DataArray
        Dims (*cells, draw): draws of the estimator's sampling distribution, joint over cells.
    interval : xarray.Dataset
        Dims (*cells): ``estimate``, ``lower``, ``upper``; attrs ``method``, ``ci_level``,
        ``n_boot``, ``n_seeds``, ``weighting``, ``n_sequences_per_seed``.
    """

    draws: xr.DataArray
    interval: xr.Dataset


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


# --------------------------------------------------------------------------- xarray layer


def _validate(numerator, denominator, mask, method, ci_level, n_boot, weighting, dims):
    """All argument checks of the bootstrap; returns (numerator, denominator)."""
    validate.check_dataarray(numerator, "numerator")
    validate.check_dims(numerator, dims, "numerator")
    validate.check_choice(method, METHODS, "method")
    validate.check_choice(weighting, WEIGHTINGS, "weighting")
    validate.check_probability(ci_level, "ci_level")
    validate.check_n_boot(n_boot)
    if denominator is None:
        denominator = xr.where(numerator.notnull(), 1.0, np.nan)  # plain means
    validate.check_dataarray(denominator, "denominator")
    validate.check_same_dims(numerator, denominator, ("numerator", "denominator"))
    if mask is not None:
        validate.check_dataarray(mask, "mask")
        validate.check_dims(mask, dims, "mask")
        if set(mask.dims) != set(dims):
            raise ValueError(
                f"mask must have exactly the dims {tuple(dims)} (one validity flag per "
                f"sequence, shared by all cells), got {tuple(mask.dims)}"
            )
    if method == "t" and weighting != "seed":
        raise ValueError(
            "method='t' is an interval on per-seed estimates and needs weighting='seed'; "
            "use method='percentile' or 'bca' for weighting='pooled'"
        )
    return numerator, denominator.transpose(*numerator.dims)


def sequence_mask(
    numerator: xr.DataArray,
    denominator: xr.DataArray | None = None,
    *,
    seed_dim: str = "seed",
    sequence_dim: str = "sequence",
) -> xr.DataArray:
    """Which (seed, sequence) exist, from the NaN padding of the data.

    A sequence is valid when it is finite in every cell and padding when it is NaN in every
    cell. Computes a small reduction if the data are dask-backed (pass ``mask=`` explicitly to
    the statistics to stay lazy).

    Returns
    -------
    xarray.DataArray of bool, dims (seed, sequence)
    """
    finite = numerator.notnull()
    if denominator is not None:
        finite = finite & denominator.notnull()
    cells = [d for d in finite.dims if d not in (seed_dim, sequence_dim)]
    every, some = finite.all(cells), finite.any(cells)
    mixed = (some & ~every).transpose(seed_dim, sequence_dim).compute()
    if bool(mixed.any()):
        bad = [
            (mixed[seed_dim].values[i].item(), mixed[sequence_dim].values[j].item())
            for i, j in np.argwhere(mixed.values)[:5]
        ]
        raise ValueError(
            f"the NaN padding differs between cells for (seed, sequence) {bad}"
            f"{' ...' if int(mixed.sum()) > 5 else ''}; one resample must serve every cell, "
            f"so a sequence is either present in all cells or padding (NaN) in all. Bootstrap "
            f"cells with different sequences (e.g. tasks) separately, or use method='t'"
        )
    return every.transpose(seed_dim, sequence_dim).compute()


def _prepare(numerator, denominator, mask, method, ci_level, n_boot, weighting, dims):
    """Checks, plus the shared mask: derived for the bootstrap methods, optional for "t"."""
    numerator, denominator = _validate(
        numerator, denominator, mask, method, ci_level, n_boot, weighting, dims
    )
    if mask is None and method != "t":
        mask = sequence_mask(numerator, denominator, seed_dim=dims[0], sequence_dim=dims[1])
    mask_np = None if mask is None else np.asarray(mask.transpose(*dims).values, dtype=bool)
    n_seeds = numerator.sizes[dims[0]]
    if mask_np is not None:
        validate.check_mask(mask_np, n_seeds)
    if method == "t":
        validate.check_min_seeds(
            n_seeds,
            2,
            "the seed-level t interval (method='t')",
            "Train more seeds, or use method='percentile' for a within-seed interval.",
        )
    return numerator, denominator, mask_np


def _attrs(method, ci_level, n_boot, weighting, n_seeds, mask_np):
    attrs = {
        "method": {
            "t": "seed-level t",
            "percentile": "hierarchical percentile",
            "bca": "hierarchical BCa",
        }[method],
        "ci_level": ci_level,
        "n_boot": n_boot,
        "n_seeds": int(n_seeds),
        "weighting": weighting,
    }
    if mask_np is not None:
        attrs["n_sequences_per_seed"] = [int(n) for n in mask_np.sum(-1)]
    return attrs


def _package(draws, est, lower, upper, attrs) -> BootstrapResult:
    draws = draws.assign_coords(draw=np.arange(draws.sizes["draw"])).rename("estimate")
    draws.attrs = dict(attrs)
    interval = xr.Dataset({"estimate": est, "lower": lower, "upper": upper}, attrs=dict(attrs))
    return BootstrapResult(draws=draws, interval=interval)


def hierarchical_bootstrap(
    numerator: xr.DataArray,
    denominator: xr.DataArray | None = None,
    *,
    rng: np.random.Generator | int,
    mask: xr.DataArray | None = None,
    method: str = "t",
    ci_level: float = 0.95,
    n_boot: int = 2000,
    weighting: str = "seed",
    seed_dim: str = "seed",
    sequence_dim: str = "sequence",
) -> BootstrapResult:
    """Interval for a ratio-of-sums metric of sequences nested in seeds, for every cell.

    Parameters
    ----------
    numerator : xarray.DataArray
        Dims (..., seed, sequence): per-sequence numerator (e.g. correct positions). Other dims
        are cells (run, layer, position, length, condition, ...), all resampled with the same
        indices. Ragged seeds: pad with NaN, or pass ``mask``.
    denominator : xarray.DataArray, optional
        Same dims: per-sequence denominator (labelled positions). ``None`` means plain means.
    rng : numpy.random.Generator or int
        Source of all randomness (never a global RNG).
    mask : xarray.DataArray of bool, optional
        Dims (seed, sequence): which sequences exist, shared by all cells. If omitted, the
        bootstrap methods derive it from the NaN padding (a small compute on dask inputs; pass
        it to stay lazy) and ``"t"`` uses each cell's finite values.
    method : {"t", "percentile", "bca"}
        ``"t"`` (default): seed-level Student-t interval, calibrated with few seeds.
        ``"percentile"``/``"bca"``: hierarchical bootstrap; undercovers with ~5 seeds.
    ci_level : float
        Interval level, e.g. 0.95.
    n_boot : int
        Number of draws.
    weighting : {"seed", "pooled"}
        Mean of per-seed ratios (default) or ratio of grand sums (bootstrap methods only).
    seed_dim, sequence_dim : str
        Names of the two nested dims.

    Returns
    -------
    BootstrapResult
        ``draws`` (..., draw) and ``interval`` (...) with ``estimate``, ``lower``, ``upper``.
        Lazy (dask) when the inputs are dask-backed with seed and sequence in one chunk.

    Examples
    --------
    >>> res = hierarchical_bootstrap(correct, labelled, rng=0)   # doctest: +SKIP
    >>> res.interval.sel(layer="L3")                             # doctest: +SKIP
    """
    dims = (seed_dim, sequence_dim)
    numerator, denominator, mask_np = _prepare(
        numerator, denominator, mask, method, ci_level, n_boot, weighting, dims
    )
    n_seeds = numerator.sizes[seed_dim]
    shape = (n_seeds, numerator.sizes[sequence_dim]) if mask_np is None else mask_np.shape
    resamples = draw_resamples(validate.check_rng(rng), mask_np, shape, n_boot, method)
    draws, est, lower, upper = xr.apply_ufunc(
        bootstrap_np,
        numerator,
        denominator,
        input_core_dims=[list(dims), list(dims)],
        output_core_dims=[["draw"], [], [], []],
        kwargs=dict(
            mask=mask_np, resamples=resamples, method=method, ci_level=ci_level, weighting=weighting
        ),
        dask="parallelized",
        output_dtypes=[float] * 4,
        dask_gufunc_kwargs={"output_sizes": {"draw": n_boot}},
    )
    attrs = _attrs(method, ci_level, n_boot, weighting, n_seeds, mask_np)
    return _package(draws, est, lower, upper, attrs)


def seed_estimates(
    numerator: xr.DataArray,
    denominator: xr.DataArray | None = None,
    *,
    mask: xr.DataArray | None = None,
    seed_dim: str = "seed",
    sequence_dim: str = "sequence",
) -> xr.DataArray:
    """Per-seed ratio of sums over sequences.

    Parameters
    ----------
    numerator, denominator, mask, seed_dim, sequence_dim
        As in :func:`hierarchical_bootstrap`; without ``mask`` each cell uses its own finite
        values (cells such as tasks may hold different sequences).

    Returns
    -------
    xarray.DataArray
        Dims (..., seed): one estimate per seed and cell (the input of the paired tests).
    """
    dims = (seed_dim, sequence_dim)
    numerator, denominator = _validate(numerator, denominator, mask, "t", 0.95, 100, "seed", dims)
    mask_np = None if mask is None else np.asarray(mask.transpose(*dims).values, dtype=bool)
    out = xr.apply_ufunc(
        seed_ratios_np,
        numerator,
        denominator,
        input_core_dims=[list(dims), list(dims)],
        output_core_dims=[[seed_dim]],
        kwargs=dict(mask=mask_np),
        dask="parallelized",
        output_dtypes=[float],
    )
    out.attrs = {"estimator": "ratio of sums over the sequences of each seed"}
    return out


def _scipy_cell(num, den, mask, method, ci_level, n_boot, rng):
    """scipy.stats.bootstrap for one cell with one seed: ordinary bootstrap over sequences."""
    res = scipy.stats.bootstrap(
        (num[0, mask[0]], den[0, mask[0]]),
        lambda n, d, axis: n.sum(axis) / d.sum(axis),
        paired=True,
        vectorized=True,
        n_resamples=n_boot,
        confidence_level=ci_level,
        method="BCa" if method == "bca" else "percentile",
        rng=rng,
    )
    ci = res.confidence_interval
    return res.bootstrap_distribution, ci.low, ci.high


def _t_cell(num, den, mask, ci_level, n_boot, rng):
    """scipy.stats.ttest_1samp interval for one cell on its per-seed ratios."""
    theta = seed_ratios_np(num, den, mask)
    res = scipy.stats.ttest_1samp(theta, 0.0)
    ci = res.confidence_interval(ci_level)
    se = theta.std(ddof=1) / np.sqrt(theta.size)
    draws = theta.mean() + se * rng.standard_t(theta.size - 1, n_boot)
    return draws, ci.low, ci.high


def bootstrap_reference(
    numerator: xr.DataArray,
    denominator: xr.DataArray | None = None,
    *,
    rng: np.random.Generator | int,
    mask: xr.DataArray | None = None,
    method: str = "t",
    ci_level: float = 0.95,
    n_boot: int = 2000,
    weighting: str = "seed",
    seed_dim: str = "seed",
    sequence_dim: str = "sequence",
) -> BootstrapResult:
    """The obvious loop over cells with scipy: reference path of :func:`hierarchical_bootstrap`.

    Same signature and return type. ``method="t"`` calls ``scipy.stats.ttest_1samp`` on each
    cell's per-seed estimates (its draws are independent per cell); ``"percentile"``/``"bca"``
    call ``scipy.stats.bootstrap`` per cell, which has no nested levels, so they need exactly
    one seed (where the hierarchical bootstrap is the ordinary bootstrap over sequences).
    Eager and slow by design: it exists to be compared with.
    """
    dims = (seed_dim, sequence_dim)
    numerator, denominator, mask_np = _prepare(
        numerator, denominator, mask, method, ci_level, n_boot, weighting, dims
    )
    n_seeds = numerator.sizes[seed_dim]
    if method != "t" and n_seeds != 1:
        raise ValueError(
            f"bootstrap_reference with method={method!r} wraps scipy.stats.bootstrap, which "
            f"has no nested levels: it needs exactly 1 seed, got {n_seeds}. Select "
            f"one seed (.isel({seed_dim}=[0])) or use hierarchical_bootstrap"
        )
    gen = validate.check_rng(rng)
    cells = [d for d in numerator.dims if d not in dims]
    num = numerator.transpose(*cells, *dims).values
    den = denominator.transpose(*cells, *dims).values
    shape = num.shape[:-2]
    flat_num, flat_den = num.reshape((-1,) + num.shape[-2:]), den.reshape((-1,) + den.shape[-2:])
    out = [
        _t_cell(n, d, mask_np, ci_level, n_boot, gen)
        if method == "t"
        else _scipy_cell(n, d, mask_np, method, ci_level, n_boot, gen)
        for n, d in zip(flat_num, flat_den, strict=True)
    ]
    coords = {d: numerator[d] for d in cells if d in numerator.coords}
    draws = xr.DataArray(
        np.stack([o[0] for o in out]).reshape(shape + (n_boot,)),
        dims=cells + ["draw"],
        coords=coords,
    )
    est = xr.DataArray(point_estimate_np(num, den, mask_np, weighting), dims=cells, coords=coords)
    lower = xr.DataArray(np.reshape([o[1] for o in out], shape), dims=cells, coords=coords)
    upper = xr.DataArray(np.reshape([o[2] for o in out], shape), dims=cells, coords=coords)
    attrs = _attrs(method, ci_level, n_boot, weighting, n_seeds, mask_np)
    attrs["method"] = "scipy " + attrs["method"]
    return _package(draws, est, lower, upper, attrs)
