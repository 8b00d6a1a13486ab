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
`twin_grid` builds either grid here, `interchange` itself is in
:mod:`analysis.interventions.interchange`, the noise corruption in
:mod:`analysis.interventions.noise`, the twin grids both run in
:mod:`analysis.interventions.twins`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import xarray as xr

from analysis import registry
from analysis.interventions.engine import InterventionPlan, assemble
from analysis.interventions.intervals import store_with_intervals
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
from capture.device import Device, as_device
from store import Store
from store.errors import InvalidArgumentError

#: The twin grids' variables: OUTPUTS key (and ``<key>:share``, its summary) -> (`patching`'s
#: name, `interchange`'s name), None where the grid has none; ``primary`` is its first metric.
TWIN_NAMES = {
    "primary": ("logit", "prob"),
    "recovered_logit": ("recovered", "restored_logit"),
    "recovered_prob": ("recovered_prob", "restored"),
    "damaged_logit": ("damaged", "damaged_logit"),
    "damaged_prob": ("damaged_prob", "damaged"),
    "sub_recovered_logit": ("recovered_subspace", "restored_subspace_logit"),
    "sub_recovered_prob": ("recovered_subspace_prob", "restored_subspace"),
    "sub_damaged_logit": ("damaged_subspace", "damaged_subspace_logit"),
    "sub_damaged_prob": ("damaged_subspace_prob", "damaged_subspace"),
    "gap_logit": ("gap", "gap_logit"),
    "gap_prob": ("gap_prob", "gap"),
    "defined": ("corrupt_defined", None),
    "clean_prob": (None, "p_clean"),
    "corrupt_prob": (None, "p_corrupt"),
    "recovered_logit:share": ("recovery", "restoration_logit"),
    "recovered_prob:share": ("recovery_prob", "restoration"),
    "damaged_logit:share": ("damage", "damage_logit"),
    "damaged_prob:share": ("damage_prob", "damage"),
    "sub_recovered_logit:share": ("recovery_subspace", "restoration_subspace_logit"),
    "sub_recovered_prob:share": ("recovery_subspace_prob", "restoration_subspace"),
    "sub_damaged_logit:share": ("damage_subspace", "damage_subspace_logit"),
    "sub_damaged_prob:share": ("damage_subspace_prob", "damage_subspace"),
}
#: `patching`'s variables (the logit difference is its primary metric).
PATCHING_NAMES = {key: p for key, (p, _i) in TWIN_NAMES.items() if p is not None}
#: `interchange`'s variables (the probability is its primary metric).
INTERCHANGE_NAMES = {key: i for key, (_p, i) in TWIN_NAMES.items() if i is not None}
#: `patching`'s own attributes: what its metrics are.
PATCHING_ATTRS = {
    "metric": "logit(clean answer) - logit(corrupted answer) at the label position; "
    "log p(clean answer) where the corrupted answer is undefined (-1)",
    "metric_prob": "probability of the clean answer at the label position (*_prob)",
    "recovery": "sum(recovered) / sum(gap) over sequences",
    "damage": "sum(damaged) / sum(gap) over sequences",
}


def twin_grid(
    analysis: str,
    names: dict[str, str],
    own: dict[str, str],
    store: Store,
    runs,
    length: int,
    axis: str,
    choose: Callable[[InterventionPlan], list],
    described: Callable[[InterventionPlan, list], tuple[dict, dict]],
    *,
    layers=None,
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
    """The lazy grid ``analysis`` (`patching` or `interchange`) builds, with its summaries (on
    the twin machinery of :mod:`analysis.interventions.twins`): ``names`` its variables
    (`twin_variables`), ``own`` its own attributes; the sites along ``axis`` are
    ``choose(plan)`` (positions, or names of stored positions), ``described(plan, sites)``
    its further data and coordinates. The keywords are those `patching` documents."""
    where = as_device(device)  # before anything is read
    noise = noise_options(corruption, allow_noise, noise_scale, seed)
    plan = twin_plan(store, runs, length, layers, corruption)
    plan.device = where
    sites = choose(plan)
    plan.axes = {axis: sites}
    subspaces = subspace_bases(plan, length, subspace, directions, fit_length)
    data, coords = described(plan, sites)
    ds = assemble(
        plan,
        twin_variables(names, axis, subspace is not None),
        twin_cells(plan, length, sites, names, batch_size, subspaces=subspaces, noise=noise),
        data=data,
        coords=coords,
        attrs={"analysis": analysis, "length": int(length), **own,
               **common_attrs(corruption, noise, subspace)},
    )
    return twin_summaries(ds, names, subspace is not None)


def patching(
    store: Store,
    runs: Sequence[str] | None,
    length: int,
    *,
    positions: Sequence[int] | None = None,
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
    batch_size, device
        As in `ablation` (sequences per resumed forward pass; where each run's model runs).

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
    def choose(plan: InterventionPlan) -> list[int]:
        chosen = list(range(length) if positions is None else positions)
        bad_pos = [p for p in chosen if not 0 <= p < length]
        if bad_pos:
            raise InvalidArgumentError(
                f"positions {bad_pos} are outside 0..{length - 1} (the twins' length {length}); "
                f"pass positions from 0 to {length - 1}"
            )
        return chosen

    def described(plan: InterventionPlan, chosen: list) -> tuple[dict, dict]:
        return (stored_positions(plan, length, ("corrupt", "label")),
                {"patched_site": (("run", "layer"), plan.site_names("one position at a time"))})

    return twin_grid("patching", PATCHING_NAMES, PATCHING_ATTRS, store, runs, length, "position",
                     choose, described, layers=layers, subspace=subspace, directions=directions, fit_length=fit_length,
                     corruption=corruption, allow_noise=allow_noise, noise_scale=noise_scale, seed=seed,
                     batch_size=batch_size, device=device)


def run_patching(
    store: Store,
    length: int,
    name: str = "default",
    *,
    runs: Sequence[str] | None = None,
    positions: Sequence[int] | None = None,
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
    scheduler: Any = "threads",
    num_workers: int | None = None,
    attrs: Mapping[str, Any] | None = None,
    extend: bool = False,
) -> xr.Dataset:
    """Compute `patching` and store it as ``results/patching/<name>``, with the seed-level
    intervals of its recovery and damage (`store_with_intervals`).

    Parameters
    ----------
    store : Store
        Opened with ``mode="r+"``.
    length : int
        Length of the stored counterfactual pairs.
    name : str
    runs : list of str, optional
        Default: every run.
    positions, layers, subspace, directions, fit_length, corruption, allow_noise, noise_scale, seed, batch_size, device
        As `patching` takes them.
    scheduler, num_workers, attrs, extend
        As `store_with_intervals` takes them.

    Returns
    -------
    xarray.Dataset
        The computed `patching` result, with its intervals
        (`analysis.interventions.intervals.add_intervals`).
    """
    def build(chosen: Sequence[str] | None) -> xr.Dataset:
        return patching(store, chosen, length, positions=positions, layers=layers, subspace=subspace,
                        directions=directions, fit_length=fit_length, corruption=corruption, allow_noise=allow_noise,
                        noise_scale=noise_scale, seed=seed, batch_size=batch_size, device=device)

    return store_with_intervals(store, registry.PATCHING, name, build, runs, scheduler=scheduler,
                                num_workers=num_workers, attrs=attrs, extend=extend)
