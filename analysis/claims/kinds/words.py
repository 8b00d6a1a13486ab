"""The phrases the kinds' decisions share: a Holm level, the opposite side's test, an interval
that lies on the opposite side without that test agreeing."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy import stats

from analysis.claims.kinds.base import ALPHA
from analysis.stats.decision import fmt_p


def level_text(level: float) -> str:
    """``0.05``, or ``alpha/45 = 0.0011`` for a Holm step below alpha."""
    if not np.isfinite(level):
        return "not computed"
    k = ALPHA / level
    if abs(k - 1) < 1e-9:
        return f"{ALPHA:g}"
    return f"alpha/{k:.0f} = {level:.2g}" if abs(k - round(k)) < 1e-9 else f"{level:.2g}"


def contradicted(adj: Mapping[str, float]) -> bool:
    """The opposite side's test, Holm-corrected across the claims (:meth:`ClaimBase.contra_p`)."""
    return bool(adj.get("contra", np.nan) < ALPHA)


def contra_text(adj: Mapping[str, float]) -> str:
    return f" (the test of that side at the two-sided level, Holm p = {fmt_p(adj['contra'])})"


def short_of(adj: Mapping[str, float], beyond: bool, where: str) -> str:
    """Said of an interval that lies on the opposite side without the corrected test agreeing."""
    if not beyond or not np.isfinite(adj.get("contra", np.nan)):
        return ""
    return (f"; the interval lies {where}, but not beyond what the whole family of claims allows by chance "
            f"(the test of that side at the two-sided level, Holm p = {fmt_p(adj['contra'])}): not contradicted")


def opposite_p(row: Mapping[str, float], value: float, greater: bool) -> float:
    """Twice the one-sided t p that the effect lies beyond ``value`` on the side opposite to the
    claimed one, from the row's estimate, SE and degrees of freedom (its tail directly, not
    1 - p, so a tiny p keeps its digits); NaN without them."""
    est, se, df = (float(row.get(k, np.nan)) for k in ("estimate", "se", "df"))
    if not (np.isfinite(est) and np.isfinite(se) and se > 0 and not np.isnan(df)):
        return np.nan
    stat = (est - value) / se
    opposite = float(stats.t.cdf(stat, df) if greater else stats.t.sf(stat, df))
    return min(1.0, 2.0 * opposite)
