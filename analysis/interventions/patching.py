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
recurrent models (LSTM, GRU, Mamba) that changes what the layers above see at p, not the
layer's own recurrent state at later positions (docs/design.md); every result names its site.

Measures (**ours** where the papers leave it open):

- `patching`: the metric at the label position is ``logit(clean answer) - logit(corrupted
  answer)``; where the corrupted answer is undefined (-1, e.g. associative recall with
  ``corrupt="key"``: the query then has no match) it is the clean answer's log-probability.
  Per sequence, ``recovered = metric(patched) - metric(corrupted)`` and ``gap =
  metric(clean) - metric(corrupted)``; ``recovery = sum(recovered) / sum(gap)`` over
  sequences (a ratio of sums: per-sequence ratios explode where the gap is near zero), so 0 =
  nothing recovered, 1 = the clean value. Clean and corrupted metrics are themselves resumed
  from the stored (unpatched) states of the same layer, so storage rounding cancels.
- `interchange`: the same with the clean answer's probability (paper B): ``restoration =
  sum(p_patched - p_corrupted) / sum(p_clean - p_corrupted)`` per (layer, site).
- `classify_mechanism`: ``"induction"`` if patching the in-context value restores at least
  `threshold` (default 0.5) at some layer; else ``"direct retrieval"`` if the key or the query
  does; else ``"none"``; also ``"none"`` when the corruption barely moves the answer (mean
  probability gap below `min_gap`, default ``analysis.interventions.MIN_GAP`` = 0.05). Two
  sites restore any model trivially and are left out (`nontrivial_restoration`): the
  embedding of the corrupted position (patching the edited token back), and the last layer at
  the position where the answer is read out (patching it sets the logits to the clean ones).

Both grids run one per-cell function, `_twin_cell` (one run and layer: resume the clean and
corrupted states, then each site patched in turn), on the engine of
:mod:`analysis.interventions.engine`; they differ only in their sites (positions or named
positions) and metric (logit difference or probability).
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
from store import Store

TASK_SITES = ("key", "value", "divider", "query")


# ----------------------------------------------------------------------------- fast + reference
def _check_pair(clean: xr.Dataset, corrupted: xr.Dataset, patch: xr.DataArray) -> None:
    for name, ds in (("clean", clean), ("corrupted", corrupted)):
        if "hidden" not in ds or "tokens" not in ds:
            raise KeyError(f"{name} must hold 'hidden' and 'tokens'; it has {list(ds.data_vars)}")
    a, b = clean.sizes["position"], corrupted.sizes["position"]
    if a != b:
        raise ValueError(
            f"clean sequences have {a} positions and corrupted ones {b}: a patch needs twins of "
            "one length; load cfclean_<L> and cfcorrupt_<L> of the same run at the same L"
        )
    if clean.sizes["sequence"] != corrupted.sizes["sequence"]:
        raise ValueError(
            f"clean has {clean.sizes['sequence']} sequences and corrupted "
            f"{corrupted.sizes['sequence']}; patching pairs them one to one"
        )
    if set(patch.dims) != {"sequence", "position"} or patch.shape != (
        clean.sizes[patch.dims[0]], clean.sizes[patch.dims[1]]
    ):
        raise ValueError(
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
def _twin_cell(model: PortableModel, clean, corrupted, layer: str, sites: list, metric: str,
               batch_size: int):
    """Patch one layer of a run's twins, one site at a time: the per-cell function of both
    `patching` (sites: positions, metric "logit") and `interchange` (sites: names of stored
    ``pos_<site>`` positions, metric "probability").

    Returns
    -------
    delta : ndarray, (site, sequence)
        metric(patched) - metric(corrupted).
    gap, clean, corrupted : ndarray, (sequence,)
        metric(clean) - metric(corrupted), and both metrics (each resumed from the stored,
        unpatched states of the layer, so storage rounding cancels).
    defined : ndarray of bool, (sequence,)
        Whether the corrupted answer is defined.
    """
    pos, good, wrong = _answers(clean, corrupted)
    hc, hx = read_layer(clean, layer), read_layer(corrupted, layer)
    rows = np.arange(hx.shape[0])

    def measure(hidden: np.ndarray) -> np.ndarray:
        logits = resume_logits(model.module, layer, hidden, batch_size)
        if metric == "logit":
            return logit_metric(logits, pos, good, wrong)
        return answer_probability(logits, pos, good)

    m_clean, m_bad = measure(hc), measure(hx)
    delta = np.empty((len(sites), hx.shape[0]))
    for i, site in enumerate(sites):  # a position, or the name of a stored one per sequence
        at = np.asarray(clean[f"pos_{site}"].values, np.int64) if isinstance(site, str) else site
        saved = hx[rows, at].copy()
        hx[rows, at] = hc[rows, at]
        delta[i] = measure(hx) - m_bad
        hx[rows, at] = saved
    return delta, m_clean - m_bad, m_clean, m_bad, wrong >= 0


# ----------------------------------------------------------------------------- the graphs
def _twin_plan(store: Store, runs, length: int, layers) -> Plan:
    """The plan of a grid over the stored twins ``cfclean_<length>``/``cfcorrupt_<length>``."""
    runs = select_runs(store, runs, "patch")
    plan = open_plan(store, runs, [("cfclean", length), ("cfcorrupt", length)], layers,
                     layers_at=("cfclean", length))
    for rid in runs:
        clean, bad = plan.group(rid, length, "cfclean"), plan.group(rid, length, "cfcorrupt")
        if clean.sizes["position"] != bad.sizes["position"]:
            raise ValueError(
                f"run {rid!r}: cfclean_{length} has {clean.sizes['position']} positions and "
                f"cfcorrupt_{length} {bad.sizes['position']}; re-capture the pairs with "
                "`layerstate capture`"
            )
        plan.sequences[rid, length] = np.arange(clean.sizes["sequence"])
    return plan


def _twin_cells(plan: Plan, length: int, sites: list, metric: str, names: tuple,
                batch_size: int) -> list[Cell]:
    """One cell per (run, layer): `_twin_cell` over every site."""
    return [
        Cell({"run": rid, "layer": layer}, names, dask.delayed(_twin_cell, pure=False)(
            plan.model(rid), plan.group(rid, length, "cfclean"),
            plan.group(rid, length, "cfcorrupt"), layer, sites, metric, batch_size,
        ))
        for rid in plan.runs
        for layer in plan.run_layers[rid]
    ]


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


def patching(
    store: Store,
    runs: Sequence[str] | None,
    length: int,
    *,
    layers: Sequence[str] | None = None,
    positions: Sequence[int] | None = None,
    batch_size: int = 256,
) -> xr.Dataset:
    """Build (lazily) the layer x position patching grid of clean -> corrupted twins.

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
    batch_size : int

    Returns
    -------
    xarray.Dataset, dask-backed
        ``recovered (run, layer, position, sequence)``: metric(patched) - metric(corrupted);
        ``gap (run, layer, sequence)``: metric(clean) - metric(corrupted); ``recovery (run,
        layer, position)`` = sum recovered / sum gap; ``corrupt_defined (run, sequence)``;
        ``pos_corrupt``, ``pos_label`` (run, sequence). Coordinate ``site (run, layer)``
        names what was patched. NaN where a run has fewer sequences or lacks a layer.
    """
    plan = _twin_plan(store, runs, length, layers)
    positions = list(range(length) if positions is None else positions)
    bad_pos = [p for p in positions if not 0 <= p < length]
    if bad_pos:
        raise ValueError(f"positions {bad_pos} are outside 0..{length - 1}")
    plan.axes = {"position": positions}
    names = ("recovered", "gap", None, None, "corrupt_defined")
    ds = assemble(
        plan,
        {
            "recovered": Var(("run", "layer", "position", "sequence")),
            "gap": Var(("run", "layer", "sequence")),
            "corrupt_defined": Var(("run", "sequence"), bool, False),
        },
        _twin_cells(plan, length, positions, "logit", names, batch_size),
        data=_stored_positions(plan, length, ("corrupt", "label")),
        coords={"patched_site": (("run", "layer"), plan.site_names("one position at a time"))},
        attrs={
            "analysis": "patching",
            "length": int(length),
            "metric": "logit(clean answer) - logit(corrupted answer) at the label position; "
            "log p(clean answer) where the corrupted answer is undefined (-1)",
            "recovery": "sum(recovered) / sum(gap) over sequences",
        },
    )
    ds["recovery"] = ds.recovered.sum("sequence") / ds.gap.sum("sequence")
    return ds


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
            raise KeyError(
                f"run {rid!r} stores no position for site(s) {', '.join(missing)}; its sites: "
                f"{', '.join(stored(rid))}"
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
    batch_size: int = 256,
) -> xr.Dataset:
    """Build (lazily) interchange interventions: patch named positions, layer by layer.

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
    batch_size : int

    Returns
    -------
    xarray.Dataset, dask-backed
        ``restored (run, layer, site, sequence)``: p_patched - p_corrupted of the clean answer;
        ``gap``, ``p_clean``, ``p_corrupt`` (run, layer, sequence); ``restoration (run, layer,
        site)`` = sum restored / sum gap; ``trivial (run, site)``: the site is the edited
        position in every pair; ``pos_<site> (run, sequence)``. Coordinate ``patched_site (run,
        layer, site)`` names what was patched, e.g. "block output of layer L1 at position
        'value'".
    """
    plan = _twin_plan(store, runs, length, layers)
    sites = _sites(plan, length, sites)
    plan.axes = {"site": sites}
    per_layer = Var(("run", "layer", "sequence"))
    named = [[[site_description(plan.arch[r], y, f"position {c!r}") for c in sites]
              for y in plan.layers] for r in plan.runs]
    ds = assemble(
        plan,
        {"restored": Var(("run", "layer", "site", "sequence")), "gap": per_layer,
         "p_clean": per_layer, "p_corrupt": per_layer},
        _twin_cells(plan, length, sites, "probability",
                    ("restored", "gap", "p_clean", "p_corrupt", None), batch_size),
        data={**_stored_positions(plan, length, sorted({*sites, "corrupt", "label"})),
              "trivial": (("run", "site"), _trivial(plan, length, sites))},
        coords={"patched_site": (("run", "layer", "site"), named)},
        attrs={
            "analysis": "interchange",
            "length": int(length),
            "metric": "probability of the clean answer at the label position",
            "restoration": "sum(p_patched - p_corrupt) / sum(p_clean - p_corrupt) over sequences",
        },
    )
    ds["restoration"] = ds.restored.sum("sequence") / ds.gap.sum("sequence")
    return ds


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
        raise ValueError(
            f"classifying a mechanism needs sites key, value and query (associative recall, "
            f"treecall); this result has {', '.join(sorted(have))}"
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
