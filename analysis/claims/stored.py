"""Claims on a store: their verdicts and seed plan evaluated and stored together
(:func:`evaluate_stored_claims`, what ``layerstate stats`` and ``layerstate run`` do), and whether
a stored claims table still answers the store (:func:`stale_table`): verdicts computed before
more seeds were trained in their cells are out of date, never shown or combined as current."""

from __future__ import annotations

from collections.abc import Sequence

import xarray as xr

from analysis.claims.cells import cell_of, claim_cells, seeds_held
from analysis.claims.evaluate import CELL_RUNS, cell_runs, evaluate_claims, stored_probe_profiles
from analysis.claims.planner import PLAN_POWER, SEED_PLAN, make_plan, plan_dataset
from analysis.claims.probe_results import seeds_words
from analysis.claims.profiles import (
    CLAIM_PROFILES,
    claim_profiles,
    profile_claims,
    profiles_dataset,
)
from analysis.claims.record import DECISION_RECORD, decision_record, record_problem
from analysis.claims.spec import Claim, ClaimError
from store import Store
from store.contents.results import recording_reads
from store.schema import SEQUENTIAL


def evaluate_stored_claims(store: Store, claims: list[Claim], *, absent: Sequence[Claim] = (),
                           design_look: bool = False) -> xr.Dataset:
    """Evaluate ``claims`` on the results stored in ``store`` (probe profiles included) and
    store the verdicts as ``results/claims`` and their seed plan as ``results/seed_plan``
    (:mod:`analysis.claims.planner`); returns the verdicts (see :func:`evaluate_claims`).
    With profile claims among ``claims`` and ``absent`` (the whole declared family), the
    per-seed profiles they read of this store's tasks are kept as ``results/claim_profiles``
    (:mod:`analysis.claims.profiles`), for deciding them across the parts of a grid.

    Raises :class:`ClaimError` for a claim a group-sequential design decided whose cells now hold
    more seeds than the design's maximum (:func:`past_design`), unless ``design_look`` (a look of
    that design itself, ``layerstate run --design``)."""
    past = "" if design_look else past_design(store, claims)
    if past:
        raise ClaimError(past)
    with recording_reads() as read:
        probes = stored_probe_profiles(store)
        res = evaluate_claims(store, claims, probes=probes, absent=absent)
    res.attrs[DECISION_RECORD] = decision_record(
        store, read, family=[c.id for c in [*claims, *absent]], alpha=res.attrs.get("alpha", 0.05),
        correction=str(res.attrs.get("correction", "holm")))
    store.write_result("claims", res)
    keep_profiles(store, [*claims, *absent], probes)
    plan = make_plan(store, claims, power=PLAN_POWER, evaluated=res)
    planned = plan_dataset(plan, PLAN_POWER)  # what more seeds would decide: the report's
    planned.attrs[DECISION_RECORD] = res.attrs[DECISION_RECORD]  # made from the same results
    store.write_result(SEED_PLAN, planned)
    return res


def past_design(store: Store, claims: Sequence[Claim]) -> str:
    """Why a fixed test of ``claims`` on ``store`` would spend a design's level again, or ``""``:
    a claim decided by the group-sequential design stored in ``results/sequential`` whose cells
    now hold more seeds than the design's maximum for it. Testing those seeds again with a fixed
    test is a second decision on the claim at the same level: one such extension of an
    undecided 4 -> 8 design to 11 seeds made the type-I error 0.075 at level 0.05, two 0.093
    (docs/sequential.md, "Seeds past a design's maximum")."""
    if SEQUENTIAL not in store.results():
        return ""
    seq = store.read_result(SEQUENTIAL)
    if "max_seeds" not in seq:
        return ""
    caps = dict(zip(map(str, seq["claim"].values), (int(v) for v in seq["max_seeds"].values), strict=True))
    held = seeds_held(store)
    for claim in claims:
        cap = min((caps[r] for r in claim.row_ids() if r in caps), default=None)
        if cap is None:
            continue
        over = {"/".join(c): held.get(c, 0) for c in claim_cells(store, claim) if held.get(c, 0) > cap}
        if over:
            cells = ", ".join(f"{c} {n}" for c, n in over.items())
            return (f"claim {claim.id!r} was decided by the group-sequential design in results/sequential, at most "
                    f"{cap} seeds a cell, and its cells now hold more ({cells}): a fixed test of them decides it a "
                    "second time at the same level (an undecided 4 -> 8 design tested again at 11 seeds: type-I "
                    "0.075 at level 0.05); declare the new seeds as a replication (the claims under new ids, "
                    "evaluated as their own family on the new seeds only) or a new design before they are trained")
    return ""


def keep_profiles(store: Store, family: Sequence[Claim], probes: xr.Dataset | None = None) -> bool:
    """Keep the per-seed profiles the profile claims of ``family`` (every declared claim, a
    part's own and absent ones) read of this store's tasks as ``results/claim_profiles``
    (:mod:`analysis.claims.profiles`); False, writing nothing, when it declares none."""
    if not profile_claims(family):
        return False
    if probes is None:
        probes = stored_probe_profiles(store)
    store.write_result(CLAIM_PROFILES, profiles_dataset(claim_profiles(store, family, probes),
                                                        cell_runs(store, profile_claims(family))))
    return True


def stale_table(store: Store, table: xr.Dataset) -> str | None:
    """Why the stored claims ``table`` no longer answers ``store``, in words: a result its
    verdicts read computed again or forgotten since (its decision record,
    :mod:`analysis.claims.record`), runs trained in its cells since, or runs gone; None when it
    does, or when it records neither (a table from before the records were kept)."""
    changed = record_problem(store, table.attrs)
    cells = _stale_cells(store, table)
    return "; ".join(x for x in (changed, cells) if x) or None


def _stale_cells(store: Store, table: xr.Dataset) -> str | None:
    recorded = table.attrs.get(CELL_RUNS)
    if not isinstance(recorded, dict) or not any(table.sizes.values()):
        return None  # no record (an older table), or no claim to answer (no row: the kept profiles)
    now: dict[str, list[str]] = {}
    for r in store.run_ids():
        a = store.run_attrs(r)
        cell = "/".join(cell_of(a))
        if cell in recorded:
            now.setdefault(cell, []).append(r)
    added = sorted({r for c, runs in now.items() for r in runs} - {r for runs in recorded.values() for r in runs})
    gone = sorted({r for runs in recorded.values() for r in runs} - {r for runs in now.values() for r in runs})
    parts = []
    if added:
        parts.append(f"the store holds {len(added)} more run{'s' if len(added) > 1 else ''} in its claims' cells "
                     f"({seeds_words(store, added)}) than when the verdicts were computed")
    if gone:
        parts.append(f"{len(gone)} run{'s' if len(gone) > 1 else ''} it was computed on "
                     f"{'are' if len(gone) > 1 else 'is'} no longer in the store ({', '.join(gone[:3])}"
                     f"{' ...' if len(gone) > 3 else ''})")
    return "; ".join(parts) or None
