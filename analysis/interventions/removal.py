"""What an erasure removed and what a layer's states offer it, and the matched control's
subspace (docs/interventions.md, "What an erasure removed" and "Matched controls").

Numpy kernels on rows ``(row, feature)`` beside the erasers of
:mod:`analysis.interventions.erasure`: a layer's rank, distinct states and total variance
(`state_stats_np`); an eraser's removed variance share, mean shift and rank
(`removal_stats_np`); a random subspace of a given rank that captures a given variance
(`matched_np`).
"""

from __future__ import annotations

import numpy as np

from analysis.interventions.erasure import Eraser, check_k, random_np

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
    x: np.ndarray, eraser: Eraser, total_variance: float | None = None, rtol: float = STATE_RTOL
) -> tuple[float, float, int]:
    """What an eraser removed from some states: variance, mean shift, rank.

    The removed part of a row is ``d = x - erase(x) = ((x - offset) @ left) @ right``.

    Parameters
    ----------
    x : ndarray, (row, feature)
    eraser : Eraser
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
    if eraser.rank == 0 or rows.shape[0] == 0:
        return 0.0, 0.0, 0
    left, right = np.asarray(eraser.left, np.float64), np.asarray(eraser.right, np.float64)
    proj = rows.astype(np.float64) @ left - np.asarray(eraser.offset, np.float64) @ left  # (row, rank)
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
