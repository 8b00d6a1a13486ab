"""The ablation's refitted probe: how much of the target is still linearly decodable from
the erased states, each sequence predicted by a probe trained without it."""

from __future__ import annotations

import numpy as np

from analysis.interventions import erasure


def refit_correct(
    x: np.ndarray, labels: np.ndarray, mask: np.ndarray, folds: int, max_rows: int, seed: list
) -> np.ndarray:
    """Per-sequence correct counts of a probe refitted with sequences held out by fold.

    x (sequence, position, feature); returns (sequence,) float. Each fold trains on at most
    `max_rows` labelled rows of the other sequences (a seeded random subset) and predicts every
    labelled row of its own. The folds' probes are one batch of the probe solver (they share
    the rows; each problem trains on its own).
    """
    from analysis.probes.solvers import fit_labelled, logits

    n = x.shape[0]
    rng = np.random.default_rng(seed)
    seq_of_row = np.repeat(np.arange(n), mask.sum(1))
    X, y = x[mask], labels[mask]
    held_sets = np.array_split(np.arange(n), folds)
    train = np.zeros((folds, y.size), dtype=bool)
    for f, held in enumerate(held_sets):
        rows = np.flatnonzero(~np.isin(seq_of_row, held))  # the other sequences' rows
        if rows.size > max_rows:
            rows = rows[np.sort(rng.choice(rows.size, size=max_rows, replace=False))]
        train[f, rows] = True
    correct = np.zeros(n)
    if y.size == 0:
        return correct
    pred = np.full(y.shape, -1)
    held_rows = [np.isin(seq_of_row, held) for held in held_sets]
    fitted = [f for f in range(folds) if np.unique(y[train[f]]).size >= 2]
    for f in set(range(folds)) - set(fitted):  # one class (or none) to learn: predict it
        seen = y[train[f]]
        pred[held_rows[f]] = seen[0] if seen.size else -1
    if fitted:
        params, classes = fit_labelled(X, y, train[fitted], C=1.0)
        erasure.warn_unconverged(params, "refitted probe")
        for i, f in enumerate(fitted):
            pred[held_rows[f]] = classes[logits(params.take([i]), X[held_rows[f]])[0].argmax(-1)]
    np.add.at(correct, seq_of_row, pred == y)
    return correct


def refit_reference(
    x: np.ndarray, labels: np.ndarray, mask: np.ndarray, folds: int, max_rows: int, seed: list, *,
    max_iter: int = 500, tol: float = 1e-4,
) -> np.ndarray:
    """`refit_correct` the obvious way, for tests and ``bench.refit``: per fold, the same seeded
    row subset, ``StandardScaler`` + scikit-learn's ``LogisticRegression(C=1)`` (float64,
    ``max_iter``/``tol`` as given; the defaults are what the refit used before the probe
    solver)."""
    from sklearn.linear_model import LogisticRegression

    n = x.shape[0]
    rng = np.random.default_rng(seed)
    correct = np.zeros(n)
    for held in np.array_split(np.arange(n), folds):
        train = np.setdiff1d(np.arange(n), held)
        xt, yt = x[train][mask[train]], labels[train][mask[train]]
        if yt.size > max_rows:
            keep = np.sort(rng.choice(yt.size, size=max_rows, replace=False))
            xt, yt = xt[keep], yt[keep]
        xt = xt.astype(np.float64)
        xh, yh = x[held][mask[held]].astype(np.float64), labels[held][mask[held]]
        if np.unique(yt).size < 2:
            pred = np.full(yh.shape, yt[0] if yt.size else -1)
        else:
            mean, scale = xt.mean(0), xt.std(0)
            scale[scale < 1e-6] = 1.0
            probe = LogisticRegression(max_iter=max_iter, tol=tol).fit((xt - mean) / scale, yt)
            pred = probe.predict((xh - mean) / scale)
        np.add.at(correct, np.repeat(held, mask[held].sum(1)), pred == yh)
    return correct
