"""Evaluate claims on a store: each kind's test on the per-seed values, then one Holm family
and the verdicts (:func:`evaluate_claims`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from analysis.claims.cells import cell_of
from analysis.claims.metrics import (
    ClaimInputs,
    paired_levels,
    probe_seed_profile,
    require_levels,
    resolve_length,
    seed_list,
    seed_metric,
    sequence_counts,
    too_few,
)
from analysis.claims.probe_results import probe_choice, stack_probe_results
from analysis.claims.rows import ClaimRow, as_row
from analysis.claims.sampling import (
    ablation_counts,
    accuracy_floor,
    bound_row,
    floored_fit,
    labelled_sequences,
    metric_sampling_var,
    sequences_per_seed,
    share_row,
)
from analysis.claims.sequences import crossed_caveat
from analysis.claims.spec import (
    ALPHA,
    CROSSCHECK,
    DEFAULT_MODEL,
    Claim,
    ClaimError,
    NotEvaluable,
)
from analysis.claims.verdicts import (
    adjust,
    claim_tests,
    contra_p,
    decide,
    dropped_text,
    family_share,
    judged_power,
)
from analysis.stats.contrasts import contrast_np, glmm_contrast
from analysis.stats.decision import floored_se
from analysis.stats.power import t_critical
from analysis.stats.profiles import (
    MAX_EXACT,
    closer_by_margin_np,
    profile_difference_test,
    shape_distance_np,
)
from analysis.stats.ranges import CLIPPED, clip_interval
from analysis.stats.seedshare import seeds_to_decide, share_test, undecidable_words
from store import Store
from store.errors import did_you_mean


def _evaluate_seedwise(inputs: ClaimInputs, claim: Claim) -> dict:
    """A difference/equivalence claim on a per-seed metric (restoration, probe accuracy,
    ablation drop, refitted probe accuracy, patching recovery): the paired t on per-seed
    differences, its variance floored at the sequences' sampling variance where the metric is
    counted over sequences (:func:`metric_sampling_var`)."""
    t, r = paired_levels(seed_metric(inputs, claim), claim)
    ok = np.isfinite(t.values) & np.isfinite(r.values)
    if ok.sum() < 2:
        raise too_few(claim, int(ok.sum()))
    diff = (t - r).values[ok]
    samp = metric_sampling_var(inputs, claim)
    floor = None
    if samp is not None:
        st, sr = paired_levels(samp, claim)
        floor = (st.reindex_like(t) + sr.reindex_like(r)).values[ok]
        if not np.isfinite(floor).all():
            floor = None
    se, sd, floored = floored_se(diff, floor)
    est = float(diff.mean())
    if not se > 0:
        raise NotEvaluable(
            f"claim {claim.id!r}: its {int(ok.sum())} seeds' {claim.metric} differences are identical "
            f"({est:+.4g}) and {claim.metric} is not counted over sequences, so nothing bounds their sampling "
            "error; train more seeds")
    row = claim_tests(claim, est, se, float(ok.sum() - 1))
    undefined = ~ok & (np.isfinite(t.values) | np.isfinite(r.values))
    row.update(
        n_seeds=int(ok.sum()), margin=claim.margin if claim.margin else np.nan,
        treatment_mean=float(t.values[ok].mean()), reference_mean=float(r.values[ok].mean()),
        test=claim.test_text("paired_t"), model="paired_t", seed_sd=sd,
        dropped=(f"paired_t: seeds {seed_list(t.seed.values[undefined])} ({claim.metric} undefined in one "
                 "condition)" if undefined.any() else ""),
        crosscheck_model="",
        variance=(f"the seeds' SD {sd:.4f} is below what the sequences' sampling error allows: the interval "
                  f"and tests use the sampling SD {se * np.sqrt(ok.sum()):.4f} (two proportions, as if "
                  "independent)" if floored else ""),
    )
    return row


def _evaluate_accuracy(inputs: ClaimInputs, claim: Claim) -> dict:
    corr = sequence_counts(inputs, claim)
    (ct, cr), (lt, lr) = paired_levels(corr.correct, claim), paired_levels(corr.labelled, claim)
    core = ("seed", "sequence")
    C = np.stack([cr.transpose(*core).values, ct.transpose(*core).values]).astype(float)
    L = np.stack([lr.transpose(*core).values, lt.transpose(*core).values]).astype(float)
    seeds = ct.seed.values
    present = (np.nan_to_num(L) > 0).any(-1)  # (condition, seed)
    requested = claim.model or DEFAULT_MODEL
    model = requested if requested != "glmm" else DEFAULT_MODEL
    second = "glmm" if requested == "glmm" else CROSSCHECK[model]
    fits = {m: {k: np.asarray(v).item() for k, v in contrast_np(m, C, L).items()}
            for m in dict.fromkeys([model, *(() if second == "glmm" else (second,)), "mixedlm"])}
    fit = fits[model]
    if not np.isfinite(fit["estimate"]):
        if model == "gee":
            raise too_few(claim, int(present.sum(-1).min()), "in each condition")
        raise too_few(claim, int(present.all(0).sum()))
    # every model's SE is never below the sequences' paired sampling error (one rule, not a
    # switch at SE = 0: docs/decisions.md, "Identical seeds")
    floor_se, n_both = accuracy_floor(C, L, present)
    fit, floored = floored_fit(fit, floor_se, n_both)
    row = ClaimRow(claim_tests(claim, fit["estimate"], fit["se"], fit["df"]))
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.nansum(C, -1) / np.nansum(L, -1)
    diff = (acc[1] - acc[0])[present.all(0)]
    sd = float(diff.std(ddof=1)) if diff.size > 1 else np.nan
    row.update(
        n_seeds=int(fit["n_seeds"]), margin=claim.margin if claim.margin else np.nan,
        treatment_mean=float(np.nanmean(acc[1][present[1]])), reference_mean=float(np.nanmean(acc[0][present[0]])),
        test=claim.test_text(model), model=model, crosscheck_model=second, seed_sd=sd,
    )
    mix = fits["mixedlm"]
    row.update(sd_seed=float(np.sqrt(mix["var_seed"])), sd_model=float(np.sqrt(mix["var_model"])),
               sd_sequence=float(np.sqrt(mix["var_shared"] + mix["var_residual"])), variance="")
    unavailable = ""
    if second == "glmm":
        g = glmm_contrast(C, L, rng=0)
        row.crosscheck = {"estimate": g["estimate"], "lower": np.nan, "upper": np.nan, "p": np.nan}
        row["variance"] = (f"GLMM (logit scale): seed SD {g['sd_seed']:.3f}, model SD {g['sd_model']:.3f}, "
                           f"sequence SD {g['sd_sequence']:.3f}; log odds ratio {g['log_odds_ratio']:+.3f}")
        row["test"] += "; glmm requested: its intervals are too narrow to decide, so the verdict is the default's"
    else:
        x, _ = floored_fit(fits[second], floor_se, n_both)  # the same floor as the primary fit
        row.crosscheck = {"estimate": np.nan, "lower": np.nan, "upper": np.nan, "p": np.nan}
        if np.isfinite(x["estimate"]):
            try:  # a cross-check that cannot be tested never makes the claim not evaluable
                row.crosscheck = claim_tests(claim, x["estimate"], x["se"], x["df"])
            except NotEvaluable as exc:
                unavailable = f"the cross-check {second} gave no verdict: {str(exc).split(': ', 1)[-1]}"
        else:
            unavailable = f"the cross-check {second} gave no estimate (too few seeds or sequences for it)"
    row["dropped"] = "; ".join(v for v in (dropped_text(claim, [model, second], present, C, L, seeds), unavailable)
                               if v)
    if floored:
        note = (f"the seeds' SD {sd:.4f} of their differences is below what their sequences allow: the interval "
                f"and tests use the paired sampling SD {floor_se * np.sqrt(n_both):.4f} of the per-sequence "
                "differences (McNemar-type, over each seed's sequences)" if np.isfinite(sd) else
                f"the interval and tests use the paired sampling SD {floor_se * np.sqrt(n_both):.4f} of the "
                "per-sequence differences (McNemar-type, over each seed's sequences)")
        row["variance"] = "; ".join(v for v in (note, row["variance"]) if v)
    return row


def _evaluate_comparison(inputs: ClaimInputs, claim: Claim) -> dict:
    if claim.metric != "accuracy":
        return _evaluate_seedwise(inputs, claim)
    return _evaluate_accuracy(inputs, claim)


def _evaluate_readable(store: Store, claim: Claim, probes: xr.Dataset) -> dict:
    """A readable_by claim: a bound claim (probe accuracy at ``layer`` > ``threshold``) on the
    stored probe profiles."""
    if claim.threshold is None:  # the Claim validator requires a threshold for readable_by claims
        raise ClaimError(f"claim {claim.id!r}: a readable_by claim needs a threshold")
    acc = probe_seed_profile(store, probes, claim, claim.task, claim.arch)
    if claim.layer not in [str(v) for v in acc.layer.values]:
        raise ClaimError(
            f"claim {claim.id!r}: layer {claim.layer!r} not probed; layers: "
            f"{', '.join(map(str, acc.layer.values))}{did_you_mean(claim.layer, acc.layer.values)}"
        )
    da = acc.sel(layer=claim.layer)
    ok = np.isfinite(da.values)
    x, seeds = da.values[ok], da.seed.values[ok]
    if x.size < 2:
        raise NotEvaluable(f"claim {claim.id!r} needs probe results from at least 2 seeds (found {x.size})")
    if claim.by_share:
        return share_row(claim, x, "greater", what=f"probe accuracy at {claim.layer}")
    units = sequences_per_seed(store, claim, str(claim.task), claim.arch, seeds)
    row = bound_row(claim, x, "greater", units=units, what=f"probe accuracy at {claim.layer}")
    row["test"] = f"one-sided t: mean probe accuracy at {claim.layer} > {claim.threshold:g}"
    return row


def _evaluate_bound(inputs: ClaimInputs, claim: Claim) -> dict:
    """One-sided t on the per-seed values of the claim's metric against ``threshold``."""
    if claim.threshold is None:  # the Claim validator requires one
        raise ClaimError(f"claim {claim.id!r}: a bound claim needs a threshold")
    da = seed_metric(inputs, claim)
    samp = metric_sampling_var(inputs, claim) if claim.metric in ("ablation_drop", "refit_accuracy") else None
    sel: dict[str, str | None] = {"task": claim.task, "arch": claim.arch, "variant": claim.variant,
                                  "site": claim.site, "layer": claim.layer, "setting": claim.setting}
    for dim, level in sel.items():
        if dim in da.dims and level is not None:
            require_levels(da, dim, [level], claim)
            da = da.sel({dim: level})
            if samp is not None and dim in samp.dims:
                samp = samp.sel({dim: level})
    extra = [d for d in da.dims if d != "seed" and da.sizes[d] > 1]
    if extra:
        raise ClaimError(f"claim {claim.id!r} is ambiguous: results vary over {extra}; name them in the claim")
    da = da.squeeze([d for d in da.dims if d != "seed"], drop=True)
    ok = np.isfinite(np.asarray(da.values, dtype=float))
    x, seeds = np.asarray(da.values, dtype=float)[ok], da.seed.values[ok]
    if x.size < 2:
        raise too_few(claim, int(x.size), "with a defined value")
    if claim.by_share:
        return share_row(claim, x, claim.direction, what=_what(claim))
    units = None
    if claim.metric == "accuracy":
        units = labelled_sequences(inputs, claim, seeds)
    elif claim.metric == "probe_accuracy" and claim.task is not None:
        units = sequences_per_seed(inputs.store, claim, claim.task, claim.arch, seeds)
    elif claim.metric == "refit_accuracy" and claim.baseline != "chance" and samp is not None:
        counts = ablation_counts(inputs, claim)["units"]
        for dim, level in sel.items():
            if dim in counts.dims and level is not None:
                counts = counts.sel({dim: level})
        units = np.asarray(counts.squeeze([d for d in counts.dims if d != "seed"], drop=True)
                           .sel(seed=seeds).values, dtype=float)
    floor = None
    if units is None and samp is not None:
        samp = samp.squeeze([d for d in samp.dims if d != "seed"], drop=True)
        floor = np.asarray(samp.sel(seed=seeds).values, dtype=float)
    return bound_row(claim, x, claim.direction, units=units, floor=floor, what=_what(claim))


def _what(claim: Claim) -> str:
    """A bound claim's metric in words."""
    return {"ablation_drop": f"ablation drop ({claim.setting} at {claim.layer})",
            "refit_accuracy": f"refitted probe accuracy after {claim.setting} at {claim.layer}"
                              + (" minus chance" if claim.baseline == "chance" else ""),
            "patch_recovery": f"patching recovery at {claim.layer}"
                              + (f", positions {_ranges(claim.positions)}" if claim.positions else ""),
            "probe_accuracy": f"probe accuracy at {claim.layer}",
            "mdl_compression": f"MDL compression at {claim.layer}",
            "probe_stability": f"seed agreement of the probe subspaces at {claim.layer}",
            "restoration": f"restoration at {claim.site}",
            "accuracy": "accuracy"}.get(claim.metric) or (  # an added analysis's metric
        f"{claim.metric} at {claim.layer}" if claim.layer is not None else claim.metric)


def _ranges(values: list[int]) -> str:
    """``[10, 11, 12, 20]`` -> ``'10-12, 20'``."""
    out: list[str] = []
    for v in sorted(values):
        if out and out[-1].split("-")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ", ".join(out)


def _evaluate_profile(store: Store, claim: Claim, probes: xr.Dataset, arch: str) -> dict:
    if claim.matches is None or claim.differs_from is None:  # required by the Claim validator
        raise ClaimError(f"claim {claim.id!r}: a profile_match claim needs matches and differs_from")
    profiles = {str(t): probe_seed_profile(store, probes, claim, t, arch)
                for t in (claim.task, claim.matches, claim.differs_from)}
    return profile_row(claim, profiles, arch)


def profile_row(claim: Claim, profiles: dict[str, xr.DataArray], arch: str) -> dict:
    """A profile claim's test row for ``arch`` from its tasks' per-seed profiles, (seed, layer)
    each (:func:`~analysis.claims.metrics.probe_seed_profile`): read from one store, or from
    the parts' kept profiles (:mod:`analysis.claims.profiles`), the same row."""

    if claim.matches is None or claim.differs_from is None:  # required by the Claim validator
        raise ClaimError(f"claim {claim.id!r}: a profile_match claim needs matches and differs_from")
    for t, profile in profiles.items():
        seeds = int(np.isfinite(profile.values).any(axis=tuple(
            i for i, d in enumerate(profile.dims) if d != "seed")).sum())
        if seeds < 2:
            raise too_few(claim, seeds, f"with a {t} probe profile for {arch}")

    task = str(claim.task)

    def test(other: str) -> xr.Dataset:
        # tasks may hold different seeds: the union, a seed a task lacks all-NaN (the test drops it)
        pair = xr.concat([profiles[task], profiles[other]], dim=xr.DataArray([task, other], dims="task"),
                         join="outer")
        return profile_difference_test(pair.transpose("task", "seed", "layer"), rng=0)

    diff = test(claim.differs_from)
    d_diff = float(diff.statistic)
    # how much closer to `matches` than to `differs_from`, with a seed bootstrap of the three tasks
    groups = [profiles[str(t)].transpose("seed", "layer").values for t in (task, claim.differs_from, claim.matches)]
    groups = [g[~np.all(np.isnan(g), axis=1)] for g in groups]
    if np.isnan(groups[2]).any() or groups[0].shape[1] != groups[2].shape[1]:
        test(claim.matches)  # its one-line error for profiles with missing layers
    # the distance to `matches` alone (its permutation test decides nothing here): the test's statistic
    d_same = float(shape_distance_np(groups[0].mean(0), groups[2].mean(0)))
    margin = float(claim.decision_margin or 0.0)  # a profile claim's is never None
    est, lo, hi, p_margin = closer_by_margin_np(groups[0], groups[1], groups[2], margin, np.random.default_rng(0))
    p_zero = float(diff.p) if d_same < d_diff else 1.0
    return {
        # the estimate: how much closer the profile lies to `matches`' than to `differs_from`'s
        # (difference of shape distances), with its seed-bootstrap interval
        "estimate": est, "lower": lo, "upper": hi,
        # the claim's own test, an intersection-union test: the exact permutation test that the
        # profile differs from `differs_from`'s and the bootstrap test that it lies closer to
        # `matches`' by more than the margin both reject (its p the larger); p_zero: the
        # permutation test alone
        "p": max(p_zero, p_margin), "p_zero": p_zero, "p_margin": p_margin,
        # the exact permutation test cannot go below this p (2 / number of seed splits)
        "min_p": float(diff.min_p),
        "n_seeds": int(profiles[task].sizes["seed"]),
        "margin": margin, "power": np.nan, "mde": np.nan,
        "treatment_mean": d_same, "reference_mean": d_diff,
        "test": f"{_permutation_words(diff)} over seeds of the profile-shape distance ({claim.task} vs "
                f"{claim.differs_from}); closer to {claim.matches} by more than the margin {margin:g} (seed bootstrap "
                "of the difference of distances)",
    }


def _permutation_words(test: xr.Dataset) -> str:
    """How a profile test's p was computed: over every split of the seeds (exact), or over a
    seeded sample of them where there are more than :data:`analysis.stats.profiles.MAX_EXACT`."""
    if test.attrs.get("exact", True):
        return "exact permutation"
    return f"permutation p from {int(test.n_splits)} random seed splits (seeded: the exact distribution is used up to {MAX_EXACT:,} splits)"


#: Numeric columns of the claims Dataset (NaN where a column does not apply to a claim).
NUMERIC = ("estimate", "lower", "upper", "se", "df", "p", "min_p", "power", "power_at", "mde", "n_seeds", "margin",
           "treatment_mean", "reference_mean", "p_zero", "p_equivalence", "p_margin",
           "crosscheck_estimate", "crosscheck_lower", "crosscheck_upper", "crosscheck_p",
           "crosscheck_se", "crosscheck_df",
           "sd_seed", "sd_model", "sd_sequence", "seed_sd", "sequences", "max_t", "level", "bound", "seeds_needed",
           "beyond", "short", "share", "share_lower", "share_upper", "p_contra_exact")
TEXT = ("test", "model", "crosscheck_model", "dropped", "variance", "result", "interval_note")


def evaluate_claims(store: Store, claims: list[Claim], *, probes: xr.Dataset | None = None,
                    absent: Sequence[Claim] = ()) -> xr.Dataset:
    """Evaluate every claim; returns one row per claim (dim ``claim``).

    ``absent``: claims of the same declared family not evaluated here (the rest of a grid run
    a part at a time); their tests count in the Holm correction with p = 1, the worst case for
    these (:func:`~analysis.claims.verdicts.adjust`).

    Nothing is written if any claim fails to evaluate (no partial verdicts).

    Returns
    -------
    xarray.Dataset
        Dim ``claim``: ``statement``, ``kind``, ``test``, ``verdict``, ``outcome`` (the four
        outcomes against a margin: effect, negligible, equivalent, inconclusive; '' without a
        margin), ``reason`` (one line: which outcome and why), ``model``; ``estimate``,
        ``lower``, ``upper`` (95% interval), ``se``, ``df``, ``p`` (the claim's own test),
        ``p_adjusted`` (Holm over the claims), ``p_zero``, ``p_equivalence``, ``p_margin`` and
        their ``*_adjusted``, ``p_contra`` and ``p_contra_adjusted`` (the test of the side
        opposite to the claim, :func:`~analysis.claims.verdicts.contra_p`; NaN for a claim that
        cannot be contradicted), ``power`` (of the claim's own test at a true effect
        ``power_at``), ``mde``, ``n_seeds``, ``margin``; the cross-check ``crosscheck_model``,
        ``crosscheck_estimate``, ``crosscheck_lower``, ``crosscheck_upper``, ``crosscheck_p``,
        ``crosscheck_se``, ``crosscheck_df``,
        ``crosscheck_verdict``, ``disagreement``; variance components ``sd_seed``,
        ``sd_model``, ``sd_sequence`` (accuracy scale) and ``variance`` (GLMM, text);
        ``dropped`` (what each model left out); ``result`` (the stored results it read);
        ``level`` (its own test's Holm step), ``bound`` (the one-sided bound at that level),
        ``max_t`` and ``seeds_needed`` (bound claims: the best data's t, and the seeds that
        would let it pass), ``seed_sd``, ``sequences`` (what the sampling floor used).
    """
    if not claims:
        raise ClaimError("no claims to evaluate; add [[claims]] tables to the experiment file")
    inputs = ClaimInputs(store, probes)
    rows: list[dict] = []
    ids: list[str] = []
    kept: list[Claim] = []

    def attempt(fn, *args) -> ClaimRow:
        try:
            row = fn(*args)
        except NotEvaluable as exc:
            return ClaimRow({"test": f"not evaluable: {exc}", "not_evaluable": True})
        return as_row(row) | {"result": _source(inputs, args[1]), "caveat": crossed_caveat(inputs, args[1])}

    stored = store_levels(store)
    for c in claims:  # a misspelled task, arch or variant is named before anything is read
        c.check_levels(stored, where="the store's", factors=stored)
    claims = [resolve_length(store, c, probes) for c in claims]  # no length: its runs' one
    for claim in claims:
        if not claim.reads_probes:
            if claim.metric == "probe_accuracy" and probes is None:
                raise ClaimError(f"claim {claim.id!r} needs probe results; run `layerstate probe STORE` first")
            fn = _evaluate_bound if claim.thresholded else _evaluate_comparison
            rows.append(attempt(fn, inputs, claim))
            ids.append(claim.id)
            kept.append(claim)
            continue
        if probes is None:
            raise ClaimError(
                f"claim {claim.id!r} needs probe results; run `layerstate probe STORE` first"
            )
        if not claim.per_arch:
            rows.append(attempt(_evaluate_readable, store, claim, probes))
            ids.append(claim.id)
            kept.append(claim)
        else:
            for arch in claim.named_archs():
                rows.append(attempt(_evaluate_profile, store, claim, probes, arch))
                ids.append(f"{claim.id}[{arch}]")
                kept.append(claim)
    pad = family_share(absent)
    correction = FAMILIES + (
        f"; {len(absent)} declared claims not evaluated here ({' + '.join(map(str, pad))} tests) count in their "
        "families with p = 1, the worst case for these" if absent else "")
    return verdict_table(kept, ids, rows, pad=pad, correction=correction,
                         attrs={"absent_claims": [c.id for c in absent], CELL_RUNS: cell_runs(store, claims)})


def store_levels(store: Store) -> dict[str, list[str]]:
    """The tasks, architectures and variants of the store's runs (factor -> its levels), the
    names a claim's cells must use."""
    out: dict[str, set[str]] = {"task": set(), "arch": set(), "variant": set()}
    for r in store.run_ids():
        a = store.run_attrs(r)
        for factor, levels in out.items():
            levels.add(str(a.get(factor, "default")))
    return {k: sorted(v) for k, v in out.items() if v}


#: The claims table's attribute recording, per cell its claims read, the runs the store held when
#: the table was computed (:func:`stale_table` compares it with the store's runs now).
CELL_RUNS = "cell_runs"


def cell_runs(store: Store, claims: Sequence[Claim]) -> dict[str, list[str]]:
    """Per ``task/arch/variant`` cell that ``claims`` read (:meth:`Claim.selects`), the store's runs."""
    out: dict[str, list[str]] = {}
    for r in store.run_ids():
        a = store.run_attrs(r)
        if any(c.selects(a) for c in claims):
            out.setdefault("/".join(cell_of(a)), []).append(r)
    return out


def _source(inputs: ClaimInputs, claim: Claim) -> str:
    """The stored results a claim read (``result`` column): the probe result of each of its
    tasks, or the ablation, patching or interchange results its runs came from; '' for an
    accuracy claim (it reads the captures)."""
    store, probes = inputs.store, inputs.probes
    try:
        if claim.metric == "probe_accuracy" or claim.reads_probes:
            if probes is None or "result" not in probes.dims:
                return ""
            return ", ".join(sorted(set(probe_choice(store, probes, claim, claim.tasks()).values())))
        if claim.metric == "accuracy":
            return ""
        return str(seed_metric(inputs, claim).attrs.get("results", ""))
    except (ClaimError, KeyError, ValueError):
        return ""


#: The Holm families of a claims table (:func:`~analysis.claims.verdicts.adjust`).
FAMILIES = ("holm across the claims, in three families: each claim's own test; the second test of the claims "
            "with a margin; the test of the side opposite to each claim (a claim is contradicted only when it "
            "passes)")


def verdict_table(kept: Sequence[Claim], ids: Sequence[str], rows: Sequence[Mapping[str, Any]], *,
                  pad: tuple[int, int, int] = (0, 0, 0),
                  correction: str, attrs: dict | None = None) -> xr.Dataset:
    """The claims Dataset of :func:`evaluate_claims` from one row of test results per claim row:
    Holm over the rows (plus ``pad`` absent tests at p = 1), each verdict and its cross-check's.

    Each row is a :class:`~analysis.claims.rows.ClaimRow` (a plain mapping: its columns alone).
    Its ``crosscheck`` (the cross-check model's :func:`claim_tests`) gives its cross-check
    verdict; a row without one keeps its ``crosscheck_verdict`` (or none). A row with ``kept``
    (verdict, outcome, reason: a part's group-sequential decision) keeps it; its tests count
    with p = 1 in every family.
    """
    kept = list(kept)
    defaults = {k: np.nan for k in NUMERIC} | {k: "" for k in TEXT}
    table = [as_row(r).under(defaults) for r in rows]
    for claim, row in zip(kept, table, strict=True):
        _in_range(claim, row)
    adjusted = adjust(kept, table, absent=pad)
    for i, row in enumerate(table):  # a verdict kept as decided (a part's design): counted at p = 1 above
        if row.kept is not None:
            adjusted[i] = {k: np.nan for k in adjusted[i]} | {"level": float(row.get("level", np.nan))}
    for claim, row, adj in zip(kept, table, adjusted, strict=True):
        if row.kept is None:
            _judge_at_level(claim, row, adj["level"])
    decided = [r.kept if r.kept is not None else _with_caveat(c, decide(c, r, a), str(r.get("caveat") or ""))
               for c, r, a in zip(kept, table, adjusted, strict=True)]
    cross = []
    for i, (claim, row) in enumerate(zip(kept, table, strict=True)):
        x = row.crosscheck
        if x is None:
            cross.append(row.crosscheck_verdict)
            continue
        row.update(crosscheck_estimate=x["estimate"], crosscheck_lower=x["lower"], crosscheck_upper=x["upper"],
                   crosscheck_p=x["p"], crosscheck_se=x.get("se", np.nan), crosscheck_df=x.get("df", np.nan))
        if not np.isfinite(x["p"]):
            cross.append("")
            continue
        swapped = [*table[:i], row.with_columns(x), *table[i + 1:]]
        adj_x = adjust(kept, swapped, absent=pad)[i]
        _judge_at_level(claim, swapped[i], adj_x["level"])
        cross.append(decide(claim, swapped[i], adj_x)[0])
    data: dict[str, Any] = {k: ("claim", np.array([float(r[k]) for r in table])) for k in NUMERIC}
    data["p_adjusted"] = ("claim", np.array([a.get(c.primary_test(), np.nan) for c, a in zip(kept, adjusted, strict=True)]))
    for name in ("zero", "equivalence", "margin"):
        data[f"p_{name}_adjusted"] = ("claim", np.array([a.get(name, np.nan) for a in adjusted]))
    # the opposite side's test: a claim is contradicted only when its adjusted p is below alpha
    data["p_contra"] = ("claim", np.array([contra_p(c, r) for c, r in zip(kept, table, strict=True)]))
    data["p_contra_adjusted"] = ("claim", np.array([a.get("contra", np.nan) for a in adjusted]))
    # the Holm level of that test's step (two-sided): what planning a contradiction plans at
    data["contra_level"] = ("claim", np.array([a.get("contra_level", np.nan) for a in adjusted]))
    data["verdict"] = ("claim", np.array([d[0] for d in decided], dtype=str))
    data["outcome"] = ("claim", np.array([d[1] for d in decided], dtype=str))
    data["reason"] = ("claim", np.array([d[2] for d in decided], dtype=str))
    data["crosscheck_verdict"] = ("claim", np.array(cross, dtype=str))
    data["disagreement"] = ("claim", np.array([bool(x) and x != d[0] for x, d in zip(cross, decided, strict=True)]))
    for k in TEXT:
        data[k] = ("claim", np.array([str(r[k]) for r in table], dtype=str))
    data["statement"] = ("claim", np.array([c.statement for c in kept], dtype=str))
    data["kind"] = ("claim", np.array([c.kind for c in kept], dtype=str))
    data["metric"] = ("claim", np.array([c.metric for c in kept], dtype=str))  # its interval's range
    return xr.Dataset(
        data, coords={"claim": np.array(ids, dtype=str)},
        attrs={"alpha": ALPHA, "correction": correction, **(attrs or {}), "ci_level": 1 - ALPHA,
               "default_model": DEFAULT_MODEL,
               "verdict_rule": "with a margin: different from 0 and not within the margin -> supported; "
               "different and within -> negligible; not different and within -> equivalent; neither -> "
               "inconclusive; a directional claim with its interval on the wrong side, the test of that side "
               "Holm-corrected across the claims -> contradicted "
               "(equivalence claims: within -> supported). docs: analysis.claims"},
    )


def _in_range(claim: Claim, row: ClaimRow) -> None:
    """The row's intervals (its own and its cross-check's) inside what the claim's estimate can
    take, with ``interval_note`` saying when one was clipped (:mod:`analysis.stats.ranges`); the
    tests already ran on the unclipped numbers."""
    low, high = claim.estimate_range()
    clipped = False
    for lo_k, hi_k in (("lower", "upper"), ("crosscheck_lower", "crosscheck_upper")):
        lo, hi, past = clip_interval(row[lo_k], row[hi_k], low, high)
        row[lo_k], row[hi_k] = float(lo), float(hi)
        clipped = clipped or (lo_k == "lower" and bool(past))
    x = row.crosscheck
    if x is not None:
        x["lower"], x["upper"], _ = (float(v) for v in clip_interval(x["lower"], x["upper"], low, high))
    if clipped and not row.get("interval_note"):
        row["interval_note"] = f"{CLIPPED} to [{low:g}, {high:g}]"


def _judge_at_level(claim: Claim, row: ClaimRow, level: float) -> None:
    """Power, MDE and the one-sided bound of a row at the level its own test is judged at (its
    Holm step), and for a bound claim no data could pass there, the seeds that would let the
    best data pass (in place)."""
    row["level"] = level
    if row.get("not_evaluable"):
        return
    if claim.by_share:  # the order statistic that must lie beyond, and whether n seeds can decide at all

        held = int(row.get("n_seeds", 0))
        if row.seed_values is not None:  # a table decided again (combined parts) keeps the bound it was stored with
            t = share_test(row.seed_values, float(claim.threshold or 0.0),
                           "greater" if claim.greater else "less", q=claim.q, level=level)
            row["bound"] = float(t.bound) if np.isfinite(t.bound) else np.nan
        row.undecidable = undecidable_words(held, level, claim.q)
        if row.undecidable:
            row["seeds_needed"] = seeds_to_decide(level, claim.q)
        return
    row.update(judged_power(claim, row, level))
    low, high = claim.estimate_range()
    row["bound"] = float(np.clip(claim.one_sided_bound(row, level), low, high))  # NaN stays NaN
    max_t, n = float(row.get("max_t", np.nan)), float(row.get("n_seeds", np.nan))
    if np.isfinite(max_t) and np.isfinite(n) and max_t < float(t_critical(level, n - 1)):
        row["seeds_needed"] = next((k for k in range(int(n) + 1, 201)
                                    if max_t * np.sqrt(k / n) >= float(t_critical(level, k - 1))), np.nan)


def stored_probe_profiles(store: Store) -> xr.Dataset | None:
    """Every stored ``probes/*`` result's layer profiles, side by side along ``result`` (None if
    none): a claim reads one of them (:func:`~analysis.claims.metrics.choose_probes`)."""
    return stack_probe_results(store)


def _with_caveat(claim: Claim, decided: tuple[str, str, str], sequences: str = "") -> tuple[str, str, str]:
    """A verdict with what its test's assumption costs appended to its reason, where it costs
    something (:meth:`~analysis.claims.kinds.base.ClaimBase.ceiling_caveat`), and ``sequences``:
    what its seeds sharing their sequences leaves out (:func:`analysis.claims.sequences.crossed_caveat`)."""
    verdict, outcome, reason = decided
    return verdict, outcome, reason + claim.ceiling_caveat(verdict) + sequences
