"""Preconditioned L-BFGS on many independent problems in lockstep (numpy, float32).

The probe solver (:mod:`analysis.probes.solvers`) fits hundreds of small convex problems that
share their data; one L-BFGS per problem would spend its time in Python bookkeeping. Here every
problem keeps its own history, step length and stopping test, but each iteration is one call of
the objective for all live problems, and a problem leaves the batch when it converges or its
line search stalls. The objective is anything with the :class:`Objective` protocol.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Objective(Protocol):
    """What :func:`lbfgs` minimises: problems ``idx`` (sorted indices into the batch) at points
    ``x`` of shape ``(len(idx), *shape)``."""

    def __call__(self, x: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Loss ``(len(idx),)`` and gradient (the shape of ``x``)."""
        ...

    def precondition(self, q: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``M q`` for flat vectors ``q (len(idx), D)``: an approximate inverse Hessian."""
        ...

    def refresh(self, x: np.ndarray, idx: np.ndarray, older_than: int) -> None:
        """Rebuild ``M`` at ``x`` (all problems) for live problems ``idx`` if it is at least
        ``older_than`` iterations old."""
        ...

    def tick(self, idx: np.ndarray) -> None:
        """One iteration has begun for problems ``idx``."""
        ...


def lbfgs(
    fun: Objective,
    x0: np.ndarray,
    live: np.ndarray,
    tol: float,
    max_iter: int,
    memory: int = 10,
    *,
    refresh_every: int = 20,
    refresh_at_start: int = 10,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Preconditioned L-BFGS on P independent problems in lockstep, starting from ``x0``;
    only problems ``live`` (P,) bool are fitted. Returns ``x, n_iter, converged``.

    Each problem keeps its own history, step length and stopping test (largest gradient entry
    below ``tol``, scikit-learn's ``gtol``); converged problems drop out of the products, and so
    do problems whose line search finds no decrease (reported as not converged). The initial
    inverse Hessian is ``gamma M`` (``gamma = s'y / y'My``, the usual scaling), ``M`` refreshed
    by ``fun.refresh`` at the start (when older than ``refresh_at_start`` iterations) and every
    ``refresh_every`` iterations. The line search backtracks until Armijo's condition
    holds or the directional derivative at the trial point is still negative (the objectives are
    convex, so the loss then decreased; this test does not depend on resolving the loss in float32).
    """
    P = x0.shape[0]
    shape, D = x0.shape[1:], x0[0].size
    x = x0.reshape(P, D).astype(np.float32).copy()
    f = np.zeros(P)
    g = np.zeros((P, D), np.float32)
    n_iter = np.zeros(P, dtype=np.int32)
    done = np.zeros(P, dtype=bool)
    idx0 = np.flatnonzero(live)
    if idx0.size == 0:
        return x.reshape(P, *shape), n_iter, done
    M = fun.precondition
    fun.refresh(x.reshape(P, *shape), idx0, refresh_at_start)
    f[idx0], g0 = fun(x[idx0].reshape(idx0.size, *shape), idx0)
    g[idx0] = g0.reshape(idx0.size, D)
    done[idx0] = np.abs(g[idx0]).max(1) <= tol
    live = live & ~done
    S = np.zeros((memory, P, D), np.float32)
    Y = np.zeros((memory, P, D), np.float32)
    rho = np.zeros((memory, P), np.float32)
    n_hist = np.zeros(P, dtype=np.int64)
    for it in range(max_iter):
        idx = np.flatnonzero(live)
        if idx.size == 0:
            break
        fun.refresh(x.reshape(P, *shape), idx, refresh_every)
        fun.tick(idx)
        gi = g[idx]
        q = two_loop(gi, S[:, idx], Y[:, idx], rho[:, idx], n_hist[idx], it, memory, M, idx)
        slope = np.einsum("pd,pd->p", gi, q)  # q is the descent direction: slope < 0
        bad = ~(slope < 0)
        if bad.any():  # numerically lost direction: restart those problems from M's direction
            q[bad] = -M(gi[bad], idx[bad])
            slope[bad] = np.einsum("pd,pd->p", gi[bad], q[bad])
            n_hist[idx[bad]] = 0
        first = n_hist[idx] == 0  # no curvature pairs yet: keep the first step moderate
        if first.any():
            big = np.abs(q[first]).max(1)
            q[first] *= np.minimum(1.0, 10.0 / np.maximum(big, 1e-30))[:, None]
            slope[first] = np.einsum("pd,pd->p", gi[first], q[first])
        x_new, f_new, g_new, stalled = line_search(fun, x[idx], f[idx], q, slope, idx, shape)
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
        live[idx] = ~converged & ~stalled
    return x.reshape(P, *shape), n_iter, done


def two_loop(g, S, Y, rho, n_hist, it, memory, M, idx):
    """The L-BFGS direction ``-H g`` for each problem from its last ``min(n_hist, memory)``
    pairs, with initial inverse Hessian ``gamma M``."""
    q = g.copy()
    h = int(min(it, memory))
    order = [(it - 1 - j) % memory for j in range(h)]  # newest first
    alpha = np.zeros((h, g.shape[0]), np.float32)
    for j, slot in enumerate(order):
        use = (n_hist > j).astype(np.float32)  # problems restarted recently have fewer pairs
        alpha[j] = use * rho[slot] * np.einsum("pd,pd->p", S[slot], q)
        q -= alpha[j][:, None] * Y[slot]
    r = M(q, idx)
    if h:
        s0, y0 = S[order[0]], Y[order[0]]
        yMy = np.einsum("pd,pd->p", y0, M(y0, idx))
        sy = np.einsum("pd,pd->p", s0, y0)
        ok = (n_hist > 0) & (yMy > 0) & (sy > 0)
        r *= np.where(ok, sy / np.where(ok, yMy, 1.0), 1.0)[:, None]
    for j, slot in reversed(list(enumerate(order))):
        use = (n_hist > j).astype(np.float32)
        beta = use * rho[slot] * np.einsum("pd,pd->p", Y[slot], r)
        r += (alpha[j] - beta)[:, None] * S[slot]
    return -r


def line_search(fun, x, f, q, slope, idx, shape, c1=1e-4, max_halvings=30):
    """Backtrack each problem's step from 1 until ``f(x + t q) <= f(x) + c1 t slope`` or the
    directional derivative ``q . g(x + t q)`` is not positive (convexity: then ``f`` decreased).

    Returns the new points, losses and gradients, and which problems found no acceptable step
    (``stalled``; they stay put).
    """
    t = np.ones(x.shape[0], np.float32)
    x_new, f_new = x.copy(), f.copy()
    g_new = np.zeros_like(x)
    todo = np.ones(x.shape[0], dtype=bool)
    for _ in range(max_halvings):
        sub = np.flatnonzero(todo)
        xt = x[sub] + t[sub, None] * q[sub]
        ft, gt = fun(xt.reshape(sub.size, *shape), idx[sub])
        gt = gt.reshape(sub.size, -1)
        ok = (ft <= f[sub] + c1 * t[sub] * slope[sub]) | (np.einsum("pd,pd->p", gt, q[sub]) <= 0)
        acc = sub[ok]
        x_new[acc], f_new[acc], g_new[acc] = xt[ok], ft[ok], gt[ok]
        todo[acc] = False
        if not todo.any():
            return x_new, f_new, g_new, todo
        t[todo] *= 0.5
    rest = np.flatnonzero(todo)
    _, g_rest = fun(x[rest].reshape(rest.size, *shape), idx[rest])
    g_new[rest] = g_rest.reshape(rest.size, -1)
    return x_new, f_new, g_new, todo
