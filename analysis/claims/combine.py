"""One verdict table for a grid run in parts: each claim's test from the part that evaluated
it, and Holm over the whole declared family (:func:`combine_parts`).

A part of a grid (``layerstate run --task``) evaluates the claims that read only its tasks and
counts every other declared test in its Holm families with p = 1, the worst case for the tests
it holds (:func:`~analysis.claims.verdicts.adjust`). Once every part has run, the tests are all
known: combining them corrects each claim once, over the family the file declared, and an
adjusted p can only fall (never below what one store holding the whole grid would give, which
is exactly what the combined table is when every claim was evaluated somewhere).

What a part kept is enough to decide again: each claim row's estimate, interval, raw p-values,
power, MDE and seeds (``results/claims``, or the CSV a report writes of it, full precision).
A cross-check's verdict is decided again from its estimate, standard error and degrees of
freedom (``crosscheck_se``, ``crosscheck_df``); a part stored before those were kept keeps the
cross-check verdict it reached itself, corrected within the part (said in the table's
``crosscheck_from``). A declared claim no part evaluated (a claim reading tasks of several
parts, or a part not given) is ``not evaluable`` and its tests count with p = 1. A report's CSV
may clip an interval to its metric's range (``interval_note`` ``clipped``): the verdicts cannot
change (thresholds and margins lie inside the range), only the interval shown is the clipped
one. A part evaluated under a claim since edited in the file (its margin, threshold, metric,
direction or test) is refused: its p-values answer another question.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from analysis.claims.cells import cell_costs, declared_cells, first_seeds, seeds_held
from analysis.claims.evaluate import (
    FAMILIES,
    NUMERIC,
    TEXT,
    evaluate_claims,
    stored_probe_profiles,
    verdict_table,
)
from analysis.claims.kinds import ProfileMatchClaim
from analysis.claims.planner import (
    SEED_PLAN,
    WRONG_SIDE,
    contra_plan,
    new_seeds,
    signed_distance,
    with_route,
)
from analysis.claims.profiles import (
    CLAIM_PROFILES,
    missing_words,
    profiles_frame,
    profiles_rows,
    row_profiles,
)
from analysis.claims.rows import ClaimRow
from analysis.claims.spec import ALPHA, Claim, ClaimError, StaleResultError, claim_rows
from analysis.claims.stored import stale_table
from analysis.claims.verdicts import claim_tests
from analysis.stats.decision import Verdict
from analysis.stats.design import Cell
from analysis.stats.planning import ClaimPlan, PlanRow
from analysis.stats.profiles import attainable_min_p, shape_test_power
from analysis.stats.seedshare import seeds_to_decide
from store import MissingError, open_analysis

#: Interval notes under which a report's CSV hides the interval (``reports.intervals``): the
#: verdict reads the interval, so such a row can only be combined from the part's store.
HIDDEN = ("too few seeds", "interval spans the whole range")


def part_frame(part: xr.Dataset | pd.DataFrame, name: str = "part") -> pd.DataFrame:
    """A part's claims (``results/claims`` or a report's ``claims.csv``) as one row per claim row."""
    if isinstance(part, xr.Dataset):
        frame = part.to_dataframe().reset_index()
    else:
        frame = part.copy()
    if "claim" not in frame or "verdict" not in frame:
        raise ClaimError(f"part {name} has no 'claim' and 'verdict' columns: give a part's store, its report "
                         "folder or the report's tables/claims.csv")
    if "part" in frame:
        raise ClaimError(f"part {name} is a combined table already (it has a 'part' column); combine the parts "
                         "themselves, whose rows say what each evaluated")
    return frame


def _float(r: pd.Series, key: str) -> float:
    try:
        v = float(r.get(key, np.nan))
    except (TypeError, ValueError):
        return np.nan
    return v


def _text(r: pd.Series, key: str) -> str:
    v = r.get(key, "")
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)


def _row(claim: Claim, r: pd.Series, name: str) -> tuple[ClaimRow, str]:
    """A stored claim row back as the test results :func:`verdict_table` decides from; and
    where its cross-check verdict comes from."""
    row = ClaimRow({k: _float(r, k) for k in NUMERIC} | {k: _text(r, k) for k in TEXT})
    if _text(r, "verdict") == Verdict.NOT_EVALUABLE:
        row["not_evaluable"] = True
        return row, ""
    stage = _float(r, "sequential_stage")
    if np.isfinite(stage) and stage > 0 and not (claim.by_share and not np.isfinite(row["beyond"])):
        # decided by the part's group-sequential design at its stage's boundary, the other parts'
        # tests counted at p = 1 (the worst case for it): its tests are the design's, not a fixed
        # look's, so it is not decided again here; the combined family cannot make its levels
        # stricter, so its verdict stands, and its own tests count with p = 1 for the others
        row.kept = (_text(r, "verdict"), _text(r, "outcome"),
                    f"{_text(r, 'reason')} [kept from part {name}: decided by its design]")
        row.crosscheck_verdict = _text(r, "crosscheck_verdict")
        return row, "part" if row.crosscheck_verdict else ""
    if claim.by_share and not (np.isfinite(row["beyond"]) and np.isfinite(row["p_contra_exact"])):
        # a part decided by the mean's t before the share of seeds decided bound claims: its table
        # holds no counts, and its p answers another question. With fewer seeds than the exact test
        # needs at alpha no count could decide it: inconclusive (its tests count at p = 1, which
        # changes no other claim's Holm step, as any p it could have is above alpha); else the
        # part's store must count its seeds again
        n = row["n_seeds"]
        if np.isfinite(n) and n < seeds_to_decide(ALPHA, claim.q):
            row.update({k: np.nan for k in ("estimate", "lower", "upper", "p", "p_contra_exact", "se", "df",
                                            "beyond", "short", "share", "share_lower", "share_upper", "bound",
                                            "max_t", "mde", "power", "power_at", "seeds_needed")},
                       model="sign_test", test=f"exact sign test over seeds (re-decided from part {name}'s table: "
                       f"{int(n)} seeds, its mean {row['treatment_mean']:.4g} in treatment_mean)")
            return row, ""
        row.update(not_evaluable=True, test=(
            f"not evaluable: part {name} decided this claim by the mean over seeds, before bound and readable_by "
            "claims were decided by the share of seeds beyond the threshold (docs/ceiling.md); evaluate the part "
            "again from its store (`layerstate stats`)"))
        return row, ""
    if not claim.per_arch and not claim.by_share and not row["se"] > 0:
        # a part evaluated before identical seeds were floored at their sequences' sampling error
        # (it kept a zero-width interval): the counts that floor needs are in the part's store
        row.update(not_evaluable=True, test=(
            f"not evaluable: its seeds' values are identical ({row['estimate']:+.4g}) and part {name} kept no "
            "standard error; evaluate the part again from its store (`layerstate stats`), which bounds them by "
            "the sequences' sampling error"))
        return row, ""
    note = _text(r, "interval_note")
    if note in HIDDEN and not claim.per_arch and not claim.by_share:  # exact tests read no interval
        raise ClaimError(
            f"part {name}: claim {r['claim']!r}'s interval is hidden in this table ({note}), and its "
            "verdict reads it; combine from the part's store instead of its report's CSV")
    if not _text(r, "crosscheck_model"):
        return row, ""
    est, se, df = (row[f"crosscheck_{k}"] for k in ("estimate", "se", "df"))
    if np.isfinite(est) and np.isfinite(se) and np.isfinite(df):
        row.crosscheck = claim_tests(claim, est, se, df)
        return row, "combined"
    if not np.isfinite(row["crosscheck_p"]):  # an estimate only (GLMM): no verdict either way
        row.crosscheck = {"estimate": est, "lower": row["crosscheck_lower"], "upper": row["crosscheck_upper"],
                          "p": np.nan}
        return row, ""
    row.crosscheck_verdict = _text(r, "crosscheck_verdict")
    return row, "part"


def combine_parts(claims: Sequence[Claim], parts: Sequence[tuple[str, xr.Dataset | pd.DataFrame]], *,
                  view: Any = None, profiles: Sequence[tuple[str, xr.Dataset | pd.DataFrame]] = (),
                  plans: Sequence[tuple[str, PartPlan]] = ()) -> xr.Dataset:
    """Combine the claims evaluated by the parts of one grid into one verdict table.

    Parameters
    ----------
    claims : list of Claim
        Every claim the experiment file declares: the family.
    parts : list of (name, claims table)
        Each part's ``results/claims`` Dataset or its report's ``claims.csv`` as a DataFrame;
        ``name`` says where it came from (a path).

    Returns
    -------
    xarray.Dataset
        The claims Dataset of :func:`~analysis.claims.evaluate.evaluate_claims` over every
        declared claim row in file order, Holm-corrected once over the whole family; plus
        ``part`` (which part each row came from; '' for none) and ``crosscheck_from``
        (``combined``: decided again here; ``part``: the part's own; '' without a cross-check).

    view : store.StoreView, optional
        The parts' stores read as one (:class:`store.view.StoreView`): a claim no part evaluated
        because it reads cells of several parts (a profile compared across tasks) is evaluated on
        it, where the cells lie (its row's ``part`` is ``view``); nothing is copied.
    profiles : list of (name, kept profiles), optional
        Each part's per-seed layer profiles of the declared profile claims
        (``results/claim_profiles`` or a report's ``claim_profiles.csv``,
        :mod:`analysis.claims.profiles`): a profile claim no part and no view evaluated is
        decided from them when they hold its three tasks (its row's ``part`` names the parts
        read, after ``profiles:``), by the test a store holding every task runs.
    plans : list of (name, seed plan), optional
        Each part's seed plan (:func:`read_plan`): every row from that part carries its plan
        (``plan_seeds``, ``plan_needed``, ``plan_more``, ``plan_cpu_s``, ``plan_note``), so that
        a claim still undecided says what the planner said deciding it would cost. The part
        planned it at the Holm level it tested it at, with the other parts' tests at p = 1;
        the combined family's level can only be as high or higher, so the seeds are at most
        what the combined level needs.

    Raises
    ------
    ClaimError
        A part holds a claim the file does not declare, or with another statement or kind; two
        parts evaluated the same claim row differently; a CSV hides an interval a verdict reads.
    """
    if not parts:
        raise ClaimError("no parts to combine; give each part's store or its report's tables/claims.csv")
    declared = {rid: c for c in claims for rid in claim_rows(c)}
    found: dict[str, tuple[str, pd.Series]] = {}
    for name, table in parts:
        for _, r in part_frame(table, name).iterrows():
            rid = str(r["claim"])
            claim = declared.get(rid)
            if claim is None:
                raise ClaimError(f"part {name} holds claim {rid!r}, which the experiment file does not declare; "
                                 "combine the parts of the experiment file they were run from")
            changed = _changed(claim, r)
            if changed:
                raise ClaimError(f"part {name}: claim {rid!r} was evaluated with {changed}; evaluate the part "
                                 "again with this file (`layerstate stats`), or combine with the file it ran from")
            if rid in found:
                other, prev = found[rid]
                if not all(np.isclose(_float(prev, k), _float(r, k), equal_nan=True, rtol=1e-12, atol=0)
                           for k in ("estimate", "p")):
                    raise ClaimError(f"claim {rid!r} was evaluated differently in parts {other} and {name} (the "
                                     "same part's results from two evaluations, or two parts holding one task); "
                                     "give each part once, as last evaluated")
                continue
            found[rid] = (name, r)
    if view is not None:
        found.update(_across_parts(claims, found, view))
    kept_profiles = [(name, profiles_frame(p, name)) for name, p in profiles]
    derived = profiles_rows(claims, [rid for c in claims for rid in claim_rows(c) if rid not in found],
                            kept_profiles) if kept_profiles else {}
    kept, ids, rows, sources, cross_from = [], [], [], [], []
    missing: list[Claim] = []  # one entry per claim row no part evaluated
    for claim in claims:
        for rid in claim_rows(claim):
            kept.append(claim)
            ids.append(rid)
            if rid in derived:
                name, row = derived[rid]
                rows.append(row)
                sources.append(f"profiles: {name}")
                cross_from.append("")
                continue
            if rid not in found:
                missing.append(claim)
                tasks = _tasks(claim)
                why = (f"it reads tasks {', '.join(tasks)}, which no one part holds; evaluate it on a store that "
                       "holds them all" if len(tasks) > 1 else
                       f"it reads task {', '.join(tasks)}; add the part that ran it")
                lacking = missing_words(claim, rid, kept_profiles) if claim.per_arch else ""
                if lacking:
                    why += (f", or give parts whose claim profiles (results/claim_profiles, a report's "
                            f"tables/claim_profiles.csv) hold {lacking}")
                rows.append({"test": f"not evaluable: no part given evaluated it ({why})", "not_evaluable": True})
                sources.append("")
                cross_from.append("")
                continue
            name, r = found[rid]
            row, how = _row(claim, r, name)
            rows.append(row)
            sources.append(name)
            cross_from.append(how)
    # each row no part evaluated is a row of the table, not evaluable: its own test (one per
    # row), its second tests and its opposite side's count with p = 1 there (verdicts.adjust)
    counted = (len(missing), sum(len(c.secondary_tests()) for c in missing), sum(c.contra_test() for c in missing))
    gone = list(dict.fromkeys(c.id for c in missing))
    correction = FAMILIES.replace("holm across the claims", "holm across the claims of every part") + (
        f"; {len(gone)} declared claims no part evaluated ({' + '.join(map(str, counted))} tests) count with p = 1"
        if missing else "")
    res = verdict_table(kept, ids, rows, correction=correction,
                        attrs={"parts": [name for name, _ in parts], "absent_claims": gone})
    res["part"] = ("claim", np.array(sources, dtype=str))
    res["crosscheck_from"] = ("claim", np.array(cross_from, dtype=str))
    if plans:
        _attach_plans(res, kept, ids, sources, plans, kept_profiles)
    return res


#: The columns of a part's seed plan a combined row carries, as ``plan_<column>``.
PLAN_NUMERIC = ("seeds", "needed", "more", "cpu_s")


@dataclass(frozen=True)
class PartPlan:
    """A part's seed plan (:func:`read_plan`): one row per claim (claim, seeds, needed, more,
    cpu_s, note, ...), and what it was costed from: each cell's CPU seconds per seed and the
    seeds it holds."""

    rows: pd.DataFrame
    costs: dict[Cell, float]
    held: dict[Cell, int]


def _attach_plans(res: xr.Dataset, claims: Sequence[Claim], ids: list[str], sources: list[str],
                  plans: Sequence[tuple[str, PartPlan]], kept_profiles: Sequence[tuple[str, pd.DataFrame]] = ()
                  ) -> None:
    """Give each row of ``res`` (``claims``: each row's claim) the plan of the part it came from
    (:func:`combine_parts`): NaN and '' where that part kept no plan of it. A row the part could
    not plan (its estimate on the wrong side of its threshold, planned before plans went towards
    a contradiction) is planned here towards its contradiction, at the combined family's level,
    from the part's costs (:func:`analysis.claims.planner.contra_plan`). A profile claim decided
    from the kept profiles and still undecided is planned by resampling them
    (:func:`_profile_plan`)."""
    by_part = {name: (plan, {str(r["claim"]): r for _, r in plan.rows.iterrows()}) for name, plan in plans}
    num = {k: np.full(len(ids), np.nan) for k in PLAN_NUMERIC}
    notes = [""] * len(ids)
    for i, (claim, rid, source) in enumerate(zip(claims, ids, sources, strict=True)):
        undecided = str(res["verdict"].values[i]) in (Verdict.INCONCLUSIVE, Verdict.NOT_EVALUABLE)
        plan, rows = by_part.get(source, (None, {}))
        r = rows.get(rid)
        got: PlanRow | None = None
        if claim.per_arch and undecided and source.startswith("profiles: "):
            got = _profile_plan(claim, rid, res.isel(claim=i), kept_profiles, [p for _, p in plans])
        elif plan is not None and r is not None and _text(r, "note") == WRONG_SIDE and undecided:
            got = _contra_again(claim, res.isel(claim=i), plan)
        if got is not None:
            for k in PLAN_NUMERIC:
                v = getattr(got, k)
                num[k][i] = np.nan if v is None else float(v)
            notes[i] = with_route(got.reason) if got.needed is not None else got.reason
        elif r is not None:
            for k in PLAN_NUMERIC:
                num[k][i] = _float(r, k)
            notes[i] = _text(r, "note")
            if plan is not None and np.isfinite(num["needed"][i]):
                # new seeds, decided alone (a part's plan stored before plans counted them so
                # asked only for the seeds its cells lacked): costed again from its cells
                cells = _row_cells(claim, rid)
                num["more"][i] = num["needed"][i]
                if cells and all(cell in plan.costs for cell in cells):
                    num["cpu_s"][i] = num["needed"][i] * sum(plan.costs[cell] for cell in cells)
                notes[i] = with_route(notes[i])
    for k, a in num.items():
        res[f"plan_{k}"] = ("claim", a)
    res["plan_note"] = ("claim", np.array(notes, dtype=str))
    res.attrs["plan_cells"] = json.dumps(_plan_cells(res, claims, ids, [p for _, p in plans]))


def _plan_cells(res: xr.Dataset, claims: Sequence[Claim], ids: list[str],
                plans: Sequence[PartPlan]) -> list[dict[str, Any]]:
    """Per cell the undecided claims read: the seeds it holds, the most new seeds any of them
    needs (a replication, decided on them alone: :mod:`analysis.stats.planning`), and what
    training them once costs (each cell trained once for all its claims, as the planner's
    total): what deciding every undecided claim would take."""
    held = {cell: n for p in plans for cell, n in p.held.items()}
    costs = {cell: c for p in plans for cell, c in p.costs.items()}
    reach: dict[Cell, int] = {}
    for i, (claim, rid) in enumerate(zip(claims, ids, strict=True)):
        need = float(res["plan_needed"].values[i])
        if str(res["verdict"].values[i]) not in (Verdict.INCONCLUSIVE, Verdict.NOT_EVALUABLE) or not np.isfinite(need):
            continue
        for cell in _row_cells(claim, rid):
            reach[cell] = max(reach.get(cell, 0), int(need))
    out = []
    for cell, need in sorted(reach.items()):
        have, cost = held.get(cell, 0), costs.get(cell, np.nan)
        out.append({"cell": "/".join(cell), "seeds": have, "needed": have + need, "more": need,
                    "cpu_s": need * cost if np.isfinite(cost) else None})
    return out


def _row_cells(claim: Claim, rid: str) -> tuple[Cell, ...]:
    """The cells a claim row reads: its declared cells, or a profile claim's three tasks for the
    row's architecture."""
    if isinstance(claim, ProfileMatchClaim):
        return claim.row_cells(rid)
    return declared_cells(claim) or ()


#: The most seeds a task's cell is planned to for a profile claim.
PROFILE_MAX = 30


def _profile_plan(claim: Claim, rid: str, row: xr.Dataset, kept: Sequence[tuple[str, pd.DataFrame]],
                  plans: Sequence[PartPlan], power: float = 0.8) -> PlanRow | None:
    """A profile claim row's plan: the fewest new seeds per task (a replication, decided on them
    alone: :mod:`analysis.stats.planning`) at which the claim is supported with probability
    ``power`` when seeds are drawn like the observed ones
    (:func:`analysis.stats.profiles.shape_test_power`, at the level of its Holm step), below that
    only where the exact test can reach the level at all; what training them costs, from the
    parts' cell costs. None where the kept profiles do not hold its three tasks."""
    if claim.differs_from is None or claim.matches is None:
        return None
    profiles = row_profiles(claim, rid, kept)
    tasks = (str(claim.task), str(claim.differs_from), str(claim.matches))
    if not all(t in profiles for t in tasks):
        return None
    arrays = [profiles[t].values for t in tasks]
    held = [int(np.isfinite(a).all(axis=1).sum()) for a in arrays]
    level = float(row.level) if np.isfinite(float(row.level)) else ALPHA
    cells = list(_row_cells(claim, rid))
    costs = {cell: c for p in plans for cell, c in p.costs.items()}
    claimed, other, matches = arrays
    margin = claim.decision_margin or 0.0
    now = shape_test_power(claimed, other, matches, (held[0], held[1], held[2]), level, margin=margin)
    for m in range(2, PROFILE_MAX + 1):
        if attainable_min_p(m, m) >= level:
            continue
        pw = shape_test_power(claimed, other, matches, (m, m, m), level, margin=margin)
        if pw >= power:
            more, cpu = new_seeds(cells, m, costs)
            return PlanRow(rid, min(held), m, more, cpu, now, (
                f"planned by resampling the kept per-seed profiles: supported in {pw:.0%} of draws with {m} new seeds "
                f"a task ({', '.join(f'{t} {h}' for t, h in zip(tasks, held, strict=True))} held), the exact "
                f"permutation test at its Holm level {level:.2g} and the profile closer by more than the margin "
                f"{margin:g}"))
    return PlanRow(rid, min(held), None, None, math.nan, now,
                   f"planned by resampling the kept per-seed profiles: not supported in {power:.0%} of draws "
                   f"with up to {PROFILE_MAX} seeds a task")


def _contra_again(claim: Claim, row: xr.Dataset, plan: PartPlan) -> PlanRow | None:
    """The plan towards its contradiction of a combined ``row`` whose part said only that its
    estimate lies on the wrong side; None where its cells cannot be told from the claim."""
    cells = declared_cells(claim)
    n = int(float(row.n_seeds)) if np.isfinite(float(row.n_seeds)) else 0
    if cells is None or n < 1:
        return None
    c = ClaimPlan(id=str(row.claim.values), cells=cells, sd=np.nan, effect=signed_distance(claim, float(row.estimate)),
                  level=float(row.level), seeds=n)
    return contra_plan(claim, c, estimate=float(row.estimate), se=float(row.se), short=float(row.short),
                       level=float(row.contra_level), costs=plan.costs)


def read_plan(path: str | Path, *, storage_options: dict | None = None) -> PartPlan | None:
    """A part's seed plan (:mod:`analysis.claims.planner`): a store's ``results/seed_plan``, or
    the ``seed_plan.csv`` beside a report's claims table, with the cells' costs and seeds (the
    store's runs, or the report's ``runs.csv``: training seconds, plus capture where recorded).
    None where the part kept none (a report of a store evaluated before plans were stored, or
    of a part without claims of its own)."""
    beside = _report_table(path)
    if beside is not None:
        kept = beside.with_name(f"{SEED_PLAN}.csv")
        if not kept.is_file():
            return None
        costs, held = _report_costs(beside.with_name("runs.csv"))
        return PartPlan(pd.read_csv(kept, dtype=str, keep_default_na=False), costs, held)
    st = open_analysis(str(path), write=False, storage_options=storage_options, results_options=storage_options)
    if SEED_PLAN not in st.results():
        return None
    ds = st.read_result(SEED_PLAN)
    per_claim = [v for v in ds.data_vars if ds[v].dims == ("claim",)]
    return PartPlan(ds[per_claim].to_dataframe().reset_index(), cell_costs(st), seeds_held(st))


def _report_table(path: str | Path) -> Path | None:
    """The claims table a report-side path names (a report folder: its ``tables/claims.csv``; a
    CSV: itself), beside which the report's other tables lie; None for a store."""
    p = Path(str(path))
    if p.is_dir() and (p / "tables").is_dir():
        return p / "tables" / "claims.csv"
    return p if p.suffix == ".csv" else None


def _report_costs(runs: Path) -> tuple[dict[Cell, float], dict[Cell, int]]:
    """Each cell's mean CPU seconds per seed and its seeds 0..n-1, from a report's runs table
    (:func:`analysis.claims.cells.cell_costs` and ``seeds_held`` of the store it was made of)."""
    if not runs.is_file():
        return {}, {}
    frame = pd.read_csv(runs)
    spent: dict[Cell, list[float]] = {}
    seeds: dict[Cell, set[int]] = {}
    for _, r in frame.iterrows():
        cell = (str(r["task"]), str(r["arch"]), str(r.get("variant", "default")))
        seeds.setdefault(cell, set()).add(int(r["seed"]))
        capture = float(r.get("capture_seconds", np.nan))  # absent from reports made before it was shown
        secs = float(r.get("train_seconds", np.nan)) + (capture if np.isfinite(capture) else 0.0)
        if np.isfinite(secs):
            spent.setdefault(cell, []).append(secs)
    return ({cell: float(np.mean(v)) for cell, v in spent.items()},
            {cell: first_seeds(got) for cell, got in seeds.items()})


def _across_parts(claims: Sequence[Claim], found: dict[str, tuple[str, pd.Series]], view: Any
                  ) -> dict[str, tuple[str, pd.Series]]:
    """The rows of the claims no part evaluated, evaluated on ``view`` (the parts' stores as
    one); only their tests are read from here, the verdicts come from the combined family."""
    todo = [c for c in claims if any(rid not in found for rid in claim_rows(c))]
    if not todo:
        return {}
    res = evaluate_claims(view, todo, probes=stored_probe_profiles(view))
    out = {}
    for _, r in part_frame(res, "view").iterrows():
        if str(r["claim"]) not in found:
            out[str(r["claim"])] = ("view", r)
    return out


def read_profiles(path: str | Path, *, storage_options: dict | None = None) -> pd.DataFrame | None:
    """A part's kept profiles (:mod:`analysis.claims.profiles`): a store's
    ``results/claim_profiles``, or the ``claim_profiles.csv`` beside a report's claims table;
    None where the part kept none (a part without profile claims, or stored before they were
    kept)."""
    beside = _report_table(path)
    if beside is not None:
        kept = beside.with_name(f"{CLAIM_PROFILES}.csv")
        return pd.read_csv(kept, dtype=str, keep_default_na=False) if kept.is_file() else None
    st = open_analysis(str(path), write=False, storage_options=storage_options, results_options=storage_options)
    if CLAIM_PROFILES not in st.results():
        return None

    table = st.read_result(CLAIM_PROFILES)
    stale = stale_table(st, table)
    if stale is not None:
        raise StaleResultError(f"{path}: its kept claim profiles are out of date: {stale}; evaluate its claims "
                               "again with `layerstate stats` (or `layerstate run`), then combine")
    return profiles_frame(table, str(path))


def _changed(claim: Claim, r: pd.Series) -> str:
    """How a part's row was evaluated under another claim than ``claim`` ('' if it was not):
    the statement, kind, margin, metric, threshold, or the test (direction, test_against)."""

    def differs(stored: str, declared: str, what: str) -> str:
        return f"another {what} ({stored!r}, the file: {declared!r})" if stored not in ("", declared) else ""

    for stored, declared, what in ((_text(r, "statement"), claim.statement, "statement"),
                                   (_text(r, "kind"), claim.kind, "kind"),
                                   (_text(r, "metric"), claim.metric or "", "metric")):
        if differs(stored, declared, what):
            return differs(stored, declared, what)
    if _text(r, "verdict") == Verdict.NOT_EVALUABLE:
        return ""
    margin = _float(r, "margin")
    declared_margin = claim.decision_margin
    if not np.isclose(margin, declared_margin if declared_margin else np.nan, equal_nan=True):
        return f"another margin ({margin:g}, the file: {declared_margin})"
    if claim.thresholded and not np.isclose(_float(r, "reference_mean"), float(claim.threshold or 0)):
        return f"another threshold ({_float(r, 'reference_mean'):g}, the file: {claim.threshold})"
    model = _text(r, "model")
    if claim.compares and model and not _text(r, "test").startswith(claim.test_text(model)):
        return f"another test ({_text(r, 'test')!r}, the file's: {claim.test_text(model)!r})"
    return ""


def _tasks(claim: Claim) -> list[str]:
    return list(dict.fromkeys(str(level) for _, factor, level in claim.levels() if factor == "task"))


#: The claims of a part that evaluated none of its own but kept the profiles the grid's profile
#: claims read of its tasks (:mod:`analysis.claims.profiles`): no row, given to combine all the same.
NO_CLAIMS = pd.DataFrame({"claim": pd.Series(dtype=str), "verdict": pd.Series(dtype=str)})


def read_part(path: str | Path, *, storage_options: dict | None = None) -> xr.Dataset | pd.DataFrame:
    """A part's claims: ``path`` is a report's ``claims.csv``, a report folder (its
    ``tables/claims.csv``), or a store whose results hold ``claims``; no row for a part that
    evaluated no claim of its own but kept profiles (``claim_profiles``)."""
    p = Path(str(path))
    if p.is_dir() and (p / "tables" / "claims.csv").is_file():
        p = p / "tables" / "claims.csv"  # a report folder
    elif p.is_dir() and (p / "tables" / f"{CLAIM_PROFILES}.csv").is_file():
        return NO_CLAIMS.copy()  # a part whose tasks only the grid's profile claims read: it kept their profiles
    elif p.is_dir() and ((p / "report.md").is_file() or (p / "index.html").is_file()):
        raise ClaimError(f"{path} is a report without a claims table (tables/claims.csv): its store had no "
                         "evaluated claims; run `layerstate stats` on the store and report it again")
    if p.suffix == ".csv":
        if not p.is_file():
            raise ClaimError(f"{p}: no such claims table; give a report's tables/claims.csv or a store")
        # every cell as text, so ids and statements stay as written ('01', 'NA'); numbers are
        # parsed by float(), which rounds exactly as the CSV's full-precision digits were written
        return pd.read_csv(p, dtype=str, keep_default_na=False)
    st = open_analysis(str(path), write=False, storage_options=storage_options,
                       results_options=storage_options)
    if "claims" not in st.results() and CLAIM_PROFILES in st.results():
        return NO_CLAIMS.copy()  # as a report folder holding only the kept profiles
    if "claims" not in st.results():
        raise MissingError(f"{path} holds no evaluated claims (results/claims); run `layerstate stats` "
                           "(or `layerstate run`) on it first")

    table = st.read_result("claims")
    stale = stale_table(st, table)
    if stale is not None:
        raise StaleResultError(f"{path}: its claims table is out of date: {stale}; decide them again with "
                               "`layerstate stats` (or `layerstate run`) on it, then combine")
    return table
