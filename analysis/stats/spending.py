"""Alpha-spending functions of group-sequential designs (Lan & DeMets 1983): how much of a test's
one-sided level is spent by each information fraction. Below both designs that spend it: the
t-boundary designs of :mod:`analysis.stats.sequential` and the exact count boundaries of
:mod:`analysis.stats.seedshare`."""

from __future__ import annotations

import math

import numpy as np
import scipy.stats

from store import LayerstateError

#: The spending functions a design may declare.
SPENDING = ("obrien-fleming", "pocock")


class SpendingError(LayerstateError, ValueError):
    """A spending function that is not one of :data:`SPENDING`."""


def spent(spending: str, alpha: float, t) -> np.ndarray | float:
    """Cumulative one-sided alpha spent by information fraction ``t``: O'Brien-Fleming-like
    ``2 (1 - Phi(z_{alpha/2} / sqrt(t)))`` or Pocock-like ``alpha log(1 + (e - 1) t)``."""
    t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        if spending == "obrien-fleming":
            out = 2.0 * scipy.stats.norm.sf(scipy.stats.norm.isf(alpha / 2) / np.sqrt(t))
        elif spending == "pocock":
            out = alpha * np.log1p((math.e - 1.0) * t)
        else:
            raise SpendingError(f"spending {spending!r} is not one of {', '.join(SPENDING)}")
    return out if out.ndim else float(out)
