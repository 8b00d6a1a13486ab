"""Behaviour: how often each model's own readout is right, per sequence, from the store.

Accuracy is computed from the stored ``logits`` against the target label on labelled
positions, and kept **per sequence** (correct and labelled counts) so that intervals resample
sequences within seeds, never positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import xarray as xr

from store import MissingError, Store
from store.lengths import require_target

FACTORS = ("task", "arch", "variant", "seed")


def sequence_correctness(
    store: Store, runs: Sequence[str] | None = None, lengths: Sequence[int] | None = None,
    target: str | None = None,
) -> xr.Dataset:
    """Per-sequence counts of correct and labelled target positions.

    Parameters
    ----------
    store
        A store with captured lengths (``layerstate capture``).
    runs
        Run ids (default: every run with captured lengths).
    lengths
        Lengths (default: every length captured for all selected runs).
    target
        The label the readout predicts (default: each group's declared target, or its only
        label; a group with several labels and none declared asks for this).

    Returns
    -------
    xarray.Dataset
        Dims (run, length, sequence): ``correct`` and ``labelled`` (int); coords ``task``,
        ``arch``, ``variant``, ``seed`` along ``run``. Missing (run, length) cells are NaN.
    """
    runs = list(runs) if runs is not None else [r for r in store.run_ids() if store.lengths(r)]
    if not runs:
        raise MissingError(
            f"no run in {store.location} has captured activations; run `layerstate capture` first"
        )
    if lengths is None:
        common = set.intersection(*(set(store.lengths(r)) for r in runs))
        lengths = sorted(common)
    n_seq = 0
    cells: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
    for rid in runs:
        for L in lengths:
            ds = store.open_length(rid, L)
            if "logits" not in ds:
                raise MissingError(f"run {rid!r} length {L} has no stored logits; re-capture it")
            label = target or require_target(ds, f"run {rid!r} length {L}")
            if label not in ds.attrs["labels"]:
                raise MissingError(
                    f"label {label!r} does not exist in run {rid!r} length {L}; labels there: "
                    f"{', '.join(ds.attrs['labels'])} (pass target=... with one of them)"
                )
            pred = ds.logits.astype("float32").argmax("class")
            lab = ds[label]
            hit = ((pred == lab) & ds.mask).sum("position")
            lab_n = ds.mask.sum("position")
            c, n = store.compute(xr.Dataset({"c": hit, "n": lab_n})).values()
            cells[(rid, L)] = (c.values, n.values)
            n_seq = max(n_seq, c.size)
    correct = np.full((len(runs), len(lengths), n_seq), np.nan)
    labelled = np.full_like(correct, np.nan)
    for (rid, L), (c, n) in cells.items():
        i, j = runs.index(rid), list(lengths).index(L)
        correct[i, j, : c.size] = c
        labelled[i, j, : n.size] = n
    coords = {
        "run": runs,
        "length": list(lengths),
        "sequence": np.arange(n_seq),
        **factor_coords(store, runs),
    }
    dims = ("run", "length", "sequence")
    return xr.Dataset(
        {"correct": (dims, correct), "labelled": (dims, labelled)},
        coords=coords,
        attrs={"metric": "accuracy of the model's own readout on labelled target positions"},
    )


def factor_coords(store: Store, runs: Sequence[str]) -> dict[str, tuple[str, list]]:
    """``task``, ``arch``, ``variant``, ``seed`` of each run (from its attributes), as
    coordinates along ``run``."""
    attrs = [store.run_attrs(str(r)) for r in runs]
    return {f: ("run", [a.get(f) for a in attrs]) for f in FACTORS}


XrObj = TypeVar("XrObj", xr.Dataset, xr.DataArray)


def by_factors(obj: XrObj, store: Store | None = None) -> XrObj:
    """Turn the ``run`` dim into ``task, arch, variant, seed`` dims (missing combinations NaN).

    The one place a run becomes its factors: factor coordinates already along ``run`` are
    used, the others come from ``store``'s run attributes. Seeds become ints.
    """
    if "run" not in obj.dims:
        return obj
    missing = [f for f in FACTORS if f not in obj.coords or obj[f].dims != ("run",)]
    if missing:
        if store is None:
            raise ValueError(f"by_factors needs the store for the runs' {', '.join(missing)}")
        coords = factor_coords(store, [str(r) for r in obj["run"].values])
        obj = obj.assign_coords({f: coords[f] for f in missing})
    obj = obj.assign_coords(seed=("run", [int(s) for s in obj["seed"].values]))
    return obj.set_index(run=list(FACTORS)).unstack("run")


def accuracy_intervals(
    correctness: xr.Dataset, *, ci_level: float = 0.95, rng: int | np.random.Generator = 0
) -> xr.Dataset:
    """Accuracy with an interval per task x arch x variant x length.

    Seeds are the top level (seed-level t interval by default, calibrated with few seeds,
    see :func:`analysis.stats.hierarchical_bootstrap`); with one seed the interval
    resamples sequences only (percentile bootstrap) and says so in ``attrs``.
    """
    from analysis.stats import hierarchical_bootstrap

    factored = by_factors(correctness)
    n_seeds = factored.sizes["seed"]
    method = "t" if n_seeds >= 2 else "percentile"
    res = hierarchical_bootstrap(
        factored.correct, factored.labelled, rng=rng, method=method, ci_level=ci_level,
    )
    out = res.interval
    out.attrs.update(
        metric="accuracy",
        note="one seed: the interval covers sequence sampling only, not training variability"
        if n_seeds < 2 else "seeds are the top level; sequences nested in seeds",
    )
    return out
