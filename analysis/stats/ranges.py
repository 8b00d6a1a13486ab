"""What a metric can take, and the one rule for an interval or a threshold that reaches past it.

An accuracy lies in [0, 1]; a difference of two accuracies, an accuracy drop and an accuracy
minus chance in [-1, 1]; patching recovery and interchange restoration are ratios that may
overshoot and have no range. A t interval over a few seeds near the ceiling routinely reaches
past its range (``0.912 [0.670, 1.155]``): the parameter cannot lie outside, so the interval
clipped to the range covers it whenever the unclipped one does, and it is what every output
shows (the command line, the stored tables, the CSVs and the report), with the note
:data:`CLIPPED`. A value that the metric cannot take -- a minimum detectable effect above the
ceiling, a sequential boundary beyond it -- is not shown as if it could be reached: it is said
in words (:func:`unreachable`). Tests are never computed on clipped numbers: clipping is how
an interval is shown, not how it is tested.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["CLIPPED", "UNBOUNDED", "clip_interval", "difference_range", "unreachable"]

#: The note of an interval clipped to its metric's range.
CLIPPED = "clipped"
#: The range of a metric without one.
UNBOUNDED = (-math.inf, math.inf)


def difference_range(low: float, high: float) -> tuple[float, float]:
    """The range of a difference of two values of a metric with range [low, high]."""
    return low - high, high - low


def clip_interval(lower, upper, low: float, high: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(lower, upper, clipped)``: the interval inside [low, high] and whether it reached past
    it (NaN ends stay NaN)."""
    lo, hi = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    with np.errstate(invalid="ignore"):
        past = (lo < low) | (hi > high)
    return np.clip(lo, low, high), np.clip(hi, low, high), past


def unreachable(value: float, low: float, high: float) -> str:
    """``""`` when ``value`` lies in [low, high], else words for it: ``"+1.255, beyond the
    largest value the metric can take (1)"``."""
    if not math.isfinite(value) or low <= value <= high:
        return ""
    side, end = ("largest", high) if value > high else ("smallest", low)
    return f"{value:+.3f}, beyond the {side} value the metric can take ({end:g})"
