"""The project's closed-form LEACE held equal to Belrose et al.'s own package
(``concept-erasure``, ``LeaceFitter``) on the same rows: the same eraser, the same erased states.

``concept-erasure`` by default shrinks the covariance (``shrinkage``), caps the erased
covariance's trace (``constrain_cov_trace``) and drops singular directions below
``svd_tol = 0.01``; those three are turned off here so that both compute the estimator of the
paper's Theorem 4.3 (`analysis.interventions.erasure.leace_np`).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from concept_erasure import LeaceFitter

from analysis.interventions.erasure import erase_np, leace_np


def _rows(n: int, d: int, n_classes: int, seed: int):
    """Correlated, offset, unevenly scaled rows whose class shifts their mean."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    means = rng.normal(size=(n_classes, d)) * 2.0
    mix = rng.normal(size=(d, d)) * 0.4 + np.eye(d)
    x = (rng.normal(size=(n, d)) @ mix) * np.geomspace(0.2, 5, d) + means[y] + 10.0
    return x, y


def _reference(x: np.ndarray, y: np.ndarray):
    z = torch.nn.functional.one_hot(torch.from_numpy(y), int(y.max()) + 1)
    fitter = LeaceFitter.fit(torch.from_numpy(x), z, shrinkage=False,  # float64, as x
                             constrain_cov_trace=False, svd_tol=1e-12)
    return fitter.eraser


@pytest.mark.parametrize(("n_classes", "d"), [(2, 8), (4, 12), (6, 32)])
def test_leace_equals_concept_erasure(n_classes, d):
    x, y = _rows(3000, d, n_classes, seed=n_classes)
    ours = leace_np(x, y)
    theirs = _reference(x, y)
    # the same oblique projection: I - left @ right (ours acts on rows, theirs on columns)
    p_ours = np.eye(d) - ours.left @ ours.right
    p_theirs = np.eye(d) - (theirs.proj_left @ theirs.proj_right).numpy().T
    np.testing.assert_allclose(p_ours, p_theirs, atol=1e-8)
    assert ours.rank == n_classes - 1
    # and the same erased states, which no longer carry the classes' means
    erased = erase_np(x, ours)
    np.testing.assert_allclose(erased, theirs(torch.from_numpy(x)).numpy(), atol=1e-8 * np.abs(x).max())
    means = np.stack([erased[y == k].mean(0) for k in range(n_classes)])
    np.testing.assert_allclose(means, means.mean(0, keepdims=True).repeat(n_classes, 0), atol=1e-7)
