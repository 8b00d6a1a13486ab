"""The boundaries of a group-sequential design: z-scale boundaries that spend alpha by a
Lan-DeMets function (recursive numerical integration of the stage-wise z statistics), carried
over to each stage's t on its own degrees of freedom, their calibration on simulated null paths,
and the repeated confidence intervals' critical values (the method: :mod:`analysis.stats.sequential`)."""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Sequence

import numpy as np
import scipy.special
import scipy.stats

from analysis.stats import spending as _spending
from analysis.stats.design import Design, DesignError
from analysis.stats.disk_cache import cached_number, code_digest
from analysis.stats.spending import spent

__all__ = ["calibration_factor", "rci_critical", "stage_critical", "t_boundaries", "z_boundaries"]


_LOWER = -8.5  # the z density below is < 1e-16: the integration grid starts here
_NODES = 1201


def _simpson(a: float, b: float, n: int = _NODES) -> tuple[np.ndarray, np.ndarray]:
    z = np.linspace(a, b, n)
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return z, w * (b - a) / (n - 1) / 3.0


def _norm_pdf(x: np.ndarray) -> np.ndarray:
    """The standard normal density, by the expression scipy's ``norm.pdf`` evaluates (the same
    bits) without its argument checks, which took 60% of a 1201 x 1201 grid's time."""
    return np.exp(-x ** 2 / 2.0) / _SQRT_2PI


_SQRT_2PI = np.sqrt(2 * np.pi)


def _cross(c: float, wf: np.ndarray, z: np.ndarray, s0: float, s1: float, d: float) -> float:
    """P(continue to the previous stage at ``z``, then cross ``c``): the continuation density
    times its Simpson weights ``wf`` integrated against the normal tail of the increment."""
    return float(np.sum(wf * scipy.stats.norm.sf((c * s1 - z * s0) / d)))


@functools.lru_cache(maxsize=8192)
def z_boundaries(fractions: tuple[float, ...], level: float, spending: str) -> tuple[float, ...]:
    """One-sided upper z boundaries ``b_1 .. b_K`` at information ``fractions`` that spend
    ``level`` by ``spending``: ``P0(Z_1 < b_1, ..., Z_{k-1} < b_{k-1}, Z_k >= b_k)`` equals the
    alpha spent between stages k-1 and k. The canonical joint distribution (``Z_k = S_k /
    sqrt(t_k)``, ``S`` with independent N(0, dt) increments) is integrated recursively on a
    Simpson grid of the continuation region (Armitage, McPherson & Rowe 1969). ``inf`` where a
    stage spends nothing."""
    t = np.asarray(fractions, dtype=float)
    if t.size == 0 or np.any(np.diff(t) <= 0) or t[0] <= 0 or t[-1] > 1 + 1e-12:
        raise DesignError(f"information fractions must increase within (0, 1], got {fractions}")
    if not 0 < level < 1:
        raise DesignError(f"a boundary's level must lie in (0, 1), got {level}")
    cum = np.asarray(spent(spending, level, t), dtype=float)
    inc = np.diff(np.concatenate([[0.0], cum]))
    out = []
    b = float(scipy.stats.norm.isf(inc[0])) if inc[0] > 0 else math.inf
    out.append(b)
    z, w = _simpson(_LOWER, min(b, -_LOWER))
    f = _norm_pdf(z)
    for k in range(1, t.size):
        s0, s1, d = math.sqrt(t[k - 1]), math.sqrt(t[k]), math.sqrt(t[k] - t[k - 1])
        wf = w * f
        if inc[k] <= 0:
            b = math.inf
        else:
            lo, hi = _LOWER, 40.0
            while _cross(lo, wf, z, s0, s1, d) < inc[k]:
                lo -= 4.0
            b = float(scipy.optimize.brentq(lambda c, a=float(inc[k]), wf=wf, z=z, s0=s0, s1=s1, d=d:
                                            _cross(c, wf, z, s0, s1, d) - a, lo, hi, xtol=1e-10))
        out.append(b)
        zn, wn = _simpson(_LOWER, min(b, -_LOWER))
        f = (s1 / d) * (wf[None, :] * _norm_pdf((zn[:, None] * s1 - z[None, :] * s0) / d)).sum(1)
        z, w = zn, wn
    return tuple(out)


#: Null paths the t boundaries are calibrated on (fixed seed: the boundaries are reproducible).
CALIBRATION_PATHS = 1_000_000
CALIBRATION_SEED = 20261204


@functools.lru_cache(maxsize=4)
def _null_paths(seeds: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """One-sided p-values under the null of the stage-wise t statistics (mean over seeds, ``n_k -
    1`` df) and of the z statistics (known SD) of the same normal draws, ``(paths, stages)``."""
    rng = np.random.default_rng([CALIBRATION_SEED, *seeds])
    n = np.asarray(seeds)
    pt, pz = [], []
    for start in range(0, CALIBRATION_PATHS, 100_000):
        rows = min(100_000, CALIBRATION_PATHS - start)
        x = rng.standard_normal((rows, int(n[-1])))
        s1, s2 = np.cumsum(x, 1)[:, n - 1], np.cumsum(x * x, 1)[:, n - 1]
        mean = s1 / n
        sd = np.sqrt(np.maximum(s2 - n * mean ** 2, 0.0) / (n - 1))
        # scipy.stats' t.sf and norm.sf are these special functions behind argument checks
        # that took a third of the time on 1e6 x stages values (the same bits)
        pt.append(scipy.special.stdtr(n - 1, -(mean / (sd / np.sqrt(n)))))
        pz.append(scipy.special.ndtr(-(mean * np.sqrt(n))))
    return np.concatenate(pt), np.concatenate(pz)


@functools.lru_cache(maxsize=65536)
def calibration_factor(seeds: tuple[int, ...], level: float, spending: str) -> float:
    """The factor ``gamma`` on the z boundaries' stage-wise tail probabilities that makes the t
    boundaries ``F_t^{-1}(1 - gamma Phi(-b_k); n_k - 1)`` spend exactly ``level`` under the null,
    calibrated on :data:`CALIBRATION_PATHS` simulated null paths of normal per-seed values.

    Carried over by its tail probability alone (``gamma = 1``) a t boundary with 2-9 df lets
    10-25% more than ``level`` through: a t statistic's stages share its variance estimate, which
    the z scale's joint distribution does not know. The z statistics of the same draws are a
    control variate: ``gamma`` is chosen so the t boundaries cross on as many paths as the z
    boundaries do on those paths (whose exact rate is ``level``), which removes most of the
    Monte Carlo error. 1 for a single stage (the t test is then exact).

    Kept on disk between processes (:mod:`analysis.stats.disk_cache`), keyed by the arguments
    and this module's and the spending functions' source: the same bits, without the paths."""
    if len(seeds) == 1:
        return 1.0
    key = f"{seeds!r} {level!r} {spending!r} {CALIBRATION_PATHS} {CALIBRATION_SEED} {_code()}"
    return cached_number("calibration", key, lambda: _calibration_factor(seeds, level, spending))


@functools.lru_cache(maxsize=1)
def _code() -> str:
    return code_digest([sys.modules[__name__], _spending])


def _calibration_factor(seeds: tuple[int, ...], level: float, spending: str) -> float:
    fr = tuple(n / seeds[-1] for n in seeds)
    nominal = scipy.stats.norm.sf(np.asarray(z_boundaries(fr, level, spending)))
    pt, pz = _null_paths(seeds)
    use = nominal > 0
    with np.errstate(divide="ignore"):
        r_t = np.min(pt[:, use] / nominal[use], axis=1)
        hits_z = float(np.mean(np.min(pz[:, use] / nominal[use], axis=1) <= 1.0))
    target = min(max(hits_z, 1.0 / CALIBRATION_PATHS), 1.0)
    return float(np.quantile(r_t, target))


@functools.lru_cache(maxsize=65536)
def stage_critical(seeds: tuple[int, ...], level: float, spending: str, k: int, df: float,
                   calibrated: bool = True) -> float:
    """The t a claim's estimate must reach at stage ``k`` of a design with stage sizes ``seeds``
    (one side at one-sided ``level``, ``df`` degrees of freedom): the z boundary of the spending
    function as a t tail, calibrated (:func:`calibration_factor`) unless ``calibrated`` is off."""
    fr = tuple(n / seeds[-1] for n in seeds)
    b = z_boundaries(fr, level, spending)[k]
    if not math.isfinite(b):
        return math.inf
    gamma = calibration_factor(seeds, level, spending) if calibrated else 1.0
    return float(scipy.stats.t.isf(min(gamma * scipy.stats.norm.sf(b), 0.5), df))


def t_boundaries(design: Design, level: float, df: Sequence[float], *, calibrated: bool = True) -> np.ndarray:
    """One-sided t boundaries of the design's stages at ``level`` with each stage's ``df``: the
    z boundary's tail probability, times :func:`calibration_factor` (``calibrated``), carried to
    t on ``df_k`` degrees of freedom."""
    seeds = design.seeds()
    if len(df) > len(seeds):
        raise DesignError(f"{len(df)} stages of degrees of freedom for a design of {len(seeds)} stages")
    return np.array([stage_critical(seeds, float(level), design.spending, k, float(d), calibrated)
                     for k, d in enumerate(df)])


def rci_critical(design: Design, k: int, df: float) -> float:
    """The multiplier of the standard error in the repeated ``1 - alpha`` confidence interval
    at stage ``k`` (each side at ``alpha / 2`` spent by the design's function)."""
    return stage_critical(design.seeds(), design.alpha / 2, design.spending, k, float(df))
