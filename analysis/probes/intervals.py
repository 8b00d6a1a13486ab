"""Seed-level intervals of a probe result's profiles, stored beside its per-seed metrics.

Per (task, arch, variant), length and layer: the probe's held-out accuracy pooled over
positions and sequences (``sum correct / sum labelled``, bootstrapped seeds then sequences,
:func:`analysis.intervals.group_intervals`; without per-sequence counts the fold-and-position
mean of ``accuracy`` per seed with a seed-level t interval), and the majority baseline,
control-task accuracy and selectivity (fold-and-position means per seed, seed-level t
intervals, :func:`analysis.intervals.seed_t_interval`). :func:`add_probe_intervals` stores them
as ``<metric>_estimate/_lower/_upper/_n_seeds/_method`` over ``(cell, length, layer)``
(:func:`analysis.intervals.frame_variables`); the report reads them back with
:func:`stored_probe_intervals`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from analysis.behaviour import by_factors
from analysis.intervals import (
    CI_LEVEL,
    frame_cells,
    frame_variables,
    group_intervals,
    seed_t_interval,
    stored_intervals,
    with_cells,
)
from analysis.stats import profile_statistics
from analysis.stats.profiles import auc_np, best_layer_np, first_crossing_np

#: The stored metric -> the probe result's per-seed variable (accuracy: see the module).
METRICS = {"accuracy": "accuracy", "baseline": "baseline", "control": "control_accuracy",
           "selectivity": "selectivity"}


def pooled_counts(ds: xr.Dataset) -> tuple[xr.DataArray, xr.DataArray]:
    """Correct and labelled per (run, length, layer, sequence), pooled over positions; positions
    that were never scored (``n_test`` 0) count in neither."""
    correct, labelled = ds["correct"].astype("float64"), ds["labelled"].astype("float64")
    if "n_test" in ds:
        scored = ds["n_test"].sum("fold") > 0 if "fold" in ds["n_test"].dims else ds["n_test"] > 0
        labelled = labelled.where(scored, 0.0)
        correct = correct.where(scored, 0.0)
    if "position" in correct.dims:
        correct, labelled = correct.sum("position"), labelled.sum("position")
    labelled = labelled.broadcast_like(correct)
    # sequences without any labelled row are padding (NaN), not zero-accuracy sequences
    return correct.where(labelled > 0), labelled.where(labelled > 0)


def seed_level(per_run: xr.DataArray, store) -> pd.DataFrame:
    """Per-run values (run, ...) -> seed-level t interval per (task, arch, variant, ...)."""
    res = seed_t_interval(by_factors(per_run, store))
    frame = res.to_dataframe().reset_index()
    frame["method"] = res.attrs["method"]
    return frame[np.isfinite(frame["estimate"])].reset_index(drop=True)


def has_counts(ds: xr.Dataset) -> bool:
    """Whether the accuracy interval bootstraps per-sequence counts (else per-seed means)."""
    return "correct" in ds and "labelled" in ds


def probe_interval_frames(ds: xr.Dataset, store) -> dict[str, pd.DataFrame]:
    """The interval rows of every metric of :data:`METRICS` ``ds`` holds (see the module)."""
    over = [d for d in ("fold", "position") if d in ds["accuracy"].dims]
    out = {}
    if has_counts(ds):
        out["accuracy"] = group_intervals(*pooled_counts(ds), store)
    else:
        out["accuracy"] = seed_level(ds["accuracy"].mean(over), store)
    for short, var in METRICS.items():
        if short != "accuracy" and var in ds:
            out[short] = seed_level(ds[var].mean([d for d in over if d in ds[var].dims]), store)
    return out


def add_probe_intervals(ds: xr.Dataset, store) -> xr.Dataset:
    """``ds`` (a probe result) with :func:`probe_interval_frames` stored as
    ``<metric>_estimate/_lower/_upper/_n_seeds/_method`` over ``(cell, length, layer)``,
    coords ``cell_task``, ``cell_arch``, ``cell_variant``; attrs ``interval_metrics`` and
    ``ci_level``. A result without ``accuracy`` is returned as it is."""
    if "accuracy" not in ds or "run" not in ds.dims:
        return ds
    frames = probe_interval_frames(ds, store)
    summary = profile_summary(ds, store)
    cells = sorted(frame_cells([*frames.values(), summary] if len(summary) else frames.values()))
    index = {c: i for i, c in enumerate(cells)}
    new = {}
    for metric, frame in frames.items():
        what = ("sum(correct) / sum(labelled), pooled over positions" if metric == "accuracy" and has_counts(ds)
                else f"mean of {METRICS[metric]} over folds and positions, per seed")
        new.update(frame_variables(ds, metric, frame, index, {"what": what}))
    out = ds.assign(new)
    if len(summary):
        out = out.assign(summary_variables(ds, summary, index))
        out = out.assign_coords(profile_seed=sorted({s for seeds in summary["seeds"] for s in seeds}))
    out = with_cells(out, cells)
    out.attrs.update(interval_metrics=[*frames, *(SUMMARY if len(summary) else ())], ci_level=CI_LEVEL)
    if len(summary):
        out.attrs.update(profile_threshold=THRESHOLD, profile_boot=PROFILE_BOOT, profile_boot_seed=PROFILE_SEED)
    return out


def summary_variables(ds: xr.Dataset, summary: pd.DataFrame, index: dict[tuple[str, str, str], int]) -> dict:
    """:func:`profile_summary`'s rows as variables over (cell, length) and, per seed, over
    (cell, length, profile_seed)."""
    lengths = pd.Index(ds["length"].values)
    seeds = sorted({s for each in summary["seeds"] for s in each})
    shape = (len(index), len(lengths))
    values = {f"{n}_{p}": np.full(shape, np.nan) for n in SUMMARY for p in ("estimate", "lower", "upper")}
    n_seeds = np.zeros(shape, dtype=np.int64)
    chance = np.full(shape, np.nan)
    layers = np.full(shape, "", dtype=object)
    per_seed = {n: np.full((*shape, len(seeds)), np.nan) for n in ("best_layer", "first_crossing")}
    used = np.zeros((*shape, len(seeds)), dtype=bool)
    for r in summary.itertuples(index=False):
        at = (index[(str(r.task), str(r.arch), str(r.variant))], lengths.get_loc(r.length))
        for n in SUMMARY:
            for part, suffix in (("estimate", ""), ("lower", "_lower"), ("upper", "_upper")):
                values[f"{n}_{part}"][at] = getattr(r, n + suffix)
        n_seeds[at], chance[at], layers[at] = r.n_seeds, r.chance, r.layer_labels
        where = [seeds.index(s) for s in r.seeds]
        used[(*at, where)] = True
        for n in per_seed:
            per_seed[n][(*at, where)] = getattr(r, f"{n}_seeds")
    dims, seed_dims = ("cell", "length"), ("cell", "length", "profile_seed")
    out = {k: xr.Variable(dims, v) for k, v in values.items()}
    out["best_layer_estimate"].attrs["what"] = "position along profile_layers; bootstrap over seeds"
    out["first_crossing_estimate"].attrs["what"] = (f"first position along profile_layers reaching {THRESHOLD:g} "
                                                    "(NaN = never); bootstrap over seeds")
    out["auc_estimate"].attrs["what"] = "normalised area under the profile above auc_chance; seed-level t"
    out.update(profile_n_seeds=xr.Variable(dims, n_seeds), auc_chance=xr.Variable(dims, chance),
               profile_layers=xr.Variable(dims, layers.astype(str)),
               best_layer_per_seed=xr.Variable(seed_dims, per_seed["best_layer"]),
               first_crossing_per_seed=xr.Variable(seed_dims, per_seed["first_crossing"]),
               profile_seed_used=xr.Variable(seed_dims, used))
    return out


def stored_profile_summary(ds: xr.Dataset) -> pd.DataFrame | None:
    """The stored :func:`profile_summary` (same rows, in the same order), or None when ``ds``
    does not hold it."""
    if "profile_n_seeds" not in ds:
        return None
    rows = []
    seeds = [int(s) for s in ds["profile_seed"].values]
    for i in range(ds.sizes["cell"]):
        for j, length in enumerate(ds["length"].values):
            n = int(ds["profile_n_seeds"].values[i, j])
            if n == 0:
                continue
            used = np.flatnonzero(ds["profile_seed_used"].values[i, j])
            row = {"task": str(ds["cell_task"].values[i]), "arch": str(ds["cell_arch"].values[i]),
                   "variant": str(ds["cell_variant"].values[i]), "length": int(length), "n_seeds": n,
                   "chance": float(ds["auc_chance"].values[i, j]), "layer_labels": str(ds["profile_layers"].values[i, j])}
            for name in SUMMARY:
                for part, suffix in (("estimate", ""), ("lower", "_lower"), ("upper", "_upper")):
                    row[name + suffix] = float(ds[f"{name}_{part}"].values[i, j])
            row["seeds"] = [seeds[k] for k in used]
            for name in ("best_layer", "first_crossing"):
                row[f"{name}_seeds"] = [float(v) for v in ds[f"{name}_per_seed"].values[i, j, used]]
            rows.append(row)
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def stored_probe_intervals(ds: xr.Dataset, metric: str) -> pd.DataFrame | None:
    """The stored intervals of ``metric`` as :func:`probe_interval_frames` computes them (the
    same rows; columns task, arch, variant, length, layer, estimate, lower, upper, n_seeds,
    method, and ``ci_level`` where the accuracy bootstraps counts), or None when ``ds`` does
    not hold them."""
    frame = stored_intervals(ds, metric)
    if frame is None:
        return None
    if not (metric == "accuracy" and has_counts(ds)):
        frame = frame.drop(columns="ci_level")
    return frame


# ---------------------------------------------------------------------- where the state becomes readable
#: Accuracy a profile's first crossing looks for (the report's "first layer reaching 90%").
THRESHOLD = 0.9
#: Bootstrap draws (over seeds) of the profile statistics, and their seed.
PROFILE_BOOT, PROFILE_SEED = 1000, 0
SUMMARY = ("best_layer", "first_crossing", "auc")
#: The columns of :func:`profile_summary`, in order.
SUMMARY_COLUMNS = ["task", "arch", "variant", "length", "n_seeds", "chance", "layer_labels",
                   *(n + s for n in SUMMARY for s in ("", "_lower", "_upper")),
                   "seeds", "best_layer_seeds", "first_crossing_seeds"]


def per_seed_profiles(ds: xr.Dataset, store, var: str = "accuracy") -> xr.DataArray:
    """Per-seed profile, dims (length, layer, task, arch, variant, seed): the same estimator
    as the intervals (pooled counts where stored, else the fold-and-position mean)."""
    if var == "accuracy" and has_counts(ds):
        num, den = pooled_counts(ds)
        per_run = num.sum("sequence") / den.sum("sequence")
    else:
        per_run = ds[var].mean([d for d in ("fold", "position") if d in ds[var].dims])
    return by_factors(per_run.drop_vars([c for c in per_run.coords if c not in per_run.dims]), store)


def profile_summary(ds: xr.Dataset, store, *, threshold: float = THRESHOLD) -> pd.DataFrame:
    """Best layer, first crossing of ``threshold`` and AUC, one row per (task, arch, variant,
    length) with seeds; the AUC's chance level is the cell's mean majority baseline.

    :func:`analysis.stats.profile_statistics` on the per-seed profiles (layers a run does not
    have are dropped; intervals: a bootstrap over seeds for the layers, seed-level t for the
    AUC); cells with one seed get the point values and no interval. Columns task, arch,
    variant, length, n_seeds, chance, layer_labels (the layers kept, space-separated), the
    three statistics with ``_lower`` and ``_upper`` (positions along the kept layers for the
    layer statistics), and ``seeds`` (the seeds, in order) with each seed's ``best_layer_seeds``
    and ``first_crossing_seeds`` (lists; NaN = never).
    """
    acc = per_seed_profiles(ds, store)
    base = per_seed_profiles(ds, store, "baseline") if "baseline" in ds else None
    rows = []
    cells = acc.stack(_cell=["task", "arch", "variant", "length"])
    for k in range(cells.sizes["_cell"]):
        cell = cells.isel(_cell=k)
        task, arch, variant, length = (cell["_cell"].values.item())
        prof = cell.transpose("seed", "layer")
        prof = prof.isel(seed=np.flatnonzero(prof.notnull().any("layer").values))
        prof = prof.isel(layer=np.flatnonzero(prof.notnull().all("seed").values))
        if prof.sizes["seed"] == 0 or prof.sizes["layer"] == 0:
            continue
        chance = 0.0
        if base is not None:
            b = float(base.sel(task=task, arch=arch, variant=variant, length=length).mean())
            chance = min(b, 0.99) if np.isfinite(b) else 0.0
        labels = [str(v) for v in prof["layer"].values]
        row = {"task": task, "arch": arch, "variant": variant, "length": int(length),
               "n_seeds": int(prof.sizes["seed"]), "chance": chance, "layer_labels": " ".join(labels)}
        if prof.sizes["seed"] >= 2:
            st = profile_statistics(prof, rng=PROFILE_SEED, threshold=threshold, chance=chance, n_boot=PROFILE_BOOT)
            for name in SUMMARY:
                for suffix in ("", "_lower", "_upper"):
                    row[name + suffix] = float(st[name + suffix])
        else:
            mean = prof.mean("seed").values
            row.update(best_layer=float(best_layer_np(mean)), first_crossing=float(first_crossing_np(mean, threshold)),
                       auc=float(auc_np(mean, chance)))
            for name in SUMMARY:
                row[name + "_lower"] = row[name + "_upper"] = np.nan
        per_seed = prof.values
        row["seeds"] = [int(s) for s in prof["seed"].values]
        row["best_layer_seeds"] = [float(v) for v in best_layer_np(per_seed)]
        row["first_crossing_seeds"] = [float(v) for v in first_crossing_np(per_seed, threshold)]
        rows.append(row)
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
