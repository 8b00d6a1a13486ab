"""Bootstrap draws as ArviZ objects: a DataTree, a summary table and a forest plot.

ArviZ 1.x API as shipped for Python 3.11 in ``arviz-base``/``arviz-stats``/``arviz-plots`` 0.8
(DataTree, ``ci_prob``). ArviZ expects (chain, draw) sample dims and a ``posterior`` group: the
draws go there with one chain, although they are draws of an estimator's sampling
distribution (or, for ``method="t"``, of the seed-level t distribution), not of a Bayesian
posterior; the group's attrs say which. Interval kind is the equal-tailed interval (ETI), which
is what the percentile and t intervals are.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from analysis.stats import validate


def _as_dataset(draws) -> xr.Dataset:
    """A Dataset of draws from a DataArray, a Dataset or a dict of DataArrays."""
    if isinstance(draws, xr.DataArray):
        draws = xr.Dataset({draws.name or "estimate": draws}, attrs=draws.attrs)
    elif isinstance(draws, dict):
        attrs = next(iter(draws.values())).attrs if draws else {}
        # scalar coords left by .sel (condition="a" vs "b") would conflict: the keys name them
        draws = xr.Dataset(
            {k: v.reset_coords(drop=True) for k, v in draws.items()}, attrs=dict(attrs)
        )
    if not isinstance(draws, xr.Dataset):
        raise TypeError(
            f"draws must be an xarray DataArray, Dataset or dict of DataArrays, got "
            f"{type(draws).__name__}; pass BootstrapResult.draws"
        )
    for name, var in draws.data_vars.items():
        validate.check_dims(var, ["draw"], f"draws[{name!r}]")
    return draws


def draws_to_datatree(draws) -> xr.DataTree:
    """Put bootstrap draws in an ArviZ DataTree.

    Parameters
    ----------
    draws : xarray.DataArray, Dataset or dict of DataArrays
        Each with dims (..., draw), e.g. ``BootstrapResult.draws``. A dict or Dataset puts
        several quantities side by side (e.g. ``{"conv": ..., "no_conv": ...}``).

    Returns
    -------
    xarray.DataTree
        Group ``posterior`` with dims (chain=1, draw, ...), via ``arviz_base.convert_to_datatree``;
        attrs of the draws (method, ci_level, ...) kept, plus ``draws_kind``.
    """
    from arviz_base import convert_to_datatree

    ds = _as_dataset(draws).compute()
    ds = ds.expand_dims(chain=[0]).transpose("chain", "draw", ...)
    ds.attrs = {
        **ds.attrs,
        "draws_kind": "sampling distribution of the estimator (not a Bayesian posterior)",
    }
    return convert_to_datatree(ds)


def _ci_prob(draws: xr.Dataset, ci_prob: float | None) -> float:
    prob = ci_prob if ci_prob is not None else draws.attrs.get("ci_level", 0.95)
    return validate.check_probability(prob, "ci_prob")


def summarise(draws, *, ci_prob: float | None = None) -> pd.DataFrame:
    """ArviZ summary table (mean, sd, equal-tailed interval) of bootstrap draws.

    Parameters
    ----------
    draws : xarray.DataArray, Dataset or dict of DataArrays
        Dims (..., draw).
    ci_prob : float, optional
        Interval probability; default the draws' ``ci_level`` attr (else 0.95).

    Returns
    -------
    pandas.DataFrame
        One row per variable and cell; columns ``mean``, ``sd``, ``eti<p>_lb``, ``eti<p>_ub``
        (``arviz_stats.summary(kind="stats", ci_kind="eti")``).
    """
    from arviz_stats import summary

    ds = _as_dataset(draws)
    return summary(
        draws_to_datatree(ds),
        kind="stats",
        ci_kind="eti",
        ci_prob=_ci_prob(ds, ci_prob),
        round_to="none",
    )


def eti(draws, *, ci_prob: float | None = None) -> xr.Dataset:
    """Equal-tailed interval of each variable, dims (..., ci_bound) (``arviz_stats.eti``)."""
    from arviz_stats import eti as az_eti

    ds = _as_dataset(draws)
    tree = draws_to_datatree(ds)
    out = az_eti(tree, prob=_ci_prob(ds, ci_prob))
    return out.to_dataset() if isinstance(out, xr.DataTree) else out


def plot_forest(draws, path: str | Path, *, ci_prob: float | None = None,
                plot_options: Mapping[str, Any] | None = None) -> Path:
    """Forest plot of bootstrap draws, written to a file (no window is opened).

    Parameters
    ----------
    draws : xarray.DataArray, Dataset or dict of DataArrays
        Dims (..., draw); every other dim becomes a row label.
    path : str or Path
        Output file; the format follows the suffix (``.png``, ``.pdf``, ``.svg``).
    ci_prob : float, optional
        Outer interval probability; default the draws' ``ci_level``. The inner one is 0.5.
    plot_options : mapping, optional
        More keywords for ``arviz_plots.plot_forest``.

    Returns
    -------
    Path
        The written file.
    """
    import matplotlib.pyplot as plt  # figures are saved and closed, never shown
    from arviz_plots import plot_forest as az_forest

    ds = _as_dataset(draws)
    path = Path(path)
    collection = az_forest(
        draws_to_datatree(ds),
        backend="matplotlib",
        ci_kind="eti",
        ci_probs=(0.5, _ci_prob(ds, ci_prob)),
        point_estimate="mean",
        **dict(plot_options or {}),
    )
    collection.savefig(path)
    plt.close(collection.viz["figure"].item())
    return path


def interval_table(interval: xr.Dataset) -> pd.DataFrame:
    """The interval Dataset of a bootstrap as a flat table (one row per cell) with its method.

    Returns
    -------
    pandas.DataFrame
        Columns: the cell dims, ``estimate``, ``lower``, ``upper``, ``method``, ``ci_level``.
    """
    frame = interval[["estimate", "lower", "upper"]].to_dataframe().reset_index()
    frame["method"] = interval.attrs.get("method", "")
    frame["ci_level"] = interval.attrs.get("ci_level", np.nan)
    return frame
