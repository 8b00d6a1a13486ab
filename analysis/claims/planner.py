"""The seed planner (``layerstate plan``): how many seeds each declared claim needs, and what
they cost.

The claims are evaluated on the seeds a store holds (:func:`analysis.claims.evaluate_claims`:
each claim's estimate, its SE with the sequences' sampling floor, and the level of its Holm step).
For each claim the planner (:func:`analysis.stats.planning.plan`) finds the seeds at which its
own test reaches power 0.8 at its margin, at the level it is tested at; a bound or readable_by
claim declares no effect, so it is planned at the distance between its estimate and its
threshold, signed in the claim's direction (said in the table: an observed effect, which such a
plan takes at face value). An estimate on the wrong side of its threshold is no effect to
plan towards: more seeds only make the refutation surer, so the claim is "not reachable
(estimate on the wrong side)", with its power at that signed effect, never a seed count. Each
cell's cost per seed is the mean training time of its stored runs (``train_seconds``), plus
their capture time where a run records one (``capture_seconds``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.stats
import xarray as xr

from analysis.behaviour import did_not_learn
from analysis.claims.cells import cell_costs, cell_of, claim_cells, seeds_held
from analysis.claims.evaluate import evaluate_claims, stored_probe_profiles
from analysis.claims.spec import Claim
from analysis.stats.decision import FINAL, Verdict
from analysis.stats.design import Cell
from analysis.stats.planning import ClaimPlan, PlanRow, plan, plan_total, sd_per_seed
from analysis.stats.seedshare import share_power
from store.errors import LayerstateError
from store.view import StoreView

#: The stored result holding the seed plan of a store's claims (:func:`plan_dataset`), which the
#: report reads: ``layerstate stats`` and ``layerstate run`` store it beside the claims table.
SEED_PLAN = "seed_plan"
#: The power each claim's test is planned at (``layerstate plan``'s default).
PLAN_POWER = 0.8

@dataclass(frozen=True)
class Plan:
    """A seed plan: one row per claim (``rows``, in the order of ``claims``), what each was
    planned at (``claims``), why a claim was left out (``skipped``), each cell's measured CPU
    seconds per seed (``costs``) and the plan over cells (``total``)."""

    claims: list[ClaimPlan]
    rows: list[PlanRow]
    skipped: dict[str, str]
    costs: dict[Cell, float]
    total: dict[str, Any]
    observed: set[str]


def make_plan(store, claims: Sequence[Claim], *, power: float = 0.8,
              levels: dict[str, float] | None = None, evaluated: xr.Dataset | None = None,
              decided: dict[str, str] | None = None) -> Plan:
    """Plan each claim's seeds on ``store`` (nothing is written), from ``evaluated`` (the claims
    table :func:`~analysis.claims.evaluate_claims` gave for ``claims`` on it) or, without one,
    evaluating them here.

    ``levels``: each claim's level where known better than from ``claims`` alone (a part of a
    grid, whose declared family is larger: the stored claims table's ``level``). ``decided``:
    claims (row ids) a seed design has decided or stopped, with the words saying so
    (:func:`design_decisions`): they need no seeds, and are not planned."""
    res = evaluated if evaluated is not None else evaluate_claims(store, list(claims),
                                                                  probes=stored_probe_profiles(store))
    by_id = {c.id: c for c in claims}
    plans: list[ClaimPlan] = []
    skipped: dict[str, str] = {}
    observed: set[str] = set()
    wrong: set[str] = set()
    shares: dict[str, tuple[Claim, int, int]] = {}  # share claims: (claim, seeds beyond, seeds)
    for i in range(res.sizes["claim"]):
        r = res.isel(claim=i)
        cid = str(r.claim.values)
        claim = by_id[cid.split("[", 1)[0]]
        if decided and cid in decided:
            skipped[cid] = decided[cid]
            continue
        if str(r.verdict.values) == Verdict.NOT_EVALUABLE:
            skipped[cid] = str(r.test.values).removeprefix("not evaluable: ")
            continue
        if claim.per_arch:
            skipped[cid] = str(claim.plan_test(np.nan))
            continue
        se, n = float(r.se), int(r.n_seeds)
        level = float(r.level) if np.isfinite(float(r.level)) else 0.05
        if levels and np.isfinite(levels.get(cid, np.nan)):
            level = float(levels[cid])
        if claim.by_share:  # the exact sign test: planned at the observed share of seeds beyond
            share = float(r.beyond) / n
            shares[cid] = (claim, int(r.beyond), n)
            observed.add(cid)
            plans.append(ClaimPlan(id=cid, cells=claim_cells(store, claim), sd=np.nan, effect=share - claim.q,
                                   level=level, seeds=n, alternative="one-sided"))
            continue
        sd = sd_per_seed(se=se, n_seeds=n)
        margin = claim.margin
        test = claim.plan_test(float(r.estimate))
        if isinstance(test, str):
            skipped[cid] = test
            continue
        alternative, effect = test
        if claim.thresholded:  # planned at the observed distance beyond the threshold
            observed.add(cid)
            if effect < 0:
                wrong.add(cid)
        plans.append(ClaimPlan(id=cid, cells=claim_cells(store, claim), sd=sd, effect=effect, level=level, seeds=n,
                               alternative=alternative, margin=margin if alternative == "equivalence" else None))
    costs, held = cell_costs(store), seeds_held(store)
    rows = [_share_plan(c, shares[c.id], costs, power) if c.id in shares
            else pr for c, pr in zip(plans, plan(plans, costs, power=power), strict=True)]
    for i, (c, pr) in enumerate(zip(plans, rows, strict=True)):
        if c.id in wrong or pr.reason == WRONG_SIDE:  # planned towards the other side: contradicted
            got = res.sel(claim=c.id)
            rows[i] = contra_plan(by_id[c.id.split("[", 1)[0]], c, estimate=float(got.estimate), se=float(got.se),
                                  short=_num(got, "short"), level=_num(got, "contra_level"), costs=costs,
                                  power=power)
    return Plan(plans, rows, skipped, costs, plan_total(plans, rows, costs, held), observed)


#: Said of a claim planned at an observed effect on the wrong side of its threshold.
WRONG_SIDE = "not reachable (estimate on the wrong side)"


#: The most seeds the planner looks at for a share claim.
SHARE_MAX = 60


def _share_plan(c: ClaimPlan, observed: tuple[Claim, int, int], costs: dict[Cell, float],
                power: float) -> PlanRow:
    """A share claim's plan (the exact sign test, docs/ceiling.md): the fewest seeds whose test at
    the claim's level supports it with probability ``power`` if the share of seeds beyond stays
    what it is now (taken at face value); not reachable when that share is not above ``q``."""
    claim, beyond, n = observed
    share = beyond / n
    now = share_power((n,), share, c.level, q=claim.q, n_max=n, top=c.level)
    if share <= claim.q:
        return PlanRow(c.id, n, None, None, math.nan, now, WRONG_SIDE)
    need = next((m for m in range(2, SHARE_MAX + 1)
                 if share_power((m,), share, c.level, q=claim.q, n_max=m, top=c.level) >= power), None)
    if need is None:
        return PlanRow(c.id, n, None, None, math.nan, now, f"more than {SHARE_MAX} seeds")
    more, cpu = new_seeds(c.cells, need, costs)
    return PlanRow(c.id, n, need, more, cpu, now, "")


def signed_distance(claim: Claim, estimate: float) -> float:
    """A bound or readable_by claim's estimate less its threshold, in the claim's direction
    (positive: on the side it claims; a bound "less" claims below the threshold)."""
    effect = estimate - claim.contra_value()
    return effect if claim.greater else -effect


def _num(row: Any, key: str) -> float:
    return float(row[key]) if key in row else math.nan


#: Said of a claim planned towards its contradiction (:func:`contra_plan`).
CONTRA = "planned to contradict it"


def contra_plan(claim: Claim, c: ClaimPlan, *, estimate: float, se: float, short: float, level: float,
                costs: dict[Cell, float], power: float = PLAN_POWER) -> PlanRow:
    """The plan of a claim whose estimate lies on the wrong side of its threshold (``c``, planned
    at that signed effect): no seed count supports it, but enough seeds decide it the other way,
    ``contradicted``. The seeds at which the test of the opposite side (two-sided, at ``level``,
    the Holm level of its step in that family; the claim's own level where none is known)
    reaches ``power`` if the distance (a t test) or the share of seeds short of the threshold
    (the exact sign test) stays what it is now, taken at face value; what the missing seeds
    cost. Its note says so (:data:`CONTRA`). Not reachable either way when the estimate sits on
    the threshold (a share short not above ``1 - q``)."""
    lv = (level if np.isfinite(level) else c.level) / 2  # the opposite side is tested at the two-sided level
    if claim.by_share:
        n = c.seeds
        share = short / n if n and np.isfinite(short) else math.nan
        q = 1.0 - claim.q
        if not (np.isfinite(share) and share > q):
            return _unreachable(c, PlanRow(c.id, n, None, None, math.nan, math.nan, WRONG_SIDE))
        now = share_power((n,), share, lv, q=q, n_max=n, top=lv)
        need = next((m for m in range(2, SHARE_MAX + 1)
                     if share_power((m,), share, lv, q=q, n_max=m, top=lv) >= power), None)
        if need is None:
            return PlanRow(c.id, n, None, None, math.nan, now, f"{CONTRA}: more than {SHARE_MAX} seeds")
        more, cpu = new_seeds(c.cells, need, costs)
        return PlanRow(c.id, n, need, more, cpu, now, f"{CONTRA}: the exact sign test of the seeds short of its "
                       f"threshold (share {share:.2f}) at the two-sided level {2 * lv:.2g}")
    other = ClaimPlan(id=c.id, cells=c.cells, sd=sd_per_seed(se=se, n_seeds=c.seeds) if np.isfinite(se) else c.sd,
                      effect=-c.effect, level=lv, seeds=c.seeds, alternative="one-sided")
    r = plan([other], costs, power=power)[0]
    if r.needed is None:
        return PlanRow(c.id, r.seeds, None, None, math.nan, r.power_now,
                       f"{CONTRA}: {r.reason}" if r.reason else WRONG_SIDE)
    return PlanRow(c.id, r.seeds, r.needed, r.more, r.cpu_s, r.power_now, (
        f"{CONTRA}: the test of the other side at the observed distance {abs(estimate - float(claim.threshold or 0)):.3g} "
        f"to its threshold, at the two-sided level {2 * lv:.2g}") + (f"; {r.reason}" if r.reason else ""))


def new_seeds(cells: Sequence[Cell], need: int, costs: dict[Cell, float]) -> tuple[int, float]:
    """A replication of ``need`` new seeds in each of ``cells`` (decided on them alone,
    :mod:`analysis.stats.planning`): the seeds each cell trains, and their CPU seconds (NaN where
    a cell has no measured cost)."""
    cpu = math.nan if any(cell not in costs for cell in cells) else float(need * sum(costs[cell] for cell in cells))
    return need, cpu


def _unreachable(c: ClaimPlan, r: PlanRow) -> PlanRow:
    """The plan row of a claim whose estimate lies on the wrong side: no seed count, and its
    power now at the signed effect (the chance that its one-sided test passes were that the
    true value; the planner's power takes the effect's size only)."""
    power_now = math.nan
    if np.isfinite(c.sd) and c.sd > 0 and c.seeds >= 2:
        df = c.seeds - 1
        ncp = c.effect / (c.sd / math.sqrt(c.seeds))
        power_now = float(scipy.stats.nct.sf(scipy.stats.t.ppf(1 - c.level, df), df, ncp))
    return PlanRow(r.id, r.seeds, None, None, math.nan, power_now, WRONG_SIDE)




#: The route every seed count of a plan assumes (:mod:`analysis.stats.planning`), said in its note.
ROUTE = "route: a replication, its new seeds decided on their own"


def with_route(note: str) -> str:
    """A planned claim's note, ending with the route its seed count assumes (:data:`ROUTE`)."""
    return note if ROUTE in note else f"{note}; {ROUTE}" if note else ROUTE


def plan_note(p: Plan, c: ClaimPlan, r: PlanRow) -> str:
    """What a claim's plan rests on, in words, and the route its seed count assumes."""
    if r.reason:
        note = r.reason
    elif c.id in p.observed:
        note = ("planned at the observed distance to its threshold" if np.isfinite(c.sd) else
                "planned at the observed share of seeds beyond its threshold (exact sign test)")
    else:
        note = f"at its margin, at its Holm level {c.level:.2g}"
    return with_route(note) if r.needed is not None else note


def plan_dataset(p: Plan, power: float) -> xr.Dataset:
    """The plan as the stored result ``seed_plan``: per claim (planned or not) its seeds now, power
    now, seeds for ``power``, more per cell, CPU seconds, level, effect, SD per seed and note; per
    cell the seeds it holds and is planned to, its CPU seconds per seed and in all; the total CPU
    seconds and the power as attributes."""
    ids = [r.id for r in p.rows] + list(p.skipped)
    num = {v: np.full(len(ids), np.nan) for v in ("seeds", "power_now", "needed", "more", "cpu_s", "level",
                                                   "effect", "sd")}
    for i, (c, r) in enumerate(zip(p.claims, p.rows, strict=True)):
        for v, x in (("seeds", r.seeds), ("power_now", r.power_now), ("needed", r.needed), ("more", r.more),
                     ("cpu_s", r.cpu_s), ("level", c.level), ("effect", c.effect), ("sd", c.sd)):
            num[v][i] = np.nan if x is None else float(x)
    notes = [plan_note(p, c, r) for c, r in zip(p.claims, p.rows, strict=True)]
    notes += [f"not planned: {why}" for why in p.skipped.values()]
    cells = sorted(p.total.get("cells", {}).items())
    data: dict[str, Any] = {v: ("claim", a) for v, a in num.items()}
    data["planned"] = ("claim", np.array([True] * len(p.rows) + [False] * len(p.skipped)))
    data["note"] = ("claim", np.array(notes, dtype=str))
    data["cell_seeds"] = ("cell", np.array([have for _, (have, _) in cells], dtype=int))
    data["cell_planned_seeds"] = ("cell", np.array([reach for _, (_, reach) in cells], dtype=int))
    cost = np.array([p.costs.get(cell, np.nan) for cell, _ in cells], dtype=float)
    data["cell_cpu_s_per_seed"] = ("cell", cost)
    data["cell_cpu_s"] = ("cell", np.array([max(reach - have, 0) * c if reach > have else 0.0
                                            for (_, (have, reach)), c in zip(cells, cost, strict=True)]))
    return xr.Dataset(data, coords={"claim": np.array(ids, dtype=str),
                                    "cell": np.array(["/".join(cell) for cell, _ in cells], dtype=str)},
                      attrs={"power": float(power), "cpu_s": float(p.total.get("cpu_s", np.nan))})


def design_decisions(run: Any) -> dict[str, str]:
    """The claims (row ids) under a seed design (an
    :class:`~analysis.claims.sequential.SequentialRun` on the store), each with what the plan
    says of it instead of a seed count: a claim decided by its design needs no seeds, one its
    design stopped undecided at its maximum gets none from a plan (seeds added past a design
    spend its level again), and one still undecided gets its seeds from the design's next
    stages."""
    out: dict[str, str] = {}
    if not run.stages:
        return out
    last = run.stages[-1]
    for cid, c in last.claims.items():
        if c.decided_at is None:  # its design goes on: its next stage, not a plan, adds its seeds
            nxt = f" (its next stage: {last.seeds_next} seeds)" if last.seeds_next is not None else ""
            out[cid] = (f"its design continues{nxt}, up to {run.design.max_seeds} seeds, its boundaries "
                        "paying for each look; route: the design's own stages")
            continue
        at = run.stages[c.decided_at]
        if c.decision in FINAL:
            out[cid] = (f"decided by its design: {c.decision} at stage {c.decided_at + 1} ({at.seeds} seeds); "
                        "it needs no more seeds")
        else:
            out[cid] = (f"its design stopped it {c.decision} at stage {c.decided_at + 1} ({at.seeds} seeds); seeds "
                        "added past a design test it again at a level already spent: declare a new design")
    return out


def failed_seed_notes(store, claims: Sequence[Claim], p: Plan, *, power: float = PLAN_POWER,
                      decided: dict[str, str] | None = None) -> list[str]:
    """What the runs that did not learn (:func:`analysis.behaviour.did_not_learn`) do to plan
    ``p`` of ``claims`` on ``store``, one line per planned claim whose cells hold one: the seeds
    it asks for, the seeds it would ask for without them (planned again on the store without
    those runs; the difference is the part of its request that comes from them), and, for a
    bound or readable_by claim about the mean, what the same claim decided by the share of seeds
    beyond its threshold (``statistic = 'share'``, which a failed seed moves by one seed, not by
    its distance) would need. The claims keep every run: leaving a failed seed out would bias
    them towards the seeds that learned; these lines only say what it costs."""
    failed = did_not_learn(store)
    if not failed:
        return []
    cells = {rid: cell_of(store.run_attrs(rid)) for rid in failed}
    mine = {c.id: sorted(r for r, cell in cells.items() if cell in c.cells) for c in p.claims}
    if not any(mine.values()):
        return []
    levels = {c.id: c.level for c in p.claims}
    try:
        without = {r.id: r for r in make_plan(StoreView([store], leave_out=list(failed)), claims, power=power,
                                              levels=levels, decided=decided).rows}
    except LayerstateError as exc:  # the store cannot be evaluated without them: said in words
        return [f"runs that did not learn: {', '.join(sorted(failed))}; the plan without them could not be made: "
                f"{str(exc).splitlines()[0]}"]
    by_id = {c.id: c for c in claims}
    out = []
    for c, r in zip(p.claims, p.rows, strict=True):
        if not mine[c.id]:
            continue
        claim = by_id[c.id.split("[", 1)[0]]
        w = without.get(r.id)
        words = (f"{r.id}: its cells hold {len(mine[c.id])} run{'s' if len(mine[c.id]) > 1 else ''} that did not "
                 f"learn ({', '.join(mine[c.id])}); with {'them' if len(mine[c.id]) > 1 else 'it'} it asks for "
                 f"{_need(r)}, without {_need(w) if w is not None else 'not planned'}")
        if w is not None and r.needed is not None and w.needed is not None and r.needed > w.needed:
            words += f": {r.needed - w.needed} of its seeds come from the failed run{'s' if len(mine[c.id]) > 1 else ''}"
        if claim.thresholded and not claim.by_share:
            share = claim.model_copy(update={"statistic": "share"})
            try:
                s_row = make_plan(store, [share], power=power, levels={c.id: c.level}).rows
                words += f"; decided by the share of seeds beyond {claim.threshold:g} (statistic = 'share'), " \
                         f"robust to a failed seed, it would ask for {_need(s_row[0]) if s_row else 'not planned'}"
            except LayerstateError as exc:  # said, not raised: the plan above stands
                words += f"; as a share claim it could not be planned ({str(exc).splitlines()[0]})"
        out.append(words)
    return out


def _need(r: PlanRow) -> str:
    if r.needed is not None:
        return f"{r.needed} seeds"
    return f"no seed count ({r.reason})" if r.reason else "no seed count"
