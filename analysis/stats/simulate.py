"""Simulated experiments shaped like ours, with a known truth, for calibrating the statistics.

The model (**ours**, after the Conv1D experiment of docs/science.md, "Paper A"): for dataset
``k``, seed ``s``, condition ``c`` and sequence ``i`` of that seed, the probability that a
position is predicted correctly is

    p = expit(base_logit + shift_c + u_ks + w_ksc + eta_ksi)

with ``u ~ N(0, seed_sd)`` the seed's offset, ``w ~ N(0, model_sd)`` the offset of the model
trained for that seed and condition, and ``eta ~ N(0, difficulty_sd)`` the sequence's
difficulty, shared by both conditions (they are evaluated on the same sequences: paired). Each
sequence has ``n_positions`` labelled positions, correct ~ Binomial(n_positions, p). Seeds have
between ``n_sequences[0]`` and ``n_sequences[1]`` sequences (drawn once per call, so that one
sequence mask serves every dataset); the rest is NaN padding.

The truth is the population accuracy of a condition, ``E[expit(base_logit + shift_c + Z *
sqrt(seed_sd^2 + model_sd^2 + difficulty_sd^2))]`` (Gauss-Hermite quadrature); ``shift_c`` is
solved so that treatment minus reference equals ``difference`` exactly on the accuracy scale.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy.optimize import brentq
from scipy.special import expit

from analysis.stats import validate

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(80)  # probabilists' Hermite: N(0, 1)


def population_accuracy(logit: float, total_sd: float) -> float:
    """``E[expit(logit + total_sd * Z)]`` for ``Z ~ N(0, 1)``."""
    return float(np.sum(_WEIGHTS * expit(logit + total_sd * _NODES)) / np.sqrt(2 * np.pi))


def _shift_for(difference: float, base_logit: float, total_sd: float) -> float:
    """Logit shift whose population accuracy exceeds the base one by ``difference``."""
    base = population_accuracy(base_logit, total_sd)
    if not -base < difference < 1 - base:
        raise ValueError(
            f"difference {difference} is impossible from a base accuracy of {base:.3f}; it "
            f"must lie in ({-base:.3f}, {1 - base:.3f})"
        )
    return brentq(
        lambda d: population_accuracy(base_logit + d, total_sd) - base - difference,
        -30.0,
        30.0,
        xtol=1e-12,
    )


def simulate_paired_accuracy(
    rng: np.random.Generator | int,
    *,
    n_datasets: int,
    n_seeds: int = 5,
    n_sequences: tuple[int, int] = (50, 400),
    n_positions: int = 40,
    base_logit: float = 1.5,
    seed_sd: float = 0.3,
    model_sd: float = 0.2,
    difficulty_sd: float = 1.0,
    difference: float = 0.0,
    conditions: tuple[str, str] = ("reference", "treatment"),
) -> xr.Dataset:
    """Draw ``n_datasets`` independent paired experiments with a known true difference.

    Parameters
    ----------
    rng : numpy.random.Generator or int
    n_datasets : int
        Independent replicate experiments (a cells dim of the output).
    n_seeds : int
    n_sequences : (int, int)
        Inclusive range of the number of sequences per seed.
    n_positions : int
        Labelled positions per sequence.
    base_logit, seed_sd, model_sd, difficulty_sd : float
        See the module docstring (logit scale).
    difference : float
        True population accuracy of ``conditions[1]`` minus ``conditions[0]``.
    conditions : (str, str)

    Returns
    -------
    xarray.Dataset
        ``correct`` and ``labelled``, dims (dataset, condition, seed, sequence), NaN-padded;
        ``truth`` (condition,) the population accuracies; attrs ``true_difference``.
    """
    gen = validate.check_rng(rng)
    total_sd = float(np.sqrt(seed_sd**2 + model_sd**2 + difficulty_sd**2))
    shift = np.array([0.0, _shift_for(difference, base_logit, total_sd)])
    lo, hi = n_sequences
    n_seq = gen.integers(lo, hi + 1, size=n_seeds)  # (seed,)
    mask = np.arange(hi) < n_seq[:, None]  # (seed, sequence)
    u = gen.normal(0, seed_sd, (n_datasets, 1, n_seeds, 1))
    w = gen.normal(0, model_sd, (n_datasets, 2, n_seeds, 1))
    eta = gen.normal(0, difficulty_sd, (n_datasets, 1, n_seeds, hi))
    p = expit(base_logit + shift[None, :, None, None] + u + w + eta)
    correct = gen.binomial(n_positions, p).astype(float)  # (dataset, condition, seed, sequence)
    dims = ("dataset", "condition", "seed", "sequence")
    coords = {"condition": list(conditions), "seed": np.arange(n_seeds)}
    truth = [population_accuracy(base_logit + d, total_sd) for d in shift]
    return xr.Dataset(
        {
            "correct": (dims, np.where(mask, correct, np.nan)),
            "labelled": (dims, np.where(mask, float(n_positions), np.nan) * np.ones_like(correct)),
            "truth": ("condition", truth),
        },
        coords=coords,
        attrs={"true_difference": truth[1] - truth[0], "model": __doc__.split("\n\n")[1]},
    )
