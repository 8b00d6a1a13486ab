"""From an estimate to a verdict: intervals and tests against zero and the margin, power and
MDE, Holm across the claims of a file, and the four-outcome decision with its reason.

This is the one module that gives a claim its verdict: :func:`decide` for a fixed look (every
seed held), :func:`staged_verdict` for a group-sequential design's stage record. The kernels
below it (:mod:`analysis.stats.decision`, :mod:`analysis.stats.seedshare`,
:mod:`analysis.stats.sequential`) return test outcomes and stage decisions in the vocabulary
:mod:`analysis.stats.decision` defines; the tables (:mod:`analysis.claims.evaluate`,
:mod:`analysis.claims.sequential`) and the words (``layerstate``, ``reports``) only carry
them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from analysis.claims.sampling import metric_range
from analysis.claims.spec import ALPHA, MODEL_NAMES, Claim, NotEvaluable
from analysis.stats.decision import EFFECT, Pending, Verdict
from analysis.stats.decision import fmt_p as fmt_p
from analysis.stats.sequential import ClaimStage


def claim_tests(claim: Claim, est: float, se: float, df: float) -> dict[str, Any]:
    """Interval and the claim's tests of an estimate (``se``, ``df``); power and MDE are left
    for the level the claim is judged at, known once the family is (:func:`judged_power`). ``se`` must be positive: an estimate without one is not evaluable
    (the callers floor it at the sequences' sampling error where there is one)."""
    from analysis.stats.decision import inference_np

    if not (np.isfinite(se) and se > 0 and not np.isnan(df) and df >= 1):
        raise NotEvaluable(f"claim {claim.id!r}: its estimate {est:+.4g} has no standard error "
                           f"(SE {se:g}, {df:g} degrees of freedom); add seeds")
    margin = claim.margin
    direction = claim.direction if claim.kind == "difference" else "two-sided"
    inf = {k: float(v) for k, v in inference_np(est, se, df, margin=margin, alpha=ALPHA, direction=direction,
                                                 test_against=claim.test_against).items()}
    row = {
        "estimate": float(est), "lower": inf["lower"], "upper": inf["upper"], "se": float(se), "df": float(df),
        "p": inf[f"p_{primary_test(claim) if primary_test(claim) != 'other' else 'zero'}"],
        "p_zero": inf["p_zero"], "p_equivalence": inf.get("p_equivalence", np.nan),
        "p_margin": inf.get("p_margin", np.nan) if claim.test_against == "margin" else np.nan,
    }
    return row | {"power": np.nan, "power_at": np.nan, "mde": np.nan}  # at its Holm level: judged_power


def judged_power(claim: Claim, row: dict, level: float) -> dict[str, float]:
    """Power (at ``power_at``, the effect the claim's margin names) and MDE of the claim's own
    test judged at ``level`` (its Holm step: :func:`analysis.stats.decision.holm_levels`).
    Bound and readable_by claims declare no effect to power against: power NaN (said in words
    where shown), MDE beyond the threshold."""
    from analysis.stats.power import mde_se, power_se, tost_power_se

    se, df = float(row.get("se", np.nan)), float(row.get("df", np.nan))
    nan = {"power": np.nan, "power_at": np.nan, "mde": np.nan}
    if not (np.isfinite(se) and se > 0 and np.isfinite(df) and df >= 1) or claim.kind == "profile_match":
        return nan
    if claim.kind in ("bound", "readable_by"):
        return {**nan, "mde": float(mde_se(se, df, level, 0.8, "one-sided"))}
    margin = claim.margin
    direction = claim.direction if claim.kind == "difference" else "two-sided"
    alt = "two-sided" if direction == "two-sided" else "one-sided"
    sign = -1.0 if direction == "less" else 1.0  # power_at: a true effect in the claimed direction
    if claim.kind == "equivalence" and margin is not None:
        # the TOST at level/2 per side (p doubled), at a true difference of 0
        return {"power": float(tost_power_se(se, df, margin, level / 2)), "power_at": 0.0,
                "mde": float(mde_se(se, df, level, 0.8))}
    mde = float(mde_se(se, df, level, 0.8, alt))
    if claim.test_against == "margin" and margin is not None:
        # the minimum-effect test at twice the margin is the test against zero at the margin
        return {"power": float(power_se(margin, se, df, level, alt)), "power_at": sign * 2 * margin,
                "mde": margin + mde}
    if margin is not None:
        return {"power": float(power_se(margin, se, df, level, alt)), "power_at": sign * margin, "mde": mde}
    return {**nan, "mde": mde}


def test_text(claim: Claim, model: str) -> str:
    direction = claim.direction if claim.kind == "difference" else "two-sided"
    name = MODEL_NAMES[model]
    if claim.kind == "equivalence":
        return f"{name}: TOST ±{claim.margin:g}, alpha/2 per side (p doubled); and against 0"
    text = f"{name} ({direction})"
    if claim.margin is not None:
        against = (f"minimum-effect test |effect| > {claim.margin:g}" if claim.test_against == "margin"
                   else "against 0")
        text += f"; {against}, and TOST ±{claim.margin:g} at alpha/2 per side"
    return text


def dropped_text(claim: Claim, models: list[str], present: np.ndarray, C: np.ndarray, L: np.ndarray,
             seeds: np.ndarray) -> str:
    """What each model left out, in words ('' when nothing)."""
    one = np.asarray(present.any(0) & ~present.all(0), dtype=bool)
    where = [f"{s} (only in {claim.reference if present[0, i] else claim.treatment})"
             for i, s in enumerate(seeds) if one[i]]
    has = np.nan_to_num(L) > 0
    unpaired = int((has[0] ^ has[1])[present.all(0)].sum())
    parts = []
    for m in dict.fromkeys(models):
        if m == "paired_t" and where:
            parts.append(f"paired_t dropped seed {', '.join(where)}")
        elif m == "gee" and where:
            parts.append(f"gee used seed {', '.join(where)} for that condition only")
        elif m == "mixedlm" and (where or unpaired):
            bits = ([f"seed {', '.join(where)}"] if where else []) + (
                [f"{unpaired} sequences evaluated in one condition only"] if unpaired else [])
            parts.append(f"mixedlm dropped {' and '.join(bits)}")
    return "; ".join(parts)


def primary_test(claim: Claim) -> str:
    if claim.kind == "equivalence":
        return "equivalence"
    if claim.kind == "difference":
        return "margin" if claim.test_against == "margin" else "zero"
    return "other"


def secondary_tests(claim: Claim) -> tuple[str, ...]:
    if claim.margin is None or claim.kind not in ("difference", "equivalence"):
        return ()
    return {"zero": ("equivalence",), "margin": ("zero", "equivalence"), "equivalence": ("zero",)}[primary_test(claim)]


def contra_test(claim: Claim) -> bool:
    """Whether ``claim`` can be ``contradicted``: a bound or readable_by claim; a directional
    difference claim (a reversal needs no margin); a difference claim tested against its margin
    (an effect shown inside the margin refutes "more than the margin"); an equivalence claim
    with a margin."""
    if claim.kind in ("bound", "readable_by"):
        return True
    if claim.kind == "difference":
        return claim.direction != "two-sided" or (claim.test_against == "margin" and claim.margin is not None)
    return claim.kind == "equivalence" and claim.margin is not None


def contra_value(claim: Claim) -> float:
    """The value whose far side refutes the claim: a bound's threshold; the margin (in the
    claimed direction) of a claim tested against it; else zero."""
    if claim.kind in ("bound", "readable_by"):
        return float(claim.threshold or 0.0)
    if claim.kind == "difference" and claim.test_against == "margin" and claim.margin is not None:
        return -float(claim.margin) if claim.direction == "less" else float(claim.margin)
    return 0.0


def contra_p(claim: Claim, row: dict) -> float:
    """p of the test that the effect lies on the side opposite to the claim: twice the one-sided
    p of that side, so that uncorrected ``contra_p < alpha`` is exactly "the 95% interval lies
    wholly on the other side" of :func:`contra_value` (an equivalence claim: wholly outside the
    margin; a two-sided claim tested against its margin: wholly inside it). The opposite side
    was not what the claim declared, so it is judged at the two-sided level; the claimed side
    keeps the one-sided test it declared. From the row's estimate, SE and degrees of freedom,
    the t the interval was built from (its tail directly, not 1 - p, so a tiny p keeps its
    digits). NaN where the claim cannot be contradicted or was not evaluated (it then counts
    with p = 1 in its family)."""
    from scipy import stats

    if row.get("not_evaluable") or not contra_test(claim):
        return np.nan
    if claim.by_share:  # the exact sign test of the other side, at the two-sided level
        return float(row.get("p_contra_exact", np.nan))
    est, se, df = (float(row.get(k, np.nan)) for k in ("estimate", "se", "df"))
    if not (np.isfinite(est) and np.isfinite(se) and se > 0 and not np.isnan(df)):
        return np.nan
    if claim.kind == "equivalence":
        m = float(claim.margin)  # type: ignore[arg-type]  # contra_test: an equivalence claim has one
        one = min(float(stats.t.sf((est - m) / se, df)), float(stats.t.cdf((est + m) / se, df)))
        return min(1.0, 2.0 * one)
    if claim.kind == "difference" and claim.direction == "two-sided":  # |effect| > margin, refuted inside it
        p_eq = float(row.get("p_equivalence", np.nan))
        return p_eq if np.isfinite(p_eq) else np.nan
    value = contra_value(claim)
    greater = claim.kind == "readable_by" or claim.direction == "greater"
    stat = (est - value) / se
    opposite = float(stats.t.cdf(stat, df) if greater else stats.t.sf(stat, df))
    return min(1.0, 2.0 * opposite)


def family_share(claims: Sequence[Claim], design: Literal["fixed", "sequential"] = "fixed") -> tuple[int, int, int]:
    """How many tests ``claims`` put in each of the three Holm families, the one counting rule of
    both designs: their own tests (one per claim, one per architecture of a profile_match
    claim); the second family's; the opposite side's (one per claim that can be contradicted,
    :func:`contra_test`). The second family is what each design tests beside a claim's own
    test: the fixed design every second test of a claim with a margin (:func:`secondary_tests`:
    the equivalence test of a difference claim tested against zero, zero and equivalence of one
    tested against its margin, zero of an equivalence claim); a group-sequential design only the
    margin's TOST of a difference claim tested against zero (the one that makes it equivalent
    or negligible, :meth:`analysis.stats.design.Hypothesis.margin_test`). Pass it as ``absent``
    for the declared claims a part of a grid does not hold."""
    own = sum(max(len(c.archs), 1) if c.kind == "profile_match" else 1 for c in claims)
    if design == "fixed":
        second = sum(len(secondary_tests(c)) for c in claims)
    else:
        second = sum(1 for c in claims if primary_test(c) == "zero" and secondary_tests(c) == ("equivalence",))
    return own, second, sum(contra_test(c) for c in claims)


def adjust(claims: list[Claim], rows: list[dict], *,
           absent: tuple[int, int, int] = (0, 0, 0)) -> list[dict[str, float]]:
    """Holm-adjusted p-values of every claim's tests by name (``zero``, ``equivalence``,
    ``margin``, ``other``; ``contra``, the opposite side's), and the level each claim's own test
    is judged at (``level``) and its opposite side's (``contra_level``): each claim's own test
    over all claims, the second tests of the claims with a margin as a second family, and the
    tests of the opposite side (:func:`contra_p`) as a third.

    Every declared test counts (:mod:`analysis.stats.decision`, "Families"): a claim that was
    not evaluable, a test without a p-value, and ``absent`` tests of the same declared family
    not evaluated here (a part of a grid, :func:`family_share` of the claims it does not hold)
    count with p = 1. Each adjusted p is then at least what Holm over the whole family would
    give, so a claim a part supports (or contradicts) the whole family supports too."""
    from analysis.stats.decision import holm_family, holm_levels

    if len(absent) != 3:
        raise ValueError(f"absent must count the three families' tests (family_share), got {absent!r}")
    raw = [float(r.get("p", np.nan)) for r in rows]
    primary, levels = holm_family(raw, absent[0], ALPHA), holm_levels(raw, absent[0], ALPHA)
    out = [{primary_test(c): float(primary[i]), "level": float(levels[i])} for i, c in enumerate(claims)]
    entries = [(i, name, float(rows[i].get(f"p_{name}", np.nan))) for i, c in enumerate(claims)
               for name in secondary_tests(c)]
    second = holm_family([p for _, _, p in entries], absent[1], ALPHA)
    for (i, name, _), pa in zip(entries, second, strict=True):
        out[i][name] = float(pa)
    contra = [(i, contra_p(c, rows[i])) for i, c in enumerate(claims) if contra_test(c)]
    third = holm_family([p for _, p in contra], absent[2], ALPHA)
    third_levels = holm_levels([p for _, p in contra], absent[2], ALPHA)
    for (i, _), pa, lv in zip(contra, third, third_levels, strict=True):
        out[i]["contra"], out[i]["contra_level"] = float(pa), float(lv)
    for i, row in enumerate(rows):  # counted at p = 1 above; a claim not evaluated has no p of its own
        if row.get("not_evaluable"):
            out[i] = {k: np.nan for k in out[i]}
    return out



def _level_text(level: float) -> str:
    """``0.05``, or ``alpha/45 = 0.0011`` for a Holm step below alpha."""
    if not np.isfinite(level):
        return "not computed"
    k = ALPHA / level
    if abs(k - 1) < 1e-9:
        return f"{ALPHA:g}"
    return f"alpha/{k:.0f} = {level:.2g}" if abs(k - round(k)) < 1e-9 else f"{level:.2g}"


def one_sided_bound(claim: Claim, row: dict, level: float) -> float:
    """The one-sided ``1 - level`` confidence bound on the claimed side (the lower bound of a
    claim that the effect is greater), the number a one-sided test at ``level`` compares with
    its threshold (or zero, or the margin). For a proportion measured on counted sequences the
    bound of the score test (:func:`analysis.stats.decision.score_interval`), else the t bound.
    NaN for two-sided claims and rows without an SE."""
    from analysis.stats.decision import score_interval
    from analysis.stats.power import t_critical

    if claim.kind not in ("bound", "readable_by", "difference") or (
            claim.kind == "difference" and claim.direction == "two-sided"):
        return np.nan
    est, se, df = (float(row.get(k, np.nan)) for k in ("estimate", "se", "df"))
    if not (np.isfinite(est) and np.isfinite(se) and not np.isnan(df) and df >= 1 and np.isfinite(level)):
        return np.nan
    q = float(t_critical(level, df))
    greater = claim.kind == "readable_by" or claim.direction == "greater"
    seqs, sd = float(row.get("sequences", np.nan)), float(row.get("seed_sd", np.nan))
    if claim.kind in ("bound", "readable_by") and np.isfinite(seqs) and seqs > 0 and np.isfinite(sd):
        n = int(round(df + 1))
        lo, hi = score_interval(est, sd ** 2, 1.0 / (seqs * n), n, q, "lower" if greater else "upper")
        return lo if greater else hi
    out = est - q * se if greater else est + q * se
    if claim.kind == "readable_by" or (claim.kind == "bound" and claim.metric in ("accuracy", "probe_accuracy")):
        out = min(max(out, 0.0), 1.0)  # a proportion's bound stays in its range
    return out


def share_words(beyond: float, n_seeds: float, threshold: float, test: str) -> str:
    """The head of a share claim's estimate (an exact sign test's row): ``"4 of 5 seeds beyond
    0.9; median seed"``, to be followed by that seed's value and interval; ``""`` where the
    counts are not known (a row stored before they were kept)."""
    if not (np.isfinite(beyond) and np.isfinite(n_seeds) and n_seeds > 0 and np.isfinite(threshold)):
        return ""
    m = re.search(r"share of seeds above (\S+)\)", test)
    which = "median seed" if m is None else f"{m.group(1)}-quantile seed"
    return f"{int(beyond)} of {int(n_seeds)} seeds beyond {threshold:g}; {which}"


def ceiling_caveat(claim: Claim, verdict: str) -> str:
    """What a rejection by the t test over seeds costs on a bounded metric (a bound or readable_by
    claim with ``statistic = "mean"`` and no ``assume_normal``), to append to a supported or
    contradicted verdict's reason; ``""`` otherwise. The figures are the calibration's
    (docs/measured.md, "Tests at the ceiling")."""
    if (claim.kind not in ("bound", "readable_by") or claim.statistic != "mean" or claim.assume_normal
            or verdict not in (Verdict.SUPPORTED, Verdict.CONTRADICTED)):
        return ""
    lo, hi = metric_range(claim)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return ""
    return (f"; caveat: statistic = 'mean' on a metric bounded in [{lo:g}, {hi:g}] assumes the seeds' values "
            "are roughly normal, which they are not near the bound: there the t test over seeds rejected up to "
            "0.16 of the time at level 0.05 with Beta-distributed seeds and 0.73 with one seed in ten failing "
            "(docs/measured.md, 'Tests at the ceiling'); statistic = 'share' is exact, or declare "
            "assume_normal = true")


def decide(claim: Claim, row: dict, adj: dict[str, float]) -> tuple[str, str, str]:
    """(verdict, outcome, reason) of one claim from its row and Holm-adjusted p-values."""
    from analysis.stats.decision import outcome_np

    if row.get("not_evaluable"):
        return Verdict.NOT_EVALUABLE, "", str(row["test"])
    lo, hi = row["lower"], row["upper"]
    iv = f"95% interval [{lo:+.3f}, {hi:+.3f}]"
    level = float(adj.get("level", np.nan))
    n_seeds = int(row["n_seeds"]) if np.isfinite(row.get("n_seeds", np.nan)) else 0
    bound = float(row.get("bound", np.nan))
    greater = claim.kind == "readable_by" or claim.direction == "greater"
    bound_text = (f"its one-sided {1 - level:.4g} bound (the level of its Holm step, {_level_text(level)}) is "
                  f"{bound:.3f}" if np.isfinite(bound) else "")
    if claim.kind in ("readable_by", "bound") and claim.by_share:
        return _decide_share(claim, row, adj, greater)
    if claim.kind in ("readable_by", "bound"):
        p, v = adj["other"], claim.threshold or 0.0
        side, opposite = ("above", "below") if greater else ("below", "above")
        what = (f"mean probe accuracy at {claim.layer}" if claim.kind == "readable_by" else
                "mean" + (" minus chance" if claim.baseline == "chance" else ""))
        if p < ALPHA:
            return Verdict.SUPPORTED, "", (f"{what} {side} {v:g} (one-sided t, Holm p = {fmt_p(p)}): {bound_text}, "
                                     f"{side} {v:g}")
        if _contradicted(adj):
            return Verdict.CONTRADICTED, "", f"the {iv} lies {opposite} {v:g}{_contra_text(adj)}"
        beyond = (greater and hi < v) or (not greater and lo > v)
        return Verdict.INCONCLUSIVE, "", (f"not shown {side} {v:g} (Holm p = {fmt_p(p)}; {bound_text or iv})"
                                    f"{_cannot(row, level, n_seeds) or _mde_text(claim, row, side, n_seeds)}"
                                    f"{_short_of(adj, beyond, f'{opposite} it')}")
    if claim.kind == "profile_match":
        from analysis.stats.profiles import seeds_for_profile_test

        p = adj["other"]
        if p < ALPHA:
            return Verdict.SUPPORTED, "", (f"profile differs from {claim.differs_from}'s (Holm p = {fmt_p(p)}) and lies "
                                     f"closer to {claim.matches}'s")
        floor = row.get("min_p", np.nan)
        if np.isfinite(floor) and np.isfinite(level) and floor > level:
            return Verdict.INCONCLUSIVE, "", (
                f"cannot be supported with {n_seeds} seeds per task: the exact permutation test's smallest "
                f"attainable p is {floor:.3f}, above the level of its Holm step ({_level_text(level)}): "
                f"{seeds_for_profile_test(level)} seeds per task would be needed with as many in each (fewer in one "
                "task where the other holds more)")
        return Verdict.INCONCLUSIVE, "", (f"not shown to differ from {claim.differs_from}'s profile while lying "
                                    f"closer to {claim.matches}'s (Holm p = {fmt_p(p)})")

    m = claim.margin
    p_zero = adj.get("zero", np.nan)
    zero_sig = bool(p_zero < ALPHA)
    power = (f"power {row['power']:.2f} at {row['power_at']:+g} and " if np.isfinite(row.get("power", np.nan))
             else "")
    power += (f"MDE {row['mde']:.3f} at the level of its Holm step ({_level_text(level)})"
              if np.isfinite(row.get("mde", np.nan)) else "")
    if claim.kind == "equivalence":
        within = bool(adj["equivalence"] < ALPHA)
        outcome = str(outcome_np(zero_sig, within, float(row.get("p_equivalence", np.nan)) < ALPHA))
        if within:
            extra = (f"; different from zero (Holm p = {fmt_p(p_zero)}): real but negligible" if zero_sig else "")
            return Verdict.SUPPORTED, outcome, (f"within ±{m:g}: the {iv} lies inside the margin (TOST Holm p = "
                                          f"{fmt_p(adj['equivalence'])}){extra}")
        if _contradicted(adj):
            return Verdict.CONTRADICTED, outcome, f"the {iv} lies wholly outside ±{m:g}{_contra_text(adj)}"
        outside = m is not None and (lo > m or hi < -m)
        return Verdict.INCONCLUSIVE, outcome, (f"not shown within ±{m:g} (TOST Holm p = {fmt_p(adj['equivalence'])}; "
                                         f"{iv}); {power} (to show equivalence at a true difference of 0)"
                                         f"{_short_of(adj, outside, 'wholly outside the margin')}")
    side = {"less": "below", "greater": "above", "two-sided": "different from"}[claim.direction]
    opposite = "above" if claim.direction == "less" else "below"
    wrong = (claim.direction == "less" and lo > contra_value(claim)) or (
        claim.direction == "greater" and hi < contra_value(claim))
    shown = f"{bound_text}; " if bound_text else ""
    if _contradicted(adj):
        if claim.test_against == "margin" and m is not None:
            where = ("inside ±" if claim.direction == "two-sided" else f"{opposite} {contra_value(claim):+g}, "
                     "short of the margin ±")
            return Verdict.CONTRADICTED, _outcome(claim, row, adj), (
                f"the {iv} lies {where}{m:g}: the claimed effect beyond the margin is refuted{_contra_text(adj)}")
        return Verdict.CONTRADICTED, _outcome(claim, row, adj), (
            f"the {iv} lies {opposite} zero: the opposite of the claimed direction{_contra_text(adj)}")
    short = _short_of(adj, wrong, f"{opposite} {'the margin' if claim.test_against == 'margin' else 'zero'}")
    if m is None:
        if zero_sig:
            return Verdict.SUPPORTED, "", (f"{side} zero (Holm p = {fmt_p(p_zero)}; {shown}{iv}); no margin declared, "
                                     "so a negligible effect is not told apart")
        return Verdict.INCONCLUSIVE, "", (f"not shown {side} zero (Holm p = {fmt_p(p_zero)}; {shown}{iv}); no margin "
                                    f"declared, so no power ({power}){short}")
    outcome = _outcome(claim, row, adj)
    if outcome == EFFECT:
        if claim.test_against == "margin":
            return Verdict.SUPPORTED, outcome, (f"beyond the margin: |effect| > {m:g} (minimum-effect test, Holm p = "
                                          f"{fmt_p(adj['margin'])}; {shown}{iv})")
        return Verdict.SUPPORTED, outcome, (f"{side} zero (Holm p = {fmt_p(p_zero)}; {shown.rstrip('; ')}) and not "
                                      f"within ±{m:g}: the {iv} reaches beyond the margin")
    if outcome == Verdict.NEGLIGIBLE:
        return Verdict.NEGLIGIBLE, outcome, (f"{side} zero (Holm p = {fmt_p(p_zero)}) but within ±{m:g}: the {iv} lies "
                                       "inside the margin, a real but negligible effect")
    if outcome == Verdict.EQUIVALENT:
        return Verdict.EQUIVALENT, outcome, (f"not {side} zero (Holm p = {fmt_p(p_zero)}) and within ±{m:g}: the {iv} "
                                       f"lies inside the margin{short}")
    if claim.test_against == "margin" and zero_sig:
        return Verdict.INCONCLUSIVE, outcome, (f"{side} zero (Holm p = {fmt_p(p_zero)}) but not shown beyond ±{m:g} "
                                         f"(minimum-effect Holm p = {fmt_p(adj['margin'])}; {iv}); {power}{short}")
    if zero_sig:  # different, inside the margin, but "within" did not survive the correction
        return Verdict.INCONCLUSIVE, outcome, (f"{side} zero (Holm p = {fmt_p(p_zero)}) and the {iv} lies inside "
                                         f"±{m:g}, but within the margin is not shown after the correction "
                                         f"across the claims (TOST Holm p = {fmt_p(adj['equivalence'])})")
    return Verdict.INCONCLUSIVE, outcome, (f"not shown {side} zero (Holm p = {fmt_p(p_zero)}) nor within ±{m:g} ({iv}); "
                                     f"{power}{short}")


def _decide_share(claim: Claim, row: dict, adj: dict[str, float], greater: bool) -> tuple[str, str, str]:
    """A bound or readable_by claim decided by the share of seeds beyond its threshold (the exact
    sign test, docs/ceiling.md): the count on each side, the median seed with its interval, and
    the order statistic that had to lie beyond at the claim's Holm level."""
    p, v, q = adj["other"], float(claim.threshold or 0.0), claim.q
    side, opposite = ("above", "below") if greater else ("below", "above")
    cannot = str(row.get("_undecidable", ""))
    if not np.isfinite(row.get("beyond", np.nan)):  # decided again from a table that kept no counts
        return Verdict.INCONCLUSIVE, "", cannot or "the seeds beyond the threshold were not counted"
    n, k, short = int(row["n_seeds"]), int(row["beyond"]), int(row["short"])
    who = "the median seed" if q == 0.5 else f"more than {q:g} of the seeds"
    counts = f"{k} of {n} seeds {side} {v:g}" + (f", {short} {opposite}" if short else "")
    median = f"{'median' if q == 0.5 else f'{q:g}-quantile from the far side'} {row['estimate']:.4g}"
    low, high = metric_range(claim)
    if (greater and v >= high) or (not greater and v <= low):  # no seed can lie strictly beyond it
        edge = high if greater else low
        return Verdict.INCONCLUSIVE, "", (
            f"cannot be decided: no value can lie {side} {edge:g}, the {'largest' if greater else 'smallest'} the "
            f"metric can take; declare a threshold inside its range (e.g. {0.99 * edge if greater else edge + 0.01:g}) "
            f"or a bound claim about the mean; {counts} ({median})")
    if p < ALPHA:
        return Verdict.SUPPORTED, "", (f"{who} lies {side} {v:g}: {counts} ({median}; exact sign test, Holm p = "
                                 f"{fmt_p(p)})")
    if _contradicted(adj):
        return Verdict.CONTRADICTED, "", (f"{who} does not: {counts} ({median}){_contra_text(adj)}")
    if cannot:
        return Verdict.INCONCLUSIVE, "", f"{cannot}; {counts} ({median})"
    most = (f"; most seeds lie {opposite} it, but not beyond what the whole family of claims allows by chance (the "
            f"test of that side at the two-sided level, Holm p = {fmt_p(adj['contra'])}): not contradicted"
            if short > n / 2 and np.isfinite(adj.get("contra", np.nan)) else "")
    return Verdict.INCONCLUSIVE, "", (f"not shown that {who} lies {side} {v:g}: {counts} ({median}; exact sign test, "
                                f"Holm p = {fmt_p(p)}){most}")


def _outcome(claim: Claim, row: dict, adj: dict[str, float]) -> str:
    """The four outcomes of a difference claim with a margin (:func:`analysis.stats.decision.outcome_np`):
    "different" is the claim's own corrected test, "within" the corrected equivalence test,
    "not within" the uncorrected one."""
    from analysis.stats.decision import outcome_np

    if claim.margin is None:
        return ""
    zero_sig = bool(adj.get("zero", np.nan) < ALPHA)
    within = bool(adj.get("equivalence", np.nan) < ALPHA)
    raw_within = bool(float(row.get("p_equivalence", np.nan)) < ALPHA)
    if claim.test_against == "margin":
        if adj.get("margin", np.nan) < ALPHA:
            return EFFECT
        return Verdict.NEGLIGIBLE if within and zero_sig else (Verdict.EQUIVALENT if within else Verdict.INCONCLUSIVE)
    return str(outcome_np(zero_sig, within, raw_within))


def staged_verdict(c: ClaimStage, seeds_next: int | None, *, plain: bool = False) -> tuple[Verdict, str]:
    """A claim's verdict under a group-sequential design, from its stage record ``c``
    (:func:`analysis.stats.sequential.sequential_decisions`), and what the stage did in words: a
    decision that crossed a boundary is the verdict; a design still going on (the next stage
    trains ``seeds_next`` seeds), stopped for futility, or undecided at its maximum is
    ``inconclusive`` (``plain``: the last without its stage's note)."""
    if c.decision == Pending.CONTINUE:
        what = f"not decided yet: the next stage trains up to {seeds_next} seeds" if seeds_next else "not decided"
        return Verdict.INCONCLUSIVE, what
    if c.decision == Pending.FUTILITY:
        return Verdict.INCONCLUSIVE, ("stopped for futility (its conditional power at the maximum was "
                                      f"{c.conditional_power:.2f})")
    if c.decision == Verdict.INCONCLUSIVE:
        return Verdict.INCONCLUSIVE, ("" if plain else c.note) or "not decided at its maximum"
    return Verdict(c.decision), str(c.decision)


def _contradicted(adj: dict[str, float]) -> bool:
    """The opposite side's test, Holm-corrected across the claims (:func:`contra_p`)."""
    return bool(adj.get("contra", np.nan) < ALPHA)


def _contra_text(adj: dict[str, float]) -> str:
    return f" (the test of that side at the two-sided level, Holm p = {fmt_p(adj['contra'])})"


def _short_of(adj: dict[str, float], beyond: bool, where: str) -> str:
    """Said of an interval that lies on the opposite side without the corrected test agreeing."""
    if not beyond or not np.isfinite(adj.get("contra", np.nan)):
        return ""
    return (f"; the interval lies {where}, but not beyond what the whole family of claims allows by chance "
            f"(the test of that side at the two-sided level, Holm p = {fmt_p(adj['contra'])}): not contradicted")


def _mde_text(claim: Claim, row: dict, side: str, n_seeds: int) -> str:
    """The minimum detectable effect beyond a bound claim's threshold, or, where the threshold
    plus it lies beyond what the metric can take, that no value the metric can take is
    detectable at these seeds (:func:`analysis.stats.ranges.unreachable`)."""
    from analysis.claims.sampling import metric_range
    from analysis.stats.ranges import unreachable

    mde = float(row.get("mde", np.nan))
    if not np.isfinite(mde):
        return ""
    v = float(claim.threshold or 0.0)
    past = unreachable(v + mde if side == "above" else v - mde, *metric_range(claim))
    if past:
        return (f"; no value the metric can take is detectable {side} {v:g} at {n_seeds} seeds: the MDE "
                f"{mde:.3f} at the level of its Holm step reaches {past}")
    return f"; MDE {mde:.3f} {side} it at {n_seeds} seeds, at the level of its Holm step"


def _cannot(row: dict, level: float, n_seeds: int) -> str:
    """Said of a bound claim that no data could pass at these seeds and its Holm level: the
    largest t the best possible data give (``max_t``) is below the t the test needs."""
    from analysis.stats.power import t_critical

    max_t, df = float(row.get("max_t", np.nan)), float(row.get("df", np.nan))
    if not (np.isfinite(max_t) and np.isfinite(df) and np.isfinite(level)):
        return ""
    need = float(t_critical(level, df))
    if max_t >= need:
        return ""
    more = row.get("seeds_needed", np.nan)
    tail = (f"; {int(more)} seeds would let the best data pass" if np.isfinite(more) else "")
    return (f"; cannot be supported with {n_seeds} seeds at this family's level: the test needs t >= {need:.1f} at "
            f"{_level_text(level)} with {df:g} degree{'' if df == 1 else 's'} of freedom, and the best possible data give "
            f"t = {max_t:.1f}{tail}")


# ------------------------------------------------------------ words shared by the CLI and the report


def seeds_note(n_seeds: float) -> str:
    """Said beside a claim's interval from 2 seeds: it is the interval the test used, and how
    wide t makes it (never two seeds' values called an interval)."""
    if np.isfinite(n_seeds) and int(n_seeds) == 2:
        return " (from 2 seeds: a t interval with 1 degree of freedom, 12.7 standard errors each side)"
    return ""


def power_words(kind: str, power: float, power_at: float, margin: float = np.nan, *,
                sequential: bool = False, share: bool = False) -> str:
    """A claim's power as a user reads it: a number at its effect, or why there is none
    (``sequential``: the claim was decided by a group-sequential design, whose stages and
    boundaries say what its seeds could decide)."""
    if sequential and not np.isfinite(power):
        return "power: decided by the sequential design (its stages and boundaries)"
    if np.isfinite(power):
        return f"power {power:.2f}" + (f" at {power_at:+.3g}" if np.isfinite(power_at) else "")
    if kind in ("bound", "readable_by") and share:
        return ("power not computable: an exact sign test's power depends on the true share of seeds beyond the "
                "threshold (the seed plan gives it at the observed share)")
    if kind in ("bound", "readable_by"):
        return "power not computable: a bound declares no effect size to power against (see its MDE)"
    if kind == "profile_match":
        return "power not computable: the permutation test has no effect size"
    if not np.isfinite(margin):
        return "power not computable: no margin declared"
    return "power not computable: no standard error"
