"""Claims about the share of seeds beyond a threshold: the exact sign test, fixed and group-sequential.

A bound claim ("the LSTM's Parity accuracy is >= 0.99") or a readable_by claim ("a linear probe
at L1 reads the state with accuracy >= 0.9") is decided here by the **share of seeds whose value
lies beyond the threshold**: ``H0: P(beyond) <= q`` against ``H1: P(beyond) > q`` (``q = 0.5``
by default: the median seed lies beyond the threshold). The count of seeds beyond is binomial
``(n, P(beyond))`` whatever the per-seed distribution, so the test is exact at every number of
seeds, for values at a ceiling, a failing seed, skew or ties alike (docs/ceiling.md):

* **Beyond** is strict: a seed exactly at the threshold counts against the claim, and against
  its opposite side too (it is neither beyond nor short of it).
* **Fixed design** (:func:`share_test`): the exact one-sided binomial p at ``q``, the
  Clopper-Pearson interval of the share, and on the values' scale the order statistic that is
  the test's one-sided bound (the claim is supported iff it lies beyond the threshold; it is a
  distribution-free confidence bound of the ``(1 - q)``-quantile).
* **Opposite side** ("contradicted"): the share *short* of the threshold (strictly on the other
  side) exceeds ``1 - q``, so that ``P(beyond) < q`` even counting ties as beyond; for ``q =
  0.5``: the median lies on the other side. Its p is doubled (:attr:`ShareTest.p_contra`) to be
  compared with the family's alpha, as :func:`analysis.claims.verdicts.contra_p` does for the t:
  the opposite side is tested at the two-sided level.
* **Seeds needed** (:func:`seeds_to_decide`): the smallest p at ``n`` seeds is ``q ** n`` (all
  beyond), so a claim at ``level`` cannot be decided below ``log(level) / log(q)`` seeds (5 at
  0.05, q = 0.5). Below that :attr:`ShareTest.words` says so instead of a verdict.
* **Group-sequential** (:func:`share_boundaries`, :func:`share_decisions`): the count beyond is
  a Markov chain over stages (binomial increments), so the probability under ``P(beyond) = q``
  (the worst case of the composite null: crossing only grows with it) of crossing by each stage
  is computed exactly by recursion, and each stage's boundary is the smallest count whose
  cumulative crossing probability stays below the Lan-DeMets alpha spent by then
  (:func:`analysis.stats.spending.spent`, information fraction ``n_k / n_max``). A discrete
  test spends at most its allotment; what it leaves unspent at one stage is free for the next.
  Built so, the boundaries are not nested in the level (a higher level may need more seeds at a
  later stage); a claim whose level can grow (Holm, Maurer-Bretz) takes at each stage the
  largest count over the levels it can reach (``top``), which nests them and keeps each
  stage within its allotment (:func:`share_boundaries`).
* **Power** (:func:`share_power`): the same recursion at any true share, exact.

Why not the mean: from 3-10 seeds of a metric bounded in [0, 1], no valid test of "mean > v"
near the ceiling has power. Take any truth ``F`` with mean ``m > v`` and mix it with a point at
0 of weight ``1 - v / m``: the mixture's mean is exactly ``v`` (the null), and it draws all ``n``
seeds from ``F`` with probability ``(v / m) ** n``. So a test whose type-I error is at most
``alpha`` under every null has power at most ``alpha (m / v) ** n <= alpha / v ** n`` under
every truth: at ``v = 0.99`` and 8 seeds at most 0.054, and power 0.8 needs 276 seeds even with
every seed perfect (failing seeds held at chance, 0.5, instead of 0: at most 0.059).
The t over seeds assumes the seeds' values roughly normal; its error near the ceiling is
measured by ``python -m bench.ceiling`` (docs/measured.md, "Tests at the ceiling").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import scipy.optimize
import scipy.special

from analysis.stats.decision import Pending, Verdict
from analysis.stats.spending import spent

__all__ = ["DIRECTIONS", "ShareBoundaries", "ShareCount", "ShareStage", "ShareTest", "contra_boundaries",
           "quantile_interval", "seeds_to_decide", "share_boundaries", "share_count", "share_crosses",
           "share_decisions", "share_power", "share_test", "undecidable_words"]

DIRECTIONS = ("greater", "less")
#: The level of the claim's own test unless a caller says otherwise.
LEVEL = 0.05


class ShareCount(NamedTuple):
    """A claim's observation at a stage: seeds beyond the threshold, seeds strictly short of it
    (on the other side), and seeds with a finite value (ties at the threshold are ``n - beyond -
    short``)."""

    beyond: int
    short: int
    n: int


def _check(q: float, level: float) -> None:
    if not 0 < q < 1:
        raise ValueError(f"q is {q}; write a share in (0, 1), e.g. 0.5 (the median seed)")
    if not 0 < level < 1:
        raise ValueError(f"level is {level}; write a level in (0, 1), e.g. 0.05")


def share_count(values: Sequence[float] | np.ndarray, threshold: float, direction: str) -> ShareCount:
    """:class:`ShareCount` of per-seed ``values`` (non-finite ones left out) against ``threshold``:
    ``beyond`` is strictly above it (``direction = "greater"``) or strictly below (``"less"``)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r} is not one of {', '.join(DIRECTIONS)}")
    x = np.asarray(values, dtype=float).ravel()
    x = x[np.isfinite(x)]
    above, below = int(np.sum(x > threshold)), int(np.sum(x < threshold))
    beyond, short = (above, below) if direction == "greater" else (below, above)
    return ShareCount(beyond, short, int(x.size))


# ------------------------------------------------------------------------- fixed design


def seeds_to_decide(level: float = LEVEL, q: float = 0.5) -> int:
    """The fewest seeds at which the exact test of ``share > q`` can reach ``p < level``: the
    smallest ``n`` with ``q ** n < level`` (every seed beyond). 5 at level 0.05 and q = 0.5, 6
    at 0.025 (the opposite side at the two-sided level), 7 at 0.01."""
    _check(q, level)
    n = max(1, math.floor(math.log(level) / math.log(q)))
    while q ** n >= level:
        n += 1
    while n > 1 and q ** (n - 1) < level:
        n -= 1
    return n


def undecidable_words(n: int, level: float = LEVEL, q: float = 0.5) -> str:
    """What a user reads instead of a verdict when ``n`` seeds cannot reach ``level``; ``""``
    when they can."""
    need = seeds_to_decide(level, q)
    if n >= need:
        return ""
    what = "the median seed" if q == 0.5 else f"a share of {q:g} of the seeds"
    return (f"cannot be decided with {n} seeds without assuming the seeds' values are roughly normal: "
            f"the exact test that {what} lies beyond the threshold needs at least {need} seeds at level {level:.3g}")


def quantile_interval(values: Sequence[float] | np.ndarray, order: float = 0.5,
                      coverage: float = 0.95) -> tuple[float, float, float]:
    """``(lower, upper, coverage)``: the distribution-free interval ``[x_(l), x_(u)]`` of order
    statistics for the ``order``-quantile, each end missing it with probability at most ``(1 -
    coverage) / 2`` for any continuous distribution (``P(x_(l) > xi) = P(Bin(n, order) < l)``),
    and the coverage it has (at least ``coverage``). An end no order statistic reaches with
    ``n`` seeds is infinite (fewer than 6 seeds for the median at 95%)."""
    x = np.sort(np.asarray(values, dtype=float).ravel())
    x = x[np.isfinite(x)]
    n, tail = x.size, (1.0 - coverage) / 2.0
    if n == 0:
        return -math.inf, math.inf, 1.0
    cdf = scipy.special.bdtr(np.arange(n + 1), n, order)  # cdf[j] = P(Bin <= j)
    ok_lo = np.flatnonzero(cdf[:n] <= tail)  # l - 1 = j: P(Bin <= l - 1) <= tail
    l_ = int(ok_lo[-1]) + 1 if ok_lo.size else 0
    sf = scipy.special.bdtrc(np.arange(n + 1), n, order)  # sf[j] = P(Bin > j) = P(Bin >= j + 1)
    ok_hi = np.flatnonzero(sf[:n] <= tail)  # u = j + 1: P(Bin >= u) <= tail
    u = int(ok_hi[0]) + 1 if ok_hi.size else n + 1
    miss_lo = float(cdf[l_ - 1]) if l_ >= 1 else 0.0
    miss_hi = float(sf[u - 1]) if u <= n else 0.0
    lo = float(x[l_ - 1]) if l_ >= 1 else -math.inf
    hi = float(x[u - 1]) if u <= n else math.inf
    return lo, hi, 1.0 - miss_lo - miss_hi


def _at_least(k: int, n: int, q: float) -> float:
    """``P(Bin(n, q) >= k)``."""
    return 1.0 if k <= 0 else float(scipy.special.bdtrc(k - 1, n, q))


def _critical(n: int, level: float, q: float) -> int:
    """The smallest count beyond whose exact one-sided p at ``q`` is below ``level`` (``n + 1``:
    none)."""
    return next((c for c in range(n + 1) if _at_least(c, n, q) < level), n + 1)


@dataclass(frozen=True)
class ShareTest:
    """The exact test of a share claim over a cell's seeds (:func:`share_test`)."""

    direction: str
    threshold: float
    q: float
    level: float
    n: int
    beyond: int
    short: int
    ties: int  # seeds exactly at the threshold: counted neither beyond nor short
    estimate: float  # beyond / n
    p: float  # exact one-sided p of H0: share beyond <= q
    p_opposite: float  # exact one-sided p of H0: share short <= 1 - q
    p_contra: float  # min(1, 2 p_opposite): compared with alpha (the two-sided level), as verdicts.contra_p
    interval: tuple[float, float]  # Clopper-Pearson 95% interval of the share beyond
    share_bound: float  # one-sided Clopper-Pearson bound of the share at 1 - level (lower)
    critical: int  # the fewest seeds beyond that reach p < level (n + 1: none)
    bound: float  # the order statistic beyond which the claim is supported (-inf/inf: none)
    quantile: float  # the seeds' sample quantile the claim is about (the median for q = 0.5)
    quantile_interval: tuple[float, float]  # its distribution-free interval of coverage >= 0.95
    quantile_coverage: float
    decidable: bool  # some outcome at n seeds reaches p < level
    seeds_needed: int  # seeds_to_decide(level, q)
    words: str  # "" when decidable, else why no verdict (undecidable_words)

    @property
    def supported(self) -> bool:
        """``p < level`` (uncorrected: a family's correction decides the verdict)."""
        return bool(self.p < self.level)


def share_test(values: Sequence[float] | np.ndarray, threshold: float, direction: str = "greater", *,
               q: float = 0.5, level: float = LEVEL) -> ShareTest:
    """The exact (sign / binomial) test that the share of seeds beyond ``threshold`` exceeds ``q``.

    Parameters
    ----------
    values
        One value per seed (non-finite ones left out).
    threshold, direction
        The claim: values above (``"greater"``) or below (``"less"``) the threshold.
    q
        The share under the null; 0.5: the median seed lies beyond the threshold.
    level
        The level the one-sided bounds, the critical count and ``decidable`` refer to (the claim's
        Holm step, e.g.); the p-values do not depend on it.

    Returns
    -------
    ShareTest
        Counts, the share and its intervals, the exact p of the claim and of its opposite side,
        the value-scale bound (supported iff it lies beyond the threshold), the quantile the claim
        is about with its distribution-free 95% interval, and whether ``n`` seeds can decide it
        (``words`` says why not). With no finite value: p = 1 and not decidable.
    """
    _check(q, level)
    count = share_count(values, threshold, direction)
    k, s, n = count
    x = np.sort(np.asarray(values, dtype=float).ravel())
    x = x[np.isfinite(x)]
    need = seeds_to_decide(level, q)
    order = 1.0 - q if direction == "greater" else q
    if n == 0:
        nan = math.nan
        return ShareTest(direction, float(threshold), q, level, 0, 0, 0, 0, nan, 1.0, 1.0, 1.0, (0.0, 1.0), 0.0,
                         1, nan, nan, (-math.inf, math.inf), 1.0, False, need, undecidable_words(0, level, q))
    p = _at_least(k, n, q)
    p_opp = _at_least(s, n, 1.0 - q)
    ci = (float(scipy.special.betaincinv(k, n - k + 1, 0.025)) if k > 0 else 0.0,
          float(scipy.special.betaincinv(k + 1, n - k, 0.975)) if k < n else 1.0)
    share_bound = float(scipy.special.betaincinv(k, n - k + 1, level)) if k > 0 else 0.0
    c = _critical(n, level, q)
    if c > n:
        bound = -math.inf if direction == "greater" else math.inf
    else:
        bound = float(x[n - c]) if direction == "greater" else float(x[c - 1])
    lo, hi, cov = quantile_interval(x, order)
    return ShareTest(
        direction=direction, threshold=float(threshold), q=q, level=level, n=n, beyond=k, short=s,
        ties=n - k - s, estimate=k / n, p=p, p_opposite=p_opp, p_contra=min(1.0, 2.0 * p_opp),
        interval=ci, share_bound=share_bound, critical=c, bound=bound,
        quantile=float(np.quantile(x, order)), quantile_interval=(lo, hi), quantile_coverage=cov,
        decidable=n >= need, seeds_needed=need, words=undecidable_words(n, level, q))


# ------------------------------------------------------------------------- group-sequential design


@dataclass(frozen=True)
class ShareBoundaries:
    """Exact group-sequential boundaries of a count (:func:`share_boundaries`)."""

    seeds: tuple[int, ...]  # seeds at each stage
    n_max: int  # the design's maximum (information fractions n_k / n_max)
    level: float
    top: float  # the highest level the claim may be tested at: the boundaries are nested over [level, top]
    spending: str
    p0: float  # the success probability of the count under the null's worst case
    counts: tuple[int, ...]  # the fewest counted seeds that cross at each stage (n_k + 1: none can)
    crossed: tuple[float, ...]  # exact probability under p0 of crossing by each stage
    allowed: tuple[float, ...]  # alpha spent by each stage (crossed[k] < allowed[k])

    def reachable(self, k: int) -> bool:
        """Whether stage ``k`` can cross at all."""
        return self.counts[k] <= self.seeds[k]


def _stage_mass(cont: np.ndarray, prev: int, n_k: int, p0: float) -> np.ndarray:
    """``P(count = j at a stage of n_k seeds, not crossed before)`` from the previous stage's
    continuation mass ``cont`` (over counts 0..) at ``prev`` seeds: binomial increments."""
    m = n_k - prev
    j = np.arange(m + 1)
    step = np.array([math.comb(m, i) for i in j], dtype=float) * p0 ** j * (1.0 - p0) ** (m - j)
    f = np.zeros(n_k + 1)
    conv = np.convolve(cont, step)
    f[:conv.size] = conv
    return f


def _tail(f: np.ndarray) -> np.ndarray:
    """``tail[c] = P(count >= c, not crossed before)``, ``c = 0 .. n_k + 1``."""
    return np.concatenate([np.cumsum(f[::-1])[::-1], [0.0]])


def _first_below(total: float, tail: np.ndarray, allowed: float) -> int:
    """The smallest count whose cumulative crossing probability stays below ``allowed``."""
    return int(np.flatnonzero(total + tail < allowed)[0]) if total < allowed else tail.size - 1


def _crossing(seeds: tuple[int, ...], p0: float, counts: tuple[int, ...]) -> tuple[float, ...]:
    """Exact probability of crossing ``counts`` by each stage when each seed is beyond with
    probability ``p0``."""
    cont, total, prev, out = np.array([1.0]), 0.0, 0, []
    for n_k, c in zip(seeds, counts, strict=True):
        f = _stage_mass(cont, prev, n_k, p0)
        total += float(_tail(f)[min(c, n_k + 1)])
        out.append(total)
        cont, prev = f[:c].copy(), n_k
    return tuple(out)


def _spent(spending: str, levels: np.ndarray, t: float) -> np.ndarray:
    """:func:`analysis.stats.spending.spent` at several levels and one information fraction."""
    fn: Any = spent
    return np.asarray(fn(spending, np.asarray(levels, dtype=float), t), dtype=float).reshape(-1)


@functools.lru_cache(maxsize=4096)
def _closed_form(spending: str, t: float) -> bool:
    """Whether :func:`_inverse`'s closed forms invert :func:`spent` at fraction ``t``."""
    s = np.array([1e-6, 1e-3, 0.01, 0.05, 0.2])
    a = _inverse(spending, s, t, check=False)
    return bool(np.all(np.isfinite(a)) and np.allclose(_spent(spending, a, t), s, rtol=1e-9, atol=0.0))


def _inverse(spending: str, s: np.ndarray, t: float, *, check: bool = True) -> np.ndarray:
    """The levels at which ``spending`` has spent ``s`` by fraction ``t`` (``inf`` where none
    below 1 has): the Lan-DeMets forms inverted in closed form (O'Brien-Fleming ``2 Phi(sqrt t
    z_{s/2})``, Pocock ``s / log(1 + (e - 1) t)``), used where they agree with :func:`spent`
    itself, else found by root-finding (another form)."""
    s = np.asarray(s, dtype=float)
    if not check or _closed_form(spending, t):
        with np.errstate(all="ignore"):
            if spending == "obrien-fleming":
                a = 2.0 * scipy.special.ndtr(math.sqrt(t) * scipy.special.ndtri(np.minimum(s, 2.0) / 2.0))
            elif spending == "pocock":
                a = s / math.log1p((math.e - 1.0) * t) if t > 0 else np.full(s.shape, np.inf)
            else:
                a = np.full(s.shape, np.nan)
        if not check:
            return a
    else:
        top = float(_spent(spending, np.array([1.0 - 1e-12]), t)[0])
        a = np.array([0.0 if v <= 0 else np.inf if v >= top else scipy.optimize.brentq(
            lambda x, v=v: float(_spent(spending, np.array([x]), t)[0]) - v, 1e-300, 1.0 - 1e-12,
            xtol=1e-300, rtol=1e-14) for v in s.tolist()])
    return np.where(a < 1.0, a, np.inf)


def _vectors(seeds: tuple[int, ...], n_max: int, lo: float, hi: float, spending: str,
             p0: float) -> set[tuple[int, ...]]:
    """Every boundary vector the stage-by-stage rule (each stage the smallest count that keeps
    the cumulative crossing probability below the alpha spent by then) gives at some level in
    ``[lo, hi]``. Within a range of levels over which the earlier stages' counts are fixed, a
    stage's count falls with the level: count ``c`` is allowed above the level at which the alpha
    spent by then equals its cumulative crossing probability (the spending function inverted),
    so the range splits at those levels, and every piece is walked on to the next stage."""
    t = [min(n / n_max, 1.0) for n in seeds]
    out: set[tuple[int, ...]] = set()

    def walk(k: int, lo: float, hi: float, cont: np.ndarray, total: float, prefix: tuple[int, ...],
             prev: int) -> None:
        if k == len(seeds):
            out.add(prefix)
            return
        n_k = seeds[k]
        f = _stage_mass(cont, prev, n_k, p0)
        tail = _tail(f)
        at = _inverse(spending, total + tail, t[k])  # count c is allowed at levels above at[c]
        edges = np.unique(np.concatenate([[lo, hi], at[(at > lo) & (at < hi)]]))
        # each edge, and the open piece between two edges (its midpoint), with the closure of its range
        points = np.concatenate([edges, (edges[1:] + edges[:-1]) / 2])
        ranges = np.concatenate([np.stack([edges, edges], 1), np.stack([edges[:-1], edges[1:]], 1)])
        allowed = points[:, None] > at[None, :]
        counts = np.where(allowed.any(1), allowed.argmax(1), n_k + 1)
        for c in np.unique(counts):
            r = ranges[counts == c]
            c = int(c)
            walk(k + 1, float(r[:, 0].min()), float(r[:, 1].max()), f[:c].copy(),
                 total + float(tail[c]), (*prefix, c), n_k)

    walk(0, lo, hi, np.array([1.0]), 0.0, (), 0)
    return out


@functools.lru_cache(maxsize=65536)
def _boundaries(seeds: tuple[int, ...], n_max: int, level: float, top: float, spending: str,
                p0: float) -> ShareBoundaries:
    vectors = _vectors(seeds, n_max, level, max(top, level), spending, p0)
    counts = tuple(int(c) for c in np.max(np.array(sorted(vectors)), axis=0))
    allowed = np.asarray(spent(spending, level, np.asarray(seeds, dtype=float) / n_max), dtype=float).reshape(-1)
    return ShareBoundaries(seeds=seeds, n_max=n_max, level=level, top=max(top, level), spending=spending, p0=p0,
                           counts=counts, crossed=_crossing(seeds, p0, counts),
                           allowed=tuple(float(a) for a in allowed))


def _stages(seeds: Sequence[int], n_max: int | None) -> tuple[tuple[int, ...], int]:
    s = tuple(int(n) for n in seeds)
    if not s or s[0] < 1 or any(b < a for a, b in zip(s, s[1:], strict=False)):
        raise ValueError(f"stage seeds must be positive and non-decreasing, got {tuple(seeds)}")
    m = s[-1] if n_max is None else int(n_max)
    if m < 1:
        raise ValueError(f"n_max is {n_max}; write the design's maximum seeds")
    return s, m


def share_boundaries(seeds: Sequence[int], level: float = LEVEL, spending: str = "obrien-fleming", *,
                     q: float = 0.5, n_max: int | None = None, top: float | None = None) -> ShareBoundaries:
    """The claim's side: at each stage the fewest seeds beyond the threshold that decide
    ``share > q``, spending ``level`` by ``spending`` (Lan-DeMets,
    :func:`analysis.stats.spending.spent`) at information fractions ``n_k / n_max``.

    Stage by stage, the boundary is the smallest count whose exact cumulative crossing
    probability under ``share = q`` stays below the alpha spent by then. A discrete test so built
    is not nested in its level: at a higher level an earlier stage may cross more often and
    leave less for a later one, whose boundary then rises (3 -> 8 seeds one a stage,
    O'Brien-Fleming: 7 of 8 decides at level 0.036 but not at 0.037). A claim whose level grows
    (Holm; the Maurer-Bretz procedure of :mod:`analysis.stats.sequential`) needs the tests
    nested, so each stage's count is the largest the rule gives at any level in ``[level,
    top]``: nested over that range (a higher level never needs more seeds beyond at any stage),
    still spending at most ``level`` by each stage, and the plain rule at ``level = top``.

    Parameters
    ----------
    seeds
        Seeds with a value at each stage so far (e.g. ``(3, 5, 8)``; the seeds actually observed
        where a stage lost one: the boundaries of stage k depend only on stages 1..k).
    level
        The one-sided level of the claim's test (its current Holm / Maurer-Bretz level).
    q
        The share beyond under the null.
    n_max
        The design's maximum seeds (default: the last of ``seeds``). A single stage at ``n_max``
        is the fixed exact test (every spending function spends ``level`` at t = 1).
    top
        The highest level the claim can be tested at (the family's alpha); default ``level``.

    Returns
    -------
    ShareBoundaries
        ``counts[k]``: the smallest count crossing at stage k; ``crossed[k]``, the exact null
        probability (share = q) of crossing by stage k, always below ``allowed[k]``, the alpha
        spent by then. Deterministic; cached (microseconds when repeated, about a millisecond
        the first time).
    """
    _check(q, level)
    s, m = _stages(seeds, n_max)
    return _boundaries(s, m, float(level), float(level if top is None else top), str(spending), float(q))


def contra_boundaries(seeds: Sequence[int], level: float = LEVEL / 2, spending: str = "obrien-fleming", *,
                      q: float = 0.5, n_max: int | None = None, top: float | None = None) -> ShareBoundaries:
    """The opposite side's boundaries: at each stage the fewest seeds *short of* the threshold
    that show ``share short > 1 - q`` (so ``share beyond < q``). ``level`` (and ``top``) are that
    one-sided test's own: half the opposite family's (the two-sided level, as the t's opposite
    side in :mod:`analysis.stats.sequential`)."""
    _check(q, level)
    s, m = _stages(seeds, n_max)
    return _boundaries(s, m, float(level), float(level if top is None else top), str(spending), float(1.0 - q))


def share_crosses(counts: Sequence[int], seeds: Sequence[int], level: float, spending: str = "obrien-fleming", *,
                  q: float = 0.5, contra: bool = False, n_max: int | None = None,
                  top: float | None = None) -> tuple[bool, int]:
    """Whether a claim's test at ``level`` has crossed by the last of the stages given:
    ``(crossed, boundary)``, the boundary being the last stage's count.

    ``counts`` are the seeds beyond (``contra``: short of) the threshold at each stage so far,
    ``seeds`` the seeds with a value at each; ``level`` and ``top`` are that side's one-sided
    levels (the opposite side's: half the family's). Every stage so far is compared with its
    boundary at ``level``: a claim whose level was raised (Maurer-Bretz) is rejected if its path
    crossed the new level's boundary at an earlier stage too, as that procedure requires. The
    per-stage test :func:`analysis.stats.sequential.sequential_decisions` needs in place of a t
    against its boundary."""
    if len(counts) != len(seeds):
        raise ValueError(f"{len(counts)} counts for {len(seeds)} stages")
    b = (contra_boundaries if contra else share_boundaries)(seeds, level, spending, q=q, n_max=n_max, top=top)
    return any(int(x) >= c for x, c in zip(counts, b.counts, strict=True)), b.counts[-1]


def share_power(seeds: Sequence[int], share: float, level: float = LEVEL, spending: str = "obrien-fleming", *,
                q: float = 0.5, n_max: int | None = None, top: float | None = None) -> float:
    """The exact probability that the claim is supported by the last of ``seeds`` when each
    seed lies beyond the threshold with probability ``share`` (its power; at ``share = q`` its
    type-I error). ``seeds = (n,)``: the fixed test at ``n`` seeds."""
    b = share_boundaries(seeds, level, spending, q=q, n_max=n_max, top=top)
    return _crossing(b.seeds, float(share), b.counts)[-1]


@dataclass(frozen=True)
class ShareStage:
    """A share claim at one stage of a design (:func:`share_decisions`)."""

    stage: int
    seeds: int
    beyond: int
    short: int
    boundary: int  # seeds beyond needed at this stage (seeds + 1: none can)
    contra_boundary: int  # seeds short needed for "contradicted" (seeds + 1: none can)
    decision: str  # supported, contradicted, continue, inconclusive
    decided_at: int | None


def share_decisions(counts: Sequence[ShareCount | tuple[int, int, int]], *, level: float = LEVEL,
                    spending: str = "obrien-fleming", q: float = 0.5, contra_level: float | None = None,
                    n_max: int | None = None, top: float | None = None,
                    contra_top: float | None = None) -> list[ShareStage]:
    """One claim's decision at each observed stage of a group-sequential design, its level fixed.

    ``counts``: per stage ``(beyond, short, n)`` (:class:`ShareCount`, over the stage's seeds so
    far). The claim is ``supported`` at the first stage whose count beyond reaches its boundary
    at ``level``, else ``contradicted`` where the count short reaches the opposite side's
    boundary at ``contra_level / 2`` (the two-sided level; ``contra_level`` defaults to
    ``level``), else ``continue``, and ``inconclusive`` at ``n_max`` (default: the last stage's
    seeds). ``top`` and ``contra_top`` (default the levels) as in :func:`share_boundaries`. A
    decided claim stays decided: later stages repeat its decision. A single stage at ``n_max``
    is the fixed design's exact test.
    """
    obs = [ShareCount(*map(int, c)) for c in counts]
    if not obs:
        return []
    seeds = tuple(c.n for c in obs)
    s, m = _stages(seeds, n_max)
    cl = level if contra_level is None else contra_level
    ct = cl if contra_top is None else contra_top
    own = share_boundaries(s, level, spending, q=q, n_max=m, top=top)
    opp = contra_boundaries(s, cl / 2, spending, q=q, n_max=m, top=ct / 2)
    out: list[ShareStage] = []
    decided: tuple[str, int] | None = None
    for k, c in enumerate(obs):
        if decided is None:
            if c.beyond >= own.counts[k]:
                decided = (Verdict.SUPPORTED, k)
            elif c.short >= opp.counts[k]:
                decided = (Verdict.CONTRADICTED, k)
            elif c.n >= m:
                decided = (Verdict.INCONCLUSIVE, k)
        dec, at = decided if decided is not None else (Pending.CONTINUE, None)
        out.append(ShareStage(stage=k, seeds=c.n, beyond=c.beyond, short=c.short, boundary=own.counts[k],
                              contra_boundary=opp.counts[k], decision=dec, decided_at=at))
    return out
