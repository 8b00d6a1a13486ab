"""Probe sweep against a sequential scikit-learn loop, side by side in one process.

Prints one JSON line. The store is shaped like a capture: 4 layers + embedding, 40 positions,
2000 sequences, d = 128, float16, and a 6-class running-state label made decodable with noise
(class mean directions that grow with depth, a token signal and the previous state), so accuracy
sits between chance and 100%.

Both sides do the full sweep *including the choice of C*: for every cell (layer x position) the
default grid ``C_GRID`` (5 values) by inner cross-validation nested in 5 outer folds and grouped
by sequence, for the target and the control task -- per cell 10 inner + 5 outer problems per
labelling and one fit on every row, each along the 5 C values (155 fits) -- then scoring:

* ``exact``: ``probe(method="exact")`` on local threads (one BLAS thread each): lockstep
  preconditioned L-BFGS along the C path;
* ``sklearn_loop``: the same search written the plain scikit-learn way (:func:`sklearn_loop`):
  per outer fold, ``GroupKFold`` over the other folds, a ``StandardScaler`` +
  ``LogisticRegression`` pipeline per inner fold warm-started along the grid (what
  ``LogisticRegressionCV`` does inside), the chosen C refitted and scored; the control task alike;
  the stored probe by ``LogisticRegressionCV``-style search over the outer folds and a refit on
  every row: 236 fits per cell, one after another on one BLAS thread. Same choices and scores
  as the exact path (``C_identical``, ``*_gap_pp``); this is the headline ratio;
* ``reference``: ``probe(method="reference", scheduler="sync")``, scikit-learn fitting exactly
  the exact path's 155 problems (the inner problems "everything but folds f and g" shared by
  outer folds f and g), ``warm_start`` along the grid: the solver's own gain, without the
  sharing;

both scikit-learn variants run on a subset of positions (``LAYERSTATE_BENCH_REF_POSITIONS``,
default every 10th) and their time is extrapolated per cell to the whole sweep;
* ``screen``: ``probe(method="screen")``, closed-form shrinkage LDA (no C);
* ``exact_fixed_C``: the exact path at one fixed C = 1 (no search), for scale.

Each is timed twice, in interleaved rounds, and its faster run kept (the machine is shared).
``speedup_*`` are wall-clock ratios (what a user waits; the sweep uses every core);
``cpu_ratio_*`` compare CPU seconds of all threads (the algorithmic gain, steadier under load).
Accuracy gaps are per cell (mean over folds), in percentage points, over the reference cells;
``C_identical`` is the fraction of (cell, fold) choices of C the two paths share, and
``unconverged_cells`` counts probes that did not meet their tolerance.
``time_split`` says where the exact sweep's time goes: reading slabs from the store, and fitting,
choosing and scoring (measured on a sample of cells, scaled to the sweep).
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


def make_arrays(rng: np.random.Generator, n: int = N_SEQ, length: int = LENGTH, d: int = D):
    """Hidden (sequence, position, layer, feature) float16 with a 6-class running state."""
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
        h *= scale
        h += offset
        hidden[:, :, layer] = h
    return hidden, tokens, state


def build_store(path: str, rng: np.random.Generator) -> Store:
    hidden, tokens, state = make_arrays(rng)
    st = Store.create(path, title="bench probes")
    st.add_run("r0", task="s3", arch="lstm", seed=0)
    st.write_length("r0", hidden=hidden, tokens=tokens, labels={"state": state})
    return st


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def cpu_timed(fn):
    """Wall seconds, CPU seconds of this process (all threads) and the result."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


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
    ``accuracy``) and the control (``control_fold_C``, ``control_accuracy``), and the stored
    probe's ``C``. Choice rule as :func:`analysis.probes.cells.choose`: the smallest C within
    ``TIE`` of the lowest held-out log-loss.
    """
    import warnings

    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.preprocessing import StandardScaler

    from analysis.probes.cells import TIE
    from analysis.probes.solvers import MAX_ITER

    def path_losses(Xtr, ytr, Xva, yva):
        """Held-out log-loss sums along the grid, one scaler, warm starts (LogisticRegressionCV)."""
        sc = StandardScaler().fit(Xtr)
        A, B = sc.transform(Xtr), sc.transform(Xva)
        lr = LogisticRegression(warm_start=True, max_iter=MAX_ITER)
        out = []
        for C in grid:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lr.set_params(C=C).fit(A, ytr)
            proba = np.zeros((yva.size, n_classes))
            proba[:, lr.classes_] = lr.predict_proba(B)
            out.append(-np.log(np.maximum(proba[np.arange(yva.size), yva], 1e-15)).sum())
        return np.array(out)

    def pick(losses):
        return grid[int(np.flatnonzero(losses <= losses.min() * (1 + TIE))[0])]

    def refit_score(C, Xtr, ytr, Xte, yte):
        sc = StandardScaler().fit(Xtr)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lr = LogisticRegression(C=C, max_iter=MAX_ITER).fit(sc.transform(Xtr), ytr)
        return float((lr.predict(sc.transform(Xte)) == yte).mean())

    res: dict = {}
    for name, lab in (("", y), ("control_", control)):
        chosen, acc = [], []
        for f in range(folds):
            tr, te = fold != f, fold == f
            Xtr, ytr, gtr = X[tr], lab[tr], fold[tr]
            losses = sum(
                path_losses(Xtr[a], ytr[a], Xtr[b], ytr[b])
                for a, b in GroupKFold(n_splits=folds - 1).split(Xtr, ytr, groups=gtr)
            )
            chosen.append(pick(losses))
            acc.append(refit_score(chosen[-1], Xtr, ytr, X[te], lab[te]))
        res[f"{name}fold_C"], res[f"{name}accuracy"] = np.array(chosen), np.array(acc)
    # the stored probe: LogisticRegressionCV over the outer folds, refitted on every row
    cv = sum(
        path_losses(X[fold != f], y[fold != f], X[fold == f], y[fold == f]) for f in range(folds)
    )
    res["C"] = pick(cv)
    sc = StandardScaler().fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        LogisticRegression(C=res["C"], max_iter=MAX_ITER).fit(sc.transform(X), y)
    return res


def run_sklearn_loop(st: Store, positions: list[int]) -> list[dict]:
    """:func:`sklearn_loop` over every layer at ``positions``, on the sweep's own folds."""
    from analysis.probes import C_GRID, plan_probes

    plan = plan_probes(st, "state", positions=positions)
    lab = plan.runs["r0"].labels[LENGTH]
    hidden = st.load_length("r0", LENGTH)["hidden"].values
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
    sample = [(layer, p) for layer in (1, 3) for p in (5, 25)]
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


def main() -> None:
    from analysis.probes import probe

    rng = np.random.default_rng(0)
    tmp = tempfile.mkdtemp(prefix="layerstate-bench-probes-", dir=os.environ.get("BENCH_DIR"))
    step = int(os.environ.get("LAYERSTATE_BENCH_REF_POSITIONS", "10"))
    try:
        st = build_store(os.path.join(tmp, "s.zarr"), rng)
        n_cells = (N_LAYERS + 1) * LENGTH
        ref_positions = list(range(step // 2, LENGTH, step))
        with one_thread():  # the scikit-learn loop runs outside dask: pin BLAS like it does
            timings = best_of_interleaved(
                2,
                [
                    lambda: probe(st, "state", method="exact"),
                    lambda: probe(st, "state", method="screen"),
                    lambda: probe(st, "state", method="exact", C=1.0),
                    lambda: probe(
                        st, "state", method="reference", positions=ref_positions, scheduler="sync"
                    ),
                    lambda: run_sklearn_loop(st, ref_positions),
                ],
            )
        ((t_exact, c_exact), exact), ((t_screen, c_screen), screen) = timings[:2]
        ((t_fixed, c_fixed), fixed), ((t_ref, c_ref), ref) = timings[2:4]
        (t_sk, c_sk), loop = timings[4]
        scale = n_cells / ((N_LAYERS + 1) * len(ref_positions))
        t_ref_all, c_ref_all = t_ref * scale, c_ref * scale
        t_sk_all, c_sk_all = t_sk * scale, c_sk * scale
        # the loop's cells in (layer, position) order, like exact's sel(position=ref_positions)
        ex_acc = exact["accuracy"].sel(position=ref_positions).isel(run=0, length=0)
        ex_ctrl = exact["control_accuracy"].sel(position=ref_positions).isel(run=0, length=0)
        at = {"position": ref_positions}
        ex_C = [exact[v].sel(**at).isel(run=0, fit_length=0) for v in ("fold_C", "control_fold_C")]
        ex_full = exact["C"].sel(**at).isel(run=0, fit_length=0).values.ravel()
        sk_acc = np.array([c["accuracy"].mean() for c in loop])
        sk_gap = np.abs(ex_acc.mean("fold").values.ravel() - sk_acc) * 100
        sk_ctrl_gap = (
            np.abs(
                ex_ctrl.mean("fold").values.ravel()
                - np.array([c["control_accuracy"].mean() for c in loop])
            )
            * 100
        )
        sk_same = np.concatenate(
            [
                (
                    ex_C[0].values.reshape(len(loop), -1) == np.array([c["fold_C"] for c in loop])
                ).ravel(),
                (
                    ex_C[1].values.reshape(len(loop), -1)
                    == np.array([c["control_fold_C"] for c in loop])
                ).ravel(),
                ex_full == np.array([c["C"] for c in loop]),
            ]
        )

        def acc(ds):
            return ds["accuracy"].mean("fold").sel(position=ref_positions).values

        gap_exact = np.abs(acc(exact) - acc(ref)) * 100
        gap_screen = (acc(screen) - acc(ref)) * 100
        ll_gap = (
            np.abs(exact["log_loss"].sel(position=ref_positions) - ref["log_loss"]).max().item()
        )
        same_C = [
            exact[v].sel(position=ref_positions).values == ref[v].values
            for v in ("C", "fold_C", "control_fold_C")
        ]
        out = {
            "bench": "probes",
            "cells": n_cells,
            "sequences": N_SEQ,
            "classes": K,
            "C_grid": [float(c) for c in exact["C_grid"].values],
            "fits_per_cell": 155,
            "exact_s": round(t_exact, 2),
            "screen_s": round(t_screen, 2),
            "exact_fixed_C_s": round(t_fixed, 2),
            "sklearn_loop_s": round(t_sk_all, 2),
            "speedup_vs_sklearn_loop": round(t_sk_all / t_exact, 2),
            "cpu_ratio_vs_sklearn_loop": round(c_sk_all / c_exact, 2),
            "sklearn_loop_max_gap_pp": round(float(sk_gap.max()), 3),
            "sklearn_loop_mean_gap_pp": round(float(sk_gap.mean()), 3),
            "sklearn_loop_control_max_gap_pp": round(float(sk_ctrl_gap.max()), 3),
            "sklearn_loop_C_identical": round(float(sk_same.mean()), 4),
            "reference_s": round(t_ref_all, 2),
            "reference_extrapolated": step > 1,
            "reference_cells_timed": (N_LAYERS + 1) * len(ref_positions),
            "speedup_exact": round(t_ref_all / t_exact, 2),
            "speedup_screen": round(t_ref_all / t_screen, 2),
            "cpu_ratio_exact": round(c_ref_all / c_exact, 2),
            "cpu_ratio_screen": round(c_ref_all / c_screen, 2),
            "search_cost_vs_fixed_C": round(t_exact / t_fixed, 2),
            "exact_cpu_s": round(c_exact, 2),
            "reference_cpu_s": round(c_ref_all, 2),
            "exact_max_gap_pp": round(float(gap_exact.max()), 3),
            "exact_mean_gap_pp": round(float(gap_exact.mean()), 3),
            "exact_max_log_loss_gap": round(float(ll_gap), 5),
            "C_identical": round(float(np.mean(np.concatenate([a.ravel() for a in same_C]))), 4),
            "chosen_C_counts": {
                f"{c:g}": int(n)
                for c, n in zip(*np.unique(exact["fold_C"].values, return_counts=True), strict=True)
            },
            "unconverged_cells": {
                "exact": int((~exact["converged"]).sum()),
                "reference": int((~ref["converged"]).sum()),
                "exact_fixed_C": int((~fixed["converged"]).sum()),
            },
            "screen_mean_gap_pp": round(float(gap_screen.mean()), 3),
            "screen_min_gap_pp": round(float(gap_screen.min()), 3),
            "screen_max_gap_pp": round(float(gap_screen.max()), 3),
            "accuracy_profile": [round(float(v), 3) for v in exact["profile"].values.ravel()],
            "best_layer": str(exact["best_layer"].values.ravel()[0]),
            "time_split": time_split(st, n_cells, t_exact),
        }
        print(json.dumps(out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
