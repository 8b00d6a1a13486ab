"""Section 4: interventions -- ablation drops, residual decodability, patching, interchange.

Sources (written by :mod:`analysis.interventions`):

``results/ablation/<name>``
    ``correct (run, length, layer, setting, sequence)``, ``correct_clean (run, length, layer,
    sequence)``, ``n_labelled (run, length, sequence)``, optionally ``probe_correct`` and
    ``probe_correct_clean`` (the refitted probe's hits on the erased / unedited states);
    attr ``fit_length``. Per seed, the drop is ``sum(correct_clean - correct) / sum(n_labelled)``
    and residual decodability ``sum(probe_correct) / sum(n_labelled)``.
``results/patching/<name>``
    ``recovered (run, layer, position, sequence)`` and ``gap (run, layer, sequence)``; per seed,
    recovery = ``sum(recovered) / sum(gap)``.
``results/interchange/<name>``
    ``restored (run, layer, site, sequence)`` and ``gap``; per seed, restoration =
    ``sum(restored) / sum(gap)``; the mechanism of each run from
    :func:`analysis.interventions.classify_mechanism`.

Every interval comes from :func:`reports.numbers.group_intervals` (seeds, then sequences) and
goes through :func:`reports.intervals.apply_rules`: accuracy drops lie in [-1, 1], accuracies
and refitted-probe accuracies in [0, 1]; recovery and restoration may overshoot and are not
bounded; no interval from 2 seeds. Which site each architecture's intervention edits is one
table for the whole section (:func:`sites_table`), not a note per result.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import xarray as xr

from reports import figures as F
from reports import intervals as I
from reports.model import COMMANDS, Figure, Section, Table
from reports.numbers import group_intervals, read_result, run_factors
from reports.snapshot import Snapshot

INTRO = (
    "Causal tests of the probed state. Ablation erases a direction or subspace at one layer and "
    "resumes the model from there: the accuracy drop measures necessity, and a probe refitted on "
    "the erased states measures what is still decodable (a single-direction ablation that leaves "
    "the state decodable is not a necessity test). Patching copies one site of a clean run into a "
    "corrupted twin and measures the share of the clean-corrupted gap recovered; interchange "
    "interventions do the same at named positions. Brackets and bands: 95% intervals across seeds."
)
KINDS = {
    "ablation": ("Ablation and residual decodability", "ablate"),
    "patching": ("Activation patching", "patch"),
    "interchange": ("Interchange interventions", "interchange"),
}


def interventions(snap: Snapshot) -> Section:
    sec = Section("interventions", "Interventions", intro=INTRO)
    builders = {"ablation": ablation_part, "patching": patching_part, "interchange": interchange_part}
    sites: dict[str, dict[str, list[str]]] = {}
    for kind, (title, stage) in KINDS.items():
        names = snap.results(f"{kind}/")
        if not names:
            sec.parts.append(Section(f"{kind}", title, missing=f"No {kind} results in this store.",
                                     command=COMMANDS[stage]))
            continue
        for name in names:
            sec.parts.append(builders[kind](snap, name, sites))
    if all(p.missing for p in sec.parts):
        sec.missing = "No intervention results in this store."
    table = sites_table(sites)
    if table is not None:
        sec.tables.append(table)
    return sec


def _slug(name: str) -> str:
    return name.replace("/", "_").replace(":", "-")


def _layer_positions(frame: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    frame = frame.copy()
    frame["layer"] = frame["layer"].astype(str)
    frame["layer_pos"] = [order.index(v) for v in frame["layer"]]
    return frame


def _ci_text(frame: pd.DataFrame, signed: bool = False) -> list[str]:
    return I.texts(frame, signed=signed)


def _rules(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The interval rules of :mod:`reports.intervals` for ``metric``'s range."""
    return I.apply_rules(frame, *I.RANGES[metric], t_based=(frame["method"] == "seed-level t").to_numpy())


def _seeds_caption(frame: pd.DataFrame) -> str:
    two = "seed_a" in frame and bool(np.isfinite(frame["seed_a"].astype(float)).any())
    return "; vertical line: the two seeds' values where 2 seeds are too few for an interval" if two else ""


def _pivot(frame: pd.DataFrame, index: list[str], column: str, order: list, signed: bool = False) -> pd.DataFrame:
    shown = frame.assign(text=_ci_text(frame, signed))
    pivot = shown.pivot_table(index=index, columns=column, values="text", aggfunc="first")
    pivot = pivot[[c for c in order if c in pivot.columns]].reset_index()
    pivot.columns = [str(c) for c in pivot.columns]
    return pivot.fillna("–")


def collect_sites(ds: xr.Dataset, store, coord: str, result: str, into: dict[str, dict[str, list[str]]]) -> None:
    """Record which site ``result`` edits, per architecture, into ``into[arch][result]``.

    Sites are described per (run, layer[, site]) by :func:`analysis.interventions._common.site_description`
    ("block output of layer L1 at every position; changes what the layers above L1 see …"):
    the layer's name is replaced by ``<layer>`` so one architecture's sites read as one line.
    """
    if coord not in ds.coords:
        return
    table = run_factors(store, [str(r) for r in ds["run"].values])
    layers = sorted({str(v) for v in ds["layer"].values}, key=len, reverse=True) if "layer" in ds.coords else []
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, layers)) + r")\b") if layers else None
    for arch, grp in table.groupby("arch"):
        texts = into.setdefault(str(arch), {}).setdefault(result, [])
        for v in np.ravel(ds[coord].sel(run=list(grp.index)).values):
            text = str(v)
            if text.startswith("embedding output"):
                continue  # the embedding (layer embed) is the same for every architecture
            if pattern is not None:
                text = pattern.sub("<layer>", text)
            if text not in texts:
                texts.append(text)


def _merge_positions(heads: list[str]) -> str:
    """``block output of layer <layer> at position 'key'`` and ``… at position 'value'`` as
    ``block output of layer <layer> at positions 'key', 'value'``."""
    groups: dict[str, list[str]] = {}
    for head in heads:
        prefix, sep, where = head.rpartition(" at position ")
        key = prefix if sep else head
        groups.setdefault(key, [])
        if sep:
            groups[key].append(where)
    out = []
    for key, places in groups.items():
        if len(places) > 1:
            out.append(f"{key} at positions {', '.join(places)}")
        elif places:
            out.append(f"{key} at position {places[0]}")
        else:
            out.append(key)
    return "; ".join(out)


def sites_table(sites: dict[str, dict[str, list[str]]]) -> Table | None:
    """One row per architecture: what each intervention result edited (said once for the
    whole section), and the caveat of recurrent models (their own state is not edited)."""
    if not sites:
        return None
    results = list(dict.fromkeys(r for per in sites.values() for r in per))
    rows = []
    for arch in F.arch_order(sites):
        row: dict[str, str] = {"arch": arch}
        caveats: list[str] = []
        for res in results:
            heads = []
            for text in sites[arch].get(res, []):
                head, _, tail = text.partition("; ")
                heads.append(head)
                for c in tail.split("; ") if tail else []:
                    if c not in caveats:
                        caveats.append(c)
            row[res] = _merge_positions(list(dict.fromkeys(heads))) or "–"
        row["not edited"] = "; ".join(caveats) or "nothing else (the block output is the whole state passed on)"
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["arch", *results, "not edited"])
    return Table("intervention_sites", "What each intervention edits, per architecture (<layer>: the layer "
                 "intervened on; the embedding layer edits the embedding output). Recurrent models pass "
                 "their own state along positions inside a layer, which these edits leave as it was.", frame)


# ---------------------------------------------------------------------- ablation
def ablation_frames(ds: xr.Dataset, store) -> dict[str, pd.DataFrame]:
    """Tidy frames with intervals: ``drop``, ``accuracy`` (after erasure), ``residual`` and
    ``residual_clean`` (refitted probe accuracy), one row per cell and task/arch/variant."""
    den = ds["n_labelled"].astype(float)
    out = {
        "drop": _rules(group_intervals(ds["correct_clean"] - ds["correct"], den, store), "drop"),
        "accuracy": _rules(group_intervals(ds["correct"], den, store), "accuracy"),
    }
    if "probe_correct" in ds:
        out["residual"] = _rules(group_intervals(ds["probe_correct"], den, store), "accuracy")
        out["residual_clean"] = _rules(group_intervals(ds["probe_correct_clean"], den, store), "accuracy")
    return out


def ablation_part(snap: Snapshot, name: str, sites: dict | None = None) -> Section:
    ds = read_result(snap.store, name)
    part = Section(_slug(name), f"Ablation: {name.split('/', 1)[-1]}")
    order = [str(v) for v in ds["layer"].values]
    frames = {k: _layer_positions(v, order) for k, v in ablation_frames(ds, snap.store).items()}
    fit = int(ds.attrs.get("fit_length", frames["drop"]["length"].min()))
    drop = frames["drop"]
    at_fit = drop[drop["length"] == fit]
    part.figures.append(Figure(
        f"{_slug(name)}_drop", f"Accuracy drop when the state is erased at each layer (length {fit}; "
        f"rows: erasure setting; band: 95% interval{_seeds_caption(at_fit)}).",
        F.layer_lines(at_fit.rename(columns={"estimate": "drop", "lower": "drop_lower", "upper": "drop_upper"}),
                      order, value="drop", ylabel="accuracy drop", row="setting", zero_line=True)))
    keys = ["task", "arch", "variant", "setting"]
    part.tables.append(Table(f"{_slug(name)}_drop", f"Accuracy drop [95% interval] per layer at length {fit} "
                             "(positive = erasing hurts); every length in the CSV.",
                             drop, _pivot(at_fit, keys, "layer", order, signed=True)))
    if "residual" in frames:
        res = frames["residual"]
        clean = frames["residual_clean"][["task", "arch", "variant", "length", "layer", "estimate"]]
        res = res.merge(clean.rename(columns={"estimate": "clean"}), on=["task", "arch", "variant", "length", "layer"],
                        how="left")
        res_fit = res[res["length"] == fit]
        part.figures.append(Figure(
            f"{_slug(name)}_residual", "Residual decodability: a probe refitted on the erased states "
            f"(length {fit}; thin dashed: the same probe on the unedited states; band: 95% interval"
            f"{_seeds_caption(res_fit)}).",
            F.layer_lines(res_fit.rename(columns={"estimate": "residual", "lower": "residual_lower",
                                                  "upper": "residual_upper"}),
                          order, value="residual", ylabel="probe accuracy after erasure", row="setting",
                          reference="clean")))
        part.tables.append(Table(f"{_slug(name)}_residual", f"Probe accuracy after erasure [95% interval] at length {fit}; "
                                 "column 'clean' in the CSV is the probe on unedited states.",
                                 res, _pivot(res_fit, keys, "layer", order)))
    lengths = sorted(drop["length"].unique())
    if len(lengths) > 1:
        part.tables.append(Table(
            f"{_slug(name)}_ood", "Does the drop persist at other lengths (erasers fitted at length "
            f"{fit})? The layer with the largest drop at length {fit}, per model and setting.",
            drop, _ood_pivot(drop, at_fit, lengths)))
    attrs = ds.attrs
    part.notes.append(f"Erasure mode {attrs.get('mode', '?')}; directions fitted at length {fit} on "
                      f"{attrs.get('fit_fraction', '?')} of the sequences, measured on the rest; "
                      f"{attrs.get('folds', '?')}-fold refitted probes.")
    if sites is not None:
        collect_sites(ds, snap.store, "site", f"ablation: {name.split('/', 1)[-1]}", sites)
    return part


def _ood_pivot(drop: pd.DataFrame, at_fit: pd.DataFrame, lengths: list[int]) -> pd.DataFrame:
    keys = ["task", "arch", "variant", "setting"]
    best = at_fit.loc[at_fit.groupby(keys)["estimate"].idxmax(), keys + ["layer"]]
    sub = drop.merge(best, on=keys + ["layer"])
    return _pivot(sub, keys + ["layer"], "length", lengths, signed=True).rename(
        columns={str(L): f"L = {L}" for L in lengths})


# ---------------------------------------------------------------------- patching
def patching_part(snap: Snapshot, name: str, sites: dict | None = None) -> Section:
    ds = read_result(snap.store, name)
    part = Section(_slug(name), f"Patching: {name.split('/', 1)[-1]}")
    order = [str(v) for v in ds["layer"].values]
    frame = _rules(group_intervals(ds["recovered"], ds["gap"], snap.store), "recovery")
    frame = _layer_positions(frame, order)
    length = ds.attrs.get("length", "?")
    part.figures.append(Figure(
        f"{_slug(name)}_heatmap", f"Share of the clean-corrupted logit gap recovered by patching one "
        f"(layer, position) site, length {length} (mean across seeds; intervals in the CSV).",
        F.heatmaps(frame, value="estimate", title="recovery")))
    keys = ["task", "arch", "variant", "layer"]
    best = frame.loc[frame.groupby(keys)["estimate"].idxmax()].sort_values(["task", "arch", "variant", "layer_pos"])
    shown = best[keys].copy()
    shown["best position"] = best["position"].astype(int).astype(str)
    shown["recovery there [95% CI]"] = _ci_text(best)
    shown["seeds"] = best["n_seeds"]
    part.tables.append(Table(f"{_slug(name)}_recovery", "Per layer, the position whose patching recovers the "
                             "most of the gap, with its interval; every (layer, position) in the CSV.",
                             frame, shown))
    part.notes.append("recovery = sum(recovered) / sum(gap) over sequences: 0 = nothing recovered, 1 = the clean "
                      "value; a patch can overshoot either end, so recovery is not bounded.")
    if sites is not None:
        collect_sites(ds, snap.store, "patched_site", f"patching: {name.split('/', 1)[-1]}", sites)
    return part


# ---------------------------------------------------------------------- interchange
def interchange_part(snap: Snapshot, name: str, patched: dict | None = None) -> Section:
    ds = read_result(snap.store, name)
    part = Section(_slug(name), f"Interchange: {name.split('/', 1)[-1]}")
    order = [str(v) for v in ds["layer"].values]
    sites = [str(v) for v in ds["site"].values]
    frame = _layer_positions(_rules(group_intervals(ds["restored"], ds["gap"], snap.store), "restoration"), order)
    frame["site"] = frame["site"].astype(str)
    frame = frame.sort_values(["task", "arch", "variant", "layer_pos"])
    plot = frame.assign(site=pd.Categorical(frame["site"], sites, ordered=True)).sort_values(["layer_pos", "site"])
    part.figures.append(Figure(
        f"{_slug(name)}_restoration", f"Share of the clean answer's probability restored by patching each "
        f"site, per layer (length {ds.attrs.get('length', '?')}; band: 95% interval{_seeds_caption(frame)}).",
        F.position_lines(plot.rename(columns={"estimate": "restoration", "lower": "restoration_lower",
                                              "upper": "restoration_upper"}),
                         value="restoration", ylabel="restoration", x="site", series="layer")))
    part.tables.append(Table(f"{_slug(name)}_restoration", "Restoration [95% interval] per layer and site.",
                             frame, _pivot(frame, ["task", "arch", "variant", "layer"], "site", sites)))
    mech = mechanism_frame(ds, snap.store)
    if mech is not None:
        part.tables.append(Table(f"{_slug(name)}_mechanism", "Mechanism per run: induction (restored at the "
                                 "in-context value) or direct retrieval (at the key or query).", mech))
    if "trivial" in ds:
        part.notes.append("Two cells restore any model trivially and the mechanism label ignores them: the "
                          "embedding at the edited position itself, and the last layer at the readout "
                          "(query) position, which sets the logits.")
    if patched is not None:
        collect_sites(ds, snap.store, "patched_site", f"interchange: {name.split('/', 1)[-1]}", patched)
    return part


def mechanism_frame(ds: xr.Dataset, store) -> pd.DataFrame | None:
    """One row per run with its mechanism, or None where key/value/query sites are absent."""
    if not {"key", "value", "query"} <= {str(s) for s in ds["site"].values}:
        return None
    from analysis.interventions import classify_mechanism

    labels = classify_mechanism(ds)
    table = run_factors(store, [str(r) for r in labels["run"].values]).reset_index()
    table["mechanism"] = labels.values.astype(str)
    table.attrs = {}
    return table
