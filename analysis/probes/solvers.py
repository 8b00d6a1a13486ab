"""Probe solvers: three ways to fit the same set of linear probes, one signature.

A *cell* is one (run, length, layer, position) -- or position pool -- with its design matrix
``X (row, feature)``. Every cell fits a small batch of *problems* that share ``X`` but differ
in which rows they train on and which labels they fit: the cross-validation folds, the same
folds on the control labelling, and one fit on all rows. Each problem is an L2-regularised
multinomial logistic regression on features standardised with the problem's own training rows,
exactly scikit-learn's ``StandardScaler`` + ``LogisticRegression(C=C)``::

    minimise  C * sum_i -log softmax(W' x_i + b)[y_i] + 0.5 * ||W||^2      (b not penalised)

All three solvers return :class:`Params`: per problem the scaler (``mean``, ``scale``) and the
coefficients in standardised space, canonicalised (centred over the problem's classes), so that
``logits = ((x - mean) / scale) @ coef + intercept``; classes a problem never saw in training
have ``intercept = -inf`` (probability 0), as in scikit-learn, which fits only the classes it sees.

* :func:`fit_reference` -- the plain scikit-learn loop, one problem at a time (float64).
* :func:`fit_exact` -- the fast path: all problems of a cell in lockstep L-BFGS, float32. The
  problems share ``X``, so each iteration is two matrix products with ``problems * classes``
  columns instead of many skinny ones; the per-problem standardisation is folded into the
  parameters (an affine reparametrisation), so ``X`` is standardised once. Binary problems use
  the two-class softmax with twice the penalty, which is exactly scikit-learn's one-vector
  binary model (the optimum has ``w1 = -w0``; see :func:`_penalty_multiplier`). It stops, like
  scikit-learn's ``lbfgs``, when the largest gradient entry of the mean-loss objective is below
  ``tol``.
* :func:`fit_screen` -- closed form: shrinkage LDA (shared within-class covariance, Gaussian
  class posteriors) from per-fold sufficient statistics, one batched solve. Its accuracy gap to
  the exact probe is measured, not assumed (``bench/probes.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: Logit offset for classes absent from a problem's training rows: exp() of it is exactly 0 in
#: float32, and unlike -inf it keeps 0 * offset finite inside the solver.
_MASKED = np.float32(-1e4)
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


# ----------------------------------------------------------------------------- problem setup


def class_presence(targets: np.ndarray, train: np.ndarray, n_classes: int) -> np.ndarray:
    """Which classes each problem sees in training: (P, K) bool from targets/train (P, m)."""
    present = np.zeros((targets.shape[0], n_classes), dtype=bool)
    p, i = np.nonzero(train)
    present[p, targets[p, i]] = True
    return present


def _penalty_multiplier(active: np.ndarray) -> np.ndarray:
    """2 for two-class problems, else 1 (P,).

    scikit-learn fits binary problems with one weight vector ``w`` and penalty ``||w||^2 / 2``.
    A two-class softmax with weights ``w0, w1`` depends only on ``w1 - w0``, and at its optimum
    ``w0 = -w1``, so its penalty ``(||w0||^2 + ||w1||^2) / 2`` equals ``||w1 - w0||^2 / 4``:
    doubling it gives exactly the binary model.
    """
    return np.where(active.sum(1) == 2, 2.0, 1.0)


def _standardise_design(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centre and scale ``X`` once over all rows (float32 data, float64 sums), so that the
    per-problem scalers are small corrections and float32 arithmetic loses nothing to large
    feature offsets. Returns ``Xc`` and the mean and scale used (float64, (d,))."""
    m0 = X.mean(0, dtype=np.float64)
    Xc = X.astype(np.float32) - m0.astype(np.float32)
    s0 = np.sqrt(np.einsum("md,md->d", Xc, Xc, dtype=np.float64) / X.shape[0])
    s0[s0 < _TINY_SD] = 1.0
    Xc /= s0.astype(np.float32)
    return Xc, m0, s0


class _Atoms:
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


def _canonical(
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


# ----------------------------------------------------------------------------- reference


def fit_reference(
    X: np.ndarray, targets: np.ndarray, train: np.ndarray, n_classes: int, C: float, **_: object
) -> Params:
    """The obvious loop: for each problem, ``StandardScaler`` then scikit-learn's
    ``LogisticRegression(C=C)`` (lbfgs, defaults) on its training rows, in float64.

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
    C : float
        Inverse L2 strength, as in scikit-learn.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    P, d = targets.shape[0], X.shape[1]
    active = class_presence(targets, train, n_classes)
    coef = np.zeros((P, d, n_classes))
    intercept = np.zeros((P, n_classes))
    mean, scale = np.zeros((P, d)), np.ones((P, d))
    n_iter = np.zeros(P, dtype=np.int32)
    X64 = X.astype(np.float64)
    for p in range(P):
        rows = X64[train[p]]
        sc = StandardScaler().fit(rows)
        mean[p], scale[p] = sc.mean_, sc.scale_
        classes = np.flatnonzero(active[p])
        if classes.size < 2:  # one class: the constant predictor (a control labelling may do this)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # non-convergence is reported through n_iter
            lr = LogisticRegression(C=C).fit(sc.transform(rows), targets[p, train[p]])
        n_iter[p] = int(np.max(lr.n_iter_))
        if classes.size == 2:  # one vector w: the softmax pair (-w/2, +w/2)
            coef[p][:, classes] = np.stack([-lr.coef_[0], lr.coef_[0]], axis=1) / 2
            intercept[p, classes] = np.array([-lr.intercept_[0], lr.intercept_[0]]) / 2
        else:
            coef[p][:, lr.classes_] = lr.coef_.T
            intercept[p, lr.classes_] = lr.intercept_
    coef, intercept = _canonical(coef, intercept, active)
    return Params(mean, scale, coef, intercept, n_iter, n_iter < 100)


# ----------------------------------------------------------------------------- exact (fast)


class _Objective:
    """Mean log-loss + L2 of P softmax problems sharing ``Xc (m, d)``, evaluated in lockstep.

    Problem p's parameters ``x[p] (d+1, K)`` are standardised-space coefficients and intercept;
    its raw-space weights are ``coef / sd_p`` with offset ``b - mu_p @ (coef / sd_p)``, so one
    matrix product serves every problem whatever its scaler.
    """

    def __init__(self, Xc, targets, train, active, C):
        m, d = Xc.shape
        self.XT = np.ascontiguousarray(Xc.T)  # (d, m): both products then run at BLAS speed
        self.X = Xc
        n_p = train.sum(1).astype(np.float64)
        self.w = (train / n_p[:, None]).astype(np.float32)  # (P, m): 1/n_p on training rows
        mu, sd = _Atoms(train).scalers(Xc)
        self.mu, self.sd = mu.astype(np.float32), sd.astype(np.float32)
        self.lam = (_penalty_multiplier(active) / (C * n_p)).astype(np.float32)
        self.mask = np.where(active, 0.0, _MASKED).astype(np.float32)  # (P, K)
        K = active.shape[1]
        t = np.where(train, targets, 0)  # rows outside training: any class, weight 0
        # offset of each row's target logit inside its problem's (K, m) block: gather/scatter
        self.target_offset = t * m + np.arange(m)[None, :]
        self.d, self.K, self.m = d, K, m

    def __call__(self, x: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Loss (p,) and gradient (p, d+1, K) of problems ``idx`` at parameters ``x``."""
        d, K, m = self.d, self.K, self.m
        P = idx.size
        mu, sd, w = self.mu[idx], self.sd[idx], self.w[idx]
        W, b = x[:, :d, :], x[:, d, :]
        V = W / sd[:, :, None]  # (p, d, K) raw-space weights
        c = b - np.einsum("pd,pdk->pk", mu, V) + self.mask[idx]  # (p, K)
        Z = (V.transpose(0, 2, 1).reshape(P * K, d) @ self.XT).reshape(P, K, m)
        Z += c[:, :, None]
        shift = None
        if Z.max() > 60.0:  # exp would overflow float32 somewhere: stabilise row by row
            shift = Z.max(1, keepdims=True)
            Z -= shift
        E = np.exp(Z)
        s = E.sum(1, keepdims=True)  # (p, 1, m)
        if shift is None and s.min() < 1e-30:  # every logit tiny: rescale
            shift = Z.max(1, keepdims=True)
            Z -= shift
            np.exp(Z, out=E)
            s = E.sum(1, keepdims=True)
        lse = np.log(s)[:, 0, :]
        if shift is not None:
            lse += shift[:, 0, :]
            Z += shift
        flat = self.target_offset[idx] + (np.arange(P) * (K * m))[:, None]  # into (p, K, m)
        z_true = Z.reshape(-1)[flat]  # (p, m)
        loss = np.einsum("pm,pm->p", w, lse - z_true, dtype=np.float64)
        E *= w[:, None, :] / s  # softmax, weighted by 1/n_p
        E.reshape(-1)[flat] -= w  # minus the one-hot target
        rs = E.sum(2)  # (p, K): intercept gradient
        G = (E.reshape(P * K, m) @ self.X).reshape(P, K, d)
        G -= rs[:, :, None] * mu[:, None, :]  # the scaler's centring
        G /= sd[:, None, :]
        G = G.transpose(0, 2, 1)  # (p, d, K)
        lam = self.lam[idx]
        G += lam[:, None, None] * W
        loss += 0.5 * lam * np.einsum("pdk,pdk->p", W, W, dtype=np.float64)
        g = np.empty_like(x)
        g[:, :d] = G
        g[:, d] = rs
        return loss, g


def _lbfgs(fun, x0: np.ndarray, tol: float, max_iter: int, memory: int = 10):
    """L-BFGS on P independent problems in lockstep; returns ``x, n_iter, converged``.

    Each problem keeps its own history, step length and stopping test (largest gradient entry
    below ``tol``, scikit-learn's ``gtol``); converged problems drop out of the products, and so
    do problems whose line search finds no decrease (float32 resolution reached; reported as not
    converged). The
    line search is Armijo backtracking: the objectives are strongly convex, so every step keeps
    the curvature ``s.y > 0`` that L-BFGS needs.
    """
    P = x0.shape[0]
    shape, D = x0.shape[1:], x0[0].size
    x = x0.reshape(P, D).astype(np.float32).copy()
    idx_all = np.arange(P)
    f, g = fun(x.reshape(P, *shape), idx_all)
    g = g.reshape(P, D)
    S = np.zeros((memory, P, D), np.float32)
    Y = np.zeros((memory, P, D), np.float32)
    rho = np.zeros((memory, P), np.float32)
    n_hist = np.zeros(P, dtype=np.int64)
    n_iter = np.zeros(P, dtype=np.int32)
    done = np.abs(g).max(1) <= tol
    live = ~done
    for it in range(max_iter):
        idx = np.flatnonzero(live)
        if idx.size == 0:
            break
        gi = g[idx]
        q = _two_loop(gi, S[:, idx], Y[:, idx], rho[:, idx], n_hist[idx], it, memory)
        slope = np.einsum("pd,pd->p", gi, q)  # q is the descent direction: slope < 0
        bad = ~(slope < 0)
        if bad.any():  # numerically lost direction: restart those problems from steepest descent
            q[bad] = -gi[bad] / np.maximum(1.0, np.linalg.norm(gi[bad], axis=1))[:, None]
            slope[bad] = np.einsum("pd,pd->p", gi[bad], q[bad])
            n_hist[idx[bad]] = 0
        x_new, f_new, g_new, stalled = _armijo(fun, x[idx], f[idx], q, slope, idx, shape)
        s, y = x_new - x[idx], g_new - g[idx]
        sy = np.einsum("pd,pd->p", s, y)
        slot = it % memory
        S[slot, idx], Y[slot, idx] = s, y
        rho[slot, idx] = np.where(sy > 0, 1.0 / np.where(sy > 0, sy, 1.0), 0.0)
        n_hist[idx] += 1
        x[idx], f[idx], g[idx] = x_new, f_new, g_new
        n_iter[idx] += 1
        converged = np.abs(g_new).max(1) <= tol
        done[idx] = converged
        live[idx] = ~converged & ~stalled  # stalled: float32 can resolve no further decrease
    return x.reshape(P, *shape), n_iter, done


def _two_loop(g, S, Y, rho, n_hist, it, memory):
    """The L-BFGS direction ``-H g`` for each problem from its last ``min(n_hist, memory)`` pairs."""
    q = g.copy()
    h = int(min(it, memory))
    order = [(it - 1 - j) % memory for j in range(h)]  # newest first
    alpha = np.zeros((h, g.shape[0]), np.float32)
    for j, slot in enumerate(order):
        use = (n_hist > j).astype(np.float32)  # problems restarted recently have fewer pairs
        alpha[j] = use * rho[slot] * np.einsum("pd,pd->p", S[slot], q)
        q -= alpha[j][:, None] * Y[slot]
    if h:
        s0, y0 = S[order[0]], Y[order[0]]
        yy = np.einsum("pd,pd->p", y0, y0)
        gamma = np.where(
            (n_hist > 0) & (yy > 0), np.einsum("pd,pd->p", s0, y0) / np.where(yy > 0, yy, 1), 0
        )
        first = n_hist == 0
        gamma = np.where(first, 1.0 / np.maximum(1.0, np.linalg.norm(g, axis=1)), gamma)
        q *= gamma[:, None]
    else:
        q /= np.maximum(1.0, np.linalg.norm(q, axis=1))[:, None]
    for j, slot in reversed(list(enumerate(order))):
        use = (n_hist > j).astype(np.float32)
        beta = use * rho[slot] * np.einsum("pd,pd->p", Y[slot], q)
        q += (alpha[j] - beta)[:, None] * S[slot]
    return -q


def _armijo(fun, x, f, q, slope, idx, shape, c1=1e-4, max_halvings=20):
    """Backtrack each problem's step from 1 until ``f(x + t q) <= f(x) + c1 t slope``.

    Returns the new points, losses and gradients, and which problems found no decrease at all
    (``stalled``: the predicted decrease is below float32 resolution; they stay put).
    """
    t = np.ones(x.shape[0], np.float32)
    x_new, f_new = x.copy(), f.copy()
    g_new = np.zeros_like(x)
    todo = np.ones(x.shape[0], dtype=bool)
    for _ in range(max_halvings):
        sub = np.flatnonzero(todo)
        xt = x[sub] + t[sub, None] * q[sub]
        ft, gt = fun(xt.reshape(sub.size, *shape), idx[sub])
        ok = ft <= f[sub] + c1 * t[sub] * slope[sub]
        acc = sub[ok]
        x_new[acc], f_new[acc], g_new[acc] = xt[ok], ft[ok], gt.reshape(sub.size, -1)[ok]
        todo[acc] = False
        if not todo.any():
            return x_new, f_new, g_new, todo
        t[todo] *= 0.5
    rest = np.flatnonzero(todo)
    _, g_rest = fun(x[rest].reshape(rest.size, *shape), idx[rest])
    g_new[rest] = g_rest.reshape(rest.size, -1)
    return x_new, f_new, g_new, todo


def fit_exact(
    X: np.ndarray,
    targets: np.ndarray,
    train: np.ndarray,
    n_classes: int,
    C: float,
    *,
    tol: float = 1e-4,
    max_iter: int = 100,
) -> Params:
    """The same probes as :func:`fit_reference`, all problems in lockstep L-BFGS (float32).

    Parameters are those of :func:`fit_reference`; ``tol`` is the stopping threshold on the
    largest gradient entry (scikit-learn's default 1e-4) and ``max_iter`` the iteration cap per
    problem (scikit-learn's default 100). Starts from zero, like scikit-learn.
    """
    P = targets.shape[0]
    Xc, m0, s0 = _standardise_design(X)
    active = class_presence(targets, train, n_classes)
    obj = _Objective(Xc, targets, train, active, C)
    x0 = np.zeros((P, Xc.shape[1] + 1, n_classes), np.float32)
    x, n_iter, converged = _lbfgs(obj, x0, tol, max_iter)
    coef, intercept = _canonical(x[:, :-1].astype(np.float64), x[:, -1].astype(np.float64), active)
    # the scaler in raw space: standardising by (mu, sd) in the centred space is standardising
    # raw features by (m0 + s0 mu, s0 sd)
    mean = m0[None, :] + s0[None, :] * obj.mu
    scale = s0[None, :] * obj.sd
    return Params(mean, scale, coef, intercept, n_iter, converged)


# ----------------------------------------------------------------------------- screen (LDA)


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
    Xc, m0, s0 = _standardise_design(X)
    active = class_presence(targets, train, K)
    atoms = _Atoms(train)
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
    coef, intercept = _canonical(coef, intercept, active)
    mean = m0[None, :] + s0[None, :] * mu
    scale = s0[None, :] * sd
    zeros = np.zeros(P, dtype=np.int32)
    return Params(mean, scale, coef, intercept, zeros, np.ones(P, dtype=bool))


def _class_sums(
    Xc: np.ndarray, targets: np.ndarray, atoms: _Atoms, K: int
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


#: Solver name -> fit(X, targets, train, n_classes, C); extra options keep their defaults.
SOLVERS: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray, int, float], Params]] = {
    "exact": fit_exact,
    "screen": fit_screen,
    "reference": fit_reference,
}
