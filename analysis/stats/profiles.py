"""Statistics of a probe-accuracy profile across layers, with intervals, and profile comparisons.

A profile is a metric per layer: dims (seed, layer) or (seed, sequence, layer), with any other
dims (task, arch, length, ...) as cells. Paper A's question is *where* the state becomes
readable, so the statistics are about the profile's shape:

* ``best_layer``: the layer of highest accuracy of the estimated profile;
* ``first_crossing``: the first layer whose accuracy reaches ``threshold``;
* ``auc``: the normalised area under the profile, ``(trapz(profile) / (n_layers - 1) - chance)
  / (1 - chance)``: 1 for a perfect profile, 0 for a profile at chance throughout; earlier
  rises give larger areas.

``auc`` is linear in the profile, so its interval is the seed-level t interval of per-seed
AUCs (``method="t"``, calibrated with 5 seeds; see :mod:`analysis.stats.bootstrap`). Layers are
discrete and argmax/first-crossing are not smooth, so their intervals are percentiles of the
hierarchical bootstrap (seeds, then sequences) reported as layer positions; with ~5 seeds these
are optimistic (the bootstrap undercovers), and ``best_layer_share`` shows the whole
distribution. Layer statistics are positions ``0..n_layers-1`` along ``layer``; the labels are in
the ``layer_labels`` attr; NaN means "never reaches the threshold".

:func:`profile_difference_test` asks whether two tasks' profiles differ in shape, per cell
(e.g. per architecture): the statistic is the RMS over layers between the two tasks' mean
profiles, each min-max normalised (0 at its worst layer, 1 at its best) so that level
differences do not count, only where the rise happens. Its p comes from a permutation test
that reassigns whole seeds (one trained model's profile) between the tasks: exact over all
``C(n_a + n_b, n_a)`` splits when feasible (252 for 5 + 5 seeds, smallest p = 2/252). Models of
different tasks are separate runs, so exchangeability of seeds between tasks under the null is
the natural assumption (**ours**; a MixedLM ``acc ~ task * layer`` would instead assume normal
errors and test level and shape together). The interval is a percentile bootstrap of seeds
within each task; a distance is >= 0 and biased upwards, so read the interval as the
statistic's spread, and the p as the test.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import partial
from math import comb
from typing import Any

import numpy as np
import xarray as xr

from analysis.stats import validate
from analysis.stats.bootstrap import hierarchical_bootstrap, seed_estimates
from analysis.stats.resample import t_interval_np

# --------------------------------------------------------------------------- numpy kernels


def best_layer_np(profile: np.ndarray, axis: int = -1) -> np.ndarray:
    """Position of the highest value along ``axis`` (first one on ties); float, NaN if all NaN."""
    profile = np.moveaxis(np.asarray(profile, dtype=float), axis, -1)
    empty = np.all(np.isnan(profile), axis=-1)
    best = np.argmax(np.where(np.isnan(profile), -np.inf, profile), axis=-1).astype(float)
    return np.where(empty, np.nan, best)


def first_crossing_np(profile: np.ndarray, threshold: float, axis: int = -1) -> np.ndarray:
    """Position of the first value >= ``threshold`` along ``axis``; NaN if none."""
    profile = np.moveaxis(np.asarray(profile, dtype=float), axis, -1)
    above = profile >= threshold
    return np.where(above.any(-1), np.argmax(above, axis=-1).astype(float), np.nan)


def auc_np(profile: np.ndarray, chance: float = 0.0, axis: int = -1) -> np.ndarray:
    """Normalised trapezoid area along ``axis``: 1 = perfect everywhere, 0 = chance."""
    profile = np.moveaxis(np.asarray(profile, dtype=float), axis, -1)
    n = profile.shape[-1]
    mean_height = np.trapezoid(profile, axis=-1) / (n - 1) if n > 1 else profile[..., 0]
    return (mean_height - chance) / (1.0 - chance)


def discrete_interval_np(positions: np.ndarray, ci_level: float, axis: int = -1):
    """Percentile interval of layer positions that stays on observed positions.

    ``NaN`` (never crossed) counts as beyond the last layer; an endpoint there is NaN.
    Returns (lower, upper).
    """
    positions = np.moveaxis(np.asarray(positions, dtype=float), axis, -1)
    beyond = np.where(np.isnan(positions), np.inf, positions)
    alpha = (1 - ci_level) / 2
    lower, upper = np.quantile(beyond, [alpha, 1 - alpha], axis=-1, method="inverted_cdf")
    return np.where(np.isinf(lower), np.nan, lower), np.where(np.isinf(upper), np.nan, upper)


def normalise_np(profile: np.ndarray) -> np.ndarray:
    """Min-max normalise along the last axis; a flat profile becomes all zeros."""
    low = profile.min(-1, keepdims=True)
    span = profile.max(-1, keepdims=True) - low
    return np.where(span > 1e-12, (profile - low) / np.where(span > 1e-12, span, 1.0), 0.0)


def shape_distance_np(mean_a: np.ndarray, mean_b: np.ndarray) -> np.ndarray:
    """RMS over the last axis between min-max normalised profiles. Shape (...)."""
    return np.sqrt(np.mean((normalise_np(mean_a) - normalise_np(mean_b)) ** 2, axis=-1))


#: The most seed splits a profile test enumerates: at most this many, the permutation distribution
#: is exact (11 + 11 seeds: 705,432 splits, about a second); beyond, ``n_permutations`` random
#: splits drawn from the test's seeded generator, and the result says so (``exact`` False).
MAX_EXACT = 1_000_000
#: Splits scored at once when enumerating (bounds the memory of a large exact test to tens of MB).
_CHUNK = 65_536


def _split_chunks(n_a: int, n: int, rng, max_exact: int, n_permutations: int):
    """Group-A membership of every split (chunks of (splits, n) booleans), or of random ones;
    and whether exact."""
    total = comb(n, n_a)
    if total <= max_exact:
        combos = itertools.combinations(range(n), n_a)

        def chunks():
            done = 0
            while done < total:
                k = min(_CHUNK, total - done)
                idx = np.fromiter(itertools.chain.from_iterable(itertools.islice(combos, k)), dtype=np.int64,
                                  count=k * n_a).reshape(k, n_a)
                member = np.zeros((k, n), dtype=bool)
                member[np.repeat(np.arange(k), n_a), idx.ravel()] = True
                done += k
                yield member

        return chunks(), True
    order = np.argsort(rng.random((n_permutations, n)), axis=1)
    return iter([order < n_a]), False


def permutation_shape_test_np(a, b, rng, max_exact=MAX_EXACT, n_permutations=9999):
    """Permutation p of the shape distance between two groups of profiles: over every split of
    the seeds when there are at most ``max_exact`` (exact), else over ``n_permutations`` random
    splits from ``rng`` (``(1 + hits) / (1 + n)``).

    Parameters
    ----------
    a, b : ndarray, shapes (n_a, layer) and (n_b, layer): one profile per seed.

    Returns
    -------
    statistic : float
    p : float
    exact : bool
    n_splits : int
    """
    pooled = np.concatenate([a, b])  # (n, layer)
    n_a, n = a.shape[0], pooled.shape[0]
    stat = float(shape_distance_np(a.mean(0), b.mean(0)))
    chunks, exact = _split_chunks(n_a, n, rng, max_exact, n_permutations)
    hits = splits = 0
    for member in chunks:
        mean_a = member @ pooled / n_a  # (split, layer)
        mean_b = (~member) @ pooled / (n - n_a)
        null = shape_distance_np(mean_a, mean_b)
        hits += int(np.sum(null >= stat - 1e-12 * max(1.0, stat)))
        splits += len(null)
    p = hits / splits if exact else (1 + hits) / (1 + splits)
    return stat, p, exact, splits


def shape_test_power(claimed: np.ndarray, other: np.ndarray, matches: np.ndarray, sizes: tuple[int, int, int],
                     level: float, *, margin: float = 0.0, rng: np.random.Generator | int = 0, n_resamples: int = 200,
                     max_exact: int = 20000, n_permutations: int = 4999) -> float:
    """The chance that a profile claim is supported with ``sizes`` seeds of its three tasks (the
    claimed task, the one its profile must differ from, the one it must lie closer to), if seeds
    are drawn like the observed ones: each resample draws that many seeds with replacement from
    each task's observed per-seed profiles (seed, layer), and counts a success when the
    permutation shape test of ``claimed`` against ``other`` (:func:`permutation_shape_test_np`)
    gives p below ``level`` and the claimed task's mean profile lies closer to ``matches``' by more
    than ``margin`` (its point estimate: the claim's own test asks it of an interval's lower end, so
    this is the power's upper end).
    The observed seeds are taken as the population (face value, as the seed planner takes an
    observed effect); random splits beyond ``max_exact`` resolve p to ``1 / (n_permutations + 1)``."""
    gen = np.random.default_rng(rng)
    groups = [np.asarray(g, dtype=float) for g in (claimed, other, matches)]
    groups = [g[np.isfinite(g).all(axis=1)] for g in groups]
    if any(len(g) < 2 for g in groups) or min(sizes) < 2:
        return math.nan
    hits = 0
    for _ in range(n_resamples):
        a, b, m = (g[gen.integers(0, len(g), n)] for g, n in zip(groups, sizes, strict=True))
        _, p, _, _ = permutation_shape_test_np(a, b, gen, max_exact=max_exact, n_permutations=n_permutations)
        closer = float(shape_distance_np(a.mean(0), b.mean(0))) - float(shape_distance_np(a.mean(0), m.mean(0))) > margin
        hits += bool(p < level and closer)
    return hits / n_resamples


def attainable_min_p(n_a: int, n_b: int) -> float:
    """The smallest p the exact permutation shape test can return for groups of ``n_a`` and
    ``n_b`` seeds: every split of the seeds is one null value, the observed split among them;
    with equal groups the swapped split gives the same distance too."""
    splits = comb(n_a + n_b, n_a)
    return (2 if n_a == n_b else 1) / splits


def seeds_for_profile_test(alpha: float) -> int:
    """The fewest seeds per task (equal groups) at which the exact profile test can reach
    ``p < alpha``: 4 at 0.05 (3 seeds per task can give no p below 0.1)."""
    s = 2
    while attainable_min_p(s, s) >= alpha:
        s += 1
    return s


def bootstrap_shape_distance_np(a, b, rng, n_boot):
    """Draws of the shape distance, resampling seeds within each group. Shape (n_boot,)."""
    ia = rng.integers(0, a.shape[0], (n_boot, a.shape[0]))
    ib = rng.integers(0, b.shape[0], (n_boot, b.shape[0]))
    return shape_distance_np(a[ia].mean(1), b[ib].mean(1))


def bootstrap_closer_np(claimed, other, matches, rng, n_boot):
    """Draws of how much closer the claimed task's mean profile lies to ``matches`` than to
    ``other``: ``d(claimed, other) - d(claimed, matches)`` (:func:`shape_distance_np`), seeds
    resampled within each task, the claimed task's draw shared by both distances. Shape (n_boot,)."""
    ic, io, im = (rng.integers(0, g.shape[0], (n_boot, g.shape[0])) for g in (claimed, other, matches))
    mean_c = claimed[ic].mean(1)
    return shape_distance_np(mean_c, other[io].mean(1)) - shape_distance_np(mean_c, matches[im].mean(1))


def closer_by_margin_np(claimed, other, matches, margin: float, rng, n_boot: int = 2000
                        ) -> tuple[float, float, float, float]:
    """Whether the claimed task's mean profile lies closer to ``matches`` than to ``other`` by
    more than ``margin`` (shape distances, :func:`shape_distance_np`): ``(estimate, lower, upper,
    p)``, the estimate ``d(claimed, other) - d(claimed, matches)`` with the 95% interval and the
    one-sided p of "no more than the margin" from a seed bootstrap of the three tasks
    (:func:`bootstrap_closer_np`).

    The plain percentile bootstrap is optimistic at these seed counts: simulated at the margin's
    edge (4 to 8 seeds a task, seed SD 0.02 to 0.1 of the rise, 27 cells of 400 experiments) it
    rejected up to 0.065 at level 0.025 and 0.087 at 0.05. So the draws are spread by
    ``sqrt(n / (n - 1))`` about the estimate (``n`` the fewest seeds of a task: the bootstrap's
    variance is short by that factor) and the p is twice their share at or below the margin; so
    judged it rejected at most 0.043 at level 0.025 and 0.052 at 0.05 in the same cells
    (docs/measured.md, "Profile margins"; ``python -m bench.profile_margin``). The interval is
    that of the spread draws."""
    groups = [np.asarray(g, dtype=float) for g in (claimed, other, matches)]
    n = min(g.shape[0] for g in groups)
    mean = groups[0].mean(0)
    est = float(shape_distance_np(mean, groups[1].mean(0)) - shape_distance_np(mean, groups[2].mean(0)))
    draws = bootstrap_closer_np(groups[0], groups[1], groups[2], rng, n_boot)
    spread = est + (draws - draws.mean()) * math.sqrt(n / (n - 1))
    lower, upper = (float(v) for v in np.quantile(spread, [0.025, 0.975]))
    return est, lower, upper, min(1.0, 2.0 * float(np.mean(spread <= margin)))


# --------------------------------------------------------------------------- xarray layer


def _with_sequence(da, sequence_dim):
    return da if sequence_dim in da.dims else da.expand_dims({sequence_dim: 1}, axis=-1)


def _over_layers(func: Callable[[np.ndarray], np.ndarray], da: xr.DataArray, layer_dim: str) -> xr.DataArray:
    """``func`` applied along ``layer_dim`` (reduced away); its other arguments bound by the
    caller (``functools.partial``)."""
    return xr.apply_ufunc(
        func,
        da,
        input_core_dims=[[layer_dim]],
        dask="parallelized",
        output_dtypes=[float],
    )


def _layer_interval(draws: xr.DataArray, name: str, ci_level: float) -> dict[str, xr.DataArray]:
    """``<name>_lower``/``_upper``: percentile interval of bootstrap layer positions."""
    lo, hi = xr.apply_ufunc(
        discrete_interval_np,
        draws,
        input_core_dims=[["draw"]],
        output_core_dims=[[], []],
        kwargs=dict(ci_level=ci_level),
        dask="parallelized",
        output_dtypes=[float, float],
    )
    return {f"{name}_lower": lo, f"{name}_upper": hi}


def _layer_statistics(
    estimate: xr.DataArray,
    draws: xr.DataArray,
    accuracy: xr.DataArray,
    *,
    threshold: float,
    ci_level: float,
    layer_dim: str,
) -> dict[str, xr.DataArray]:
    """Best layer and first crossing of the estimated profile, with bootstrap intervals, and
    the share of draws in which each layer is best."""
    best_draws = _over_layers(best_layer_np, draws, layer_dim)
    cross_draws = _over_layers(partial(first_crossing_np, threshold=threshold), draws, layer_dim)
    positions = np.arange(accuracy.sizes[layer_dim])
    share = xr.concat([(best_draws == k).mean("draw") for k in positions], dim=layer_dim)
    if layer_dim in accuracy.coords:
        share = share.assign_coords({layer_dim: accuracy[layer_dim].values})
    return {
        "best_layer": _over_layers(best_layer_np, estimate, layer_dim),
        **_layer_interval(best_draws, "best_layer", ci_level),
        "best_layer_share": share.transpose(*share.dims[1:], layer_dim),
        "first_crossing": _over_layers(partial(first_crossing_np, threshold=threshold), estimate, layer_dim),
        **_layer_interval(cross_draws, "first_crossing", ci_level),
    }


def _auc_statistics(
    per_seed: xr.DataArray, *, chance: float, ci_level: float, layer_dim: str, seed_dim: str
) -> dict[str, xr.DataArray]:
    """``auc`` and its seed-level t interval, from per-seed profiles."""
    auc, lower, upper = xr.apply_ufunc(
        t_interval_np,
        _over_layers(partial(auc_np, chance=chance), per_seed, layer_dim),
        input_core_dims=[[seed_dim]],
        output_core_dims=[[], [], []],
        kwargs=dict(ci_level=ci_level),
        dask="parallelized",
        output_dtypes=[float] * 3,
    )
    return {"auc": auc, "auc_lower": lower, "auc_upper": upper}


def profile_statistics(
    accuracy: xr.DataArray,
    denominator: xr.DataArray | None = None,
    *,
    rng: np.random.Generator | int,
    threshold: float = 0.9,
    chance: float = 0.0,
    ci_level: float = 0.95,
    n_boot: int = 2000,
    mask: xr.DataArray | None = None,
    layer_dim: str = "layer",
    seed_dim: str = "seed",
    sequence_dim: str = "sequence",
) -> xr.Dataset:
    """Best layer, first threshold crossing and normalised AUC of a layer profile, with CIs.

    Parameters
    ----------
    accuracy : xarray.DataArray
        Dims (seed, [sequence,] layer, ...): per-seed or per-sequence accuracy (or, with
        ``denominator``, per-sequence correct counts). Other dims are cells.
    denominator : xarray.DataArray, optional
        Labelled positions per sequence (ratio-of-sums), same dims as ``accuracy``.
    rng : numpy.random.Generator or int
    threshold : float
        Accuracy that counts as "readable" for ``first_crossing``.
    chance : float
        Accuracy at chance (e.g. 0.5 for Parity) for the AUC normalisation; must be < 1.
    ci_level, n_boot, mask, seed_dim, sequence_dim
        As in :func:`analysis.stats.hierarchical_bootstrap`.
    layer_dim : str

    Returns
    -------
    xarray.Dataset
        ``profile``, ``profile_lower``, ``profile_upper`` (..., layer) (seed-level t);
        ``best_layer_share`` (..., layer): share of bootstrap draws in which each layer is best;
        (...): ``best_layer``, ``best_layer_lower``, ``best_layer_upper``, ``first_crossing``,
        ``first_crossing_lower``, ``first_crossing_upper`` (layer positions; NaN = never),
        ``auc``, ``auc_lower``, ``auc_upper``. Attrs: methods, ``ci_level``, ``threshold``,
        ``chance``, ``layer_labels``, ``n_seeds``.
    """
    validate.check_dataarray(accuracy, "accuracy")
    validate.check_dims(accuracy, [seed_dim, layer_dim], "accuracy")
    validate.check_probability(ci_level, "ci_level")
    if not chance < 1:
        raise ValueError(f"chance must be < 1 (the accuracy of guessing), got {chance!r}")
    gen = validate.check_rng(rng)
    num = _with_sequence(accuracy, sequence_dim)
    den = None if denominator is None else _with_sequence(denominator, sequence_dim)
    kw: dict[str, Any] = dict(
        mask=mask, ci_level=ci_level, n_boot=n_boot, seed_dim=seed_dim, sequence_dim=sequence_dim
    )
    smooth = hierarchical_bootstrap(num, den, rng=gen, method="t", **kw)
    discrete = hierarchical_bootstrap(num, den, rng=gen, method="percentile", **kw)
    per_seed = seed_estimates(num, den, mask=mask, seed_dim=seed_dim, sequence_dim=sequence_dim)
    data = {
        "profile": smooth.interval["estimate"],
        "profile_lower": smooth.interval["lower"],
        "profile_upper": smooth.interval["upper"],
        **_layer_statistics(
            smooth.interval["estimate"],
            discrete.draws,
            accuracy,
            threshold=threshold,
            ci_level=ci_level,
            layer_dim=layer_dim,
        ),
        **_auc_statistics(
            per_seed, chance=chance, ci_level=ci_level, layer_dim=layer_dim, seed_dim=seed_dim
        ),
    }
    labels = (
        accuracy[layer_dim].values.tolist()
        if layer_dim in accuracy.coords
        else list(range(accuracy.sizes[layer_dim]))
    )
    return xr.Dataset(
        data,
        attrs={
            "method_profile": "seed-level t",
            "method_auc": "seed-level t on per-seed AUCs",
            "method_layers": "hierarchical percentile bootstrap (seeds, then sequences); "
            "optimistic with few seeds",
            "ci_level": ci_level,
            "threshold": threshold,
            "chance": chance,
            "layer_labels": [str(x) for x in labels],
            "n_seeds": int(accuracy.sizes[seed_dim]),
            "n_boot": n_boot,
        },
    )


def _group_profiles(cell: xr.DataArray, task_dim, task, seed_dim, layer_dim) -> np.ndarray:
    """(seed, layer) profiles of one task, dropping seeds that are absent (all NaN)."""
    values = cell.sel({task_dim: task}).transpose(seed_dim, layer_dim).values
    present = ~np.all(np.isnan(values), axis=1)
    values = values[present]
    if np.isnan(values).any():
        raise ValueError(
            f"profiles of {task_dim}={task!r} have missing layers for some seeds; "
            f"each seed needs a value at every {layer_dim}"
        )
    return values


def profile_difference_test(
    accuracy: xr.DataArray,
    *,
    rng: np.random.Generator | int,
    tasks: tuple | None = None,
    ci_level: float = 0.95,
    n_boot: int = 2000,
    max_exact: int = MAX_EXACT,
    n_permutations: int = 9999,
    task_dim: str = "task",
    layer_dim: str = "layer",
    seed_dim: str = "seed",
    sequence_dim: str = "sequence",
) -> xr.Dataset:
    """Do two tasks' layer profiles differ in shape? One test per remaining cell (e.g. arch).

    Parameters
    ----------
    accuracy : xarray.DataArray
        Dims (task, seed, layer[, sequence], ...): probe accuracy; sequences are averaged to
        one profile per seed (one trained model). Absent seeds are all-NaN.
    rng : numpy.random.Generator or int
    tasks : (a, b), optional
        The two ``task`` values to compare; default the two values of ``task`` (error if not 2).
    ci_level, n_boot : interval of the statistic (percentile bootstrap of seeds within tasks).
    max_exact : int
        Enumerate all splits of seeds when there are at most this many; else draw
        ``n_permutations`` random ones.
    task_dim, layer_dim, seed_dim, sequence_dim : str

    Returns
    -------
    xarray.Dataset
        Dims (...): ``statistic`` (RMS distance of min-max normalised mean profiles),
        ``lower``, ``upper``, ``p``, ``min_p`` (the smallest attainable p), ``n_splits``;
        attrs ``method``, ``exact``, ``tasks``, ``ci_level``, ``note``.
    """
    validate.check_dataarray(accuracy, "accuracy")
    validate.check_dims(accuracy, [task_dim, seed_dim, layer_dim], "accuracy")
    validate.check_probability(ci_level, "ci_level")
    validate.check_n_boot(n_boot)
    gen = validate.check_rng(rng)
    if tasks is None:
        tasks = tuple(accuracy[task_dim].values.tolist())
        if len(tasks) != 2:
            raise ValueError(
                f"dimension {task_dim!r} has {len(tasks)} values {list(tasks)}; "
                f"pass tasks=(a, b) to choose the two to compare"
            )
    validate.check_levels(accuracy, task_dim, tasks, "task")
    if sequence_dim in accuracy.dims:
        accuracy = accuracy.mean(sequence_dim)
    accuracy = accuracy.compute()  # a handful of (seed, layer) profiles per cell
    loop = [d for d in accuracy.dims if d not in (task_dim, seed_dim, layer_dim)]
    stacked = accuracy.stack(_cell=loop) if loop else accuracy.expand_dims(_cell=[0])
    rows = []
    for k in range(stacked.sizes["_cell"]):
        cell = stacked.isel(_cell=k)
        a, b = (_group_profiles(cell, task_dim, t, seed_dim, layer_dim) for t in tasks)
        for t, g in zip(tasks, (a, b), strict=True):
            validate.check_min_seeds(g.shape[0], 2, f"the profile test ({task_dim}={t!r})")
        stat, p, exact, n_splits = permutation_shape_test_np(a, b, gen, max_exact, n_permutations)
        draws = bootstrap_shape_distance_np(a, b, gen, n_boot)
        lo, hi = np.quantile(draws, [(1 - ci_level) / 2, (1 + ci_level) / 2])
        min_p = attainable_min_p(a.shape[0], b.shape[0]) if exact else 1 / (1 + n_splits)
        rows.append((stat, lo, hi, p, min_p, n_splits, exact))
    names = ("statistic", "lower", "upper", "p", "min_p", "n_splits")
    out = xr.Dataset(
        {n: ("_cell", [r[i] for r in rows]) for i, n in enumerate(names)},
        coords={"_cell": stacked["_cell"]},
    )
    out = out.unstack("_cell") if loop else out.isel(_cell=0, drop=True)
    out.attrs = {
        "method": "permutation of whole seeds between tasks; statistic = RMS over layers of "
        "the difference of min-max normalised mean profiles",
        "exact": bool(all(r[-1] for r in rows)),
        "tasks": [str(t) for t in tasks],
        "ci_level": ci_level,
        "n_boot": n_boot,
        "note": "the interval is a percentile bootstrap of seeds within each task; the "
        "distance is >= 0 and biased upwards, so the test is the p, not the interval",
    }
    return out
