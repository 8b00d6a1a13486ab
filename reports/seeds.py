"""The claims' seeds: the sequential design's stages and decisions, and what deciding each claim
would cost (the seed planner). Both are parts of the claims section (:func:`parts`).

* **Sequential design** (:func:`sequential`), only when the store holds the result ``sequential``
  that ``layerstate run`` writes for an experiment with a ``[design]``: the design in one sentence,
  a table of its stages (seeds per cell, runs added, their CPU seconds, the cells the next stage
  trains), a table of its claims (final decision, the stage that decided it, the estimate with its
  repeated 95% interval and the boundary at the stage where it stopped), every stage's look at
  every claim, and one figure per claim across the stages.
* **Seeds: what deciding each claim would cost** (:func:`seed_plan`), whenever the experiment
  declares claims: the stored result ``seed_plan`` (:func:`analysis.claims.planner.plan_dataset`,
  what ``layerstate plan`` prints), as tables; the report computes nothing of its own.

Repeated intervals go through the rules of :mod:`reports.intervals` as a claim's own interval
does (the range of its metric, shown from 2 seeds: the interval its decision used).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from analysis.claims.kinds import trait
from analysis.claims.planner import PLAN_POWER, SEED_PLAN
from analysis.claims.record import record_problem
from analysis.stats.decision import Pending, Verdict
from reports import figures as F
from reports.claims import claim_range
from reports.intervals import INF, apply_rules, interval_text
from reports.model import Figure, Section, Table, missing_section
from reports.numbers import fmt, read_result
from reports.snapshot import Snapshot

#: The stored result of a group-sequential design (``layerstate run`` with a ``[design]``).
SEQUENTIAL = "sequential"
SEQUENTIAL_TITLE = "Sequential design"
PLAN_TITLE = "Seeds: what deciding each claim would cost"

SEQUENTIAL_INTRO = (
    "The claims were decided stage by stage over seeds, on a group-sequential design declared before "
    "the first result: each stage adds seeds only to the cells that claims still undecided read, and a "
    "claim is decided when its estimate crosses the boundary of its own test, which spends the claim's "
    "share of alpha over the stages (Holm-type across claims; docs/sequential.md). Its repeated 95% "
    "intervals cover together at every stage, so the one where a claim stopped holds whatever the "
    "stopping rule."
)
#: Said after the intro, by whether the stored claims hold the design's verdicts (``layerstate run``
#: with a design writes them) or the fixed test on every seed held (``layerstate stats``).
CLAIMS_HOLD_DESIGN = (
    "The claims table above holds these decisions (a claim stopped for futility, or not decided yet, reads "
    "inconclusive there); its CSV keeps the fixed test on every seed held as fixed_verdict, for reference "
    "only: a look at all the seeds without the design's boundaries is not a verdict the design licenses."
)
CLAIMS_HOLD_FIXED = (
    "The claims table above is the fixed test on every seed the store holds, not the design's decisions "
    "(it was evaluated without the design, e.g. by `layerstate stats`); the decisions here are the design's."
)
PLAN_INTRO = (
    "For each declared claim, the seeds per cell its own test needs for power "
    f"{PLAN_POWER:g} at its margin, at the level of its Holm step, from the spread between the seeds the "
    "store holds now. They are new seeds, decided on their own: a replication, its own family. These "
    "claims were already tested once on the seeds held, and testing those again pooled with new ones "
    "decides a second time at the same level (a one-sided t test at 4 seeds, then at 11: type-I error "
    "0.087 at level 0.05); a design declared before its first stage is the route that counts every seed. "
    "'new per cell' is how many seeds each of its cells trains, and 'CPU s' "
    "what they cost, from each cell's mean training plus capture seconds per seed. A bound or "
    "readable_by claim declares no effect: it is planned at the observed share of seeds beyond its "
    "threshold (the exact sign test; with statistic = 'mean', at the observed distance to it), which "
    "takes the observed effect at face value. `layerstate stats` stores this plan beside the "
    "verdicts; `layerstate plan EXPERIMENT --store STORE` prints it."
)

#: Said where claims are declared but no seed plan is stored (claims evaluated before ``layerstate
#: stats`` stored one beside its verdicts, or by another tool).
PLAN_MISSING = (
    "No seed plan (results/seed_plan) is stored with these claims: what deciding each would cost in seeds "
    "is not known here (`layerstate plan CLAIMS.toml --store STORE` prints it; CLAIMS.toml is the experiment "
    "or claims file of the verdicts)."
)
PLAN_COMMAND = "layerstate stats STORE --claims CLAIMS.toml"


def parts(snap: Snapshot, experiment: dict | None) -> list[Section]:
    """The parts this module adds to the claims section: the sequential design (when the store
    holds one) and the seed plan (when it holds one, or the experiment declares claims). A part that fails to
    build says why in its place."""
    out = []
    if SEQUENTIAL in snap.results():
        out.append(_guarded("claims-sequential", SEQUENTIAL_TITLE, lambda: sequential(snap, experiment)))
    # claims are declared by the experiment or by the claims file whose verdicts the store holds
    if SEED_PLAN in snap.results() or "claims" in snap.results() or declared_claims(experiment):
        out.append(_guarded("claims-seeds", PLAN_TITLE, lambda: seed_plan(snap, experiment)))
    return out


def _guarded(key: str, title: str, build: Callable[[], Section]) -> Section:
    try:
        return build()
    except Exception as exc:  # the rest of the report stands
        warnings.warn(f"report section {title!r} failed: {type(exc).__name__}: {exc}", stacklevel=3)
        return Section(key, title, error=f"{type(exc).__name__}: {exc}".splitlines()[0])


def declared_claims(experiment: dict | None) -> list[dict]:
    """The experiment's ``claims`` tables (empty without an experiment or claims)."""
    claims = (experiment or {}).get("claims") or []
    return [c for c in claims if isinstance(c, dict)] if isinstance(claims, list) else []


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _seconds(s: float) -> str:
    """``95 CPU s``; ``7200 CPU s (2.0 h)`` from 6 minutes on."""
    return f"{s:.0f} CPU s" + (f" ({s / 3600:.1f} h)" if s >= 360 else "")


def _int(x: Any) -> str:
    return str(int(x)) if _finite(x) else "–"


# ---------------------------------------------------------------------- the seed planner
def seed_plan(snap: Snapshot, experiment: dict | None) -> Section:
    """The stored seed plan (result ``seed_plan``, which ``layerstate stats`` and ``layerstate
    run`` store beside the claims table): one row per claim, one per cell that needs seeds, and
    the total. The report computes nothing: a store without one says how to make it."""
    sec = Section("claims-seeds", PLAN_TITLE, intro=PLAN_INTRO)
    if SEED_PLAN not in snap.results():
        sec.intro = ""
        sec.missing = PLAN_MISSING
        sec.command = PLAN_COMMAND
        return sec
    ds = read_result(snap.store, SEED_PLAN)
    changed = record_problem(snap.store, ds.attrs)
    if changed is not None:  # planned from results computed again since
        sec.intro = ""
        sec.missing = f"The stored seed plan is out of date: {changed}. Plan again on what the store holds now."
        sec.command = PLAN_COMMAND
        return sec
    power = float(ds.attrs.get("power", PLAN_POWER))
    rows, shown = [], []
    for i in range(ds.sizes["claim"]):
        r = ds.isel(claim=i)
        cid, note, planned = str(r.claim.values), str(r.note.values), bool(r.planned)
        row: dict[str, Any] = {"claim": cid, "planned": planned, "note": note}
        if planned:
            row |= {k: float(r[k]) for k in ("seeds", "power_now", "needed", "more", "cpu_s", "level", "effect", "sd")}
        rows.append(row)
        shown.append({"claim": cid, "seeds now": _int(row.get("seeds")), "power now": fmt(row.get("power_now"), 2)
                      if planned else "–", f"seeds for power {power:g}": _int(row.get("needed")),
                      "new per cell": _int(row.get("more")), "CPU s": fmt(row.get("cpu_s"), 0) if planned else "–",
                      "note": note})
    cols = ["claim", "planned", "seeds", "power_now", "needed", "more", "cpu_s", "level", "effect", "sd", "note"]
    sec.tables.append(Table("seed_plan", f"Per claim: the seeds its test needs for power {power:g} and what "
                            "the new ones cost.", pd.DataFrame(rows, columns=cols), pd.DataFrame(shown)))
    crow, cshown = [], []
    for j in range(ds.sizes.get("cell", 0)):
        c = ds.isel(cell=j)
        have, reach = int(c.cell_seeds), int(c.cell_planned_seeds)
        if reach <= have:
            continue  # a cell that needs nothing more is not a line of the plan
        task, arch, variant = str(c.cell.values).split("/")
        cost, spend = float(c.cell_cpu_s_per_seed), float(c.cell_cpu_s)
        crow.append({"task": task, "arch": arch, "variant": variant, "seeds": have, "planned_seeds": reach,
                     "cpu_s_per_seed": cost, "cpu_s": spend})
        cshown.append({"cell": str(c.cell.values), "seeds now": str(have), "seeds planned": str(reach),
                       "CPU s per seed": fmt(cost, 1) if _finite(cost) else "no measured time",
                       "CPU s": fmt(spend, 0)})
    if crow:
        sec.tables.append(Table(
            "seed_plan_cells", "Per cell: the new seeds it trains (the most any claim reading it needs), once "
            "for all its claims, numbered after the seeds it holds, at its measured CPU seconds per seed.",
            pd.DataFrame(crow), pd.DataFrame(cshown)))
    total = float(ds.attrs.get("cpu_s", math.nan))
    if _finite(total):
        sec.notes.append(f"Total: {_seconds(total)} for every planned claim to reach power {power:g}.")
    else:
        sec.notes.append("Total: not known: a cell that needs more seeds has no measured training time "
                         "(its runs record no train_seconds).")
    return sec


# ---------------------------------------------------------------------- the sequential design
def sequential(snap: Snapshot, experiment: dict | None = None) -> Section:
    """The stored sequential design (result ``sequential``): its sentence, stages, claims, every
    stage's look at every claim, and a figure per claim."""
    ds = read_result(snap.store, SEQUENTIAL)
    changed = record_problem(snap.store, ds.attrs)
    if changed is not None:  # decided on results computed again since: not shown as decisions
        return missing_section("claims-sequential", SEQUENTIAL_TITLE, f"The stored stages are out of date: {changed}. "
                               "Decide them again on the results the store holds now.", "run-design")
    design = _json_attr(ds.attrs.get("design"))
    fixed = _json_attr(ds.attrs.get("fixed"))
    intro = f"{design_sentence(design)} {SEQUENTIAL_INTRO}"
    if "claims" in snap.results():
        held = snap.store.result_attrs("claims").get("sequential")
        intro += " " + (CLAIMS_HOLD_DESIGN if held else CLAIMS_HOLD_FIXED)
    sec = Section("claims-sequential", SEQUENTIAL_TITLE, intro=intro)
    info = _claim_info(snap, experiment)
    looks = looks_frame(ds, info)
    stages = stages_frame(ds, looks)
    sec.tables.append(Table("sequential_stages", "Stages: the seeds per cell after each, the runs it added and "
                            "their CPU seconds (training and capture), the claims it decided, and the cells "
                            "the next stage trains.", stages, _stages_display(stages)))
    claims = claims_frame(ds, looks)
    sec.tables.append(Table("sequential_claims", "Claims: the design's decision, the stage that decided it, "
                            "and the estimate with its repeated 95% interval and the boundary of its test at "
                            "the stage where it stopped (its last stage while it goes on).",
                            claims, _claims_display(claims, looks)))
    sec.tables.append(Table("sequential_looks", "Every stage's look at every claim it evaluated.",
                            looks, _looks_display(looks)))
    cpu = pd.to_numeric(stages["cpu_seconds"], errors="coerce").to_numpy(dtype=float)
    if np.isfinite(cpu).any():
        total = float(np.nansum(cpu))
        unknown = [str(k) for k, c in zip(stages["stage"], cpu, strict=True) if not np.isfinite(c)]
        sec.notes.append(f"CPU time of the runs the stages added: {_seconds(total)}"
                         + (f", without stage {', '.join(unknown)}, whose runs record none." if unknown else "."))
    for cid, why in fixed.items():
        sec.notes.append(f"{cid}: not decided sequentially: {why}.")
    used: set[str] = set()
    for r in claims.itertuples(index=False):
        rows = looks[looks["claim"] == r.claim]
        if not len(rows):
            continue
        name = _figure_name(str(r.claim), used)
        title = f"{r.claim}: {r.final or 'not evaluated'}" + (
            f" at stage {int(r.decided_at)} ({_int(r.seeds)} seeds)" if r.decided_at > 0 else "")
        sec.figures.append(Figure(
            name, f"{r.claim} ({r.test}): estimate with its repeated 95% interval at each stage and the "
            "boundaries of its test.", F.sequential_claim(rows, title, value=_tested_value(str(r.test)))))
    return sec


def _json_attr(text: Any) -> dict:
    if isinstance(text, dict):
        return text
    try:
        out = json.loads(str(text))
    except (TypeError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


SPENDING = {"obrien-fleming": "O'Brien-Fleming-like", "pocock": "Pocock-like"}


def design_sentence(d: dict) -> str:
    """The design in one sentence (from the result's ``design`` attribute)."""
    try:
        first, step, most = int(d["first_seeds"]), int(d["stage_seeds"]), int(d["max_seeds"])
    except (KeyError, TypeError, ValueError):
        return "Design: not recorded with the stored result."
    seeds = [*range(first, most, max(step, 1)), most]
    alpha = d.get("alpha", 0.05)
    text = (f"Design: {first} seeds per cell at the first stage, then {step} more "
            f"{'seed' if step == 1 else 'seeds'} a stage for the cells undecided claims read, up to {most} "
            f"(stages at {', '.join(map(str, seeds))} seeds per cell); alpha {float(alpha):g} per family of "
            f"claims, spent over the stages by {SPENDING.get(str(d.get('spending')), str(d.get('spending')))} "
            "Lan-DeMets boundaries")
    if d.get("futility", "none") != "none":
        text += (f"; a claim stops for futility (non-binding) when the conditional power of its test at its "
                 f"maximum seeds is below {float(d.get('futility_power', 0.1)):g}")
    else:
        text += "; no futility stop"
    by_arch = d.get("max_seeds_by_arch") or {}
    if isinstance(by_arch, dict) and by_arch:
        text += "; " + ", ".join(f"{a} cells stop at {n} seeds" for a, n in sorted(by_arch.items()))
    return text + "."


def _claim_info(snap: Snapshot, experiment: dict | None) -> dict[str, tuple[str, str | None]]:
    """Claim id -> (kind, metric): from the experiment's claims tables, else the stored claims."""
    out: dict[str, tuple[str, str | None]] = {}
    if "claims" in snap.results():
        try:
            res = read_result(snap.store, "claims")
            metric = res["metric"].values if "metric" in res else [None] * res.sizes["claim"]
            for cid, kind, m in zip(res["claim"].values, res["kind"].values, metric, strict=True):
                out[str(cid).split("[", 1)[0]] = (str(kind), None if m is None else str(m))
        except Exception:  # the kinds only choose the intervals' ranges and signs
            pass
    for c in declared_claims(experiment):
        if c.get("id") and c.get("kind"):
            out.setdefault(str(c["id"]), (str(c["kind"]), str(c.get("metric") or "accuracy")))
    return out


def looks_frame(ds, info: dict[str, tuple[str, str | None]]) -> pd.DataFrame:
    """One row per (stage, claim) the design evaluated (its decision not ''), with the stage's seeds
    and the repeated interval under the rules of :mod:`reports.intervals` (its metric's range, shown
    from 2 seeds as a claim's own interval is)."""
    frame = ds[["decision", "estimate", "se", "df", "level", "critical", "bound_low", "bound_high", "rci_low",
                "rci_high", "conditional_power"]].to_dataframe().reset_index()
    frame["decision"] = frame["decision"].astype(str)
    frame["claim"] = frame["claim"].astype(str)
    frame["margin_test"] = ""
    if "margin_test" in ds:  # a claim decided by its margin's test is shown with that test's boundaries
        claim_ids = ds["claim"].values.astype(str)
        finals = dict(zip(claim_ids, ds["final"].values.astype(str), strict=True))
        margin_tests = dict(zip(claim_ids, ds["margin_test"].values.astype(str), strict=True))
        margin = ds[["margin_bound_low", "margin_bound_high", "margin_level"]].to_dataframe().reset_index()
        by_margin = np.array([finals[c] in (Verdict.EQUIVALENT, Verdict.NEGLIGIBLE) and bool(margin_tests[c])
                              for c in frame["claim"]], dtype=bool)
        for mine, theirs in (("bound_low", "margin_bound_low"), ("bound_high", "margin_bound_high"),
                             ("level", "margin_level")):
            frame.loc[by_margin, mine] = margin.loc[by_margin, theirs].to_numpy()
        frame.loc[by_margin, "critical"] = np.nan  # its own test's t, not the margin's
        frame.loc[by_margin, "margin_test"] = [margin_tests[c] for c in frame.loc[by_margin, "claim"]]
    frame = frame[frame["decision"] != ""].reset_index(drop=True)
    seeds = dict(zip(ds["stage"].values.tolist(), ds["seeds"].values.tolist(), strict=True))
    frame["stage"] = frame["stage"].astype(int)
    frame["seeds"] = [int(seeds[s]) for s in frame["stage"]]
    tests = dict(zip(ds["claim"].values.astype(str), ds["test"].values.astype(str), strict=True))
    frame["test"] = [m or tests[c] for c, m in zip(frame["claim"], frame["margin_test"], strict=True)]
    kinds = [info.get(c, ("", None)) for c in frame["claim"]]
    ranges = [claim_range(k, m) if k else (-INF, INF) for k, m in kinds]
    frame["signed"] = [trait(k, "compares") for k, _ in kinds]
    frame = apply_rules(frame, [r[0] for r in ranges], [r[1] for r in ranges], lower="rci_low", upper="rci_high",
                        n_seeds="seeds", note="rci_interval_note", seed_values=None, min_seeds=2)
    first = ["claim", "stage", "seeds", "decision", "test", "estimate", "rci_low", "rci_high", "rci_interval_note",
             "bound_low", "bound_high", "se", "df", "level", "critical", "conditional_power", "signed"]
    order = {str(c): i for i, c in enumerate(ds["claim"].values)}  # the result's claim order
    frame = frame.assign(_order=frame["claim"].map(order)).sort_values(["_order", "stage"])
    return frame[first].reset_index(drop=True)


def stages_frame(ds, looks: pd.DataFrame) -> pd.DataFrame:
    """One row per stage: seeds per cell, runs added, their CPU seconds, the claims it decided
    (``claim: decision``) and the cells the next stage trains."""
    decided = looks[looks["decision"] != Pending.CONTINUE]
    frame = pd.DataFrame({
        "stage": ds["stage"].values.astype(int),
        "seeds": ds["seeds"].values.astype(int),
        "runs_added": ds["runs_added"].values.astype(int),
        "cpu_seconds": ds["cpu_seconds"].values.astype(float),
        "decided": ["; ".join(f"{r.claim}: {r.decision}" for r in decided[decided["stage"] == k].itertuples())
                    for k in ds["stage"].values.astype(int)],
        "cells_next": [str(c) for c in ds["cells_next"].values],
    })
    return frame


def _stages_display(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "stage": frame["stage"].astype(str),
        "seeds per cell": frame["seeds"].astype(str),
        "runs added": frame["runs_added"].astype(str),
        "CPU s": [fmt(x, 0) for x in frame["cpu_seconds"]],
        "decided at this stage": frame["decided"].replace("", "none"),
        "cells the next stage trains": frame["cells_next"].replace("", "none"),
    })


def claims_frame(ds, looks: pd.DataFrame) -> pd.DataFrame:
    """One row per claim: its test, final decision, the stage deciding it (0: none), its maximum
    seeds, and its look at the stage where it stopped (its last stage otherwise)."""
    rows = []
    for j, cid in enumerate(ds["claim"].values.astype(str)):
        decided_at = int(ds["decided_at"].values[j])
        mine = looks[looks["claim"] == cid]
        at = mine[mine["stage"] == decided_at] if decided_at > 0 else mine.tail(1)
        look: dict[str, Any] = at.iloc[-1].to_dict() if len(at) else {}
        rows.append({
            # the test whose boundary is shown: the margin's where it decided the claim
            "claim": cid, "test": str(look.get("test") or ds["test"].values[j]), "final": str(ds["final"].values[j]),
            "decided_at": decided_at, "stage": look.get("stage", 0), "seeds": look.get("seeds", np.nan),
            "max_seeds": int(ds["max_seeds"].values[j]),
            **{k: look.get(k, np.nan) for k in ("estimate", "rci_low", "rci_high", "bound_low", "bound_high",
                                                "se", "level", "critical", "conditional_power")},
            "rci_interval_note": look.get("rci_interval_note", ""), "signed": bool(look.get("signed", False)),
        })
    return pd.DataFrame(rows, columns=["claim", "test", "final", "decided_at", "stage", "seeds", "max_seeds",
                                       "estimate", "rci_low", "rci_high", "rci_interval_note", "bound_low",
                                       "bound_high", "se", "level", "critical", "conditional_power", "signed"])


def _rci(r) -> str:
    return interval_text(float(r.estimate), float(r.rci_low), float(r.rci_high), str(r.rci_interval_note or ""),
                         signed=bool(r.signed), why_none="no interval")


def _claims_display(frame: pd.DataFrame, looks: pd.DataFrame) -> pd.DataFrame:
    shown = pd.DataFrame({
        "claim": frame["claim"],
        "test": frame["test"],
        "decision": frame["final"].replace("", "not evaluated"),
        "decided at stage": [_int(k) if k > 0 else "–" for k in frame["decided_at"]],
        "seeds": [_int(n) for n in frame["seeds"]],
        "max seeds": frame["max_seeds"].astype(str),
        "estimate [repeated 95% CI]": [_rci(r) for r in frame.itertuples(index=False)],
        "boundary (decided when the estimate is)": [boundary_text(r) for r in frame.itertuples(index=False)],
        "level": [_level(x) for x in frame["level"]],
    })
    if np.isfinite(pd.to_numeric(looks["conditional_power"], errors="coerce")).any():
        shown["conditional power"] = [fmt(x, 2) for x in frame["conditional_power"]]
    return shown


def _looks_display(frame: pd.DataFrame) -> pd.DataFrame:
    shown = pd.DataFrame({
        "claim": frame["claim"],
        "stage": frame["stage"].astype(str),
        "seeds": frame["seeds"].astype(str),
        "decision": frame["decision"],
        "estimate [repeated 95% CI]": [_rci(r) for r in frame.itertuples(index=False)],
        "boundary (decided when the estimate is)": [boundary_text(r) for r in frame.itertuples(index=False)],
        "level": [_level(x) for x in frame["level"]],
    })
    if np.isfinite(pd.to_numeric(frame["conditional_power"], errors="coerce")).any():
        shown["conditional power"] = [fmt(x, 2) for x in frame["conditional_power"]]
    return shown


def _level(x: Any) -> str:
    return f"{float(x):.2g}" if _finite(x) else "–"


_TEST = re.compile(r"^(greater than|less than|different from|within|outside) (\S+)(?: \+- (\S+))?")


def _tested_value(test: str) -> float | None:
    m = _TEST.match(test)
    try:
        return float(m.group(2)) if m else None
    except ValueError:
        return None


def boundary_text(r) -> str:
    """Where the claim's own test decides it at a stage, in the estimate's units: ``>= 0.132``
    (greater), ``<= -0.050`` (less), ``between -0.020 and +0.020`` (within), ``<= -0.1 or >= +0.1``
    (different from, outside); '–' where it has none (no finite boundary)."""
    lo, hi = float(r.bound_low), float(r.bound_high)
    signed = bool(getattr(r, "signed", False))

    def n(x: float) -> str:
        return fmt(x + 0.0, 3, signed=signed)

    m = _TEST.match(str(r.test))
    kind = m.group(1) if m else ""
    if kind == "greater than" and math.isfinite(lo):
        return f"≥ {n(lo)}"
    if kind == "less than" and math.isfinite(hi):
        return f"≤ {n(hi)}"
    if math.isfinite(lo) and math.isfinite(hi):
        if kind == "within":
            # value - margin + critical se >= value + margin - critical se (stored unsorted; an
            # older result sorted them, and its critical t says it)
            margin = _float(m.group(3)) if m else math.nan
            se, crit = float(getattr(r, "se", math.nan)), float(r.critical)
            if lo >= hi or (math.isfinite(margin) and math.isfinite(se) and crit * se >= margin):
                return "none at this stage (its two one-sided boundaries cross: too few seeds)"
            return f"between {n(lo)} and {n(hi)}"
        if kind in ("different from", "outside"):
            return f"≤ {n(lo)} or ≥ {n(hi)}"
        return f"{n(lo)}, {n(hi)}"
    one = [x for x in (lo, hi) if math.isfinite(x)]
    return n(one[0]) if one else "–"


def _float(text: str | None) -> float:
    try:
        return float(text) if text is not None else math.nan
    except ValueError:
        return math.nan


def _figure_name(claim: str, used: set[str]) -> str:
    """A file name for a claim's figure, unique in the report."""
    base = "sequential_" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", claim).strip("_.") or "claim")
    name, i = base, 2
    while name in used:
        name, i = f"{base}_{i}", i + 1
    used.add(name)
    return name
