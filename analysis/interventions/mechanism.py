"""Reading a mechanism from interchange results: restoration with the trivially restored sites
left out (`nontrivial_restoration`), and the induction / direct-retrieval / none label of
each run (`classify_mechanism`; the rule is in :mod:`analysis.interventions.patching`).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from analysis.interventions.twins import MIN_GAP
from store.errors import InvalidArgumentError


def nontrivial_restoration(result: xr.Dataset) -> xr.DataArray:
    """``restoration (run, layer, site)`` with the trivially restored cells set to NaN.

    Trivial: the embedding at the edited position (``trivial``), and each run's last layer at
    a site that is the readout position (``pos_<site>`` equal to ``pos_label`` in every
    sequence): the logits are a function of that state alone, so restoration there is 1 in
    every model and says nothing about the mechanism. "Last" is the deepest layer patched
    for the run (by name); results computed on a subset of layers that leaves out the top
    one mask their deepest patched layer instead, which errs on the safe side.
    """
    rest = result.restoration
    mask = result.trivial & (result.layer == "embed")
    if "pos_label" in result:
        sites = [str(s) for s in result.site.values]
        readout = xr.DataArray(
            np.array([[bool(f"pos_{s}" in result and (result[f"pos_{s}"].sel(run=r) == result.pos_label.sel(run=r))
                            .where(np.isfinite(result.pos_label.sel(run=r))).fillna(True).all())
                       for s in sites] for r in result.run.values]),
            dims=("run", "site"), coords={"run": result.run.values, "site": sites},
        )
        # each run's deepest layer *by name* (embed < L0 < L1 < ... < L10): the coordinate
        # order is not depth order once results of different models are merged
        depth = xr.DataArray([_depth(str(y)) for y in result.layer.values], dims="layer",
                             coords={"layer": result.layer.values})
        finite = np.isfinite(rest).any("site")  # (run, layer): the layers each run has
        is_last = depth == depth.where(finite).max("layer")
        mask = mask | (readout & is_last)
    return rest.where(~mask)


def _depth(layer: str) -> int:
    """``embed`` -> -1, ``L3`` -> 3 (the store's layer names)."""
    return int(layer[1:]) if layer[:1] == "L" and layer[1:].isdigit() else -1


def classify_mechanism(
    result: xr.Dataset, *, threshold: float = 0.5, min_gap: float = MIN_GAP
) -> xr.DataArray:
    """Name each run's retrieval mechanism from its interchange interventions.

    Parameters
    ----------
    result : xarray.Dataset
        Computed `interchange` output with sites ``key``, ``value`` and ``query``:
        ``restoration (run, layer, site)``, ``p_clean``, ``p_corrupt`` (run, layer, sequence),
        ``trivial (run, site)``.
    threshold : float
        Restoration that counts as "restores" (**ours**: 0.5, half the probability gap).
    min_gap : float
        Below this mean p_clean - p_corrupt the corruption does not matter to the model and
        the mechanism is "none".

    Returns
    -------
    xarray.DataArray of str, (run,)
        ``"induction"``, ``"direct retrieval"`` or ``"none"`` (module docstring).
    """
    needed = {"key", "value", "query"}
    have = {str(s) for s in result.site.values}
    if not needed <= have:
        raise InvalidArgumentError(
            f"classifying a mechanism needs sites key, value and query (associative recall, "
            f"treecall); this result has {', '.join(sorted(have))}: classify an interchange result "
            "of runs whose task stores those sites"
        )
    best = nontrivial_restoration(result).max("layer")  # (run, site)
    gap = (result.p_clean - result.p_corrupt).mean(("layer", "sequence"))
    labels = []
    for rid in result.run.values:
        b = best.sel(run=rid)
        if not float(gap.sel(run=rid)) >= min_gap:
            labels.append("none")
        elif float(b.sel(site="value")) >= threshold:
            labels.append("induction")
        elif max(float(b.sel(site="key")), float(b.sel(site="query"))) >= threshold:
            labels.append("direct retrieval")
        else:
            labels.append("none")
    return xr.DataArray(
        np.array(labels),
        dims=("run",),
        coords={"run": result.run.values},
        attrs={"threshold": threshold, "min_gap": min_gap},
    )
