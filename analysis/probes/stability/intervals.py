"""The seed-level intervals and the null's band of a stability result, its name and its saving."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from analysis import registry
from analysis.behaviour import did_not_learn, stored_behaviour
from analysis.intervals import CI_LEVEL, frame_variables, stored_intervals, with_cells
from store import schema

from .maths import complete_seeds, seed_interval


def interval_frame(ds: xr.Dataset, cells: Mapping[tuple[str, str, str], list[str]],
                   failed: Collection[str] = ()) -> pd.DataFrame:
    """Per (task, arch, variant), length and layer: :func:`seed_interval` of the overlap
    profile (``metric`` stability) and the mean null level, over the cell's seeds that learned.

    A seed that did not learn (``failed``: its behaviour at chance) is left out, and the method
    says so: how alike the seeds' subspaces are is a statement about the seeds that hold the
    state. Counted in, one failed seed in six drags the mean overlap of every pair it is in to
    the null's level, and the interval over 4-8 seeds then covers the mean over all seeds
    about half the time (its value depends on whether the few seeds drawn include a failure);
    over the seeds that learned it keeps its level (tests/analysis/probes/test_stability.py)."""
    rows = []
    overlaps = ds["overlap_profile"].transpose("pair", "length", "layer").values
    nulls = ds["null_profile"].transpose("pair", "length", "layer").values
    for (task, arch, variant), seeds in cells.items():
        members = [r for r in seeds if r not in failed]
        left_out = [r for r in seeds if r in failed]
        n = len(members)
        inside, i, j = _pairs_within(ds, members)
        for li, L in enumerate(ds.length.values):
            for ki, layer in enumerate(ds.layer.values):
                M = np.full((n, n), np.nan)
                M[i, j] = M[j, i] = overlaps[inside, li, ki]
                keep = complete_seeds(M)
                est, lo, hi, n_seeds, method = seed_interval(M[np.ix_(keep, keep)])
                if not np.isfinite(est):
                    continue
                if left_out:
                    method += (f"; over the seeds that learned ({len(left_out)} that did not left out: "
                               f"{', '.join(left_out)})")
                rows.append({"task": task, "arch": arch, "variant": variant, "length": int(L),
                             "layer": str(layer), "estimate": est, "lower": lo, "upper": hi,
                             "n_seeds": n_seeds, "method": method,
                             "null": float(np.nanmean(nulls[inside, li, ki])) if inside.size else float("nan")})
    return pd.DataFrame(rows, columns=["task", "arch", "variant", "length", "layer", "estimate", "lower",
                                       "upper", "n_seeds", "method", "null"])


def _pairs_within(ds: xr.Dataset, members: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs of ``ds`` between two of ``members``: their indices along ``pair`` and the two
    seeds' places in ``members``."""
    place = {r: k for k, r in enumerate(members)}
    a = np.array([place.get(str(r), -1) for r in ds.pair_a.values], dtype=np.int64)
    b = np.array([place.get(str(r), -1) for r in ds.pair_b.values], dtype=np.int64)
    inside = np.flatnonzero((a >= 0) & (b >= 0))
    return inside, a[inside], b[inside]


def shuffled_frame(ds: xr.Dataset, cells: Mapping[tuple[str, str, str], list[str]],
                   level: float = 0.95, failed: Collection[str] = ()) -> pd.DataFrame:
    """Per (task, arch, variant), length and layer: the shuffled-label null as a band over label
    permutations -- each permutation's mean over the cell's seed pairs, their mean (``estimate``)
    and central ``level`` (``lower``, ``upper``). The probed label, at a layer that does not
    carry it, is one random labelling too: its overlap falls where one permutation's does, and
    this band, not the permutations' mean, is what it has to clear. Over the seeds that
    learned, as :func:`interval_frame`."""
    rows = []
    for (task, arch, variant), seeds in cells.items():
        members = [r for r in seeds if r not in failed]
        inside = list(_pairs_within(ds, members)[0])
        for L in ds.length.values:
            for layer in ds.layer.values:
                vals = ds["shuffled_profile"].sel(length=L, layer=layer).values[inside]  # (pair, shuffle)
                ok = np.isfinite(vals).all(0)
                if not inside or not ok.any():
                    continue
                means = vals[:, ok].mean(0)
                lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
                rows.append({"task": task, "arch": arch, "variant": variant, "length": int(L), "layer": str(layer),
                             "estimate": float(means.mean()), "lower": float(lo), "upper": float(hi),
                             "n_seeds": len(members),
                             "method": f"central {level:.0%} of {int(ok.sum())} label permutations"})
    return pd.DataFrame(rows, columns=["task", "arch", "variant", "length", "layer", "estimate", "lower", "upper",
                                       "n_seeds", "method"])


def add_stability_intervals(ds: xr.Dataset, failed: Collection[str] = (),
                            checked: str = "") -> xr.Dataset:
    """``ds`` with ``stability_estimate/_lower/_upper/_n_seeds/_method``, ``null_estimate`` and
    (with a shuffled-label null) ``shuffled_estimate/_lower/_upper/_n_seeds/_method`` over
    (cell, length, layer): :func:`interval_frame` stored the way the probes' are, over the seeds
    not in ``failed``. Attrs ``left_out`` (the result's runs left out) and ``learned_from``
    (``checked``: what said which seeds learned)."""
    cells: dict[tuple[str, str, str], list[str]] = {}
    for a, b, t, ar, v in zip(ds.pair_a.values, ds.pair_b.values, ds.cell_of_pair_task.values,
                              ds.cell_of_pair_arch.values, ds.cell_of_pair_variant.values, strict=True):
        members = cells.setdefault((str(t), str(ar), str(v)), [])
        for r in (str(a), str(b)):
            if r not in members:
                members.append(r)
    frame = interval_frame(ds, cells, failed)
    order = sorted(cells)
    index = {c: i for i, c in enumerate(order)}
    new = frame_variables(ds, "stability", frame.drop(columns="null"), index,
                          {"what": "mean overlap over seed pairs; jackknife t over seeds"})
    null = frame.assign(estimate=frame["null"], lower=frame["null"], upper=frame["null"], method="k/d")
    new.update(frame_variables(ds, "null", null.drop(columns="null"), index,
                               {"what": "the random-subspace null, max(k_a, k_b) / d"}))
    metrics = ["stability", "null"]
    if "shuffled_profile" in ds:
        new.update(frame_variables(ds, "shuffled", shuffled_frame(ds, cells, failed=failed), index,
                                   {"what": "the shuffled-label null: per label permutation the mean overlap over "
                                            "seed pairs; its mean and the central 95% of the permutations"}))
        metrics.append("shuffled")
    out = with_cells(ds.assign(new), order)
    runs = {r for members in cells.values() for r in members}
    out.attrs.update(interval_metrics=metrics, ci_level=CI_LEVEL, left_out=sorted(runs & set(failed)),
                     learned_from=checked)
    return out


def agreement_frame(ds: xr.Dataset) -> pd.DataFrame | None:
    """The stored numbers of a saved stability result, one row per (task, arch, variant),
    length and layer: the overlap's interval (``estimate``, ``lower``, ``upper``, ``n_seeds``),
    the random-subspace null (``null``), the shuffled-label null's interval (``shuffled``,
    ``shuffled_lower``, ``shuffled_upper``; NaN in a result stored before it was kept) and
    ``agree``: the overlap's lower bound above both nulls' estimates (False without an interval
    or without the shuffled-label null). Reads; computes no statistic. None without stored
    intervals."""
    frame = stored_intervals(ds, "stability")
    if frame is None:
        return None
    keys = ["task", "arch", "variant", "length", "layer"]
    null = stored_intervals(ds, "null")
    frame = frame.merge(null[[*keys, "estimate"]].rename(columns={"estimate": "null"}), on=keys, how="left") \
        if null is not None else frame.assign(null=np.nan)
    shuffled = stored_intervals(ds, "shuffled")
    if shuffled is not None:
        frame = frame.merge(shuffled[[*keys, "estimate", "lower", "upper"]].rename(
            columns={"estimate": "shuffled", "lower": "shuffled_lower", "upper": "shuffled_upper"}), on=keys, how="left")
    else:
        frame = frame.assign(shuffled=np.nan, shuffled_lower=np.nan, shuffled_upper=np.nan)
    lower = frame["lower"].astype(float)
    frame["agree"] = (lower > frame["null"].astype(float)) & (lower > frame["shuffled_upper"].astype(float))
    order = {str(v): i for i, v in enumerate(ds.layer.values)}
    frame["layer_pos"] = frame["layer"].astype(str).map(order)
    return frame


def result_name(ds: xr.Dataset) -> str:
    """``stability/<name>`` for the probe result ``probes/<name>`` it read."""
    return schema.result_name(registry.STABILITY, str(ds.attrs["probe_result"]).removeprefix(f"{registry.PROBES}/"))


def save_stability(store: Any, ds: xr.Dataset, name: str | None = None) -> str:
    """Write a stability Dataset with its intervals to ``results/<name>`` (default
    :func:`result_name`), over the seeds that learned: those the stored behaviour results say
    did not (:func:`analysis.behaviour.did_not_learn`) are left out of the intervals; returns
    the name."""
    name = name or result_name(ds)
    store.write_result(name, add_stability_intervals(ds, set(did_not_learn(store)), learned_check(store, ds)))
    return name


def learned_check(store: Any, ds: xr.Dataset) -> str:
    """What says which of a stability result's seeds learned: the behaviour results holding its
    runs, or why none can."""
    runs = {str(r) for r in np.concatenate([ds.pair_a.values, ds.pair_b.values])}
    names, covered = [], set()
    for name in stored_behaviour(store):
        held = set(store.result_runs(name) or ())
        if held & runs:
            names.append(name)
            covered |= held
    missing = sorted(runs - covered)
    if not names:
        return "no behaviour result: every seed counted as learned (`layerstate behaviour STORE` tells)"
    return ", ".join(names) + (f" (not covering {', '.join(missing)}: counted as learned)" if missing else "")
