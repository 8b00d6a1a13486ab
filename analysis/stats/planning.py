"""A seed planner: how many seeds each claim needs for power 0.8, and what they cost.

Each claim is a t test over seeds (:mod:`analysis.stats.power`): given one seed's SD (from the
seeds there are: ``se * sqrt(n)``), the effect to detect (a difference claim's margin or
declared effect; a bound claim's distance from the estimate to its threshold, or a declared
effect) and the level the claim is judged at (its Holm step,
:func:`analysis.stats.decision.holm_levels`), :func:`seeds_needed` is the fewest seeds whose
test has power 0.8 (:func:`analysis.stats.power.seeds_for_power`; for an equivalence claim the
TOST's power, :func:`analysis.stats.power.tost_power_se`). :func:`plan` turns that into the
seeds each of the claim's (task, arch, variant) cells must still train and their CPU time from
each cell's measured seconds per seed (training plus capture), per claim and for the whole file
(a cell read by several claims trains the most any of them needs, once).

The seeds planned are new seeds, decided on them alone: a replication, its own family. The
claims were already tested once on the seeds the store holds (the plan is made from that test's
estimates), and a test of those seeds pooled with new ones is a second decision at the same
level: a one-sided t test at 4 seeds and again at 11 rejected a true null 8.7% of the time at
level 0.05 (docs/sequential.md, "The plan's route: new seeds, decided alone"). A group-sequential
design declared before its first stage is the route that counts every seed, its boundaries
paying for each look (``layerstate run --design``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from analysis.stats.design import Cell
from analysis.stats.power import power_se, seeds_for_power, tost_power_se

__all__ = ["ClaimPlan", "PlanRow", "plan", "plan_total", "seeds_needed", "sd_per_seed"]
#: The most seeds the planner looks at; beyond, a claim is "not reached".
N_MAX = 200


def sd_per_seed(sd: float | None = None, *, se: float | None = None, n_seeds: int | None = None,
                floor_sd: float | None = None) -> float:
    """One seed's SD: given, or from an estimate's ``se`` over ``n_seeds`` seeds
    (``se * sqrt(n)``); never below ``floor_sd`` (a seed's own sampling SD, e.g.
    ``sqrt(p (1 - p) / m)`` over m sequences: seeds that agree exactly still have it)."""
    if sd is None:
        if se is None or n_seeds is None:
            raise ValueError("give a per-seed sd, or se with n_seeds")
        sd = float(se) * math.sqrt(n_seeds)
    if floor_sd is not None and np.isfinite(floor_sd):
        sd = max(float(sd), float(floor_sd))
    return float(sd)


def seeds_needed(sd: float, effect: float, level: float, *, power: float = 0.8,
                 alternative: Literal["one-sided", "two-sided", "equivalence"] = "one-sided",
                 margin: float | None = None, n_max: int = N_MAX) -> int | None:
    """The fewest seeds (>= 2) whose test at ``level`` reaches ``power``; None when more than
    ``n_max`` or the inputs leave no test (SD not > 0, no effect).

    ``one-sided`` / ``two-sided``: the t test against a true ``effect`` (the distance from the
    null value). ``equivalence``: the TOST within ``+- margin`` at ``level / 2`` per side (as
    :mod:`analysis.stats.decision` judges it) at a true difference ``effect`` (0: the
    claim is true exactly)."""
    if alternative == "equivalence":
        if margin is None or not margin > 0:
            raise ValueError("an equivalence plan needs margin > 0")
        if not (np.isfinite(sd) and sd > 0) or abs(effect) >= margin:
            return None
        for n in range(2, n_max + 1):
            if tost_power_se(sd / math.sqrt(n), n - 1, margin, level / 2, effect) >= power:
                return n
        return None
    return seeds_for_power(sd, effect, level, power=power, alternative=alternative, n_max=n_max)


@dataclass(frozen=True)
class ClaimPlan:
    """What the planner needs of one claim: its id, the cells it reads, one seed's SD, the effect
    to detect, its level (its Holm step), its test and the seeds it has."""

    id: str
    cells: tuple[Cell, ...]
    sd: float
    effect: float
    level: float
    seeds: int
    alternative: Literal["one-sided", "two-sided", "equivalence"] = "one-sided"
    margin: float | None = None


@dataclass(frozen=True)
class PlanRow:
    id: str
    seeds: int  # seeds it has
    needed: int | None  # seeds for power 0.8 (None: not reached by N_MAX)
    more: int | None  # seeds each of its cells must still train
    cpu_s: float  # their CPU seconds, over its cells (NaN when not reached or a cell's cost is unknown)
    power_now: float  # its power at the seeds it has
    reason: str  # why no number, in words ('' when there is one)


def _power_now(c: ClaimPlan) -> float:
    if not (np.isfinite(c.sd) and c.sd > 0 and c.seeds >= 2):
        return math.nan
    se, df = c.sd / math.sqrt(c.seeds), c.seeds - 1
    if c.alternative == "equivalence":
        return float(tost_power_se(se, df, c.margin, c.level / 2, c.effect))
    return float(power_se(c.effect, se, df, c.level, c.alternative))


def plan(claims: Sequence[ClaimPlan], costs: Mapping[Cell, float], *, power: float = 0.8,
         n_max: int = N_MAX) -> list[PlanRow]:
    """Per claim: the seeds for ``power`` at its effect and level, each a new seed in each of its
    cells (a replication, decided on them alone: the module docstring), and their CPU seconds
    from ``costs`` (a cell's measured seconds per seed, training plus capture)."""
    out = []
    for c in claims:
        reason = ""
        if not (np.isfinite(c.sd) and c.sd > 0):
            reason = "no per-seed SD (fewer than 2 seeds, or seeds identical with nothing to floor them)"
        elif not (np.isfinite(c.effect) and c.effect != 0) and c.alternative != "equivalence":
            reason = "no effect to power against (declare an effect, or the estimate sits on the threshold)"
        need = None if reason else seeds_needed(c.sd, c.effect, c.level, power=power, alternative=c.alternative,
                                                margin=c.margin, n_max=n_max)
        if need is None and not reason:
            reason = f"more than {n_max} seeds"
        # a replication: `need` new seeds in every cell, decided on them alone (module docstring)
        more = need
        missing = [cell for cell in c.cells if cell not in costs]
        cpu = math.nan if need is None or missing else float(need * sum(costs[cell] for cell in c.cells))
        if more is not None and missing:
            reason = f"no measured CPU time for {', '.join('/'.join(m) for m in missing)}"
        out.append(PlanRow(c.id, c.seeds, need, more, cpu, _power_now(c), reason))
    return out


def plan_total(claims: Sequence[ClaimPlan], rows: Sequence[PlanRow], costs: Mapping[Cell, float],
               held: Mapping[Cell, int] | None = None) -> dict:
    """The whole plan: each cell trains, once, as many new seeds as the most any claim reading it
    needs (claims not reached are left out), numbered after the seeds it holds. ``held``: the
    seeds each cell holds (default: the fewest of the claims reading it). Returns ``{"cells":
    {cell: (seeds it has, seeds it has and the new ones)}, "cpu_s": total}``."""
    have: dict[Cell, int] = {}
    new: dict[Cell, int] = {}
    for c, r in zip(claims, rows, strict=True):
        for cell in c.cells:
            have[cell] = held[cell] if held and cell in held else min(have.get(cell, c.seeds), c.seeds)
            new[cell] = max(new.get(cell, 0), r.needed if r.needed is not None else 0)
    reach = {cell: (have[cell], have[cell] + new[cell]) for cell in have}
    cpu = float(sum(new[cell] * costs.get(cell, math.nan) for cell in have if new[cell]))
    return {"cells": reach, "cpu_s": cpu}
