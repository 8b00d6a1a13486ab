"""Numbers for the page: how a number and its interval are written, and how a stored result is read.

Every number a report shows has its interval beside it, written ``0.934 [0.901, 0.960]``;
where no interval exists (one seed, a permutation statistic) the text says so instead of
leaving the interval out silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr


# ---------------------------------------------------------------------- writing numbers
def fmt(x: float | None, digits: int = 3, signed: bool = False) -> str:
    """One number, or an en dash for a missing one."""
    if x is None or not np.isfinite(x):
        return "–"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def fmt_ci(
    est: float, lower: float, upper: float, digits: int = 3, *, signed: bool = False,
    why_none: str = "no interval",
) -> str:
    """``0.934 [0.901, 0.960]``; ``0.934 [no interval]`` when an end is missing."""
    if est is None or not np.isfinite(est):
        return "–"
    if lower is None or upper is None or not (np.isfinite(lower) and np.isfinite(upper)):
        return f"{fmt(est, digits, signed)} [{why_none}]"
    return f"{fmt(est, digits, signed)} [{fmt(lower, digits, signed)}, {fmt(upper, digits, signed)}]"


def fmt_p(p: float) -> str:
    """A p-value: three significant digits, ``<0.001`` below that."""
    if p is None or not np.isfinite(p):
        return "–"
    return "<0.001" if p < 1e-3 else f"{p:.3g}"


def fmt_layer_ci(pos: float, lower: float, upper: float, labels: Sequence[str]) -> str:
    """A layer statistic given as positions along ``layer``: ``L2 [L1, L3]``; NaN = never."""

    def name(x: float) -> str:
        if x is None or not np.isfinite(x):
            return "never"
        i = int(round(x))
        return labels[i] if 0 <= i < len(labels) else str(i)

    if pos is None or not np.isfinite(pos):
        return "never"
    return f"{name(pos)} [{name(lower)}, {name(upper)}]"


def plain_strings(ds: xr.Dataset) -> xr.Dataset:
    """Variable-length strings read back from Zarr v3 (numpy ``StringDType``) as fixed-width
    ``str`` arrays, which pandas and ``astype(str)`` handle everywhere."""
    fixed = {}
    for name, var in ds.variables.items():
        if var.dtype.kind == "T":
            values = np.array([str(v) for v in np.ravel(var.values)], dtype=str).reshape(var.shape)
            fixed[name] = (var.dims, values, var.attrs)
    coords = {k: v for k, v in fixed.items() if k in ds.coords}
    data = {k: v for k, v in fixed.items() if k not in ds.coords}
    return ds.assign_coords(coords).assign(data)


def read_result(store, name: str) -> xr.Dataset:
    """``store.read_result(name)`` with plain strings (see :func:`plain_strings`)."""
    return plain_strings(store.read_result(name))



def is_number(x: Any) -> bool:
    """Whether ``x`` is a finite number (a run record's field may be missing, text or NaN)."""
    try:
        return x is not None and bool(np.isfinite(float(x)))
    except (TypeError, ValueError):
        return False
