"""Which intervals the report shows: never one outside its metric's range, never one from too
few seeds.

Every interval on the page and in ``tables/*.csv`` goes through :func:`apply_rules`:

1. **Range.** Each metric has the range it can take (:data:`RANGES`): accuracies, probe
   accuracies, majority baselines and control-task accuracies lie in [0, 1]; accuracy drops,
   accuracy differences between conditions and selectivity in [-1, 1]; profile-shape
   distances (RMS of min-max normalised profiles) in [0, 1]; the normalised area under a
   probe profile in [-c / (1 - c), 1] for chance level ``c`` (:func:`auc_range`). Patching
   recovery and interchange restoration are ratios of sums (patched - corrupted over
   clean - corrupted) that may overshoot 1 or fall below 0, so they have no range. An interval
   that reaches past its range is clipped to it (the parameter cannot lie outside, so the
   clipped interval covers it whenever the unclipped one does); its note says ``clipped``.
2. **Too few seeds.** An interval across seeds from fewer than :data:`MIN_SEEDS` (3) seeds is
   not shown. With 2 seeds the 95% t interval is the mean +- 12.71 x half the two seeds'
   difference (t with one degree of freedom): it reflects t's tail, not what the models do,
   and routinely spans more than the metric can take. Where the interval is a seed-level t
   interval the two seeds' own values are shown instead, recovered exactly from it
   (``estimate +- half-width / t(0.975, 1)``). One seed is different: its interval resamples
   sequences (it covers sequence sampling only) and is shown, clipped, with that caveat.
3. **Uninformative.** An interval at least as wide as its metric's whole range excludes
   nothing and is not shown either (whatever the number of seeds).

A cell whose interval is not shown says why in place of the interval:
``+0.195 [too few seeds: +0.120, +0.270]``; ``0.52 [interval spans the whole range]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

#: Fewest seeds whose seed-level interval is shown (a t interval from 2 seeds is not).
MIN_SEEDS = 3
INF = math.inf
#: What each metric can take; (-inf, inf) = unbounded (never clipped).
RANGES: dict[str, tuple[float, float]] = {
    "accuracy": (0.0, 1.0),
    "probe_accuracy": (0.0, 1.0),
    "baseline": (0.0, 1.0),
    "control": (0.0, 1.0),
    "selectivity": (-1.0, 1.0),
    "drop": (-1.0, 1.0),
    "accuracy_difference": (-1.0, 1.0),
    "shape_difference": (-1.0, 1.0),  # how much closer one profile lies to a second than to a third
    "recovery": (-INF, INF),
    "restoration": (-INF, INF),
    "restoration_difference": (-INF, INF),
}
TOO_FEW = "too few seeds"
TOO_WIDE = "interval spans the whole range"
CLIPPED = "clipped"

RULES_NOTE = (
    "Intervals: 95%, across seeds (sequences nested in seeds). An interval never leaves what its metric "
    "can take: accuracies [0, 1], drops, differences and selectivity [-1, 1], the normalised profile area "
    "[-c/(1-c), 1] for chance c; one that reaches past its range is clipped to it (CSV column "
    "interval_note: clipped). Patching recovery and restoration may overshoot and are never clipped. "
    f"With fewer than {MIN_SEEDS} seeds no interval is shown: a t interval from 2 seeds is 12.7 times half "
    "their difference wide, so the cell reads 'too few seeds' followed by the two seeds' own values. "
    "An interval as wide as the metric's whole range is not shown either ('interval spans the whole range'). "
    "With one seed the interval resamples sequences only (not training variability)."
)


def auc_range(chance: float | np.ndarray) -> tuple[np.ndarray, float]:
    """Range of the normalised profile area ``(mean height - c) / (1 - c)``: [-c/(1-c), 1]."""
    c = np.asarray(chance, dtype=float)
    return 0.0 - c / (1.0 - c), 1.0


def apply_rules(
    frame: pd.DataFrame,
    low: float | Sequence[float] | np.ndarray,
    high: float | Sequence[float] | np.ndarray,
    *,
    value: str = "estimate",
    lower: str = "lower",
    upper: str = "upper",
    n_seeds: str = "n_seeds",
    t_based: bool | Sequence[bool] | np.ndarray = True,
    note: str = "interval_note",
    seed_values: tuple[str, str] | None = ("seed_a", "seed_b"),
    ci_level: float = 0.95,
    min_seeds: int = MIN_SEEDS,
    clipped_before: str | None = None,
) -> pd.DataFrame:
    """Apply the three rules of this module to the interval columns of ``frame``.

    ``min_seeds``: fewest seeds whose interval is shown; a claim's interval is the one its test
    used and is shown from 2 seeds (with words saying how wide t makes it there).

    Parameters
    ----------
    frame : pandas.DataFrame
        One row per cell with ``value``, ``lower``, ``upper`` and ``n_seeds`` columns.
    low, high : float or array-like
        The metric's range, one value or one per row (e.g. :func:`auc_range`).
    t_based : bool or array-like of bool
        Whether each interval is a seed-level t interval (then a 2-seed cell's two seed values
        are recovered from it).
    note : str
        Column written: ``""``, ``"clipped"``, ``"too few seeds"`` or ``"interval spans the
        whole range"``.
    seed_values : (str, str) or None
        Columns written with the two seeds' values of a too-few-seeds t interval (NaN
        elsewhere); ``None`` writes none. Where ``frame`` already holds them (the stored
        per-seed values), they are kept: an interval clipped at its source no longer gives
        them back exactly.
    clipped_before : str or None
        A text column saying, with ``clipped``, that the stored interval was clipped to its
        range where it was computed (:mod:`analysis.stats.ranges`): its note is ``clipped`` too.

    Returns
    -------
    pandas.DataFrame
        A copy: ``lower``/``upper`` clipped to the range, NaN where the interval is not shown.
    """
    out = frame.copy()
    n_rows = len(out)
    lo_r = np.broadcast_to(np.asarray(low, dtype=float), (n_rows,))
    hi_r = np.broadcast_to(np.asarray(high, dtype=float), (n_rows,))
    est = pd.to_numeric(out[value], errors="coerce").to_numpy(dtype=float) if n_rows else np.zeros(0)
    lo = pd.to_numeric(out[lower], errors="coerce").to_numpy(dtype=float) if n_rows else np.zeros(0)
    hi = pd.to_numeric(out[upper], errors="coerce").to_numpy(dtype=float) if n_rows else np.zeros(0)
    n = (pd.to_numeric(out[n_seeds], errors="coerce").to_numpy(dtype=float) if n_seeds in out
         else np.full(n_rows, np.nan))
    shown = np.isfinite(lo) & np.isfinite(hi)
    few = shown & (n >= 2) & (n < min_seeds)
    bounded = np.isfinite(lo_r) & np.isfinite(hi_r)
    with np.errstate(invalid="ignore"):
        wide = shown & ~few & bounded & ((hi - lo) >= (hi_r - lo_r))
        outside = shown & ~few & ~wide & ((lo < lo_r) | (hi > hi_r))
    if clipped_before is not None and clipped_before in out:
        outside = outside | (shown & ~few & ~wide & out[clipped_before].astype(str).str.contains(CLIPPED).to_numpy())
    notes = np.where(few, TOO_FEW, np.where(wide, TOO_WIDE, np.where(outside, CLIPPED, "")))
    if seed_values is not None:
        t_rows = np.broadcast_to(np.asarray(t_based, dtype=bool), (n_rows,))
        tcrit = sps.t.ppf(0.5 + ci_level / 2, 1)
        spread = np.where(few & t_rows, (hi - lo) / 2 / tcrit, np.nan)
        a, b = np.clip(est - spread, lo_r, hi_r), np.clip(est + spread, lo_r, hi_r)
        if seed_values[0] in out and seed_values[1] in out:  # the stored seeds' own values
            given_a = pd.to_numeric(out[seed_values[0]], errors="coerce").to_numpy(dtype=float)
            given_b = pd.to_numeric(out[seed_values[1]], errors="coerce").to_numpy(dtype=float)
            keep = few & np.isfinite(given_a) & np.isfinite(given_b)
            a, b = np.where(keep, given_a, a), np.where(keep, given_b, b)
        out[seed_values[0]] = a
        out[seed_values[1]] = b
    hidden = few | wide
    out[lower] = np.where(hidden, np.nan, np.clip(lo, lo_r, hi_r))
    out[upper] = np.where(hidden, np.nan, np.clip(hi, lo_r, hi_r))
    out[note] = notes
    return out


def _num(x: float, digits: int, signed: bool) -> str:
    if x is None or not np.isfinite(x):
        return "–"
    x = float(x) + 0.0  # no "-0.000"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def interval_text(
    est: float,
    lower: float,
    upper: float,
    note: str = "",
    seeds: tuple[float, float] | None = None,
    *,
    digits: int = 3,
    signed: bool = False,
    why_none: str = "no interval",
) -> str:
    """One cell: ``0.934 [0.901, 0.960]``, ``+0.195 [too few seeds: +0.120, +0.270]``,
    ``0.522 [interval spans the whole range]`` or ``0.934 [no interval]``."""
    if est is None or not np.isfinite(est):
        return "–"
    head = _num(est, digits, signed)
    if note == TOO_FEW:
        if seeds is not None and all(s is not None and np.isfinite(s) for s in seeds):
            return f"{head} [{TOO_FEW}: {_num(seeds[0], digits, signed)}, {_num(seeds[1], digits, signed)}]"
        return f"{head} [{TOO_FEW}]"
    if note == TOO_WIDE:
        return f"{head} [{TOO_WIDE}]"
    if lower is None or upper is None or not (np.isfinite(lower) and np.isfinite(upper)):
        return f"{head} [{why_none}]"
    return f"{head} [{_num(lower, digits, signed)}, {_num(upper, digits, signed)}]"


def texts(
    frame: pd.DataFrame,
    *,
    value: str = "estimate",
    lower: str = "lower",
    upper: str = "upper",
    note: str = "interval_note",
    seed_values: tuple[str, str] | None = ("seed_a", "seed_b"),
    digits: int = 3,
    signed: bool = False,
    why_none: str = "no interval",
) -> list[str]:
    """:func:`interval_text` for every row of a frame that went through :func:`apply_rules`."""
    out = []
    for _, r in frame.iterrows():
        seeds = (r[seed_values[0]], r[seed_values[1]]) if seed_values and seed_values[0] in r else None
        out.append(interval_text(float(r[value]), float(r[lower]), float(r[upper]), str(r.get(note, "") or ""),
                                 seeds, digits=digits, signed=signed, why_none=why_none))
    return out


def outside_range(frame: pd.DataFrame, low: float, high: float, lower: str = "lower",
                  upper: str = "upper") -> pd.DataFrame:
    """Rows whose interval reaches outside [low, high] (for checks; empty when none)."""
    lo = pd.to_numeric(frame[lower], errors="coerce")
    hi = pd.to_numeric(frame[upper], errors="coerce")
    return frame[(lo < low - 1e-12) | (hi > high + 1e-12)]
