"""Activation patching and interchange interventions on counterfactual twins.

A counterfactual pair is a clean sequence and a minimally edited (corrupted) copy, stored as
``cfclean_<L>`` / ``cfcorrupt_<L>`` with every layer's states and, per sequence,
``pos_corrupt`` (the edited position), ``pos_label`` (where the target label differs) and the
task's named positions (``pos_key``, ``pos_value``, ``pos_divider``, ``pos_query`` for
associative recall and treecall).

To *patch a site* (layer l, position p) is to resume the corrupted run above layer l from its
stored states with position p replaced by the clean run's (`patched_logits`). The reference
path (`patched_logits_reference`, same signature) re-runs the whole model on the corrupted
tokens with a forward hook that overwrites the layer's module output at p; a test holds them
equal. What is patched is a layer's *output* (the embedding or a block's output): for
recurrent models (LSTM, GRU, Mamba, the zoo's) that changes what the layers above see at p, not
the layer's own recurrent state at later positions (docs/design.md); every result names its
site.

Every site is patched both ways (Heimersheim & Nanda 2024), each measured in two metrics
(the logit difference and the clean answer's probability): **denoising** puts the clean
site into the corrupted run (is this site *sufficient* to restore the answer?), **noising**
puts the corrupted site into the clean run (is it *necessary*?). ``disagree`` marks sites
where the two shares of the gap differ by at least `DISAGREE`. With ``subspace=``, each site
is also patched only in a subspace (e.g. the probe's directions) beside the whole component,
with the share of the whole component's effect the subspace carries (Makelov et al. 2024).
Corruptions are the stored token replacements; Gaussian noise is refused unless asked for
(`NOISE_REFUSED`). docs/interventions.md describes every diagnostic.

Measures (**ours** where the papers leave it open):

- `patching`: the (primary) metric at the label position is ``logit(clean answer) -
  logit(corrupted answer)``; where the corrupted answer is undefined (-1, e.g. associative recall with
  ``corrupt="key"``: the query then has no match) it is the clean answer's log-probability.
  Per sequence, ``recovered = metric(patched) - metric(corrupted)`` and ``gap =
  metric(clean) - metric(corrupted)``; ``recovery = sum(recovered) / sum(gap)`` over
  sequences (a ratio of sums: per-sequence ratios explode where the gap is near zero), so 0 =
  nothing recovered, 1 = the clean value. Noising: ``damaged = metric(clean) -
  metric(noised)``, ``damage = sum(damaged) / sum(gap)`` (0 = nothing lost, 1 = the corrupted
  value). Clean and corrupted metrics are themselves resumed from the stored (unpatched)
  states of the same layer, so storage rounding cancels.
- `interchange`: the same with the clean answer's probability (paper B): ``restoration =
  sum(p_patched - p_corrupted) / sum(p_clean - p_corrupted)`` per (layer, site).
- `classify_mechanism`: ``"induction"`` if patching the in-context value restores at least
  `threshold` (default 0.5) at some layer; else ``"direct retrieval"`` if the key or the query
  does; else ``"none"``; also ``"none"`` when the corruption barely moves the answer (mean
  probability gap below `min_gap`, default ``analysis.interventions.MIN_GAP`` = 0.05). Two
  sites restore any model trivially and are left out (`nontrivial_restoration`): the
  embedding of the corrupted position (patching the edited token back), and the last layer at
  the position where the answer is read out (patching it sets the logits to the clean ones).

Both grids run one per-cell function, `_twin_cell` (`patch_effects` for one run and layer:
resume the clean and corrupted states, then each site patched in turn, both ways), on the
engine of :mod:`analysis.interventions.engine`; they differ only in their sites (positions or
named positions) and primary metric (logit difference or probability). The cell's
computation (patched logits, metrics, `patch_effects`) is in
:mod:`analysis.interventions.patch_kernels`; reading a mechanism from the results
(`nontrivial_restoration`, `classify_mechanism`) in :mod:`analysis.interventions.mechanism`;
`interchange` itself in :mod:`analysis.interventions.interchange`, the noise corruption in
:mod:`analysis.interventions.noise`, the twin grids both run in
:mod:`analysis.interventions.twins`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import xarray as xr

from analysis.interventions.engine import assemble, run_and_store
from analysis.interventions.noise import noise_options
from analysis.interventions.twins import (
    common_attrs,
    stored_positions,
    subspace_bases,
    twin_cells,
    twin_plan,
    twin_summaries,
    twin_variables,
)
from store import Store, schema
from store.errors import InvalidArgumentError

#: `patching`'s variables: OUTPUTS key -> name (and the summaries' names).
PATCHING_NAMES = {
    "primary": "logit",
    "recovered_logit": "recovered", "recovered_prob": "recovered_prob",
    "damaged_logit": "damaged", "damaged_prob": "damaged_prob",
    "sub_recovered_logit": "recovered_subspace", "sub_recovered_prob": "recovered_subspace_prob",
    "sub_damaged_logit": "damaged_subspace", "sub_damaged_prob": "damaged_subspace_prob",
    "gap_logit": "gap", "gap_prob": "gap_prob", "defined": "corrupt_defined",
    "recovered_logit:share": "recovery", "recovered_prob:share": "recovery_prob",
    "damaged_logit:share": "damage", "damaged_prob:share": "damage_prob",
    "sub_recovered_logit:share": "recovery_subspace",
    "sub_recovered_prob:share": "recovery_subspace_prob",
    "sub_damaged_logit:share": "damage_subspace", "sub_damaged_prob:share": "damage_subspace_prob",
}


def patching(
    store: Store,
    runs: Sequence[str] | None,
    length: int,
    *,
    layers: Sequence[str] | None = None,
    positions: Sequence[int] | None = None,
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
    """Build (lazily) the layer x position patching grid of clean / corrupted twins, in both
    directions and two metrics.

    Parameters
    ----------
    store : Store
    runs : list of str or None
        None: every run in the store.
    length : int
        Length of the stored counterfactual pairs (``cfclean_<L>``, ``cfcorrupt_<L>``).
    layers : list of str, optional
        Default: every stored layer.
    positions : list of int, optional
        Absolute positions patched one at a time (default all, 0..L-1).
    subspace : {"probe", "stored", "given"}, optional
        Also patch only the component of each site in a subspace: the directions of a probe
        of the run's target fitted at `fit_length` (``len_<fit_length>``, else the clean
        twins), of ``layerstate probe``'s stored probe, or `directions` (layer, direction,
        feature). Reported beside the whole component's patch, with ``subspace_share``.
    directions : xarray.DataArray, optional
    fit_length : int, optional
        Default: the run's training length when stored, else `length`.
    corruption : {"token", "noise"}
        ``token`` (default): the stored counterfactual twins. ``noise`` (Gaussian noise at the
        edited position's embedding, `noised_twin`) is refused unless `allow_noise`.
    allow_noise : bool
    noise_scale : float
        Noise standard deviation, in units of the embedding's.
    seed : int
        Seeds the noise.
    batch_size : int
    device : str
        Where each run's model is rebuilt and resumed (``"cpu"``, ``"cuda[:N]"``); the stored
        states are read on the host. Recorded as the result's ``device`` attribute.

    Returns
    -------
    xarray.Dataset, dask-backed
        Per (run, layer, position, sequence), logit difference first, probability second:
        denoising ``recovered``, ``recovered_prob`` (metric(patched) - metric(corrupted));
        noising ``damaged``, ``damaged_prob`` (metric(clean) - metric(noised)); with a
        subspace the same with suffix ``_subspace`` (``recovered_subspace``,
        ``recovered_subspace_prob``, ...). ``gap``, ``gap_prob`` (run, layer, sequence):
        metric(clean) - metric(corrupted). Summaries (run, layer, position), ratios of sums
        over sequences: ``recovery``, ``recovery_prob``, ``damage``, ``damage_prob``
        (and ``*_subspace*``), ``disagree``; with a subspace ``subspace_share`` (logit),
        ``subspace_share_prob``, ``subspace_exceeds``, ``subspace_exceeds_prob``.
        ``corrupt_defined (run, sequence)``; ``pos_corrupt``, ``pos_label`` (run, sequence).
        Coordinate ``patched_site (run, layer)``; attrs ``corruption`` (what the twins are),
        ``metric``, ``directions``. NaN where a run has fewer sequences or lacks a layer.
    """
    noise = noise_options(corruption, allow_noise, noise_scale, seed)
    plan = twin_plan(store, runs, length, layers, corruption)
    plan.device = device
    positions = list(range(length) if positions is None else positions)
    bad_pos = [p for p in positions if not 0 <= p < length]
    if bad_pos:
        raise InvalidArgumentError(
            f"positions {bad_pos} are outside 0..{length - 1} (the twins' length {length}); "
            f"pass positions from 0 to {length - 1}"
        )
    plan.axes = {"position": positions}
    subspaces = subspace_bases(plan, length, subspace, directions, fit_length)
    names = PATCHING_NAMES
    ds = assemble(
        plan,
        twin_variables(names, "position", subspace is not None),
        twin_cells(plan, length, positions, names, batch_size, subspaces=subspaces, noise=noise),
        data=stored_positions(plan, length, ("corrupt", "label")),
        coords={"patched_site": (("run", "layer"), plan.site_names("one position at a time"))},
        attrs={
            "analysis": "patching",
            "length": int(length),
            "metric": "logit(clean answer) - logit(corrupted answer) at the label position; "
            "log p(clean answer) where the corrupted answer is undefined (-1)",
            "metric_prob": "probability of the clean answer at the label position (*_prob)",
            "recovery": "sum(recovered) / sum(gap) over sequences",
            "damage": "sum(damaged) / sum(gap) over sequences",
            **common_attrs(corruption, noise, subspace),
        },
    )
    return twin_summaries(ds, names, subspace is not None)


def run_patching(
    store: Store,
    length: int,
    name: str = "default",
    *,
    runs: Sequence[str] | None = None,
    scheduler: Any = "threads",
    num_workers: int | None = None,
    attrs: Mapping[str, Any] | None = None,
    **kwargs,
) -> xr.Dataset:
    """Compute `patching` and store it as ``results/patching/<name>``.

    Parameters
    ----------
    store : Store
        Opened with ``mode="r+"``.
    length : int
        Length of the stored counterfactual pairs.
    name : str
    runs : list of str, optional
        Default: every run.
    scheduler, num_workers
        Where to compute: see `analysis.compute.compute`.
    attrs : mapping, optional
        Added to the stored result's attributes.
    **kwargs
        ``layers``, ``positions``, ``batch_size`` of `patching`.

    Returns
    -------
    xarray.Dataset
        The computed `patching` result, with the seed-level intervals of its recovery and
        damage (`analysis.interventions.intervals.add_intervals`).
    """
    from analysis.interventions.intervals import add_intervals

    return run_and_store(store, schema.result_name(schema.PATCHING, name), patching(store, runs, length, **kwargs),
                         scheduler=scheduler, num_workers=num_workers, attrs=attrs,
                         finish=lambda done: add_intervals(done, "patching", store))
