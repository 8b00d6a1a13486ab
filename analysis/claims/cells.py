"""The (task, arch, variant) cells a claim reads, and what the store holds of them: each cell's
seeds and what a seed of it cost. One answer to "which cells does this claim read", used by the
sequential design (which cells the next stage trains), the seed planner (what more seeds cost)
and the pipeline (:meth:`~analysis.claims.spec.Claim.selects` for the runs themselves)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from analysis.claims.spec import Claim
from analysis.stats.design import Cell


def declared_cells(claim: Claim) -> tuple[Cell, ...] | None:
    """The cells ``claim`` names in its fields (its task, arch and variant, and the two levels it
    compares), or None when they cannot be told from them (no architecture named)."""
    task, arch, variant = claim.task, claim.arch, claim.variant
    cells: list[tuple[str | None, str | None, str | None]]
    if claim.compares and claim.compare in ("arch", "variant", "task"):
        pair = (claim.treatment, claim.reference)
        if claim.compare == "arch":
            cells = [(task, a, variant) for a in pair]
        elif claim.compare == "variant":
            cells = [(task, arch, v) for v in pair]
        else:
            cells = [(t, arch, variant) for t in pair]
    else:
        cells = [(task, arch, variant)]
    if any(x is None for c in cells for x in c):
        return None
    return tuple((str(a), str(b), str(c)) for a, b, c in cells)


def cell_of(attrs: dict[str, Any]) -> Cell:
    """A run's cell, from its attributes."""
    return str(attrs.get("task")), str(attrs.get("arch")), str(attrs.get("variant", "default"))


def claim_cells(store: Any, claim: Claim) -> tuple[Cell, ...]:
    """The cells ``claim`` reads: from its fields, or, where it names no architecture, every cell
    of the store whose runs it selects (:meth:`Claim.selects`)."""
    named = declared_cells(claim)
    if named is not None:
        return named
    return tuple(sorted({cell_of(a) for r in store.run_ids() if claim.selects(a := store.run_attrs(r))}))


def seeds_held(store: Any) -> dict[Cell, int]:
    """Each cell's seeds 0..n-1 that the store holds (a gap ends the count)."""
    seeds: dict[Cell, set[int]] = {}
    for rid in store.run_ids():
        a = store.run_attrs(rid)
        seeds.setdefault(cell_of(a), set()).add(int(a.get("seed", 0)))
    return {cell: first_seeds(got) for cell, got in seeds.items()}


def captured_seeds(store: Any, claims: Sequence[Claim]) -> dict[Cell, int]:
    """Each cell's seeds 0..n-1 that the store holds *captured* for ``claims``: a run counts only
    where it is captured at the length of every claim that reads its cell (the counterfactual
    pairs for a claim on patching or interchange). A seed trained but not captured is not yet
    a seed a claim can be decided on (:func:`seeds_held` counts it)."""
    seeds: dict[Cell, set[int]] = {}
    for rid in store.run_ids():
        a = store.run_attrs(rid)
        ok = True
        for c in claims:
            if c.length is None or not c.selects(a):
                continue
            kind = "cfclean" if c.reads() in ("patching", "interchange") else "len"
            if c.length not in store.lengths(rid, kind):
                ok = False
                break
        if ok:
            seeds.setdefault(cell_of(a), set()).add(int(a.get("seed", 0)))
    return {cell: first_seeds(got) for cell, got in seeds.items()}


def first_seeds(got: set[int]) -> int:
    """How many seeds 0..n-1 ``got`` holds: a gap ends the count."""
    n = 0
    while n in got:
        n += 1
    return n


def run_seconds(attrs: dict) -> float | None:
    """A run's CPU seconds: training, plus capture where the run records it; None for a run with
    no recorded training time."""
    metrics = attrs.get("metrics") or {}
    seconds = metrics.get("train_seconds") if isinstance(metrics, dict) else None
    if seconds is None:
        return None
    return float(seconds) + float(attrs.get("capture_seconds", 0.0) or 0.0)


def cell_costs(store: Any) -> dict[Cell, float]:
    """Mean CPU seconds per seed of each cell: training, plus capture where a run records it."""
    spent: dict[Cell, list[float]] = {}
    for rid in store.run_ids():
        attrs = store.run_attrs(rid)
        total = run_seconds(attrs)
        if total is not None:
            spent.setdefault(cell_of(attrs), []).append(total)
    return {cell: float(np.mean(v)) for cell, v in spent.items()}
