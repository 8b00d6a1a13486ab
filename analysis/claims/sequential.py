"""A group-sequential design's decisions on the seeds a store holds (``layerstate sequential``,
``layerstate run --design``).

A design (``[design]``: :class:`analysis.stats.design.Design`) declares before any result
how many seeds each stage adds and how alpha is spent over the stages. Stage ``k`` is the first
``n_k`` seeds of each cell; its claims are evaluated on exactly those (a read-only view of the
store, :class:`store.view.StoreView` with ``seed_below``), so every stage's estimate is
reproducible from the store and a decision taken at a stage never changes when more seeds come.
The decisions (:func:`analysis.stats.sequential.sequential_decisions`: Lan-DeMets boundaries for
t over seeds, the Maurer-Bretz Holm-type procedure, repeated confidence intervals) say which
claims are decided and which (task, arch, variant) cells the next stage trains: only those that
undecided claims read. A stage is evaluated only when the store holds its seeds for every cell
that stage needs; the last line says what to train next.

A profile-match claim (an exact permutation test) is a single look per architecture at its
maximum, inside the design's families (:func:`analysis.stats.sequential.profile_hypotheses`). A
difference claim with a margin can end ``equivalent`` or ``negligible`` (the margin's sequential
TOST), as the fixed design says. Each stage shows the one-sided bound a verdict rests on beside the
repeated two-sided interval. A bound or readable_by claim decided by the share of seeds beyond its
threshold (docs/ceiling.md) is observed at each stage by its row's counts (``beyond``, ``short``,
``n_seeds``) and decided by the exact boundaries of :mod:`analysis.stats.seedshare`; its stages
show the share beyond with its repeated interval and the seeds it needed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from analysis.claims.cells import captured_seeds, claim_cells, run_seconds, seeds_held
from analysis.claims.evaluate import evaluate_claims, stored_probe_profiles
from analysis.claims.hypotheses import family_counts, from_claim, profile_hypotheses
from analysis.claims.metrics import resolve_length
from analysis.claims.sequences import crossed_said
from analysis.claims.spec import Claim, ClaimError, StaleResultError
from analysis.claims.verdicts import staged_verdict
from analysis.stats.decision import Verdict
from analysis.stats.design import Cell, Design, DesignError
from analysis.stats.ranges import unreachable
from analysis.stats.seedshare import ShareCount
from analysis.stats.sequential import StageResult, sequential_decisions
from store.inspect import seed_range
from store.view import StoreView


@dataclass(frozen=True)
class SequentialRun:
    """The stages a store holds (``stages``, in order), each cell's seeds held (``held``), each
    claim's own maximum
    (``caps``), its test in words (``tests``) and the runs each stage added with their CPU
    seconds (``added``: per stage, (runs, seconds))."""

    design: Design
    stages: list[StageResult]
    held: dict[Cell, int]
    caps: dict[str, int] = field(default_factory=dict)
    tests: dict[str, str] = field(default_factory=dict)
    # a difference claim's margin's test in words (``within 0 +- 0.05``), the test that decides it
    # ``equivalent`` or ``negligible``
    margin_tests: dict[str, str] = field(default_factory=dict)
    added: list[tuple[int, float]] = field(default_factory=list)
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)  # what a claim's metric can take
    cells: tuple[Cell, ...] = ()  # the cells the claims read
    shares: frozenset[str] = frozenset()  # the claims decided by the share of seeds beyond their threshold
    # a share claim's row at each stage it was evaluated at, (stage, claim) -> (estimate, lower, upper):
    # its seeds' q-quantile (the median seed) with the fixed look's distribution-free 95% interval
    quantiles: dict[tuple[int, str], tuple[float, float, float]] = field(default_factory=dict)
    # the next stage when its seeds are trained but not yet captured or analysed, in one line
    # (what it lacks): no verdict of it is made, since its results do not hold its seeds
    incomplete: str = ""
    # what a rejection by the t test over seeds costs on a bounded metric (statistic = "mean"),
    # per claim (row) id: appended to a supported or contradicted verdict's reason, as the fixed
    # test's reason has it (docs/measured.md, "Tests at the ceiling")
    caveats: dict[str, str] = field(default_factory=dict)

    def short(self) -> dict[Cell, int]:
        """Cells the claims read that hold fewer seeds than the first stage (with what they hold)."""
        return {c: self.held.get(c, 0) for c in self.cells if self.held.get(c, 0) < self.design.first_seeds}

    def interval(self, c) -> tuple[float, float]:
        """A claim's repeated interval at a stage, inside the range its metric can take."""
        lo, hi = self.ranges.get(c.id, (-np.inf, np.inf))
        return max(c.rci[0], lo), min(c.rci[1], hi)

    def boundary_text(self, c) -> str:
        """A stage's boundaries as the estimate they need, each one the metric cannot reach said
        in words (:func:`analysis.stats.ranges.unreachable`: not crossable at this stage)."""
        lo, hi = self.ranges.get(c.id, (-np.inf, np.inf))
        words = [(f"{past} (not crossable at this stage)" if (past := unreachable(b, lo, hi)) else signed(b))
                 for b in decided_by(c)[0]]
        return ", ".join(words) or "–"


def _added(store, seeds: Sequence[int]) -> list[tuple[int, float]]:
    """Per stage: the runs whose seed it added (seed in [n_{k-1}, n_k)) and their CPU seconds."""
    out = [[0, 0.0] for _ in seeds]
    for rid in store.run_ids():
        a = store.run_attrs(rid)
        s = int(a.get("seed", 0))
        for k, n in enumerate(seeds):
            if s < n and (k == 0 or s >= seeds[k - 1]):
                out[k][0] += 1
                out[k][1] += run_seconds(a) or 0.0
                break
    return [(int(n), float(t)) for n, t in out]


def decided_by(c) -> tuple[tuple[float, ...], float, bool]:
    """The boundaries and level of the test a claim's stage is read against, and whether that is
    its margin's test: the margin's two one-sided tests for a claim decided ``equivalent`` or
    ``negligible`` by them (a difference claim with a margin), its own test otherwise."""
    if c.decision in (Verdict.EQUIVALENT, Verdict.NEGLIGIBLE) and c.margin_boundaries:
        return c.margin_boundaries, c.margin_level, True
    return c.boundaries, c.level, False


def _test_words(h) -> str:
    if h.test == "exact":
        return "an exact permutation test of the profiles, one look at its maximum"
    if h.statistic == "share":  # the share is what its estimate, interval and boundary are in
        who = "the median seed beyond it" if h.q == 0.5 else f"more than {h.q:g} of the seeds beyond it"
        return (f"greater than {h.q:g} (the share of seeds {'above' if h.test == 'greater' else 'below'} "
                f"{h.value:g}: {who}, exact sign test)")
    m = f"{h.margin:g}" if h.margin is not None else ""
    return {"greater": f"greater than {h.value:g}", "less": f"less than {h.value:g}",
            "two-sided": f"different from {h.value:g}", "within": f"within {h.value:g} +- {m}",
            "outside": f"outside {h.value:g} +- {m}"}[h.test]


def evaluate_sequential(store, claims: Sequence[Claim], design: Design, *,
                        absent: Sequence[Claim] = ()) -> SequentialRun:
    """Decide ``claims`` stage by stage on the seeds ``store`` holds (nothing is written).

    ``absent``: the declared claims of other parts of the grid (not evaluated here); they count
    in the design's Holm families (:func:`analysis.claims.hypotheses.family_counts`) and are never
    rejected here. A claim's maximum is the lowest ``design.cap`` of the architectures it reads.
    A profile_match claim is one single look per architecture at its maximum (its exact
    permutation p), inside the design's families. A share claim (``Claim.by_share``) is observed
    at each stage by its row's ``beyond``, ``short`` and ``n_seeds`` (:func:`share_count_of`; a
    row without them leaves it unobserved at that stage), and its row's ``estimate``, ``lower``,
    ``upper`` (the median seed and its interval) are kept in ``SequentialRun.quantiles``."""
    hypotheses = []
    for c in claims:
        if c.per_arch:
            found = profile_hypotheses(c)
        else:
            try:
                found = [from_claim(c)]
            except DesignError:  # no arch named: the cells of its task(s) that the store holds
                found = [from_claim(c, cells=claim_cells(store, c))]
        hypotheses += [h.model_copy(update={"max_seeds": min(design.cap(a) for _, a, _ in h.cells)}) for h in found]
    exact = {h.id for h in hypotheses if h.test == "exact"}
    shares = {h.id for h in hypotheses if h.statistic == "share"}
    quantiles: dict[tuple[int, str], tuple[float, float, float]] = {}
    counts = family_counts(list(absent))
    held = seeds_held(store)
    ready = captured_seeds(store, _with_lengths(store, claims))
    observed: list[dict[str, Any]] = []
    stages: list[StageResult] = []
    incomplete = ""
    needed = {cell for h in hypotheses for cell in h.cells}
    for n in design.seeds():
        if not needed or any(held.get(cell, 0) < n for cell in needed):
            break
        stage = f"stage {len(observed) + 1} ({n} seeds)"
        if any(ready.get(cell, 0) < n for cell in needed):  # trained, not captured: no verdict yet
            short = [(cell, ready.get(cell, 0)) for cell in sorted(needed) if ready.get(cell, 0) < n]
            incomplete = (f"{stage} is incomplete: " + ", ".join(
                f"{'/'.join(cell)} {seed_range(list(range(got, n)))}" for cell, got in short)
                + f" {'is' if sum(n - got for _, got in short) == 1 else 'are'} trained but not captured")
            break
        view: Any = StoreView([store], seed_below=n)  # read as a Store: the methods claims read
        try:
            res = evaluate_claims(view, list(claims), probes=stored_probe_profiles(view), absent=list(absent))
        except StaleResultError as exc:  # captured, not yet analysed: the results lack the stage's runs
            incomplete = f"{stage} is incomplete: its runs are captured but not all analysed ({exc})"
            break
        obs: dict[str, Any] = {}
        for i in range(res.sizes["claim"]):
            r = res.isel(claim=i)
            cid = str(r.claim.values)
            if str(r.verdict.values) == Verdict.NOT_EVALUABLE:
                continue
            if cid in shares:
                count = share_count_of(r)
                if count is not None:
                    obs[cid] = count
                    quantiles[(len(observed), cid)] = (float(r.estimate), float(r.lower), float(r.upper))
            else:
                obs[cid] = float(r.p) if cid in exact else (float(r.estimate), float(r.se), float(r.df))
        observed.append(obs)
        stages = sequential_decisions(design, hypotheses, observed, absent=counts)
        needed = set(stages[-1].cells_next)
    tested = {c.id: c for c in claims}
    return SequentialRun(design, stages, held, caps={h.id: int(h.max_seeds or design.max_seeds)
                                                        for h in hypotheses},
                         tests={h.id: _test_words(h) for h in hypotheses},
                         margin_tests={h.id: _test_words(mh) for h in hypotheses if (mh := h.margin_test()) is not None},
                         cells=tuple(dict.fromkeys(cell for h in hypotheses for cell in h.cells)),
                         ranges={c.id: (0.0, 1.0) if c.id in shares else c.estimate_range() for c in tested.values()},
                         added=_added(store, [st.seeds for st in stages]), shares=frozenset(shares),
                         quantiles=quantiles, incomplete=incomplete,
                         caveats={rid: caveat for c in claims for rid in c.row_ids()
                                  if (caveat := c.ceiling_caveat(Verdict.SUPPORTED))})


def _with_lengths(store, claims: Sequence[Claim]) -> list[Claim]:
    """The claims with the length each reads (:func:`resolve_length`); one that cannot be given
    one is kept as declared (its evaluation says why)."""
    out = []
    for c in claims:
        try:
            out.append(resolve_length(store, c))
        except ClaimError:
            out.append(c)
    return out


#: The columns of a claims row a share claim's stage is observed by.
SHARE_COLUMNS = ("beyond", "short", "n_seeds")


def share_count_of(row) -> ShareCount | None:
    """A share claim's observation from its claims row at a stage: ``ShareCount(beyond, short,
    n_seeds)``; None (not observed: the claim continues untested) where a column is missing or
    not a count."""
    try:
        nums = [float(row[c]) for c in SHARE_COLUMNS]
    except (KeyError, TypeError, ValueError):
        return None
    if not all(np.isfinite(nums)) or nums[2] < 1:
        return None
    return ShareCount(int(nums[0]), int(nums[1]), int(nums[2]))


def next_cells(run: SequentialRun) -> dict[Cell, int]:
    """The cells the next stage trains and the seeds each reaches (empty: the design is done)."""
    if not run.stages:
        return {}
    last = run.stages[-1]
    if last.seeds_next is None:
        return {}
    return {cell: int(last.seeds_next) for cell in last.cells_next}


def sequential_dataset(run: SequentialRun):
    """The stages as the stored result ``sequential`` (docs/sequential.md): per stage and claim
    the decision, estimate, SE, df, level, critical t, boundaries and repeated interval; per
    claim its final decision, the stage deciding it (0: none), its test and maximum; per stage
    the seeds per cell, the cells the next stage trains, the runs it added and their CPU
    seconds; the design as a JSON attribute. A share claim (``by_share``) also has per stage its
    counts ``beyond`` and ``short``, the seeds beyond its own test ``needed`` and short of the
    threshold its opposite side needed (``contra_needed``; more than the stage's seeds: none
    could cross), and ``seed_quantile``, its seeds' q-quantile (the median seed) at that stage; its
    ``estimate`` is the share beyond, ``rci_*`` that share's repeated interval, ``bound_low``
    the share it had to reach, ``one_sided_*`` the order statistic that had to lie beyond the
    threshold (NaN where the seeds' values were not observed)."""

    ids = list(run.caps)
    K = len(run.stages)
    shape = (K, len(ids))
    num = {v: np.full(shape, np.nan) for v in ("estimate", "se", "df", "level", "critical", "bound_low",
                                                "bound_high", "rci_low", "rci_high", "conditional_power",
                                                "one_sided_low", "one_sided_high", "margin_level",
                                                "beyond", "short", "needed", "contra_needed", "seed_quantile",
                                                "margin_bound_low", "margin_bound_high")}
    decision = np.full(shape, "", dtype=object)
    outcome = np.full(shape, "", dtype=object)
    for k, st in enumerate(run.stages):
        for j, cid in enumerate(ids):
            c = st.claims.get(cid)
            if c is None or (c.decided_at is not None and c.decided_at < k):
                continue
            decision[k, j], outcome[k, j] = c.decision, c.outcome
            for v, x in (("estimate", c.estimate), ("se", c.se), ("df", c.df), ("level", c.level),
                         ("critical", c.critical), ("rci_low", c.rci[0]), ("rci_high", c.rci[1]),
                         ("conditional_power", c.conditional_power), ("one_sided_low", c.bound[0]),
                         ("one_sided_high", c.bound[1]), ("margin_level", c.margin_level),
                         ("beyond", c.beyond), ("short", c.short), ("needed", c.needed),
                         ("contra_needed", c.contra_needed)):
                num[v][k, j] = x
            if cid in run.shares and c.look is not None and (c.look, cid) in run.quantiles:
                num["seed_quantile"][k, j] = run.quantiles[(c.look, cid)][0]
            # bound_low: where the estimate must rise above; bound_high: below. Not sorted: a
            # within test whose two boundaries cross (bound_low > bound_high) cannot pass yet
            bounds, test = c.boundaries, run.tests[cid]
            if len(bounds) == 2:
                lo, hi = bounds if test.startswith("within") else bounds[::-1]
                num["bound_low"][k, j], num["bound_high"][k, j] = lo, hi
            elif len(bounds) == 1:
                num["bound_low" if test.startswith("greater") else "bound_high"][k, j] = bounds[0]
            if len(c.margin_boundaries) == 2:  # the margin's test: within, as its own test would be
                num["margin_bound_low"][k, j], num["margin_bound_high"][k, j] = c.margin_boundaries
    final = [str(decision[:, j][decision[:, j] != ""][-1]) if (decision[:, j] != "").any() else "" for j in range(len(ids))]
    decided_at = []
    for cid in ids:
        last = run.stages[-1].claims.get(cid) if run.stages else None
        decided_at.append(int(last.decided_at) + 1 if last is not None and last.decided_at is not None else 0)
    data: dict[str, Any] = {v: (("stage", "claim"), a) for v, a in num.items()}
    data["decision"] = (("stage", "claim"), decision.astype(str))
    data["outcome"] = (("stage", "claim"), outcome.astype(str))
    data["final"] = (("claim",), np.array(final, dtype=str))
    data["decided_at"] = (("claim",), np.array(decided_at, dtype=int))
    data["test"] = (("claim",), np.array([run.tests[c] for c in ids], dtype=str))
    data["margin_test"] = (("claim",), np.array([run.margin_tests.get(c, "") for c in ids], dtype=str))
    data["max_seeds"] = (("claim",), np.array([run.caps[c] for c in ids], dtype=int))
    data["by_share"] = (("claim",), np.array([c in run.shares for c in ids], dtype=bool))
    data["seeds"] = (("stage",), np.array([st.seeds for st in run.stages], dtype=int))
    data["cells_next"] = (("stage",), np.array([", ".join("/".join(c) for c in st.cells_next) for st in run.stages],
                                               dtype=str))
    data["runs_added"] = (("stage",), np.array([a[0] for a in run.added], dtype=int))
    data["cpu_seconds"] = (("stage",), np.array([a[1] for a in run.added], dtype=float))
    design = run.design.model_dump()
    return xr.Dataset(data, coords={"stage": np.arange(1, K + 1), "claim": np.array(ids, dtype=str)},
                      attrs={"design": json.dumps(design)})


def signed(x: float, sign: bool = True) -> str:
    """A number as the design's lines print it: three decimals, signed, '–' when not finite."""
    if not np.isfinite(x):
        return "–"
    return f"{x:+.3f}" if sign else f"{x:.3f}"


def one_sided(c) -> str:
    """The one-sided bound(s) a stage's verdict rests on (at the claim's level, with the stage's
    critical value): 'one-sided bound >= X' for a test of 'greater', '<= X' for 'less'."""
    lo, hi = c.bound
    parts = ([f">= {signed(lo)}"] if np.isfinite(lo) else []) + ([f"<= {signed(hi)}"] if np.isfinite(hi) else [])
    return f"one-sided bound {' and '.join(parts)}" if parts else ""


#: Columns of the fixed look (every seed held, no boundaries) that say nothing of the design's
#: verdict; a sequentially tested claim's row keeps them as ``fixed_<name>`` and blanks them.
_FIXED_ONLY = ("p", "p_adjusted", "p_zero", "p_zero_adjusted", "p_equivalence", "p_equivalence_adjusted",
               "p_margin", "p_margin_adjusted", "p_contra", "p_contra_adjusted", "power", "power_at", "mde",
               "seeds_needed", "max_t", "bound", "min_p", "p_contra_exact")

def _share_verdict(c, run: SequentialRun, head: str, what: str, k: int, fixed: str) -> tuple[str, dict[str, float]]:
    """A share claim's reason and the columns its row takes from the stage that decided it (or
    its last): the counts, the share beyond with its repeated interval (``share_lower``,
    ``share_upper``), and the median seed with the fixed look's interval at that stage's seeds
    (``estimate``, ``lower``, ``upper``: the numbers the fixed design shows, NaN where the stage
    did not observe them)."""
    med = run.quantiles.get((c.look, c.id), (np.nan, np.nan, np.nan)) if c.look is not None else (np.nan,) * 3
    lo, hi = c.rci
    which = "median seed" if "the median seed" in run.tests.get(c.id, "") else "quantile of the seeds"
    if c.decision == Verdict.INCONCLUSIVE:
        what = staged_verdict(c, None, plain=True)[1]
    text = (f"{head}: {what} at stage {k} ({c.seeds} seeds): {c.note or 'no count of its seeds'}"
            + (f"; share beyond {c.estimate:.3f}, repeated 95% interval [{lo:.3f}, {hi:.3f}]"
               if np.isfinite(c.estimate) and np.isfinite(lo) and np.isfinite(hi) else "")
            + (f"; {which} {med[0]:.4g}" if np.isfinite(med[0]) else "")
            + f"; the fixed test on every seed held: {fixed}")
    cols = {"estimate": med[0], "lower": med[1], "upper": med[2], "share": c.estimate, "share_lower": lo,
            "share_upper": hi, "beyond": c.beyond, "short": c.short, "n_seeds": c.seeds, "level": c.level,
            "se": np.nan, "df": np.nan}
    return text, cols


def sequential_verdicts(res, run: SequentialRun):
    """The claims table ``res`` (:func:`analysis.claims.evaluate_claims` on every seed held) with
    each sequentially tested claim's verdict, estimate, interval, bound, level and seeds taken
    from the stage the design decided it at (the repeated confidence interval), and the fixed
    test's verdict on every seed kept as ``fixed_verdict``. A look at all the seeds without
    the design's boundaries is not a verdict the design licenses; the design's is. A share
    claim's row keeps that stage's ``beyond``, ``short`` and ``share`` (with its repeated
    interval as ``share_lower``, ``share_upper``) and its median seed as ``estimate``
    (:func:`_share_verdict`)."""
    out = res.copy(deep=True)
    ids = [str(c) for c in out.claim.values]
    fixed = [str(v) for v in out["verdict"].values]  # StringDType arrays do not cast to str arrays
    out["fixed_verdict"] = ("claim", np.array(fixed, dtype=str))
    verdict, reason = list(fixed), [str(v) for v in out["reason"].values]
    outcome = [str(v) for v in out["outcome"].values] if "outcome" in out else []
    stage = np.zeros(len(ids), dtype=int)
    d = run.design
    head = (f"group-sequential design ({d.first_seeds} -> {d.max_seeds} seeds, +{d.stage_seeds} a stage, "
            f"{d.spending} spending)")
    last = run.stages[-1] if run.stages else None
    for j, cid in enumerate(ids):
        c = last.claims.get(cid) if last is not None else None
        if c is None:
            continue
        k = (c.decided_at if c.decided_at is not None else c.stage) + 1
        stage[j] = k
        verdict[j], what = staged_verdict(c, last.seeds_next if last is not None else None)
        if run.tests.get(cid, "").startswith("an exact"):  # one look at its maximum: the look's own numbers
            reason[j] = (f"{head}: {what} at stage {k} ({c.seeds} seeds), {c.note or 'one exact look'}; "
                         f"the fixed test on every seed held: {fixed[j]}")
            if "outcome" in out:
                outcome[j] = c.outcome
            continue
        if cid in run.shares:
            reason[j], written = _share_verdict(c, run, head, what, k, fixed[j])
        else:
            bound = run.boundary_text(c)
            if decided_by(c)[2]:
                bound = f"of its margin's test ({run.margin_tests.get(cid, 'within the margin')}) {bound}"
            lo, hi = run.interval(c)  # a proportion's interval stays in its range, a difference of two in [-1, 1]
            rests = one_sided(c)
            reason[j] = (f"{head}: {what} at stage {k} ({c.seeds} seeds): estimate {signed(c.estimate)}"
                         + (f", {rests} at level {c.level:.2g}" if rests else "")
                         + f", repeated 95% interval [{signed(lo)}, {signed(hi)}], boundary {bound}"
                         + (f"; {c.note}" if c.note and c.note != what else "")
                         + f"; the fixed test on every seed held: {fixed[j]}"
                         + (run.caveats.get(cid, "") if verdict[j] in (Verdict.SUPPORTED, Verdict.CONTRADICTED)
                            else ""))
            written = {"estimate": c.estimate, "lower": lo, "upper": hi, "n_seeds": c.seeds, "level": c.level,
                       "se": c.se, "df": c.df}
        for var, x in written.items():
            if var in out:
                out[var].values[j] = x
        # the fixed look's tests do not describe the design's verdict: kept as fixed_*, blank here
        for var in _FIXED_ONLY:
            if var in out:
                if f"fixed_{var}" not in out:
                    out[f"fixed_{var}"] = out[var].copy()
                if out[var].dtype.kind in "fc":
                    out[var].values[j] = np.nan
        side = c.bound[0] if np.isfinite(c.bound[0]) else c.bound[1]
        if "bound" in out and np.isfinite(side):  # the design's one-sided bound, not the fixed look's
            out["bound"].values[j] = side
        if "outcome" in out:
            outcome[j] = c.outcome
    for j, was in enumerate(str(v) for v in res["reason"].values):  # seeds on one evaluation set:
        said = crossed_said(was)  # the design's interval and tests leave the sequences out too
        if said and said not in reason[j]:
            reason[j] += said
    out["verdict"] = ("claim", np.array(verdict, dtype=str))
    if "outcome" in out:
        out["fixed_outcome"] = ("claim", np.array([str(v) for v in res["outcome"].values], dtype=str))
        out["outcome"] = ("claim", np.array(outcome, dtype=str))
    out["reason"] = ("claim", np.array(reason, dtype=str))
    out["sequential_stage"] = ("claim", stage)
    out.attrs["sequential"] = head
    return out
