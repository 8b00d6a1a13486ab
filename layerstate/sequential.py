"""``layerstate sequential``: a group-sequential design's decisions on the seeds a store holds.

A design (``[design]``: :class:`analysis.stats.sequential.Design`) declares before any result
how many seeds each stage adds and how alpha is spent over the stages. Stage ``k`` is the first
``n_k`` seeds of each cell; its claims are evaluated on exactly those (a read-only view of the
store, :class:`store.view.StoreView` with ``seed_below``), so every stage's estimate is
reproducible from the store and a decision taken at a stage never changes when more seeds come.
The decisions (:func:`analysis.stats.sequential.sequential_decisions`: Lan-DeMets boundaries for
t over seeds, the Maurer-Bretz Holm-type procedure, repeated confidence intervals) say which
claims are decided and which (task, arch, variant) cells the next stage trains: only those that
undecided claims read. A stage is evaluated only when the store holds its seeds for every cell
that stage needs; the last line says what to train next.

Profile-match claims (an exact permutation test) have no sequential boundary: they are evaluated
at the maximum seeds by ``layerstate stats``, and listed as such.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.claims import Claim
from analysis.stats.sequential import Design, StageResult

Cell = tuple[str, str, str]


@dataclass(frozen=True)
class SequentialRun:
    """The stages a store holds (``stages``, in order), the claims left to the fixed test
    (``fixed``: id -> why) and, when the design goes on, what the next stage needs."""

    design: Design
    stages: list[StageResult]
    fixed: dict[str, str]
    held: dict[Cell, int]


def _seeds_held(store) -> dict[Cell, int]:
    """Each cell's seeds 0..n-1 that the store holds (a gap ends the count)."""
    seeds: dict[Cell, set[int]] = {}
    for rid in store.run_ids():
        a = store.run_attrs(rid)
        cell = (str(a.get("task")), str(a.get("arch")), str(a.get("variant", "default")))
        seeds.setdefault(cell, set()).add(int(a.get("seed", 0)))
    out = {}
    for cell, got in seeds.items():
        n = 0
        while n in got:
            n += 1
        out[cell] = n
    return out


def evaluate_sequential(store, claims: Sequence[Claim], design: Design) -> SequentialRun:
    """Decide ``claims`` stage by stage on the seeds ``store`` holds (nothing is written)."""
    from analysis.claims.evaluate import evaluate_claims, stored_probe_profiles
    from analysis.stats.sequential import from_claim, sequential_decisions
    from store.view import StoreView

    fixed = {c.id: "a profile_match claim is an exact permutation test: evaluated at the maximum seeds"
             for c in claims if c.kind == "profile_match"}
    tested = [c for c in claims if c.kind != "profile_match"]
    hypotheses = [from_claim(c) for c in tested]
    held = _seeds_held(store)
    observed: list[dict[str, tuple[float, float, float]]] = []
    stages: list[StageResult] = []
    needed = {cell for h in hypotheses for cell in h.cells}
    for n in design.seeds():
        if any(held.get(cell, 0) < n for cell in needed):
            break
        view: Any = StoreView([store], seed_below=n)  # read as a Store: the methods claims read
        res = evaluate_claims(view, tested, probes=stored_probe_profiles(view),
                              absent=[c for c in claims if c.kind == "profile_match"])
        obs = {}
        for i in range(res.sizes["claim"]):
            r = res.isel(claim=i)
            if str(r.verdict.values) != "not evaluable":
                obs[str(r.claim.values)] = (float(r.estimate), float(r.se), float(r.df))
        observed.append(obs)
        stages = sequential_decisions(design, hypotheses, observed,
                                      absent=(sum(len(c.archs) or 1 for c in claims if c.kind == "profile_match"), 0))
        needed = set(stages[-1].cells_next)
        if not needed:
            break
    return SequentialRun(design, stages, fixed, held)


def _fmt(x: float, signed: bool = True) -> str:
    if not np.isfinite(x):
        return "–"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def sequential_lines(run: SequentialRun) -> Iterator[str]:
    """Per stage and claim: seeds, estimate, repeated interval, boundary and decision; then what
    the next stage trains."""
    d = run.design
    yield (f"design: {d.first_seeds} seeds, then +{d.stage_seeds} a stage up to {d.max_seeds} "
           f"({d.spending} spending, futility {d.futility}); stages at {', '.join(map(str, d.seeds()))} seeds")
    if not run.stages:
        low = min(run.held.values()) if run.held else 0
        yield (f"no stage yet: the first stage needs {d.first_seeds} seeds in every cell the claims read "
               f"(the store holds {low} in its thinnest cell); train them, then run this again")
    for st in run.stages:
        for cid, c in st.claims.items():
            bounds = ", ".join(_fmt(b) for b in c.boundaries) or "–"
            yield (f"stage {st.stage + 1} ({st.seeds} seeds) {cid}: {c.decision}"
                   + (f" (decided at stage {c.decided_at + 1})" if c.decided_at is not None
                      and c.decided_at != st.stage else "")
                   + f" | estimate {_fmt(c.estimate)}, repeated 95% interval [{_fmt(c.rci[0])}, {_fmt(c.rci[1])}]"
                   + f", boundary {bounds} at level {c.level:.2g}")
    for cid, why in run.fixed.items():
        yield f"{cid}: {why}"
    if run.stages:
        last = run.stages[-1]
        if last.cells_next and last.seeds_next is not None:
            cells = ", ".join("/".join(c) for c in sorted(last.cells_next))
            yield f"next stage: train seeds up to {last.seeds_next} for {cells} (only these cells), then run this again"
        else:
            yield "the design is complete: every claim is decided or the maximum seeds were reached"
