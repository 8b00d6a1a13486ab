"""The probes an intervention fits (the erasure's probe directions, the ablation's refitted
probe), fitted the way :func:`analysis.probes.probe` fits its own.

One cell of the probe sweep (:func:`analysis.probes.cells.fit_cell`, the exact solver): C is
chosen from :data:`~analysis.probes.cells.C_GRID` by cross-validation nested inside folds of
*groups* (sequences: rows of one sequence never straddle a split), only converged fits are
eligible, and a fit that stops short of its tolerance is reported (a ``RuntimeWarning`` naming
what was fitted). A fixed C (a number) skips the search: the probe solver at that C, as
scikit-learn's ``StandardScaler`` + ``LogisticRegression(C)`` would fit it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analysis.probes.cells import C_GRID, fit_cell
from analysis.probes.plan import inner_groups
from analysis.probes.solvers import Params, fit_labelled

#: Folds of the C search when a caller has no folds of its own (the erasure's probe).
SEARCH_FOLDS = 3


@dataclass
class FittedProbes:
    """Probes fitted on rows ``X (m, d)``: ``params`` holds ``folds`` problems, each trained
    without one fold of groups (``fold (m,)`` says which), then one trained on every row (index
    ``folds``). ``classes`` (K,) maps class index k to its label; ``C`` is the all-rows probe's
    C and ``fold_C`` (folds,) each fold probe's; ``converged`` whether every one of them met
    its tolerance."""

    params: Params
    classes: np.ndarray
    fold: np.ndarray
    C: float
    fold_C: np.ndarray
    converged: bool

    @property
    def folds(self) -> int:
        return int(self.fold_C.size)


def group_folds(groups: np.ndarray, folds: int) -> np.ndarray:
    """Each row's fold: the distinct groups, in order of first appearance, split into
    ``folds`` contiguous runs (``numpy.array_split``), so that a group's rows share a fold."""
    _, first, index = np.unique(groups, return_index=True, return_inverse=True)
    order = np.argsort(first)  # group ids in order of appearance
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    fold_of_group = np.zeros(order.size, dtype=np.int64)
    for f, members in enumerate(np.array_split(np.arange(order.size), folds)):
        fold_of_group[members] = f
    return fold_of_group[rank[index.ravel()]]


def fit_probes(
    X: np.ndarray,
    y: np.ndarray,
    fold: np.ndarray,
    *,
    folds: int,
    C: float | Sequence[float] = C_GRID,
    seed: int | Sequence[int] = 0,
    what: str = "probe",
) -> FittedProbes:
    """Fit one probe per fold (trained on the other folds) and one on every row.

    Parameters
    ----------
    X : ndarray, (m, d)
    y : ndarray of int, (m,)
        Labels of any values, at least two distinct.
    fold : ndarray of int, (m,)
        Each row's fold, ``0 .. folds - 1`` (rows of one group in one fold: `group_folds`).
    folds : int
    C : float or sequence of float
        A fixed C, or the grid to choose from (default :data:`C_GRID`, as `probe`).
    seed : int or sequence of int
        Seeds the inner split when ``folds == 2`` (halves of each fold's groups).
    what : str
        Named in the warning when a fit stops short of its tolerance.
    """
    classes, index = np.unique(np.asarray(y), return_inverse=True)
    index = index.ravel().astype(np.int64)
    fold = np.asarray(fold, dtype=np.int64)
    grid = np.atleast_1d(np.asarray(C, dtype=np.float64))
    if grid.size == 1:
        train = np.stack([fold != f for f in range(folds)] + [np.ones(fold.shape, dtype=bool)])
        params, _ = fit_labelled(X, index, train, C=float(grid[0]))
        chosen = np.full(folds, float(grid[0]))
        probes = FittedProbes(params, classes, fold, float(grid[0]), chosen,
                              bool(params.converged.all()))
    else:
        inner = inner_groups(fold, folds, np.random.default_rng(seed))
        _, models = fit_cell(X, index, None, fold, folds=folds, n_classes=classes.size,
                             method="exact", C=tuple(grid), inner=inner)
        sel = models.selection
        probes = FittedProbes(models.params.take(np.arange(folds + 1)), classes, fold, sel.C,
                              np.asarray(sel.fold_C, dtype=np.float64), sel.converged)
    warn_unconverged(probes.params, what)
    return probes


def warn_unconverged(params: Params, what: str) -> None:
    """A ``RuntimeWarning`` naming ``what`` when any problem of ``params`` stopped short."""
    stopped = int((~np.asarray(params.converged)).sum())
    if stopped:
        warnings.warn(
            f"{stopped} of {params.converged.size} {what} fit(s) stopped before the gradient "
            "fell below the solver's tolerance; their directions are the last iterate's "
            "(a smaller C regularises more and converges sooner)",
            RuntimeWarning,
            stacklevel=3,
        )
