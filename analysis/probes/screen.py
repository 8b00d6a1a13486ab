"""The screening solver: closed-form shrinkage LDA probes, one batched solve, no C.

Same signature and :class:`~analysis.probes.params.Params` as the solvers of
:mod:`analysis.probes.solvers`; its accuracy gap to the exact probe is measured, not assumed
(``bench/probes.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from analysis.probes.params import Atoms, Params, canonical, class_presence, standardise_design


def fit_screen(
    X: np.ndarray,
    targets: np.ndarray,
    train: np.ndarray,
    n_classes: int,
    C: float,
    *,
    shrinkage: float = 0.1,
    **_: object,
) -> Params:
    """Closed-form screening probes: shrinkage LDA on the standardised features.

    Each problem's pooled within-class covariance ``S`` (from its training rows) is shrunk,
    ``(1 - a) S + a * mean(diag S) * I`` with ``a = shrinkage``, and
    ``coef_k = S^-1 mu_k``, ``intercept_k = -mu_k . coef_k / 2 + log prior_k``: Gaussian class
    posteriors with a shared covariance, a linear softmax probe like the exact one. All problems
    are solved in one batched ``numpy.linalg.solve``. ``C`` is accepted for the common signature
    and unused.
    """
    P, K = targets.shape[0], n_classes
    Xc, m0, s0 = standardise_design(X)
    active = class_presence(targets, train, K)
    atoms = Atoms(train)
    mu, sd = atoms.scalers(Xc)
    n_p = atoms.member @ atoms.count
    grams = np.stack([Xc[r].T @ Xc[r] for r in map(atoms.rows, range(atoms.n_atoms))])
    gram = np.einsum(
        "pa,ade->pde", atoms.member, grams.astype(np.float64), optimize=True
    )  # (P, d, d)
    sums, counts = _class_sums(Xc, targets, atoms, K)  # (P, K, d), (P, K)
    means = sums / np.maximum(counts, 1.0)[:, :, None]
    within = gram - np.einsum("pkd,pke->pde", sums, means, optimize=True)  # sum_k n_k m_k m_k'
    within /= n_p[:, None, None]
    within /= sd[:, :, None] * sd[:, None, :]  # standardised space
    std_means = (means - mu[:, None, :]) / sd[:, None, :]  # (P, K, d)
    avg_var = np.trace(within, axis1=1, axis2=2) / within.shape[1]
    avg_var = np.where(avg_var > 0, avg_var, 1.0)
    shrunk = (1 - shrinkage) * within
    shrunk[:, np.arange(within.shape[1]), np.arange(within.shape[1])] += (
        shrinkage * avg_var[:, None]
    )
    coef = np.linalg.solve(shrunk, std_means.transpose(0, 2, 1))  # one batched solve: (P, d, K)
    prior = np.log(np.maximum(counts, 1e-300) / n_p[:, None])
    intercept = -0.5 * np.einsum("pkd,pdk->pk", std_means, coef) + prior
    coef, intercept = canonical(coef, intercept, active)
    mean = m0[None, :] + s0[None, :] * mu
    scale = s0[None, :] * sd
    zeros = np.zeros(P, dtype=np.int32)
    return Params(mean, scale, coef, intercept, zeros, np.ones(P, dtype=bool))


def _class_sums(
    Xc: np.ndarray, targets: np.ndarray, atoms: Atoms, K: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per problem, the sum of its training rows of each class (P, K, d) and their counts (P, K).

    Problems share few distinct target vectors (the target and the control labelling): sums per
    (atom, class) are computed once per distinct vector.
    """
    P = targets.shape[0]
    sums = np.zeros((P, K, Xc.shape[1]))
    counts = np.zeros((P, K))
    done: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for p in range(P):
        hit = next((d for d in done if np.array_equal(d[0], targets[p])), None)
        if hit is None:
            t = targets[p]
            per_atom = atoms.grouped_sums(Xc, t, K)  # (A, K, d)
            n = np.bincount(atoms.atom * K + t, minlength=atoms.n_atoms * K).reshape(
                atoms.n_atoms, K
            )
            hit = (t, per_atom, n.astype(np.float64))
            done.append(hit)
        sums[p] = np.einsum("a,akd->kd", atoms.member[p], hit[1])
        counts[p] = atoms.member[p] @ hit[2]
    return sums, counts




def path_screen(
    X: np.ndarray,
    targets: np.ndarray,
    train: np.ndarray,
    n_classes: int,
    Cs: Sequence[float],
    *,
    shrinkage: float = 0.1,
    **_: object,
) -> list[Params]:
    """:func:`fit_screen` has no C: the same probes for every value of the path."""
    fitted = fit_screen(X, targets, train, n_classes, 1.0, shrinkage=shrinkage)
    return [fitted] * len(Cs)


