"""Result text: every line the command line and ``layerstate run`` print about a result.

Lengths are written ``len40`` and layers ``L4`` (``embed``, ``L0``, ``L1``, ...), so the two
never read alike.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis.behaviour import failed_runs, stored_failed_runs
from analysis.claims.kinds import trait
from analysis.claims.planner import plan_note
from analysis.claims.sequential import decided_by, one_sided, signed
from analysis.claims.verdicts import fmt_p, power_words, seeds_note, share_words
from analysis.interventions import matched_comparison
from analysis.probes.chance import above_chance
from analysis.stats.decision import Verdict
from reports.claims import claims_display, claims_frame
from store.contents.results import describe_settings
from store.integrity.assess import damage_lines, fix

if TYPE_CHECKING:
    import xarray as xr

    from analysis.claims.planner import Plan
    from analysis.claims.sequential import SequentialRun


def training_line(res: Any, i: int, n: int) -> str:
    """``[i/n] run: 120 steps, 31s; accuracy len40=0.998 len80=0.951`` for a
    :class:`capture.train.TrainResult`."""
    accs = " ".join(f"len{k}={v:.3f}" for k, v in sorted(res.accuracy.items()))
    state = "already trained" if res.skipped else f"{res.steps} steps, {res.seconds:.0f}s"
    if getattr(res, "resumed_at", ()):
        state += f" (resumed from step {', '.join(map(str, res.resumed_at))})"
    return f"[{i}/{n}] {res.run_id}: {state}; accuracy {accs}"


def capture_line(results: Sequence[Any], into: str | None = None) -> str:
    """One line for a list of :class:`capture.record.CaptureResult`; with ``into`` (a store
    path) it also says how many blocks were already there."""
    written = sum(r.blocks_written for r in results)
    if into is None:
        return f"captured {len(results)} groups ({written} blocks written)"
    already = sum(r.blocks_total for r in results) - written
    return f"captured {len(results)} groups into {into} ({written} blocks written, {already} already there)"


def stored(name: str) -> str:
    return f"stored results/{name}"


#: A control task whose mean held-out accuracy reaches this is decodable outright: selectivity
#: against it cannot show anything (Hewitt & Liang's token control on a task of few token types).
TRIVIAL_CONTROL = 0.98


def probe_lines(ds: xr.Dataset) -> Iterator[str]:
    """What the numbers are (held-out accuracy, chance, the control task), then each run's
    layer profile per length and its best layer, then a flag when the control cannot fail.

    ``len12`` is the length (tests/analysis/probes/test_captured.py asserts this spelling).
    """
    chance = float(np.nanmean(ds.baseline.values)) if "baseline" in ds else float("nan")
    folds = ds.attrs.get("folds", ds.sizes.get("fold", "?"))
    yield (f"held-out probe accuracy per layer (mean over {folds} folds"
           f"{' and positions' if 'position' in ds.dims else ''}); chance (majority class) "
           f"{chance:.3f}{control_note(ds)}")
    above = _above_chance(ds)
    for r in ds.run.values:
        for L in ds.length.values:
            p = ds.profile.sel(run=r, length=L)
            line = " ".join(f"{lay}={v:.3f}" for lay, v in zip(ds.layer.values, p.values, strict=True))
            yield f"{r} len{L}: {line}  {_best(ds, above, r, L)}"
    if above is not None and not bool(above.any()):
        yield (f"no layer of any run is above chance: each layer's one-sided lower bound (95%, Bonferroni over "
               f"{ds.sizes['layer']} layers; standard error over sequences) is at or below chance (the majority "
               "class, or a guess among the classes where that is higher): "
               "the label is not linearly decodable here (a shuffled or unrelated label reads like this)")
    flag = trivial_control(ds)
    if flag:
        yield flag


def control_note(ds: xr.Dataset) -> str:
    """``; control task (permute) accuracy 0.512`` or ``; no control task``."""
    kind = ds.attrs.get("control")
    if "control_accuracy" not in ds or kind in (None, "none", ""):
        return "; no control task"
    return f"; control task ({kind}) accuracy {float(np.nanmean(ds.control_accuracy.values)):.3f}"


def trivial_control(ds: xr.Dataset) -> str | None:
    """A warning line when the control task scores ~1.0 (selectivity then means nothing), else None."""
    if "control_accuracy" not in ds:
        return None
    score = float(np.nanmean(ds.control_accuracy.values))
    if not score >= TRIVIAL_CONTROL:
        return None
    return (f"FLAG: the {ds.attrs.get('control', '')} control task scores {score:.3f}: it is decodable "
            "outright (few token types), so selectivity against it shows nothing; probe with "
            "--control permute")


_WHERE = {"all": "every position", "last": "the last labelled position", "pooled": "all positions pooled",
          "list": "the positions listed"}


def probe_work_line(size: Any, task: str = "") -> str:
    """What a probe sweep is about to do (an :class:`analysis.probes.progress.SweepSize`), before
    its first fit: ``probe dyck: 6 runs × 2 lengths (40, 80) × 5 layers × every position =
    3,600 probe cells, each cross-validated over 5 folds (C chosen from 5 values); roughly 3 min
    on 2 worker processes``, and for a long sweep over every position how to make it short."""
    lengths = ", ".join(map(str, size.lengths))
    line = (f"probe{' ' + task if task else ''}: {size.runs} run{'s' * (size.runs != 1)} × "
            f"{len(size.lengths)} length{'s' * (len(size.lengths) != 1)} ({lengths}) × up to {size.layers} "
            f"layers × {_WHERE.get(size.positions, size.positions)} = {size.cells:,} probe cells"
            + (f" (and {size.scored:,} scored at other lengths)" if size.scored else "")
            + f", each cross-validated over {size.folds} folds"
            + (f" (C chosen from {size.C_values} values)" if size.C_values > 1 else ""))
    if size.estimate_s is None:
        return line + "; the cluster's dashboard shows its progress"
    on = (f"{size.workers} worker processes" if size.scheduler == "processes" and size.workers > 1
          else "one thread at a time" if size.scheduler == "sync" else "threads of this process")
    line += f"; roughly {_about(size.estimate_s)} on {on}"
    if size.positions in ("all", "list") and size.estimate_s >= 60:
        line += " (--positions last or pooled: one cell per run, length and layer, far fewer)"
    return line


def probe_progress_line(tick: Any, task: str = "") -> str:
    """A probe sweep's progress (an :class:`analysis.probes.progress.Tick`): ``probe: 1,200 of
    4,800 cells (25%), 2 min 10 s so far, about 6 min 30 s left``; at the end ``probe: 4,800
    cells done in 9 min 37 s``."""
    head = f"probe{' ' + task if task else ''}:"
    if tick.final:
        return f"{head} {tick.total:,} cells done in {duration(tick.elapsed_s)}"
    share = 100 * tick.done / tick.total if tick.total else 100.0
    left = f", about {duration(tick.left_s)} left" if tick.left_s is not None else ""
    return f"{head} {tick.done:,} of {tick.total:,} cells ({share:.0f}%), {duration(tick.elapsed_s)} so far{left}"


def duration(seconds: float) -> str:
    """``8 s``, ``9 min 37 s``, ``2 h 05 min``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _about(seconds: float) -> str:
    """An estimate, rounded as coarsely as it is known: ``5 s``, ``40 s``, ``3 min``, ``1.5 h``."""
    if seconds < 60:
        return f"{max(1, round(seconds / 5) * 5 if seconds >= 10 else round(seconds))} s"
    if seconds < 5400:
        return f"{max(1, round(seconds / 60))} min"
    return f"{seconds / 3600:.1f} h"


def behaviour_lines(ds: xr.Dataset, store: Any = None) -> Iterator[str]:
    """``parity lstm/default L=40: accuracy 0.934 [0.901, 0.960] (3 seeds)``, per cell and
    length of a behaviour result; then each run that did not learn (``store``: not its
    untrained baselines)."""
    for i in range(ds.sizes["cell"]):
        cell = ds.isel(cell=i)
        for L in ds.length.values:
            one = cell.sel(length=L)
            if int(one.n_seeds) == 0:
                continue
            lo, hi = float(one.lower), float(one.upper)
            interval = f"[{lo:.3f}, {hi:.3f}]" if np.isfinite(lo) and np.isfinite(hi) else "[no interval]"
            if "clipped" in str(one.note.item()):
                interval += " (clipped to [0, 1])"
            yield (f"{cell.cell_task.item()} {cell.cell_arch.item()}/{cell.cell_variant.item()} L={int(L)}: "
                   f"accuracy {float(one.estimate):.3f} {interval} ({int(one.n_seeds)} "
                   f"seed{'s' if int(one.n_seeds) != 1 else ''}, {one.method.item()})")

    yield from failed_runs(ds, store)


def failed_run_lines(store: Any) -> list[str]:
    """The runs the store's behaviour results say did not learn (:func:`analysis.behaviour.failed_runs`),
    one line each: what `inspect` shows."""
    return stored_failed_runs(store)


def _above_chance(ds: xr.Dataset) -> xr.DataArray | None:
    """Per (run, length, layer): above chance (:mod:`analysis.probes.chance`); None for a result
    without a stored baseline."""
    return above_chance(ds) if "baseline" in ds and "accuracy" in ds else None


def _best(ds: xr.Dataset, above: xr.DataArray | None, r: Any, L: Any) -> str:
    """``best L3``, or ``no layer above chance`` where no layer's accuracy is above chance."""
    if above is not None and not bool(above.sel(run=r, length=L).any()):
        return "no layer above chance"
    return f"best {ds.best_layer.sel(run=r, length=L).item()}"


def probe_summary(name: str, ds: xr.Dataset, seconds: float) -> str:
    """``probes/parity: 4 runs in 12s; best layer run:L3, ...`` (at the first length); a run
    whose layers are all at chance reads ``run:none above chance``."""
    above = _above_chance(ds)
    L = ds.length.values[0]
    best = ", ".join(f"{r}:{_best(ds, above, r, L).removeprefix('best ').replace('no layer', 'none')}"
                     for r in ds.run.values)
    return f"{name}: {ds.sizes['run']} runs in {seconds:.0f}s; best layer {best}"


def ablation_lines(ds: xr.Dataset) -> Iterator[str]:
    """The accuracy drop per layer, per run and setting (at the first length); where the result
    says what each erasure removed, the share of variance beside it (``!`` marks a flagged
    cell), one ``FLAG`` line per run and setting naming each flagged layer and why (explained
    once at the end), and each setting's drop beyond its matched control (docs/interventions.md)."""
    diagnosed = "variance_removed" in ds
    flagged = False
    for r in ds.run.values:
        for setting in ds.setting.values:
            cell = ds.sel(run=r, setting=setting).isel(length=0)
            vals = cell.accuracy_drop.values
            marks = _flags(cell) if diagnosed else [""] * len(vals)
            line = " ".join(f"{lay}={v:+.3f}{m and '!'}"
                            for lay, v, m in zip(ds.layer.values, vals, marks, strict=True))
            if diagnosed:
                line += " | variance removed: " + " ".join(
                    f"{lay}={v:.2f}" for lay, v in zip(ds.layer.values, cell.variance_removed.values,
                                                       strict=True))
            yield f"{r} [{setting}] accuracy drop: {line}"
            why = [f"{lay} ({m})" for lay, m in zip(ds.layer.values, marks, strict=True) if m]
            if why:
                flagged = True
                yield f"{r} [{setting}] FLAG {'; '.join(why)}"
    if flagged:
        limit = float(ds.attrs.get("max_variance_removed", 0.5))
        yield (f"FLAG: 'variance' = the erasure removes more than {limit:.0%} of the layer's variance, so its "
               "drop does not single out the concept; 'degenerate' = the layer's states vary in no more "
               "dimensions than the erasure removes (e.g. an embedding of 2 tokens), so erasing the concept "
               "erases the input. Compare with the matched control (docs/interventions.md).")
    if diagnosed:
        yield from _matched_lines(ds)


def _flags(cell: xr.Dataset) -> list[str]:
    """Per layer of one (run, setting, length): why the erasure is flagged ("" if it is not)."""
    out = []
    for i in range(cell.sizes["layer"]):
        c = cell.isel(layer=i)
        why = []
        if bool(c.flag_variance):
            why.append(f"variance: removes {float(c.variance_removed):.0%}")
        if bool(c.degenerate):
            why.append(f"degenerate: {int(c.distinct_states)} distinct states, rank {int(c.state_rank)} <= "
                       f"{int(c.n_directions)} erased")
        out.append(", ".join(why))
    return out


def _matched_lines(ds: xr.Dataset) -> Iterator[str]:
    """``[leace - matched:leace] parity/lstm/default len40: embed=+0.000 [...] ...``: each
    setting's drop minus its matched control's, paired by seed (a per-run line with one
    seed)."""
    names = [str(s) for s in ds.setting.values]
    pairs = [s for s in names if f"matched:{s}" in names]
    length = ds.length.values[0]
    layers = ds.layer.values
    for s in pairs:
        diff = ds.accuracy_drop.sel(setting=s) - ds.accuracy_drop.sel(setting=f"matched:{s}")
        try:
            test = matched_comparison(ds, s, length=length)
        except ValueError:  # one seed: no paired test, the runs' own differences
            for r in ds.run.values:
                vals = diff.sel(run=r, length=length).values
                text = " ".join(f"{lay}={v:+.3f}" for lay, v in zip(layers, vals, strict=True))
                yield f"{r} [{s} - matched:{s}] drop beyond the matched control: {text}"
            continue
        test = test.stack(model=[d for d in ("task", "arch", "variant") if d in test.dims])
        for m in range(test.sizes["model"]):
            t = test.isel(model=m)
            if not np.isfinite(t.setting_drop.values).any():
                continue
            text = " ".join(f"{lay}={float(t.estimate.sel(layer=lay)):+.3f} "
                            f"[{float(t.lower.sel(layer=lay)):+.3f}, {float(t.upper.sel(layer=lay)):+.3f}]"
                            for lay in layers)
            model = "/".join(str(v) for v in t.model.values.item())
            yield (f"[{s} - matched:{s}] {model} len{length}: drop beyond the matched control {text} "
                   f"(paired t over {test.attrs.get('n_seeds', '?')} seeds)")


def patching_lines(ds: xr.Dataset) -> Iterator[str]:
    """Each run's most restoring (layer, position); where both directions were measured, the
    most damaging one when noised, both metrics there, the sites where denoising and noising
    disagree, and a subspace's share of the whole component's effect."""
    for r in ds.run.values:
        rec = ds.recovery.sel(run=r)
        lay, pos = _argmax(rec)
        line = f"{r}: max recovery {float(rec.max()):.3f} at layer {lay}, position {pos}"
        if "damage" in ds:
            at = {"run": r, "layer": lay, "position": pos}
            line += (f" (prob {float(ds.recovery_prob.sel(at)):.3f}; noising there: damage "
                     f"{float(ds.damage.sel(at)):.3f}, prob {float(ds.damage_prob.sel(at)):.3f})")
            dam = ds.damage.sel(run=r)
            d_lay, d_pos = _argmax(dam)
            line += f"; max damage (noising) {float(dam.max()):.3f} at layer {d_lay}, position {d_pos}"
            where = ds.disagree.sel(run=r).stack(site=["layer", "position"])
            sites = [f"{a}@{b}" for a, b in where.site.values[where.values.astype(bool)]]
            line += (f"; denoising and noising disagree at {len(sites)} site(s)"
                     + (f": {', '.join(sites[:6])}{' ...' if len(sites) > 6 else ''}" if sites else ""))
        yield line
        if "subspace_share" in ds:
            at = {"run": r, "layer": lay, "position": pos}
            yield (f"{r}: {ds.attrs.get('subspace', 'subspace')} subspace at layer {lay}, position {pos}: "
                   f"recovery {float(ds.recovery_subspace.sel(at)):.3f} of the whole component's "
                   f"{float(ds.recovery.sel(at)):.3f} (share {float(ds.subspace_share.sel(at)):.2f})"
                   + ("; the subspace recovers MORE than the whole component at "
                      f"{int(ds.subspace_exceeds.sel(run=r).sum())} site(s)"
                      if bool(ds.subspace_exceeds.sel(run=r).any()) else ""))


def _argmax(values: xr.DataArray) -> tuple[Any, Any]:
    """(layer, position) of the largest value."""
    best = values.where(values == values.max()).argmax(...)
    return values.layer.values[int(best["layer"])], values.position.values[int(best["position"])]


def interchange_lines(ds: xr.Dataset) -> Iterator[str]:
    """Each run's mechanism label."""
    for r in ds.run.values:
        yield f"{r}: mechanism {ds.mechanism.sel(run=r).item()}"


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
           "the seeds at which the claim's test reaches power 0.8, how many more each cell it reads "
           "needs, and their CPU seconds at the cells' measured training time. A claim whose estimate "
           "lies on the wrong side of its threshold is planned towards its contradiction (the test of "
           "the other side, at the two-sided level), at the observed distance or share taken at face "
           "value. Each part planned at the Holm level it tested the claim at, with the other parts' "
           "tests at p = 1; the combined family's level is as high or higher, so these are at most the "
           "seeds it needs. Seeds past a design's declared maximum are a new design, declared before "
           "they are trained.", "",
           "| claim | verdict | seeds now | seeds needed | more per cell | CPU s | planned at | part |",
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
        out += ["", "Per cell, trained once to the most any undecided claim reading it needs:", "",
                "| cell | seeds now | seeds needed | more | CPU s |", "|---|---|---|---|---|"]
        for c in cells:
            cost = "–" if c["cpu_s"] is None else f"{c['cpu_s']:,.0f}"
            out.append(f"| {c['cell']} | {c['seeds']} | {c['needed']} | {c['more']} | {cost} |")
        known = [c["cpu_s"] for c in cells if c["cpu_s"] is not None]
        out += ["", f"In all: {sum(known):,.0f} CPU s ({sum(known) / 3600:.1f} CPU hours) of training"
                + (f", and {len(cells) - len(known)} cells with no measured time" if len(known) < len(cells) else "")
                + " to give every undecided claim the seeds its plan names."]
    return out


def validation_notes(rep: Any) -> Iterator[str]:
    """Warnings and problems of a :class:`store.Report` (for stderr), then, where chunks are
    damaged, what is lost and what can still be analysed (:func:`store.integrity.assess.damage_lines`)."""
    for w in rep.warnings:
        yield f"warning: {w}"
    if not rep.ok:
        for p in rep.problems:
            yield f"problem: {p}"
        yield from damage_lines(rep, rep.location)


def validation_verdict(rep: Any, where: str) -> str:
    """``ok: ...`` or the one-line failure with its fix (the command exits 2 on that)."""
    if rep.ok:
        return f"ok: {where} ({rep.n_arrays} arrays, {rep.n_chunks} chunks verified)"
    step = fix(rep, where)
    return (f"{where} failed validation ({len(rep.problems)} problem(s), first: {rep.problems[0]})"
            + (f"; {step}" if step else ""))


def graded_verdict(rep: Any, where: str) -> str:
    """``ok: ...`` with the number of warnings listed above it (a SHOULD not met), or the
    one-line failure as :func:`validation_verdict` words it."""
    if not rep.ok:
        return validation_verdict(rep, where)
    n = len(rep.warnings)
    graded = f"; {n} warning(s)" if n else ""
    return f"ok: {where} ({rep.n_arrays} arrays, {rep.n_chunks} chunks verified{graded})"


def packed(where: str, path: Any) -> str:
    return f"packed {where} -> {path} ({path.stat().st_size / 2**20:.1f} MB)"


def unpacked(archive: str, path: Any) -> str:
    return f"unpacked {archive} -> {path}"


def report_line(path: Any) -> str:
    return f"report: {path}"


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


def writable_store(store: str) -> tuple[str, str]:
    """A store seeds can be trained into, and the command that makes it from ``store`` when
    ``store`` cannot take them ('' when it can): a zip is write-once (unpacked to a directory
    beside it), a store served over HTTP is read-only (pulled to a local directory), a local
    directory without write permission is copied."""
    if store.startswith(("http://", "https://")):
        local = PurePath(store.rstrip("/")).name.removesuffix(".zip").removesuffix(".zarr") + ".zarr"
        return local, f"pull the store into a local one (`layerstate pull {shlex.quote(store)} {local}`)"
    if "://" in store:
        return store, ""
    if store.endswith(".zip"):
        local = str(PurePath(store).with_suffix(".zarr"))
        return local, (f"a zip is write-once: unpack it into a directory "
                       f"(`layerstate unpack {shlex.quote(store)} {shlex.quote(local)}`)")
    if os.path.isdir(store) and not os.access(store, os.W_OK):
        local = str(PurePath(store.rstrip("/")).name.removesuffix(".zarr") + "-copy.zarr")
        return local, f"{store} is read-only here: copy it (`cp -r {shlex.quote(store)} {local}`)"
    return store, ""


def plan_lines(p: Plan, experiment: str = "EXPERIMENT.toml", store: str = "STORE") -> Iterator[str]:
    """The plan as the command prints it: one line per claim, then the cells that need more seeds,
    the total, and the commands that train exactly those seeds (``experiment``, ``store``: the
    paths the commands name)."""
    yield "claim | seeds | power now | seeds for power 0.8 | more per cell | CPU s | note"
    for c, r in zip(p.claims, p.rows, strict=True):
        note = plan_note(p, c, r)
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
    writable, first = writable_store(store)
    if first:
        yield f"next: {first}; then list seeds = {list(range(most))} in {experiment}'s [grid], and train only the " \
              "seeds above, cell by cell:"
    else:
        yield (f"next: list seeds = {list(range(most))} in {experiment}'s [grid], then train only the seeds above, "
               "cell by cell:")
    store = writable
    for (task, arch, _), (have, reach) in sorted(cells.items()):
        seeds = f"{have}-{reach - 1}" if reach - have > 1 else str(have)
        yield f"  layerstate train {experiment} --store {store} --task {task} --arch {arch} --seed {seeds}"
    yield (f"  then `layerstate run {experiment} --store {store} --out DIR` captures, analyses and decides them "
           "(what is stored is reused); or declare a [design] and let `layerstate run --design` add seeds stage "
           "by stage")


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


def mdl_work_line(plan: Any, task: str = "") -> str:
    """What an MDL sweep (an :class:`analysis.probes.mdl_sweep.MDLPlan`) is about to do:
    ``mdl parity: 3 runs × 1 length (40) × up to 5 layers × each sequence's last position = 15
    cells, each coded in up to 11 blocks (C per block from 5 values), with the permute control;
    roughly 20 s of CPU``."""
    opt = plan.options
    lengths = sorted({L for ls in plan.lengths.values() for L in ls})
    layers = max((len(rp.layers) for rp in plan.runs.values()), default=0)
    n_runs = len(plan.runs)
    C = opt["C"]
    grid = f" (C per block from {len(C)} values)" if isinstance(C, tuple) and len(C) > 1 else f" (C = {C:g})"
    control = f", with the {opt['control']} control" if opt["control"] else ""
    return (f"mdl{' ' + task if task else ''}: {n_runs} run{'s' * (n_runs != 1)} × {len(lengths)} "
            f"length{'s' * (len(lengths) != 1)} ({', '.join(map(str, lengths))}) × up to {layers} layers × "
            f"{_WHERE.get(opt['positions'], opt['positions'])} = {plan.cells:,} cells, each coded in up to 11 "
            f"blocks{grid}{control}; roughly {_about(plan.cpu_s)} of CPU")


def mdl_lines(ds: xr.Dataset) -> Iterator[str]:
    """What the numbers are, then each run's compression per layer and length, with its control."""
    over = " (summed over positions)" if "position" in ds.dims else ""
    yield (f"compression of {ds.attrs.get('target')} per layer: uniform / online codelength{over}; well above 1: "
           "the states carry the label linearly, about 1: they do not")
    for r in ds.run.values:
        for L in ds.length.values:
            p = ds.compression_profile.sel(run=r, length=L)
            line = " ".join(f"{lay}={v:.2f}" for lay, v in zip(ds.layer.values, p.values, strict=True))
            if "control_compression_profile" in ds:
                c = ds.control_compression_profile.sel(run=r, length=L).values
                line += f"  (control {ds.attrs.get('control')}: {np.nanmin(c):.2f}-{np.nanmax(c):.2f})"
            yield f"{r} len{L}: {line}"


def stability_work_line(plan: Any, task: str = "") -> str:
    """What a stability sweep (an :class:`analysis.probes.stability.StabilityPlan`) is about to
    do: ``stability parity: 5 cells, 5 seed pairs × 1 length (40) × 5 layers = 25 maps;
    5 pair-lengths run each model on the other's sequences; roughly 1 s of CPU``."""
    cells = len({pp.cell for pp in plan.pairs})
    n = len(plan.pairs)
    maps = n * len(plan.lengths) * len(plan.layers)
    rerun = (f"; {plan.reruns} pair-length{'s' * (plan.reruns != 1)} run each model on the other's sequences "
             "(the seeds share none)" if plan.reruns else "")
    return (f"stability{' ' + task if task else ''}: {cells} cell{'s' * (cells != 1)}, {n} seed pair"
            f"{'s' * (n != 1)} × {len(plan.lengths)} length{'s' * (len(plan.lengths) != 1)} "
            f"({', '.join(map(str, plan.lengths))}) × {len(plan.layers)} layers = {maps:,} maps{rerun}; "
            f"roughly {_about(plan.cpu_s)} of CPU")


def stability_lines(ds: xr.Dataset, store: Any = None) -> Iterator[str]:
    """The probe result it read (with its settings, given ``store``), what the numbers are, then
    per cell and length the mean overlap per layer with its interval over seeds, the nulls, and
    whether the seeds agree (the interval above both the random-subspace null and the
    shuffled-label null's upper end)."""
    read = str(ds.attrs.get("probe_result") or "")
    if read:
        settings = (describe_settings(store.result_attrs(read)) if store is not None and read in store.results()
                    else "")
        yield f"read the probes of {read}" + (f" ({settings})" if settings else "")
    yield (f"seed agreement on where {ds.attrs.get('target')} lives: mean squared cosine of the principal angles "
           "between seed pairs' probe subspaces after aligning their states (1: the same subspace); interval over "
           "seeds; nulls: random subspaces (k/d) and probes of the label shuffled across sequences (upper end of "
           "95% of permutations, per layer in brackets)")
    for c in range(ds.sizes.get("cell", 0)):
        name = f"{ds.cell_task.values[c]}/{ds.cell_arch.values[c]}/{ds.cell_variant.values[c]}"
        for L in ds.length.values:
            parts = []
            for lay in ds.layer.values:
                at = dict(cell=c, length=L, layer=lay)
                est = float(ds.stability_estimate.sel(at))
                if not np.isfinite(est):
                    continue
                lo, hi = float(ds.stability_lower.sel(at)), float(ds.stability_upper.sel(at))
                null = float(ds.null_estimate.sel(at))
                shuffled = float(ds.shuffled_upper.sel(at)) if "shuffled_upper" in ds else float("nan")
                band = f" [{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) else ""
                mark = "+" if np.isfinite(lo) and lo > null and lo > shuffled else ""
                parts.append(f"{lay}={est:.2f}{band}{mark} ({shuffled:.2f})")
            n = int(ds.stability_n_seeds.isel(cell=c).max())
            few = " (2 seeds: one pair, no interval)" if n == 2 else ""
            null = float(ds.null_estimate.sel(cell=c, length=L).max())
            yield f"{name} len{L}: {' '.join(parts)}  (null {null:.2f}; + above both){few}"


def analysis_lines(entries: Sequence[Any]) -> list[str]:
    """``layerstate analyses``: per analysis (:class:`analysis.registry.Analysis`), its result
    name, what it computes and where it runs, then each metric claims read from it."""
    lines = [f"{'accuracy':<18} the models' own readout accuracy (read from the captures; metric = "
             f"\"accuracy\", the default)"]
    for a in entries:
        where = "rebuilds the models (--device)" if a.models else "on the stored activations"
        added = "; added (run computes it when [analysis] extra names it)" if a.compute is not None else ""
        lines.append(f"{a.name:<18} {a.what}: results/{a.name}/<task>, {where}{added}")
        for m in a.metrics:
            span = "" if m.range is None else f", in [{m.range[0]:g}, {m.range[1]:g}]"
            layer = ", at a layer (layer = ...)" if m.layered else ""
            lines.append(f"  metric = \"{m.name}\"{layer}{span}")
    return lines
