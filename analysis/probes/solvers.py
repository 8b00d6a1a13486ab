"""Probe solvers: three ways to fit the same set of linear probes, one signature.

A *cell* is one (run, length, layer, position) -- or position pool -- with its design matrix
``X (row, feature)``. Every cell fits a batch of *problems* that share ``X`` but differ in which
rows they train on and which labels they fit: the cross-validation folds (and, when C is chosen
by inner cross-validation, the inner folds), the same folds on the control labelling, and one fit
on all rows. Each problem is an L2-regularised multinomial logistic regression on features
standardised with the problem's own training rows, exactly scikit-learn's ``StandardScaler`` +
``LogisticRegression(C=C)``::

    minimise  C * sum_i -log softmax(W' x_i + b)[y_i] + 0.5 * ||W||^2      (b not penalised)

A solver fits every problem along a *path* of C values (ascending), each C starting from the
previous one's solution (a warm start), and returns one :class:`Params` per C. A problem that
does not meet its tolerance at some C is not fitted at the larger ones (weaker regularisation
only makes it harder); it is reported as not converged there (``n_iter`` 0), so that a choice of
C can avoid it.

All solvers return :class:`Params`: per problem the scaler (``mean``, ``scale``) and the
coefficients in standardised space, canonicalised (centred over the problem's classes), so that
``logits = ((x - mean) / scale) @ coef + intercept``; classes a problem never saw in training
have ``intercept = -inf`` (probability 0), as in scikit-learn, which fits only the classes it sees.

* :func:`path_reference` -- the plain scikit-learn loop, one problem at a time (float64,
  ``warm_start`` along the path, as ``LogisticRegressionCV`` does internally).
* :func:`path_exact` -- the fast path: all problems of a cell in lockstep, preconditioned
  L-BFGS in float32 (:mod:`analysis.probes.lbfgs`). The problems share ``X``, so each iteration is two matrix products with
  ``problems * classes`` columns per fold of rows (a problem multiplies only the folds it trains
  on); the per-problem standardisation is folded into the parameters (an affine
  reparametrisation), so ``X`` is standardised once. The preconditioner is the inverse of
  ``G + lambda I``, ``G`` the curvature-weighted Gram matrix of the standardised features at the
  current iterate (one per labelling, refreshed every few iterations): the same objective, the
  same optimum and stopping rule, in a fraction of the iterations. Binary problems use the two-class
  softmax with twice the penalty, which is exactly scikit-learn's one-vector binary model (the
  optimum has ``w1 = -w0``; see :func:`_penalty_multiplier`). It stops, like scikit-learn's
  ``lbfgs``, when the largest gradient entry of the mean-loss objective is below ``tol``.
* :func:`fit_screen` -- closed form: shrinkage LDA (shared within-class covariance, Gaussian
  class posteriors) from per-fold sufficient statistics, one batched solve; it has no C. Its
  accuracy gap to the exact probe is measured, not assumed (``bench/probes.py``).

:func:`fit_exact` and :func:`fit_reference` fit one C (a path of one). :class:`Params`, the
logits and the problem setup every solver shares are in :mod:`analysis.probes.params`; the
screen is in :mod:`analysis.probes.screen` (both re-exported here).

Why this solver (measured on 2 shared cores, pooled cells of captured demo runs: 7680 rows,
d 32-80, 2-6 classes, 3 folds, 13 problems per C):

* Captured hidden states are strongly correlated, so plain L-BFGS crawls: warm-started along
  1e-3 ... 100 it needed 100-300+ iterations per C from C = 1 up (19 of 45 cells hit 300 at
  C >= 1; 375 s for the 45 cells). Preconditioned as here: 5-70 iterations, every fit converged,
  73 s for C = 1e-3 ... 10 -- against 55 s for the old single fit at C = 1, 32 of 45 of which
  had stopped at 100 iterations unconverged.
* Batched Newton (IRLS; binary problems, the cheapest case): 10-20x slower than warm-started
  L-BFGS along the same path on synthetic 3000-20000 rows x 64 features (3-4 Newton steps per
  C, but each builds a d x d Hessian per problem, m d^2 against m d K for a gradient); a
  multinomial Newton step would cost (d K)^3 per problem.
* Warm starts along the path took 1.4-1.7x less time than starting each C from zero
  (synthetic cells, plain L-BFGS).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from analysis.probes.lbfgs import lbfgs
from analysis.probes.params import (
    Atoms,
    Params,
    canonical,
    class_presence,
    logits,
    logits_by_class,
    standardise_design,
)
from analysis.probes.screen import fit_screen, path_screen

__all__ = [
    "PATHS",
    "SOLVERS",
    "Params",
    "class_presence",
    "fit_exact",
    "fit_labelled",
    "fit_reference",
    "fit_screen",
    "logits",
    "logits_by_class",
    "path_exact",
    "path_exact_many",
    "path_reference",
    "path_screen",
]

#: The stopping threshold on the largest gradient entry of the mean-loss objective
#: (scikit-learn's default ``tol``).
TOL = 1e-4
#: Iterations per problem and C. Warm-started and preconditioned fits of captured hidden
#: states need 5-70; a problem still short of ``TOL`` after this many counts as not converged
#: at that C (and the choice of C avoids it).
MAX_ITER = 200
#: Refresh the exact path's preconditioner every this many iterations, counted along the path
#: (a new C that starts within this many iterations of the last refresh keeps it).
REFRESH_EVERY = 20
#: A new C refreshes a preconditioner at least this many iterations old.
REFRESH_AT_NEW_C = 10
#: Rows (at most) that estimate the preconditioner's Gram matrix: it only has to be close.
PRECONDITIONER_ROWS = 4096


#: Logit offset for classes absent from a problem's training rows: exp() of it is exactly 0 in
#: float32, and unlike -inf it keeps 0 * offset finite inside the solver.
_MASKED = np.float32(-1e4)


# ----------------------------------------------------------------------------- problem setup


def _penalty_multiplier(active: np.ndarray) -> np.ndarray:
    """2 for two-class problems, else 1 (P,).

    scikit-learn fits binary problems with one weight vector ``w`` and penalty ``||w||^2 / 2``.
    A two-class softmax with weights ``w0, w1`` depends only on ``w1 - w0``, and at its optimum
    ``w0 = -w1``, so its penalty ``(||w0||^2 + ||w1||^2) / 2`` equals ``||w1 - w0||^2 / 4``:
    doubling it gives exactly the binary model.
    """
    return np.where(active.sum(1) == 2, 2.0, 1.0)


# ----------------------------------------------------------------------------- reference


def path_reference(
    X: np.ndarray,
    targets: np.ndarray,
    train: np.ndarray,
    n_classes: int,
    Cs: Sequence[float],
    *,
    tol: float = TOL,
    max_iter: int | None = None,
) -> list[Params]:
    """The obvious loop: for each problem, ``StandardScaler`` then scikit-learn's
    ``LogisticRegression`` (lbfgs) on its training rows, in float64, at each C of the path
    (ascending), each fit starting from the previous one (``warm_start``).

    Parameters
    ----------
    X : ndarray, shape (m, d)
        The cell's rows (raw hidden states, any float dtype).
    targets : ndarray of int, shape (P, m)
        Each problem's class index per row (``0 .. n_classes-1``; ignored where not training).
    train : ndarray of bool, shape (P, m)
        The rows each problem trains on.
    n_classes : int
        Width of the class axis ``K``.
    Cs : sequence of float
        Inverse L2 strengths, ascending, as in scikit-learn.
    tol, max_iter : float, int
        scikit-learn's ``tol`` and ``max_iter`` (default :data:`MAX_ITER`, per C); a fit that
        uses all ``max_iter`` iterations is not converged, and the problem is not fitted at
        larger C.

    Returns
    -------
    list of Params
        One per C.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    Cs = _ascending(Cs)
    max_iter = MAX_ITER if max_iter is None else int(max_iter)
    P, d = targets.shape[0], X.shape[1]
    active = class_presence(targets, train, n_classes)
    nC = len(Cs)
    coef = np.zeros((nC, P, d, n_classes))
    intercept = np.zeros((nC, P, n_classes))
    mean, scale = np.zeros((P, d)), np.ones((P, d))
    n_iter = np.zeros((nC, P), dtype=np.int32)
    converged = np.ones((nC, P), dtype=bool)
    X64 = X.astype(np.float64)
    for p in range(P):
        rows = X64[train[p]]
        sc = StandardScaler().fit(rows)
        mean[p], scale[p] = sc.mean_, sc.scale_
        classes = np.flatnonzero(active[p])
        if classes.size < 2:  # one class: the constant predictor (a control labelling may do this)
            continue
        Xs, yp = sc.transform(rows), targets[p, train[p]]
        lr = LogisticRegression(warm_start=True, tol=tol, max_iter=max_iter)
        for j, C in enumerate(Cs):
            if j and not converged[j - 1, p]:  # not converged at a smaller C: not fitted here
                converged[j:, p] = False
                coef[j:, p], intercept[j:, p] = coef[j - 1, p], intercept[j - 1, p]
                break
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # non-convergence is reported through converged
                lr.set_params(C=C).fit(Xs, yp)
            n_iter[j, p] = int(np.max(lr.n_iter_))
            converged[j, p] = n_iter[j, p] < max_iter
            if classes.size == 2:  # one vector w: the softmax pair (-w/2, +w/2)
                coef[j, p][:, classes] = np.stack([-lr.coef_[0], lr.coef_[0]], axis=1) / 2
                intercept[j, p, classes] = np.array([-lr.intercept_[0], lr.intercept_[0]]) / 2
            else:
                coef[j, p][:, lr.classes_] = lr.coef_.T
                intercept[j, p, lr.classes_] = lr.intercept_
    out = []
    for j in range(nC):
        c, b = canonical(coef[j], intercept[j], active)
        out.append(Params(mean.copy(), scale.copy(), c, b, n_iter[j], converged[j]))
    return out


def fit_reference(X: np.ndarray, targets: np.ndarray, train: np.ndarray, n_classes: int, C: float,
                  **options: Any) -> Params:
    """:func:`path_reference` at one C (``options``: its ``tol``, ``max_iter``)."""
    return path_reference(X, targets, train, n_classes, [C], **options)[0]


def _ascending(Cs: Sequence[float]) -> list[float]:
    out = [float(c) for c in Cs]
    if not out or any(not c > 0 for c in out) or out != sorted(set(out)):
        raise ValueError(f"a C path must be positive, strictly ascending values, got {list(Cs)!r}")
    return out


# ----------------------------------------------------------------------------- exact (fast)


class _Objective:
    """Mean log-loss + L2 of P softmax problems sharing ``Xc (m, d)``, evaluated in lockstep.

    Problem p's parameters ``x[p] (d+1, K)`` are standardised-space coefficients and intercept;
    its raw-space weights are ``coef / sd_p`` with offset ``b - mu_p @ (coef / sd_p)``, so one
    matrix product serves every problem whatever its scaler. Rows are grouped into *atoms* (rows
    every problem either trains on or not: the folds), and each atom's product includes only the
    problems that train on it, so a problem costs its own training rows, not all ``m``.
    """

    def __init__(self, Xc: np.ndarray, targets: np.ndarray, train: np.ndarray, active: np.ndarray):
        m, d = Xc.shape
        atoms = Atoms(train)
        self.member = atoms.member > 0  # (P, A)
        n_p = atoms.member @ atoms.count
        self.inv_n = (1.0 / n_p).astype(np.float32)
        mu, sd = atoms.scalers(Xc)
        self.mu, self.sd = mu.astype(np.float32), sd.astype(np.float32)
        self._penalty = _penalty_multiplier(active) / n_p  # lambda = this / C
        self.lam = self._penalty.astype(np.float32)
        self.mask = np.where(active, 0.0, _MASKED).astype(np.float32)  # (P, K)
        self.d, self.K = d, active.shape[1]
        # per atom: rows (m_a, d), their transpose, and each problem's target-logit offsets
        # (P, m_a) inside a (K, m_a) block of logits: gathers and scatters of the true class
        self.blocks = []
        for a in range(atoms.n_atoms):
            rows = atoms.rows(a)
            Xa = np.ascontiguousarray(Xc[rows])
            offsets = targets[:, rows].astype(np.int64) * rows.size + np.arange(rows.size)
            self.blocks.append((Xa, np.ascontiguousarray(Xa.T), offsets))
        self._ones = np.ones(max((b[0].shape[0] for b in self.blocks), default=0), np.float32)

    def set_C(self, C: float) -> None:
        """Every problem's penalty for inverse strength ``C``."""
        self.lam = (self._penalty / C).astype(np.float32)

    def raw(self, x: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Raw-space weights (p, K, d) and offsets (p, K) of problems ``idx`` at ``x``."""
        d = self.d
        V = x[:, :d, :] / self.sd[idx][:, :, None]
        c = x[:, d, :] - np.einsum("pd,pdk->pk", self.mu[idx], V) + self.mask[idx]
        return np.ascontiguousarray(V.transpose(0, 2, 1)), c

    def __call__(self, x: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Loss (p,) and gradient (p, d+1, K) of problems ``idx`` at parameters ``x``."""
        d, K = self.d, self.K
        P = idx.size
        VT, c = self.raw(x, idx)
        loss = np.zeros(P)
        G = np.zeros((P, K, d), np.float32)
        rs = np.zeros((P, K), np.float32)
        inv_n = self.inv_n[idx]
        member = self.member[idx]
        for a, (Xa, XTa, offsets) in enumerate(self.blocks):
            sel = np.flatnonzero(member[:, a])
            if sel.size == 0:
                continue
            n, ma = sel.size, Xa.shape[0]
            Z = (VT[sel].reshape(n * K, d) @ XTa).reshape(n, K, ma)
            Z += c[sel][:, :, None]
            shift = None
            if Z.max() > 60.0:  # exp would overflow float32 somewhere: stabilise row by row
                shift = Z.max(1, keepdims=True)
                Z -= shift
            E = np.exp(Z)
            s = E.sum(1, keepdims=True)  # (n, 1, ma)
            if shift is None and s.min() < 1e-30:  # every logit tiny: rescale
                shift = Z.max(1, keepdims=True)
                Z -= shift
                np.exp(Z, out=E)
                s = E.sum(1, keepdims=True)
            lse = np.log(s)[:, 0, :]
            if shift is not None:
                lse += shift[:, 0, :]
                Z += shift
            # offset of each row's target logit inside the (n, K, ma) block
            flat = offsets[idx[sel]]
            flat += (np.arange(n) * (K * ma))[:, None]
            z_true = Z.reshape(-1)[flat]  # (n, ma)
            w = inv_n[sel]
            loss[sel] += (lse - z_true).sum(1, dtype=np.float64) * w
            E *= w[:, None, None] / s  # softmax, weighted by 1/n_p
            E.reshape(-1)[flat] -= w[:, None]  # minus the one-hot target
            E2 = E.reshape(n * K, ma)
            rs[sel] += (E2 @ self._ones[:ma]).reshape(n, K)  # a matrix-vector product: fast
            G[sel] += (E2 @ Xa).reshape(n, K, d)
        mu, sd = self.mu[idx], self.sd[idx]
        G -= rs[:, :, None] * mu[:, None, :]  # the scaler's centring
        G /= sd[:, None, :]
        W = x[:, :d, :]
        lam = self.lam[idx]
        g = np.empty_like(x)
        g[:, :d] = G.transpose(0, 2, 1) + lam[:, None, None] * W
        g[:, d] = rs
        loss += 0.5 * lam * np.einsum("pdk,pdk->p", W, W, dtype=np.float64)
        return loss, g


class _Preconditioner:
    """``M ~ H^-1`` for each problem: ``U diag(1 / (e + lambda_p)) U'`` on every class's weights
    and ``1 / c`` on the intercepts, where ``U diag(e) U'`` is the Gram matrix of the standardised
    features weighted by each row's softmax curvature ``sum_k p_k (1 - p_k) / (K - 1)`` and ``c``
    the mean curvature, at the current iterate of one problem per labelling (the one with the most
    training rows). The curvature weights matter: rows the probe already gets right with
    confidence stop contributing, so the unweighted covariance preconditions badly near the
    optimum of a well-separated cell.
    """

    def __init__(self, Xc: np.ndarray, targets: np.ndarray, train: np.ndarray, obj: _Objective):
        self.Xc, self.obj, self.train = Xc, obj, train
        keys: dict[bytes, int] = {}
        self.group = np.array(
            [keys.setdefault(targets[p].tobytes(), len(keys)) for p in range(targets.shape[0])]
        )
        n_p = train.sum(1)
        self.rep = []  # per labelling: the problem it is estimated from, and its rows
        for g in range(len(keys)):
            members = np.flatnonzero(self.group == g)
            p = int(members[np.argmax(n_p[members])])
            rows = np.flatnonzero(train[p])
            rows = rows[:: max(1, rows.size // PRECONDITIONER_ROWS)]
            self.rep.append((p, rows))
        d = obj.d
        self.U = np.zeros((len(keys), d, d), np.float32)
        self.e = np.zeros((len(keys), d), np.float32)
        self.c = np.ones(len(keys), np.float32)

    def refresh(self, x: np.ndarray) -> None:
        """Re-estimate the curvature at parameters ``x`` (all problems)."""
        obj = self.obj
        for g, (p, rows) in enumerate(self.rep):
            Xr = self.Xc[rows]
            VT, c = obj.raw(x[p : p + 1], np.array([p]))
            Z = VT[0] @ Xr.T + c[0][:, None]  # (K, rows): class reductions along rows
            Z -= Z.max(0, keepdims=True)
            E = np.exp(Z)
            E /= E.sum(0, keepdims=True)
            k_act = max(int((obj.mask[p] == 0).sum()) - 1, 1)
            s = (E * (1 - E)).sum(0) / k_act  # (rows,)
            Xs = (Xr - obj.mu[p]) / obj.sd[p]
            gram = (Xs * s[:, None]).T @ Xs / rows.size
            e, U = np.linalg.eigh(gram.astype(np.float64))
            self.U[g], self.e[g] = U, np.maximum(e, 0.0)
            self.c[g] = max(float(s.mean()), 1e-3)

    def __call__(self, q: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``M q`` for problems ``idx``; ``q`` (p, (d+1) * K)."""
        d, K = self.obj.d, self.obj.K
        q = q.reshape(idx.size, d + 1, K)
        out = np.empty_like(q)
        lam = self.obj.lam[idx]
        groups = self.group[idx]
        for g in np.unique(groups):
            sel = np.flatnonzero(groups == g)
            n = sel.size
            W = q[sel, :d, :].transpose(1, 0, 2).reshape(d, n * K)
            R = (self.U[g].T @ W).reshape(d, n, K)
            R /= self.e[g][:, None, None] + lam[sel][None, :, None]
            out[sel, :d, :] = (self.U[g] @ R.reshape(d, n * K)).reshape(d, n, K).transpose(1, 0, 2)
            out[sel, d, :] = q[sel, d, :] / self.c[g]
        return out.reshape(idx.size, -1)


class _Batch:
    """The problems of several cells (same features and classes: one layer of one run) as one
    lockstep batch: each cell keeps its own rows, objective and preconditioner, and problem
    ``i`` of the batch is problem ``i - start`` of the cell whose range holds it. The L-BFGS
    bookkeeping (two-loop recursion, line search, stopping) then runs once for all cells, which
    is what small cells spend most of their time on.
    """

    def __init__(self, parts: list[tuple[_Objective, _Preconditioner]]):
        self.parts = parts
        self.bounds = np.cumsum([0] + [obj.mu.shape[0] for obj, _ in parts])
        # per cell: iterations since its preconditioner's last refresh (-1: never), counted
        # only while the cell has live problems, so a cell's fit does not depend on its batch
        self.age = np.full(len(parts), -1)

    def set_C(self, C: float) -> None:
        for obj, _ in self.parts:
            obj.set_C(C)

    def _pieces(self, idx: np.ndarray):
        """(part, positions in idx, the part's own problem indices) for sorted ``idx``."""
        cut = np.searchsorted(idx, self.bounds)
        for i, (obj, M) in enumerate(self.parts):
            if cut[i + 1] > cut[i]:
                pos = slice(cut[i], cut[i + 1])
                yield obj, M, pos, idx[pos] - self.bounds[i]

    def __call__(self, x: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        loss = np.zeros(idx.size)
        g = np.empty_like(x)
        for obj, _, pos, local in self._pieces(idx):
            loss[pos], g[pos] = obj(x[pos], local)
        return loss, g

    def precondition(self, q: np.ndarray, idx: np.ndarray) -> np.ndarray:
        out = np.empty_like(q)
        for _, M, pos, local in self._pieces(idx):
            out[pos] = M(q[pos], local)
        return out

    def refresh(self, x: np.ndarray, idx: np.ndarray, older_than: int) -> None:
        """Refresh the preconditioners of cells with live problems (``idx``) that were never
        refreshed or are at least ``older_than`` iterations old."""
        for i in np.flatnonzero(self._live(idx)):
            if self.age[i] < 0 or self.age[i] >= older_than:
                self.parts[i][1].refresh(x[self.bounds[i] : self.bounds[i + 1]])
                self.age[i] = 0

    def tick(self, idx: np.ndarray) -> None:
        """One iteration for the cells with live problems."""
        self.age[self._live(idx)] += 1

    def _live(self, idx: np.ndarray) -> np.ndarray:
        cut = np.searchsorted(idx, self.bounds)
        return cut[1:] > cut[:-1]


def path_exact(X: np.ndarray, targets: np.ndarray, train: np.ndarray, n_classes: int,
               Cs: Sequence[float], **options: Any) -> list[Params]:
    """The same probes as :func:`path_reference`, all problems in lockstep preconditioned L-BFGS
    (float32), along the path ``Cs`` (ascending) with warm starts; the first C starts from zero,
    like scikit-learn. Parameters are those of :func:`path_reference` (``options``: ``tol``,
    ``max_iter``, as :func:`path_exact_many` takes them); ``max_iter`` caps the iterations per
    problem and C.
    """
    return path_exact_many([(X, targets, train)], n_classes, Cs, **options)[0]


def path_exact_many(
    cells: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    n_classes: int,
    Cs: Sequence[float],
    *,
    tol: float = TOL,
    max_iter: int | None = None,
) -> list[list[Params]]:
    """:func:`path_exact` for several cells ``(X, targets, train)`` of the same width and
    classes in one lockstep batch (see :class:`_Batch`); each cell's result is the one it gets
    alone (every problem keeps its own state). Returns, per cell, one :class:`Params` per C."""
    Cs = _ascending(Cs)
    max_iter = MAX_ITER if max_iter is None else int(max_iter)
    parts, scalers, actives = [], [], []
    for X, targets, train in cells:
        Xc, m0, s0 = standardise_design(X)
        active = class_presence(targets, train, n_classes)
        obj = _Objective(Xc, targets, train, active)
        parts.append((obj, _Preconditioner(Xc, targets, train, obj)))
        # the scaler in raw space: standardising by (mu, sd) in the centred space is
        # standardising raw features by (m0 + s0 mu, s0 sd)
        scalers.append((m0[None, :] + s0[None, :] * obj.mu, s0[None, :] * obj.sd))
        actives.append(active)
    widths = {obj.d for obj, _ in parts}
    if len(widths) != 1:
        raise ValueError(f"cells fitted in one batch need one feature width, got {sorted(widths)}")
    batch = _Batch(parts)
    P, d = int(batch.bounds[-1]), widths.pop()
    x = np.zeros((P, d + 1, n_classes), np.float32)
    ok = np.ones(P, dtype=bool)  # converged at every smaller C
    out: list[list[Params]] = [[] for _ in cells]
    for C in Cs:
        batch.set_C(C)
        x, n_iter, converged = lbfgs(batch, x, ok.copy(), tol, max_iter, refresh_every=REFRESH_EVERY,
                                     refresh_at_start=REFRESH_AT_NEW_C)
        ok &= converged
        for i, (active, (mean, scale)) in enumerate(zip(actives, scalers, strict=True)):
            span = slice(batch.bounds[i], batch.bounds[i + 1])
            coef, intercept = canonical(
                x[span, :-1].astype(np.float64), x[span, -1].astype(np.float64), active
            )
            out[i].append(Params(mean, scale, coef, intercept, n_iter[span], ok[span].copy()))
    return out


def fit_exact(X: np.ndarray, targets: np.ndarray, train: np.ndarray, n_classes: int, C: float,
              **options: Any) -> Params:
    """:func:`path_exact` at one C (starting from zero, like scikit-learn; ``options``: its
    ``tol``, ``max_iter``)."""
    return path_exact(X, targets, train, n_classes, [C], **options)[0]


def fit_labelled(
    X: np.ndarray,
    y: np.ndarray,
    train: np.ndarray | None = None,
    *,
    C: float = 1.0,
    tol: float = TOL,
    max_iter: int | None = None,
) -> tuple[Params, np.ndarray]:
    """:func:`fit_exact` for labels as they come: rows ``X (m, d)`` with integer labels ``y
    (m,)`` of any values, one problem per row of ``train (P, m)`` bool (default: one problem
    on every row). Returns the fitted :class:`Params` and the classes, ascending: class index
    ``k`` of the parameters is label ``classes[k]``. The erasure probes and the ablation's
    refitted probe use this, so that every probe of the project is fitted, and reports its
    convergence, the same way."""
    classes, index = np.unique(np.asarray(y), return_inverse=True)
    m = index.size
    train = np.ones((1, m), dtype=bool) if train is None else np.asarray(train, dtype=bool)
    if train.ndim != 2 or train.shape[1] != m:
        raise ValueError(f"train must be (problems, {m}) bool, got shape {train.shape}")
    targets = np.ascontiguousarray(np.broadcast_to(index.astype(np.int64).ravel(), train.shape))
    params = fit_exact(X, targets, train, classes.size, C, tol=tol, max_iter=max_iter)
    return params, classes


#: Solver name -> path(X, targets, train, n_classes, Cs) -> one Params per C (ascending).
PATHS: dict[str, Callable[..., list[Params]]] = {
    "exact": path_exact,
    "screen": path_screen,
    "reference": path_reference,
}
#: Solver name -> fit(X, targets, train, n_classes, C) at one C; extra options keep their defaults.
SOLVERS: dict[str, Callable[..., Params]] = {
    "exact": fit_exact,
    "screen": fit_screen,
    "reference": fit_reference,
}
