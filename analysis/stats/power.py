"""Power, minimum detectable effect and the seeds a test needs: one set of kernels.

Every test layerstate decides with is a t test on an estimate with standard error ``se`` and
``df`` degrees of freedom (a paired t over seeds, GEE or MixedLM with their own ``se`` and
``df``). Power and MDE are therefore functions of ``(se, df)`` and the level the test is
judged at; the forms in terms of seeds and the SD of per-seed values (``n`` seeds: ``se = sd /
sqrt(n)``, ``df = n - 1``) are the same kernels.

The level matters: a claim corrected across a family (Holm) is judged at its Holm step, not at
``alpha`` (:mod:`analysis.stats.decision`), and its power and MDE are computed at that level.
:func:`max_attainable_t` and :func:`seeds_to_reach` say when no data could pass the test at
the seeds there are, and how many seeds would let the best data pass.
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.stats
from statsmodels.stats.power import TTestPower

__all__ = ["difference_power", "mde_se", "minimum_detectable_effect", "power_se", "seeds_for_power",
           "t_critical", "tost_power", "tost_power_se"]


def t_critical(level, df, alternative: str = "one-sided"):
    """The t a test at ``level`` must reach (two-sided: ``level / 2`` per side)."""
    level, df = np.broadcast_arrays(np.asarray(level, float), np.asarray(df, float))
    q = 1 - level / 2 if alternative == "two-sided" else 1 - level
    with np.errstate(invalid="ignore"):
        out = scipy.stats.t.ppf(q, df)
    return out if out.ndim else float(out)


def power_se(effect, se, df, alpha=0.05, alternative: str = "two-sided"):
    """Power of a t test with standard error ``se`` and ``df`` degrees of freedom to detect a
    true effect ``effect`` (in the tested direction for one-sided tests): noncentral t, as
    ``TTestPower`` with ``nobs = df + 1`` for a one-sample t. ``alpha`` may be an array (each
    test at its own level). NaN where ``se`` is not > 0."""
    effect, se, df, alpha = np.broadcast_arrays(*(np.asarray(v, float) for v in (effect, se, df, alpha)))
    with np.errstate(invalid="ignore", divide="ignore"):
        ncp = np.abs(effect) / se
        if alternative == "two-sided":
            tc = scipy.stats.t.ppf(1 - alpha / 2, df)
            # the far tail underflows to NaN in scipy for large ncp: it is 0 there
            p = scipy.stats.nct.sf(tc, df, ncp) + np.nan_to_num(scipy.stats.nct.cdf(-tc, df, ncp))
        else:
            p = scipy.stats.nct.sf(scipy.stats.t.ppf(1 - alpha, df), df, ncp)
    p = np.where(se > 0, p, np.nan)
    return p if p.ndim else float(p)


def mde_se(se, df, alpha=0.05, power: float = 0.8, alternative: str = "two-sided"):
    """Smallest true effect a t test (``se``, ``df``, judged at ``alpha``) detects with
    probability ``power``."""
    se, df, alpha = np.broadcast_arrays(np.asarray(se, float), np.asarray(df, float), np.asarray(alpha, float))
    out = np.full(se.shape, np.nan)
    alt = "two-sided" if alternative == "two-sided" else "larger"
    for i in np.ndindex(se.shape):
        if np.isfinite(se[i]) and np.isfinite(df[i]) and df[i] >= 1 and 0 < alpha[i] < 1:
            out[i] = _mde_in_se(float(df[i]) + 1, float(alpha[i]), float(power), alt) * se[i]
    return out if out.ndim else float(out)


@functools.lru_cache(maxsize=4096)
def _mde_in_se(n: float, alpha: float, power: float, alt: str) -> float:
    """The smallest detectable effect in standard errors of a t test on ``n - 1`` degrees of
    freedom: it depends on nothing else, so it is solved once per (n, alpha, power, side), not
    once per estimate (a table of 1,000 simulated experiments solved the same root 1,000 times)."""
    es = TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=power, alternative=alt)
    return float(np.asarray(es)) * float(np.sqrt(n))


def tost_power_se(se, df, margin, alpha=0.05, true_difference=0.0, n_nodes: int = 256):
    """Probability that a TOST (each side at ``alpha``) declares equivalence, for an estimate
    with standard error ``se`` on ``df`` degrees of freedom (``df se^2 / sigma^2 ~ chi2(df)``).

    With ``dbar ~ N(delta, se^2)`` and ``V = df s^2 / sigma^2 ~ chi2(df)`` independent, TOST
    rejects both one-sided nulls iff ``|dbar| < margin - t_c s``. Power is the integral over
    ``V`` of the normal probability of that band, by Gauss-Legendre quadrature on the
    chi-square CDF scale (Owen 1965 computes the same by his Q function). NaN where ``se`` is
    not > 0."""
    se, df, margin, delta, alpha = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (se, df, margin, true_difference, alpha)))
    with np.errstate(invalid="ignore", divide="ignore"):
        t_c = scipy.stats.t.ppf(1 - alpha, df)
        v_max = df * (margin / (t_c * se)) ** 2  # the band is empty beyond
        u_max = scipy.stats.chi2.cdf(v_max, df)[..., None]
        x, w = np.polynomial.legendre.leggauss(n_nodes)
        u = u_max * (x + 1) / 2
        s = se[..., None] * np.sqrt(scipy.stats.chi2.ppf(u, df[..., None]) / df[..., None])
        half = margin[..., None] - t_c[..., None] * s
        scale = se[..., None]
        band = scipy.stats.norm.cdf((half - delta[..., None]) / scale) - scipy.stats.norm.cdf(
            (-half - delta[..., None]) / scale)
        power = np.sum(w * np.clip(band, 0, 1), axis=-1) * u_max[..., 0] / 2
    power = np.where(se > 0, power, np.nan)
    return power if power.ndim else float(power)


# ------------------------------------------------------------ the same, in seeds and SDs


def _per_seed(n_seeds, sd):
    n = np.asarray(n_seeds, float)
    return np.asarray(sd, float) / np.sqrt(n), n - 1


def tost_power(n_seeds, sd, margin, alpha: float = 0.05, true_difference=0.0, n_nodes: int = 256):
    """:func:`tost_power_se` for a paired TOST over ``n_seeds`` seeds whose per-seed
    differences have SD ``sd``."""
    se, df = _per_seed(n_seeds, sd)
    return tost_power_se(se, df, margin, alpha, true_difference, n_nodes)


def difference_power(n_seeds, sd, effect, alpha: float = 0.05):
    """:func:`power_se` of the two-sided paired t over ``n_seeds`` seeds (per-seed SD ``sd``)
    at a true mean difference ``effect``."""
    se, df = _per_seed(n_seeds, sd)
    return power_se(effect, se, df, alpha, "two-sided")


def minimum_detectable_effect(n_seeds, sd, alpha: float = 0.05, power: float = 0.8):
    """:func:`mde_se` of the two-sided paired t over ``n_seeds`` seeds (per-seed SD ``sd``)."""
    se, df = _per_seed(n_seeds, sd)
    return mde_se(se, df, alpha, power, "two-sided")


def seeds_for_power(sd_seed, effect, alpha: float, *, power: float = 0.8, alternative: str = "one-sided",
                    n_max: int = 200) -> int | None:
    """The fewest seeds (>= 2) whose t test at ``alpha`` detects a true ``effect`` with
    probability ``power``, when one seed's value has SD ``sd_seed`` (between seeds plus its own
    sampling error); None when not reached by ``n_max``."""
    if not (np.isfinite(sd_seed) and sd_seed > 0 and np.isfinite(effect) and effect != 0):
        return None
    for n in range(2, n_max + 1):
        if power_se(effect, sd_seed / np.sqrt(n), n - 1, alpha, alternative) >= power:
            return n
    return None
