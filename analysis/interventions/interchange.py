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

from analysis import registry
from analysis.interventions._common import site_description
from analysis.interventions.engine import InterventionPlan
from analysis.interventions.intervals import store_with_intervals
from analysis.interventions.mechanism import classify_mechanism
from analysis.interventions.patching import INTERCHANGE_NAMES, twin_grid
from analysis.interventions.twins import MIN_GAP, stored_positions
from capture.device import Device
from store import MissingError, Store

TASK_SITES = ("key", "value", "divider", "query")

#: `interchange`'s own attributes: what its metrics are.
INTERCHANGE_ATTRS = {
    "metric": "probability of the clean answer at the label position",
    "metric_logit": "logit(clean answer) - logit(corrupted answer) (*_logit)",
    "restoration": "sum(p_patched - p_corrupt) / sum(p_clean - p_corrupt) over sequences",
    "damage": "sum(p_clean - p_noised) / sum(p_clean - p_corrupt) over sequences",
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
    sites: Sequence[str] | None = None,
    layers: Sequence[str] | None = None,
    subspace: str | None = None,
    directions: xr.DataArray | None = None,
    fit_length: int | None = None,
    corruption: str = "token",
    allow_noise: bool = False,
    noise_scale: float = 3.0,
    seed: int = 0,
    batch_size: int = 256,
    device: Device | str = "cpu",
) -> xr.Dataset:
    """Build (lazily) interchange interventions: patch named positions, layer by layer, in
    both directions and two metrics.

    Parameters
    ----------
    store : Store
    runs : list of str or None
    length : int
        Length of the stored counterfactual pairs.
    sites : list of str, optional
        Names of stored ``pos_<site>`` positions; default ``key, value, divider, query`` when
        stored (associative recall, treecall), else ``corrupt, label``.
    layers, subspace, directions, fit_length, corruption, allow_noise, noise_scale, seed, batch_size, device
        As in `patching`.

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
    def described(plan: InterventionPlan, chosen: list) -> tuple[dict, dict]:
        named = [[[site_description(plan.arch[r], y, f"position {c!r}") for c in chosen]
                  for y in plan.layers] for r in plan.runs]
        return ({**stored_positions(plan, length, sorted({*chosen, "corrupt", "label"})),
                 "trivial": (("run", "site"), _trivial(plan, length, chosen))},
                {"patched_site": (("run", "layer", "site"), named)})

    return twin_grid("interchange", INTERCHANGE_NAMES, INTERCHANGE_ATTRS, store, runs, length, "site",
                     lambda plan: _sites(plan, length, sites), described, layers=layers, subspace=subspace, directions=directions, fit_length=fit_length,
                     corruption=corruption, allow_noise=allow_noise, noise_scale=noise_scale, seed=seed,
                     batch_size=batch_size, device=device)


def run_interchange(
    store: Store,
    length: int,
    name: str = "default",
    *,
    runs: Sequence[str] | None = None,
    sites: Sequence[str] | None = None,
    layers: Sequence[str] | None = None,
    subspace: str | None = None,
    directions: xr.DataArray | None = None,
    fit_length: int | None = None,
    corruption: str = "token",
    allow_noise: bool = False,
    noise_scale: float = 3.0,
    seed: int = 0,
    batch_size: int = 256,
    device: Device | str = "cpu",
    threshold: float = 0.5,
    min_gap: float = MIN_GAP,
    scheduler: Any = "threads",
    num_workers: int | None = None,
    attrs: Mapping[str, Any] | None = None,
    extend: bool = False,
) -> xr.Dataset:
    """Compute `interchange`, add ``mechanism (run)`` when the sites allow, and store it as
    ``results/interchange/<name>``, with the seed-level intervals of its restoration and damage
    (`store_with_intervals`). ``store``, ``length``, ``name``, ``runs``, ``scheduler``,
    ``num_workers``, ``attrs`` and ``extend`` as in `run_patching`; ``sites`` to ``device`` as
    `interchange` takes them; ``threshold``, ``min_gap`` are passed to `classify_mechanism`.

    Returns
    -------
    xarray.Dataset
        The computed `interchange` result, plus ``mechanism`` (attrs: threshold, min_gap) and
        its intervals (`analysis.interventions.intervals.add_intervals`).
    """
    def with_mechanism(result: xr.Dataset) -> xr.Dataset:
        if {"key", "value", "query"} <= {str(s) for s in result.site.values}:
            result["mechanism"] = classify_mechanism(result, threshold=threshold, min_gap=min_gap)
            result.attrs.update(mechanism_threshold=threshold, mechanism_min_gap=min_gap)
        return result

    def build(chosen: Sequence[str] | None) -> xr.Dataset:
        return interchange(store, chosen, length, sites=sites, layers=layers, subspace=subspace,
                           directions=directions, fit_length=fit_length, corruption=corruption, allow_noise=allow_noise,
                           noise_scale=noise_scale, seed=seed, batch_size=batch_size, device=device)

    return store_with_intervals(store, registry.INTERCHANGE, name, build, runs, scheduler=scheduler,
                                num_workers=num_workers, attrs=attrs, extend=extend, finish=with_mechanism)
