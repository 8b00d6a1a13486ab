"""Interventions, the report's "interventions" section (its place: ``reports.build.ORDER``):
ablation drops, residual decodability, patching, interchange.

Sources (written by :mod:`analysis.interventions`):

``results/ablation/<name>``
    ``correct (run, length, layer, setting, sequence)``, ``correct_clean (run, length, layer,
    sequence)``, ``n_labelled (run, length, sequence)``, optionally ``probe_correct`` and
    ``probe_correct_clean`` (the refitted probe's hits on the erased / unedited states);
    attr ``fit_length``. Per seed, the drop is ``sum(correct_clean - correct) / sum(n_labelled)``
    and residual decodability ``sum(probe_correct) / sum(n_labelled)``. When present, what each
    erasure removed (``variance_removed``, ``mean_shift``, ``removed_rank``, ``n_directions``,
    ``state_rank``, ``distinct_states``, flags ``flag_variance`` and ``degenerate``) is shown
    beside the drops, and every setting S with a ``matched:S`` control gets S's drop beyond it,
    paired by seed (:func:`analysis.interventions.matched_comparison`).
``results/patching/<name>``
    ``recovered (run, layer, position, sequence)`` and ``gap (run, layer, sequence)``; per seed,
    recovery = ``sum(recovered) / sum(gap)``. When present: noising (``damaged``) and the
    probability metric (``*_prob``, ``gap_prob``) side by side with where the directions
    disagree; a subspace's patch (``recovered_subspace``) beside the whole component's.
``results/interchange/<name>``
    ``restored (run, layer, site, sequence)`` and ``gap``; per seed, restoration =
    ``sum(restored) / sum(gap)``; the mechanism of each run from
    :func:`analysis.interventions.classify_mechanism`.

Every interval is the one the analysis stored beside its counts (``<metric>_estimate``,
``_lower``, ``_upper``, ``_n_seeds``, ``_method`` over ``(cell, ...)``:
:func:`analysis.interventions.intervals.add_intervals`, seeds then sequences); a result stored
before results kept their intervals has them computed here the same way, with a note naming
the command that stores them. Every interval goes through :func:`reports.intervals.apply_rules`: accuracy drops lie in [-1, 1], accuracies
and refitted-probe accuracies in [0, 1]; recovery and restoration may overshoot and are not
bounded; no interval from 2 seeds. Which site each architecture's intervention edits is one
table for the whole section (:func:`sites_table`), not a note per result.
"""
# Over 600 lines: the section's three parts (ablation, patching, interchange) share its frame, interval and
# table helpers; apart they would import each other through interventions(), which calls all three.

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from analysis.intervals import factor_table
from analysis.interventions import DISAGREE, MIN_GAP, classify_mechanism, matched_comparison
from analysis.interventions.intervals import flat_runs, stored_matched
from reports import figures as F
from reports.intervention_tables import (
    KINDS,
    by_layer,
    ci_text,
    collect_sites,
    computed_note,
    layer_positions,
    metric_frames,
    range_rules,
    seeds_caption,
    sites_table,
    slug,
)
from reports.model import COMMANDS, Figure, Section, Table
from reports.numbers import read_result
from reports.snapshot import Snapshot

INTRO = (
    "Causal tests of the probed state. Ablation erases a direction or subspace at one layer and "
    "resumes the model from there: the accuracy drop measures necessity, and a probe refitted on "
    "the erased states measures what is still decodable (a single-direction ablation that leaves "
    "the state decodable is not a necessity test). Patching copies one site of a clean run into a "
    "corrupted twin and measures the share of the clean-corrupted gap recovered; interchange "
    "interventions do the same at named positions. Every erasure says what it removed (share of the layer's "
    "variance, mean shift, rank) and is flagged when that is most of the layer or all it varies in; a "
    "matched control removes as much variance in a random subspace. Patching is shown both ways (denoising "
    "and noising) in two metrics. What each diagnostic answers: docs/interventions.md. Brackets and bands: "
    "95% intervals across seeds."
)


def interventions(snap: Snapshot) -> Section:
    sec = Section("interventions", "Interventions", intro=INTRO)
    builders = {"ablation": ablation_part, "patching": patching_part, "interchange": interchange_part}
    sites: dict[str, dict[str, list[str]]] = {}
    absent = []
    for kind in KINDS:
        names = snap.results(f"{kind}/")
        if not names:
            absent.append(kind)
        for name in names:
            sec.parts.append(builders[kind](snap, name, sites))
    if absent:  # one short line for every kind that is not stored, not a box each
        sec.missing, sec.command = missing_kinds(snap, absent), None
        if sec.parts:
            sec.notes.append(sec.missing)
            sec.missing = None
    table = sites_table(sites)
    if table is not None:
        sec.tables.append(table)
    return sec


def missing_kinds(snap: Snapshot, absent: list[str]) -> str:
    """One line: the kinds of intervention result ``absent`` from the store and the commands that
    compute them (they rerun the trained models, so they need the runs' weights)."""
    what = "No intervention results" if len(absent) == len(KINDS) else "No " + " or ".join(absent) + " results"
    commands = "; ".join(f"{k}: `{COMMANDS[KINDS[k][1]]}`" for k in absent)
    line = f"{what} in this store ({commands})."
    if snap.runs and not any(snap.store.has_weights(r) for r in snap.runs):
        line += (" They rerun the trained models, and no run of this store holds its weights (imported "
                 "activations, or weights left behind): they can be computed only where the models are.")
    return line


def ablation_frames(ds: xr.Dataset, store, computed: list[str] | None = None) -> dict[str, pd.DataFrame]:
    """Tidy frames with intervals: ``drop``, ``accuracy`` (after erasure), ``residual`` and
    ``residual_clean`` (refitted probe accuracy), one row per cell and task/arch/variant
    (:func:`metric_frames`)."""
    frames = metric_frames(ds, "ablation", store, ["drop", "accuracy", "residual", "residual_clean"], computed)
    return {k: range_rules(v, "drop" if k == "drop" else "accuracy") for k, v in frames.items()}


def ablation_part(snap: Snapshot, name: str, sites: dict | None = None) -> Section:
    ds = read_result(snap.store, name)
    part = Section(slug(name), f"Ablation: {name.split('/', 1)[-1]}")
    order = [str(v) for v in ds["layer"].values]
    computed: list[str] = []
    frames = {k: layer_positions(v, order) for k, v in ablation_frames(ds, snap.store, computed).items()}
    fit = int(ds.attrs.get("fit_length", frames["drop"]["length"].min()))
    drop = frames["drop"]
    at_fit = drop[drop["length"] == fit]
    part.figures.append(Figure(
        f"{slug(name)}_drop", f"Accuracy drop when the state is erased at each layer (length {fit}; "
        f"rows: erasure setting; band: 95% interval{seeds_caption(at_fit)}).",
        F.layer_lines(at_fit.rename(columns={"estimate": "drop", "lower": "drop_lower", "upper": "drop_upper"}),
                      order, value="drop", ylabel="accuracy drop", row="setting", zero_line=True)))
    keys = ["task", "arch", "variant", "setting"]
    part.tables.append(Table(f"{slug(name)}_drop", f"Accuracy drop [95% interval] per layer at length {fit} "
                             "(positive = erasing hurts); every length in the CSV.",
                             drop, by_layer(at_fit, keys, "layer", order, signed=True)))
    if "residual" in frames:
        res = frames["residual"]
        clean = frames["residual_clean"][["task", "arch", "variant", "length", "layer", "estimate"]]
        res = res.merge(clean.rename(columns={"estimate": "clean"}), on=["task", "arch", "variant", "length", "layer"],
                        how="left")
        res_fit = res[res["length"] == fit]
        part.figures.append(Figure(
            f"{slug(name)}_residual", "Residual decodability: a probe refitted on the erased states "
            f"(length {fit}; thin dashed: the same probe on the unedited states; band: 95% interval"
            f"{seeds_caption(res_fit)}).",
            F.layer_lines(res_fit.rename(columns={"estimate": "residual", "lower": "residual_lower",
                                                  "upper": "residual_upper"}),
                          order, value="residual", ylabel="probe accuracy after erasure", row="setting",
                          reference="clean")))
        part.tables.append(Table(f"{slug(name)}_residual", f"Probe accuracy after erasure [95% interval] at length {fit}; "
                                 "column 'clean' in the CSV is the probe on unedited states.",
                                 res, by_layer(res_fit, keys, "layer", order)))
    if "variance_removed" in ds:
        part.tables.append(removed_table(ds, snap.store, drop, fit, name, order))
        matched = matched_table(ds, snap.store, fit, name, computed)
        if matched is not None:
            part.tables.append(matched)
        part.notes.append(
            f"Flags: 'variance' marks an erasure that removes more than "
            f"{float(ds.attrs.get('max_variance_removed', 0.5)):.0%} of the layer's variance (most of what the "
            "layer carries, so its drop does not single out the concept); 'degenerate' one at a layer whose "
            "states vary in no more dimensions than it erases (e.g. an embedding of two tokens), where erasing "
            "the concept erases the input. docs/interventions.md.")
    lengths = sorted(drop["length"].unique())
    if len(lengths) > 1:
        part.tables.append(Table(
            f"{slug(name)}_ood", "Does the drop persist at other lengths (erasers fitted at length "
            f"{fit})? The layer with the largest drop at length {fit}, per model and setting.",
            drop, _ood_pivot(drop, at_fit, lengths)))
    attrs = ds.attrs
    part.notes.append(f"Erasure mode {attrs.get('mode', '?')}; directions fitted at length {fit} on "
                      f"{attrs.get('fit_fraction', '?')} of the sequences, measured on the rest; "
                      f"{attrs.get('folds', '?')}-fold refitted probes.")
    _note_computed(part, name, computed)
    if sites is not None:
        collect_sites(ds, snap.store, "site", f"ablation: {name.split('/', 1)[-1]}", sites)
    return part


def _note_computed(part: Section, name: str, computed: list[str]) -> None:
    note = computed_note(name, computed)
    if note is not None:
        part.notes.append(note)


def _per_run_frame(ds: xr.Dataset, store, names: list[str]) -> pd.DataFrame:
    """The per-(run, length, layer, setting) diagnostics with each run's task, arch, variant."""
    frame = ds[names].to_dataframe().reset_index()
    frame = frame[[c for c in frame.columns if c in ("run", "length", "layer", "setting", *names)]]
    factors = factor_table(store, [str(r) for r in ds["run"].values])
    return frame.merge(factors, left_on="run", right_index=True, how="left")


def removed_table(ds: xr.Dataset, store, drop: pd.DataFrame, fit: int, name: str, order: list[str]) -> Table:
    """What each erasure removed, beside its drop: one row per model, setting and layer (at the
    fit length; every length in the CSV). Means over seeds; ranks and distinct states are the
    smallest over seeds; a flag is shown when any seed's erasure is flagged."""
    names = ["variance_removed", "mean_shift", "removed_rank", "state_rank", "distinct_states",
             "flag_variance", "degenerate"]
    per_run = _per_run_frame(ds, store, names)
    per_run = per_run.merge(ds["n_directions"].to_dataframe().reset_index()[["run", "layer", "setting", "n_directions"]],
                            on=["run", "layer", "setting"], how="left")
    keys = ["task", "arch", "variant", "length", "setting", "layer"]
    per_run = per_run[np.isfinite(per_run["variance_removed"].astype(float))]
    data = per_run.groupby(keys, sort=False).agg(
        variance_removed=("variance_removed", "mean"), mean_shift=("mean_shift", "mean"),
        removed_rank=("removed_rank", "min"), n_directions=("n_directions", "max"),
        state_rank=("state_rank", "min"), distinct_states=("distinct_states", "min"),
        flag_variance=("flag_variance", "any"), degenerate=("degenerate", "any"), n_seeds=("run", "size"),
    ).reset_index()
    drops = drop[keys + ["estimate", "lower", "upper"]].rename(
        columns={"estimate": "drop", "lower": "drop_lower", "upper": "drop_upper"})
    drops = drops.assign(layer=drops["layer"].astype(str))
    data = data.merge(drops, on=keys, how="left")
    data["flag"] = [", ".join(f for f, on in (("variance", v), ("degenerate", d)) if on)
                    for v, d in zip(data["flag_variance"], data["degenerate"], strict=True)]
    shown = data[data["length"] == fit].copy()
    shown["layer_pos"] = [order.index(str(v)) if str(v) in order else -1 for v in shown["layer"]]
    shown = shown.sort_values(["task", "arch", "variant", "setting", "layer_pos"])
    at_fit = drop[drop["length"] == fit]
    texts = dict(zip(zip(*(at_fit[k].astype(str) for k in keys), strict=True), ci_text(at_fit, signed=True), strict=True))
    display = pd.DataFrame({
        **{k: shown[k].astype(str) for k in ("task", "arch", "variant", "setting", "layer")},
        "drop [95% CI]": [texts.get(tuple(str(r[k]) for k in keys), "–") for _, r in shown.iterrows()],
        "variance removed": [f"{v:.1%}" for v in shown["variance_removed"]],
        "mean shift": [f"{v:.2f}" for v in shown["mean_shift"]],
        "rank removed / erased": [f"{int(a)} / {int(b)}" for a, b in zip(shown["removed_rank"], shown["n_directions"], strict=True)],
        "states: rank (distinct)": [f"{int(a)} ({int(b)})" for a, b in zip(shown["state_rank"], shown["distinct_states"], strict=True)],
        "flag": shown["flag"].replace("", "–"),
    })
    return Table(f"{slug(name)}_removed", f"What each erasure removed, beside its drop (length {fit}): the share of "
                 "the layer's variance it removed, the shift of the states' mean (in units of their spread), the "
                 "rank of what it removed and of the subspace it erases, and the states' own rank and number of "
                 "distinct values; means over seeds, flagged when any seed is.", data, display)


def matched_table(ds: xr.Dataset, store, fit: int, name: str, computed: list[str] | None = None) -> Table | None:
    """Each setting's drop beyond its matched control (paired by seed), per model and layer, at
    the fit length; None without matched controls or with one seed. The comparison stored with
    the result (:func:`analysis.interventions.intervals.stored_matched`), else computed here
    (``"matched"`` appended to ``computed``)."""
    names = [str(v) for v in ds["setting"].values]
    if not any(f"matched:{s}" in names for s in names):
        return None
    test = stored_matched(ds, fit)
    if test is None:
        if "interval_metrics" in ds.attrs:
            return None  # stored with its intervals, and no paired test was possible (one seed)
        try:
            test = matched_comparison(ds, store=store, length=fit)
        except ValueError:
            return None  # one seed per model: no paired test
        if computed is not None:
            computed.append("matched")
    frame = test[["setting_drop", "matched_drop", "estimate", "lower", "upper", "p", "flagged"]].to_dataframe().reset_index()
    frame = frame[np.isfinite(frame["setting_drop"].astype(float))]
    frame = frame[[c for c in ("task", "arch", "variant", "setting", "layer", "setting_drop", "matched_drop", "estimate",
                               "lower", "upper", "p", "flagged") if c in frame.columns]]
    frame["n_seeds"] = int(test.attrs.get("n_seeds", 0))
    display = frame[[c for c in ("task", "arch", "variant", "setting", "layer") if c in frame.columns]].astype(str)
    display = display.assign(**{
        "drop": [f"{v:+.3f}" for v in frame["setting_drop"]],
        "matched control's drop": [f"{v:+.3f}" for v in frame["matched_drop"]],
        "difference [95% CI]": [f"{e:+.3f} [{lo:+.3f}, {hi:+.3f}]" if frame["n_seeds"].iloc[0] >= 3 else f"{e:+.3f} (too few seeds)"
                                for e, lo, hi in zip(frame["estimate"], frame["lower"], frame["upper"], strict=True)],
        "p": [f"{v:.3g}" for v in frame["p"]],
        "flagged": ["yes" if f else "–" for f in frame["flagged"]],
    })
    return Table(f"{slug(name)}_matched", f"Does erasing the concept hurt more than erasing as much variance in a random "
                 f"subspace of its rank? Drop minus the matched control's drop, paired by seed (paired t), length {fit}. "
                 "Near zero: the drop is what removing that much of the layer does, not the concept.", frame, display)


def _ood_pivot(drop: pd.DataFrame, at_fit: pd.DataFrame, lengths: list[int]) -> pd.DataFrame:
    keys = ["task", "arch", "variant", "setting"]
    best = at_fit.loc[at_fit.groupby(keys)["estimate"].idxmax(), keys + ["layer"]]
    sub = drop.merge(best, on=keys + ["layer"])
    return by_layer(sub, keys + ["layer"], "length", lengths, signed=True).rename(
        columns={str(L): f"L = {L}" for L in lengths})


# ---------------------------------------------------------------------- patching
def patching_part(snap: Snapshot, name: str, sites: dict | None = None) -> Section:
    ds = read_result(snap.store, name)
    part = Section(slug(name), f"Patching: {name.split('/', 1)[-1]}")
    order = [str(v) for v in ds["layer"].values]
    computed: list[str] = []
    frame = range_rules(metric_frames(ds, "patching", snap.store, ["recovery"], computed)["recovery"], "recovery")
    frame = layer_positions(frame, order)
    length = ds.attrs.get("length", "?")
    part.figures.append(Figure(
        f"{slug(name)}_heatmap", f"Share of the clean-corrupted logit gap recovered by patching one "
        f"(layer, position) site, length {length} (mean across seeds; intervals in the CSV).",
        F.heatmaps(frame, value="estimate", title="recovery")))
    keys = ["task", "arch", "variant", "layer"]
    best = frame.loc[frame.groupby(keys)["estimate"].idxmax()].sort_values(["task", "arch", "variant", "layer_pos"])
    shown = best[keys].copy()
    shown["best position"] = best["position"].astype(int).astype(str)
    shown["recovery there [95% CI]"] = ci_text(best)
    shown["seeds"] = best["n_seeds"]
    part.tables.append(Table(f"{slug(name)}_recovery", "Per layer, the position whose patching recovers the "
                             "most of the gap, with its interval; every (layer, position) in the CSV.",
                             frame, shown))
    part.notes.append("recovery = sum(recovered) / sum(gap) over sequences: 0 = nothing recovered, 1 = the clean "
                      "value; a patch can overshoot either end, so recovery is not bounded.")
    if "damaged" in ds:
        table = directions_table(ds, snap.store, name, order, "position", PATCHING_PAIRS, computed)
        part.tables.append(table)
        part.notes.append(_disagreement_note(table.data))
    if "recovered_subspace" in ds:
        part.tables.append(subspace_table(ds, snap.store, name, order, frame, computed))
    _note_computed(part, name, computed)
    if "corruption" in ds.attrs:
        part.notes.append(f"Corruption: {ds.attrs['corruption']}.")
    if sites is not None:
        collect_sites(ds, snap.store, "patched_site", f"patching: {name.split('/', 1)[-1]}", sites)
    return part


#: (column, numerator, gap, stored metric) of the side-by-side table: denoising and noising, each
#: in both metrics (the metric: :data:`analysis.interventions.intervals.METRICS`).
PATCHING_PAIRS = (("denoising (logit)", "recovered", "gap", "recovery"), ("noising (logit)", "damaged", "gap", "damage"),
                  ("denoising (prob)", "recovered_prob", "gap_prob", "recovery_prob"),
                  ("noising (prob)", "damaged_prob", "gap_prob", "damage_prob"))
INTERCHANGE_PAIRS = (("denoising (prob)", "restored", "gap", "restoration_all"),
                     ("noising (prob)", "damaged", "gap", "damage"),
                     ("denoising (logit)", "restored_logit", "gap_logit", "restoration_logit"),
                     ("noising (logit)", "damaged_logit", "gap_logit", "damage_logit"))


def directions_table(ds: xr.Dataset, store, name: str, order: list[str], site: str, pairs,
                     computed: list[str] | None = None) -> Table:
    """Denoising and noising side by side, in two metrics, per model, layer and site; the
    display keeps the sites where either direction moves at least 0.2 of the gap, or the two
    disagree (their shares differ by at least ``disagree_threshold``, in either metric)."""
    limit = float(ds.attrs.get("disagree_threshold", DISAGREE))
    keys = ["task", "arch", "variant", "layer", site]
    merged: pd.DataFrame | None = None
    texts = {}
    kind = name.split("/", 1)[0]
    for column, num, gap, metric in pairs:
        if num not in ds or gap not in ds:
            continue
        frame = range_rules(metric_frames(ds, kind, store, [metric], computed)[metric], "recovery")
        frame = frame.assign(layer=frame["layer"].astype(str), **{site: frame[site].astype(str)})
        texts[column] = dict(zip(zip(*(frame[k] for k in keys), strict=True), ci_text(frame), strict=True))
        part = frame[keys + ["estimate"]].rename(columns={"estimate": column})
        merged = part if merged is None else merged.merge(part, on=keys, how="outer")
    assert merged is not None
    cols = [c for c, *_ in pairs if c in merged.columns]
    gaps = [(a, b) for a, b in ((cols[0], cols[1]), (cols[2], cols[3])) if a in merged and b in merged] if len(cols) == 4 else []
    merged["disagree"] = np.zeros(len(merged), bool)
    merged["reading"] = ""
    for a, b in gaps:
        den, noi = merged[a].astype(float), merged[b].astype(float)
        merged["disagree"] |= (den - noi).abs() >= limit
        merged.loc[(den - noi) >= limit, "reading"] = "sufficient, not necessary (a redundant path?)"
        merged.loc[(noi - den) >= limit, "reading"] = "necessary, not sufficient (needs other sites too?)"
    merged["layer_pos"] = [order.index(v) if v in order else -1 for v in merged["layer"]]
    merged = merged.sort_values(["task", "arch", "variant", "layer_pos", site], key=_natural).drop(columns="layer_pos")
    big = merged[cols].abs().max(axis=1) >= 0.2
    shown = merged[big | merged["disagree"]]
    display = shown[keys].copy()
    for c in cols:
        display[c] = [texts[c].get(tuple(r[k] for k in keys), "–") for _, r in shown.iterrows()]
    display["disagree"] = [r if d else "–" for r, d in zip(shown["reading"], shown["disagree"], strict=True)]
    return Table(f"{slug(name)}_directions", "Denoising (the clean site patched into the corrupted run: is it "
                 "sufficient?) beside noising (the corrupted site patched into the clean run: is it necessary?), "
                 "each as the share of the clean-corrupted gap in the logit difference and the clean answer's "
                 f"probability; sites where either moves at least 0.2 of the gap, or the two differ by at least "
                 f"{limit}; every site in the CSV.", merged, display)


def _natural(col: pd.Series) -> pd.Series:
    """Sort positions numerically when they are numbers."""
    try:
        return col.astype(int)
    except (TypeError, ValueError):
        return col


def _disagreement_note(data: pd.DataFrame) -> str:
    n = int(data["disagree"].sum())
    if not n:
        return "Denoising and noising agree at every site (their shares of the gap differ by less than the threshold)."
    return (f"Denoising and noising disagree at {n} site(s) (listed in the table): a site that restores the answer "
            "but whose corruption does not break it has a redundant partner; one whose corruption breaks it but "
            "whose restoration does not fix it works only with other sites (Heimersheim & Nanda 2024).")


def subspace_table(ds: xr.Dataset, store, name: str, order: list[str], whole: pd.DataFrame,
                   computed: list[str] | None = None) -> Table:
    """The subspace's patch beside the whole component's, per model, layer and position: the
    share of the whole component's recovery the subspace carries, flagged where the subspace
    recovers more than the whole (Makelov et al. 2024)."""
    sub = range_rules(metric_frames(ds, "patching", store, ["recovery_subspace"], computed)["recovery_subspace"],
                 "recovery")
    keys = ["task", "arch", "variant", "layer", "position"]
    sub = sub.assign(layer=sub["layer"].astype(str))
    base = whole.assign(layer=whole["layer"].astype(str))[keys + ["estimate"]].rename(columns={"estimate": "whole"})
    data = sub[keys + ["estimate", "lower", "upper"]].rename(columns={"estimate": "subspace"}).merge(base, on=keys)
    data["share"] = np.where(data["whole"].abs() >= 0.05, data["subspace"] / data["whole"].where(data["whole"] != 0), np.nan)
    data["subspace_exceeds"] = (data["subspace"] - data["whole"]) > 0.1
    data["layer_pos"] = [order.index(v) if v in order else -1 for v in data["layer"]]
    best = data.loc[data.groupby(["task", "arch", "variant", "layer"])["whole"].idxmax()].sort_values(
        ["task", "arch", "variant", "layer_pos"])
    display = best[keys].astype(str).assign(**{
        "whole component": [f"{v:.3f}" for v in best["whole"]],
        "subspace": ci_text(best.rename(columns={"subspace": "estimate"})),
        "share": ["–" if not np.isfinite(v) else f"{v:.2f}" for v in best["share"]],
        "subspace > whole": ["yes" if f else "–" for f in best["subspace_exceeds"]],
    })
    what = ds.attrs.get("subspace", "a subspace")
    return Table(f"{slug(name)}_subspace", f"Patching only the {what} directions beside patching the whole component, "
                 "at each layer's most restoring position: the share of the whole component's recovery the subspace "
                 "carries. A subspace that recovers more than the whole component changes something the whole "
                 "patch leaves alone (a dormant path, Makelov et al. 2024); every position in the CSV.",
                 data.drop(columns="layer_pos"), display)


# ---------------------------------------------------------------------- interchange
def interchange_part(snap: Snapshot, name: str, patched: dict | None = None) -> Section:
    ds = read_result(snap.store, name)
    part = Section(slug(name), f"Interchange: {name.split('/', 1)[-1]}")
    order = [str(v) for v in ds["layer"].values]
    sites = [str(v) for v in ds["site"].values]

    flat = flat_runs(ds)
    if flat:
        part.notes.append(_flat_note(flat, snap.store))
    computed: list[str] = []
    if len(flat) < ds.sizes["run"]:
        _restoration_views(part, ds, snap.store, name, order, sites, computed)
    if "damaged" in ds:
        table = directions_table(ds, snap.store, name, order, "site", INTERCHANGE_PAIRS, computed)
        part.tables.append(table)
        part.notes.append(_disagreement_note(table.data))
    mech = mechanism_frame(ds, snap.store)
    if mech is not None:
        part.tables.append(Table(f"{slug(name)}_mechanism", "Mechanism per run: induction (restored at the "
                                 "in-context value) or direct retrieval (at the key or query).", mech))
    if "trivial" in ds:
        part.notes.append("Two cells restore any model trivially and the mechanism label ignores them: the "
                          "embedding at the edited position itself, and the last layer at the readout "
                          "(query) position, which sets the logits.")
    _note_computed(part, name, computed)
    if patched is not None:
        collect_sites(ds, snap.store, "patched_site", f"interchange: {name.split('/', 1)[-1]}", patched)
    return part


def _restoration_views(part: Section, ds: xr.Dataset, store, name: str, order: list[str],
                       sites: list[str], computed: list[str] | None = None) -> None:
    """The restoration figure and table (per layer and site, 95% intervals) of ``ds``'s runs
    whose corruption moves the clean answer (:func:`analysis.interventions.intervals.flat_runs`
    left out)."""
    restoration = metric_frames(ds, "interchange", store, ["restoration"], computed)["restoration"]
    frame = layer_positions(range_rules(restoration, "restoration"), order)
    frame["site"] = frame["site"].astype(str)
    frame = frame.sort_values(["task", "arch", "variant", "layer_pos"])
    plot = frame.assign(site=pd.Categorical(frame["site"], sites, ordered=True)).sort_values(["layer_pos", "site"])
    part.figures.append(Figure(
        f"{slug(name)}_restoration", f"Share of the clean answer's probability restored by patching each "
        f"site, per layer (length {ds.attrs.get('length', '?')}; band: 95% interval{seeds_caption(frame)}).",
        F.position_lines(plot.rename(columns={"estimate": "restoration", "lower": "restoration_lower",
                                              "upper": "restoration_upper"}),
                         value="restoration", ylabel="restoration", x="site", series="layer")))
    part.tables.append(Table(f"{slug(name)}_restoration", "Restoration [95% interval] per layer and site.",
                             frame, by_layer(frame, ["task", "arch", "variant", "layer"], "site", sites)))


def _flat_note(runs: list[str], store) -> str:
    table = factor_table(store, runs)
    groups = "; ".join(f"{t}/{a}/{v}: {len(g)} of its runs" for (t, a, v), g in
                       table.groupby(["task", "arch", "variant"], dropna=False))
    return (f"Left out of the restoration table and figure: runs whose corruption moves the clean answer's "
            f"probability by less than {MIN_GAP:g} on average, so a share of that gap is noise ({groups}); "
            "their mechanism is 'none' and restoration claims leave them out too.")


def mechanism_frame(ds: xr.Dataset, store) -> pd.DataFrame | None:
    """One row per run with its mechanism, or None where key/value/query sites are absent."""
    if not {"key", "value", "query"} <= {str(s) for s in ds["site"].values}:
        return None

    labels = classify_mechanism(ds)
    table = factor_table(store, [str(r) for r in labels["run"].values]).reset_index()
    table["mechanism"] = labels.values.astype(str)
    table.attrs = {}
    return table
