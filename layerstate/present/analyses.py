"""What the command line and ``layerstate run`` print about an analysis and its results.

Lengths are written ``len40`` and layers ``L4`` (``embed``, ``L0``, ``L1``, ...), so the two
never read alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis import registry
from analysis.behaviour import failed_runs
from analysis.intervals import per_run_intervals
from analysis.interventions import matched_comparison
from analysis.probes.chance import above_chance
from analysis.probes.resume import PARTIAL
from store.contents.results import describe_settings

if TYPE_CHECKING:
    import xarray as xr



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
    left, checked = [str(r) for r in ds.attrs.get("left_out") or []], str(ds.attrs.get("learned_from") or "")
    if left:
        yield (f"left out {len(left)} seed{'s' if len(left) > 1 else ''} that did not learn ({checked}): "
               f"{', '.join(left)}; the numbers are over the seeds that learned")
    elif checked.startswith("no behaviour") or "not covering" in checked:
        yield checked
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


def _interval_lines(frame: Any) -> Iterator[str]:
    """``norm  parity/lstm/default  layer L0: 3.215 [2.981, 3.449] (5 seeds)`` per row of
    :func:`analysis.intervals.per_run_intervals`."""
    fixed = {"variable", "task", "arch", "variant", "estimate", "lower", "upper", "n_seeds"}
    for r in frame.itertuples(index=False):
        row = r._asdict()
        where = " ".join(f"{k} {row[k]}" for k in row if k not in fixed)
        value = f"{row['estimate']:.4g}"
        if np.isfinite(row["lower"]):
            value += f" [{row['lower']:.4g}, {row['upper']:.4g}]"
        seeds = f"{row['n_seeds']} seed{'s' if row['n_seeds'] != 1 else ''}"
        cell = "/".join(str(row[k]) for k in ("task", "arch", "variant") if row[k])
        yield f"{row['variable']}  {cell}{'  ' + where if where else ''}: {value} ({seeds})"


#: What each built-in analysis prints of one of its stored results: ``(result, store) -> lines``.
BUILT_IN_LINES: dict[str, Any] = {
    registry.PROBES: lambda ds, store: probe_lines(ds),
    registry.BEHAVIOUR: behaviour_lines,
    registry.MDL: lambda ds, store: mdl_lines(ds),
    registry.STABILITY: stability_lines,
    registry.ABLATION: lambda ds, store: ablation_lines(ds),
    registry.PATCHING: lambda ds, store: patching_lines(ds),
    registry.INTERCHANGE: lambda ds, store: interchange_lines(ds),
}


def result_lines(store: Any, name: str) -> list[str]:
    """What ``layerstate show`` prints of the stored result ``name``: its analysis's summary (a
    built-in's lines, or an added analysis's ``summary``), else every per-run number as a
    seed-level interval per cell, 95% (:func:`analysis.intervals.per_run_intervals`)."""
    ds = store.read_result(name)
    kind = name.partition("/")[0]
    entry = registry.analysis(kind)
    if kind in BUILT_IN_LINES:
        lines = list(BUILT_IN_LINES[kind](ds, store))
    elif entry is not None and entry.summary is not None:
        lines = list(entry.summary(ds))
    else:
        frame = per_run_intervals(store, ds)
        lines = list(_interval_lines(frame)) if len(frame) else [
            f"{name} holds no per-run numbers (no variable along run); its variables: "
            f"{', '.join(map(str, ds.data_vars)) or '(none)'}"]
        if len(frame):
            lines.insert(0, "per cell: mean over seeds [95% seed-level t interval] (seeds)")
    what = (entry.what if entry is not None else
            "one run's part of a probe sweep that has not finished (kept until the sweep is whole)"
            if kind == PARTIAL else "an analysis this installation does not know")
    return [f"results/{name}: {what}", *lines]
