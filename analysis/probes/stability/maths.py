"""The measure: a probe's subspace, the overlap of two, its random-subspace null, the alignment
of two runs' states, and the seed-level jackknife interval of a mean over seed pairs; the
constants of the sweep."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.stats

#: Sequences both runs must hold for the map to be fitted on stored states alone.
MIN_SHARED = 32


#: At most this many sequences (every labelled position of each) feed one map.
MAP_SEQUENCES = 512


#: How a pair's two runs get states on the same sequences: "auto" (shared sequences, else a
#: re-run), "shared" or "rerun".
INPUTS = ("auto", "shared", "rerun")


#: Label permutations whose refitted probes give the shuffled-label null (their overlaps averaged).
SHUFFLES = 20


#: Single-thread CPU seconds per (row x feature^2) of a map (the cross-product and the held-out
#: score, every labelled row of the sequences it uses). This and the two below were measured on the
#: quick demo store (3 tasks x 5 architectures x 2 seeds, 192 sequences of length 40, pooled
#: probes, re-run: 23.1 s of CPU on a loaded 2-core machine, of which maps 0.8 s, null probes
#: 7.4 s, re-runs 6.2 s); they decide nothing, they are what the command announces.
S_PER_UNIT = 3e-10


#: ... per (row x feature x class x shuffle) of the shuffled-label null's probes (one lockstep fit
#: of every shuffle at the run's stored C).
NULL_S_PER_UNIT = 2e-9


#: ... per token of a re-run forward (the mean over the demo's five architectures: 1e-5 for the
#: LSTM up to 4e-5 for the Mamba, whose scan is a Python loop on the CPU).
RERUN_S_PER_TOKEN = 2.7e-5


#: The whole sweep over the three parts above: reading the stored states and labels, the
#: overlaps (23.1 s against 14.4 s on the demo store).
OVERHEAD = 1.6


def probe_subspace(weights: np.ndarray, rtol: float = 1e-6) -> np.ndarray:
    """An orthonormal basis ``(d, k)`` of the span of a probe's class weight rows ``(class, d)``
    centred over classes (rows with NaN are classes the run does not have). ``k`` is the
    rank: classes - 1 for a fitted probe, 0 for none."""
    W = np.asarray(weights, dtype=np.float64)
    W = W[np.isfinite(W).all(1)]
    if W.shape[0] < 2:
        return np.zeros((W.shape[1], 0))
    W = W - W.mean(0)
    _, s, vt = np.linalg.svd(W, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        return np.zeros((W.shape[1], 0))
    return vt[s > rtol * s[0]].T


def overlap(Qa: np.ndarray, Qb: np.ndarray) -> float:
    """Mean squared cosine of the principal angles between two subspaces (orthonormal bases
    ``(d, k)``): ``||Qa^T Qb||_F^2 / min(k_a, k_b)``; NaN when either is empty."""
    k = min(Qa.shape[1], Qb.shape[1])
    if k == 0:
        return float("nan")
    return float(np.sum((Qa.T @ Qb) ** 2) / k)


def null_overlap(k_a: int, k_b: int, d: int) -> float:
    """The expected :func:`overlap` of uniformly random subspaces of dimensions ``k_a, k_b`` in
    ``R^d``: ``E||Qa^T Qb||_F^2 = k_a k_b / d`` over ``min(k_a, k_b)`` angles."""
    if min(k_a, k_b) == 0:
        return float("nan")
    return max(k_a, k_b) / d


@dataclass
class Alignment:
    """An orthogonal map ``R (d, d)`` of one run's centred states onto another's, its scale
    and the share of the target's variance it predicts on held-out sequences."""

    R: np.ndarray
    scale: float
    r2: float


def fit_alignment(A_fit: np.ndarray, B_fit: np.ndarray, A_test: np.ndarray, B_test: np.ndarray,
                  groups: tuple[np.ndarray, np.ndarray] | None = None) -> Alignment:
    """Orthogonal Procrustes of centred ``A_fit`` onto centred ``B_fit`` (rows: the same inputs
    in both runs), scored on ``A_test``/``B_test``. ``groups`` (fit rows', test rows' label):
    each row is centred by its label's mean over the fit rows instead of the overall mean, so
    the map never sees the label (see the module)."""
    A_fit, B_fit = np.asarray(A_fit, np.float64), np.asarray(B_fit, np.float64)
    A_test, B_test = np.asarray(A_test, np.float64), np.asarray(B_test, np.float64)
    gf, gt = groups if groups is not None else (np.zeros(len(A_fit), np.int64), np.zeros(len(A_test), np.int64))
    Ac, Bc, At, Bt = A_fit.copy(), B_fit.copy(), A_test.copy(), B_test.copy()
    ma_all, mb_all = A_fit.mean(0), B_fit.mean(0)
    for g in np.unique(np.concatenate([gf, gt])):
        f, t = gf == g, gt == g
        ma, mb = (A_fit[f].mean(0), B_fit[f].mean(0)) if f.any() else (ma_all, mb_all)
        Ac[f] -= ma
        Bc[f] -= mb
        At[t] -= ma
        Bt[t] -= mb
    R, sv = scipy.linalg.orthogonal_procrustes(Ac, Bc)
    norm = float(np.sum(Ac ** 2))
    s = float(sv) / norm if norm > 0 else 0.0
    tot = float(np.sum(Bt ** 2))
    r2 = 1.0 - float(np.sum((s * At @ R - Bt) ** 2)) / tot if tot > 0 else float("nan")
    return Alignment(R, s, r2)


def aligned_overlap(Wa: np.ndarray, Wb: np.ndarray, R: np.ndarray | None) -> tuple[float, float, float]:
    """``(overlap, raw overlap, null)`` of probes ``Wa``, ``Wb`` (class, d): seed a's rows mapped
    by ``R`` (a's coordinates to b's) first, and without the map."""
    Qa, Qb = probe_subspace(Wa), probe_subspace(Wb)
    mapped = Qa if R is None else probe_subspace(np.asarray(Wa, np.float64) @ R)
    return overlap(mapped, Qb), overlap(Qa, Qb), null_overlap(Qa.shape[1], Qb.shape[1], Qb.shape[0])


def jackknife_pseudo(pairs: np.ndarray) -> np.ndarray:
    """Per-seed jackknife pseudo-values ``n U - (n-1) U_(-i)`` of the mean ``U`` of a symmetric
    ``(n, n)`` matrix of pair values (diagonal ignored); NaN for fewer than 3 seeds."""
    P = np.asarray(pairs, dtype=np.float64)
    n = P.shape[0]
    if n < 3:
        return np.full(n, np.nan)
    off = ~np.eye(n, dtype=bool)
    U = P[off].mean()
    m = np.where(off, P, 0.0).sum(1) / (n - 1)
    return U + 2.0 * (n - 1) / (n - 2) * (m - U)


def seed_interval(pairs: np.ndarray, ci_level: float = 0.95) -> tuple[float, float, float, int, str]:
    """``(estimate, lower, upper, n_seeds, method)`` of the mean pair value: the t interval over
    the seeds' :func:`jackknife_pseudo` values, clipped to [0, 1] (an overlap's range); with 2
    seeds the one pair's value and no interval."""
    P = np.asarray(pairs, dtype=np.float64)
    n = P.shape[0]
    if n < 2:
        return float("nan"), float("nan"), float("nan"), n, ""
    est = float(P[~np.eye(n, dtype=bool)].mean())
    if n == 2:
        return est, float("nan"), float("nan"), 2, "one pair"
    ps = jackknife_pseudo(P)
    half = float(scipy.stats.t.ppf(0.5 + ci_level / 2, n - 1) * ps.std(ddof=1) / np.sqrt(n))
    return est, max(0.0, est - half), min(1.0, est + half), n, "jackknife t over seeds"


def complete_seeds(M: np.ndarray) -> np.ndarray:
    """Indices of the seeds kept when those with a missing pair value are dropped (most missing first)."""
    keep = list(range(M.shape[0]))
    while len(keep) > 1:
        sub = M[np.ix_(keep, keep)]
        miss = (~np.isfinite(sub) & ~np.eye(len(keep), dtype=bool)).sum(1)
        if not miss.any():
            break
        keep.pop(int(np.argmax(miss)))
    return np.asarray(keep, dtype=np.int64)
