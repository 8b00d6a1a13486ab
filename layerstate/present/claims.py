"""What the command line prints about claims: verdict lines, the claims table, plans and sequential designs."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis.claims.kinds import trait
from analysis.claims.planner import plan_note
from analysis.claims.sequential import decided_by, one_sided, signed
from analysis.claims.verdicts import fmt_p, power_words, seeds_note, share_words
from analysis.stats.decision import Verdict
from reports.claims import claims_display, claims_frame

if TYPE_CHECKING:
    import xarray as xr

    from analysis.claims.planner import Plan
    from analysis.claims.sequential import SequentialRun


def _get(r: xr.Dataset, name: str, default: Any = "") -> Any:
    """A claim row's field, or ``default`` for results stored before the field existed."""
    return r[name].values.item() if name in r else default


def claim_summaries(res: xr.Dataset) -> Iterator[str]:
    """One short line per evaluated claim: the verdict and why (its outcome against the margin,
    interval and corrected p), and a flag when the cross-check model reaches another verdict."""
    for r, cid, verdict, why_not in _claim_rows(res, "claim "):
        if why_not is not None:
            yield why_not
            continue
        flag = (f"; cross-check {_get(r, 'crosscheck_model')} says {_get(r, 'crosscheck_verdict')}"
                if _get(r, "disagreement", False) else "")
        reason = _get(r, "reason")
        if reason:  # the outcome and why: its interval and corrected p are in it
            yield f"claim {cid}: {verdict} — {reason}{flag}"
            continue
        yield f"claim {cid}: {verdict} (estimate {_interval(r)}, corrected p={fmt_p(float(r.p_adjusted))}{flag})"


def _claim_rows(res: xr.Dataset, prefix: str = "") -> Iterator[tuple[xr.Dataset, str, str, str | None]]:
    """Each claim row: (row, id, verdict, None), or for a claim not evaluable the line saying why
    in place of None."""
    for i in range(res.sizes["claim"]):
        r = res.isel(claim=i)
        cid, verdict = str(r.claim.values), str(r.verdict.values)
        yield r, cid, verdict, (f"{prefix}{cid}: {r.test.values}" if verdict == Verdict.NOT_EVALUABLE else None)


def _interval(r: xr.Dataset) -> str:
    """A claim's estimate and the interval its test used, as the report prints it."""
    est, lo, hi = float(r.estimate), float(r.lower), float(r.upper)
    fmt = "+.3f" if trait(str(r.kind.values), "compares") else ".3f"  # as the report signs them
    if not np.isfinite(est):
        return "not computable"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        why = "permutation test: no interval" if trait(str(r.kind.values), "per_arch") else "no interval"
        return _with_share(r, f"{est:{fmt}} [{why}]")
    note = ("" if str(_get(r, "model")) == "sign_test" or trait(str(r.kind.values), "per_arch")
            else seeds_note(float(_get(r, "n_seeds", np.nan))))
    clipped = str(_get(r, "interval_note", "") or "")
    text = f"{est:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]{f' ({clipped})' if clipped else ''}{note}"
    return _with_share(r, text)


def _with_share(r: xr.Dataset, text: str) -> str:
    """A share claim's estimate led by its counts: ``4 of 5 seeds beyond 0.9; median seed 0.962 [...]``."""
    if str(_get(r, "model")) != "sign_test":
        return text
    head = share_words(float(_get(r, "beyond", np.nan)), float(_get(r, "n_seeds", np.nan)),
                       float(_get(r, "reference_mean", np.nan)), str(_get(r, "test", "")))
    return f"{head} {text}" if head else text


def claim_lines(res: xr.Dataset) -> Iterator[str]:
    """One full line per evaluated claim: verdict and why (the outcome against its margin),
    estimate, interval, p and Holm-corrected p, power, the model, the cross-check model's
    estimate, interval, p and verdict (flagged when it differs), and what was dropped."""
    for r, cid, verdict, why_not in _claim_rows(res):
        if why_not is not None:
            yield why_not
            continue
        reason = _get(r, "reason")
        line = f"{cid}: {verdict}" + (f" — {reason}" if reason else "")
        power = power_words(str(r.kind.values), float(r.power), float(_get(r, "power_at", np.nan)),
                            float(_get(r, "margin", np.nan)), sequential=float(_get(r, "sequential_stage", 0) or 0) > 0,
                            share=str(_get(r, "model")) == "sign_test")
        line += (f" | estimate {_interval(r)}  p={fmt_p(float(r.p))} (Holm {fmt_p(float(r.p_adjusted))})  "
                 f"{power}  — {r.test.values}")
        cross = _get(r, "crosscheck_model")
        if cross:
            x_lo, x_hi = float(_get(r, "crosscheck_lower", np.nan)), float(_get(r, "crosscheck_upper", np.nan))
            iv = f" [{x_lo:+.3f}, {x_hi:+.3f}]" if np.isfinite(x_lo) else ""
            x_p = float(_get(r, "crosscheck_p", np.nan))
            line += f" | cross-check {cross}: {float(_get(r, 'crosscheck_estimate', np.nan)):+.3f}{iv}"
            line += f" p={x_p:.3g}" if np.isfinite(x_p) else ""
            x_v = _get(r, "crosscheck_verdict")
            if x_v:
                line += " → " + (f"{x_v} (DISAGREES)" if _get(r, "disagreement", False) else f"{x_v} (agrees)")
        sds = [float(_get(r, k, np.nan)) for k in ("sd_seed", "sd_model", "sd_sequence")]
        if np.isfinite(sds).all():
            line += f" | SD seed {sds[0]:.3f}, model {sds[1]:.3f}, sequence {sds[2]:.3f}"
        for extra in ("variance", "dropped"):
            if _get(r, extra):
                line += f" | {_get(r, extra)}"
        yield line


def write_claims_table(res: xr.Dataset, out: str, source: str) -> list[str]:
    """Write a combined claims table (:func:`analysis.claims.combine.combine_parts`) into the
    folder ``out``: ``claims.csv`` (every column, full precision, interval rules applied as in
    a report) and ``claims.md`` (claim, statement, estimate and interval, verdict, Holm p, why,
    part). Returns the two paths."""

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    frame = claims_frame(res)
    csv = folder / "claims.csv"
    frame.to_csv(csv, index=False)
    shown = claims_display(frame)
    cols = ["claim", "statement", "estimate [95% CI]", "verdict", "p (Holm)", "reason"]

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = [f"# Claims of {source}, combined over {len(res.attrs.get('parts', []))} parts", "",
             f"alpha = {res.attrs.get('alpha', 0.05)}; correction: {res.attrs.get('correction', 'holm')}.", "",
             "| " + " | ".join([*cols, "part"]) + " |", "|" + "---|" * (len(cols) + 1)]
    parts = [str(p) or "–" for p in res["part"].values] if "part" in res else ["–"] * len(shown)
    for (_, r), part in zip(shown.iterrows(), parts, strict=True):
        lines.append("| " + " | ".join(cell(r[c]) for c in cols) + f" | {cell(part)} |")
    lines += undecided_cost_lines(res)
    md = folder / "claims.md"
    md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [str(csv), str(md)]


#: The verdicts a combined table's seed-plan section lists.
UNDECIDED = ("inconclusive", "not evaluable")


def undecided_cost_lines(res: xr.Dataset) -> list[str]:
    """The section of a combined claims table (:func:`write_claims_table`) that says, for each
    claim still undecided, what its part's seed planner said deciding it would cost (columns
    ``plan_*`` of :func:`analysis.claims.combine.combine_parts`); no line when no part kept a
    plan."""
    if "plan_note" not in res:
        return []
    undecided = [i for i, v in enumerate(res["verdict"].values) if str(v) in UNDECIDED]
    if not undecided:
        return []

    def count(v: float) -> str:
        return f"{int(v)}" if np.isfinite(v) else "–"

    out = ["", "## What deciding the undecided claims would cost", "",
           "From the seed planner of the part that evaluated each claim (its `tables/seed_plan.csv`): "
           "the seeds at which the claim's test reaches power 0.8, as new seeds in each cell it reads, "
           "decided on their own (a replication, its own family: tested with the seeds held, those "
           "would be decided a second time at the same level), and their CPU seconds at the cells' "
           "measured training time. A claim whose estimate "
           "lies on the wrong side of its threshold is planned towards its contradiction (the test of "
           "the other side, at the two-sided level), at the observed distance or share taken at face "
           "value. Each part planned at the Holm level it tested the claim at, with the other parts' "
           "tests at p = 1; the combined family's level is as high or higher, so these are at most the "
           "seeds it needs. Seeds past a design's declared maximum are a new design, declared before "
           "they are trained.", "",
           "| claim | verdict | seeds now | seeds needed | new per cell | CPU s | planned at | part |",
           "|---|---|---|---|---|---|---|---|"]
    for i in undecided:
        r = res.isel(claim=i)
        note = str(r["plan_note"].values) or "no plan kept by its part"
        cpu = float(r["plan_cpu_s"])
        out.append(f"| {r.claim.values} | {r.verdict.values} | {count(float(r['plan_seeds']))} | "
                   f"{count(float(r['plan_needed']))} | {count(float(r['plan_more']))} | "
                   f"{f'{cpu:,.0f}' if np.isfinite(cpu) else '–'} | {note.replace('|', '/')} | "
                   f"{str(r['part'].values) or '–'} |")
    cells = json.loads(res.attrs.get("plan_cells", "[]"))
    if cells:
        out += ["", "Per cell, the most new seeds any undecided claim reading it needs, trained once:", "",
                "| cell | seeds now | seeds after | new | CPU s |", "|---|---|---|---|---|"]
        for c in cells:
            cost = "–" if c["cpu_s"] is None else f"{c['cpu_s']:,.0f}"
            out.append(f"| {c['cell']} | {c['seeds']} | {c['needed']} | {c['more']} | {cost} |")
        known = [c["cpu_s"] for c in cells if c["cpu_s"] is not None]
        out += ["", f"In all: {sum(known):,.0f} CPU s ({sum(known) / 3600:.1f} CPU hours) of training"
                + (f", and {len(cells) - len(known)} cells with no measured time" if len(known) < len(cells) else "")
                + " to give every undecided claim the seeds its plan names."]
    return out


def design_command(experiment: str, store: str, design: str | None, tasks: Sequence[str] = ()) -> str:
    """The one command that trains a design's next stage into ``store`` and decides it (it
    trains exactly the cells the design names, then analyses and decides them): a store at
    ``DIR/store.zarr`` is the run folder ``DIR``, any other keeps its path with ``--store``."""
    parts = ["layerstate", "run", experiment]
    where = PurePath(store.rstrip("/"))
    if "://" not in store and where.name == "store.zarr":
        parts += ["--out", str(where.parent)]
    else:
        parts += ["--store", store, "--out", str(where.with_name(where.name.removesuffix(".zarr") + "-run"))
                  if "://" not in store else "run-out"]
    if design is not None:
        parts += ["--design", design]
    for t in tasks:
        parts += ["--task", t]
    return "run `" + " ".join(shlex.quote(p) for p in parts) + "`: it trains them, analyses them and decides the stage"


# ---------------------------------------------------------------------- the seed plan, the design
def _num(x: float | int | None, fmt: str = "d") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return format(x, fmt)


def replication_store(store: str) -> str:
    """Where a plan's new seeds go: a new local store beside ``store`` (named after it), decided
    there on its own (:mod:`analysis.stats.planning`)."""
    if "://" in store:
        return PurePath(store.rstrip("/")).name.removesuffix(".zip").removesuffix(".zarr") + "-replication.zarr"
    where = PurePath(store.rstrip("/"))
    return str(where.with_name(where.name.removesuffix(".zip").removesuffix(".zarr") + "-replication.zarr"))


def plan_lines(p: Plan, experiment: str = "EXPERIMENT.toml", store: str = "STORE") -> Iterator[str]:
    """The plan as the command prints it: one line per claim, then the cells that need new seeds,
    the total, and the commands that train exactly those seeds into a replication store and
    decide them there (``experiment``, ``store``: the paths the commands name)."""
    yield "claim | seeds | power now | seeds for power 0.8 | new per cell | CPU s | note"
    for c, r in zip(p.claims, p.rows, strict=True):
        yield (f"{r.id} | {r.seeds} | {_num(r.power_now, '.2f')} | {_num(r.needed)} | {_num(r.more)} | "
               f"{_num(r.cpu_s, '.0f')} | {plan_note(p, c, r)}")
    for cid, why in p.skipped.items():
        yield f"{cid} | – | – | – | – | – | not planned: {why}"
    cells = {c: (have, reach) for c, (have, reach) in p.total.get("cells", {}).items() if reach > have}
    for cell, (have, reach) in sorted(cells.items()):
        cost = p.costs.get(cell)
        yield (f"cell {'/'.join(cell)}: {reach - have} new seeds ({have}-{reach - 1}; it holds {have})"
               + (f", {cost:.0f} s per seed" if cost is not None else ", no measured time"))
    total = p.total.get("cpu_s", math.nan)
    yield f"total: {_num(total, '.0f')} CPU s for every planned claim to reach power 0.8"
    if not cells:
        yield "next: nothing to train; every planned claim has the seeds it needs (or cannot reach its power)"
        return
    first = min(have for have, _ in cells.values())
    most = max(reach for _, reach in cells.values())
    new = replication_store(store)
    yield (f"next: a replication, its new seeds decided on their own (their own family; tested with the seeds "
           f"{store} holds, those would be decided a second time at the same level). Train them into a new "
           f"store, cell by cell, listing seeds = {list(range(first, most))} in {experiment}'s [grid]:")
    for (task, arch, _), (have, reach) in sorted(cells.items()):
        seeds = f"{have}-{reach - 1}" if reach - have > 1 else str(have)
        yield f"  layerstate train {experiment} --store {new} --task {task} --arch {arch} --seed {seeds}"
    yield (f"  then `layerstate run {experiment} --store {new} --out DIR` captures, analyses and decides them "
           "(what is stored is reused); or declare a [design] and let `layerstate run --design` add new seeds "
           "stage by stage")


def sequential_lines(run: SequentialRun, next_step: str = "the run trains them now") -> Iterator[str]:
    """Per stage and claim: seeds, estimate, repeated interval, boundary and decision; then what
    the next stage trains and ``next_step``: how (a command that trains exactly those cells)."""
    d = run.design
    yield (f"design: {d.first_seeds} seeds, then +{d.stage_seeds} a stage up to {d.max_seeds} "
           f"({d.spending} spending, futility {d.futility}); stages at {', '.join(map(str, d.seeds()))} seeds")
    if not run.stages and not run.incomplete:
        low = min(run.held.values()) if run.held else 0
        yield (f"no stage yet: the first stage needs {d.first_seeds} seeds in every cell the claims read "
               f"(the store holds {low} in its thinnest cell); to train them: {next_step}")
    for st in run.stages:
        for cid, c in st.claims.items():
            bounds = run.boundary_text(c)
            _, level, by_margin = decided_by(c)
            yield (f"stage {st.stage + 1} ({st.seeds} seeds) {cid}: {c.decision}"
                   + (f" ({'decided' if c.decision in ('supported', 'contradicted') else 'stopped'} at stage "
                      f"{c.decided_at + 1})" if c.decided_at is not None
                      and c.decided_at != st.stage else "")
                   + (f" ({c.outcome})" if c.outcome and c.outcome != c.decision else "")
                   + f" | estimate {signed(c.estimate)}"
                   + (f", {one_sided(c)} at level {c.level:.2g}" if one_sided(c) else "")
                   + f", repeated 95% interval [{signed(run.interval(c)[0])}, {signed(run.interval(c)[1])}]"
                   + (f", boundary of its margin's test ({run.margin_tests.get(cid, 'within the margin')}) "
                      if by_margin else ", boundary ")
                   + f"{bounds} at level {level:.2g}" + (f" ({c.note})" if c.note else ""))
    if run.incomplete:  # its seeds are trained, its results do not hold them yet: no verdict of it
        yield f"{run.incomplete}; no verdict of it until they are; to finish it: {next_step}"
    elif run.stages:
        last = run.stages[-1]
        if last.cells_next and last.seeds_next is not None:
            cells = ", ".join("/".join(c) for c in sorted(last.cells_next))
            yield f"next stage: seeds up to {last.seeds_next} for {cells} (only these cells); {next_step}"
        else:
            yield "the design is complete: every claim is decided or the maximum seeds were reached"
