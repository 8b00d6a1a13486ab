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
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from analysis.claims.kinds import kind_class
from analysis.claims.rows import ClaimRow
from analysis.claims.spec import ALPHA, Claim, NotEvaluable
from analysis.stats.decision import Pending, Verdict, holm_family, holm_levels, inference_np
from analysis.stats.decision import fmt_p as fmt_p
from analysis.stats.sequential import ClaimStage


def claim_tests(claim: Claim, est: float, se: float, df: float) -> dict[str, Any]:
    """Interval and the claim's tests of an estimate (``se``, ``df``); power and MDE are left
    for the level the claim is judged at, known once the family is (:func:`judged_power`). ``se`` must be positive: an estimate without one is not evaluable
    (the callers floor it at the sequences' sampling error where there is one)."""

    if not (np.isfinite(se) and se > 0 and not np.isnan(df) and df >= 1):
        raise NotEvaluable(f"claim {claim.id!r}: its estimate {est:+.4g} has no standard error "
                           f"(SE {se:g}, {df:g} degrees of freedom); add seeds")
    margin = claim.margin
    direction = claim.tested_direction
    inf = {k: float(v) for k, v in inference_np(est, se, df, margin=margin, alpha=ALPHA, direction=direction,
                                                 test_against=claim.test_against).items()}
    row = {
        "estimate": float(est), "lower": inf["lower"], "upper": inf["upper"], "se": float(se), "df": float(df),
        "p": inf[f"p_{claim.primary_test() if claim.primary_test() != 'other' else 'zero'}"],
        "p_zero": inf["p_zero"], "p_equivalence": inf.get("p_equivalence", np.nan),
        "p_margin": inf.get("p_margin", np.nan) if claim.test_against == "margin" else np.nan,
    }
    own = claim.own_p(float(est), float(se), float(df))
    if own is not None:
        row["p"] = own
    return row | {"power": np.nan, "power_at": np.nan, "mde": np.nan}  # at its Holm level: judged_power


def judged_power(claim: Claim, row: dict, level: float) -> dict[str, float]:
    """Power (at ``power_at``, the effect the claim's margin names) and MDE of the claim's own
    test judged at ``level`` (its Holm step: :func:`analysis.stats.decision.holm_levels`), NaN
    without a positive SE (:meth:`~analysis.claims.kinds.base.ClaimBase.judged_power`). Bound
    and readable_by claims declare no effect to power against: power NaN (said in words where
    shown), MDE beyond the threshold."""
    se, df = float(row.get("se", np.nan)), float(row.get("df", np.nan))
    if not (np.isfinite(se) and se > 0 and np.isfinite(df) and df >= 1):
        return {"power": np.nan, "power_at": np.nan, "mde": np.nan}
    return claim.judged_power(se, df, level)


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


def contra_p(claim: Claim, row: Mapping[str, Any]) -> float:
    """p of the test that the effect lies on the side opposite to the claim: twice the one-sided
    p of that side, so that uncorrected ``contra_p < alpha`` is exactly "the 95% interval lies
    wholly on the other side" of the claim's :meth:`~analysis.claims.kinds.base.ClaimBase.contra_value`
    (an equivalence claim: wholly outside the margin; a two-sided claim tested against its
    margin: wholly inside it). The opposite side was not what the claim declared, so it is
    judged at the two-sided level; the claimed side keeps the one-sided test it declared. NaN
    where the claim cannot be contradicted or was not evaluated (it then counts with p = 1 in its
    family)."""
    if row.get("not_evaluable") or not claim.contra_test():
        return np.nan
    return claim.contra_p(row)


def family_share(claims: Sequence[Claim], design: Literal["fixed", "sequential"] = "fixed") -> tuple[int, int, int]:
    """How many tests ``claims`` put in each of the three Holm families, the one counting rule of
    both designs: their own tests (one per claim, one per architecture of a profile_match
    claim); the second family's; the opposite side's (one per claim that can be contradicted,
    :meth:`~analysis.claims.kinds.base.ClaimBase.contra_test`). The second family is what each
    design tests beside a claim's own test: the fixed design every second test of a claim with a
    margin (:meth:`~analysis.claims.kinds.base.ClaimBase.secondary_tests`: the equivalence test of
    a difference claim tested against zero, zero and equivalence of one tested against its
    margin, zero of an equivalence claim, and of each row of a profile_match claim the
    permutation test without its margin); a group-sequential design only the
    margin's TOST of a difference claim tested against zero (the one that makes it equivalent
    or negligible, :meth:`analysis.stats.design.Hypothesis.margin_test`). Pass it as ``absent``
    for the declared claims a part of a grid does not hold."""
    own = sum(c.own_tests() for c in claims)
    if design == "fixed":
        second = sum(c.own_tests() * len(c.secondary_tests()) for c in claims)
    else:
        second = sum(c.sequential_margin_test() for c in claims)
    return own, second, sum(c.contra_test() for c in claims)


def adjust(claims: list[Claim], rows: Sequence[Mapping[str, Any]], *,
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

    if len(absent) != 3:
        raise ValueError(f"absent must count the three families' tests (family_share), got {absent!r}")
    raw = [float(r.get("p", np.nan)) for r in rows]
    primary, levels = holm_family(raw, absent[0], ALPHA), holm_levels(raw, absent[0], ALPHA)
    out = [{c.primary_test(): float(primary[i]), "level": float(levels[i])} for i, c in enumerate(claims)]
    entries = [(i, name, float(rows[i].get(f"p_{name}", np.nan))) for i, c in enumerate(claims)
               for name in c.secondary_tests()]
    second = holm_family([p for _, _, p in entries], absent[1], ALPHA)
    for (i, name, _), pa in zip(entries, second, strict=True):
        out[i][name] = float(pa)
    contra = [(i, contra_p(c, rows[i])) for i, c in enumerate(claims) if c.contra_test()]
    third = holm_family([p for _, p in contra], absent[2], ALPHA)
    third_levels = holm_levels([p for _, p in contra], absent[2], ALPHA)
    for (i, _), pa, lv in zip(contra, third, third_levels, strict=True):
        out[i]["contra"], out[i]["contra_level"] = float(pa), float(lv)
    for i, row in enumerate(rows):  # counted at p = 1 above; a claim not evaluated has no p of its own
        if row.get("not_evaluable"):
            out[i] = {k: np.nan for k in out[i]}
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


def decide(claim: Claim, row: ClaimRow, adj: dict[str, float]) -> tuple[str, str, str]:
    """(verdict, outcome, reason) of one claim from its row and Holm-adjusted p-values: not
    evaluable with its reason, else as the claim's kind decides
    (:meth:`~analysis.claims.kinds.base.ClaimBase.decide`)."""
    if row.get("not_evaluable"):
        return Verdict.NOT_EVALUABLE, "", str(row["test"])
    return claim.decide(row, adj)


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
    return kind_class(kind).power_words(power, power_at, margin, share=share)
