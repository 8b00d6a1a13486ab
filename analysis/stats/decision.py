"""The decision layer: from tests to outcomes, one set of rules for claims, reports and the CLI.

What lives here, and nowhere else:

* the vocabulary, the one place its words are spelled: the six **verdicts** of a claim
  (:class:`Verdict`), the four **outcomes** against a margin (:data:`OUTCOMES`, :data:`EFFECT`
  and three verdict words) and the two states of a sequential look that has not decided
  (:class:`Pending`); every other module takes the words from here;
* :func:`inference_np`: the interval and every test of an estimate with its ``se`` and ``df``
  (against zero, the equivalence test, the minimum-effect test);
* :func:`outcome_np`: the four outcomes, with the rule that a multiplicity correction can only
  weaken a verdict (below);
* :func:`holm_family` and :func:`holm_levels`: Holm over a family in which every declared test
  counts, and the level each test is actually judged at (for power and MDE,
  :mod:`analysis.stats.power`);
* the sequence-level sampling floor (:func:`proportion_sampling_var`,
  :func:`paired_sampling_var`, :func:`floored_se`, :func:`score_interval`): seeds whose values
  agree exactly, or more closely than their sequences allow, still have the sampling error of
  the sequences they were measured on. One continuous rule, never a switch at SE = 0: the
  variance is the larger of the seeds' and the sequences' sampling variance;
* :func:`fmt_p` and :func:`not_computable`: a number a user reads is a number or words, never
  ``nan``.

**Correction only weakens a verdict.** Against a margin a difference is ``effect`` when it is
different from zero (Holm-corrected) and *not within* the margin. "Not within" is the failure
of a test, and a corrected test fails more easily than an uncorrected one: read from the
corrected equivalence test, adding unrelated claims to a file would turn ``negligible`` into
``supported``. So "not within" is read from the **uncorrected** equivalence test (the
``1 - alpha`` interval is not inside the margin), while "within" (``negligible``,
``equivalent``) needs the corrected one. A claim whose interval lies inside the margin but
whose equivalence does not survive the correction is ``inconclusive``. Every decided outcome
then needs every test it rests on to pass after correction, or (for "not within") to fail
before it: more tests in the family can only move an outcome to ``inconclusive`` (or a
``negligible`` to ``equivalent``, which claims less).

**Families.** Every declared test counts in its Holm family. A test that was not run (a part
of a grid not given), that was not evaluable, or that has no p-value counts with ``p = 1``:
that is Holm over the declared family with those hypotheses not rejected, so a claim decided
in a part is decided in the whole and the family never shrinks silently. (Tarone's rule, which
drops tests that could not reach ``alpha`` at all, is also valid; it is not used because it
would make a claim's verdict depend on whether other claims happened to be evaluable.)
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np
import scipy.optimize
import scipy.stats

from analysis.stats import validate
from analysis.stats.multiple import holm_np

#: The level of every test and interval unless a caller says otherwise.
ALPHA = 0.05


class Verdict(StrEnum):
    """The verdicts a claim can get (a ``str``: stored tables hold the plain words)."""

    SUPPORTED = "supported"
    NEGLIGIBLE = "negligible"
    EQUIVALENT = "equivalent"
    INCONCLUSIVE = "inconclusive"
    CONTRADICTED = "contradicted"
    NOT_EVALUABLE = "not evaluable"


class Pending(StrEnum):
    """A sequential look that decided nothing: the design goes on, or stops for futility."""

    CONTINUE = "continue"
    FUTILITY = "futility"


#: The verdicts, in the order tables count them.
VERDICTS = tuple(Verdict)
#: The outcome of a difference beyond zero and not within its margin (the claim's "supported").
EFFECT = "effect"
#: The four outcomes of a difference against a margin (Lakens 2017, 2018).
OUTCOMES = (EFFECT, Verdict.NEGLIGIBLE, Verdict.EQUIVALENT, Verdict.INCONCLUSIVE)
#: What a look of a group-sequential design can decide: a verdict, or not yet.
DECISIONS = (Verdict.SUPPORTED, Verdict.NEGLIGIBLE, Verdict.EQUIVALENT, Verdict.CONTRADICTED,
             Pending.CONTINUE, Pending.FUTILITY, Verdict.INCONCLUSIVE)
#: The decisions that end a claim's design.
FINAL = frozenset({Verdict.SUPPORTED, Verdict.NEGLIGIBLE, Verdict.EQUIVALENT, Verdict.CONTRADICTED})
DIRECTIONS = ("two-sided", "less", "greater")
#: One line for reports and stored attrs: how a family is corrected.
FAMILY_RULE = ("Holm over each family of the declared claims; a test not run, not evaluable or without a "
               "p-value counts with p = 1")
#: One line: why correction can only weaken a verdict.
WITHIN_RULE = ("'not within the margin' is read from the uncorrected equivalence test (the 95% interval reaches "
               "beyond the margin), 'within' from the corrected one, so a correction can only weaken a verdict")


# ------------------------------------------------------------------------- tests


def _tcdf(x, df):
    return scipy.stats.t.cdf(x, df)


def _tsf(x, df):
    return scipy.stats.t.sf(x, df)


def inference_np(estimate, se, df, *, margin=None, alpha: float = ALPHA, direction: str = "two-sided",
                 test_against: str = "zero") -> dict[str, np.ndarray]:
    """Interval and tests of an estimate with standard error ``se`` on ``df`` degrees of freedom.

    Returns
    -------
    dict of ndarray
        ``lower``/``upper`` (the ``1 - alpha`` interval), ``statistic``, ``p_two_sided``,
        ``p_zero`` (against zero, one-sided in ``direction``), and with a ``margin``:
        ``p_equivalence`` (TOST, each side at ``alpha / 2``, reported doubled so that it is
        compared with ``alpha``: the interval lies inside the margins iff it is < ``alpha``),
        ``p_margin`` (minimum-effect test ``H0: |delta| <= margin``, one-sided in
        ``direction``; two-sided: doubled smaller side, so < ``alpha`` iff the interval lies
        wholly beyond one margin).
    """
    validate.check_choice(direction, DIRECTIONS, "direction")
    validate.check_choice(test_against, ("zero", "margin"), "test_against")
    est, se, df = np.broadcast_arrays(*(np.asarray(v, float) for v in (estimate, se, df)))
    with np.errstate(invalid="ignore", divide="ignore"):
        half = scipy.stats.t.ppf(1 - alpha / 2, df) * se
        stat = est / se
        p_two = 2 * _tsf(np.abs(stat), df)
        p_zero = {"two-sided": p_two, "less": _tcdf(stat, df), "greater": _tsf(stat, df)}[direction]
        out = {"lower": est - half, "upper": est + half, "statistic": stat, "p_two_sided": p_two,
               "p_zero": p_zero}
        if margin is not None:
            above = _tsf((est - margin) / se, df)  # H0: delta <= +margin
            below = _tcdf((est + margin) / se, df)  # H0: delta >= -margin
            p_lower, p_upper = _tsf((est + margin) / se, df), _tcdf((est - margin) / se, df)
            out["p_equivalence"] = np.minimum(1.0, 2 * np.maximum(p_lower, p_upper))
            out["p_margin"] = {"two-sided": np.minimum(1.0, 2 * np.minimum(above, below)),
                               "less": below, "greater": above}[direction]
    return out


def outcome_np(different, within, within_uncorrected=None) -> np.ndarray:
    """The four outcomes from boolean arrays: ``different`` (from zero, or with a minimum-effect
    test beyond the margin; corrected), ``within`` (the equivalence test, corrected) and
    ``within_uncorrected`` (the same test before correction; default ``within``).

    ``effect`` needs different and *not* within before correction; ``negligible`` different and
    within after it; ``equivalent`` within after it; else ``inconclusive`` (module docstring).
    """
    if within_uncorrected is None:
        within_uncorrected = within
    different, within, raw = np.broadcast_arrays(*(np.asarray(v, bool) for v in (different, within,
                                                                                   within_uncorrected)))
    out = np.full(different.shape, Verdict.INCONCLUSIVE.value, dtype="<U12")
    out[different & ~raw] = EFFECT
    out[different & within] = Verdict.NEGLIGIBLE.value
    out[~different & within] = Verdict.EQUIVALENT.value
    return out


# ------------------------------------------------------------------------- families


def _counted(p, absent: int) -> np.ndarray:
    p = np.asarray(p, dtype=float).ravel()
    p = np.where(np.isfinite(p), np.clip(p, 0.0, 1.0), 1.0)
    return np.concatenate([p, np.ones(int(absent))])


def holm_family(p, absent: int = 0, alpha: float = ALPHA) -> np.ndarray:
    """Holm-adjusted p-values of ``p`` as one family, with ``absent`` more declared tests (and
    every NaN) counted at ``p = 1`` (module docstring). Same shape as ``p``; never NaN."""
    p = np.asarray(p, dtype=float)
    if p.size == 0:
        return p.copy()
    full = _counted(p, absent)
    return holm_np(full, alpha)[1][: p.size].reshape(p.shape)


def holm_levels(p, absent: int = 0, alpha: float = ALPHA) -> np.ndarray:
    """The level each test of the family is compared with at its Holm step: ``alpha / (m - k)``
    for the test ranked ``k`` (from 0) among the ``m`` declared tests, the smallest p first.
    A test whose p is NaN ranks last. Power and MDE of a corrected test use this level."""
    p = np.asarray(p, dtype=float)
    if p.size == 0:
        return p.copy()
    full = _counted(p, absent)
    m = full.size
    order = np.argsort(full, kind="stable")
    rank = np.empty(m, dtype=int)
    rank[order] = np.arange(m)
    return (alpha / (m - rank))[: p.size].reshape(p.shape)


# ------------------------------------------------------------------------- sampling floor


def proportion_sampling_var(values, n_units) -> np.ndarray:
    """The largest sampling variance a seed's proportion can have, from its sequence count.

    A seed's value is a mean over its ``n_units`` sequences of per-sequence values in [0, 1];
    such a mean with mean p has variance at most p(1 - p)/m. p is shrunk towards 1/2 as in the
    Agresti-Coull interval, p~ = (m p + 2)/(m + 4), so that a seed at exactly 0 or 1 still
    has a positive variance (its sequences are a sample: a next one could be wrong).
    """
    m = np.asarray(n_units, dtype=float)
    shrunk = (m * np.asarray(values, dtype=float) + 2.0) / (m + 4.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m > 0, shrunk * (1.0 - shrunk) / m, np.nan)


def paired_sampling_var(correct, labelled, *, adjusted: bool = True) -> np.ndarray:
    """Each seed's sampling variance of its accuracy difference (condition 1 minus condition 0)
    from its per-sequence counts, with the sequences as the sampling unit and paired across the
    two conditions (both models of a seed were evaluated on the same sequences).

    ``correct``, ``labelled`` shaped (..., 2, seed, sequence) (NaN or 0 labelled where a
    sequence is absent); returns (..., seed), NaN where a seed lacks either condition.

    With one labelled position per sequence this is McNemar's: of ``m`` sequences, ``b`` went
    right -> wrong and ``c`` wrong -> right, and the variance of the difference ``(c - b) / m``
    is ``(b + c - (b - c)^2 / m) / m^2``. In general it is the linearised (sandwich) variance
    of the difference of the two accuracies, each a ratio of sums over its sequences:
    ``sum_i u_i^2``, ``u_i = (C1_i - a1 L1_i) / N1 - (C0_i - a0 L0_i) / N0``, which reduces
    to McNemar's form above. ``adjusted`` adds Agresti and Min's (2005) pseudo-counts: half a
    labelled position in each of the four cells (right/wrong x right/wrong), so that with one
    position per sequence ``b + 1/2``, ``c + 1/2`` and ``m + 2`` enter instead. Two models that
    agree on every position still have a variance (a next sequence could be discordant), as
    the one-sample :func:`proportion_sampling_var` shrinks towards 1/2. The pseudo-counts weigh
    one position, not one sequence: a whole pseudo-sequence of 40 discordant positions would
    outweigh the real sampling variance of models that disagree on a few positions per
    sequence (measured: it made the floored paired t reject a true null in 0 of 1000
    experiments where both models of a seed are nearly alike). The estimate is unchanged."""
    C = np.asarray(correct, dtype=float)
    L = np.asarray(labelled, dtype=float)
    L = np.where(np.isfinite(L) & (L > 0), L, 0.0)
    C = np.where(L > 0, np.nan_to_num(C), 0.0)
    N = L.sum(-1)  # (..., 2, seed)
    ok = (N > 0).all(-2)  # (..., seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        if adjusted:
            pseudo = np.where(ok, 1.0, 0.0)[..., None, :]  # one labelled position, in halves
            N = N + 2 * pseudo
            acc = (C.sum(-1) + pseudo) / N
        else:
            acc = C.sum(-1) / N
        part = (C - acc[..., None] * L) / N[..., None]  # (..., 2, seed, sequence)
        var = ((part[..., 1, :, :] - part[..., 0, :, :]) ** 2).sum(-1)
        if adjusted:
            a1, a0, n1, n0 = acc[..., 1, :], acc[..., 0, :], N[..., 1, :], N[..., 0, :]
            for y1, y0 in ((1, 1), (0, 0), (1, 0), (0, 1)):  # the four half-sequence cells
                var = var + 0.5 * (pseudo[..., 0, :] * ((y1 - a1) / n1 - (y0 - a0) / n0)) ** 2
    return np.where(ok, var, np.nan)


def floored_se(values, sampling_var=None) -> tuple[float, float, bool]:
    """``(se, sd_seeds, floored)`` of the mean of per-seed ``values``: the SE from the seeds'
    spread, or from the mean per-seed ``sampling_var`` when that is larger (the seeds cannot be
    more alike than the sequences they were measured on allow)."""
    x = np.asarray(values, dtype=float)
    n = x.size
    var = float(x.var(ddof=1)) if n > 1 else np.nan
    samp = np.nan if sampling_var is None else float(np.nanmean(np.asarray(sampling_var, dtype=float)))
    floored = bool(np.isfinite(samp) and (not np.isfinite(var) or samp > var))
    use = samp if floored else var
    return float(np.sqrt(use / n)) if n else np.nan, float(np.sqrt(var)) if np.isfinite(var) else np.nan, floored


def score_se(p, var_seeds: float, h: float, n: int):
    """SE of a mean of ``n`` seeds' proportions at a true value ``p``: the larger of the seeds'
    variance and the sampling variance ``p (1 - p) h`` (``h = mean(1 / m_s) / n``, ``m_s``
    sequences of seed ``s``)."""
    p = np.asarray(p, dtype=float)
    return np.sqrt(np.maximum(var_seeds / n, p * (1 - p) * h))


def score_interval(estimate: float, var_seeds: float, h: float, n: int, q: float,
                   side: str = "two-sided") -> tuple[float, float]:
    """The values ``p`` in [0, 1] that a t test with :func:`score_se` at ``p`` does not reject:
    ``|estimate - p| <= q score_se(p)`` (``q`` the t quantile). Wilson's interval when the
    sampling variance dominates, the seeds' t interval when their spread does; never outside
    [0, 1]. ``side``: ``"lower"`` or ``"upper"`` gives the one-sided bound (the other end at
    the range's limit)."""
    def gap(p):
        return np.abs(estimate - p) - q * score_se(p, var_seeds, h, n)

    centre = min(max(float(estimate), 0.0), 1.0)

    def end(a: float, b: float) -> float:
        """The accepted value nearest ``a`` on the way from ``a`` (rejected or not) to the centre ``b``."""
        xs = np.linspace(a, b, 2049)
        ok = np.flatnonzero(gap(xs) <= 0)
        if ok.size == 0:
            return b
        i = int(ok[0])
        if i == 0:
            return a
        return float(scipy.optimize.brentq(lambda p: float(gap(p)), float(xs[i - 1]), float(xs[i])))

    lo = end(0.0, centre) if side in ("two-sided", "lower") else 0.0
    hi = end(1.0, centre) if side in ("two-sided", "upper") else 1.0
    return lo, hi


# ------------------------------------------------------------------------- words


def not_computable(why: str) -> str:
    """What a user reads instead of ``nan``."""
    return f"not computable: {why}"


def fmt_p(x: float) -> str:
    """A p-value as text; a missing one in words, never ``nan``."""
    if x is None or not np.isfinite(x):
        return "not computed"
    return f"{x:.2g}" if x < 0.001 else f"{x:.3f}"
