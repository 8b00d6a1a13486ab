"""Group-sequential designs over seeds: decide each claim at the fewest seeds the design allows.

A :class:`~analysis.stats.design.Design` is declared before any result: the seeds of the first stage, the seeds each
later stage adds, the maximum, the alpha-spending function and an optional non-binding futility
rule. After each stage every undecided claim is tested against its **efficacy boundary**; a
claim that crosses is decided and stays decided, and the next stage trains seeds only for the
(task, arch, variant) cells that undecided claims read (:func:`sequential_decisions`).

The method, and why (docs/sequential.md says more):

* **Spending.** Lan & DeMets (1983) spending functions of the information fraction
  ``t = n_k / n_max`` (seeds): O'Brien-Fleming-like ``2 - 2 Phi(z_{1-a/2} / sqrt t)`` and
  Pocock-like ``a log(1 + (e - 1) t)`` (:func:`~analysis.stats.spending.spent`). The z-scale boundaries that spend them
  are found by recursive numerical integration of the canonical joint distribution of the
  stage-wise z statistics (Armitage, McPherson & Rowe 1969; Jennison & Turnbull 2000, ch. 19):
  :func:`~analysis.stats.boundaries.z_boundaries`.
* **t with few seeds.** A claim's statistic at stage k is a t on its own ``df`` (``n_k - 1``
  for a mean over seeds). The z boundary is carried over by its tail probability, stage by
  stage: ``c_k = F_t^{-1}(Phi(b_k); df_k)`` (the "significance level approach", Jennison &
  Turnbull 2000, sec. 3.8). Its error rates were measured by simulation
  (:mod:`analysis.stats.sequential_calibrate`).
* **Multiplicity.** The sequentially rejective Holm-type graphical procedure for group-sequential
  designs (Maurer & Bretz 2013): each claim's own test starts at ``alpha / m``; a claim whose
  statistic crosses its boundary at its current level is rejected, its level is passed on in
  equal shares to the claims of the family not rejected, and these are tested again against the
  boundaries of the same spending function recomputed at their new level, at every stage they
  have looked at so far (a claim stopped for futility or at its maximum included: its looks are
  tested again, and it is decided at the stage that raised its level). The tests of the opposite
  side ("contradicted", at the two-sided level as in :mod:`analysis.claims.verdicts`) form a
  second family, the margin's tests of the difference claims tested against zero with a margin
  (both one-sided tests against ``+-margin``, each at half the level with its own spending: the
  sequential TOST, which makes such a claim ``equivalent``, or ``negligible`` when its own test
  is rejected too) a third, each with the same procedure. An exact test (a profile_match
  claim's permutation p) is a single look at its maximum with all its level spent there.
* **Intervals.** Repeated confidence intervals (Jennison & Turnbull 1989): at every stage
  ``estimate +- c_k se`` with ``c_k`` the two-sided boundary of level ``alpha`` of the same
  spending function, so that all of them cover together, and the one at a sequential stop
  covers with probability at least ``1 - alpha`` whatever the stopping rule. The verdict rests
  on the one-sided repeated bound of the claim's own test at its level (``ClaimStage.bound``):
  the estimate minus (greater) or plus (less) its critical value times the SE.
* **Futility** (non-binding; the efficacy boundaries ignore it, so stopping or not keeps the
  error rates): conditional power of the claim's own test at the maximum seeds, at a declared
  true value (``Hypothesis.effect``) or else the current estimate; below
  ``Design.futility_power`` the claim stops and its cells get no more seeds for it.
* **Share claims** (``Hypothesis.statistic = "share"``: a bound or readable_by claim decided by
  the share of seeds beyond its threshold, docs/ceiling.md). Observed as the counts
  :class:`ShareObservation` (seeds beyond, short of the threshold, with a value), tested by the
  exact boundaries of :mod:`analysis.stats.seedshare` on the seeds observed at each of the
  claim's looks so far, at its level, nested up to ``alpha`` (``top``) so that a level raised by
  the procedure never needs more seeds beyond; the opposite side the same on the seeds short of
  it, at half its family's level. Its estimate is the share beyond; its repeated interval the
  Clopper-Pearson interval at each look's increment of the spending function (each side
  ``alpha / 2`` in all: the looks' intervals cover together by Bonferroni); its bound, where
  the seeds' values are observed, the order statistic that had to lie beyond the threshold; its
  conditional power exact (binomial increments over the stages left).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.optimize
import scipy.special
import scipy.stats

from analysis.stats.boundaries import rci_critical, stage_critical, z_boundaries
from analysis.stats.decision import EFFECT, FINAL, Pending, Verdict, floored_se
from analysis.stats.design import Cell, Design, DesignError, Hypothesis
from analysis.stats.seedshare import share_boundaries
from analysis.stats.spending import spent

__all__ = ["ClaimStage", "Observation", "ShareObservation", "StageResult", "seed_estimate", "sequential_decisions"]

# ------------------------------------------------------------------------- decisions


def seed_estimate(values: Sequence[float], sampling_var: Sequence[float] | None = None) -> tuple[float, float, float]:
    """``(estimate, se, df)`` of the mean of a claim's per-seed values at a stage (a difference
    claim's paired per-seed differences), its variance floored at the seeds' mean sampling
    variance where the metric is counted over sequences
    (:func:`analysis.stats.decision.floored_se`): the triple :func:`sequential_decisions` reads."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return float(x.mean()) if x.size else math.nan, math.nan, math.nan
    se, _, _ = floored_se(x, sampling_var)
    return float(x.mean()), float(se), float(x.size - 1)


@dataclass(frozen=True)
class ShareObservation:
    """A share claim's observation at a stage (``Hypothesis.statistic == "share"``): the seeds
    strictly beyond its threshold, strictly short of it (on the other side; a seed at the
    threshold is neither) and with a value, over the stage's seeds; and, where they are known,
    the seeds' values sorted (the order statistics its one-sided bound is read from; empty: the
    counts alone). ``n == 0``: not observed at that stage."""

    beyond: int
    short: int
    n: int
    values: tuple[float, ...] = ()


#: A claim's observation at a stage: ``(estimate, se, df)`` of its t, the p-value of an exact
#: test (``Hypothesis.test == "exact"``, read at its maximum only), or a share claim's counts.
Observation = tuple[float, float, float] | float | ShareObservation


@dataclass(frozen=True)
class ClaimStage:
    """A claim at one stage: its estimate, the boundary it was held to, the decision, the
    repeated confidence interval. Decided claims carry the stage they were decided at.

    ``bound`` is what the verdict rests on: the one-sided repeated bounds of the claim's own test
    at its level, ``(estimate - critical se, estimate + critical se)`` with a side the test does
    not have at ``-inf`` / ``+inf`` (a greater test: ``bound[0]``; a less test: ``bound[1]``).
    Its own test is rejected exactly when the bound lies beyond the value (a greater test:
    ``bound[0] >= value``; within: both inside the margin; two-sided or outside: either beyond).
    Unlike ``rci`` (two-sided, alpha / 2 a side) it is at the claim's own level, up to alpha,
    so a supported claim's ``rci`` may still hold the value but its ``bound`` never does.
    ``margin_*`` is the same for the margin's test of a difference claim tested against zero
    with a margin (NaN for other claims), ``outcome`` the fixed design's word for such a claim
    (effect, negligible, equivalent, inconclusive; empty while it continues and for others).

    A share claim (``Hypothesis.statistic == "share"``) has no t: ``estimate`` is the share of
    seeds beyond its threshold, ``rci`` that share's repeated interval, ``boundaries`` the share
    its own test had to reach (``needed / seeds``; ``inf``: none can at this stage), ``se``,
    ``df`` and ``critical`` NaN, ``seeds`` the seeds with a value, and ``bound`` (where the
    seeds' values were observed; NaN otherwise) the order statistic that had to lie strictly
    beyond the threshold, on the values' scale (``bound[0] > value`` for greater, ``bound[1] <
    value`` for less, exactly when it crossed)."""

    id: str
    stage: int
    seeds: int  # the seeds its numbers are from (a claim stopped at its maximum keeps those)
    decision: str
    decided_at: int | None
    estimate: float
    se: float
    df: float
    level: float  # the claim's own test's level at this stage (after any alpha passed on to it)
    critical: float  # the t its own test had to reach (each side)
    boundaries: tuple[float, ...]  # in the estimate's units: where each side of its own test lies
    rci: tuple[float, float]
    conditional_power: float
    contra_level: float
    note: str = ""  # why a decision reads as it does, where the decision alone does not say
    bound: tuple[float, float] = (math.nan, math.nan)
    margin_level: float = math.nan
    margin_bound: tuple[float, float] = (math.nan, math.nan)
    # where each side of the margin's test lies at this stage, in the estimate's units, at its
    # level ``margin_level`` (the boundaries of the test that decides ``equivalent`` and
    # ``negligible``); empty for a claim without a margin's test
    margin_boundaries: tuple[float, ...] = ()
    outcome: str = ""
    p: float = math.nan  # an exact test's p-value at its maximum
    # a share claim (NaN for others): its counts at this stage, the seeds beyond its own test needed
    # at its level, and the seeds short of the threshold its opposite side needed at that side's
    # level (more than ``seeds``: this stage cannot decide it)
    beyond: float = math.nan
    short: float = math.nan
    needed: float = math.nan
    contra_needed: float = math.nan
    look: int | None = None  # the design stage its numbers are from (its latest look)


@dataclass(frozen=True)
class StageResult:
    """All claims after stage ``stage`` and what the next stage trains."""

    stage: int
    seeds: int
    claims: dict[str, ClaimStage]
    cells_next: tuple[Cell, ...]  # cells undecided claims read (none after the last stage)
    seeds_next: int | None  # the seeds those cells reach at the next stage


@dataclass(frozen=True)
class _Look:
    """One test of one stage's observation: whether it crossed, the critical t, the one-sided bounds."""

    crossed: bool
    critical: float
    bound: tuple[float, float]


_NO_LOOK = _Look(False, math.nan, (math.nan, math.nan))


def _observation(h: Hypothesis, raw: Any) -> Observation:
    """A claim's observation as its test reads it (NaN where it is missing); a wrong shape is a
    one-line error. The one place a new kind of observation would be read."""
    if h.statistic == "share":
        return _share_observation(h, raw)
    if h.test == "exact":
        if raw is None:
            return math.nan
        if np.ndim(raw) != 0:
            raise DesignError(f"hypothesis {h.id!r} is an exact test: observe its p-value (a number), not {raw!r}")
        return float(raw)
    if raw is None:
        return math.nan, math.nan, math.nan
    if isinstance(raw, ShareObservation) or getattr(raw, "_fields", None) == ("beyond", "short", "n") \
            or np.ndim(raw) != 1 or len(raw) != 3:
        raise DesignError(f"hypothesis {h.id!r}: observe (estimate, se, df), not {raw!r}")
    est, se, df = (float(v) for v in raw)
    return est, se, df


_NOT_OBSERVED = ShareObservation(0, 0, 0)


def _share_observation(h: Hypothesis, raw: Any) -> ShareObservation:
    """A share claim's observation: a :class:`ShareObservation`, ``ShareCount(beyond, short, n)``
    (or any ``(beyond, short, n)`` of whole numbers), or the seeds' values as a numpy array
    (counted against ``h.value``, non-finite ones left out); None or a count that is not a
    number: not observed."""
    if raw is None:
        return _NOT_OBSERVED
    if isinstance(raw, ShareObservation):
        obs = raw
    elif isinstance(raw, np.ndarray):
        x = np.sort(raw.astype(float).ravel())
        x = x[np.isfinite(x)]
        above, below = int(np.sum(x > h.value)), int(np.sum(x < h.value))
        beyond, short = (above, below) if h.test == "greater" else (below, above)
        obs = ShareObservation(beyond, short, int(x.size), tuple(float(v) for v in x))
    else:
        if isinstance(raw, str) or np.ndim(raw) != 1 or len(raw) != 3:
            raise DesignError(f"hypothesis {h.id!r} is a share test: observe ShareCount(beyond, short, n) or the "
                              f"seeds' values as an array, not {raw!r}")
        try:
            nums = [float(v) for v in raw]
        except (TypeError, ValueError):
            raise DesignError(f"hypothesis {h.id!r} is a share test: observe ShareCount(beyond, short, n) of whole "
                              f"numbers, not {raw!r}") from None
        if not all(np.isfinite(nums)):
            return _NOT_OBSERVED
        if any(v != round(v) for v in nums):
            raise DesignError(f"hypothesis {h.id!r} is a share test: observe ShareCount(beyond, short, n) of whole "
                              f"numbers, not {raw!r}")
        obs = ShareObservation(int(round(nums[0])), int(round(nums[1])), int(round(nums[2])))
    b, s, n = obs.beyond, obs.short, obs.n
    if min(b, s, n) < 0 or b + s > n or (obs.values and len(obs.values) != n):
        raise DesignError(f"hypothesis {h.id!r}: {b} seeds beyond and {s} short of the threshold out of {n} "
                          "cannot be; observe counts with beyond + short <= n (and n values)")
    return obs


def _t_obs(obs: Observation) -> tuple[float, float, float]:
    return obs if isinstance(obs, tuple) else (math.nan, math.nan, math.nan)


def _p(obs: Observation) -> float:
    return math.nan if isinstance(obs, tuple | ShareObservation) else float(obs)


def _finite(obs: Observation) -> bool:
    if isinstance(obs, ShareObservation):
        return obs.n >= 1
    if not isinstance(obs, tuple):
        return bool(np.isfinite(obs))
    est, se, df = obs
    return bool(np.isfinite(est) and np.isfinite(se) and se > 0 and np.isfinite(df) and df >= 1)


def _look(h: Hypothesis, obs: Observation, design: Design, k: int, level: float, contra: bool = False,
          before: Sequence[Observation] = ()) -> _Look:
    """Test ``h`` (its own test, or its opposite side's) on its stage ``k``'s observation at
    ``level``: each side's t against the boundary of ``level`` times its share spent by the
    design's function; an exact test's p against ``level``, at its last stage only; a share
    test's count against its exact boundary on the seeds of its looks so far (``before``: the
    claim's earlier looks' observations)."""
    if h.statistic == "share":
        return _share_look(h, obs, design, level * h.sides(contra)[2], contra, before)
    if h.test == "exact":
        last = k == len(design.seeds()) - 1
        crossed = bool(not contra and last and _p(obs) <= level)
        return _Look(crossed, math.nan, (math.nan, math.nan))
    sides, rule, share = h.sides(contra)
    if not sides or not _finite(obs):
        return _NO_LOOK
    est, se, df = _t_obs(obs)
    c = stage_critical(design.seeds(), level * share, design.spending, k, df)
    hits = [sign * (est - v) / se >= c for sign, v in sides]
    signs = {sign for sign, _ in sides}
    bound = (est - c * se if +1 in signs else -math.inf, est + c * se if -1 in signs else math.inf)
    return _Look(all(hits) if rule == "all" else any(hits), c, bound)


def _share_history(h: Hypothesis, obs: Observation, before: Sequence[Observation]) -> list[ShareObservation]:
    """The claim's observed looks up to ``obs`` (the seeds its boundaries are computed on)."""
    seen = [o for o in (*before, obs) if isinstance(o, ShareObservation) and o.n >= 1]
    if any(b.n < a.n for a, b in zip(seen, seen[1:], strict=False)):
        raise DesignError(f"hypothesis {h.id!r}: its seeds with a value fall from one stage to the next "
                          f"({', '.join(str(o.n) for o in seen)}); a stage holds every seed of the one before")
    return seen


def _share_boundaries(h: Hypothesis, seeds: tuple[int, ...], design: Design, level: float, contra: bool):
    """The exact boundaries of a share claim's own test
    (:func:`analysis.stats.seedshare.share_boundaries`), or of its opposite side (``contra``: the
    same on the seeds short of the threshold, whose share under the null is ``1 - q``, as
    :func:`analysis.stats.seedshare.contra_boundaries`), at one-sided ``level`` on ``seeds``,
    nested up to the highest level that side can reach (``alpha``; the opposite side ``alpha /
    2``)."""
    q, top = (1.0 - h.q, design.alpha / 2) if contra else (h.q, design.alpha)
    return share_boundaries(seeds, level, design.spending, q=q, n_max=design.max_seeds, top=max(top, level))


def _share_look(h: Hypothesis, obs: Observation, design: Design, level: float, contra: bool,
                before: Sequence[Observation]) -> _Look:
    """A share claim's look: its count beyond (``contra``: short of) the threshold against the
    boundary at ``level`` of the last of its looks so far; ``critical`` is that boundary (seeds
    needed), ``bound`` the order statistic that had to lie beyond (its own test, where the
    seeds' values are known)."""
    if not isinstance(obs, ShareObservation) or obs.n < 1 or not 0 < level < 1:
        return _NO_LOOK
    seen = _share_history(h, obs, before)
    need = _share_boundaries(h, tuple(o.n for o in seen), design, level, contra).counts[-1]
    crossed = (obs.short if contra else obs.beyond) >= need
    bound = (math.nan, math.nan)
    if obs.values and not contra:
        x, n = obs.values, obs.n
        if h.test == "greater":
            bound = (x[n - need] if need <= n else -math.inf, math.inf)
        else:
            bound = (-math.inf, x[need - 1] if need <= n else math.inf)
    return _Look(bool(crossed), float(need), bound)


def _share_rci(obs: ShareObservation, seen: Sequence[ShareObservation], design: Design) -> tuple[float, float]:
    """The repeated ``1 - alpha`` interval of the share beyond at a look: the Clopper-Pearson
    interval with each side at the alpha / 2 the spending function spends between the claim's
    previous look and this one (fractions ``n / max_seeds``), so that the looks' intervals miss
    together with probability at most alpha (Bonferroni over the increments)."""
    if obs.n < 1:
        return math.nan, math.nan
    t = np.minimum(np.array([o.n for o in seen], dtype=float) / design.max_seeds, 1.0)
    cum = np.atleast_1d(np.asarray(spent(design.spending, design.alpha / 2, t), dtype=float))
    inc = float(cum[-1] - (cum[-2] if cum.size > 1 else 0.0))
    k, n = obs.beyond, obs.n
    if not inc > 0:
        return 0.0, 1.0
    lo = float(scipy.special.betaincinv(k, n - k + 1, inc)) if k > 0 else 0.0
    hi = float(scipy.special.betaincinv(k + 1, n - k, 1.0 - inc)) if k < n else 1.0
    return lo, hi


def _share_power(h: Hypothesis, obs: ShareObservation, seen: Sequence[ShareObservation], design: Design, k: int,
                 level: float) -> float:
    """Conditional power of a share claim's own test at its stage ``k``: the exact probability
    that its count crosses at one of the design's stages still to come, from its count now, when
    each new seed lies beyond with probability ``h.effect`` (else the share beyond so far). NaN
    at its maximum."""
    future = tuple(n for n in design.seeds()[k + 1:] if n > obs.n)
    if obs.n < 1 or not future or not 0 < level < 1:
        return math.nan
    p = obs.beyond / obs.n if h.effect is None else float(h.effect)
    seeds = tuple(o.n for o in seen)
    counts = _share_boundaries(h, seeds + future, design, level, False).counts
    if obs.beyond >= counts[len(seeds) - 1]:
        return 1.0
    cont, prev, total = np.zeros(obs.beyond + 1), obs.n, 0.0
    cont[-1] = 1.0
    for n_j, c in zip(future, counts[len(seeds):], strict=True):
        f = np.convolve(cont, scipy.stats.binom.pmf(np.arange(n_j - prev + 1), n_j - prev, p))
        total += float(f[c:].sum())
        cont, prev = f[:c], n_j
    return min(total, 1.0)


def _conditional_power(h: Hypothesis, obs: Observation, design: Design, k: int, level: float,
                       before: Sequence[Observation] = ()) -> float:
    """Conditional power of the claim's own test at the last stage (B-value form on the z scale),
    at ``h.effect`` or the current estimate; a share claim's exactly (:func:`_share_power`)."""
    if h.statistic == "share":
        if not isinstance(obs, ShareObservation) or obs.n < 1:
            return math.nan
        return _share_power(h, obs, _share_history(h, obs, before), design, k, level)
    est, se, df = _t_obs(obs)
    fr = design.fractions()
    tk, n_k = fr[k], design.seeds()[k]
    if h.test == "exact" or not (np.isfinite(est) and np.isfinite(se) and se > 0) or tk >= 1:
        return math.nan
    sides, rule, share = h.sides()
    b_last = z_boundaries(fr, level * share, design.spending)[-1]
    sd = se * math.sqrt(n_k)
    true = est if h.effect is None else h.effect
    cps = []
    for sign, v in sides:
        z = sign * (est - v) / se
        drift = sign * (true - v) / (sd / math.sqrt(design.max_seeds))
        cps.append(float(scipy.stats.norm.sf((b_last - z * math.sqrt(tk) - drift * (1 - tk)) / math.sqrt(1 - tk))))
    return min(cps) if rule == "all" else max(cps)


def _within_margin(h: Hypothesis, obs: Observation) -> bool:
    """Whether a claim tested against zero with a margin has its plain (uncorrected) 95% interval
    inside ``+-beyond_margin``: different from zero, but not shown to be more than negligible, so
    not supported (the fixed design's 'not within' is read from the uncorrected interval too)."""
    m = h.beyond_margin
    est, se, df = _t_obs(obs)
    if m is None or not _finite(obs):
        return False
    half = float(scipy.stats.t.isf(0.025, df)) * se
    return h.value - m < est - half and est + half < h.value + m


def _holm_step(family: list[str], rejected: set[str], level: dict[str, float], testable: Sequence[str],
               test: Callable[[str, float], bool], absent: int = 0) -> dict[str, float]:
    """Maurer-Bretz Holm-type step at one stage: reject every testable hypothesis that crosses at
    its current level, pass its level in equal shares to the family's hypotheses not rejected
    (and the ``absent`` ones of the declared family, never rejected here), and test again until
    none crosses. Returns the hypotheses rejected at this stage, each with the level it was
    rejected at."""
    out: dict[str, float] = {}
    while True:
        new = [i for i in testable if i not in rejected and test(i, level[i])]
        if not new:
            return out
        rejected.update(new)
        out.update({i: level[i] for i in new})
        rest = [j for j in family if j not in rejected]
        freed = sum(level[i] for i in new)
        for i in new:
            level[i] = 0.0
        for j in rest:
            level[j] += freed / (len(rest) + absent)


def _absent(absent: tuple[int, ...]) -> tuple[int, int, int]:
    if len(absent) == 3:
        return int(absent[0]), int(absent[1]), int(absent[2])
    if len(absent) == 2:  # (own, opposite side): each absent claim holds at most one margin test
        return int(absent[0]), int(absent[0]), int(absent[1])
    raise DesignError(f"absent counts the families' absent tests as (own, margin, opposite side), got {absent!r}")


def _g(x: float) -> str:
    return f"{x:+.3f}" if np.isfinite(x) else "none"


def sequential_decisions(design: Design, hypotheses: Sequence[Hypothesis],
                         observed: Sequence[Mapping[str, Any]], *,
                         absent: tuple[int, ...] = (0, 0)) -> list[StageResult]:
    """Decide the claims stage by stage.

    Three Holm families, each with the Maurer-Bretz procedure (module docstring): the claims'
    own tests; the margin's tests of the difference claims tested against zero with a margin
    (:meth:`Hypothesis.margin_test`: equivalent, or negligible with the own test rejected too);
    the opposite sides' (contradicted). When a rejection raises a claim's level, every stage it
    has looked at so far is tested again at the new level, a claim stopped for futility or at
    its maximum included; a claim whose own test is rejected while its plain 95% interval lies
    inside its margin goes on for the margin's test (inconclusive at its maximum if neither
    that test crosses nor the interval leaves the margin).

    Parameters
    ----------
    design
        The declared design.
    hypotheses
        The claims as sequential tests (:func:`from_claim`, :func:`profile_hypotheses`).
    observed
        Per stage run so far, each claim's :data:`Observation` at that stage's seeds:
        ``(estimate, se, df)``, an exact test's p-value (read at its maximum only), or a share
        test's counts ``ShareCount(beyond, short, n)`` (or its seeds' values as an array, which
        also give its bound; :class:`ShareObservation`). Claims decided earlier may be left
        out; an undecided claim left out (or with no SE, no seeds) is not tested at that stage
        and continues. A share test's boundaries are those of the seeds it was observed on at
        each of its looks so far.
    absent
        Declared tests of the families not given here (another part of a grid): ``(own, margin,
        opposite side)`` (:func:`family_counts`), or ``(own, opposite side)`` with the own count
        standing for the margin family's too (at most one margin test a claim). They count in
        their family (``alpha / m`` with ``m`` including them) and are never rejected here.

    Returns
    -------
    list of StageResult
        One per stage of ``observed``: each claim's decision, level, boundary, one-sided bound
        and repeated confidence interval, and the cells the next stage trains (those read by
        claims still ``continue``). Deterministic: call it again with one more stage.
    """
    seeds = design.seeds()
    if len(observed) > len(seeds):
        raise DesignError(f"{len(observed)} stages observed, but the design has {len(seeds)} "
                          f"(seeds {', '.join(map(str, seeds))})")
    ids = [h.id for h in hypotheses]
    if len(set(ids)) != len(ids):
        raise DesignError("hypothesis ids must be unique")
    by_id = {h.id: h for h in hypotheses}
    margin_h = {h.id: mt for h in hypotheses if (mt := h.margin_test()) is not None}
    contra_ids = [h.id for h in hypotheses if h.contradictable()]
    margin_ids = list(margin_h)
    a_own, a_margin, a_contra = _absent(absent)
    level = {i: design.alpha / (len(ids) + a_own) for i in ids}
    contra_level = {i: design.alpha / (len(contra_ids) + a_contra) for i in contra_ids}
    margin_level = {i: design.alpha / (len(margin_ids) + a_margin) for i in margin_ids}
    rej_own: set[str] = set()
    rej_contra: set[str] = set()
    rej_margin: set[str] = set()
    own_at: dict[str, tuple[float, int, _Look]] = {}  # own test rejected: level, stage and look it crossed on
    local = {i: design.capped(by_id[i].max_seeds) for i in ids}  # each claim's own design (its maximum)
    for i, d in local.items():
        if d.max_seeds not in seeds:
            raise DesignError(f"hypothesis {i!r}: max_seeds {d.max_seeds} is not a stage of the design "
                              f"(seeds {', '.join(map(str, seeds))}); cap it at one of them")
    # each claim's looks so far: (design stage, its own stage, observation); closed when it stops
    looks: dict[str, list[tuple[int, int, Observation]]] = {i: [] for i in ids}
    status: dict[str, str] = {}
    latest: dict[str, ClaimStage] = {}
    out: list[StageResult] = []
    last = len(seeds) - 1

    def crossing(i: str, lv: float, family: str) -> tuple[int, _Look] | None:
        """The latest of the claim's looks that crosses at ``lv`` in ``family`` (own, contra, margin)."""
        h = margin_h[i] if family == "margin" else by_id[i]
        for j in range(len(looks[i]) - 1, -1, -1):
            k_, kk, o = looks[i][j]
            lk = _look(h, o, local[i], kk, lv, contra=family == "contra", before=[x for _, _, x in looks[i][:j]])
            if lk.crossed:
                return k_, lk
        return None

    for k, obs_k in enumerate(observed):
        for i in ids:
            if status.get(i, Pending.CONTINUE) == Pending.CONTINUE:
                looks[i].append((k, local[i].seeds().index(seeds[k]), _observation(by_id[i], obs_k.get(i))))
        alive = [i for i in ids if status.get(i, Pending.CONTINUE) not in FINAL]
        own_new = _holm_step(ids, rej_own, level, [i for i in alive if i not in rej_own],
                             lambda i, lv: crossing(i, lv, "own") is not None, a_own)
        for i, lv in own_new.items():
            if (hit := crossing(i, lv, "own")) is not None:
                own_at[i] = (lv, *hit)
        contra_new = _holm_step(contra_ids, rej_contra, contra_level,
                                [i for i in alive if i in contra_level and i not in rej_own],
                                lambda i, lv: crossing(i, lv, "contra") is not None, a_contra)
        margin_new = _holm_step(margin_ids, rej_margin, margin_level,
                                [i for i in alive if i in margin_level and i not in contra_new],
                                lambda i, lv: crossing(i, lv, "margin") is not None, a_margin)
        stage: dict[str, ClaimStage] = {}
        for i in alive:
            prev = status.get(i, Pending.CONTINUE)
            if prev != Pending.CONTINUE and not (i in own_new or i in contra_new or i in margin_new):
                continue  # stopped earlier and nothing new: its record stands
            stage[i] = _claim_stage(i, k, by_id[i], margin_h.get(i), local[i], looks[i], prev, design,
                                    own=own_at.get(i), own_now=i in own_new,
                                    level=own_at[i][0] if i in own_at else level[i],
                                    contra=contra_new.get(i), contra_level=contra_level.get(i, math.nan),
                                    margin=(margin_new[i], crossing(i, margin_new[i], "margin"))
                                    if i in margin_new else None,
                                    margin_level=margin_level.get(i, math.nan), seeds=seeds)
            status[i] = stage[i].decision
        latest.update(stage)
        going = [i for i in ids if status.get(i) == Pending.CONTINUE]
        cells = tuple(dict.fromkeys(c for i in going for c in by_id[i].cells))
        out.append(StageResult(stage=k, seeds=seeds[k], claims={i: latest[i] for i in ids if i in latest},
                               cells_next=cells if k < last else (),
                               seeds_next=seeds[k + 1] if k < last and cells else None))
    return out


def _claim_stage(i: str, k: int, h: Hypothesis, mh: Hypothesis | None, d: Design,
                 looks: list[tuple[int, int, Observation]], prev: str, design: Design, *,
                 own: tuple[float, int, _Look] | None, own_now: bool, level: float, contra: float | None,
                 contra_level: float, margin: tuple[float, tuple[int, _Look] | None] | None, margin_level: float,
                 seeds: tuple[int, ...]) -> ClaimStage:
    """A claim's record at stage ``k`` from its looks and what its families rejected."""
    k_last, kk, o = looks[-1]
    at_max = kk == len(d.seeds()) - 1
    plain = next((x for _, _, x in reversed(looks) if _finite(x)), o)  # its latest observed look
    est, se, df = _t_obs(o)
    before = [x for _, _, x in looks[:-1]]
    lk = _look(h, o, d, kk, level, before=before)
    m_lv = margin[0] if margin is not None else margin_level
    m_look = (margin[1][1] if margin is not None and margin[1] is not None
              else _look(mh, o, d, kk, m_lv) if mh is not None and np.isfinite(m_lv) else _NO_LOOK)
    cp = _conditional_power(h, o, d, kk, level, before=before)
    if mh is not None and np.isfinite(m_lv):  # it also stops only when its margin's test is unlikely to cross
        cp_m = _conditional_power(mh, o, d, kk, m_lv)
        cp = cp_m if own is not None else float(np.nanmax([cp, cp_m])) if np.isfinite([cp, cp_m]).any() else cp
    futile = (design.futility != "none" and prev == Pending.CONTINUE and np.isfinite(cp) and cp < design.futility_power)
    m = h.beyond_margin
    note = ""
    dec: str
    if contra is not None:
        dec = Verdict.CONTRADICTED
    elif margin is not None:
        dec = Verdict.NEGLIGIBLE if own is not None else Verdict.EQUIVALENT
        note = (f"{'different from' if own is not None else 'not shown different from'} {h.value:g}, and within "
                f"+-{m:g}: both one-sided tests against the margin crossed at level {m_lv:.2g}")
    elif own is not None and (m is None or not _within_margin(h, plain)):
        dec = Verdict.SUPPORTED
    elif own is not None:
        dec = Verdict.INCONCLUSIVE if at_max or prev != Pending.CONTINUE else Pending.FUTILITY if futile else Pending.CONTINUE
        note = (f"different from {h.value:g}, but its 95% interval lies within +-{m:g}: "
                + ("it goes on for the margin's test (negligible if that crosses)" if dec == Pending.CONTINUE else
                   "not shown to be more than negligible"))
    elif prev != Pending.CONTINUE:
        dec = prev
    elif at_max:
        dec = Verdict.INCONCLUSIVE
    elif futile:
        dec = Pending.FUTILITY
    else:
        dec = Pending.CONTINUE
    if h.statistic == "share":
        return _share_claim_stage(i, k, h, d, looks, dec=dec, own=own, own_now=own_now, level=level, contra=contra,
                                  contra_level=contra_level, cp=cp, seeds=seeds)
    if own is not None:  # the verdict rests on the look its own test crossed on
        j, own_look = own[1], own[2]
        lk_bound = own_look.bound
        if j != k and dec in (Verdict.SUPPORTED, Verdict.NEGLIGIBLE):
            side = own_look.bound[0] if h.test == "greater" else own_look.bound[1]
            note = (note + "; " if note else "") + (
                f"its own test crossed on stage {j + 1}'s {seeds[j]} seeds"
                + (f" (one-sided bound {_g(side)})" if h.test in ("greater", "less") else "")
                + (f" at the level {level:.2g} it was raised to at stage {k + 1} (Maurer-Bretz)" if own_now
                   else f" at the level {level:.2g}"))
    else:
        lk_bound = lk.bound
    if h.test == "exact" and dec == Pending.CONTINUE:
        note = f"an exact test, looked at once at its maximum ({d.max_seeds} seeds)"
    elif h.test == "exact" and np.isfinite(_p(o)) and dec in (Verdict.SUPPORTED, Verdict.INCONCLUSIVE):
        note = (note + "; " if note else "") + f"exact p = {_p(o):.3g} against level {level:.2g}"
    elif h.test == "exact" and dec == Verdict.INCONCLUSIVE:
        note = "no p-value at its maximum"
    outcome = ""
    if mh is not None and dec != Pending.CONTINUE:
        outcome = (EFFECT if dec == Verdict.SUPPORTED else dec if dec in (Verdict.NEGLIGIBLE, Verdict.EQUIVALENT)
                   else Verdict.INCONCLUSIVE)
    q = rci_critical(d, kk, df) if np.isfinite(df) and df >= 1 else math.nan
    m_now = _look(mh, o, d, kk, m_lv) if mh is not None and np.isfinite(m_lv) else _NO_LOOK
    m_bounds = (tuple(v + sign * m_now.critical * se for sign, v in mh.sides()[0])
                if mh is not None and np.isfinite(m_now.critical) else ())
    return ClaimStage(
        id=i, stage=k, seeds=d.seeds()[kk], decision=dec, decided_at=None if dec == Pending.CONTINUE else k,
        estimate=est, se=se, df=df, level=level, critical=lk.critical,
        boundaries=tuple(v + sign * lk.critical * se for sign, v in h.sides()[0]),
        rci=(est - q * se, est + q * se), conditional_power=cp, contra_level=contra_level, note=note,
        bound=lk_bound, margin_level=m_lv, margin_bound=m_look.bound, margin_boundaries=m_bounds, outcome=outcome,
        p=_p(o), look=k_last)


def _undecidable(n: int, level: float, q: float) -> str:
    """What a share claim's stage says when no outcome of ``n`` seeds could pass even the fixed
    exact test at ``level`` (the smallest p is ``q ** n``), as
    :func:`analysis.stats.seedshare.undecidable_words` says it; ``""`` when some could."""
    if q ** n < level:
        return ""
    need = n + 1
    while q ** need >= level:
        need += 1
    what = "the median seed" if q == 0.5 else f"a share of {q:g} of the seeds"
    return (f"cannot be decided with {n} seeds without assuming the seeds' values are roughly normal: "
            f"the exact test that {what} lies beyond the threshold needs at least {need} seeds at level {level:.3g}")


def _share_words(h: Hypothesis, o: ShareObservation) -> str:
    """A share claim's counts at a look: '7 of 8 seeds above 0.99, 1 below'."""
    side, opposite = ("above", "below") if h.test == "greater" else ("below", "above")
    ties = o.n - o.beyond - o.short
    return (f"{o.beyond} of {o.n} seeds {side} {h.value:g}" + (f", {o.short} {opposite}" if o.short else "")
            + (f", {ties} at it" if ties else ""))


def _share_crossing(h: Hypothesis, looks: list[tuple[int, int, Observation]], d: Design, level: float,
                    contra: bool) -> tuple[int, _Look, ShareObservation] | None:
    """The latest of a share claim's looks that crosses at ``level`` (its design stage, the look,
    its counts)."""
    for j in range(len(looks) - 1, -1, -1):
        k_, kk, o = looks[j]
        lk = _look(h, o, d, kk, level, contra=contra, before=[x for _, _, x in looks[:j]])
        if lk.crossed and isinstance(o, ShareObservation):
            return k_, lk, o
    return None


def _share_claim_stage(i: str, k: int, h: Hypothesis, d: Design, looks: list[tuple[int, int, Observation]], *,
                       dec: str, own: tuple[float, int, _Look] | None, own_now: bool, level: float,
                       contra: float | None, contra_level: float, cp: float, seeds: tuple[int, ...]) -> ClaimStage:
    """A share claim's record at stage ``k`` (:class:`ClaimStage`: the share beyond, its repeated
    interval, the seeds needed on either side, the counts in the note)."""
    k_last, kk, o = looks[-1]
    obs = o if isinstance(o, ShareObservation) else _NOT_OBSERVED
    hist = [x for _, _, x in looks]
    lk = _look(h, obs, d, kk, level, before=hist[:-1])
    c_lv = contra if contra is not None else contra_level
    c_look = (_look(h, obs, d, kk, c_lv, contra=True, before=hist[:-1]) if np.isfinite(c_lv) and c_lv > 0
              else _NO_LOOK)
    n, q = obs.n, h.q
    who = "the median seed lies" if q == 0.5 else f"more than {1 - q:g} of the seeds lie"
    opposite = "below" if h.test == "greater" else "above"
    if dec == Verdict.CONTRADICTED and contra is not None and (hit := _share_crossing(h, looks, d, contra, True)):
        j, c_hit, oj = hit
        note = (f"{_share_words(h, oj)}: {who} {opposite} {h.value:g}, {int(c_hit.critical)} {opposite} needed at "
                f"level {contra / 2:.2g} by the exact sign test"
                + (f"; it crossed on stage {j + 1}'s {oj.n} seeds" if j != k_last else ""))
    elif own is not None and dec == Verdict.SUPPORTED:
        j, own_look = own[1], own[2]
        oj = next((x for k_, _, x in looks if k_ == j and isinstance(x, ShareObservation)), obs)
        note = f"{_share_words(h, oj)}: {int(own_look.critical)} needed at level {level:.2g} by the exact sign test"
        if j != k:
            note += (f"; its own test crossed on stage {j + 1}'s {oj.n} seeds"
                     + (f" at the level {level:.2g} it was raised to at stage {k + 1} (Maurer-Bretz)" if own_now
                        else ""))
    elif n < 1:
        note = "not observed at this stage (no count of its seeds beyond the threshold)"
    elif lk.critical > n:
        note = f"{_share_words(h, obs)}; " + (_undecidable(n, level, q) or (
            f"this stage cannot decide it: at level {level:.2g} the design spends too little by {n} seeds for "
            "any count to cross"))
    else:
        note = f"{_share_words(h, obs)}; {int(lk.critical)} needed at level {level:.2g} by the exact sign test"
    seen = _share_history(h, obs, hist[:-1]) if n >= 1 else []
    bound = own[2].bound if own is not None else lk.bound
    return ClaimStage(
        id=i, stage=k, seeds=n if n >= 1 else d.seeds()[kk], decision=dec,
        decided_at=None if dec == Pending.CONTINUE else k, estimate=obs.beyond / n if n >= 1 else math.nan,
        se=math.nan, df=math.nan, level=level, critical=math.nan,
        boundaries=((lk.critical / n if lk.critical <= n else math.inf),) if n >= 1 else (),
        rci=_share_rci(obs, seen, d) if n >= 1 else (math.nan, math.nan), conditional_power=cp,
        contra_level=contra_level, note=note, bound=bound,
        beyond=float(obs.beyond) if n >= 1 else math.nan, short=float(obs.short) if n >= 1 else math.nan,
        needed=lk.critical, contra_needed=c_look.critical, look=k_last)
