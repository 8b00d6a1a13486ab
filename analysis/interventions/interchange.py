"""Interchange interventions: patch named positions of the counterfactual twins, layer by
layer, in both directions and two metrics (the clean answer's probability first).

The sites are the task's named positions stored with the twins (``pos_key``, ``pos_value``,
``pos_divider``, ``pos_query`` for associative recall and treecall; else ``pos_corrupt`` and
``pos_label``). The grid runs on the twin machinery of :mod:`analysis.interventions.patching`;
`run_interchange` adds the mechanism label (:mod:`analysis.interventions.mechanism`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from analysis.interventions._common import site_description
from analysis.interventions.engine import InterventionPlan, assemble, run_and_store
from analysis.interventions.mechanism import classify_mechanism
from analysis.interventions.noise import noise_options
from analysis.interventions.twins import (
    MIN_GAP,
    common_attrs,
    stored_positions,
    subspace_bases,
    twin_cells,
    twin_plan,
    twin_summaries,
    twin_variables,
)
from store import MissingError, Store, schema

TASK_SITES = ("key", "value", "divider", "query")

#: `interchange`'s variables (the probability is its primary metric).
INTERCHANGE_NAMES = {
    "primary": "prob",
    "recovered_prob": "restored", "recovered_logit": "restored_logit",
    "damaged_prob": "damaged", "damaged_logit": "damaged_logit",
    "sub_recovered_prob": "restored_subspace", "sub_recovered_logit": "restored_subspace_logit",
    "sub_damaged_prob": "damaged_subspace", "sub_damaged_logit": "damaged_subspace_logit",
    "gap_prob": "gap", "gap_logit": "gap_logit", "clean_prob": "p_clean", "corrupt_prob": "p_corrupt",
    "recovered_prob:share": "restoration", "recovered_logit:share": "restoration_logit",
    "damaged_prob:share": "damage", "damaged_logit:share": "damage_logit",
    "sub_recovered_prob:share": "restoration_subspace",
    "sub_recovered_logit:share": "restoration_subspace_logit",
    "sub_damaged_prob:share": "damage_subspace", "sub_damaged_logit:share": "damage_subspace_logit",
}


def _sites(plan: InterventionPlan, length: int, sites: Sequence[str] | None) -> list[str]:
    """The interchange sites: given (each stored for every run) or the task's default."""
    def stored(rid: str) -> list[str]:
        clean = plan.group(rid, length, "cfclean")
        return [str(v).removeprefix("pos_") for v in clean.data_vars if str(v).startswith("pos_")]

    if sites is None:
        first = stored(plan.runs[0])
        sites = list(TASK_SITES) if set(TASK_SITES) <= set(first) else ["corrupt", "label"]
    sites = list(sites)
    for rid in plan.runs:
        missing = [s for s in sites if s not in stored(rid)]
        if missing:
            raise MissingError(
                f"run {rid!r} stores no position for site(s) {', '.join(missing)}; its sites: "
                f"{', '.join(stored(rid))}; name sites among them"
            )
    return sites


def _trivial(plan: InterventionPlan, length: int, sites: list[str]) -> np.ndarray:
    """(run, site): the site is the edited position in every pair."""
    out = np.zeros((len(plan.runs), len(sites)), dtype=bool)
    for r, rid in enumerate(plan.runs):
        clean = plan.group(rid, length, "cfclean")
        for s, site in enumerate(sites):
            out[r, s] = bool(np.array_equal(clean[f"pos_{site}"].values, clean.pos_corrupt.values))
    return out


def interchange(
    store: Store,
    runs: Sequence[str] | None,
    length: int,
    *,
    layers: Sequence[str] | None = None,
    sites: Sequence[str] | None = None,
    subspace: str | None = None,
    directions: xr.DataArray | None = None,
    fit_length: int | None = None,
    corruption: str = "token",
    allow_noise: bool = False,
    noise_scale: float = 3.0,
    seed: int = 0,
    batch_size: int = 256,
    device: str = "cpu",
) -> xr.Dataset:
    """Build (lazily) interchange interventions: patch named positions, layer by layer, in
    both directions and two metrics.

    Parameters
    ----------
    store : Store
    runs : list of str or None
    length : int
        Length of the stored counterfactual pairs.
    layers : list of str, optional
    sites : list of str, optional
        Names of stored ``pos_<site>`` positions; default ``key, value, divider, query`` when
        stored (associative recall, treecall), else ``corrupt, label``.
    subspace, directions, fit_length, corruption, allow_noise, noise_scale, seed
        As in `patching`.
    batch_size : int
    device : str
        Where each run's model is rebuilt and resumed (``"cpu"``, ``"cuda[:N]"``); the stored
        states are read on the host. Recorded as the result's ``device`` attribute.

    Returns
    -------
    xarray.Dataset, dask-backed
        ``restored (run, layer, site, sequence)``: p_patched - p_corrupted of the clean answer
        (denoising), ``restored_logit`` the same in logit difference; ``damaged``,
        ``damaged_logit``: noising (the corrupted site in the clean run); ``gap``,
        ``gap_logit``, ``p_clean``, ``p_corrupt`` (run, layer, sequence); ``restoration (run,
        layer, site)`` = sum restored / sum gap, ``restoration_logit``, ``damage``,
        ``damage_logit``, ``disagree`` (and the subspace's, as in `patching`); ``trivial (run,
        site)``: the site is the edited position in every pair; ``pos_<site> (run,
        sequence)``. Coordinate ``patched_site (run, layer, site)`` names what was patched,
        e.g. "block output of layer L1 at position 'value'".
    """
    noise = noise_options(corruption, allow_noise, noise_scale, seed)
    plan = twin_plan(store, runs, length, layers, corruption)
    plan.device = device
    sites = _sites(plan, length, sites)
    plan.axes = {"site": sites}
    subspaces = subspace_bases(plan, length, subspace, directions, fit_length)
    names = INTERCHANGE_NAMES
    named = [[[site_description(plan.arch[r], y, f"position {c!r}") for c in sites]
              for y in plan.layers] for r in plan.runs]
    ds = assemble(
        plan,
        twin_variables(names, "site", subspace is not None),
        twin_cells(plan, length, sites, names, batch_size, subspaces=subspaces, noise=noise),
        data={**stored_positions(plan, length, sorted({*sites, "corrupt", "label"})),
              "trivial": (("run", "site"), _trivial(plan, length, sites))},
        coords={"patched_site": (("run", "layer", "site"), named)},
        attrs={
            "analysis": "interchange",
            "length": int(length),
            "metric": "probability of the clean answer at the label position",
            "metric_logit": "logit(clean answer) - logit(corrupted answer) (*_logit)",
            "restoration": "sum(p_patched - p_corrupt) / sum(p_clean - p_corrupt) over sequences",
            "damage": "sum(p_clean - p_noised) / sum(p_clean - p_corrupt) over sequences",
            **common_attrs(corruption, noise, subspace),
        },
    )
    return twin_summaries(ds, names, subspace is not None)


def run_interchange(
    store: Store,
    length: int,
    name: str = "default",
    *,
    runs: Sequence[str] | None = None,
    threshold: float = 0.5,
    min_gap: float = MIN_GAP,
    scheduler: Any = "threads",
    num_workers: int | None = None,
    attrs: Mapping[str, Any] | None = None,
    **kwargs,
) -> xr.Dataset:
    """Compute `interchange`, add ``mechanism (run)`` when the sites allow, and store it as
    ``results/interchange/<name>``.

    Parameters
    ----------
    store : Store
        Opened with ``mode="r+"``.
    length : int
        Length of the stored counterfactual pairs.
    name : str
    runs : list of str, optional
        Default: every run.
    threshold, min_gap : float
        Passed to `classify_mechanism`.
    scheduler, num_workers
        Where to compute: see `analysis.compute.compute`.
    attrs : mapping, optional
        Added to the stored result's attributes.
    **kwargs
        ``layers``, ``sites``, ``batch_size`` of `interchange`.

    Returns
    -------
    xarray.Dataset
        The computed `interchange` result, plus ``mechanism`` (attrs: threshold, min_gap) and
        the seed-level intervals of its restoration and damage
        (`analysis.interventions.intervals.add_intervals`).
    """
    from analysis.interventions.intervals import add_intervals

    def with_mechanism(result: xr.Dataset) -> xr.Dataset:
        if {"key", "value", "query"} <= {str(s) for s in result.site.values}:
            result["mechanism"] = classify_mechanism(result, threshold=threshold, min_gap=min_gap)
            result.attrs.update(mechanism_threshold=threshold, mechanism_min_gap=min_gap)
        return add_intervals(result, "interchange", store)

    return run_and_store(store, schema.result_name(schema.INTERCHANGE, name), interchange(store, runs, length, **kwargs),
                         scheduler=scheduler, num_workers=num_workers, finish=with_mechanism,
                         attrs=attrs)
