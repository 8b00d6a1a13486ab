"""The lockstep L-BFGS on problems whose minimum is known: independent convex quadratics."""

from __future__ import annotations

import numpy as np

from analysis.probes.lbfgs import lbfgs


class Quadratics:
    """f_p(x) = 0.5 (x - c_p)' A_p (x - c_p) for P problems of dimension D; the preconditioner
    is the identity or, with ``exact``, A_p^-1. Counts calls and refreshes."""

    def __init__(self, P: int, D: int, seed: int, exact: bool = False):
        rng = np.random.default_rng(seed)
        Q = np.linalg.qr(rng.normal(size=(P, D, D)))[0]
        eig = np.geomspace(1.0, 10.0 ** rng.uniform(0, 2.5, size=P), D).T  # condition 1-300
        self.A = np.einsum("pij,pj,pkj->pik", Q, eig, Q).astype(np.float32)
        self.c = rng.normal(size=(P, D)).astype(np.float32)
        self.inv = np.linalg.inv(self.A.astype(np.float64)).astype(np.float32) if exact else None
        self.calls, self.refreshed = 0, 0

    def __call__(self, x, idx):
        self.calls += 1
        r = x - self.c[idx]
        g = np.einsum("pij,pj->pi", self.A[idx], r)
        return 0.5 * np.einsum("pi,pi->p", r, g).astype(np.float64), g

    def precondition(self, q, idx):
        return q.copy() if self.inv is None else np.einsum("pij,pj->pi", self.inv[idx], q)

    def refresh(self, x, idx, older_than):
        self.refreshed += 1

    def tick(self, idx):
        pass


def test_every_live_problem_reaches_its_own_minimum():
    fun = Quadratics(P=12, D=8, seed=0)
    live = np.ones(12, dtype=bool)
    live[3] = False  # not fitted: left where it started
    x0 = np.zeros((12, 8), np.float32)
    x, n_iter, converged = lbfgs(fun, x0, live, tol=1e-4, max_iter=500)
    assert converged[live].all() and not converged[3] and n_iter[3] == 0
    np.testing.assert_array_equal(x[3], 0.0)
    # gradient below tol means |x - c| <= tol / smallest eigenvalue (1)
    assert np.abs(x[live] - fun.c[live]).max() < 1e-3
    assert len(set(n_iter[live].tolist())) > 1  # each problem stops on its own test
    assert fun.refreshed >= 1


def test_the_preconditioner_is_used():
    plain = Quadratics(P=6, D=16, seed=1)
    exact = Quadratics(P=6, D=16, seed=1, exact=True)
    x0 = np.zeros((6, 16), np.float32)
    _, it_plain, ok_plain = lbfgs(plain, x0, np.ones(6, dtype=bool), tol=1e-4, max_iter=500)
    x, it_exact, ok_exact = lbfgs(exact, x0, np.ones(6, dtype=bool), tol=1e-4, max_iter=500)
    assert ok_plain.all() and ok_exact.all()
    assert it_exact.max() <= 3 < it_plain.max()  # Newton steps with the exact inverse Hessian
    np.testing.assert_allclose(x, exact.c, atol=1e-3)


def test_a_problem_at_its_cap_is_not_converged():
    fun = Quadratics(P=3, D=32, seed=2)
    _, n_iter, converged = lbfgs(fun, np.zeros((3, 32), np.float32), np.ones(3, dtype=bool), tol=1e-8,
                                 max_iter=2)
    assert (n_iter == 2).all() and not converged.any()
