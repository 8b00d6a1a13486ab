"""``layerstate plan``: how many seeds each declared claim needs, and what they cost.

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from analysis.claims import Claim
from analysis.stats.planning import ClaimPlan, PlanRow

Cell = tuple[str, str, str]


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


def run_seconds(attrs: dict) -> float | None:
    """A run's CPU seconds: training, plus capture where the run records it; None for a run with
    no recorded training time."""
    metrics = attrs.get("metrics") or {}
    seconds = metrics.get("train_seconds") if isinstance(metrics, dict) else None
    if seconds is None:
        return None
    return float(seconds) + float(attrs.get("capture_seconds", 0.0) or 0.0)


def cell_costs(store) -> dict[Cell, float]:
    """Mean CPU seconds per seed of each (task, arch, variant) cell: training, plus capture where
    a run records it."""
    spent: dict[Cell, list[float]] = {}
    for rid in store.run_ids():
        attrs = store.run_attrs(rid)
        total = run_seconds(attrs)
        if total is None:
            continue
        cell = (str(attrs.get("task")), str(attrs.get("arch")), str(attrs.get("variant", "default")))
        spent.setdefault(cell, []).append(total)
    return {cell: float(np.mean(v)) for cell, v in spent.items()}


def claim_cells(store, claim: Claim) -> tuple[Cell, ...]:
    """The (task, arch, variant) cells ``claim`` reads: from its fields, or, where it names no
    architecture, every cell of its task(s) and variant that the store holds."""
    from analysis.stats.sequential import DesignError, _claim_cells

    try:
        return _claim_cells(claim)
    except DesignError:  # no arch named: every architecture of its task(s) that the store holds
        runs = store.runs()
        tasks = [claim.task, claim.treatment, claim.reference] if claim.compare == "task" else [claim.task]
        variants = [claim.treatment, claim.reference] if claim.compare == "variant" else [claim.variant]
        keep = runs["task"].isin(tasks) & runs["variant"].isin(variants)
        return tuple(sorted({(str(r.task), str(r.arch), str(r.variant)) for r in runs[keep].itertuples()}))


def make_plan(store, claims: Sequence[Claim], *, power: float = 0.8,
              levels: dict[str, float] | None = None) -> Plan:
    """Evaluate ``claims`` on ``store`` (nothing is written) and plan each claim's seeds.

    ``levels``: each claim's level where known better than from ``claims`` alone (a part of a
    grid, whose declared family is larger: the stored claims table's ``level``)."""
    from analysis.claims.evaluate import evaluate_claims, stored_probe_profiles
    from analysis.stats.planning import plan, plan_total, sd_per_seed

    res = evaluate_claims(store, list(claims), probes=stored_probe_profiles(store))
    by_id = {c.id: c for c in claims}
    plans: list[ClaimPlan] = []
    skipped: dict[str, str] = {}
    observed: set[str] = set()
    wrong: set[str] = set()
    for i in range(res.sizes["claim"]):
        r = res.isel(claim=i)
        cid = str(r.claim.values)
        claim = by_id[cid.split("[", 1)[0]]
        if str(r.verdict.values) == "not evaluable":
            skipped[cid] = str(r.test.values).removeprefix("not evaluable: ")
            continue
        if claim.kind == "profile_match":
            skipped[cid] = "an exact permutation test: see its reason for the seeds per task it needs"
            continue
        se, n = float(r.se), int(r.n_seeds)
        sd = sd_per_seed(se=se, n_seeds=n)
        level = float(r.level) if np.isfinite(float(r.level)) else 0.05
        if levels and np.isfinite(levels.get(cid, np.nan)):
            level = float(levels[cid])
        margin = claim.margin
        alternative: Literal["one-sided", "two-sided", "equivalence"]
        if claim.kind == "equivalence":
            alternative, effect = "equivalence", 0.0
        elif claim.kind in ("bound", "readable_by"):
            alternative, effect = "one-sided", float(r.estimate) - float(claim.threshold or 0.0)
            if claim.kind == "bound" and claim.direction == "less":
                effect = -effect  # the effect in the claim's direction: below the threshold
            observed.add(cid)
            if effect < 0:
                wrong.add(cid)
        else:
            alternative = "two-sided" if claim.direction == "two-sided" else "one-sided"
            if margin is None:
                skipped[cid] = "no margin declared: no effect to plan power at"
                continue
            effect = margin  # from zero at the margin, or (against the margin) at twice it
        plans.append(ClaimPlan(id=cid, cells=claim_cells(store, claim), sd=sd, effect=effect, level=level, seeds=n,
                               alternative=alternative, margin=margin if alternative == "equivalence" else None))
    from layerstate.sequential import seeds_held

    costs, held = cell_costs(store), seeds_held(store)
    rows = [_unreachable(c, r) if c.id in wrong else r
            for c, r in zip(plans, plan(plans, costs, power=power, held=held), strict=True)]
    return Plan(plans, rows, skipped, costs, plan_total(plans, rows, costs, held), observed)


#: Said of a claim planned at an observed effect on the wrong side of its threshold.
WRONG_SIDE = "not reachable (estimate on the wrong side)"


def _unreachable(c: ClaimPlan, r: PlanRow) -> PlanRow:
    """The plan row of a claim whose estimate lies on the wrong side: no seed count, and its
    power now at the signed effect (the chance that its one-sided test passes were that the
    true value; the planner's power takes the effect's size only)."""
    import scipy.stats

    power_now = math.nan
    if np.isfinite(c.sd) and c.sd > 0 and c.seeds >= 2:
        df = c.seeds - 1
        ncp = c.effect / (c.sd / math.sqrt(c.seeds))
        power_now = float(scipy.stats.nct.sf(scipy.stats.t.ppf(1 - c.level, df), df, ncp))
    return PlanRow(r.id, r.seeds, None, None, math.nan, power_now, WRONG_SIDE)


def _num(x: float | int | None, fmt: str = "d") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return format(x, fmt)


def plan_lines(p: Plan, experiment: str = "EXPERIMENT.toml", store: str = "STORE") -> Iterator[str]:
    """The plan as the command prints it: one line per claim, then the cells that need more seeds,
    the total, and the commands that train exactly those seeds (``experiment``, ``store``: the
    paths the commands name)."""
    yield "claim | seeds | power now | seeds for power 0.8 | more per cell | CPU s | note"
    for c, r in zip(p.claims, p.rows, strict=True):
        note = r.reason or ("planned at the observed distance to its threshold" if c.id in p.observed else "")
        yield (f"{r.id} | {r.seeds} | {_num(r.power_now, '.2f')} | {_num(r.needed)} | {_num(r.more)} | "
               f"{_num(r.cpu_s, '.0f')} | {note or 'at its margin, at its Holm level ' + format(c.level, '.2g')}")
    for cid, why in p.skipped.items():
        yield f"{cid} | – | – | – | – | – | not planned: {why}"
    cells = {c: (have, reach) for c, (have, reach) in p.total.get("cells", {}).items() if reach > have}
    for cell, (have, reach) in sorted(cells.items()):
        cost = p.costs.get(cell)
        yield (f"cell {'/'.join(cell)}: {have} -> {reach} seeds"
               + (f", {cost:.0f} s per seed" if cost is not None else ", no measured time"))
    total = p.total.get("cpu_s", math.nan)
    yield f"total: {_num(total, '.0f')} CPU s for every planned claim to reach power 0.8"
    if not cells:
        yield "next: nothing to train; every planned claim has the seeds it needs (or cannot reach its power)"
        return
    most = max(reach for _, reach in cells.values())
    yield (f"next: list seeds = {list(range(most))} in {experiment}'s [grid], then train only the seeds above, "
           "cell by cell:")
    for (task, arch, _), (have, reach) in sorted(cells.items()):
        seeds = " ".join(f"--seed {s}" for s in range(have, reach))
        yield f"  layerstate train {experiment} --store {store} --task {task} --arch {arch} {seeds}"
    yield (f"  then `layerstate run {experiment} --store {store} --out DIR` captures, analyses and decides them "
           "(what is stored is reused); or declare a [design] and let `layerstate run --design` add seeds stage "
           "by stage")
