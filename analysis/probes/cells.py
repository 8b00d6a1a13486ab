"""One cell's probes: choose C by nested cross-validation, fit, and score held-out rows.

A cell's rows come from one (run, length, layer) and one position (or position pool); every
row belongs to a sequence, and folds are folds of *sequences*. With a fixed C the problems
fitted per cell, in this order, are (``k`` = number of folds)::

    0 .. k-1        the target, trained on the sequences outside fold f
    k               the target, trained on every row (the stored probe)
    k+1 .. 2k       the control labelling, trained like 0 .. k-1 (absent without a control)

With a grid of C values (the default, :data:`C_GRID`), C is chosen per cell by cross-validation
nested inside the folds that score the probe, grouped by sequence like them:

* outer fold f's probe gets the C with the lowest held-out log-loss over its *inner* folds:
  the other outer folds (``k >= 3``; with ``k = 2``, the two halves of the other fold, split by
  sequence). Training on "everything but folds f and g" serves outer fold f validated on g and
  outer fold g validated on f, so the inner problems are the ``k (k - 1) / 2`` pairs, not
  ``k (k - 1)``;
* the stored probe (all rows) gets the C with the lowest log-loss of the outer folds' probes
  (plain k-fold cross-validation on every row; its score is the outer folds' score);
* the control labelling is fitted with the same procedure (its own inner choice per fold), so
  selectivity compares like with like.

Every problem is fitted along the whole grid with warm starts (:mod:`analysis.probes.solvers`).
A C at which one of the fits a choice depends on did not converge is not eligible for that
choice; among eligible values, validation log-losses within :data:`TIE` of the lowest count as
tied and the smallest C (the strongest penalty) wins, so solver noise on a plateau cannot flip
the choice. The probes that are scored and stored are then all converged unless no C was
eligible at all (``Selection.converged``).

Metrics are numpy kernels shared by every solver, so the fast and reference paths can only
differ in their fitted coefficients.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .solvers import PATHS, Params, logits, logits_by_class, path_exact_many

#: Default C grid: log-spaced, one decade apart (scikit-learn's convention, ``C * sum(loss)``).
C_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
#: Relative margin within which validation log-losses count as tied (the smaller C wins).
TIE = 1e-3
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
class Selection:
    """How a cell's regularisation was chosen.

    ``grid`` (nC,) the C values tried (one for a fixed C); ``C`` the stored probe's C (NaN for
    the screening solver, which has none); ``fold_C`` (k,) and ``control_fold_C`` (k,) the C of
    each outer fold's target and control probes; ``cv_log_loss`` (nC,) the outer folds'
    held-out log-loss of the target at each C (what chose ``C``); ``path_converged`` (nC,)
    whether every fit at that C met its tolerance; ``converged`` whether every probe that is
    scored or stored did; ``n_iter`` the most iterations any of those took.
    """

    grid: np.ndarray
    C: float
    fold_C: np.ndarray
    control_fold_C: np.ndarray | None
    cv_log_loss: np.ndarray
    path_converged: np.ndarray
    converged: bool
    n_iter: int


@dataclass
class CellModels:
    """What scoring a cell at another length needs: the chosen problems in the fixed-C order
    (``2k + 1``) and, per fold, the training class counts (for the majority baseline) --
    ``counts`` (k, K) -- and how C was chosen."""

    params: Params
    counts: np.ndarray
    selection: Selection


def problems(
    y: np.ndarray, control: np.ndarray | None, fold: np.ndarray, folds: int
) -> tuple[np.ndarray, np.ndarray]:
    """Targets and training masks of a cell's problems at a fixed C, each (P, m) with
    ``P = 2k + 1`` (``k + 1`` without a control labelling)."""
    by_fold = [fold != f for f in range(folds)]
    train = np.stack(
        by_fold + [np.ones(y.shape, dtype=bool)] + (by_fold if control is not None else [])
    )
    targets = np.stack([y] * (folds + 1) + ([control] * folds if control is not None else []))
    return targets, train


@dataclass
class Layout:
    """The problems of a nested C search and what each is for.

    ``targets``/``train`` (P, m); ``outer`` (n_labellings, k) the problem of each outer fold;
    ``full`` the target's problem on every row; ``inner[l][f]`` the (problem, inner group)
    pairs that validate outer fold f of labelling l (labelling 0 is the target, 1 the control).
    """

    targets: np.ndarray
    train: np.ndarray
    outer: np.ndarray
    full: int
    inner: list[list[list[tuple[int, int]]]]


def search_problems(
    y: np.ndarray, control: np.ndarray | None, fold: np.ndarray, inner: np.ndarray, folds: int
) -> Layout:
    """The problems of a nested search: per labelling the inner problems (deduplicated), the
    outer folds, and (target only) the fit on every row.

    ``inner`` (m,) is each row's inner group; groups nest in folds (a group's rows share a fold),
    and outer fold f is validated on the groups outside it.
    """
    labellings = [y] + ([control] if control is not None else [])
    targets: list[np.ndarray] = []
    train: list[np.ndarray] = []
    outer = np.zeros((len(labellings), folds), dtype=np.int64)
    full = -1
    nested: list[list[list[tuple[int, int]]]] = []
    for li, lab in enumerate(labellings):
        seen: dict[bytes, int] = {}
        per_fold: list[list[tuple[int, int]]] = []
        for f in range(folds):
            pairs = []
            for h in np.unique(inner[fold != f]):
                mask = (fold != f) & (inner != h)
                if not mask.any():  # one inner group only (a tiny fold): nothing to train on
                    continue
                p = seen.setdefault(mask.tobytes(), len(targets))
                if p == len(targets):
                    targets.append(lab)
                    train.append(mask)
                pairs.append((p, int(h)))
            per_fold.append(pairs)
        nested.append(per_fold)
        for f in range(folds):
            outer[li, f] = len(targets)
            targets.append(lab)
            train.append(fold != f)
        if li == 0:
            full = len(targets)
            targets.append(lab)
            train.append(np.ones(y.shape, dtype=bool))
    return Layout(np.stack(targets), np.stack(train), outer, full, nested)


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


def group_log_loss(
    params: Params,
    X: np.ndarray,
    targets: np.ndarray,
    groups: np.ndarray,
    n_groups: int,
    wanted: np.ndarray | None = None,
) -> np.ndarray:
    """Each problem's summed log-loss (floored like :func:`classification_metrics`) over the
    rows of each group: (P, n_groups), float64 sums of float32 row losses. ``wanted`` (P,) bool
    skips problems whose losses are not needed (left 0)."""
    P = targets.shape[0]
    onehot = np.zeros((X.shape[0], n_groups))
    onehot[np.arange(X.shape[0]), groups] = 1.0
    out = np.zeros((P, n_groups))
    todo = np.flatnonzero(np.ones(P, dtype=bool) if wanted is None else wanted)
    for lo in range(0, todo.size, 16):  # a few problems at a time bounds the (p, m, K) logits
        ps = todo[lo : lo + 16]
        z = logits_by_class(params.take(ps), X)  # (p, K, m) float32; -inf: classes never seen
        zmax = z.max(1, keepdims=True)
        lse = np.log(np.exp(z - zmax).sum(1)) + zmax[:, 0]
        z_true = np.take_along_axis(z, targets[ps, None, :], 1)[:, 0]
        loss = np.minimum(lse - z_true, np.float32(-np.log(LOG_EPS)))
        out[ps] = loss.astype(np.float64) @ onehot
    return out


def choose(loss: np.ndarray, eligible: np.ndarray) -> int:
    """Index of the chosen C: the smallest eligible C whose validation ``loss`` is within
    :data:`TIE` of the lowest eligible loss; 0 (the strongest penalty) when none is eligible."""
    if not eligible.any():
        return 0
    best = loss[eligible].min()
    return int(np.flatnonzero(eligible & (loss <= best + TIE * abs(best)))[0])


@dataclass
class CellInput:
    """One cell's rows for :func:`fit_cells`: hidden states ``X`` (m, d), target ``y`` and
    ``control`` (or None) class indices, ``fold`` and (for a C search with 2 folds) ``inner``
    group of each row's sequence."""

    X: np.ndarray
    y: np.ndarray
    control: np.ndarray | None
    fold: np.ndarray
    inner: np.ndarray | None = None


def fit_cell(
    X: np.ndarray,
    y: np.ndarray,
    control: np.ndarray | None,
    fold: np.ndarray,
    *,
    folds: int,
    n_classes: int,
    method: str,
    C: float | Sequence[float],
    inner: np.ndarray | None = None,
) -> tuple[CellScores, CellModels]:
    """Choose C, fit the cell's probes and score the folds on their held-out sequences.

    Parameters
    ----------
    X : ndarray, shape (m, d)
        Hidden states of the cell's rows (float16 from the store is cast to float32 here).
    y, control : ndarray of int, shape (m,)
        Target and control class indices (``0 .. n_classes-1``); ``control`` may be None.
    fold : ndarray of int, shape (m,)
        The fold of each row's sequence.
    C : float or sequence of float
        A fixed C, or the grid to choose from by nested cross-validation.
    inner : ndarray of int, shape (m,), optional
        Each row's inner group (by sequence, nested in its fold) for the C search; default the
        fold itself, which needs ``folds >= 3``.
    """
    cell = CellInput(X, y, control, fold, inner)
    return fit_cells([cell], folds=folds, n_classes=n_classes, method=method, C=C)[0]


def fit_cells(
    cells: Sequence[CellInput],
    *,
    folds: int,
    n_classes: int,
    method: str,
    C: float | Sequence[float],
) -> list[tuple[CellScores, CellModels]]:
    """:func:`fit_cell` for several cells of one width (one layer of one run); the exact solver
    fits all their problems in one lockstep batch (:func:`~analysis.probes.solvers.path_exact_many`),
    with the same result as one cell at a time."""
    grid = np.sort(np.atleast_1d(np.asarray(C, dtype=np.float64)))
    fixed = method == "screen" or grid.size == 1
    path_grid = [float(c) for c in (grid[:1] if fixed else grid)]
    layouts: list[Layout | None] = []
    problem_sets = []
    for c in cells:
        X = c.X.astype(np.float32)
        if fixed:
            layouts.append(None)
            problem_sets.append((X, *problems(c.y, c.control, c.fold, folds)))
            continue
        inner = c.inner
        if inner is None:
            if folds < 3:
                raise ValueError("choosing C with 2 folds needs inner groups (inner=...)")
            inner = c.fold
        search = search_problems(c.y, c.control, c.fold, inner, folds)
        layouts.append(search)
        problem_sets.append((X, search.targets, search.train))
    if method == "exact":
        paths = path_exact_many(problem_sets, n_classes, path_grid)
    else:
        paths = [PATHS[method](X, t, r, n_classes, path_grid) for X, t, r in problem_sets]
    out = []
    for c, lay, (X, _, _), path in zip(cells, layouts, problem_sets, paths, strict=True):
        if lay is None:
            params, selection = _fixed_selection(path[0], c.control, folds, method, grid)
        else:
            inner = c.fold if c.inner is None else c.inner
            params, selection = _choose_C(X, c.y, c.fold, inner, folds, lay, path, grid)
        out.append(_score(X, c.y, c.control, c.fold, folds, n_classes, params, selection))
    return out


def _score(X, y, control, fold, folds, n_classes, params, selection):
    """Held-out metrics of the chosen probes (fixed-C order) on their folds."""
    z = logits(params, X)  # (2k+1, m, K)
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
    return CellScores(out, n_test, correct), CellModels(params, counts, selection)


def _fixed_selection(params, control, folds, method, grid):
    """The ``2k + 1`` problems at one C (or the screening solver, which has no C)."""
    C = np.nan if method == "screen" else float(grid[0])
    both = params.converged.all()
    selection = Selection(
        grid=np.array([C]),
        C=C,
        fold_C=np.full(folds, C),
        control_fold_C=None if control is None else np.full(folds, C),
        cv_log_loss=np.full(1, np.nan),
        path_converged=np.array([both]),
        converged=bool(both),
        n_iter=int(params.n_iter.max()),
    )
    return params, selection


def _choose_C(X, y, fold, inner, folds, lay, path, grid):
    """Choose every C of a nested search from its fitted ``path`` (one Params per C of the
    ascending ``grid``); returns the chosen problems in fixed-C order and the selection."""
    groups, group_id = np.unique(inner, return_inverse=True)
    n_groups = groups.size
    group_fold = np.zeros(n_groups, dtype=np.int64)
    group_fold[group_id] = fold
    size = np.bincount(group_id, minlength=n_groups).astype(np.float64)
    conv = np.stack([p.converged for p in path])  # (nC, P)
    wanted = np.ones(lay.targets.shape[0], dtype=bool)
    wanted[lay.full] = False  # trained on every row: validates nothing
    loss = np.stack([group_log_loss(p, X, lay.targets, group_id, n_groups, wanted) for p in path])
    h_index = {int(h): i for i, h in enumerate(groups)}

    # the stored probe: plain k-fold cross-validation of the outer probes on every row
    own = group_fold[None, :] == np.arange(folds)[:, None]  # (k, groups): group in fold f
    cv = np.einsum("cfg,fg->c", loss[:, lay.outer[0]], own) / y.size
    full_choice = choose(cv, conv[:, lay.outer[0]].all(1) & conv[:, lay.full])

    def inner_choice(li: int, f: int) -> int:
        pairs = lay.inner[li][f]
        if not pairs:  # no inner split possible: the outer cross-validation's choice
            return full_choice
        ps = np.array([p for p, _ in pairs])
        hs = np.array([h_index[h] for _, h in pairs])
        val = loss[:, ps, hs].sum(1) / size[hs].sum()
        eligible = conv[:, ps].all(1) & conv[:, lay.outer[li, f]]
        return choose(val, eligible)

    n_lab = lay.outer.shape[0]
    chosen = np.array([[inner_choice(li, f) for f in range(folds)] for li in range(n_lab)])
    picks = [(chosen[0, f], lay.outer[0, f]) for f in range(folds)]
    picks.append((full_choice, lay.full))
    if n_lab > 1:
        picks += [(chosen[1, f], lay.outer[1, f]) for f in range(folds)]
    params = Params.concat([path[j].take(np.array([p])) for j, p in picks])
    selection = Selection(
        grid=grid,
        C=float(grid[full_choice]),
        fold_C=grid[chosen[0]],
        control_fold_C=grid[chosen[1]] if n_lab > 1 else None,
        cv_log_loss=cv,
        path_converged=conv.all(1),
        converged=bool(params.converged.all()),
        n_iter=int(params.n_iter.max()),
    )
    return params, selection


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
