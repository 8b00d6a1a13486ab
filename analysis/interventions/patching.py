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
named positions) and primary metric (logit difference or probability).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dask
import numpy as np
import torch
import xarray as xr

from analysis.interventions import MIN_GAP
from analysis.interventions._common import (
    PortableModel,
    layer_module,
    open_group,
    read_layer,
    resume_logits,
    site_description,
    target_of,
)
from analysis.interventions.engine import (
    Cell,
    Plan,
    Var,
    assemble,
    open_plan,
    run_and_store,
    select_runs,
)
from capture.models import SequenceModel
from store import MissingError, Store
from store.errors import InvalidArgumentError, InvalidArrayError

TASK_SITES = ("key", "value", "divider", "query")


# ----------------------------------------------------------------------------- fast + reference
def _check_pair(clean: xr.Dataset, corrupted: xr.Dataset, patch: xr.DataArray) -> None:
    for name, ds in (("clean", clean), ("corrupted", corrupted)):
        if "hidden" not in ds or "tokens" not in ds:
            raise MissingError(f"{name} must hold 'hidden' and 'tokens'; it has {list(ds.data_vars)}")
    a, b = clean.sizes["position"], corrupted.sizes["position"]
    if a != b:
        raise InvalidArrayError(
            f"clean sequences have {a} positions and corrupted ones {b}: a patch needs twins of "
            "one length; load cfclean_<L> and cfcorrupt_<L> of the same run at the same L"
        )
    if clean.sizes["sequence"] != corrupted.sizes["sequence"]:
        raise InvalidArrayError(
            f"clean has {clean.sizes['sequence']} sequences and corrupted "
            f"{corrupted.sizes['sequence']}; patching pairs them one to one"
        )
    if set(patch.dims) != {"sequence", "position"} or patch.shape != (
        clean.sizes[patch.dims[0]], clean.sizes[patch.dims[1]]
    ):
        raise InvalidArrayError(
            f"patch must be a bool DataArray (sequence, position) of shape "
            f"({clean.sizes['sequence']}, {a}); got dims {patch.dims} shape {patch.shape}"
        )


def _logits_da(logits: np.ndarray, like: xr.Dataset) -> xr.DataArray:
    return xr.DataArray(
        logits,
        dims=("sequence", "position", "class"),
        coords={"sequence": like.sequence.values, "position": like.position.values},
    )


def patched_logits(
    model: SequenceModel,
    clean: xr.Dataset,
    corrupted: xr.Dataset,
    layer: str,
    patch: xr.DataArray,
    *,
    batch_size: int = 256,
) -> xr.DataArray:
    """Logits of the corrupted run with some sites patched from the clean run (resumed).

    Parameters
    ----------
    model : SequenceModel
    clean, corrupted : xarray.Dataset
        Twins: ``hidden (sequence, position, layer, feature)`` and ``tokens (sequence,
        position)``, same sizes.
    layer : str
        Layer name ("embed", "L0", ...): the output patched.
    patch : xarray.DataArray, bool, (sequence, position)
        Where the clean states replace the corrupted ones.

    Returns
    -------
    xarray.DataArray, (sequence, position, class)
    """
    _check_pair(clean, corrupted, patch)
    where = patch.transpose("sequence", "position").values.astype(bool)
    hidden = np.where(where[..., None], read_layer(clean, layer), read_layer(corrupted, layer))
    return _logits_da(resume_logits(model, layer, hidden, batch_size), corrupted)


@torch.no_grad()
def patched_logits_reference(
    model: SequenceModel,
    clean: xr.Dataset,
    corrupted: xr.Dataset,
    layer: str,
    patch: xr.DataArray,
    *,
    batch_size: int = 256,
) -> xr.DataArray:
    """The reference path of `patched_logits`: a full re-run of the corrupted tokens with a
    forward hook overwriting the layer's module output at the patched sites.

    Same parameters and return value as `patched_logits`.
    """
    _check_pair(clean, corrupted, patch)
    where = torch.from_numpy(patch.transpose("sequence", "position").values.astype(bool))
    source = torch.from_numpy(read_layer(clean, layer))
    tokens = torch.from_numpy(np.asarray(corrupted.tokens.values, dtype=np.int64))
    current: dict[str, slice] = {}

    def overwrite(module, inputs, output):
        value = output[0] if isinstance(output, tuple) else output
        rows = current["rows"]
        new = torch.where(where[rows, :, None], source[rows].to(value.dtype), value)
        return (new, *output[1:]) if isinstance(output, tuple) else new

    handle = layer_module(model, model.layer_index(layer)).register_forward_hook(overwrite)
    try:
        out = []
        for lo in range(0, tokens.shape[0], batch_size):
            current["rows"] = slice(lo, lo + batch_size)
            out.append(model(tokens[current["rows"]]).float().numpy())
    finally:
        handle.remove()
    return _logits_da(np.concatenate(out), corrupted)


# ----------------------------------------------------------------------------- metrics
def _answers(clean: xr.Dataset, corrupted: xr.Dataset):
    """Per sequence: label position, clean answer, corrupted answer (-1: undefined)."""
    target = target_of(clean)
    rows = np.arange(clean.sizes["sequence"])
    pos = np.asarray(clean.pos_label.values, dtype=np.int64)
    good = np.asarray(clean[target].values, dtype=np.int64)[rows, pos]
    bad = np.asarray(corrupted[target].values, dtype=np.int64)[rows, pos]
    return pos, good, bad


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def logit_metric(logits: np.ndarray, pos: np.ndarray, good: np.ndarray, bad: np.ndarray) -> np.ndarray:
    """``logit[good] - logit[bad]`` at each sequence's label position; ``log p(good)`` where
    ``bad`` is -1.

    Parameters
    ----------
    logits : ndarray, (sequence, position, class)
    pos, good, bad : ndarray of int, (sequence,)

    Returns
    -------
    ndarray, float64, (sequence,)
    """
    rows = np.arange(logits.shape[0])
    at = logits[rows, pos].astype(np.float64)  # (sequence, class)
    diff = at[rows, good] - at[rows, np.maximum(bad, 0)]
    return np.where(bad >= 0, diff, _log_softmax(at)[rows, good])


def answer_probability(logits: np.ndarray, pos: np.ndarray, good: np.ndarray) -> np.ndarray:
    """Probability of the clean answer at each sequence's label position, (sequence,)."""
    rows = np.arange(logits.shape[0])
    return np.exp(_log_softmax(logits[rows, pos].astype(np.float64))[rows, good])


# ----------------------------------------------------------------------------- the cell
#: What `patch_effects` returns, in this order (`_twin_cell` returns the values as a tuple).
#: ``recovered_*``: denoising (clean site into the corrupted run), metric(patched) -
#: metric(corrupted); ``damaged_*``: noising (corrupted site into the clean run),
#: metric(clean) - metric(patched); ``sub_*``: the same, patching only the projection onto a
#: subspace; ``*_logit`` / ``*_prob``: the logit difference / the clean answer's probability.
OUTPUTS = (
    "recovered_logit", "recovered_prob", "damaged_logit", "damaged_prob",
    "sub_recovered_logit", "sub_recovered_prob", "sub_damaged_logit", "sub_damaged_prob",
    "gap_logit", "gap_prob", "clean_logit", "clean_prob", "corrupt_logit", "corrupt_prob",
    "defined",
)


def patch_effects(
    model: SequenceModel,
    clean: xr.Dataset,
    corrupted: xr.Dataset,
    layer: str,
    sites: Sequence,
    *,
    basis: np.ndarray | None = None,
    directions: Sequence[str] = ("denoising", "noising"),
    batch_size: int = 256,
) -> dict[str, np.ndarray | None]:
    """Patch one layer of some twins, one site at a time, in both directions and two metrics.

    Parameters
    ----------
    model : SequenceModel
        Anything with ``forward_from(layer, hidden) -> logits``.
    clean, corrupted : xarray.Dataset
        Twins: ``hidden (sequence, position, layer, feature)``, the target label (sequence,
        position), ``pos_label`` (sequence) and, for named sites, ``pos_<site>`` in `clean`.
    layer : str
    sites : list of int or str
        Positions, or names of stored ``pos_<site>`` positions (one per sequence).
    basis : ndarray, (feature, rank), optional
        Orthonormal basis of a subspace: also patch only the component in it, ``h_target +
        ((h_source - h_target) @ Q) @ Q^T`` (the orthogonal complement stays the target's).
    directions : subset of ("denoising", "noising")
        Denoising puts the clean site into the corrupted run; noising the corrupted site into
        the clean run.

    Returns
    -------
    dict
        The keys of `OUTPUTS`: effects (site, sequence), gaps and metrics (sequence,); None
        for what was not asked (a direction, the subspace).
    """
    pos, good, wrong = _answers(clean, corrupted)
    hc, hx = read_layer(clean, layer), read_layer(corrupted, layer)
    rows = np.arange(hx.shape[0])

    def measure(hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits = resume_logits(model, layer, hidden, batch_size)
        return logit_metric(logits, pos, good, wrong), answer_probability(logits, pos, good)

    m_clean, m_bad = measure(hc), measure(hx)
    out: dict[str, np.ndarray | None] = dict.fromkeys(OUTPUTS)
    parts = [("", None)] + ([("sub_", np.asarray(basis, np.float32))] if basis is not None else [])
    for direction in directions:
        denoise = direction == "denoising"
        if direction not in ("denoising", "noising"):
            raise InvalidArgumentError(f"unknown patching direction {direction!r}; use denoising, noising")
        target, source, reference = (hx, hc, m_bad) if denoise else (hc, hx, m_clean)
        for prefix, q in parts:
            delta = np.empty((2, len(sites), hx.shape[0]))
            for i, site in enumerate(sites):  # a position, or a stored one's name per sequence
                at = np.asarray(clean[f"pos_{site}"].values, np.int64) if isinstance(site, str) else site
                saved = target[rows, at].copy()
                if q is None:
                    target[rows, at] = source[rows, at]
                else:
                    target[rows, at] = saved + ((source[rows, at] - saved) @ q) @ q.T
                patched = measure(target)
                target[rows, at] = saved
                for m in range(2):
                    delta[m, i] = patched[m] - reference[m] if denoise else reference[m] - patched[m]
            kind = "recovered" if denoise else "damaged"
            out[f"{prefix}{kind}_logit"], out[f"{prefix}{kind}_prob"] = delta[0], delta[1]
    out["gap_logit"], out["gap_prob"] = m_clean[0] - m_bad[0], m_clean[1] - m_bad[1]
    out["clean_logit"], out["clean_prob"] = m_clean
    out["corrupt_logit"], out["corrupt_prob"] = m_bad
    out["defined"] = wrong >= 0
    return out


def _twin_cell(model: PortableModel, clean, corrupted, layer: str, sites: list, batch_size: int,
               basis=None):
    """The per-cell function of both `patching` (sites: positions) and `interchange` (sites:
    names of stored ``pos_<site>`` positions): `patch_effects` for one (run, layer), its
    values in the order of `OUTPUTS`. ``corrupted`` may be a delayed noised twin and
    ``basis`` a delayed subspace."""
    effects = patch_effects(model.module, clean, corrupted, layer, sites, basis=basis,
                            batch_size=batch_size)
    return tuple(effects[k] for k in OUTPUTS)


# ----------------------------------------------------------------------------- corruptions
#: What a result's ``corruption`` attribute says for each kind.
CORRUPTIONS = {
    "token": "token replacement: stored counterfactual twins (cfclean/cfcorrupt) that differ in "
    "one token, a sequence the model could have seen",
    "noise": "Gaussian noise added to the embedding of the edited position (scale x the "
    "embedding's standard deviation): off the model's input distribution",
}
NOISE_REFUSED = (
    "a Gaussian-noise corruption is refused unless asked for explicitly (allow_noise=True, "
    "`--allow-noise`): noise moves the corrupted run off the distribution the model was trained "
    "on, so a patch can look important for restoring an input the model never sees, and "
    "noise and token-replacement corruptions lead to different conclusions (Zhang & Nanda, "
    "ICLR 2024); the stored counterfactual twins are token replacements"
)


def _check_corruption(corruption: str, allow_noise: bool) -> None:
    if corruption not in CORRUPTIONS:
        raise InvalidArgumentError(f"unknown corruption {corruption!r}; use 'token' (default) or 'noise'")
    if corruption == "noise" and not allow_noise:
        raise InvalidArgumentError(NOISE_REFUSED)


@torch.no_grad()
def noised_twin(model: SequenceModel, clean: xr.Dataset, *, scale: float = 3.0, seed: int = 0,
                batch_size: int = 256) -> xr.Dataset:
    """A corrupted twin made by noise instead of a token replacement (asked for explicitly).

    Gaussian noise of standard deviation ``scale`` x the embedding's (over every stored
    element, as Meng et al. 2022 corrupt subjects) is added to the embedding output at each
    sequence's ``pos_corrupt``; every layer above is recomputed from it. The corrupted answer
    is undefined (the target label is -1), so the logit metric is the clean answer's
    log-probability.

    Returns
    -------
    xarray.Dataset
        ``hidden (sequence, position, layer, feature)`` float32 for every layer of the model,
        ``tokens`` and the target label (all -1), the clean group's attributes.
    """
    target = target_of(clean)
    names = list(model.layer_names)
    embed = read_layer(clean, names[0])
    n, _, d = embed.shape
    sigma = float(embed.std(dtype=np.float64))
    at = np.asarray(clean.pos_corrupt.values, dtype=np.int64)
    embed[np.arange(n), at] += (scale * sigma * np.random.default_rng(seed).standard_normal((n, d))
                                ).astype(np.float32)
    captured: dict[int, list[torch.Tensor]] = {i: [] for i in range(1, len(names))}
    handles = []
    for i in captured:
        def keep(module, inputs, output, i=i):
            value = output[0] if isinstance(output, tuple) else output
            captured[i].append(value.detach().float())
        handles.append(layer_module(model, i).register_forward_hook(keep))
    try:
        for lo in range(0, n, batch_size):
            model.forward_from(names[0], torch.from_numpy(embed[lo: lo + batch_size]))
    finally:
        for h in handles:
            h.remove()
    states = [embed] + [torch.cat(captured[i]).numpy() for i in captured]
    return xr.Dataset(
        {
            "hidden": (("sequence", "position", "layer", "feature"), np.stack(states, axis=2)),
            "tokens": clean.tokens.variable,
            target: (("sequence", "position"), np.full(clean[target].shape, -1, np.int64)),
        },
        coords={"layer": names},
        attrs={**clean.attrs, "corruption": CORRUPTIONS["noise"]},
    )


def _noised(model: PortableModel, clean: xr.Dataset, scale: float, seed: int, batch_size: int):
    return noised_twin(model.module, clean, scale=scale, seed=seed, batch_size=batch_size)


# ----------------------------------------------------------------------------- subspaces
SUBSPACES = ("probe", "stored", "given")


def _subspace_basis(rows, fixed) -> np.ndarray:
    """Orthonormal basis (feature, rank) of a probe fitted on ``rows`` (x, y), or of ``fixed``
    directions (direction, feature)."""
    from analysis.interventions import erasure as E

    if fixed is not None:
        return E.orthonormal_basis_np(fixed)
    x, y = rows
    return E.orthonormal_basis_np(E.probe_directions_np(x, y))


def _subspaces(plan: Plan, length: int, subspace: str | None, directions, fit_length) -> dict:
    """(run, layer) -> a delayed basis of the patched subspace (empty without a subspace)."""
    if subspace is None:
        return {}
    if subspace not in SUBSPACES:
        raise InvalidArgumentError(f"unknown subspace {subspace!r}; use one of {', '.join(SUBSPACES)}")
    from analysis.interventions.ablation import (
        Setting,
        _check_directions,
        _fit_rows_from,
        _fixed_directions,
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
            given["given"] = _check_directions(da, "directions")
        elif subspace == "stored":
            given["stored"] = load_probe_directions(plan.store, plan.target[rid], run_id=rid,
                                                    length=int(fit))
        idx = np.arange(group.sizes["sequence"])
        for layer in plan.run_layers[rid]:
            fixed = _fixed_directions(plan, given, rid, layer, Setting(subspace))
            rows = None if fixed is not None else dask.delayed(_fit_rows_from, pure=False)(group, layer, idx)
            out[rid, layer] = dask.delayed(_subspace_basis, pure=False)(rows, fixed)
    return out


# ----------------------------------------------------------------------------- the graphs
def _twin_plan(store: Store, runs, length: int, layers, corruption: str = "token") -> Plan:
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


def _twin_cells(plan: Plan, length: int, sites: list, names: dict, batch_size: int, *,
                subspaces: dict, noise: dict | None) -> list[Cell]:
    """One cell per (run, layer): `_twin_cell` over every site; ``names`` maps `OUTPUTS` to
    the analysis' variables (absent: dropped)."""
    delayed = dask.delayed
    cells = []
    for rid in plan.runs:
        clean = plan.group(rid, length, "cfclean")
        corrupted = (plan.group(rid, length, "cfcorrupt") if noise is None else
                     delayed(_noised, pure=False)(plan.model(rid), clean, noise["scale"],
                                                  noise["seed"], batch_size))
        for layer in plan.run_layers[rid]:
            basis = subspaces.get((rid, layer))
            value = delayed(_twin_cell, pure=False)(plan.model(rid), clean, corrupted, layer,
                                                    sites, batch_size, basis)
            kept = tuple(None if k.startswith("sub_") and basis is None else names.get(k)
                         for k in OUTPUTS)
            cells.append(Cell({"run": rid, "layer": layer}, kept, value))
    return cells


def _stored_positions(plan: Plan, length: int, names) -> dict:
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


def _summaries(ds: xr.Dataset, v: dict[str, str], subspace: bool) -> xr.Dataset:
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


def _common_attrs(corruption: str, noise: dict | None, subspace: str | None) -> dict:
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


def _noise_options(corruption: str, allow_noise: bool, noise_scale: float, seed: int) -> dict | None:
    _check_corruption(corruption, allow_noise)
    return {"scale": float(noise_scale), "seed": int(seed)} if corruption == "noise" else None


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


def _variables(names: dict, site_dim: str, subspace: bool) -> dict[str, Var]:
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
    noise = _noise_options(corruption, allow_noise, noise_scale, seed)
    plan = _twin_plan(store, runs, length, layers, corruption)
    positions = list(range(length) if positions is None else positions)
    bad_pos = [p for p in positions if not 0 <= p < length]
    if bad_pos:
        raise InvalidArgumentError(
            f"positions {bad_pos} are outside 0..{length - 1} (the twins' length {length}); "
            f"pass positions from 0 to {length - 1}"
        )
    plan.axes = {"position": positions}
    subspaces = _subspaces(plan, length, subspace, directions, fit_length)
    names = PATCHING_NAMES
    ds = assemble(
        plan,
        _variables(names, "position", subspace is not None),
        _twin_cells(plan, length, positions, names, batch_size, subspaces=subspaces, noise=noise),
        data=_stored_positions(plan, length, ("corrupt", "label")),
        coords={"patched_site": (("run", "layer"), plan.site_names("one position at a time"))},
        attrs={
            "analysis": "patching",
            "length": int(length),
            "metric": "logit(clean answer) - logit(corrupted answer) at the label position; "
            "log p(clean answer) where the corrupted answer is undefined (-1)",
            "metric_prob": "probability of the clean answer at the label position (*_prob)",
            "recovery": "sum(recovered) / sum(gap) over sequences",
            "damage": "sum(damaged) / sum(gap) over sequences",
            **_common_attrs(corruption, noise, subspace),
        },
    )
    return _summaries(ds, names, subspace is not None)


def _sites(plan: Plan, length: int, sites: Sequence[str] | None) -> list[str]:
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


def _trivial(plan: Plan, length: int, sites: list[str]) -> np.ndarray:
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
    noise = _noise_options(corruption, allow_noise, noise_scale, seed)
    plan = _twin_plan(store, runs, length, layers, corruption)
    sites = _sites(plan, length, sites)
    plan.axes = {"site": sites}
    subspaces = _subspaces(plan, length, subspace, directions, fit_length)
    names = INTERCHANGE_NAMES
    named = [[[site_description(plan.arch[r], y, f"position {c!r}") for c in sites]
              for y in plan.layers] for r in plan.runs]
    ds = assemble(
        plan,
        _variables(names, "site", subspace is not None),
        _twin_cells(plan, length, sites, names, batch_size, subspaces=subspaces, noise=noise),
        data={**_stored_positions(plan, length, sorted({*sites, "corrupt", "label"})),
              "trivial": (("run", "site"), _trivial(plan, length, sites))},
        coords={"patched_site": (("run", "layer", "site"), named)},
        attrs={
            "analysis": "interchange",
            "length": int(length),
            "metric": "probability of the clean answer at the label position",
            "metric_logit": "logit(clean answer) - logit(corrupted answer) (*_logit)",
            "restoration": "sum(p_patched - p_corrupt) / sum(p_clean - p_corrupt) over sequences",
            "damage": "sum(p_clean - p_noised) / sum(p_clean - p_corrupt) over sequences",
            **_common_attrs(corruption, noise, subspace),
        },
    )
    return _summaries(ds, names, subspace is not None)


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


def run_patching(
    store: Store,
    length: int,
    name: str = "default",
    *,
    runs: Sequence[str] | None = None,
    scheduler: Any = "threads",
    num_workers: int | None = None,
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
    **kwargs
        ``layers``, ``positions``, ``batch_size`` of `patching`.

    Returns
    -------
    xarray.Dataset
        The computed `patching` result.
    """
    return run_and_store(store, f"patching/{name}", patching(store, runs, length, **kwargs),
                         scheduler=scheduler, num_workers=num_workers)


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
    **kwargs
        ``layers``, ``sites``, ``batch_size`` of `interchange`.

    Returns
    -------
    xarray.Dataset
        The computed `interchange` result, plus ``mechanism`` (attrs: threshold, min_gap).
    """

    def with_mechanism(result: xr.Dataset) -> xr.Dataset:
        if {"key", "value", "query"} <= {str(s) for s in result.site.values}:
            result["mechanism"] = classify_mechanism(result, threshold=threshold, min_gap=min_gap)
            result.attrs.update(mechanism_threshold=threshold, mechanism_min_gap=min_gap)
        return result

    return run_and_store(store, f"interchange/{name}", interchange(store, runs, length, **kwargs),
                         scheduler=scheduler, num_workers=num_workers, finish=with_mechanism)
