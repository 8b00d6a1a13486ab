"""What every probe solver shares: the fitted probes (:class:`Params`), their logits, and the
problem setup (class presence, the design standardised once, the folds as atoms, the canonical
form of the coefficients).

The solvers themselves are in :mod:`analysis.probes.solvers` (reference and exact paths) and
:mod:`analysis.probes.screen` (closed-form LDA); see :mod:`analysis.probes.solvers` for what a
cell, a problem and a path are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Features whose training standard deviation is below this are constant: scale 1, like
#: scikit-learn's StandardScaler (a zero feature then contributes nothing).
_TINY_SD = 1e-6


@dataclass
class Params:
    """Fitted probes of one cell: ``P`` problems, ``d`` features, ``K`` classes.

    ``mean``, ``scale`` (P, d): each problem's standardisation; ``coef`` (P, d, K) and
    ``intercept`` (P, K): ``logits = ((x - mean) / scale) @ coef + intercept``, centred over the
    problem's active classes; inactive classes have ``coef = 0`` and ``intercept = -inf``.
    ``n_iter`` (P,): solver iterations (0 for closed forms); ``converged`` (P,) bool.
    """

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    n_iter: np.ndarray
    converged: np.ndarray

    def take(self, index) -> Params:
        """The problems ``index`` (an int array or slice) of this batch."""
        return Params(*(getattr(self, f)[index] for f in _FIELDS))

    @staticmethod
    def concat(parts: Sequence[Params]) -> Params:
        """The problems of several batches, in order, as one batch."""
        return Params(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))

    def original_space(self) -> tuple[np.ndarray, np.ndarray]:
        """Coefficients for raw features: ``logits = x @ weights + bias``.

        Returns ``weights`` (P, d, K) and ``bias`` (P, K), float64.
        """
        w = self.coef.astype(np.float64) / self.scale[:, :, None]
        b = self.intercept.astype(np.float64) - np.einsum(
            "pd,pdk->pk", self.mean.astype(np.float64), w
        )
        return w, b


_FIELDS = ("mean", "scale", "coef", "intercept", "n_iter", "converged")


def logits(params: Params, X: np.ndarray) -> np.ndarray:
    """Logits of every problem on rows ``X (m, d)``: shape (P, m, K), float32, -inf for
    classes a problem never saw.

    One matrix product for all problems: raw-space weights ``coef / scale`` applied to ``X``
    centred once (so large feature offsets cost no float32 precision).
    """
    P, d, K = params.coef.shape
    centre = params.mean.mean(0)  # (d,)
    Xc = (X - centre).astype(np.float32)
    V = params.coef / params.scale[:, :, None]  # (P, d, K) float64
    c = params.intercept - np.einsum("pd,pdk->pk", params.mean - centre, V)
    Z = Xc @ V.transpose(1, 0, 2).reshape(d, P * K).astype(np.float32)  # (m, P*K)
    return Z.reshape(-1, P, K).transpose(1, 0, 2) + c[:, None, :].astype(np.float32)


def logits_by_class(params: Params, X: np.ndarray) -> np.ndarray:
    """:func:`logits` laid out (P, K, m): reductions over classes then run along contiguous
    rows (over a last axis of 2-16 classes numpy is several times slower)."""
    P, d, K = params.coef.shape
    centre = params.mean.mean(0)
    XcT = np.ascontiguousarray((X - centre).astype(np.float32).T)  # (d, m)
    V = params.coef / params.scale[:, :, None]
    c = params.intercept - np.einsum("pd,pdk->pk", params.mean - centre, V)
    VT = V.transpose(0, 2, 1).reshape(P * K, d).astype(np.float32)
    return (VT @ XcT).reshape(P, K, -1) + c[:, :, None].astype(np.float32)


def class_presence(targets: np.ndarray, train: np.ndarray, n_classes: int) -> np.ndarray:
    """Which classes each problem sees in training: (P, K) bool from targets/train (P, m)."""
    present = np.zeros((targets.shape[0], n_classes), dtype=bool)
    p, i = np.nonzero(train)
    present[p, targets[p, i]] = True
    return present


def standardise_design(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centre and scale ``X`` once over all rows (float32 data, float64 sums), so that the
    per-problem scalers are small corrections and float32 arithmetic loses nothing to large
    feature offsets. Returns ``Xc`` and the mean and scale used (float64, (d,))."""
    m0 = X.mean(0, dtype=np.float64)
    Xc = X.astype(np.float32) - m0.astype(np.float32)
    s0 = np.sqrt(np.einsum("md,md->d", Xc, Xc, dtype=np.float64) / X.shape[0])
    s0[s0 < _TINY_SD] = 1.0
    Xc /= s0.astype(np.float32)
    return Xc, m0, s0


class Atoms:
    """Rows with the same training membership across problems -- the folds -- as disjoint
    *atoms*. Statistics are computed once per atom and summed per problem, so a cell's
    ``2k + 1`` problems cost about one pass over ``X`` instead of ``2k + 1``.

    ``atom`` (m,) atom of each row; ``member`` (P, A) 1 where problem p trains on atom a.
    """

    def __init__(self, train: np.ndarray) -> None:
        P, m = train.shape
        if P <= 62:
            codes = (train.astype(np.int64) << np.arange(P, dtype=np.int64)[:, None]).sum(0)
            _, atom = np.unique(codes, return_inverse=True)
        else:
            _, atom = np.unique(train.T, axis=0, return_inverse=True)
        self.atom = atom.ravel()
        self.n_atoms = int(self.atom.max()) + 1
        self.member = np.zeros((P, self.n_atoms))
        self.member[np.arange(P)[:, None], self.atom[None, :]] = train  # all of an atom or none
        self.count = np.bincount(self.atom, minlength=self.n_atoms).astype(np.float64)
        self._order = np.argsort(self.atom, kind="stable")
        self._bounds = np.concatenate([[0], np.cumsum(self.count.astype(np.int64))])

    def rows(self, a: int) -> np.ndarray:
        return self._order[self._bounds[a] : self._bounds[a + 1]]

    def grouped_sums(self, X: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
        """Sums of ``X`` rows per (atom, group): (A, n_groups, d) float64, one product."""
        code = self.atom * n_groups + groups
        onehot = np.zeros((X.shape[0], self.n_atoms * n_groups), np.float32)
        onehot[np.arange(X.shape[0]), code] = 1.0
        return (onehot.T @ X).astype(np.float64).reshape(self.n_atoms, n_groups, -1)

    def scalers(self, Xc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each problem's training mean and standard deviation of ``Xc`` (P, d), float64."""
        zero = np.zeros(Xc.shape[0], dtype=np.int64)
        s1 = self.grouped_sums(Xc, zero, 1)[:, 0]
        s2 = self.grouped_sums(Xc * Xc, zero, 1)[:, 0]
        n_p = (self.member @ self.count)[:, None]
        mu = self.member @ s1 / n_p
        var = np.maximum(self.member @ s2 / n_p - mu * mu, 0.0)
        sd = np.sqrt(var)
        sd[sd < _TINY_SD] = 1.0
        return mu, sd


def canonical(
    coef: np.ndarray, intercept: np.ndarray, active: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Centre coefficients and intercepts over each problem's active classes; inactive ones get
    ``coef = 0`` and ``intercept = -inf`` (the softmax is unchanged by the centring)."""
    act = active.astype(np.float64)
    n_act = np.maximum(act.sum(1), 1.0)
    coef = np.where(active[:, None, :], coef, 0.0)
    coef = coef - (coef * act[:, None, :]).sum(2, keepdims=True) / n_act[:, None, None]
    coef = np.where(active[:, None, :], coef, 0.0)
    b = np.where(active, intercept, 0.0)
    b = b - (b * act).sum(1, keepdims=True) / n_act[:, None]
    return coef.astype(np.float32), np.where(active, b, -np.inf).astype(np.float32)
