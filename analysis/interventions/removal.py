"""What an erasure removed and what a layer's states offer it (docs/interventions.md, "What an
erasure removed").

Numpy kernels on rows ``(row, feature)`` beside the erasers of
:mod:`analysis.interventions.erasure`: a layer's rank, distinct states and total variance
(`state_stats_np`); an eraser's removed variance share, mean shift and rank (`removal_stats_np`,
on the eraser's factors ``left, right, offset``: ``removal_stats_np(x, *eraser)``); the
variance a subspace captures (`subspace_variance_np`).
"""

from __future__ import annotations

import numpy as np

#: Rank of stored *states* (and of what an erasure removed from them): singular values below
#: this fraction of the largest count as zero. Looser than the erasers' `RANK_RTOL` because
#: states are stored as float16, whose rounding (2^-11 ~ 4.9e-4 of a value) gives every
#: continuous layer full rank at 1e-6 (docs/interventions.md, "What an erasure removed").
STATE_RTOL = 1e-3


def _rank_of_gram(gram: np.ndarray, rtol: float) -> int:
    """Numerical rank of a matrix from its Gram matrix (eigenvalues = squared singular values)."""
    lam = np.linalg.eigvalsh(gram)
    top = float(lam.max()) if lam.size else 0.0
    return int((lam > (rtol**2) * top).sum()) if top > 0 else 0


def state_stats_np(x: np.ndarray, rtol: float = STATE_RTOL) -> tuple[int, int, float]:
    """What a layer's states offer an erasure: rank, distinct values, total variance.

    Parameters
    ----------
    x : ndarray, (row, feature)
        The states (any float dtype; reductions are float64).
    rtol : float
        Singular values of the centred states below ``rtol`` x the largest count as zero.

    Returns
    -------
    rank : int
        Numerical rank of the centred states: the dimensions they vary in.
    distinct : int
        Number of distinct state vectors (bit for bit).
    total_variance : float
        Sum of the per-feature variances (the trace of the covariance).
    """
    x = np.ascontiguousarray(x)
    if x.shape[0] == 0:
        return 0, 0, float("nan")
    rows = x.reshape(x.shape[0], -1)
    distinct = int(np.unique(rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1])))).size)
    xc = rows.astype(np.float64) - rows.mean(0, dtype=np.float64)
    return _rank_of_gram(xc.T @ xc, rtol), distinct, float((xc * xc).sum() / rows.shape[0])


def total_variance_np(x: np.ndarray) -> float:
    """Sum of the per-feature variances of rows ``(row, feature)`` (float64)."""
    rows = np.asarray(x).reshape(np.asarray(x).shape[0], -1)
    return float(rows.var(0, dtype=np.float64).sum()) if rows.shape[0] else float("nan")


def removal_stats_np(
    x: np.ndarray, left: np.ndarray, right: np.ndarray, offset: np.ndarray, *,
    total_variance: float | None = None, rtol: float = STATE_RTOL,
) -> tuple[float, float, int]:
    """What an eraser removed from some states: variance, mean shift, rank.

    The removed part of a row is ``d = x - erase(x) = ((x - offset) @ left) @ right``.

    Parameters
    ----------
    x : ndarray, (row, feature)
    left, right, offset : ndarray, (feature, rank), (rank, feature), (feature,)
        The eraser's factors (an `analysis.interventions.erasure.Eraser` unpacks into them).
    total_variance : float, optional
        The states' total variance (`state_stats_np`), if already known.

    Returns
    -------
    variance_removed : float
        ``trace Cov(d) / trace Cov(x)``: for an orthogonal projection, the share of the states'
        variance lying in the erased subspace; for LEACE (oblique) the variance of the change
        it makes, relative to the states' (1 = everything varied is gone).
    mean_shift : float
        ``|mean(d)| / sqrt(trace Cov(x))``: how far the erasure moved the states' mean, in
        units of their root-mean-square spread around it.
    removed_rank : int
        Numerical rank of the removed parts ``d`` (at most the eraser's rank; less when the
        states do not reach every erased direction).
    """
    rows = np.asarray(x).reshape(np.asarray(x).shape[0], -1)
    if total_variance is None:
        total_variance = total_variance_np(rows)
    left, right = np.asarray(left, np.float64), np.asarray(right, np.float64)
    if left.shape[1] == 0 or rows.shape[0] == 0:
        return 0.0, 0.0, 0
    proj = rows.astype(np.float64) @ left - np.asarray(offset, np.float64) @ left  # (row, rank)
    mean = proj.mean(0)
    centred = proj - mean
    cov = centred.T @ centred / rows.shape[0]  # (rank, rank)
    removed_var = float(np.einsum("ij,jk,ik->", right.T, cov, right.T))  # trace(R^T C R)
    shift = float(np.linalg.norm(mean @ right))
    # rank of d = proj @ right: the nonzero eigenvalues of R^T G R are those of G^1/2 R R^T G^1/2
    lam, vec = np.linalg.eigh(proj.T @ proj)
    half = (vec * np.sqrt(np.clip(lam, 0, None))) @ vec.T
    rank = _rank_of_gram(half @ (right @ right.T) @ half, rtol)
    if not total_variance > 0:
        return (0.0 if removed_var <= 0 else float("inf")), float("nan"), rank
    return removed_var / total_variance, shift / float(np.sqrt(total_variance)), rank


def subspace_variance_np(basis: np.ndarray, cov: np.ndarray) -> float:
    """``trace(Q^T Sigma Q)``: the variance an orthonormal basis ``Q (feature, k)`` captures."""
    return float(np.einsum("ik,ij,jk->", basis, cov, basis))
