"""One call: plan, compute and (optionally) save a stability sweep (:func:`probe_stability`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import xarray as xr

from store import open_analysis

from .intervals import save_stability
from .maths import SHUFFLES
from .plan import plan_stability


def probe_stability(
    store: Any,
    result: str | None = None,
    *,
    save: bool = False,
    name: str | None = None,
    attrs: Mapping[str, Any] | None = None,
    runs: Any = None,
    layers: Any = None,
    lengths: Any = None,
    seed: int = 0,
    inputs: str = "auto",
    shuffles: int = SHUFFLES,
) -> xr.Dataset:
    """How alike the seeds' probe subspaces are at each layer, after aligning their states
    (see the module).

    Parameters
    ----------
    store : Store or str
        The activation store (a path is opened for analysis, writable when ``save``).
    result : str, optional
        The probe result whose stored full-data probes are compared (``probes/<task>`` or
        ``<task>``); default the one of the selected runs' task.
    runs, layers, lengths, seed, inputs, shuffles
        What :func:`plan_stability` sweeps: ``runs``, ``layers``, ``lengths`` (the result's fit
        lengths by default), ``seed`` (the sequences' split between the map and its check),
        ``inputs`` (``"auto"``: sequences both runs hold when there are :data:`MIN_SHARED`,
        else each run's model re-run on the other's sequences; ``"shared"``; ``"rerun"``),
        ``shuffles`` (label permutations of the shuffled-label null, :data:`SHUFFLES`).
    save, name, attrs : store it (default name :func:`result_name`), with these attributes.

    Returns
    -------
    xarray.Dataset
        Per seed pair (``pair`` with ``pair_a``, ``pair_b``), length, layer [and position]:
        ``overlap``, ``raw_overlap``, ``null_overlap`` and per shuffle ``shuffled_overlap``;
        per pair, length and layer ``overlap_profile``, ``null_profile``, ``alignment_r2``
        (and ``shuffled_profile`` per shuffle); per run ``seed_overlap`` and ``seed_pseudo``
        (what claims test); saved, the seed-level intervals and the null's band
        (:func:`add_stability_intervals`).
    """
    if isinstance(store, str):
        store = open_analysis(store, write=save)
    plan = plan_stability(store, result, runs=runs, layers=layers, lengths=lengths, seed=seed, inputs=inputs,
                          shuffles=shuffles)
    ds = plan.compute()
    ds.attrs.update(attrs or {})
    if save:
        save_stability(store, ds, name)
    return ds
