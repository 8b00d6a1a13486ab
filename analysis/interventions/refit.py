"""The ablation's refitted probe: how much of the target is still linearly decodable from
the erased states, each sequence predicted by a probe trained without it.

The probes are fitted as `analysis.probes.probe` fits its own
(:mod:`analysis.interventions.probe_fit`): C chosen from the probe's grid by cross-validation
over sequences, convergence reported. `refit_reference` is the obvious scikit-learn loop at
one C, for tests and ``bench.refit``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from analysis.interventions.probe_fit import fit_probes
from analysis.probes.cells import C_GRID
from analysis.probes.solvers import logits


def refit_correct(
    x: np.ndarray, labels: np.ndarray, mask: np.ndarray, folds: int, max_rows: int, seed: list,
    *, C: float | Sequence[float] = C_GRID,
) -> tuple[np.ndarray, float]:
    """Per-sequence correct counts of a probe refitted with sequences held out by fold.

    Parameters
    ----------
    x : ndarray, (sequence, position, feature)
    labels : ndarray of int, (sequence, position)
    mask : ndarray of bool, (sequence, position)
        The labelled positions.
    folds : int
        Contiguous folds of sequences; each sequence is predicted by the probe trained
        without its fold.
    max_rows : int
        Each fold's probe trains on about this many labelled rows at most: a seeded random
        subset of the rows (of every fold: ``max_rows * folds / (folds - 1)``) trains the
        probes, and every labelled row is still predicted.
    seed : list of int
    C : float or sequence of float
        A fixed C, or the grid C is chosen from as `analysis.probes.probe` chooses it (by
        cross-validation over sequences nested in the folds; the default).

    Returns
    -------
    correct : ndarray, float, (sequence,)
    C : float
        The C that cross-validation over the folds chose (the fixed C if one was given; NaN
        when there was nothing to fit).
    """
    n = x.shape[0]
    rng = np.random.default_rng(seed)
    seq_of_row = np.repeat(np.arange(n), mask.sum(1))
    X, y = x[mask], labels[mask]
    correct = np.zeros(n)
    if y.size == 0:
        return correct, float("nan")
    fold_of_seq = np.zeros(n, dtype=np.int64)
    for f, held in enumerate(np.array_split(np.arange(n), folds)):
        fold_of_seq[held] = f
    fold = fold_of_seq[seq_of_row]
    cap = max_rows * folds // (folds - 1)
    train = np.arange(y.size)
    if y.size > cap:  # the fit is the costly part of a cell
        train = np.sort(rng.choice(y.size, size=cap, replace=False))
    if np.unique(y[train]).size < 2:  # one class to learn: predict it
        pred = np.full(y.shape, y[train][0])
        np.add.at(correct, seq_of_row, pred == y)
        return correct, float("nan")
    fitted = fit_probes(X[train], y[train], fold[train], folds=folds, C=C, seed=seed,
                        what="refitted probe")
    pred = np.full(y.shape, -1)
    for f in range(folds):
        held = fold == f
        if held.any():
            z = logits(fitted.params.take([f]), X[held])[0]  # (row, class)
            pred[held] = fitted.classes[z.argmax(-1)]
    np.add.at(correct, seq_of_row, pred == y)
    return correct, fitted.C


def refit_reference(
    x: np.ndarray, labels: np.ndarray, mask: np.ndarray, folds: int, max_rows: int, seed: list, *,
    C: float = 1.0, max_iter: int = 500, tol: float = 1e-4,
) -> np.ndarray:
    """`refit_correct` at one C the obvious way, for tests and ``bench.refit``: the same seeded
    training rows, then per fold ``StandardScaler`` + scikit-learn's ``LogisticRegression(C)``
    (float64, ``max_iter``/``tol`` as given; the defaults are what the refit used before the
    probe solver). Returns the per-sequence correct counts (sequence,)."""
    from sklearn.linear_model import LogisticRegression  # noqa: PLC0415 -- on demand, as in analysis.probes

    n = x.shape[0]
    rng = np.random.default_rng(seed)
    seq_of_row = np.repeat(np.arange(n), mask.sum(1))
    X, y = x[mask].astype(np.float64), labels[mask]
    correct = np.zeros(n)
    if y.size == 0:
        return correct
    cap = max_rows * folds // (folds - 1)
    chosen = np.zeros(y.size, dtype=bool)
    chosen[np.sort(rng.choice(y.size, size=cap, replace=False)) if y.size > cap else slice(None)] = True
    for held in np.array_split(np.arange(n), folds):
        test = np.isin(seq_of_row, held)
        xt, yt = X[chosen & ~test], y[chosen & ~test]
        if np.unique(yt).size < 2:
            pred = np.full(int(test.sum()), yt[0] if yt.size else -1)
        else:
            mean, scale = xt.mean(0), xt.std(0)
            scale[scale < 1e-6] = 1.0
            probe = LogisticRegression(C=C, max_iter=max_iter, tol=tol).fit((xt - mean) / scale, yt)
            pred = probe.predict((X[test] - mean) / scale)
        np.add.at(correct, seq_of_row[test], pred == y[test])
    return correct
