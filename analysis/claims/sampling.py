"""The sequences' sampling floor of each claim metric, and the one-sided test of a bound claim
that rests on it (docs/decisions.md, "Identical seeds").

Seeds are the unit of inference, but seeds can agree more closely than the sequences each was
measured on allow. Wherever a metric is counted over sequences its variance is floored at the
sequences' sampling variance: a proportion over m sequences has at most ``p~ (1 - p~) / m``
(:func:`analysis.stats.decision.proportion_sampling_var`); a bound claim on a proportion uses the
score test at its threshold and, as interval, the values that test does not reject."""

from __future__ import annotations

import numpy as np
import scipy.stats
import xarray as xr

from analysis.behaviour import by_factors
from analysis.claims.metrics import ClaimInputs, per_run_metric, seed_metric, sequence_counts
from analysis.claims.rows import ClaimRow
from analysis.claims.spec import ALPHA, Claim, NotEvaluable
from analysis.stats.decision import (
    floored_se,
    paired_sampling_var,
    proportion_sampling_var,
    score_interval,
    score_se,
)
from analysis.stats.power import t_critical
from analysis.stats.seedshare import share_test
from store import Store


def _run_units(inputs: ClaimInputs, length: int) -> xr.DataArray | None:
    """Each run's number of captured sequences at ``length``, dims (task, arch, variant, seed)
    (NaN for a run not captured there): the sampling unit of its probe accuracies."""
    store = inputs.store

    def count() -> xr.DataArray | None:
        runs = [r for r in store.run_ids() if length in store.lengths(r)]
        counts = [float(store.open_length(r, length).sizes["sequence"]) for r in runs]
        da = xr.DataArray(np.array(counts, dtype=float), dims="run", coords={"run": np.array(runs, dtype=str)})
        return by_factors(da, store) if runs else None

    return inputs.once(("units", length), count)


def ablation_counts(inputs: ClaimInputs, claim: Claim) -> xr.Dataset:
    """The ablation result's clean and ablated accuracies, refitted probe accuracy and sequence
    count per run at the claim's length, by factors (dims of :func:`seed_metric`)."""
    L = claim.length
    names = ("accuracy_clean", "accuracy", "probe_accuracy", "units")

    def extract(ds: xr.Dataset, name: str) -> xr.DataArray:
        like = next(ds[v] for v in ("accuracy_drop", "accuracy", "probe_accuracy") if v in ds)
        missing = xr.full_like(like.sel(length=L, drop=True), np.nan, dtype=float)
        parts = []
        for v in names:
            if v == "units":
                x = (ds["n_labelled"].sel(length=L, drop=True) > 0).sum("sequence") if "n_labelled" in ds \
                    and "sequence" in ds["n_labelled"].dims else missing
            else:
                x = ds[v].sel(length=L, drop=True) if v in ds else missing
            parts.append(x.astype(float).reset_coords(drop=True))
        parts = list(xr.broadcast(*parts))
        return xr.concat(parts, dim=xr.DataArray(list(names), dims="part"), coords="minimal", join="outer")

    return inputs.once(
        ("ablation-counts", claim.task, claim.length, claim.result_key),
        lambda: per_run_metric(inputs.store, claim, "ablation",
                               lambda ds: "length" in ds.coords and L in ds.length.values, extract,
                               f"run `layerstate ablate STORE --tasks {claim.task}` with length {L}")
        .to_dataset("part"))


def metric_sampling_var(inputs: ClaimInputs, claim: Claim) -> xr.DataArray | None:
    """Each trained model's sampling variance of the claim's metric from the sequences it was
    measured on (dims of :func:`seed_metric`), or None where the metric is not counted over
    sequences (restoration, patching recovery). A proportion over m sequences: at most
    p(1 - p)/m with p shrunk as Agresti-Coull does (:func:`analysis.stats.decision.proportion_sampling_var`);
    a difference of two (the ablation drop): the sum of theirs, as if independent (the same
    sequences make them positively correlated, so this is the larger)."""
    if claim.metric == "probe_accuracy":
        units = _run_units(inputs, int(claim.length or 0))
        if units is None:
            return None
        value = seed_metric(inputs, claim)
        units = units.reindex_like(value.isel(layer=0, drop=True)) if "layer" in value.dims else units
        return _proportion_var(value, units)
    if claim.metric in ("ablation_drop", "refit_accuracy"):
        ds = ablation_counts(inputs, claim)
        if claim.metric == "ablation_drop":
            ablated = _proportion_var(ds["accuracy"], ds["units"])
            if claim.compares and claim.compare == "setting":  # the same clean accuracy on both sides cancels
                return ablated
            return _proportion_var(ds["accuracy_clean"], ds["units"]) + ablated
        return _proportion_var(ds["probe_accuracy"], ds["units"])
    return None


def _proportion_var(p: xr.DataArray, m: xr.DataArray) -> xr.DataArray:
    """:func:`analysis.stats.decision.proportion_sampling_var` on DataArrays (broadcast by dim)."""
    return xr.apply_ufunc(proportion_sampling_var, p, m)


def accuracy_floor(C: np.ndarray, L: np.ndarray, present: np.ndarray) -> tuple[float, int]:
    """(se, n) of the sequences' sampling floor of an accuracy contrast: each seed's paired
    sampling variance of its difference (:func:`analysis.stats.decision.paired_sampling_var`,
    McNemar's over its sequences), averaged over the ``n`` seeds present in both conditions,
    over ``n``. NaN when fewer than 2 seeds have both."""
    both = present.all(0)
    floor = paired_sampling_var(C, L)[both]
    n = int(both.sum())
    if n < 2 or not np.isfinite(floor).all():
        return np.nan, n
    return float(np.sqrt(floor.mean() / n)), n


def floored_fit(fit: dict, floor_se: float, n: int) -> tuple[dict, bool]:
    """A contrast model's fit with its SE never below the sequences' sampling floor
    ``floor_se`` (one continuous rule: the larger of the two, :mod:`analysis.stats.decision`);
    a fit the floor replaced gets ``n - 1`` degrees of freedom where it had none. Returns the
    fit and whether the floor was used."""
    se = float(fit.get("se", np.nan))
    if not (np.isfinite(floor_se) and floor_se > 0) or (np.isfinite(se) and se >= floor_se):
        return fit, False
    out = dict(fit)
    out["se"] = floor_se
    if not (np.isfinite(float(out.get("df", np.nan))) and float(out["df"]) >= 1):
        out["df"] = float(n - 1)
    return out, True


def sequences_per_seed(store: Store, claim: Claim, task: str, arch: str | None,
                        seeds: np.ndarray) -> np.ndarray:
    """Each seed's number of captured sequences at the claim's length (the sampling unit);
    0 for a seed with no run captured at that length."""
    runs = store.runs()
    keep = (runs["task"] == task) & (runs["variant"] == claim.variant)
    if arch is not None:
        keep &= runs["arch"] == arch
    runs = runs[keep & runs["lengths"].map(lambda ls: claim.length in ls)]
    out = np.zeros(len(seeds))
    for i, seed in enumerate(seeds):
        match = runs.index[runs["seed"] == int(seed)]
        if len(match):
            out[i] = store.open_length(str(match[0]), int(claim.length or 0)).sizes["sequence"]
    return out


def bound_row(claim: Claim, x: np.ndarray, direction: str, *, units: np.ndarray | None = None,
               floor: np.ndarray | None = None, what: str) -> dict:
    """The one-sided t of per-seed values ``x`` against the claim's threshold, as a claims row.

    The variance is never below what the sequences allow (:mod:`analysis.stats.decision`):

    * a proportion with each seed's sequence count ``units``: the score test, whose SE at the
      threshold ``v`` is the larger of the seeds' and the sampling SE ``sqrt(v (1 - v) h)``
      (``h = mean(1/m) / n``); its interval is the set of values that test does not reject
      (Wilson's when sampling dominates), so it stays in [0, 1] and agrees with the test;
    * another metric counted over sequences (``floor``, each seed's sampling variance): the
      larger of the seeds' variance and the mean floor, and the t interval;
    * else the seeds' spread alone, and seeds that agree exactly are not evaluable.
    """
    threshold = float(claim.threshold)  # type: ignore[arg-type]  # both callers checked it
    n, est = x.size, float(x.mean())
    sd = float(x.std(ddof=1))
    df = float(n - 1)
    q = float(t_critical(ALPHA, df, "two-sided"))
    side = ">" if direction == "greater" else "<"
    variance, max_t, sequences = "", np.nan, np.nan
    if units is not None and (units > 0).all() and 0 < threshold < 1:
        h = float(np.mean(1.0 / units)) / n
        se = float(score_se(threshold, sd ** 2, h, n))
        lower, upper = score_interval(est, sd ** 2, h, n, q)
        sequences = 1.0 / float(np.mean(1.0 / units))
        max_t = (1 - threshold if direction == "greater" else threshold) / float(np.sqrt(threshold * (1 - threshold) * h))
        if threshold * (1 - threshold) * h > sd ** 2 / n:
            variance = (f"the seeds' SD {sd:.4f} is below the sampling SD {np.sqrt(threshold * (1 - threshold) / sequences):.4f} "
                        f"of a proportion of {threshold:g} over {sequences:.0f} sequences per seed: the test uses the "
                        "sampling SD at the threshold, the interval the values such a test does not reject")
    else:
        se, sd, floored = floored_se(x, floor)
        lower, upper = est - q * se, est + q * se
        if floored:
            variance = (f"the seeds' SD {sd:.4f} is below what the sequences' sampling error allows: the interval "
                        f"and test use the sampling SD {se * np.sqrt(n):.4f}")
    if not se > 0:
        why = (f"no captured sequences were found at L = {claim.length} to bound their sampling error; "
               "capture the runs at that length") if units is not None else (
               "the metric is not counted over sequences, so nothing bounds their sampling error; add seeds")
        raise NotEvaluable(f"claim {claim.id!r}: its {n} seeds' {what} values are identical ({est:.4g}), "
                           f"so their spread gives no interval and {why}")
    stat = (est - threshold) / se
    p = float(scipy.stats.t.sf(stat, df) if direction == "greater" else scipy.stats.t.cdf(stat, df))
    return {
        "estimate": est, "lower": float(lower), "upper": float(upper), "se": se, "df": df,
        "p": p, "n_seeds": n, "margin": np.nan, "power": np.nan, "power_at": np.nan, "mde": np.nan,
        "treatment_mean": est, "reference_mean": threshold, "model": "paired_t",
        "seed_sd": sd, "sequences": sequences, "max_t": max_t, "variance": variance,
        "test": f"one-sided t over seeds: mean {what} at L = {claim.length} {side} {threshold:g}",
    }


def share_row(claim: Claim, x: np.ndarray, direction: str, *, what: str) -> ClaimRow:
    """The exact sign test that more than ``claim.q`` of the seeds lie beyond the threshold
    (docs/ceiling.md), as a claims row: the ``estimate`` is the seeds' q-quantile (the median
    for q = 0.5) with its distribution-free order-statistic interval (an end the seeds cannot
    bound is the metric's range; none when they bound neither: fewer than 6 seeds for the
    median), ``beyond``/``short`` the seeds strictly on either side,
    ``share`` their share with its exact interval, ``p`` the exact one-sided p and
    ``p_contra_exact`` the opposite side's at the two-sided level. No SE: the test does not
    assume the values are normal, so it holds at the ceiling and with a failing seed."""
    threshold = float(claim.threshold)  # type: ignore[arg-type]  # both callers checked it
    t = share_test(x, threshold, direction, q=claim.q, level=ALPHA)
    lo_range, hi_range = claim.metric_range()
    lo, hi = t.quantile_interval
    if not (np.isfinite(lo) or np.isfinite(hi)):  # too few seeds for a distribution-free interval
        lo = hi = np.nan
    lo = lo if np.isfinite(lo) else (lo_range if np.isfinite(lo_range) and np.isfinite(hi) else np.nan)
    hi = hi if np.isfinite(hi) else (hi_range if np.isfinite(hi_range) and np.isfinite(lo) else np.nan)
    side = ">" if direction == "greater" else "<"
    which = "median seed" if claim.q == 0.5 else f"share of seeds above {claim.q:g}"
    return ClaimRow({
        "estimate": float(t.quantile), "lower": float(lo), "upper": float(hi), "se": np.nan, "df": np.nan,
        "p": float(t.p), "p_contra_exact": float(t.p_contra), "n_seeds": t.n, "margin": np.nan,
        "power": np.nan, "power_at": np.nan, "mde": np.nan, "beyond": t.beyond, "short": t.short,
        "share": float(t.estimate), "share_lower": float(t.interval[0]), "share_upper": float(t.interval[1]),
        "treatment_mean": float(np.mean(x)), "reference_mean": threshold, "model": "sign_test",
        "seed_sd": float(x.std(ddof=1)) if x.size > 1 else np.nan,
        "test": f"exact sign test over seeds ({which}): seeds' {what} at L = {claim.length} {side} {threshold:g}",
    }, seed_values=x)


def labelled_sequences(inputs: ClaimInputs, claim: Claim, seeds: np.ndarray) -> np.ndarray:
    """Each seed's number of sequences with a label at the claim's length (accuracy claims)."""
    labelled = sequence_counts(inputs, claim).labelled
    for dim, level in {"task": claim.task, "arch": claim.arch, "variant": claim.variant}.items():
        if dim in labelled.dims and level is not None:
            labelled = labelled.sel({dim: level})
    has = (labelled.fillna(0) > 0).sum("sequence")
    has = has.squeeze([d for d in has.dims if d != "seed"], drop=True)
    return np.asarray(has.sel(seed=seeds).values, dtype=float)
