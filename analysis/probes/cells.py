"""One cell's probes: fit the fold/control/full problems, score them on held-out rows.

A cell's rows come from one (run, length, layer) and one position (or position pool); every
row belongs to a sequence, and folds are folds of *sequences*. The problems fitted per cell,
in this order, are (``k`` = number of folds)::

    0 .. k-1        the target, trained on the sequences outside fold f
    k               the target, trained on every row (the stored probe)
    k+1 .. 2k       the control labelling, trained like 0 .. k-1 (absent without a control)

Metrics are numpy kernels shared by every solver, so the fast and reference paths can only
differ in their fitted coefficients.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .solvers import SOLVERS, Params, logits

#: Log-loss floor for a true class the probe gives probability 0 (never seen in training).
LOG_EPS = 1e-15
METRICS = (
    "accuracy",
    "balanced_accuracy",
    "log_loss",
    "baseline",
    "baseline_log_loss",
    "control_accuracy",
)


@dataclass
class CellScores:
    """Metrics of one cell, one value per fold (``(k,)`` arrays), plus per-row correctness.

    ``correct`` (m,) bool: whether the probe that held each row out predicts it (in
    cross-validation: the fold's probe; in transfer: the probe fitted on all training rows).
    """

    metrics: dict[str, np.ndarray]
    n_test: np.ndarray
    correct: np.ndarray


@dataclass
class CellModels:
    """What scoring a cell at another length needs: the fitted problems and, per fold, the
    training class counts (for the majority baseline) -- ``counts`` (k, K)."""

    params: Params
    counts: np.ndarray


def problems(
    y: np.ndarray, control: np.ndarray | None, fold: np.ndarray, folds: int
) -> tuple[np.ndarray, np.ndarray]:
    """Targets and training masks of a cell's problems, each (P, m) with ``P = 2k + 1``
    (``k + 1`` without a control labelling)."""
    by_fold = [fold != f for f in range(folds)]
    train = np.stack(
        by_fold + [np.ones(y.shape, dtype=bool)] + (by_fold if control is not None else [])
    )
    targets = np.stack([y] * (folds + 1) + ([control] * folds if control is not None else []))
    return targets, train


def classification_metrics(z: np.ndarray, y: np.ndarray) -> tuple[float, float, float, np.ndarray]:
    """Accuracy, balanced accuracy, log-loss and per-row correctness of logits ``z (m, K)``.

    Balanced accuracy is the mean recall over the classes present in ``y`` (scikit-learn's
    definition); log-loss is ``-mean log p(y)``, with ``p`` floored at ``LOG_EPS`` so a class the
    probe never saw costs a finite ``-log(1e-15) = 34.5``.
    """
    z = z.astype(np.float64)
    correct = np.argmax(z, axis=1) == y
    n_class = np.bincount(y, minlength=z.shape[1])
    hits = np.bincount(y[correct], minlength=z.shape[1])
    present = n_class > 0
    zmax = z.max(1, keepdims=True)
    lse = np.log(np.exp(z - zmax).sum(1)) + zmax[:, 0]
    logp = z[np.arange(y.size), y] - lse
    log_loss = float(-np.maximum(logp, np.log(LOG_EPS)).mean())
    return (
        float(correct.mean()),
        float((hits[present] / n_class[present]).mean()),
        log_loss,
        correct,
    )


def baseline_metrics(counts: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Majority-class accuracy and prior log-loss on ``y`` of a predictor that knows only the
    training class ``counts (K,)`` (ties go to the lowest class)."""
    freq = counts / counts.sum()
    acc = float(np.mean(y == np.argmax(counts)))
    ll = float(-np.log(np.maximum(freq[y], LOG_EPS)).mean())
    return acc, ll


def fit_cell(
    X: np.ndarray,
    y: np.ndarray,
    control: np.ndarray | None,
    fold: np.ndarray,
    *,
    folds: int,
    n_classes: int,
    method: str,
    C: float,
) -> tuple[CellScores, CellModels]:
    """Fit a cell's ``2k + 1`` problems and score the folds on their held-out sequences.

    Parameters
    ----------
    X : ndarray, shape (m, d)
        Hidden states of the cell's rows (float16 from the store is cast to float32 here).
    y, control : ndarray of int, shape (m,)
        Target and control class indices (``0 .. n_classes-1``); ``control`` may be None.
    fold : ndarray of int, shape (m,)
        The fold of each row's sequence.
    """
    X = X.astype(np.float32)
    targets, train = problems(y, control, fold, folds)
    params = SOLVERS[method](X, targets, train, n_classes, C)
    z = logits(params, X)  # (P, m, K)
    counts = np.stack([np.bincount(y[fold != f], minlength=n_classes) for f in range(folds)])
    out = {k: np.full(folds, np.nan) for k in METRICS}
    n_test = np.zeros(folds, dtype=np.int64)
    correct = np.zeros(y.size, dtype=bool)
    for f in range(folds):
        test = fold == f
        n_test[f] = test.sum()
        acc, bal, ll, ok = classification_metrics(z[f][test], y[test])
        out["accuracy"][f], out["balanced_accuracy"][f], out["log_loss"][f] = acc, bal, ll
        out["baseline"][f], out["baseline_log_loss"][f] = baseline_metrics(counts[f], y[test])
        if control is not None:
            out["control_accuracy"][f] = classification_metrics(
                z[folds + 1 + f][test], control[test]
            )[0]
        correct[test] = ok
    return CellScores(out, n_test, correct), CellModels(params, counts)


def score_cell(
    models: CellModels, X: np.ndarray, y: np.ndarray, control: np.ndarray | None, *, folds: int
) -> CellScores:
    """Score probes fitted elsewhere (another length) on every row of this cell.

    Each fold's probe scores all rows, so the ``fold`` axis keeps its meaning ("the probe fitted
    without fold f"); per-row correctness comes from the probe fitted on all training rows.
    """
    X = X.astype(np.float32)
    z = logits(models.params, X)
    out = {k: np.full(folds, np.nan) for k in METRICS}
    for f in range(folds):
        acc, bal, ll, _ = classification_metrics(z[f], y)
        out["accuracy"][f], out["balanced_accuracy"][f], out["log_loss"][f] = acc, bal, ll
        out["baseline"][f], out["baseline_log_loss"][f] = baseline_metrics(models.counts[f], y)
        if control is not None:
            out["control_accuracy"][f] = classification_metrics(z[folds + 1 + f], control)[0]
    correct = np.argmax(z[folds], axis=1) == y
    return CellScores(out, np.full(folds, y.size, dtype=np.int64), correct)
