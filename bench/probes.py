"""Probe sweep against scikit-learn doing the same C search, side by side in one process.

Prints one JSON line. Two stores shaped like a capture: 4 layers + embedding, 40 positions,
2000 sequences, d = 128, float16, and a 6-class running-state label made decodable with noise
(class mean directions that grow with depth, a token signal and the previous state), so accuracy
sits between chance and 100%. ``independent_features``: the features are independent noise plus
the signals. ``correlated_features``: the same mixed through a fixed matrix whose singular values
span 3 decades (:func:`make_arrays`), so standardised features are as correlated as captured
hidden states are (condition numbers near 1e6; captured demo cells: 1e3-1e7).

Every sweep includes *the choice of C*: for every cell (layer x position) the default grid
``C_GRID`` (5 values) by inner cross-validation nested in 5 outer folds and grouped by sequence,
for the target and the control task, then scoring:

* ``exact``: ``probe(method="exact")`` as a user runs it (the default scheduler, which for a
  sweep this long is one one-thread worker process per core); ``exact_threads``: the same on
  local threads, which the GIL keeps from running side by side. Per cell 10
  inner + 5 outer problems per labelling and one fit on every row, each along the grid (155
  fits), in lockstep preconditioned L-BFGS;
* ``sklearn_loop``: the same search written the plain scikit-learn way (:func:`sklearn_loop`):
  per outer fold, ``GroupKFold`` over the other folds, a ``StandardScaler`` +
  ``LogisticRegression`` per inner fold warm-started along the grid (what
  ``LogisticRegressionCV`` does inside), only converged C eligible, the chosen C refitted and
  scored; the control task alike; the stored probe by a ``LogisticRegressionCV``-style search
  over the outer folds and a refit on every row: 236 fits per cell, one after another on one BLAS
  thread. This is the headline comparison (``speedup_vs_sklearn_loop``), with the gap in
  accuracy per cell and the share of identical choices of C (``C_identical``);
* ``reference`` (independent features only): ``probe(method="reference", scheduler="sync")``,
  scikit-learn fitting exactly the exact path's 155 problems (the inner problem "everything but
  folds f and g" is shared by outer folds f and g) with ``warm_start`` along the grid: the
  solver's own gain, without that sharing;
* ``screen``: closed-form shrinkage LDA (no C); ``exact_fixed_C``: the exact path at C = 1
  (no search), for scale.

The scikit-learn sweeps run on a subset of positions (``LAYERSTATE_BENCH_REF_POSITIONS``,
default every 10th) and their time is extrapolated per cell to the whole sweep. Each sweep is
timed twice, in interleaved rounds, and its faster run kept (the machine is shared).
``speedup_*`` are wall-clock ratios (what a user waits; the exact sweep uses every core, the
scikit-learn loops one); ``cpu_ratio_*`` compare CPU seconds of all threads and worker
processes (the algorithmic
gain, steadier under load). Accuracy gaps are per cell (mean over folds), in percentage points.
``time_split`` says where the exact sweep's time goes: reading slabs from the store, and fitting,
choosing and scoring (measured on a sample of cells, scaled to the sweep).

``--mdl``: the MDL probes instead (:func:`analysis.probes.mdl_probe`, every cell of the
correlated store, the default C grid and the permuted control) against the plain loop
(:func:`mdl_sklearn_loop`: scikit-learn's ``LogisticRegression`` per block, C and labelling,
20 blocks x 5 C = 100 fits per cell, one after another on one BLAS thread) on the same
``LAYERSTATE_BENCH_REF_POSITIONS`` subset, extrapolated per cell; with the codelengths of the
cells both coded, side by side (relative gap) and the compression profile.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import numpy as np

from analysis.compute import one_thread
from store import Store

N_SEQ, LENGTH, N_LAYERS, D, K = 2000, 40, 4, 128, 6


def make_arrays(
    rng: np.random.Generator,
    n: int = N_SEQ,
    length: int = LENGTH,
    d: int = D,
    decades: float = 0.0,
):
    """Hidden (sequence, position, layer, feature) float16 with a 6-class running state.

    ``decades`` > 0 mixes each layer's features through a fixed random matrix whose singular
    values fall log-evenly over that many decades, so the standardised features are correlated
    like captured hidden states (``decades=3``: correlation condition numbers near 1e5-1e6, a
    handful of directions holding most variance; captured demo cells measured 1e3-1e7, median
    3e6, with 4-40 of 32-80 eigenvalues above 1% of the largest). 0: independent features.
    """
    mix = None
    if decades > 0:
        q1, _ = np.linalg.qr(rng.standard_normal((d, d)))
        q2, _ = np.linalg.qr(rng.standard_normal((d, d)))
        mix = ((q1 * np.logspace(0, -decades, d)) @ q2.T).astype(np.float32)
    tokens = rng.integers(0, K, size=(n, length))
    state = np.cumsum(tokens, axis=1) % K  # running state, 6 classes
    prev = np.concatenate([np.zeros((n, 1), dtype=int), state[:, :-1]], axis=1)
    state_dir = rng.standard_normal((K, d), dtype=np.float32)
    token_dir = rng.standard_normal((K, d), dtype=np.float32)
    strength = [0.0, 0.07, 0.12, 0.18, 0.15]  # embed, L0..L3: peaks at L2
    offset = rng.normal(0, 3, d).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, d).astype(np.float32)
    hidden = np.empty((n, length, N_LAYERS + 1, d), dtype=np.float16)
    for layer, a in enumerate(strength):
        h = rng.standard_normal((n, length, d), dtype=np.float32)  # noise, then the signals
        h += a * state_dir[state]
        h += 0.3 * token_dir[tokens]
        h += 0.5 * a * state_dir[prev]
        if mix is not None:
            h = h @ mix
            h /= h.std()
        h *= scale
        h += offset
        hidden[:, :, layer] = h
    return hidden, tokens, state


def build_store(path: str, rng: np.random.Generator, decades: float = 0.0) -> Store:
    hidden, tokens, state = make_arrays(rng, decades=decades)
    st = Store.create(path, title="bench probes")
    st.add_run("r0", task="s3", arch="lstm", seed=0)
    st.write_length("r0", hidden=hidden, tokens=tokens, labels={"state": state})
    return st


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def _cpu_s() -> float:
    """CPU seconds of this process (all threads) and of its ended child processes (the worker
    processes a sweep may run on)."""
    import resource

    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def cpu_timed(fn):
    """Wall seconds, CPU seconds of this process and its worker processes, and the result."""
    c0, t0 = _cpu_s(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, _cpu_s() - c0, out


def best_of_interleaved(rounds: int, fns: list) -> list:
    """Time each function once per round, rounds interleaved, and keep each one's fastest run
    (with its result): other processes share the cores, and interleaving spreads their load
    over all contenders while the minimum is each one's least disturbed run."""
    times: list[list[tuple[float, float]]] = [[] for _ in fns]
    results: list = [None] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            wall, cpu, results[i] = cpu_timed(fn)
            times[i].append((wall, cpu))
    return [(min(t), r) for t, r in zip(times, results, strict=True)]


def sklearn_loop(X, y, control, fold, folds: int, grid, n_classes: int) -> dict:
    """Nested C search for one cell written with scikit-learn only (see the module docstring).

    Returns per outer fold the chosen C and held-out accuracy of the target (``fold_C``,
    ``accuracy``) and the control (``control_fold_C``, ``control_accuracy``), the stored probe's
    ``C``, and ``unconverged_C``: grid values some fit did not converge at. The choice rule is
    the search's (:func:`analysis.probes.cells.choose`): among C values at which every fit
    converged (``n_iter_ < max_iter``), the smallest within ``TIE`` of the lowest held-out
    log-loss.
    """
    import warnings

    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.preprocessing import StandardScaler

    from analysis.probes.cells import TIE
    from analysis.probes.solvers import MAX_ITER

    res: dict = {"unconverged_C": 0}

    def path_losses(Xtr, ytr, Xva, yva):
        """Held-out log-loss sums along the grid (one scaler, warm starts, as in
        LogisticRegressionCV) and whether each fit converged; a fit that did not is not
        continued to larger C, as in the search."""
        sc = StandardScaler().fit(Xtr)
        A, B = sc.transform(Xtr), sc.transform(Xva)
        lr = LogisticRegression(warm_start=True, max_iter=MAX_ITER)
        out, ok = np.full(len(grid), np.inf), np.zeros(len(grid), dtype=bool)
        for j, C in enumerate(grid):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lr.set_params(C=C).fit(A, ytr)
            ok[j] = lr.n_iter_.max() < MAX_ITER
            proba = np.zeros((yva.size, n_classes))
            proba[:, lr.classes_] = lr.predict_proba(B)
            out[j] = -np.log(np.maximum(proba[np.arange(yva.size), yva], 1e-15)).sum()
            if not ok[j]:
                break
        return out, ok

    def search(splits):
        losses, ok = np.zeros(len(grid)), np.ones(len(grid), dtype=bool)
        for split in splits:
            loss, conv = path_losses(*split)
            losses, ok = losses + loss, ok & conv
        res["unconverged_C"] += int((~ok).sum())
        if not ok.any():
            return grid[0]
        best = losses[ok].min()
        return grid[int(np.flatnonzero(ok & (losses <= best * (1 + TIE)))[0])]

    def refit(C, Xtr, ytr):
        sc = StandardScaler().fit(Xtr)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return sc, LogisticRegression(C=C, max_iter=MAX_ITER).fit(sc.transform(Xtr), ytr)

    for name, lab in (("", y), ("control_", control)):
        chosen, acc = [], []
        for f in range(folds):
            tr, te = fold != f, fold == f
            Xtr, ytr, gtr = X[tr], lab[tr], fold[tr]
            inner = GroupKFold(n_splits=folds - 1).split(Xtr, ytr, groups=gtr)
            chosen.append(search((Xtr[a], ytr[a], Xtr[b], ytr[b]) for a, b in inner))
            sc, lr = refit(chosen[-1], Xtr, ytr)
            acc.append(float((lr.predict(sc.transform(X[te])) == lab[te]).mean()))
        res[f"{name}fold_C"], res[f"{name}accuracy"] = np.array(chosen), np.array(acc)
    # the stored probe: LogisticRegressionCV over the outer folds, refitted on every row
    outer = ((X[fold != f], y[fold != f], X[fold == f], y[fold == f]) for f in range(folds))
    res["C"] = search(outer)
    refit(res["C"], X, y)
    return res


def run_sklearn_loop(st: Store, positions: list[int]) -> list[dict]:
    """:func:`sklearn_loop` over every layer at ``positions``, on the sweep's own folds."""
    from analysis.probes import C_GRID, plan_probes

    plan = plan_probes(st, "state", positions=positions)
    lab = plan.runs["r0"].labels[LENGTH]
    hidden = st.load_length("r0", LENGTH)["hidden"].values
    assert lab.control is not None  # the bench fits the control task
    out = []
    for layer in range(N_LAYERS + 1):
        for p in positions:
            X = hidden[:, p, layer].astype(np.float32)
            out.append(
                sklearn_loop(X, lab.y[:, p], lab.control[:, p], lab.fold, 5, list(C_GRID), K)
            )
    return out


def time_split(st: Store, n_cells: int, total_s: float) -> dict:
    """Where the exact sweep's time goes: read all slabs; fit/choose/score a sample of cells."""
    import dask

    from analysis.probes import C_GRID, fit_cell

    hidden = st.open_length("r0", LENGTH)["hidden"].data
    blocks = [
        hidden[:, p : p + 8, layer, :] for layer in range(N_LAYERS + 1) for p in range(0, LENGTH, 8)
    ]
    read_s, _ = timed(lambda: dask.compute(*blocks, scheduler="threads"))
    ds = st.load_length("r0", LENGTH)
    y, tokens = ds["state"].values, ds["tokens"].values
    token_map = np.random.default_rng(1).integers(0, K, K)
    fold = np.arange(N_SEQ) % 5
    fit = 0.0
    sample = [(layer, p) for layer in (1, 3) for p in (LENGTH // 8, LENGTH * 5 // 8)]
    for layer, p in sample:
        X = ds["hidden"].values[:, p, layer].astype(np.float32)
        control = token_map[tokens[:, p]]  # like the sweep's default (token) control
        t, _ = timed(
            lambda X=X, p=p, control=control: fit_cell(
                X, y[:, p], control, fold, folds=5, n_classes=K, method="exact", C=C_GRID
            )
        )
        fit += t
    per = n_cells / len(sample)
    # fit_cell is single-thread seconds; the sweep runs cells on all cores
    return {
        "read_s": round(read_s, 2),
        "fit_choose_score_cpu_s": round(fit * per, 2),
        "sweep_wall_s": round(total_s, 2),
    }


def compare(st: Store, ref_positions: list[int], *, full: bool) -> dict:
    """Time the sweeps side by side (best of 2 interleaved rounds) and compare their results.

    ``full``: also the reference path, the screening solver and the exact path at a fixed C.
    """
    from analysis.probes import probe

    n_cells = (N_LAYERS + 1) * LENGTH
    fns = {
        "exact": lambda: probe(st, "state", method="exact"),
        "exact_threads": lambda: probe(st, "state", method="exact", scheduler="threads"),
        "sklearn_loop": lambda: run_sklearn_loop(st, ref_positions),
    }
    if full:
        fns["screen"] = lambda: probe(st, "state", method="screen")
        fns["exact_fixed_C"] = lambda: probe(st, "state", method="exact", C=1.0)
        fns["reference"] = lambda: probe(
            st, "state", method="reference", positions=ref_positions, scheduler="sync"
        )
    with one_thread():  # the scikit-learn loop runs outside dask: pin BLAS like it does
        timed_runs = dict(zip(fns, best_of_interleaved(2, list(fns.values())), strict=True))
    scale = n_cells / ((N_LAYERS + 1) * len(ref_positions))  # the loops ran on a subset
    (t_exact, c_exact), exact = timed_runs["exact"]
    (t_sk, c_sk), loop = timed_runs["sklearn_loop"]
    (t_thr, c_thr), on_threads = timed_runs["exact_threads"]
    for v in ("accuracy", "C", "fold_C"):  # where the sweep runs changes nothing it computes
        assert np.array_equal(exact[v].values, on_threads[v].values), v
    at = {"position": ref_positions}
    ex = {
        v: exact[v].sel(**at).isel(run=0, **({"length": 0} if "length" in exact[v].dims else {}))
        for v in ("accuracy", "control_accuracy")
    }
    ex_C = {
        v: exact[v].sel(**at).isel(run=0, fit_length=0) for v in ("C", "fold_C", "control_fold_C")
    }
    n = len(loop)  # the loop's cells in (layer, position) order, like ex[...] raveled
    signed = ex["accuracy"].mean("fold").values.ravel() - [c["accuracy"].mean() for c in loop]
    gap = np.abs(signed)
    ctrl_gap = np.abs(
        ex["control_accuracy"].mean("fold").values.ravel()
        - [c["control_accuracy"].mean() for c in loop]
    )
    same = np.concatenate(
        [
            (ex_C[v].values.reshape(n, -1) == np.array([c[v] for c in loop]).reshape(n, -1)).ravel()
            for v in ("C", "fold_C", "control_fold_C")
        ]
    )
    out = {
        "exact_s": round(t_exact, 2),
        "exact_cpu_s": round(c_exact, 2),
        "exact_threads_s": round(t_thr, 2),
        "exact_threads_cpu_s": round(c_thr, 2),
        "processes_vs_threads": round(t_thr / t_exact, 2),
        "sklearn_loop_s": round(t_sk * scale, 2),
        "sklearn_loop_cpu_s": round(c_sk * scale, 2),
        "speedup_vs_sklearn_loop": round(t_sk * scale / t_exact, 2),
        "cpu_ratio_vs_sklearn_loop": round(c_sk * scale / c_exact, 2),
        "max_gap_pp": round(float(gap.max() * 100), 3),
        "mean_gap_pp": round(float(gap.mean() * 100), 3),
        # exact minus scikit-learn: > 0 where the search scores better than the loop's choice
        "mean_signed_gap_pp": round(float(signed.mean() * 100), 3),
        "control_max_gap_pp": round(float(ctrl_gap.max() * 100), 3),
        "C_identical": round(float(same.mean()), 4),
        "chosen_C_counts": {
            f"{c:g}": int(k)
            for c, k in zip(*np.unique(exact["fold_C"].values, return_counts=True), strict=True)
        },
        "unconverged_probes": int((~exact["converged"]).sum()),
        "cells_with_unfittable_C": int((~exact["path_converged"]).any("C_grid").sum()),
        "sklearn_unconverged_C": int(sum(c["unconverged_C"] for c in loop)),
        "accuracy_profile": [round(float(v), 3) for v in exact["profile"].values.ravel()],
    }
    if not full:
        return out
    (t_ref, c_ref), ref = timed_runs["reference"]
    (t_screen, c_screen), screen = timed_runs["screen"]
    (t_fixed, _), fixed = timed_runs["exact_fixed_C"]

    def acc(ds):
        return ds["accuracy"].mean("fold").sel(**at).values

    same_ref = [
        exact[v].sel(**at).values == ref[v].values for v in ("C", "fold_C", "control_fold_C")
    ]
    out.update(
        {
            "reference_s": round(t_ref * scale, 2),
            "speedup_vs_reference": round(t_ref * scale / t_exact, 2),
            "cpu_ratio_vs_reference": round(c_ref * scale / c_exact, 2),
            "reference_max_gap_pp": round(float(np.abs(acc(exact) - acc(ref)).max() * 100), 3),
            "reference_C_identical": round(
                float(np.mean(np.concatenate([a.ravel() for a in same_ref]))), 4
            ),
            "reference_max_log_loss_gap": round(
                float(np.abs(exact["log_loss"].sel(**at) - ref["log_loss"]).max()), 5
            ),
            "screen_s": round(t_screen, 2),
            "speedup_screen": round(t_ref * scale / t_screen, 2),
            "screen_mean_gap_pp": round(float((acc(screen) - acc(ref)).mean() * 100), 3),
            "screen_max_abs_gap_pp": round(float(np.abs(acc(screen) - acc(ref)).max() * 100), 3),
            "exact_fixed_C_s": round(t_fixed, 2),
            "search_cost_vs_fixed_C": round(t_exact / t_fixed, 2),
            "fixed_C_unconverged_probes": int((~fixed["converged"]).sum()),
            "best_layer": str(exact["best_layer"].values.ravel()[0]),
            "time_split": time_split(st, n_cells, t_exact),
        }
    )
    return out


def mdl_sklearn_loop(X, y, control, rank, grid, n_classes: int) -> list:
    """One cell's online codes (target and control) the plain way: scikit-learn's
    ``LogisticRegression`` per block and C (:func:`analysis.probes.mdl.reference_cell_code`)."""
    from analysis.probes.mdl import reference_cell_code

    return [reference_cell_code(X, lab, rank, n_classes, grid) for lab in (y, control)]


def compare_mdl(st: Store, ref_positions: list[int], rounds: int) -> dict:
    """MDL probes of every cell (layer x position) against the scikit-learn per-block loop on
    ``ref_positions`` (time extrapolated per cell), with the codelengths side by side."""
    from analysis.probes import mdl_probe
    from analysis.probes import plan as sweep_plan
    from analysis.probes.cells import C_GRID
    from analysis.probes.mdl import cell_ranks
    from analysis.probes.mdl_sweep import transmission_rank

    n_cells = (N_LAYERS + 1) * LENGTH
    ours = best_of_interleaved(rounds, [lambda: mdl_probe(st, "state", positions="all")])[0]
    (t_ours, c_ours), ds = ours
    _, labels = sweep_plan.build_labels(st, "r0", [LENGTH], [], "state", "permute", 2, 0)
    lab = labels[LENGTH]
    rank = transmission_rank(N_SEQ, 0, "r0", LENGTH)
    hidden = st.open_length("r0", LENGTH)["hidden"]
    layers = [str(v) for v in hidden.layer.values]
    t_loop = c_loop = 0.0
    gaps, comp_gaps, n_ref = [], [], 0
    with one_thread():
        for li, layer in enumerate(layers):
            block = np.asarray(hidden.isel(layer=li).values)
            for p in ref_positions:
                X = block[:, p].astype(np.float32)
                rk = cell_ranks(rank)
                wall, cpu, (code, ctrl) = cpu_timed(lambda X=X, p=p, rk=rk: mdl_sklearn_loop(
                    X, lab.y[:, p], lab.control[:, p], rk, C_GRID, K))
                t_loop, c_loop, n_ref = t_loop + wall, c_loop + cpu, n_ref + 1
                got = float(ds.codelength.sel(run="r0", length=LENGTH, layer=layer, position=p))
                got_c = float(ds.control_codelength.sel(run="r0", length=LENGTH, layer=layer, position=p))
                gaps += [abs(got - code.codelength) / code.codelength, abs(got_c - ctrl.codelength) / ctrl.codelength]
                comp_gaps.append(abs(float(ds.compression.sel(run="r0", length=LENGTH, layer=layer, position=p))
                                     - code.compression))
    scale = n_cells / n_ref
    prof = ds.compression_profile.sel(run="r0", length=LENGTH)
    return {
        "cells": n_cells, "loop_timed_on_cells": n_ref, "C_grid": list(C_GRID), "control": "permute",
        "fits_per_cell": {"ours_and_sklearn_loop": 2 * 10 * len(C_GRID)},
        "ours_s": round(t_ours, 1), "ours_cpu_s": round(c_ours, 1),
        "sklearn_loop_s_extrapolated": round(t_loop * scale, 1), "sklearn_loop_cpu_s_extrapolated": round(c_loop * scale, 1),
        "speedup_vs_sklearn_loop": round(t_loop * scale / t_ours, 2),
        "cpu_ratio_vs_sklearn_loop": round(c_loop * scale / c_ours, 2),
        "codelength_rel_gap_max": float(f"{max(gaps):.2g}"), "codelength_rel_gap_median": float(f"{np.median(gaps):.2g}"),
        "compression_gap_max": float(f"{max(comp_gaps):.2g}"),
        "compression_profile": {str(k): round(float(v), 3) for k, v in zip(prof.layer.values, prof.values, strict=True)},
        "control_compression_profile": {str(k): round(float(v), 3) for k, v in zip(
            prof.layer.values, ds.control_compression_profile.sel(run="r0", length=LENGTH).values, strict=True)},
    }


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["independent", "correlated"], default=None,
                    help="Measure one of the two stores (default both).")
    ap.add_argument("--headline", action="store_true",
                    help="Only the search against the scikit-learn loop (no reference/screen/fixed C).")
    ap.add_argument("--mdl", action="store_true",
                    help="Only the MDL probes (online code) against scikit-learn's per-block loop, on the "
                         "correlated store.")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="layerstate-bench-probes-", dir=os.environ.get("BENCH_DIR"))
    step = int(os.environ.get("LAYERSTATE_BENCH_REF_POSITIONS", "10"))
    ref_positions = list(range(step // 2, LENGTH, step))
    if args.mdl:
        try:
            corr = build_store(os.path.join(tmp, "corr.zarr"), np.random.default_rng(0), decades=3.0)
            rounds = int(os.environ.get("LAYERSTATE_BENCH_ROUNDS", "1"))
            print(json.dumps({"bench": "probes --mdl", "sequences": N_SEQ, "classes": K,
                              "correlated_features": compare_mdl(corr, ref_positions, rounds)}))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    try:
        out: dict = {
            "bench": "probes",
            "cells": (N_LAYERS + 1) * LENGTH,
            "sequences": N_SEQ,
            "classes": K,
            "folds": 5,
            "fits_per_cell": {"exact": 155, "sklearn_loop": 236},
            "loops_timed_on_cells": (N_LAYERS + 1) * len(ref_positions),
        }
        if args.only in (None, "independent"):
            iso = build_store(os.path.join(tmp, "iso.zarr"), np.random.default_rng(0))
            out["independent_features"] = compare(iso, ref_positions, full=not args.headline)
        if args.only in (None, "correlated"):
            corr = build_store(os.path.join(tmp, "corr.zarr"), np.random.default_rng(0), decades=3.0)
            out["correlated_features"] = compare(corr, ref_positions, full=False)
        print(json.dumps(out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
