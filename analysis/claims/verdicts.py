"""From an estimate to a verdict: intervals and tests against zero and the margin, power and
MDE, Holm across the claims of a file, and the four-outcome decision with its reason."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from analysis.claims.spec import ALPHA, MODEL_NAMES, Claim


def claim_tests(claim: Claim, est: float, se: float, df: float) -> dict[str, Any]:
    """Interval, the claim's tests, power and MDE of an estimate (``se``, ``df``)."""
    from analysis.stats.contrasts import inference_np, mde_se, power_se, tost_power_se

    margin = claim.margin
    direction = claim.direction if claim.kind == "difference" else "two-sided"
    inf = {k: float(v) for k, v in inference_np(est, se, df, margin=margin, alpha=ALPHA, direction=direction,
                                                 test_against=claim.test_against).items()}
    alt = "two-sided" if direction == "two-sided" else "one-sided"
    sign = -1.0 if direction == "less" else 1.0  # power_at: a true effect in the claimed direction
    power, power_at = np.nan, np.nan
    mde = float(mde_se(se, df, ALPHA, 0.8, alt))
    if claim.kind == "equivalence" and margin is not None:
        power, power_at = float(tost_power_se(se, df, margin, ALPHA / 2)), 0.0
        mde = float(mde_se(se, df, ALPHA, 0.8))
        primary = "equivalence"
    elif claim.test_against == "margin" and margin is not None:
        # the minimum-effect test at twice the margin is the test against zero at the margin
        power, power_at, mde = float(power_se(margin, se, df, ALPHA, alt)), sign * 2 * margin, margin + mde
        primary = "margin"
    else:
        if margin is not None:
            power, power_at = float(power_se(margin, se, df, ALPHA, alt)), sign * margin
        primary = "zero"
    return {
        "estimate": float(est), "lower": inf["lower"], "upper": inf["upper"], "se": float(se), "df": float(df),
        "p": inf[f"p_{primary}"], "p_zero": inf["p_zero"], "p_equivalence": inf.get("p_equivalence", np.nan),
        "p_margin": inf.get("p_margin", np.nan) if claim.test_against == "margin" else np.nan,
        "power": power, "power_at": power_at, "mde": mde,
    }


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


def holm(p: np.ndarray) -> np.ndarray:
    from analysis.stats.multiple import adjust_np

    p = np.asarray(p, dtype=float)
    return adjust_np(p, "holm", ALPHA)[0] if p.size else p


def contra_test(claim: Claim) -> bool:
    """Whether ``claim`` can be ``contradicted``: a bound or readable_by claim, a directional
    difference claim with a margin, or an equivalence claim with a margin."""
    if claim.kind in ("bound", "readable_by"):
        return True
    if claim.kind == "difference":
        return claim.margin is not None and claim.direction != "two-sided"
    return claim.kind == "equivalence" and claim.margin is not None


def contra_p(claim: Claim, row: dict) -> float:
    """p of the test that the effect lies on the side opposite to the claim: twice the one-sided
    p of that side, so that uncorrected ``contra_p < alpha`` is exactly "the 95% interval lies
    wholly on the other side" (an equivalence claim: wholly outside the margin). The opposite
    side was not what the claim declared, so it is judged at the two-sided level; the claimed
    side keeps the one-sided test it declared. From the row's estimate, SE and degrees of
    freedom, the t the interval was built from (its tail directly, not 1 - p, so a tiny p keeps
    its digits). NaN where the claim cannot be contradicted or the row has no df."""
    from scipy import stats

    if row.get("not_evaluable") or not contra_test(claim):
        return np.nan
    est, se, df = (float(row.get(k, np.nan)) for k in ("estimate", "se", "df"))
    if not (np.isfinite(est) and np.isfinite(se)) or np.isnan(df):
        return np.nan  # no interval either (inference_np gives NaN bounds without a df)
    if claim.kind == "equivalence":
        m = float(claim.margin)  # type: ignore[arg-type]  # contra_test: an equivalence claim has one
        if se == 0:
            return 0.0 if abs(est) > m else 1.0
        one = min(float(stats.t.sf((est - m) / se, df)), float(stats.t.cdf((est + m) / se, df)))
        return min(1.0, 2.0 * one)
    value = float(claim.threshold or 0.0) if claim.kind in ("bound", "readable_by") else 0.0
    greater = claim.kind == "readable_by" or claim.direction == "greater"
    if se == 0:  # seeds that agree exactly: the side decides, and 0 / 0 is no test (as for p_zero)
        return np.nan if est == value else (0.0 if (est < value if greater else est > value) else 1.0)
    stat = (est - value) / se
    opposite = float(stats.t.cdf(stat, df) if greater else stats.t.sf(stat, df))
    return min(1.0, 2.0 * opposite)


def family_share(claims: Sequence[Claim]) -> tuple[int, int, int]:
    """How many tests ``claims`` put in each Holm family: (their own tests, one per claim and
    one per architecture of a profile_match claim; the second tests of the claims with a margin;
    the tests of the opposite side, one per claim that can be contradicted)."""
    own = sum(max(len(c.archs), 1) if c.kind == "profile_match" else 1 for c in claims)
    return own, sum(len(secondary_tests(c)) for c in claims), sum(contra_test(c) for c in claims)


def adjust(claims: list[Claim], rows: list[dict], *,
           absent: tuple[int, int, int] = (0, 0, 0)) -> list[dict[str, float]]:
    """Holm-adjusted p-values of every claim's tests by name (``zero``, ``equivalence``,
    ``margin``, ``other``; ``contra``, the opposite side's): each claim's own test over all
    claims, the second tests of the claims with a margin as a second family, and the tests of
    the opposite side (:func:`contra_p`) as a third.

    ``absent``: tests of the same declared family that are not evaluated here (a part of a grid,
    :func:`family_share` of the claims it does not hold), counted with p = 1. That is the worst
    case for the tests present: each adjusted p is then at least what Holm over the whole family
    would give, so a claim a part supports (or contradicts) the whole family supports too."""
    if len(absent) != 3:
        raise ValueError(f"absent must count the three families' tests (family_share), got {absent!r}")

    def padded(p: list[float], n: int) -> np.ndarray:
        return holm(np.array([*p, *([1.0] * n)], dtype=float))[: len(p)]

    primary = padded([r["p"] for r in rows], absent[0])
    out = [{primary_test(c): float(primary[i])} for i, c in enumerate(claims)]
    entries = [(i, name, rows[i].get(f"p_{name}", np.nan)) for i, c in enumerate(claims)
               if not rows[i].get("not_evaluable") for name in secondary_tests(c)]
    second = padded([p for _, _, p in entries], absent[1])
    for (i, name, _), pa in zip(entries, second, strict=True):
        out[i][name] = float(pa)
    contra = [(i, contra_p(c, rows[i])) for i, c in enumerate(claims) if contra_test(c)]
    third = padded([p for _, p in contra], absent[2])
    for (i, _), pa in zip(contra, third, strict=True):
        out[i]["contra"] = float(pa)
    return out


def fmt_p(x: float) -> str:
    return "nan" if not np.isfinite(x) else (f"{x:.2g}" if x < 0.001 else f"{x:.3f}")


def decide(claim: Claim, row: dict, adj: dict[str, float]) -> tuple[str, str, str]:
    """(verdict, outcome, reason) of one claim from its row and Holm-adjusted p-values."""
    if row.get("not_evaluable"):
        return "not evaluable", "", str(row["test"])
    lo, hi = row["lower"], row["upper"]
    iv = f"95% interval [{lo:+.3f}, {hi:+.3f}]"
    if claim.kind == "readable_by":
        p = adj["other"]
        if p < ALPHA:
            return "supported", "", f"mean probe accuracy at {claim.layer} above {claim.threshold:g} (Holm p = {fmt_p(p)})"
        if _contradicted(adj):
            return "contradicted", "", f"the {iv} lies below {claim.threshold:g}{_contra_text(adj)}"
        return "inconclusive", "", (f"not shown above {claim.threshold:g} (Holm p = {fmt_p(p)}; {iv})"
                                    f"{_short_of(adj, hi < (claim.threshold or 0), 'below it')}")
    if claim.kind == "bound":
        p, v = adj["other"], claim.threshold or 0.0
        side, opposite = ("above", "below") if claim.direction == "greater" else ("below", "above")
        what = "mean" + (" minus chance" if claim.baseline == "chance" else "")
        reaches = lo <= v if claim.direction == "greater" else hi >= v
        if p < ALPHA:
            return "supported", "", (f"{what} {side} {v:g} (one-sided t, Holm p = {fmt_p(p)}; {iv})"
                                     f"{_one_sided_note(reaches, v)}")
        if _contradicted(adj):
            return "contradicted", "", f"the {iv} lies {opposite} {v:g}{_contra_text(adj)}"
        beyond = (claim.direction == "greater" and hi < v) or (claim.direction == "less" and lo > v)
        return "inconclusive", "", (f"not shown {side} {v:g} (Holm p = {fmt_p(p)}; {iv}); MDE {row['mde']:.3f} "
                                    f"{side} it at {int(row['n_seeds'])} seeds"
                                    f"{_short_of(adj, beyond, f'{opposite} it')}")
    if claim.kind == "profile_match":
        from analysis.stats.profiles import seeds_for_profile_test

        p = adj["other"]
        if p < ALPHA:
            return "supported", "", (f"profile differs from {claim.differs_from}'s (Holm p = {fmt_p(p)}) and lies "
                                     f"closer to {claim.matches}'s")
        floor = row.get("min_p", np.nan)
        if np.isfinite(floor) and floor >= ALPHA:
            return "inconclusive", "", (
                f"cannot be supported with {int(row['n_seeds'])} seeds per task: the exact permutation "
                f"test's smallest attainable p is {floor:.3f}, not below {ALPHA:g} "
                f"({seeds_for_profile_test(ALPHA)} seeds per task would be needed)")
        return "inconclusive", "", (f"not shown to differ from {claim.differs_from}'s profile while lying "
                                    f"closer to {claim.matches}'s (Holm p = {fmt_p(p)})")
    from analysis.stats.contrasts import outcome_np

    m = claim.margin
    p_zero = adj.get("zero", np.nan)
    zero_sig = bool(p_zero < ALPHA)
    power = (f"power {row['power']:.2f} at {row['power_at']:+g}, " if np.isfinite(row.get("power", np.nan)) else "")
    power += f"MDE {row['mde']:.3f}"
    if claim.kind == "equivalence":
        within = bool(adj["equivalence"] < ALPHA)
        outcome = str(outcome_np(zero_sig, within))
        if within:
            extra = (f"; different from zero (Holm p = {fmt_p(p_zero)}): real but negligible" if zero_sig else "")
            return "supported", outcome, f"within ±{m:g}: the {iv} lies inside the margin (TOST Holm p = {fmt_p(adj['equivalence'])}){extra}"
        if _contradicted(adj):
            return "contradicted", outcome, f"the {iv} lies wholly outside ±{m:g}{_contra_text(adj)}"
        outside = m is not None and (lo > m or hi < -m)
        return "inconclusive", outcome, (f"not shown within ±{m:g} (TOST Holm p = {fmt_p(adj['equivalence'])}; "
                                         f"{iv}); {power} (to show equivalence at a true difference of 0)"
                                         f"{_short_of(adj, outside, 'wholly outside the margin')}")
    side = {"less": "below", "greater": "above", "two-sided": "different from"}[claim.direction]
    wrong = (claim.direction == "less" and lo > 0) or (claim.direction == "greater" and hi < 0)
    reaches = {"less": hi >= 0, "greater": lo <= 0}.get(claim.direction, False)
    if m is None:
        if zero_sig:
            return "supported", "", (f"{side} zero (Holm p = {fmt_p(p_zero)}; {iv}){_one_sided_note(reaches, 0)}; "
                                     "no margin declared, so a negligible effect is not told apart")
        return "inconclusive", "", (f"not shown {side} zero (Holm p = {fmt_p(p_zero)}; {iv}); no margin declared, "
                                    f"so no power (MDE {row['mde']:.3f})")
    within = bool(adj.get("equivalence", np.nan) < ALPHA)
    if claim.test_against == "margin":
        beyond = bool(adj["margin"] < ALPHA)
        outcome = "effect" if beyond else ("negligible" if within and zero_sig else
                                           "equivalent" if within else "inconclusive")
    else:
        outcome = str(outcome_np(zero_sig, within))
    opposite = "above" if claim.direction == "less" else "below"
    if _contradicted(adj):
        return "contradicted", outcome, (f"the {iv} lies {opposite} zero: the opposite of the claimed direction"
                                         f"{_contra_text(adj)}")
    short = _short_of(adj, wrong, f"{opposite} zero")
    if outcome == "effect":
        if claim.test_against == "margin":
            return "supported", outcome, (f"beyond the margin: |effect| > {m:g} (minimum-effect test, Holm p = "
                                          f"{fmt_p(adj['margin'])}; {iv})")
        return "supported", outcome, (f"{side} zero (Holm p = {fmt_p(p_zero)}) and not within ±{m:g} ({iv})"
                                      f"{_one_sided_note(reaches, 0)}")
    if outcome == "negligible":
        return "negligible", outcome, (f"{side} zero (Holm p = {fmt_p(p_zero)}) but within ±{m:g}: the {iv} lies "
                                       "inside the margin, a real but negligible effect")
    if outcome == "equivalent":
        return "equivalent", outcome, (f"not {side} zero (Holm p = {fmt_p(p_zero)}) and within ±{m:g}: the {iv} "
                                       f"lies inside the margin{short}")
    if claim.test_against == "margin" and zero_sig:
        return "inconclusive", outcome, (f"{side} zero (Holm p = {fmt_p(p_zero)}) but not shown beyond ±{m:g} "
                                         f"(minimum-effect Holm p = {fmt_p(adj['margin'])}; {iv}); {power}")
    return "inconclusive", outcome, (f"not shown {side} zero (Holm p = {fmt_p(p_zero)}) nor within ±{m:g} ({iv}); "
                                     f"{power}{short}")


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


def _one_sided_note(reaches: bool, value: float) -> str:
    """Said of a claim supported by its one-sided test whose two-sided 95% interval reaches
    ``value``: the test's own bound is the one-sided 95% bound, which clears it."""
    if not reaches:
        return ""
    return (f" — a one-sided test: its one-sided 95% bound clears {value:g}, while the two-sided "
            "interval shown reaches it")
