"""Linear erasure: directions, subspaces, INLP and LEACE, all as one low-rank affine map.

Every eraser here is ``x -> x - ((x - offset) @ left) @ right`` on row vectors ``x
(feature,)``, with ``left (feature, rank)`` and ``right (rank, feature)``: the removed part has
rank ``rank`` (a few directions), so applying it costs ``O(feature x rank)`` per row instead of
the ``O(feature^2)`` of a full matrix (it matters beside a small model's own cost):

* **projection** (zero ablation): ``left = Q``, ``right = Q^T`` for an orthonormal basis ``Q
  (feature, rank)`` of the directions, ``offset = 0``: the component along the subspace is set
  to zero;
* **mean ablation**: the same, ``offset = mean``: the component is set to its mean over the
  fitting data instead of zero;
* **LEACE** (Belrose et al. 2023, closed form): with ``W = (Sigma_xx^{1/2})^+`` (whitening) and
  ``P = Q Q^T`` the orthogonal projection onto the column space of ``W Sigma_xz`` (``z`` the
  one-hot class), the eraser is ``x - W^+ P W (x - mean)``; in row form ``left = W Q``, ``right
  = Q^T W^+``. Afterwards every class has the same mean (``Sigma_xz`` becomes zero), which is
  exactly *linear guardedness*: no linear classifier beats a constant one on the fitting data.

Directions come from:

* a **probe**: ``StandardScaler`` + multinomial ``LogisticRegression`` (fitted by the probes'
  own solver, :mod:`analysis.probes.solvers`, with C chosen by cross-validation over
  sequences as `analysis.probes.probe` chooses it: :mod:`analysis.interventions.probe_fit`),
  one direction per class (one for a binary label), mapped back to raw feature space
  (``coef / scale``);
* **INLP** (Ravfogel et al. 2020), ``rounds`` times: fit a probe on the states projected so
  far, add its directions to the removed subspace. The product of the nullspace projections
  is the projection onto the complement of the span of all removed directions. **Ours**: the
  per-round classifier is the logistic probe above (the paper used linear SVMs);
* **PCA** (top-``k`` principal directions of the centred states) or **SVD** (top-``k`` right
  singular vectors of the uncentred states);
* **random**: ``k`` orthonormal directions drawn from a `numpy.random.Generator` (the control).

Layers: numpy kernels (``*_np``, arrays ``(row, feature)``), xarray wrappers that take any
dims plus ``feature`` and drop rows whose label is ``-1`` (undefined).
What an eraser removed: :mod:`analysis.interventions.removal`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
import xarray as xr

from analysis.interventions.probe_fit import (
    SEARCH_FOLDS,
    fit_probes,
    group_folds,
    warn_unconverged,
)
from analysis.interventions.removal import subspace_variance_np
from analysis.probes.solvers import fit_labelled
from store.errors import InvalidArgumentError, InvalidArrayError

#: Singular values below this fraction of the largest are treated as zero (rank decisions).
RANK_RTOL = 1e-6



class Eraser(NamedTuple):
    """``x -> x - ((x - offset) @ left) @ right``.

    Attributes
    ----------
    left : ndarray, (feature, rank)
    right : ndarray, (rank, feature)
    offset : ndarray, (feature,)
    """

    left: np.ndarray
    right: np.ndarray
    offset: np.ndarray

    @property
    def rank(self) -> int:
        """Dimension of the erased subspace."""
        return int(self.left.shape[1])


# ----------------------------------------------------------------------------- numpy kernels
def orthonormal_basis_np(directions: np.ndarray, rtol: float = RANK_RTOL) -> np.ndarray:
    """An orthonormal basis of the span of some directions.

    Parameters
    ----------
    directions : ndarray, (direction, feature)

    Returns
    -------
    ndarray, float64, (feature, rank)
        Columns span the directions; near-dependent directions count once.
    """
    directions = np.atleast_2d(np.asarray(directions, dtype=np.float64))
    if directions.size == 0:
        return np.zeros((directions.shape[-1], 0))
    _, s, vt = np.linalg.svd(directions, full_matrices=False)
    if s.max() <= 0:
        return np.zeros((directions.shape[1], 0))
    return vt[s > rtol * s.max()].T


def erase_np(x: np.ndarray, eraser: Eraser) -> np.ndarray:
    """Apply an eraser: ``x - ((x - offset) @ left) @ right``.

    Parameters
    ----------
    x : ndarray, (..., feature)
    eraser : Eraser

    Returns
    -------
    ndarray, same shape as ``x``; float32 in, float32 out (float64 stays float64).
    """
    dtype = np.result_type(x.dtype, np.float32)
    x = x.astype(dtype, copy=False)
    left, right, offset = (a.astype(dtype) for a in eraser)
    # (x - offset) @ left without materialising x - offset: one full-size temporary in all
    removed = (x @ left - offset @ left) @ right  # (..., feature)
    return np.subtract(x, removed, out=removed)


def erase_torch(x: torch.Tensor, eraser: Eraser) -> torch.Tensor:
    """`erase_np` in torch, float32: the fast path ablation uses (one fused pass over ``x``,
    ~3x faster than numpy's here). A test holds it equal to `erase_np`.

    Parameters
    ----------
    x : Tensor, (..., feature)
    eraser : Eraser

    Returns
    -------
    Tensor, float32, same shape as ``x`` (a new tensor; ``x`` is not modified).
    """
    left, right, offset = (torch.from_numpy(np.asarray(a, dtype=np.float32)) for a in eraser)
    flat = x.float().reshape(-1, x.shape[-1])  # (row, feature)
    projected = flat @ left - offset @ left  # (row, rank)
    return torch.addmm(flat, projected, right, alpha=-1).reshape(x.shape)


def projection_np(directions: np.ndarray, mean: np.ndarray | None = None) -> Eraser:
    """The eraser that removes a subspace (zero ablation, or mean ablation with `mean`).

    Parameters
    ----------
    directions : ndarray, (direction, feature)
    mean : ndarray, (feature,), optional
        Replace the subspace component by that of `mean` instead of zero.

    Returns
    -------
    Eraser
        ``left = Q``, ``right = Q^T`` for an orthonormal basis ``Q`` of the directions.
    """
    basis = orthonormal_basis_np(directions)
    offset = np.zeros(basis.shape[0]) if mean is None else np.asarray(mean, dtype=np.float64)
    return Eraser(basis, basis.T.copy(), offset)


def probe_directions_np(
    x: np.ndarray, y: np.ndarray, *, C: float | None = None, groups: np.ndarray | None = None,
    max_iter: int | None = None,
) -> np.ndarray:
    """Directions of a logistic-regression probe, in raw feature space.

    Parameters
    ----------
    x : ndarray, (row, feature)
    y : ndarray of int, (row,)
        At least two classes.
    C : float, optional
        Inverse L2 strength (scikit-learn's). Default: chosen as `analysis.probes.probe`
        chooses it, from its grid by cross-validation over ``groups``
        (:mod:`analysis.interventions.probe_fit`).
    groups : ndarray, (row,), optional
        Each row's sequence, so that the folds choosing C split sequences, not positions of
        one sequence (default: every row its own group).
    max_iter : int, optional
        Solver iterations at a fixed C (default: the probe solver's).

    Returns
    -------
    ndarray, float64, (direction, feature)
        One row per class (one for a binary label): the normal vector of each class's logit
        as a function of the raw features (``coef / scale`` after standardisation), of the
        probe fitted on every row.

    The probe is the project's probe solver (``StandardScaler`` + multinomial
    ``LogisticRegression(C)``, preconditioned so that it converges on the strongly
    correlated states of a layer); a probe that stops before its tolerance raises a
    ``RuntimeWarning``.
    """
    classes = np.unique(y)
    if classes.size < 2:
        raise InvalidArrayError(
            f"a probe needs at least two classes in the labels; found only {classes.tolist()}: "
            "use more sequences, or a layer/length where the label varies"
        )
    x = np.asarray(x)
    groups = np.arange(x.shape[0]) if groups is None else np.asarray(groups)
    folds = min(SEARCH_FOLDS, np.unique(groups).size)
    if C is not None or folds < 2:
        params, _ = fit_labelled(x, y, C=1.0 if C is None else C, max_iter=max_iter)
        warn_unconverged(params, "probe direction")
    else:
        fitted = fit_probes(x, y, group_folds(groups, folds), folds=folds, what="probe direction")
        params = fitted.params.take([fitted.folds])
    w = params.original_space()[0][0].T  # (class, feature)
    # binary: scikit-learn's one vector is the difference of the two centred class vectors
    return (w[1] - w[0])[None] if classes.size == 2 else w


def inlp_np(
    x: np.ndarray, y: np.ndarray, rounds: int, *, C: float | None = None,
    groups: np.ndarray | None = None,
) -> np.ndarray:
    """Iterative nullspace projection: the basis of everything removed in `rounds` rounds.

    Parameters
    ----------
    x : ndarray, (row, feature)
    y : ndarray of int, (row,)
    rounds : int
        Probes fitted; stops early once nothing is left to remove.
    C, groups
        As in `probe_directions_np` (by default each round chooses its own C).

    Returns
    -------
    ndarray, float64, (feature, rank)
        Orthonormal basis of the removed subspace (rank <= rounds x classes).
    """
    x = np.asarray(x, dtype=np.float64)
    basis = np.zeros((x.shape[1], 0))
    for _ in range(rounds):
        projected = x - (x @ basis) @ basis.T
        w = probe_directions_np(projected, y, C=C, groups=groups)
        w = w - (w @ basis) @ basis.T  # numerically orthogonal to what is already gone
        if orthonormal_basis_np(w).shape[1] == 0:
            break
        basis = orthonormal_basis_np(np.vstack([basis.T, w]))
        if basis.shape[1] >= x.shape[1]:
            break
    return basis


def leace_np(x: np.ndarray, y: np.ndarray, rtol: float = 1e-8) -> Eraser:
    """Closed-form LEACE for a class label (Belrose et al. 2023, Theorem 4.3).

    Parameters
    ----------
    x : ndarray, (row, feature)
    y : ndarray of int, (row,)
    rtol : float
        Covariance eigenvalues below ``rtol`` x the largest are treated as zero (the
        pseudo-inverse square root ignores those directions).

    Returns
    -------
    Eraser
        ``left = W Q``, ``right = Q^T W^+``, ``offset`` = the mean of ``x``; rank at most
        classes - 1.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    mean = x.mean(0)
    xc = x - mean
    classes = np.unique(y)
    z = (np.asarray(y)[:, None] == classes[None, :]).astype(np.float64)
    sigma_xz = xc.T @ (z - z.mean(0)) / n  # (feature, class)
    lam, vec = np.linalg.eigh(xc.T @ xc / n)
    keep = lam > rtol * max(lam.max(), 0.0)
    root = np.sqrt(lam[keep])
    whiten = (vec[:, keep] / root) @ vec[:, keep].T  # W = (Sigma^{1/2})^+
    unwhiten = (vec[:, keep] * root) @ vec[:, keep].T  # W^+ = Sigma^{1/2}
    basis = orthonormal_basis_np((whiten @ sigma_xz).T)  # Q: P = Q Q^T
    return Eraser(whiten @ basis, basis.T @ unwhiten, mean)


def pca_np(x: np.ndarray, k: int, *, center: bool = True) -> np.ndarray:
    """Top-`k` principal (``center``) or right-singular (not centred) directions.

    Parameters
    ----------
    x : ndarray, (row, feature)
    k : int

    Returns
    -------
    ndarray, float64, (k, feature)
        Orthonormal rows, largest variance (or second moment) first.
    """
    x = np.asarray(x, dtype=np.float64)
    if center:
        x = x - x.mean(0)
    lam, vec = np.linalg.eigh(x.T @ x)  # (feature, feature): cheap for rows >> features
    return vec[:, np.argsort(lam)[::-1][:k]].T


def random_np(n_features: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """`k` orthonormal directions, uniformly random (Haar), as rows ``(k, feature)``."""
    q, r = np.linalg.qr(rng.standard_normal((n_features, k)))
    return (q * np.sign(np.diag(r))).T  # sign fix makes the draw Haar-uniform


# ----------------------------------------------------------------------------- matched control
def matched_np(
    x: np.ndarray, variance: float, k: int, rng: np.random.Generator, *, tol: float = 1e-10
) -> np.ndarray:
    """A random k-dimensional subspace that captures a given variance of the states.

    The matched control of an erasure (docs/interventions.md, "Matched controls"): a
    Haar-random orthonormal k-frame ``R`` is moved along the path ``orth((1 - t) R + t E)``
    towards the k principal directions ``E`` on the needed side (the top k when ``R`` captures
    too little, the bottom k when too much; ``E`` rotated to the frame nearest ``R``, which
    spans the same subspace) and stopped, by bisection on ``t``, where it captures exactly
    ``variance``. The result is as random as the target allows: ``R`` itself when it already
    matches, the top-k principal subspace when the target is all the variance k directions can
    hold (the states of a degenerate layer).

    Parameters
    ----------
    x : ndarray, (row, feature)
        The fitting rows.
    variance : float
        Target ``trace(Q^T Cov(x) Q)``, clipped into what k directions can capture.
    k : int
        Dimension of the subspace.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray, float64, (k, feature)
        Orthonormal rows.
    """
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[1]
    check_k(k, d, f"matched:{k}")
    xc = x - x.mean(0)
    cov = xc.T @ xc / max(x.shape[0], 1)
    lam, vec = np.linalg.eigh(cov)  # ascending
    top, bottom = vec[:, ::-1][:, :k], vec[:, :k]
    hi, lo = float(lam[::-1][:k].sum()), float(lam[:k].sum())
    target = min(max(float(variance), lo), hi)
    start = random_np(d, k, rng).T  # (feature, k)
    v0 = subspace_variance_np(start, cov)
    scale = max(hi, 1e-300)
    if abs(v0 - target) <= tol * scale:
        return start.T
    goal = top if target > v0 else bottom
    u, _, vt = np.linalg.svd(goal.T @ start)  # Procrustes: goal @ (u vt) is nearest to start
    goal = goal @ (u @ vt)

    def frame(t: float) -> np.ndarray:
        q, r = np.linalg.qr((1 - t) * start + t * goal)
        return q * np.sign(np.diag(r))

    below = target > v0  # whether v(t) < target at the low end
    a, b = 0.0, 1.0
    for _ in range(200):
        mid = (a + b) / 2
        v = subspace_variance_np(frame(mid), cov)
        if abs(v - target) <= tol * scale:
            a = b = mid
            break
        if (v < target) == below:
            a = mid
        else:
            b = mid
    return frame((a + b) / 2).T


# ----------------------------------------------------------------------------- xarray layer
def _rows_x(hidden: xr.DataArray) -> np.ndarray:
    """Stack every dim but ``feature`` into rows: (row, feature) float64."""
    if "feature" not in hidden.dims:
        raise InvalidArrayError(
            f"hidden must have a 'feature' dim; its dims are {hidden.dims}; rename the feature dim to 'feature'"
        )
    others = [d for d in hidden.dims if d != "feature"]
    x = np.asarray(hidden.transpose(*others, "feature").values, dtype=np.float64)
    return x.reshape(-1, hidden.sizes["feature"])


def _rows(hidden: xr.DataArray, labels: xr.DataArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labelled rows: x (row, feature), y (row,) and each row's group (its index along
    ``sequence``, or the row itself without that dim); rows whose label is -1 are dropped."""
    x = _rows_x(hidden)
    others = [d for d in hidden.dims if d != "feature"]
    if set(labels.dims) != set(others):
        raise InvalidArrayError(
            f"labels have dims {labels.dims}; expected the dims of hidden other than "
            f"'feature': {tuple(others)}"
        )
    y = np.asarray(labels.transpose(*others).values).reshape(-1)
    shape = tuple(hidden.sizes[d] for d in others)
    if "sequence" in others:
        groups = np.indices(shape)[others.index("sequence")].reshape(-1)
    else:
        groups = np.arange(y.size)
    keep = y >= 0
    return x[keep], y[keep].astype(np.int64), groups[keep]


def _directions(values: np.ndarray, features: int) -> xr.DataArray:
    values = np.asarray(values, dtype=np.float64).reshape(-1, features)
    return xr.DataArray(values, dims=("direction", "feature"))


def _eraser(eraser: Eraser, method: str) -> xr.Dataset:
    return xr.Dataset(
        {
            "left": (("feature", "component"), eraser.left),
            "right": (("component", "feature_out"), eraser.right),
            "offset": (("feature",), eraser.offset),
        },
        attrs={"method": method, "rank": eraser.rank,
               "formula": "x - ((x - offset) @ left) @ right"},
    )


def probe_directions(hidden: xr.DataArray, labels: xr.DataArray, *,
                     C: float | None = None) -> xr.DataArray:
    """Directions of a logistic probe fitted to every labelled row.

    Parameters
    ----------
    hidden : xarray.DataArray
        Dims (..., feature), e.g. (sequence, position, feature).
    labels : xarray.DataArray
        Int, the dims of `hidden` other than ``feature``; -1 rows are dropped.
    C : float, optional
        Inverse L2 strength; default chosen by cross-validation over sequences, as
        `analysis.probes.probe` chooses it.

    Returns
    -------
    xarray.DataArray, (direction, feature)
        One direction per class (one for binary labels), in raw feature space.
    """
    x, y, groups = _rows(hidden, labels)
    return _directions(probe_directions_np(x, y, C=C, groups=groups), hidden.sizes["feature"])


def inlp(hidden: xr.DataArray, labels: xr.DataArray, rounds: int, *,
         C: float | None = None) -> xr.DataArray:
    """INLP: the orthonormal directions removed by `rounds` rounds of probe-and-project.

    Parameters
    ----------
    hidden : xarray.DataArray, (..., feature)
    labels : xarray.DataArray, int, dims of `hidden` without ``feature``
    rounds : int

    Returns
    -------
    xarray.DataArray, (direction, feature)
        Orthonormal rows spanning the removed subspace; erase them with
        ``projection_eraser``.
    """
    if rounds < 1:
        raise InvalidArgumentError(f"INLP needs rounds >= 1, got {rounds}")
    x, y, groups = _rows(hidden, labels)
    return _directions(inlp_np(x, y, rounds, C=C, groups=groups).T, hidden.sizes["feature"])


def pca_directions(hidden: xr.DataArray, k: int, *, center: bool = True) -> xr.DataArray:
    """Top-`k` principal (or, ``center=False``, singular) directions of some states.

    Parameters
    ----------
    hidden : xarray.DataArray, (..., feature)
    k : int
        At most the feature dimension.

    Returns
    -------
    xarray.DataArray, (direction, feature)
    """
    check_k(k, hidden.sizes["feature"], "pca" if center else "svd")
    x = _rows_x(hidden)
    return _directions(pca_np(x, k, center=center), hidden.sizes["feature"])


def random_directions(n_features: int, k: int, rng: np.random.Generator) -> xr.DataArray:
    """`k` uniformly random orthonormal directions (the control for a subspace of size k).

    Returns
    -------
    xarray.DataArray, (direction, feature)
    """
    check_k(k, n_features, "random")
    return _directions(random_np(n_features, k, rng), n_features)


def check_k(k: int, n_features: int, what: str, where: str = "") -> None:
    """Raise a ValueError if a subspace size is not in ``1..n_features``.

    Parameters
    ----------
    k : int
    n_features : int
    what : str
        The setting, named in the message (e.g. "pca:64").
    where : str
        Appended after "the feature dimension", e.g. " of run 'r0'".
    """
    if not 1 <= int(k) <= n_features:
        raise InvalidArgumentError(
            f"k={k} for {what!r} is not within 1..{n_features}, the feature dimension"
            f"{where}; choose k <= {n_features}"
        )


def projection_eraser(directions: xr.DataArray, mean: xr.DataArray | None = None) -> xr.Dataset:
    """The eraser removing the span of some directions (zero, or mean ablation).

    Parameters
    ----------
    directions : xarray.DataArray, (direction, feature)
        Any number of (not necessarily orthonormal) directions.
    mean : xarray.DataArray, (feature,), optional
        Given: mean ablation (the component is set to that of `mean`); else zero ablation.

    Returns
    -------
    xarray.Dataset
        ``left (feature, component)``, ``right (component, feature_out)``, ``offset
        (feature)``; attrs ``method`` ("zero" or "mean"), ``rank``, ``formula``.
    """
    dims = set(directions.dims)
    if dims != {"direction", "feature"}:
        raise InvalidArrayError(
            f"directions must have dims ('direction', 'feature'), got {directions.dims}; "
            "select one layer (and run) first, e.g. directions.sel(layer='L1')"
        )
    values = directions.transpose("direction", "feature").values
    m = None if mean is None else np.asarray(mean.values)
    return _eraser(projection_np(values, m), "mean" if mean is not None else "zero")


def leace(hidden: xr.DataArray, labels: xr.DataArray) -> xr.Dataset:
    """Fit closed-form LEACE on labelled states.

    Parameters
    ----------
    hidden : xarray.DataArray, (..., feature)
    labels : xarray.DataArray, int, dims of `hidden` without ``feature``; -1 rows dropped

    Returns
    -------
    xarray.Dataset
        An eraser (``left``, ``right``, ``offset``; attrs ``rank``) for `erase`; afterwards
        every class has the same mean on these rows.
    """
    x, y, _ = _rows(hidden, labels)
    return _eraser(leace_np(x, y), "leace")


def erase(hidden: xr.DataArray, eraser: xr.Dataset) -> xr.DataArray:
    """Apply an eraser to states of any shape.

    Parameters
    ----------
    hidden : xarray.DataArray, (..., feature)
    eraser : xarray.Dataset
        From `projection_eraser` or `leace`.

    Returns
    -------
    xarray.DataArray, same dims as `hidden`.
    """
    if "feature" not in hidden.dims:
        raise InvalidArrayError(
            f"hidden must have a 'feature' dim; its dims are {hidden.dims}; rename the feature dim to 'feature'"
        )
    factors = Eraser(
        eraser["left"].transpose("feature", "component").values,
        eraser["right"].transpose("component", "feature_out").values,
        eraser["offset"].values,
    )
    moved = hidden.transpose(..., "feature")
    out = moved.copy(data=erase_np(np.asarray(moved.values), factors))
    return out.transpose(*hidden.dims)
