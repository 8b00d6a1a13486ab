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

With ``difficulty="beta"`` a sequence's difficulty is Beta-distributed instead: its accuracy
before any seed or model offset is ``q ~ Beta(*difficulty_beta)`` and ``base_logit +
eta = logit(q)`` (``base_logit`` and ``difficulty_sd`` are not used). Unbalanced designs:
``per_run=True`` draws the number of sequences per (seed, condition), so the runs of one seed
share only their first sequences; ``missing`` lists (condition, seed) runs that are absent.

The truth is the population accuracy of a condition, ``E[expit(base_logit + shift_c + Z *
sqrt(seed_sd^2 + model_sd^2 + difficulty_sd^2))]`` (Gauss-Hermite quadrature; with Beta
difficulty, Gauss-Legendre over the Beta quantiles as well); ``shift_c`` is solved so that
treatment minus reference equals ``difference`` exactly on the accuracy scale.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import scipy.stats
import xarray as xr
from scipy.optimize import brentq
from scipy.special import expit, logit

from analysis.stats import validate

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(80)  # probabilists' Hermite: N(0, 1)


@functools.cache
def _legendre() -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [-1, 1] (400: an eigenproblem of 1-1.7 s, so made
    on first use, not when the module is imported by every process)."""
    return np.polynomial.legendre.leggauss(400)


def population_accuracy(logit_: float, total_sd: float) -> float:
    """``E[expit(logit_ + total_sd * Z)]`` for ``Z ~ N(0, 1)``."""
    return float(np.sum(_WEIGHTS * expit(logit_ + total_sd * _NODES)) / np.sqrt(2 * np.pi))


def _beta_population_accuracy(shift: float, offset_sd: float, ab: tuple[float, float]) -> float:
    """``E[expit(logit(q) + shift + offset_sd * Z)]``, ``q ~ Beta(*ab)``, ``Z ~ N(0, 1)``."""
    leg_x, leg_w = _legendre()
    u = (leg_x + 1) / 2  # Gauss-Legendre on the Beta's CDF scale
    q = scipy.stats.beta.ppf(u, *ab)
    inner = expit(logit(q)[:, None] + shift + offset_sd * _NODES[None, :]) @ _WEIGHTS
    return float(np.sum(leg_w / 2 * inner) / np.sqrt(2 * np.pi))


def _shift_for(difference: float, accuracy) -> float:
    """Logit shift whose population accuracy exceeds the base one by ``difference``."""
    base = accuracy(0.0)
    if not -base < difference < 1 - base:
        raise ValueError(
            f"difference {difference} is impossible from a base accuracy of {base:.3f}; it "
            f"must lie in ({-base:.3f}, {1 - base:.3f})"
        )
    return brentq(lambda d: accuracy(d) - base - difference, -30.0, 30.0, xtol=1e-12)


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
    difficulty: str = "normal",
    difficulty_beta: tuple[float, float] = (4.0, 1.2),
    per_run: bool = False,
    missing: Sequence[tuple[str, int]] = (),
    sizes: Sequence[int] | None = None,
) -> xr.Dataset:
    """Draw ``n_datasets`` independent paired experiments with a known true difference.

    Parameters
    ----------
    rng : numpy.random.Generator or int
    n_datasets : int
        Independent replicate experiments (a cells dim of the output).
    n_seeds : int
    n_sequences : (int, int)
        Inclusive range of the number of sequences per seed (per run with ``per_run``).
    n_positions : int
        Labelled positions per sequence.
    base_logit, seed_sd, model_sd, difficulty_sd : float
        See the module docstring (logit scale).
    difference : float
        True population accuracy of ``conditions[1]`` minus ``conditions[0]``.
    conditions : (str, str)
    difficulty : {"normal", "beta"}
        Sequence difficulty on the logit scale ``N(0, difficulty_sd)`` or a Beta-distributed
        sequence accuracy ``Beta(*difficulty_beta)`` (module docstring).
    difficulty_beta : (float, float)
    per_run : bool
        Draw the number of sequences per (seed, condition) rather than per seed.
    missing : sequence of (condition, seed)
        Runs that are absent (all NaN), e.g. ``[("treatment", 4)]``.
    sizes : sequence of int, optional
        The number of sequences of each seed, fixed (both runs of a seed); replaces
        ``n_sequences`` and ``n_seeds`` (e.g. ``(400, 50, 50)``: few clusters of unequal size).

    Returns
    -------
    xarray.Dataset
        ``correct`` and ``labelled``, dims (dataset, condition, seed, sequence), NaN-padded;
        ``truth`` (condition,) the population accuracies; attrs ``true_difference`` and
        ``true_log_odds_ratio`` (the logit shift of the treatment, given the random effects).
    """
    gen = validate.check_rng(rng)
    validate.check_choice(difficulty, ("normal", "beta"), "difficulty")
    lo, hi = n_sequences
    if sizes is not None:
        if per_run or len(sizes) < 2 or min(sizes) < 1:
            raise ValueError(f"sizes must give >= 2 seeds of >= 1 sequence each, without per_run; got {sizes}")
        n_seeds, lo, hi = len(sizes), min(sizes), max(sizes)
    if difficulty == "beta":
        offset_sd = float(np.sqrt(seed_sd**2 + model_sd**2))

        def accuracy(d: float) -> float:
            return _beta_population_accuracy(d, offset_sd, difficulty_beta)

    else:
        total_sd = float(np.sqrt(seed_sd**2 + model_sd**2 + difficulty_sd**2))

        def accuracy(d: float) -> float:
            return population_accuracy(base_logit + d, total_sd)

    shift = np.array([0.0, _shift_for(difference, accuracy)])
    if per_run:
        n_seq = gen.integers(lo, hi + 1, size=(2, n_seeds))  # (condition, seed)
        mask = np.arange(hi) < n_seq[..., None]  # (condition, seed, sequence)
    else:
        n_seq = np.asarray(sizes) if sizes is not None else gen.integers(lo, hi + 1, size=n_seeds)  # (seed,)
        mask = np.broadcast_to(np.arange(hi) < n_seq[:, None], (2, n_seeds, hi))
    mask = mask.copy()
    for cond, seed in missing:
        mask[list(conditions).index(cond), int(seed)] = False
    u = gen.normal(0, seed_sd, (n_datasets, 1, n_seeds, 1))
    w = gen.normal(0, model_sd, (n_datasets, 2, n_seeds, 1))
    if difficulty == "beta":
        q = np.clip(gen.beta(*difficulty_beta, (n_datasets, 1, n_seeds, hi)), 1e-12, 1 - 1e-12)
        p = expit(shift[None, :, None, None] + u + w + logit(q))
    else:
        eta = gen.normal(0, difficulty_sd, (n_datasets, 1, n_seeds, hi))
        p = expit(base_logit + shift[None, :, None, None] + u + w + eta)
    correct = gen.binomial(n_positions, p).astype(float)  # (dataset, condition, seed, sequence)
    dims = ("dataset", "condition", "seed", "sequence")
    coords = {"condition": list(conditions), "seed": np.arange(n_seeds)}
    truth = [accuracy(d) for d in shift]
    return xr.Dataset(
        {
            "correct": (dims, np.where(mask, correct, np.nan)),
            "labelled": (dims, np.where(mask, float(n_positions), np.nan) * np.ones_like(correct)),
            "truth": ("condition", truth),
        },
        coords=coords,
        attrs={"true_difference": truth[1] - truth[0], "true_log_odds_ratio": float(shift[1]),
               "model": __doc__.split("\n\n")[1]},
    )
