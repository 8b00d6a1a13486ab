"""Behaviour: how often each model's own readout is right, per sequence, from the store.

Accuracy is computed from the stored ``logits`` against the target label on labelled
positions, and kept **per sequence** (correct and labelled counts) so that intervals resample
sequences within seeds, never positions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

import numpy as np
import xarray as xr

from analysis import registry
from analysis.stats import hierarchical_bootstrap
from analysis.stats.ranges import CLIPPED, clip_interval
from store import MissingError, Store
from store.io.lengths import completion, length_group, require_target

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
        Dims (run, length, sequence): ``correct`` and ``labelled``, and ``majority``: the
        labelled positions whose label is the run's most common one at that length (what
        always answering it gets right: chance); coords ``task``, ``arch``, ``variant``,
        ``seed`` along ``run``. Missing (run, length) cells are NaN.
    """
    runs = list(runs) if runs is not None else [r for r in store.run_ids() if store.lengths(r)]
    if not runs:
        raise MissingError(
            f"no run in {store.location} has captured activations; run `layerstate capture` first"
        )
    if lengths is None:
        common = set.intersection(*(set(store.lengths(r)) for r in runs))
        lengths = sorted(common)
    lazy: dict[str, xr.DataArray] = {}
    cells = [(rid, L) for rid in runs for L in lengths]
    for i, (rid, L) in enumerate(cells):
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
        # labelled positions per sequence and class: the majority class, chance for this run
        klass = xr.DataArray(np.arange(ds.sizes["class"]), dims="klass")
        per_class = ((lab == klass) & ds.mask).sum("position").transpose("sequence", "klass")
        # each cell on its own sequence axis (cells may hold different numbers of sequences)
        lazy[f"c{i}"] = xr.DataArray(hit.data, dims=[f"{d}{i}" for d in hit.dims])
        lazy[f"n{i}"] = xr.DataArray(lab_n.data, dims=[f"{d}{i}" for d in lab_n.dims])
        lazy[f"k{i}"] = xr.DataArray(per_class.data, dims=[f"{d}{i}" for d in per_class.dims])
    # one computation for every cell: one pass of the scheduler, the cells read in parallel
    done = store.compute(xr.Dataset(lazy))
    n_seq = max(int(done[f"c{i}"].size) for i in range(len(cells)))
    correct = np.full((len(runs), len(lengths), n_seq), np.nan)
    labelled = np.full_like(correct, np.nan)
    majority = np.full_like(correct, np.nan)
    for k, (rid, L) in enumerate(cells):
        i, j = runs.index(rid), list(lengths).index(L)
        c, n, per = done[f"c{k}"].values, done[f"n{k}"].values, done[f"k{k}"].values
        correct[i, j, : c.size] = c
        labelled[i, j, : n.size] = n
        majority[i, j, : n.size] = per[:, int(np.argmax(per.sum(0)))] if per.size else 0
    coords = {
        "run": runs,
        "length": list(lengths),
        "sequence": np.arange(n_seq),
        **factor_coords(store, runs),
    }
    dims = ("run", "length", "sequence")
    return xr.Dataset(
        {"correct": (dims, correct), "labelled": (dims, labelled), "majority": (dims, majority)},
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
    factored = by_factors(correctness)
    n_seeds = factored.sizes["seed"]
    method = "t" if n_seeds >= 2 else "percentile"
    res = hierarchical_bootstrap(
        factored.correct, factored.labelled, rng=rng, method=method, ci_level=ci_level,
    )
    out = res.interval
    lower, upper, past = clip_interval(out.lower.values, out.upper.values, 0.0, 1.0)  # an accuracy's range
    out["lower"] = out.lower.copy(data=lower)
    out["upper"] = out.upper.copy(data=upper)
    out.attrs.update(
        metric="accuracy",
        note="; ".join(n for n in (
            "one seed: the interval covers sequence sampling only, not training variability"
            if n_seeds < 2 else "seeds are the top level; sequences nested in seeds",
            f"{CLIPPED} to [0, 1]" if np.any(past) else "") if n),
    )
    return out


# ----------------------------------------------------------------------------- the stored result
#: Interval level of the stored behaviour result (and of the report's behaviour table).
CI_LEVEL = 0.95
#: The seed of the percentile bootstrap a one-seed cell's interval draws.
BOOTSTRAP_SEED = 0


def measured_lengths(store: Store, runs: Sequence[str]) -> dict[int, list[str]]:
    """Per length, the runs of ``runs`` whose ``len_<L>`` group is complete and holds logits
    (what behaviour is measured on; a length still being captured is left out)."""
    out: dict[int, list[str]] = {}
    for rid in runs:
        run = store.run_group(str(rid))
        for L in store.lengths(str(rid)):
            grp = length_group(run, str(rid), L)
            if completion(grp.attrs).complete and "logits" in grp:
                out.setdefault(int(L), []).append(str(rid))
    return dict(sorted(out.items()))


def behaviour_result(
    store: Store, runs: Sequence[str] | None = None, *, at: dict[int, list[str]] | None = None,
    target: str | None = None, ci_level: float = CI_LEVEL, rng: int = BOOTSTRAP_SEED,
) -> xr.Dataset:
    """The behaviour of ``runs``, as ``results/behaviour/<task>`` stores it.

    Each length is measured on the runs captured there (``at``: length -> runs; default
    :func:`measured_lengths` of ``runs``, every run with captured lengths when None), and
    each (task, arch, variant) at each length gets its own interval over its own seeds
    (:func:`accuracy_intervals`), so a missing seed or length elsewhere never changes a cell.

    Returns
    -------
    xarray.Dataset
        ``correct``, ``labelled`` (run, length, sequence): per-sequence counts of
        :func:`sequence_correctness` (NaN where a run has no such length or sequence);
        ``accuracy`` (run, length): summed correct over summed labelled; ``chance`` and
        ``run_lower`` (run, length): the run's majority-class share and the lower end of its
        accuracy's interval over resampled sequences (:func:`run_chance`; a run whose lower end
        is at or below chance did not learn, :func:`failed_runs`); ``estimate``,
        ``lower``, ``upper``, ``n_seeds`` (int), ``method`` and ``note`` (str) over
        (cell, length), a cell being one (``cell_task``, ``cell_arch``, ``cell_variant``):
        the seed-level interval (NaN, 0 and '' where the cell has no runs at that length).
        Coords ``task, arch, variant, seed`` along ``run``. Attrs ``analysis``, ``metric``,
        ``ci_level``, ``method`` (both rules), ``bootstrap_seed``, ``target`` (when given).
    """
    if at is None:
        if runs is None:
            runs = [r for r in store.run_ids() if store.lengths(r)]
        at = measured_lengths(store, runs)
    at = {int(L): list(rs) for L, rs in sorted(at.items()) if rs}
    if not at:
        raise MissingError(
            f"no run in {store.location} has a complete captured length with logits; run "
            "`layerstate capture` first"
        )
    order = {r: i for i, r in enumerate(store.run_ids())}
    all_runs = sorted({r for rs in at.values() for r in rs}, key=lambda r: order.get(r, len(order)))
    lengths = list(at)
    counts: dict[int, xr.Dataset] = {}
    rows: dict[tuple[str, str, str], dict[int, dict]] = {}
    for L, rs in at.items():
        corr = sequence_correctness(store, rs, [L], target=target)
        counts[L] = corr
        table = corr[["task", "arch", "variant"]].to_dataframe().reset_index()
        for (task, arch, variant), grp in table.groupby(["task", "arch", "variant"]):
            sub = corr.sel(run=grp["run"].tolist())
            acc = accuracy_intervals(sub, ci_level=ci_level, rng=rng)
            one = acc.isel({d: 0 for d in acc.dims})
            rows.setdefault((str(task), str(arch), str(variant)), {})[L] = {
                "estimate": float(one.estimate), "lower": float(one.lower), "upper": float(one.upper),
                "n_seeds": sub.sizes["run"], "method": str(acc.attrs.get("method", "")),
                "note": str(acc.attrs.get("note", "")),
            }
    n_seq = max(c.sizes["sequence"] for c in counts.values())
    correct = np.full((len(all_runs), len(lengths), n_seq), np.nan)
    labelled = np.full_like(correct, np.nan)
    majority = np.full_like(correct, np.nan)
    for j, (L, corr) in enumerate(counts.items()):
        idx = [all_runs.index(str(r)) for r in corr.run.values]
        n = corr.sizes["sequence"]
        correct[idx, j, :n] = corr.correct.sel(length=L).values
        labelled[idx, j, :n] = corr.labelled.sel(length=L).values
        majority[idx, j, :n] = corr.majority.sel(length=L).values
    chance, run_lower = run_chance(correct, labelled, majority, ci_level=ci_level, rng=rng)
    cells = sorted(rows)
    est, lo, hi = (np.full((len(cells), len(lengths)), np.nan) for _ in range(3))
    n_seeds = np.zeros((len(cells), len(lengths)), dtype=np.int64)
    method = np.full((len(cells), len(lengths)), "", dtype=object)
    note = np.full((len(cells), len(lengths)), "", dtype=object)
    for i, cell in enumerate(cells):
        for j, L in enumerate(lengths):
            r = rows[cell].get(L)
            if r is None:
                continue
            est[i, j], lo[i, j], hi[i, j], n_seeds[i, j] = r["estimate"], r["lower"], r["upper"], r["n_seeds"]
            method[i, j], note[i, j] = r["method"], r["note"]
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.nansum(correct, -1) / np.nansum(labelled, -1)
    accuracy[np.isnan(labelled).all(-1)] = np.nan
    run_dims, cell_dims = ("run", "length", "sequence"), ("cell", "length")
    attrs = {
        "analysis": "behaviour",
        "metric": "accuracy of the model's own readout on labelled target positions",
        "ci_level": ci_level,
        "method": "seed-level t across seeds (2 or more seeds); percentile bootstrap over sequences "
                  "(one seed: sequence sampling only)",
        "bootstrap_seed": rng,
    }
    if target is not None:
        attrs["target"] = target
    return xr.Dataset(
        {
            "correct": (run_dims, correct), "labelled": (run_dims, labelled), "majority": (run_dims, majority),
            "accuracy": (("run", "length"), accuracy), "chance": (("run", "length"), chance),
            "run_lower": (("run", "length"), run_lower),
            "estimate": (cell_dims, est), "lower": (cell_dims, lo), "upper": (cell_dims, hi),
            "n_seeds": (cell_dims, n_seeds),
            "method": (cell_dims, method.astype(str)), "note": (cell_dims, note.astype(str)),
        },
        coords={
            "run": all_runs, "length": lengths, "sequence": np.arange(n_seq),
            **factor_coords(store, all_runs),
            "cell_task": ("cell", [c[0] for c in cells]), "cell_arch": ("cell", [c[1] for c in cells]),
            "cell_variant": ("cell", [c[2] for c in cells]),
        },
        attrs=attrs,
    )


#: Sequence resamples of one run's accuracy interval (:func:`run_chance`).
RUN_RESAMPLES = 2000


def run_chance(correct: np.ndarray, labelled: np.ndarray, majority: np.ndarray, *, ci_level: float = CI_LEVEL,
               rng: int = BOOTSTRAP_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Per (run, length) of the (run, length, sequence) counts: chance (the labelled positions of
    the majority class over all labelled positions) and the lower end of the run's accuracy
    interval, a percentile bootstrap that resamples its sequences (the positions of a sequence
    move together). NaN where a run has no labelled position at that length."""
    chance = np.full(correct.shape[:2], np.nan)
    lower = np.full(correct.shape[:2], np.nan)
    gen = np.random.default_rng(rng)
    for i, j in np.ndindex(*chance.shape):
        n = labelled[i, j]
        keep = np.isfinite(n) & (n > 0)
        if not keep.any():
            continue
        c, n, m = correct[i, j][keep], n[keep], majority[i, j][keep]
        chance[i, j] = float(np.nansum(m) / n.sum())
        pick = gen.integers(0, n.size, size=(RUN_RESAMPLES, n.size))
        lower[i, j] = float(np.quantile(c[pick].sum(1) / n[pick].sum(1), (1 - ci_level) / 2))
    return chance, lower


def failed_runs(ds: xr.Dataset, store: Store | None = None) -> list[str]:
    """The runs of a behaviour result that did not learn: at some length the lower end of their
    accuracy's interval is at or below chance. In words, one per run and length:
    ``"parity-lstm-s2 did not learn: accuracy 0.52 at length 12 (chance 0.50; 95% lower bound 0.49)"``.
    Empty for a result stored before chance was kept. With ``store``, its untrained baselines
    are not named (chance is what they are for), and a run at chance only on sequences longer
    than it was trained on is said to be at chance there, not to have failed to learn:
    ``"s3-gru-s0 is at chance at length 120 (trained at 40): accuracy 0.17 (chance 0.17; 95%
    lower bound 0.17)"``."""
    return [words for _, _, words in _at_chance(ds, store)]


def _at_chance(ds: xr.Dataset, store: Store | None) -> Iterator[tuple[str, bool, str]]:
    """(run, whether only beyond its training length, words) per run and length at chance."""
    if "chance" not in ds or "run_lower" not in ds:
        return
    level = float(ds.attrs.get("ci_level", CI_LEVEL))
    for rid in ds.run.values:
        attrs = store.run_attrs(str(rid)) if store is not None else {}
        if attrs.get("untrained"):
            continue
        given = (attrs.get("train_config") or {}).get("length")
        trained = int(given) if isinstance(given, int | float) else None
        for L in ds.length.values:
            longer = trained is not None and L > trained
            acc, ch, lo = (float(ds[v].sel(run=rid, length=L)) for v in ("accuracy", "chance", "run_lower"))
            if np.isfinite(lo) and np.isfinite(ch) and lo <= ch < 1:  # chance 1: one class, nothing to learn
                numbers = f"(chance {ch:.2f}; {level:.0%} lower bound {lo:.2f})"
                yield str(rid), bool(longer), (
                    f"{rid} is at chance at length {int(L)} (trained at {trained}): accuracy {acc:.2f} {numbers}"
                    if longer else f"{rid} did not learn: accuracy {acc:.2f} at length {int(L)} {numbers}")


def did_not_learn(store: Store) -> dict[str, str]:
    """The runs of ``store`` that did not learn (at chance at a length they were trained to
    handle; not the untrained baselines, not a run at chance only beyond its training length),
    each with the words of its first such length."""
    out: dict[str, str] = {}
    for name in stored_behaviour(store):
        for rid, longer, words in _at_chance(store.read_result(name), store):
            if not longer:
                out.setdefault(rid, words)
    return out


def stored_failed_runs(store: Store) -> list[str]:
    """:func:`failed_runs` of every stored behaviour result, in words (not the untrained baselines)."""
    return [line for name in stored_behaviour(store) for line in failed_runs(store.read_result(name), store)]


def store_behaviour(store: Store, task: str, runs: Sequence[str] | None = None, *,
                    attrs: dict | None = None, target: str | None = None) -> xr.Dataset:
    """Compute :func:`behaviour_result` of one task's runs (default: every run of ``task``)
    and store it as ``results/behaviour/<task>`` (:func:`store.registry.behaviour_name`)."""
    if runs is None:
        runs = [r for r in store.run_ids() if store.run_attrs(r).get("task") == task]
    ds = behaviour_result(store, runs, target=target)
    ds.attrs.update(attrs or {})
    store.write_result(registry.behaviour_name(task), ds)
    return ds


def stored_behaviour(store: Store) -> list[str]:
    """The names of the stored behaviour results (``behaviour/<task>``)."""
    return [n for n in store.results() if registry.parse_behaviour_name(n) is not None]
