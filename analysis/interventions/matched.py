"""Matched controls of an ablation: does erasing a concept hurt more than erasing as much of
the layer's variance in a random subspace of the same rank?

``matched:S`` (`MATCHABLE` settings S) is a random subspace of S's rank that removes S's share
of the variance on the fitting rows (:func:`~analysis.interventions.erasure.matched_np`);
`matched_comparison` tests the per-seed difference of the two drops (docs/interventions.md,
"Matched controls").
"""

from __future__ import annotations

import zlib

import numpy as np
import xarray as xr

from analysis.behaviour import by_factors
from analysis.interventions import erasure, removal
from analysis.interventions.directions import Setting
from analysis.interventions.engine import InterventionPlan
from analysis.stats import paired_difference
from store import Store
from store.errors import InvalidArgumentError

#: Settings that ``matched=True`` gives a matched control (PCA/SVD subspaces are already the
#: most variance k directions hold, so their matched control is themselves; random is one).
MATCHABLE = ("probe", "stored", "given", "leace", "inlp")


def matched_eraser(x, setting: Setting, mode: str, target, seed: list[int]):
    """A random subspace of the target eraser's rank removing its share of the variance on the
    fitting rows; mean-ablated when the target is (LEACE, or ``mode="mean"``)."""
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(0)
    if target.rank == 0:
        return erasure.Eraser(np.zeros((x.shape[1], 0)), np.zeros((0, x.shape[1])), np.zeros(x.shape[1]))
    total = removal.total_variance_np(x)
    variance, _, _ = removal.removal_stats_np(x, *target, total_variance=total)
    basis = erasure.matched_np(x, variance * total, target.rank, np.random.default_rng(seed))
    centred = setting.base.method == "leace" or mode == "mean"
    return erasure.projection_np(basis, mean if centred else None)


def name_seed(setting: Setting) -> int:
    """A stable integer for a setting's name (seeds its random draw, the same in every run)."""
    return zlib.crc32(setting.name.encode()) + 1


def with_matched(settings: list[Setting]) -> list[Setting]:
    """Each matchable setting followed by its matched control (unless already listed)."""
    out: list[Setting] = []
    for s in settings:
        if s not in out:
            out.append(s)
        m = Setting("matched", None, s)
        if s.method in MATCHABLE and m not in settings and m not in out:
            out.append(m)
    return out


#: The run factors a result carries along ``run`` besides ``arch``, and their coordinate names
#: (prefixed: a ``seed`` coordinate would clash with the ``seed`` dim that readers make of
#: ``run``).
RUN_FACTORS = {"task": "run_task", "variant": "run_variant", "seed": "run_seed"}


def run_factors(plan: InterventionPlan) -> dict[str, tuple[str, list]]:
    """``run_task``, ``run_variant``, ``run_seed`` coordinates along ``run`` (``arch`` is the
    plan's), so that results pair runs by seed without the store (`matched_comparison`)."""
    attrs = [plan.store.run_attrs(r) for r in plan.runs]
    return {
        "run_task": ("run", [str(a.get("task", "")) for a in attrs]),
        "run_variant": ("run", [str(a.get("variant", "default")) for a in attrs]),
        "run_seed": ("run", [int(a.get("seed", -1)) for a in attrs]),
    }


def factored(values: xr.DataArray, store: Store | None) -> xr.DataArray:
    """``run`` -> task, arch, variant, seed dims, from the result's own run coordinates when
    it has them, else from the store (`analysis.behaviour.by_factors`)."""
    own = {f: values[c].values for f, c in RUN_FACTORS.items() if c in values.coords}
    values = values.drop_vars([c for c in RUN_FACTORS.values() if c in values.coords])
    if len(own) == len(RUN_FACTORS) and "arch" in values.coords:
        values = values.assign_coords({f: ("run", list(v)) for f, v in own.items()})
    return by_factors(values, store)


def matched_comparison(
    result: xr.Dataset,
    setting: str | None = None,
    *,
    store: Store | None = None,
    length: int | None = None,
    layer: str | None = None,
    ci_level: float = 0.95,
) -> xr.Dataset:
    """Does erasing S hurt more than erasing as much variance of anything else?

    Per (task, arch, variant, length, layer[, setting]): the per-seed difference ``drop(S) -
    drop(matched:S)`` and its two-sided paired t test over seeds
    (:func:`analysis.stats.paired_difference`; runs are paired by seed within a task, arch
    and variant). A positive, significant difference says the erased concept matters beyond
    the amount of variance removed; a difference near zero (as at a degenerate layer, where
    the matched control erases the same direction) says it does not. Declared as a claim it is
    a ``difference`` claim with ``metric = "ablation_drop"``, ``compare = "setting"``,
    ``treatment = S``, ``reference = "matched:S"`` (docs/interventions.md, "Matched controls").

    Parameters
    ----------
    result : xarray.Dataset
        A computed `ablation` result holding S and ``matched:S``.
    setting : str, optional
        S (e.g. ``"leace"``); default every setting whose matched control is in `result`
        (then the output has a ``setting`` dim).
    store : Store, optional
        Only for results without the ``run_task``/``run_variant``/``run_seed`` coordinates:
        their runs' factors are read from the run attributes.
    length : int, optional
    layer : str, optional
        Select one length / layer (default all).
    ci_level : float

    Returns
    -------
    xarray.Dataset
        ``estimate``, ``lower``, ``upper``, ``statistic``, ``p``, ``sd`` of the paired
        difference; ``setting_drop`` and ``matched_drop`` (mean over seeds), ``variance_removed``
        (mean over seeds, of S), ``flagged`` (S flagged for some seed: ``flag_variance`` or
        ``degenerate``); attrs ``method``, ``n_seeds``.

    Raises
    ------
    ValueError
        No matched control in `result` for `setting`, or fewer than two seeds.
    """
    names = [str(v) for v in result.setting.values]
    pairs = [s for s in names if f"matched:{s}" in names]
    if setting is not None:
        if f"matched:{setting}" not in names or setting not in names:
            raise InvalidArgumentError(
                f"the ablation result has no pair {setting!r} / 'matched:{setting}' (settings: "
                f"{', '.join(names)}); re-run the ablation with matched=True (`layerstate ablate "
                "--matched`) or settings including 'matched:<setting>'"
            )
        pairs = [setting]
    if not pairs:
        raise InvalidArgumentError(
            f"the ablation result has no matched controls (settings: {', '.join(names)}); "
            "re-run it with matched=True (`layerstate ablate --matched`)"
        )
    drop = result.accuracy_drop if "accuracy_drop" in result else (
        (result.correct_clean - result.correct).sum("sequence") / result.n_labelled.sum("sequence"))
    flagged = result.flag_variance | result.degenerate
    picked = {}
    for name, values in (("drop", drop), ("variance_removed", result.variance_removed),
                         ("flagged", flagged.astype(float))):
        if length is not None:
            values = values.sel(length=length)
        if layer is not None:
            values = values.sel(layer=layer)
        picked[name] = factored(values, store)
    treat = picked["drop"].sel(setting=pairs)
    ref = picked["drop"].sel(setting=[f"matched:{s}" for s in pairs]).assign_coords(setting=pairs)
    test = paired_difference(treat, ref, ci_level=ci_level)
    test["setting_drop"] = treat.mean("seed")
    test["matched_drop"] = ref.mean("seed")
    test["variance_removed"] = picked["variance_removed"].sel(setting=pairs).mean("seed")
    test["flagged"] = picked["flagged"].sel(setting=pairs).max("seed") > 0
    if setting is not None:
        test = test.squeeze("setting", drop=True)
    test.attrs.update(
        method="paired t over seeds of drop(S) - drop(matched:S): does erasing the concept "
        "hurt more than erasing the same share of variance in a random subspace of its rank",
    )
    return test
