"""Probe profiles -- where, layer by layer, the task state is linearly readable: the report's
"probes" section (its place among the sections: ``reports.build.ORDER``).

Source: every ``results/probes/<target>`` written by :mod:`analysis.probes` (``layerstate
probe``). Layout used (see :func:`analysis.probes.probe`): metrics ``accuracy``,
``baseline``, ``control_accuracy``, ``selectivity`` with dims (run, length, layer,
[position], fold); per-sequence counts ``correct`` (run, length, layer, [position], sequence)
and ``labelled`` (run, length, [position], sequence); ``n_test`` (run, length, [position],
fold); the ``evaluation`` coordinate along ``length`` (cross-validation or transfer).

Regularisation: ``C`` (the stored probe's C, run x fit_length x layer x [position]),
``path_converged`` (along ``C_grid``) and ``converged`` give the chosen C per layer (median over
seeds and positions, with its range) and the counts of cells whose grid had values that could
not be fitted (avoided by the choice) and of probes that did not converge
(:func:`regularisation_frame`).

Per seed (one run), a layer's readability is the probe's held-out accuracy pooled over
positions and sequences (``sum correct / sum labelled``); its interval (seed-level t; one
seed: sequences only; without per-sequence counts, the fold-and-position mean of
``accuracy`` per seed with a seed-level t interval) and those of the baseline, control
accuracy and selectivity (fold-and-position means per seed, seed-level t intervals) are the
ones stored with the result (:func:`analysis.probes.intervals.add_probe_intervals`); a result
stored before results kept them has them computed here the same way, with a note naming the
command that stores them. Best layer, first crossing and AUC
(:func:`analysis.stats.profile_statistics` on the per-seed profiles) are stored with the
result the same way (:func:`analysis.probes.intervals.profile_summary`). Every interval then goes
through :func:`reports.intervals.apply_rules` (ranges: accuracies [0, 1], selectivity [-1, 1],
AUC [-c/(1-c), 1]; none from 2 seeds).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from analysis import registry
from analysis.behaviour import by_factors
from analysis.probes.intervals import (
    METRICS,
    probe_interval_frames,
    profile_summary,
    stored_probe_intervals,
    stored_profile_summary,
)
from capture.experiment import UNTRAINED
from reports import figures as F
from reports.figures import variant_style
from reports.intervals import MIN_SEEDS, RANGES, TOO_FEW, TOO_WIDE, apply_rules, auc_range, texts
from reports.mdl import mdl_parts
from reports.model import COMMANDS, Figure, Section, Table, missing_section
from reports.numbers import fmt_layer_ci, read_result
from reports.snapshot import Snapshot
from reports.stability import stability_parts
from store import MissingError, schema
from store.contents.results import describe_settings

PROBES_INTRO = (
    "Held-out accuracy of linear probes on each layer's hidden states (cross-validated by sequence), "
    "with the training fold's majority-class baseline and a control task (Hewitt & Liang): "
    "selectivity = accuracy - control accuracy. Tasks are columns and architectures rows, so a "
    "task-dependent reversal of where the state becomes readable shows at a glance (the grid of "
    "profiles is in the Summary). Bands and brackets: 95% intervals across seeds."
)
THRESHOLD = 0.9
#: A control task this accurate cannot fail, and selectivity against it means nothing.
TRIVIAL_CONTROL = 0.98
METRIC_VARS = {"baseline": "baseline", "control": "control_accuracy", "selectivity": "selectivity"}


def probe_results(store) -> list[str]:
    """The names of the stored probe results (kind ``probes``, :mod:`store.schema`)."""
    return [n for n in store.results() if (schema.parse_result_name(n) or ("",))[0] == registry.PROBES]


def claims_reading(store) -> dict[str, list[str]]:
    """Probe result name -> the ids of the stored claims that read it (the ``result`` column of
    ``results/claims``, which names the probe results each claim was decided on); empty without
    stored claims or that column."""
    if "claims" not in store.results():
        return {}
    ds = read_result(store, "claims")
    if "result" not in ds:
        return {}
    out: dict[str, list[str]] = {}
    for cid, names in zip(ds["claim"].values, ds["result"].values, strict=True):
        for name in str(names).split(","):
            name = name.strip()
            if (schema.parse_result_name(name) or ("",))[0] == registry.PROBES:
                out.setdefault(name, []).append(str(cid))
    return out


def choose_probe_results(store, names: Sequence[str], wanted: Sequence[str] = ()) -> tuple[
        dict[str, list[str]], list[str]]:
    """:func:`_choose` without the tasks that had several results (what ``layerstate report``
    checks its ``--result`` names with)."""
    shown, notes, _ = _choose(store, names, wanted)
    return shown, notes


def _choose(store, names: Sequence[str], wanted: Sequence[str] = ()) -> tuple[
        dict[str, list[str]], list[str], set[str]]:
    """Which probe result each task shows: ``({name: [task, ...]}, notes)``.

    Per task, of the results holding its runs: the one in ``wanted`` (``--result``), else the
    one the stored claims read (:func:`claims_reading`; the first by name if they read several),
    else the one named ``probes/<task>``, else the newest (``created``); never two, so one task's
    profile never mixes two results. ``notes`` says, per task, which is shown, with what
    settings, which claims read it, and which others there are; the last item is the set of
    tasks that had several results to choose from.
    """
    wanted = [w if schema.parse_result_name(w) else schema.result_name(registry.PROBES, w) for w in wanted]
    unknown = [w for w in wanted if w not in names]
    if unknown:
        raise MissingError(f"no probe result {unknown[0]} to show; stored: {', '.join(names) or 'none'}")
    attrs = {n: store.result_attrs(n) for n in names}
    holding: dict[str, list[str]] = {}
    shown: dict[str, list[str]] = {}
    for n in names:
        ds = read_result(store, n)
        runs = [str(r) for r in ds.run.values] if "run" in ds.dims else []
        tasks = sorted({str(store.run_attrs(r).get("task")) for r in runs if r in store.run_ids()})
        if not tasks:  # no runs of this store: shown as it is (its section says what it lacks)
            shown[n] = []
        for task in tasks:
            holding.setdefault(task, []).append(n)
    notes = []
    read = claims_reading(store)
    for task, cands in sorted(holding.items()):
        pick = ([n for n in cands if n in wanted] or sorted(n for n in cands if n in read)
                or [n for n in cands if n == registry.probe_name(task)]
                or sorted(cands, key=lambda n: str(attrs[n].get("created", "")))[-1:])[0]
        shown.setdefault(pick, []).append(task)
        others = [n for n in cands if n != pick]
        notes.append(f"Task {task}: shows {pick} ({describe_settings(attrs[pick])})" + _readers(read, pick) + (
            "; also stored: " + "; ".join(f"{n} ({describe_settings(attrs[n])}){_readers(read, n)}" for n in others)
            + f" (`layerstate report STORE --result {others[0]}` shows it instead)" if others else ""))
    return shown, notes, {t for t, c in holding.items() if len(c) > 1}


def _readers(read: dict[str, list[str]], name: str) -> str:
    """``, the result claims a, b read`` (or '' when no stored claim reads ``name``)."""
    ids = read.get(name, [])
    return f", the result claim{'s' if len(ids) > 1 else ''} {', '.join(ids)} read{'' if len(ids) > 1 else 's'}" \
        if ids else ""


def probes(snap: Snapshot, wanted: Sequence[str] = ()) -> Section:
    names = probe_results(snap.store)
    if not names:
        return missing_section("probes", "Probe profiles", "No probe results in this store.", "probe", PROBES_INTRO)
    sec = Section("probes", "Probe profiles", intro=PROBES_INTRO)
    frames, summaries, notes, regs = [], [], [], []
    computed: list[str] = []
    shown, which, several = _choose(snap.store, names, wanted)
    notes.extend(which)
    for name, tasks in shown.items():
        ds = read_result(snap.store, name)
        if tasks:
            keep = [i for i, r in enumerate(ds.run.values) if str(snap.store.run_attrs(str(r)).get("task")) in tasks]
            ds = ds.isel(run=keep)
        if "accuracy" not in ds:
            notes.append(f"results/{name} has no 'accuracy' variable (variables: {', '.join(map(str, ds.data_vars))}); skipped")
            continue
        target = str(ds.attrs.get("target", (schema.parse_result_name(name) or ("", name))[1]))
        here: list[str] = []
        frames.append(profile_frame(ds, snap.store, target=target, computed=here).assign(result=name))
        summaries.append(summary_frame(ds, snap.store, target=target, computed=here))
        if here:
            computed.append(name)
        regs.append(regularisation_frame(ds, snap.store, target=target))
        notes.extend(_describe(name, ds))
        if "control_accuracy" in ds and float(ds["control_accuracy"].mean()) >= TRIVIAL_CONTROL:
            notes.append(f"results/{name}: its {ds.attrs.get('control', '')} control task scores "
                         f"{float(ds['control_accuracy'].mean()):.3f}, decodable outright (few token types): "
                         "selectivity against it shows nothing; probe with --control permute")
    if computed:
        notes.append(f"The intervals of {', '.join(f'results/{n}' for n in computed)} are not stored with the result "
                     f"(stored before results kept their intervals): computed here from its per-seed metrics; "
                     f"`{COMMANDS['probe']}` stores them.")
    if not frames:
        return missing_section("probes", "Probe profiles", "; ".join(notes), "probe", PROBES_INTRO)
    frame = _panel_names(pd.concat(frames, ignore_index=True))
    layers = list(dict.fromkeys(frame.sort_values("layer_pos")["layer"]))
    shown_length = _fit_length(frame)
    at_fit = frame[frame["length"] == shown_length]
    read = claims_reading(snap.store)
    # a panel names its result where the task had several to choose from (the claims name theirs)
    panels = {t: f"{t} · {r}" if t in several else t
              for t, r in at_fit.groupby("task")["result"].first().items()}
    sec.figures.append(Figure(
        "probe_profiles",
        f"Probe accuracy across layers at length {shown_length}: tasks as columns, architectures as rows "
        "(band: 95% interval across seeds; dashed: majority baseline; dotted: control task). "
        + results_text(at_fit, read) + band_text(at_fit) + untrained_text(at_fit, snap.store),
        F.profile_grid(at_fit.assign(task=at_fit["task"].map(panels)).rename(
            columns={"estimate": "accuracy", "lower": "accuracy_lower", "upper": "accuracy_upper"}), layers),
    ))
    sec.tables.append(Table("probe_profiles", f"Probe accuracy [95% interval] per layer at length {shown_length} "
                            f"({results_text(at_fit, read, short=True)}); every length in the CSV.",
                            frame, _profile_pivot(at_fit, layers)))
    mdl_figures, mdl_tables, mdl_notes = mdl_parts(snap, shown_length)  # beside the profile: results/mdl
    sec.figures.extend(mdl_figures)
    sec.tables.extend(mdl_tables)
    notes.extend(mdl_notes)
    stab_figures, stab_tables, stab_notes = stability_parts(snap, shown_length)  # results/stability
    sec.figures.extend(stab_figures)
    sec.tables.extend(stab_tables)
    notes.extend(stab_notes)
    if "selectivity" in frame:
        sec.tables.append(Table(
            "probe_selectivity", f"Selectivity (probe accuracy - control-task accuracy) [95% interval] per layer at "
            f"length {shown_length}: high selectivity means the probe reads the state, not the token identity.",
            frame[["task", "arch", "variant", "length", "layer", "selectivity", "selectivity_lower",
                   "selectivity_upper", "selectivity_interval_note", "selectivity_seed_a", "selectivity_seed_b",
                   "control", "control_lower", "control_upper", "baseline", "n_seeds"]],
            _profile_pivot(at_fit, layers, signed=True, value="selectivity")))
    reg = pd.concat(regs, ignore_index=True)
    if len(reg):
        reg = _panel_names(reg)
        at_fit_reg = reg[reg["fit_length"] == shown_length]
        sec.tables.append(Table(
            "probe_regularisation",
            f"Inverse L2 strength C of the stored probes per layer, fitted at length {shown_length}: "
            "median over seeds and positions [range], chosen per cell by inner cross-validation "
            "grouped by sequence (see the notes); a probe's capacity changes what is readable "
            "(Hewitt & Liang 2019); a C at the grid's end means the best value may lie beyond it. "
            "The CSV also counts, per layer, the cells whose grid had C values "
            "that could not be fitted to tolerance (never chosen) and probes that did not converge.",
            reg, _regularisation_pivot(at_fit_reg if len(at_fit_reg) else reg, layers)))
    summary = pd.concat(summaries, ignore_index=True)
    if len(summary):
        summary = _panel_names(summary)
        sec.tables.append(Table(
            "probe_summary",
            f"Where the state becomes readable: best layer, first layer reaching {THRESHOLD:.0%} accuracy and the "
            "normalised area under the profile (0 = baseline everywhere, 1 = perfect everywhere), "
            "with 95% intervals.",
            summary, _summary_display(summary)))
    sec.notes = notes + [
        "Layer intervals (best layer, first crossing) are percentiles of a bootstrap over seeds; with few "
        "seeds they are optimistic, and with 2 they are not shown (the cell gives each seed's layer). "
        "The AUC interval is a seed-level t interval."
    ]
    return sec


def results_text(frame: pd.DataFrame, read: dict[str, list[str]], *, short: bool = False) -> str:
    """Which stored result each task's profile is (``dyck: probes/dyck-2, the result claim d reads``),
    and any probe result a stored claim reads that is not shown here."""
    shown = frame.groupby("task")["result"].first()
    each = "; ".join(f"{t}: {r}" + ("" if short else _readers(read, r))
                     for t, r in shown.items())
    if short:
        return f"results {each}"
    text = f"Results: {each}."
    unseen = {n: ids for n, ids in read.items() if n not in set(shown)}
    for n, ids in sorted(unseen.items()):
        text += (f" Claim{'s' if len(ids) > 1 else ''} {', '.join(ids)} read{'' if len(ids) > 1 else 's'} {n}, "
                 f"not shown here (`layerstate report STORE --result {n}` shows it).")
    return text


def untrained_variants(frame: pd.DataFrame, store) -> list[str]:
    """The variants of ``frame`` that are untrained baselines: their runs record ``untrained``
    (``[variants.<name>] train = false``), or, for a store imported from elsewhere, the variant's
    name begins with ``untrained`` (the user's own activations of the untrained models)."""
    return [v for v in sorted(frame["variant"].astype(str).unique()) if v in _flagged(store) or v.startswith(UNTRAINED)]


def _flagged(store) -> set[str]:
    """The variants whose runs were stored untrained by `layerstate train` (``untrained`` set)."""
    return {str(store.run_attrs(r).get("variant")) for r in store.run_ids() if store.run_attrs(r).get("untrained")}


def untrained_text(frame: pd.DataFrame, store) -> str:
    """What the untrained baseline's profiles are, for the figure's caption ('' without one):
    which variants, in which line style, and how to read a trained profile against them."""
    names = untrained_variants(frame, store)
    if not names:
        return ""
    variants = sorted(frame["variant"].astype(str).unique())
    styles = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dotted"}
    each = ", ".join(f"{v} ({styles.get(variant_style(v, variants), 'its own line style')}, with markers, in the "
                     "architecture's colour)" for v in names)
    cells = sorted({f"{t}/{a}" for t, a, v in zip(frame["task"], frame["arch"], frame["variant"], strict=True)
                    if str(v) in names})
    how = ("with the same seeds (each the starting point of that seed's trained run)" if set(names) <= _flagged(store)
           else "(imported: as the store's runs were given)")
    return (f" Untrained baseline, variant {each}: the same architecture at initialisation {how}, captured and "
            "probed as the trained runs; "
            "what a probe reads there needs no training, and a trained band above it is what training added "
            f"(for {', '.join(cells)}). Its accuracy elsewhere in this report is an untrained readout's "
            "(chance by construction), not a model's behaviour.")


def band_text(frame: pd.DataFrame) -> str:
    """Why a profile of the figure has no band, per (task, arch, variant): too few seeds, an
    interval as wide as the range, one seed without per-sequence counts, or a result that stores
    no interval (no per-seed values); and profiles whose band has no width. '' when every
    profile has its band."""
    why: dict[str, list[str]] = {}
    for (task, arch, variant), g in frame.groupby(["task", "arch", "variant"], sort=True):
        name = f"{task}/{arch}" + ("" if variant == "default" else f"/{variant}")
        lo, hi = g["lower"].astype(float), g["upper"].astype(float)
        ok = np.isfinite(lo) & np.isfinite(hi)
        n = int(pd.to_numeric(g["n_seeds"], errors="coerce").fillna(0).max())
        if ok.all():
            if float((hi - lo).max()) < 0.002:
                why.setdefault("its interval has no visible width (every seed scores alike)", []).append(name)
            continue
        notes = set(g.loc[~ok, "interval_note"].astype(str))
        if TOO_FEW in notes:
            reason = "2 seeds, too few for an interval (each seed's value is a vertical line)"
        elif TOO_WIDE in notes:
            reason = "its interval spans the whole range"
        elif n <= 1:
            reason = ("1 seed, and the stored result has no per-sequence counts to resample "
                      "(train more seeds for an interval across seeds)")
        else:
            reason = (f"{n} seeds, but the stored result holds no interval for it (no per-seed values; "
                      f"`{COMMANDS['probe']}` stores them)")
        why.setdefault(reason, []).append(name)
    if not why:
        return ""
    return " No band: " + "; ".join(f"{', '.join(names)}: {reason}" for reason, names in why.items()) + "."


# ---------------------------------------------------------------------- per-seed profiles
def interval_frames(ds: xr.Dataset, store, computed: list[str] | None = None) -> dict[str, pd.DataFrame]:
    """The intervals of accuracy, baseline, control and selectivity as rows: the ones stored
    with the result (:func:`analysis.probes.intervals.stored_probe_intervals`, its cells
    restricted to ``ds``'s runs), else computed here
    (:func:`analysis.probes.intervals.probe_interval_frames`; ``"probes"`` appended to
    ``computed``)."""
    names = [m for m, var in METRICS.items() if var in ds]
    stored = {m: stored_probe_intervals(ds, m) for m in names}
    if any(f is None for f in stored.values()):
        if computed is not None:
            computed.append("probes")
        return probe_interval_frames(ds, store)
    cells = {tuple(str(store.run_attrs(str(r)).get(f)) for f in ("task", "arch", "variant")) for r in ds["run"].values}
    out = {}
    for m, frame in stored.items():
        assert frame is not None
        mine = [c in cells for c in zip(frame["task"], frame["arch"], frame["variant"], strict=True)]
        out[m] = frame[mine].reset_index(drop=True)
    return out


def profile_frame(ds: xr.Dataset, store, *, target: str, computed: list[str] | None = None) -> pd.DataFrame:
    """One row per (task, arch, variant, length, layer) with accuracy and its interval, plus
    baseline, control accuracy and selectivity (each with an interval) and n_seeds
    (:func:`interval_frames`)."""
    frames = interval_frames(ds, store, computed)
    acc = frames["accuracy"]
    keys = ["task", "arch", "variant", "length", "layer"]
    for short in METRIC_VARS:
        if short not in frames:
            continue
        extra = frames[short]
        extra = extra[keys + ["estimate", "lower", "upper"]].rename(
            columns={"estimate": short, "lower": f"{short}_lower", "upper": f"{short}_upper"})
        acc = acc.merge(extra, on=keys, how="left")
    layer_order = [str(v) for v in ds["layer"].values]
    acc["layer"] = acc["layer"].astype(str)
    acc["layer_pos"] = [layer_order.index(v) for v in acc["layer"]]
    acc["target"] = target
    if "evaluation" in ds.coords:
        ev = dict(zip(ds["length"].values.tolist(), ds["evaluation"].values.astype(str).tolist(), strict=True))
        acc["evaluation"] = [ev.get(int(L), "") for L in acc["length"]]
    fit = int(ds.attrs.get("train_length", -1))
    acc["fit_length"] = fit if fit > 0 else int(acc["length"].min())
    acc = apply_rules(acc, *RANGES["probe_accuracy"], t_based=(acc["method"] == "seed-level t").to_numpy())
    for short in METRIC_VARS:
        if short in acc:
            acc = apply_rules(acc, *RANGES[short], value=short, lower=f"{short}_lower",
                                upper=f"{short}_upper", note=f"{short}_interval_note",
                                seed_values=(f"{short}_seed_a", f"{short}_seed_b"))
    first = ["target", "task", "arch", "variant", "length", "evaluation", "fit_length", "layer", "layer_pos",
             "estimate", "lower", "upper", "n_seeds", "method"]
    acc = acc[[c for c in first if c in acc] + [c for c in acc if c not in first]]
    return acc.sort_values(["task", "arch", "variant", "length", "layer_pos"]).reset_index(drop=True)


def _panel_names(frame: pd.DataFrame) -> pd.DataFrame:
    """A task probed for several targets gets one column per target: ``dyck (depth)``."""
    per_task = frame.groupby("task")["target"].nunique()
    frame = frame.copy()
    frame["task"] = [t if per_task[t] == 1 else f"{t} ({g})" for t, g in zip(frame["task"], frame["target"], strict=True)]
    return frame


def _fit_length(frame: pd.DataFrame) -> int:
    fits = frame["fit_length"].dropna().astype(int)
    common = fits.mode()
    return int(common.iloc[0]) if len(common) else int(frame["length"].min())


def _profile_pivot(frame: pd.DataFrame, layers: list[str], signed: bool = False,
                   value: str | None = None) -> pd.DataFrame:
    """Cells ``estimate [lower, upper]`` per layer; ``value`` names another metric of the frame
    (its ``_lower``, ``_upper`` and ``_interval_note`` columns)."""
    if value is None:
        text = texts(frame, signed=signed)
    else:
        text = texts(frame, value=value, lower=f"{value}_lower", upper=f"{value}_upper",
                       note=f"{value}_interval_note", seed_values=(f"{value}_seed_a", f"{value}_seed_b"),
                       signed=signed)
    shown = frame.assign(text=text)
    pivot = shown.pivot_table(index=["task", "arch", "variant"], columns="layer", values="text", aggfunc="first")
    pivot = pivot[[c for c in layers if c in pivot.columns]].reset_index()
    seeds = frame.groupby(["task", "arch", "variant"])["n_seeds"].max().rename("seeds").reset_index()
    return pivot.merge(seeds, on=["task", "arch", "variant"]).fillna("–")


# ---------------------------------------------------------------------- profile statistics
def summary_frame(ds: xr.Dataset, store, *, target: str, computed: list[str] | None = None) -> pd.DataFrame:
    """Best layer, first crossing of the threshold and AUC with intervals, one row per
    (task, arch, variant, length): the ones stored with the result
    (:func:`analysis.probes.intervals.stored_profile_summary`), else computed here
    (:func:`analysis.probes.intervals.profile_summary`; ``"summary"`` appended to
    ``computed``), with each layer statistic written as its layer's name."""
    frame = stored_profile_summary(ds)
    if frame is None:
        frame = profile_summary(ds, store, threshold=THRESHOLD)
        if computed is not None:
            computed.append("summary")
    elif len(frame):
        cells = {tuple(str(store.run_attrs(str(r)).get(f)) for f in ("task", "arch", "variant"))
                 for r in ds["run"].values}
        frame = frame[[c in cells for c in zip(frame["task"], frame["arch"], frame["variant"], strict=True)]]
        frame = frame.reset_index(drop=True)
    if not len(frame):
        return pd.DataFrame()
    frame.insert(4, "target", target)
    for name in ("best_layer", "first_crossing"):
        names = []
        for r in frame.itertuples(index=False):
            labels = str(r.layer_labels).split(" ")
            row = r._asdict()
            if 2 <= r.n_seeds < MIN_SEEDS:  # too few seeds for an interval: each seed's own layer instead
                each = ", ".join(_layer_name(float(v), labels) for v in row[f"{name}_seeds"])
                names.append(f"{_layer_name(row[name], labels)} [{TOO_FEW}: {each}]")
            else:
                names.append(fmt_layer_ci(row[name], row[name + "_lower"], row[name + "_upper"], labels))
        frame[name + "_name"] = names
    few = ((frame["n_seeds"] >= 2) & (frame["n_seeds"] < MIN_SEEDS)).to_numpy()
    frame.loc[few, [f"{n}_{s}" for n in ("best_layer", "first_crossing") for s in ("lower", "upper")]] = np.nan
    frame = frame.drop(columns=["seeds", "best_layer_seeds", "first_crossing_seeds"])
    return apply_rules(frame, *auc_range(frame["chance"].to_numpy()), value="auc", lower="auc_lower",
                       upper="auc_upper", note="auc_interval_note", seed_values=("auc_seed_a", "auc_seed_b"))


def _layer_name(pos: float, labels: list[str]) -> str:
    """A layer position as its label; NaN (never crossed) as ``never``."""
    if not np.isfinite(pos):
        return "never"
    i = int(round(pos))
    return labels[i] if 0 <= i < len(labels) else str(i)


def _summary_display(summary: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "task": summary["task"], "arch": summary["arch"], "variant": summary["variant"],
        "length": summary["length"],
        "best layer": summary["best_layer_name"],
        f"first ≥ {THRESHOLD:.0%}": summary["first_crossing_name"],
        "AUC": texts(summary, value="auc", lower="auc_lower", upper="auc_upper", note="auc_interval_note",
                       seed_values=("auc_seed_a", "auc_seed_b")),
        "seeds": summary["n_seeds"],
    })


def _describe(name: str, ds: xr.Dataset) -> list[str]:
    a = ds.attrs
    bits = [f"results/{name}: target {a.get('target', '?')}"]
    for key in ("positions", "split", "control", "solver", "baseline"):
        if key in a:
            bits.append(f"{key}: {a[key]}")
    if int(a.get("train_length", -1)) > 0:
        bits.append(f"fitted at length {a['train_length']}, other lengths scored by transfer")
    if "C_selection" in a:
        bits.append(f"regularisation: {a['C_selection']}")
    out = ["; ".join(bits)]
    counts = _convergence_counts(ds)
    if counts is not None:
        cells, unfittable, stopped = counts
        out.append(
            f"results/{name}: {unfittable} of {cells} probe cells had C values in the grid whose fits "
            f"did not converge (not eligible, so the chosen C moved away from them); {stopped} "
            "stored or scored probes did not converge"
            + (" (their scores are those of the last iterate)." if stopped else ".")
        )
    return out


# ---------------------------------------------------------------------- regularisation
def _convergence_counts(ds: xr.Dataset) -> tuple[int, int, int] | None:
    """(cells, cells with an unfittable grid value, unconverged kept probes) of a result."""
    if "converged" not in ds or "C" not in ds:
        return None
    fitted = ds["C"].notnull() | ~ds["converged"]
    cells = int(fitted.sum())
    if cells == 0:  # no C (the screening solver)
        return None
    unfittable = 0
    if "path_converged" in ds:
        unfittable = int(((~ds["path_converged"]).any("C_grid") & fitted).sum())
    return cells, unfittable, int((~ds["converged"] & fitted).sum())


def regularisation_frame(ds: xr.Dataset, store, *, target: str) -> pd.DataFrame:
    """One row per (task, arch, variant, fit length, layer): the C chosen for the stored probes
    (median, min and max over seeds and positions), the number of cells, of cells whose grid had
    C values that could not be fitted (``unfittable_C_cells``) and of probes that did not
    converge. Empty for results without a chosen C (the screening solver, older results)."""
    if "C" not in ds or not bool(ds["C"].notnull().any()):
        return pd.DataFrame()
    cols = {"C": ds["C"], "converged": ds["converged"].astype(float)}
    if "path_converged" in ds:
        cols["unfittable"] = (~ds["path_converged"]).any("C_grid").astype(float)
    frame = by_factors(xr.Dataset(cols), store).to_dataframe().reset_index()
    frame = frame[np.isfinite(frame["C"])]
    if "unfittable" not in frame:
        frame["unfittable"] = 0.0
    keys = ["task", "arch", "variant", "fit_length", "layer"]
    out = frame.groupby(keys, sort=False).agg(
        C_median=("C", "median"), C_min=("C", "min"), C_max=("C", "max"), cells=("C", "size"),
        unfittable_C_cells=("unfittable", "sum"), unconverged=("converged", lambda v: int((v < 1).sum())),
    ).reset_index()
    out["unfittable_C_cells"] = out["unfittable_C_cells"].astype(int)
    layer_order = [str(v) for v in ds["layer"].values]
    out["layer"] = out["layer"].astype(str)
    out["layer_pos"] = [layer_order.index(v) for v in out["layer"]]
    out["target"] = target
    return out.sort_values(["task", "arch", "variant", "fit_length", "layer_pos"]).reset_index(drop=True)


def _regularisation_pivot(frame: pd.DataFrame, layers: list[str]) -> pd.DataFrame:
    """Cells ``median [min-max]`` of the chosen C per layer, and the per-row counts."""
    def text(row) -> str:
        med = f"{row.C_median:g}"
        return med if row.C_min == row.C_max else f"{med} [{row.C_min:g}–{row.C_max:g}]"

    shown = frame.assign(text=[text(r) for r in frame.itertuples()])
    pivot = shown.pivot_table(index=["task", "arch", "variant"], columns="layer", values="text", aggfunc="first")
    pivot = pivot[[c for c in layers if c in pivot.columns]].reset_index()
    counts = frame.groupby(["task", "arch", "variant"]).agg(
        cells=("cells", "sum"), unfittable=("unfittable_C_cells", "sum"), unconverged=("unconverged", "sum"),
    ).reset_index().rename(columns={"unfittable": "cells with unfittable C", "unconverged": "unconverged probes"})
    return pivot.merge(counts, on=["task", "arch", "variant"]).fillna("–")
