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
`interchange` itself in :mod:`analysis.interventions.interchange` and the noise corruption in
:mod:`analysis.interventions.noise`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dask
import numpy as np
import xarray as xr

from analysis.interventions._common import (
    PortableModel,
    open_group,
)
from analysis.interventions.engine import (
    DelayedCell,
    InterventionPlan,
    Var,
    assemble,
    open_plan,
    run_and_store,
    select_runs,
)
from analysis.interventions.noise import CORRUPTIONS, noise_options, noised
from analysis.interventions.patch_kernels import OUTPUTS, patch_effects
from store import Store
from store.errors import InvalidArgumentError, InvalidArrayError


def _twin_cell(model: PortableModel, clean, corrupted, layer: str, sites: list, batch_size: int,
               basis=None):
    """The per-cell function of both `patching` (sites: positions) and `interchange` (sites:
    names of stored ``pos_<site>`` positions): `patch_effects` for one (run, layer), its
    values in the order of `OUTPUTS`. ``corrupted`` may be a delayed noised twin and
    ``basis`` a delayed subspace."""
    effects = patch_effects(model.module, clean, corrupted, layer, sites, basis=basis,
                            batch_size=batch_size)
    return tuple(effects[k] for k in OUTPUTS)


# ----------------------------------------------------------------------------- subspaces
SUBSPACES = ("probe", "stored", "given")


def _subspace_basis(rows, fixed) -> np.ndarray:
    """Orthonormal basis (feature, rank) of a probe fitted on ``rows`` (x, y, sequence), or of
    ``fixed`` directions (direction, feature)."""
    from analysis.interventions import erasure

    if fixed is not None:
        return erasure.orthonormal_basis_np(fixed)
    x, y, groups = rows
    return erasure.orthonormal_basis_np(erasure.probe_directions_np(x, y, groups=groups))


def subspace_bases(plan: InterventionPlan, length: int, subspace: str | None, directions, fit_length) -> dict:
    """(run, layer) -> a delayed basis of the patched subspace (empty without a subspace)."""
    if subspace is None:
        return {}
    if subspace not in SUBSPACES:
        raise InvalidArgumentError(f"unknown subspace {subspace!r}; use one of {', '.join(SUBSPACES)}")
    from analysis.interventions.directions import (
        Setting,
        check_directions,
        fit_rows,
        fixed_directions,
        load_probe_directions,
    )

    out = {}
    for rid in plan.runs:
        fit = fit_length or plan.store.run_attrs(rid).get("train_config", {}).get("length") or length
        kind = "len" if int(fit) in plan.store.lengths(rid) else "cfclean"
        group = open_group(plan.store, rid, int(fit) if kind == "len" else length, kind)
        given = {}
        if subspace == "given":
            if directions is None:
                raise InvalidArgumentError("subspace 'given' needs directions=DataArray (layer, direction, feature)")
            da = directions.sel(run=rid) if "run" in directions.dims else directions
            given["given"] = check_directions(da, "directions")
        elif subspace == "stored":
            given["stored"] = load_probe_directions(plan.store, plan.target[rid], run_id=rid,
                                                    length=int(fit))
        idx = np.arange(group.sizes["sequence"])
        for layer in plan.run_layers[rid]:
            fixed = fixed_directions(plan, given, rid, layer, Setting(subspace))
            rows = None if fixed is not None else dask.delayed(fit_rows, pure=False)(group, layer, idx)
            out[rid, layer] = dask.delayed(_subspace_basis, pure=False)(rows, fixed)
    return out


# ----------------------------------------------------------------------------- the graphs
def twin_plan(store: Store, runs, length: int, layers, corruption: str = "token") -> InterventionPlan:
    """The plan of a grid over the stored twins ``cfclean_<length>``/``cfcorrupt_<length>``
    (only ``cfclean`` for a noise corruption)."""
    runs = select_runs(store, runs, "patch")
    groups = [("cfclean", length)] + ([("cfcorrupt", length)] if corruption == "token" else [])
    plan = open_plan(store, runs, groups, layers, layers_at=("cfclean", length))
    for rid in runs:
        clean = plan.group(rid, length, "cfclean")
        if corruption == "token":
            bad = plan.group(rid, length, "cfcorrupt")
            if clean.sizes["position"] != bad.sizes["position"]:
                raise InvalidArrayError(
                    f"run {rid!r}: cfclean_{length} has {clean.sizes['position']} positions and "
                    f"cfcorrupt_{length} {bad.sizes['position']}; re-capture the pairs with "
                    "`layerstate capture`"
                )
        plan.sequences[rid, length] = np.arange(clean.sizes["sequence"])
    return plan


def twin_cells(plan: InterventionPlan, length: int, sites: list, names: dict, batch_size: int, *,
                subspaces: dict, noise: dict | None) -> list[DelayedCell]:
    """One cell per (run, layer): `_twin_cell` over every site; ``names`` maps `OUTPUTS` to
    the analysis' variables (absent: dropped)."""
    delayed = dask.delayed
    cells = []
    for rid in plan.runs:
        clean = plan.group(rid, length, "cfclean")
        corrupted = (plan.group(rid, length, "cfcorrupt") if noise is None else
                     delayed(noised, pure=False)(plan.model(rid), clean, noise["scale"],
                                                  noise["seed"], batch_size))
        for layer in plan.run_layers[rid]:
            basis = subspaces.get((rid, layer))
            value = delayed(_twin_cell, pure=False)(plan.model(rid), clean, corrupted, layer,
                                                    sites, batch_size, basis)
            kept = tuple(None if k.startswith("sub_") and basis is None else names.get(k)
                         for k in OUTPUTS)
            cells.append(DelayedCell({"run": rid, "layer": layer}, kept, value))
    return cells


def stored_positions(plan: InterventionPlan, length: int, names) -> dict:
    """Per-sequence stored positions ``pos_<name> (run, sequence)``, -1 padded."""
    out = {}
    for name in names:
        arr = np.full((len(plan.runs), plan.n_sequences), -1, dtype=np.int64)
        for r, rid in enumerate(plan.runs):
            clean = plan.group(rid, length, "cfclean")
            values = np.asarray(clean[f"pos_{name}"].values, dtype=np.int64)
            arr[r, : values.shape[0]] = values
        out[f"pos_{name}"] = (("run", "sequence"), arr)
    return out


#: Denoising and noising "disagree" at a site when their shares of the gap differ by at least
#: this much in either metric (docs/interventions.md, "Both directions").
DISAGREE = 0.5
#: A subspace patch that recovers this much more of the gap than the whole component's patch
#: is flagged ``subspace_exceeds`` (the signature of an interpretability illusion).
SUBSPACE_EXCESS = 0.1
#: ``subspace_share`` is left undefined (NaN) where the whole component recovers less than
#: this share of the gap: a ratio over ~0 says nothing.
MIN_SHARE_BASE = 0.05


def _ratio(ds: xr.Dataset, num: str, den: str) -> xr.DataArray:
    return ds[num].sum("sequence") / ds[den].sum("sequence")


def twin_summaries(ds: xr.Dataset, v: dict[str, str], subspace: bool) -> xr.Dataset:
    """Ratios of sums and the flags, given ``v``: OUTPUTS key -> this analysis' variable and
    ``v["<key>:share"]`` -> the summary's name."""
    for key, gap in (("recovered_logit", "gap_logit"), ("recovered_prob", "gap_prob"),
                     ("damaged_logit", "gap_logit"), ("damaged_prob", "gap_prob"),
                     *((("sub_recovered_logit", "gap_logit"), ("sub_recovered_prob", "gap_prob"),
                        ("sub_damaged_logit", "gap_logit"), ("sub_damaged_prob", "gap_prob"))
                       if subspace else ())):
        ds[v[f"{key}:share"]] = _ratio(ds, v[key], v[gap])
    s = {k[:-6]: v[k] for k in v if k.endswith(":share")}
    ds["disagree"] = ((abs(ds[s["recovered_logit"]] - ds[s["damaged_logit"]]) >= DISAGREE)
                      | (abs(ds[s["recovered_prob"]] - ds[s["damaged_prob"]]) >= DISAGREE))
    if subspace:
        for metric in ("logit", "prob"):
            whole, part = s[f"recovered_{metric}"], s[f"sub_recovered_{metric}"]
            name = "subspace_share" + ("" if metric == v["primary"] else f"_{metric}")
            base = ds[v[f"recovered_{metric}"]].sum("sequence")
            ds[name] = (ds[v[f"sub_recovered_{metric}"]].sum("sequence")
                        / base.where(abs(ds[whole]) >= MIN_SHARE_BASE))
            flag = "subspace_exceeds" + ("" if metric == v["primary"] else f"_{metric}")
            ds[flag] = (ds[part] - ds[whole]) > SUBSPACE_EXCESS
    return ds


def common_attrs(corruption: str, noise: dict | None, subspace: str | None) -> dict:
    attrs: dict[str, Any] = {
        "corruption": CORRUPTIONS[corruption],
        "directions": "denoising: the clean site patched into the corrupted run (recovered, "
        "share of the gap recovered); noising: the corrupted site patched into the clean run "
        "(damaged, share of the gap lost)",
        "disagree": f"|denoising share - noising share| >= {DISAGREE} in either metric",
        "disagree_threshold": DISAGREE,
    }
    if noise is not None:
        attrs.update(noise_scale=noise["scale"], noise_seed=noise["seed"])
    if subspace is not None:
        attrs.update(
            subspace=subspace,
            subspace_patch="h_target + ((h_source - h_target) @ Q) @ Q^T: the source's "
            "component in the subspace, the target's orthogonal complement",
            subspace_share="sum(recovered in the subspace) / sum(recovered by the whole "
            f"component); NaN where the whole component recovers < {MIN_SHARE_BASE}",
            subspace_exceeds=f"the subspace recovers > {SUBSPACE_EXCESS} more of the gap than "
            "the whole component",
        )
    return attrs


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
def twin_variables(names: dict, site_dim: str, subspace: bool) -> dict[str, Var]:
    """The Vars of the cell outputs ``names`` keeps (the subspace's only with one)."""
    out = {}
    for key in OUTPUTS:
        name = names.get(key)
        if name is None or (key.startswith("sub_") and not subspace):
            continue
        if key == "defined":
            out[name] = Var(("run", "sequence"), bool, False)
        elif key.startswith(("gap", "clean", "corrupt")):
            out[name] = Var(("run", "layer", "sequence"))
        else:
            out[name] = Var(("run", "layer", site_dim, "sequence"))
    return out


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
        The computed `patching` result.
    """
    return run_and_store(store, f"patching/{name}", patching(store, runs, length, **kwargs),
                         scheduler=scheduler, num_workers=num_workers, attrs=attrs)
