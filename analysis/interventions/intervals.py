"""Seed-level intervals of the intervention results, stored beside the per-sequence counts.

Every ratio-of-sums metric an intervention result carries (an ablation's accuracy drop, a
patch's recovery, an interchange's restoration, ...) gets one interval per (task, arch,
variant) and cell, each (task, arch, variant) on its own seeds
(:func:`analysis.intervals.group_intervals`). :func:`add_intervals` stores them in the result
as ``<metric>_estimate``, ``_lower``, ``_upper``, ``_n_seeds`` and ``_method`` over ``(cell,
<the metric's dims>)``, a cell being one (``cell_task``, ``cell_arch``, ``cell_variant``) as
in the behaviour result; the report reads them back with
:func:`analysis.intervals.stored_intervals` and computes nothing of its own. The matched
controls' paired comparison of an ablation is stored the same way (:func:`matched_grid`,
read back by :func:`stored_matched`).

Which metrics each kind of result gets is :data:`METRICS`: (metric, numerator, denominator,
runs), where ``numerator`` may be ``"a-b"`` (a difference of two variables) and ``runs`` is
``"all"`` or ``"moved"`` (runs whose corruption moves the clean answer, :func:`flat_runs`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from analysis.compute import compute
from analysis.intervals import (
    BOOTSTRAP_SEED,
    CI_LEVEL,
    frame_cells,
    frame_variables,
    group_intervals,
    with_cells,
)
from analysis.interventions.engine import run_and_store
from analysis.interventions.matched import matched_comparison
from analysis.interventions.twins import MIN_GAP
from store import Store, schema

#: kind -> (metric, numerator, denominator, runs) of every interval the result stores.
METRICS: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "ablation": (
        ("drop", "correct_clean-correct", "n_labelled", "all"),
        ("accuracy", "correct", "n_labelled", "all"),
        ("residual", "probe_correct", "n_labelled", "all"),
        ("residual_clean", "probe_correct_clean", "n_labelled", "all"),
    ),
    "patching": (
        ("recovery", "recovered", "gap", "all"),
        ("damage", "damaged", "gap", "all"),
        ("recovery_prob", "recovered_prob", "gap_prob", "all"),
        ("damage_prob", "damaged_prob", "gap_prob", "all"),
        ("recovery_subspace", "recovered_subspace", "gap", "all"),
    ),
    "interchange": (
        ("restoration", "restored", "gap", "moved"),
        ("restoration_all", "restored", "gap", "all"),
        ("damage", "damaged", "gap", "all"),
        ("restoration_logit", "restored_logit", "gap_logit", "all"),
        ("damage_logit", "damaged_logit", "gap_logit", "all"),
    ),
}


# ---------------------------------------------------------------------- computing
def flat_runs(ds: xr.Dataset, min_gap: float = MIN_GAP) -> list[str]:
    """Runs whose corruption barely moves the clean answer's probability (mean ``p_clean -
    p_corrupt`` below ``min_gap``): a restoration there is a ratio over a ~0 gap, noise that
    can read 3 or -7, so restoration intervals, claims and mechanism labels leave them out."""
    if "p_clean" not in ds or "p_corrupt" not in ds:
        return []
    gap = (ds["p_clean"] - ds["p_corrupt"]).mean([d for d in ("layer", "sequence") if d in ds["p_clean"].dims])
    return [str(r) for r, g in zip(ds["run"].values, gap.values, strict=True) if not g >= min_gap]


def _operands(ds: xr.Dataset, numerator: str, denominator: str) -> tuple[xr.DataArray, xr.DataArray] | None:
    names = numerator.split("-")
    if any(n not in ds for n in (*names, denominator)):
        return None
    num = ds[names[0]] if len(names) == 1 else ds[names[0]] - ds[names[1]]
    den = ds[denominator]
    return num, (den.astype(float) if denominator == "n_labelled" else den)


def metric_intervals(ds: xr.Dataset, kind: str, store, *, only: Collection[str] | None = None,
                     ci_level: float = CI_LEVEL, rng: int = BOOTSTRAP_SEED) -> dict[str, pd.DataFrame]:
    """:func:`analysis.intervals.group_intervals` of every metric of :data:`METRICS` ``[kind]``
    (or of ``only``) that ``ds`` holds the variables of (metric -> rows; a metric whose runs are
    all left out is absent)."""
    out: dict[str, pd.DataFrame] = {}
    flat = flat_runs(ds) if kind == "interchange" else []
    for metric, numerator, denominator, which in METRICS[kind]:
        if only is not None and metric not in only:
            continue
        sub = ds.drop_sel(run=flat) if which == "moved" and flat else ds
        if not sub.sizes["run"]:
            continue
        operands = _operands(sub, numerator, denominator)
        if operands is not None:
            out[metric] = group_intervals(*operands, store, ci_level=ci_level, rng=rng)
    return out


# ---------------------------------------------------------------------- storing and reading
def add_intervals(ds: xr.Dataset, kind: str, store, *, ci_level: float = CI_LEVEL,
                  rng: int = BOOTSTRAP_SEED) -> xr.Dataset:
    """``ds`` with the seed-level interval of every metric of :data:`METRICS` ``[kind]`` it
    holds, as ``<metric>_estimate/_lower/_upper`` (float), ``_n_seeds`` (int, 0 where the
    cell has no estimate) and ``_method`` (str) over ``(cell, <metric dims>)``; coords
    ``cell_task``, ``cell_arch``, ``cell_variant`` along ``cell``. Each ``_estimate``'s attrs
    say what it is (``numerator``, ``denominator``, ``runs``); the Dataset's attrs
    ``interval_metrics``, ``ci_level``, ``bootstrap_seed``."""
    frames = metric_intervals(ds, kind, store, ci_level=ci_level, rng=rng)
    matched = matched_grid(ds, store, ci_level=ci_level) if kind == "ablation" else None
    cells = sorted(frame_cells(frames.values())
                   | ({(str(t), str(a), str(v)) for t, a, v in matched.indexes["cell"]} if matched is not None
                      else set()))
    index = {c: i for i, c in enumerate(cells)}
    spec = {m: (n, d, w) for m, n, d, w in METRICS[kind]}
    new: dict[str, Any] = {}
    for metric, frame in frames.items():
        numerator, denominator, which = spec[metric]
        new.update(frame_variables(ds, metric, frame, index, {
            "numerator": numerator.replace("-", " - "), "denominator": denominator,
            "runs": "runs whose corruption moves the clean answer (mean p_clean - p_corrupt >= "
                    f"{MIN_GAP:g})" if which == "moved" else "every run",
        }))
    if matched is not None:
        matched_rows = np.array([index[(str(t), str(a), str(v))] for t, a, v in matched.indexes["cell"]], dtype=int)
        for name in MATCHED:
            var = matched[name]
            flag = name == "flagged"
            values = np.full((len(cells), *var.shape[1:]), False if flag else np.nan, dtype=bool if flag else float)
            values[matched_rows] = var.values
            new[f"matched_{name}"] = xr.Variable(var.dims, values)
        new["matched_estimate"].attrs.update(
            method=matched.attrs["method"], n_seeds=int(matched.attrs["n_seeds"]),
            what="drop(S) - drop(matched:S) per seed, S along matched_setting (paired t over seeds, "
                 "analysis.interventions.matched_comparison)")
    out = ds.assign(new)
    if matched is not None:
        out = out.assign_coords(matched_setting=matched["matched_setting"].values)
    out = with_cells(out, cells)
    out.attrs.update(interval_metrics=[*frames, *(["matched"] if matched is not None else [])], ci_level=ci_level, bootstrap_seed=rng,
                     interval_method="seed-level t across seeds (2 or more seeds); percentile bootstrap over "
                                     "sequences (one seed: sequence sampling only)")
    return out


def store_with_intervals(store: Store, kind: str, name: str, build: Callable[[Sequence[str] | None], xr.Dataset],
                         runs: Sequence[str] | None, *, scheduler: Any = "threads", num_workers: int | None = None,
                         attrs: Mapping[str, Any] | None = None, extend: bool = False,
                         finish: Callable[[xr.Dataset], xr.Dataset] | None = None) -> xr.Dataset:
    """The ``run_<kind>`` of an intervention: build it lazily for ``runs`` (``build(runs)``, its
    other parameters bound by the caller), compute it on ``scheduler`` (``"threads"``,
    ``"sync"``, ``"local:N"``, an address, a ``Client`` or a cluster) with ``num_workers``
    (`analysis.compute.compute`), ``finish`` it, add its seed-level intervals
    (:func:`add_intervals`) and store it as ``results/<kind>/<name>`` of ``store`` (opened with
    ``mode="r+"``), ``attrs`` added to its attributes.

    ``extend=True`` says the stored result answers these parameters for the runs it holds (the
    caller checked: `layerstate run` when a design's stage adds seeds): only the ``runs`` it
    lacks are computed, and their rows join the stored ones before the intervals are computed
    again over all (:func:`extended`); a stored result that cannot be joined (other runs, other
    lengths, layers or sequences) is computed again whole."""
    result = schema.result_name(kind, name)

    def complete(done: xr.Dataset) -> xr.Dataset:
        return add_intervals(done if finish is None else finish(done), kind, store)

    if extend and runs is not None and result in store.results():
        joined = extended(store, result, build, runs, scheduler, num_workers)
        if joined is not None:
            done = complete(joined)
            done.attrs.update(attrs or {})
            store.write_result(result, done)
            return done
    return run_and_store(store, result, build(runs), scheduler=scheduler, num_workers=num_workers,
                         attrs=attrs, finish=complete)


#: A stored result's attribute: how many of its runs' rows an extension reused (:func:`extended`).
REUSED = "reused_runs"


def extended(store: Store, result: str, build: Callable[[Sequence[str] | None], xr.Dataset], runs: Sequence[str],
             scheduler: Any, num_workers: int | None) -> xr.Dataset | None:
    """The per-run rows of ``runs``: those the stored ``result`` holds read back, the others
    computed (``build`` on them alone), in the order of ``runs``; before
    :func:`add_intervals` and any ``finish``, which the caller applies to the whole. None when
    the stored rows cannot stand for a computation of them all: it holds runs not asked for or
    none of them, or the new rows' other dimensions (lengths, layers, settings, sequences) or
    run-free variables differ from the stored ones.

    Sound because every per-run row is computed from that run alone (its directions, refits and
    random controls are seeded by layer and setting, never by the run's place in the list), so a
    run's rows are the same whichever runs are computed with it; a test holds the joined result
    equal to one computed whole."""
    runs = [str(r) for r in runs]
    old = store.read_result(result).load()  # in memory: the stored result is about to be replaced
    held = {str(r) for r in old["run"].values} if "run" in old.dims else set()
    new = [r for r in runs if r not in held]
    if not held or not held <= set(runs) or not new:
        return None
    lazy = build(new)
    if not _joinable(lazy, old):  # said before anything is computed
        return None
    (part,) = compute([lazy], scheduler, num_workers)
    if not _joinable(part, old, values=True):
        return None
    kept = old[list(part.data_vars)]
    kept = kept.drop_vars([c for c in kept.coords if c not in part.coords])
    kept = kept.sel(run=[r for r in runs if r in held])
    joined = xr.concat([kept, part], dim="run", data_vars="minimal", coords="minimal", compat="override",
                       join="exact")
    joined = joined.sel(run=runs)
    joined.attrs = {**part.attrs, REUSED: len(held)}
    return joined


#: Attributes that say when, how and where a result was made, not what it holds: the others
#: (fit length, mode, folds, seeds, metrics...) must agree for stored rows to join new ones.
PROVENANCE = ("created", "command", "tool_version", "device", "pipeline_request", "interval_metrics", "ci_level",
              "bootstrap_seed", "interval_method", REUSED)


def _joinable(part: xr.Dataset, old: xr.Dataset, *, values: bool = False) -> bool:
    """Whether ``part``'s rows (new runs) can join ``old``'s: the same variables, the same
    other dimensions, the same attributes but provenance; with ``values`` (``part`` computed)
    also the same run-free variables, value for value."""
    names = [*part.data_vars, *part.coords]
    if any(n not in old.variables for n in names) or any(
            part.sizes[d] != old.sizes.get(d) for d in part.dims if d != "run"):
        return False
    shared = (set(part.attrs) & set(old.attrs)) - set(PROVENANCE)
    if any(str(part.attrs[k]) != str(old.attrs[k]) for k in shared):
        return False
    names = [n for n in names if "run" not in part[n].dims]
    return not values or all(_same(part[n], old[n]) for n in names)


def _same(a: xr.DataArray, b: xr.DataArray) -> bool:
    """Two run-free variables equal, value for value (NaN equal to NaN), dims and all."""
    if a.dims != b.dims or a.shape != b.shape:
        return False
    x, y = np.asarray(a.values), np.asarray(b.values)
    if x.dtype.kind in "fc" and y.dtype.kind in "fc":
        return bool(np.array_equal(x, y, equal_nan=True))
    return [str(v) for v in x.ravel().tolist()] == [str(v) for v in y.ravel().tolist()]


_CELL = ("cell_task", "cell_arch", "cell_variant")
#: The variables of :func:`analysis.interventions.matched_comparison` an ablation result stores
#: as ``matched_<name>``.
MATCHED = ("estimate", "lower", "upper", "statistic", "p", "sd", "setting_drop", "matched_drop",
           "variance_removed", "flagged")


def matched_grid(ds: xr.Dataset, store, *, ci_level: float = CI_LEVEL) -> xr.Dataset | None:
    """:func:`analysis.interventions.matched_comparison` of every setting S with a
    ``matched:S`` control, at every length, with (task, arch, variant) stacked into ``cell``
    and S along ``matched_setting``; None without matched controls or with one seed."""
    if "setting" not in ds.dims or "variance_removed" not in ds:
        return None
    names = [str(v) for v in ds["setting"].values]
    if not any(f"matched:{s}" in names for s in names):
        return None
    try:
        test = matched_comparison(ds, store=store, ci_level=ci_level)
    except ValueError:
        return None  # one seed per model: no paired test
    test = test.reindex({d: ds[d].values for d in ("length", "layer") if d in test.dims})
    test = test.rename(setting="matched_setting").stack(cell=["task", "arch", "variant"])
    keep = test["setting_drop"].notnull().any([d for d in test["setting_drop"].dims if d != "cell"])
    test = test.isel(cell=np.flatnonzero(keep.values))
    test = test.transpose("cell", *[d for d in test[MATCHED[0]].dims if d != "cell"])
    return test


def stored_matched(ds: xr.Dataset, length: int) -> xr.Dataset | None:
    """The stored matched comparison at ``length`` in the layout of
    :func:`analysis.interventions.matched_comparison` (dims layer, setting, task, arch,
    variant), or None when ``ds`` does not hold it."""
    if "matched_estimate" not in ds:
        return None
    part = ds[[f"matched_{n}" for n in MATCHED]].sel(length=length)
    part = part.drop_vars([c for c in part.coords if c not in part.dims and c not in _CELL])
    part = part.rename({f"matched_{n}": n for n in MATCHED}).rename(matched_setting="setting")
    part = part.assign_coords(task=("cell", part["cell_task"].values), arch=("cell", part["cell_arch"].values),
                              variant=("cell", part["cell_variant"].values)).drop_vars(list(_CELL))
    grid = part.set_index(cell=["task", "arch", "variant"]).unstack("cell")
    grid["flagged"] = grid["flagged"].fillna(False).astype(bool)
    grid.attrs = {"method": ds["matched_estimate"].attrs.get("method", ""),
                  "n_seeds": int(ds["matched_estimate"].attrs.get("n_seeds", 0))}
    return grid
