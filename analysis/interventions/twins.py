"""The grids over stored counterfactual twins that `patching` and `interchange` both run.

One cell per (run, layer) (`twin_cells`): `patch_effects` resumed from the clean and the
corrupted states, every site patched in turn, both ways (denoising, noising), optionally also
only in a subspace (`subspace_bases`); the plan of a grid over ``cfclean_<L>`` /
``cfcorrupt_<L>`` (`twin_plan`), the stored per-sequence positions, the variables each
analysis names (`twin_variables`), the ratios of sums and flags of its summary
(`twin_summaries`, `DISAGREE`, `SUBSPACE_EXCESS`, `MIN_SHARE_BASE`), and the gap below which a
corruption does not move the clean answer (`MIN_GAP`). What each diagnostic answers:
docs/interventions.md.
"""

from __future__ import annotations

from typing import Any

import dask
import numpy as np
import xarray as xr

from analysis.interventions import erasure
from analysis.interventions._common import (
    PortableModel,
    open_group,
)
from analysis.interventions.directions import (
    Setting,
    check_directions,
    fit_rows,
    fixed_directions,
    load_probe_directions,
)
from analysis.interventions.engine import (
    DelayedCell,
    InterventionPlan,
    Var,
    open_plan,
    select_runs,
)
from analysis.interventions.noise import CORRUPTIONS, noised
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


#: Below this mean probability gap (p_clean - p_corrupt) a corruption does not change the
#: model's answer: its interchange restoration is undefined and its mechanism is "none"
#: (`classify_mechanism`, `flat_runs`, and the restoration claims of `analysis.claims`).
MIN_GAP = 0.05
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
