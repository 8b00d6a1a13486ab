"""Models and stored states: a rebuilt run's model, reading one layer, resuming from it.

The one place an intervention touches a model: the run's model is rebuilt by capture's one
rebuild (:mod:`capture.rebuild`: :func:`rebuild`, and :func:`portable_model` for an analysis
graph), and :func:`resume_logits` runs the layers above a stored layer
(`SequenceModel.forward_from`) on the model's own device. Graphs are computed by
:func:`analysis.compute.compute`, which pins BLAS and torch to one thread per task
(docs/measured.md, "Threads").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import xarray as xr

from capture.device import Device, as_device, model_device
from capture.models import SequenceModel
from capture.models import registry as architectures
from capture.rebuild import model_from, rebuild_model, stored_model
from store import MissingError, Store

#: A run's trained model (:func:`capture.rebuild.rebuild_model`), the name the interventions use.
rebuild = rebuild_model


# ----------------------------------------------------------------------------- models
def portable_model(store: Store, run_id: str, device: Device | str = "cpu") -> PortableModel:
    """:func:`rebuild`, as a `PortableModel`: what an analysis graph's model task returns."""
    where = as_device(device)
    return PortableModel(*stored_model(store, run_id), where)


class PortableModel:
    """A run's rebuilt model (``module``, eval mode) that crosses processes as plain data.

    dask.distributed moves a task's result to another worker by pickling it; torch's RNN
    modules hold weakrefs that pickle refuses (and a pickled module is bound to its torch
    version). This one travels as the run's attributes, its weights as numpy arrays and the
    device, and is rebuilt on arrival: once per worker, since a worker keeps what it received.
    In one process (local threads) every cell shares the same ``module``.
    """

    def __init__(self, attrs: dict, weights: dict[str, np.ndarray], device: Device) -> None:
        self.attrs, self.device = attrs, device
        self.module: SequenceModel = model_from(attrs, weights, device)

    def __reduce__(self) -> tuple:
        weights = {k: v.detach().cpu().numpy() for k, v in self.module.state_dict().items()}
        return PortableModel, (self.attrs, weights, self.device)


def layer_module(model: SequenceModel, layer_index: int) -> torch.nn.Module:
    """The module whose output is layer ``layer_names[layer_index]`` (0 = the embedding)."""
    return model.embedding if layer_index == 0 else model.blocks[layer_index - 1]


@torch.no_grad()
def resume_logits(
    model: SequenceModel, layer: str, hidden: np.ndarray | torch.Tensor, batch_size: int = 256
) -> np.ndarray:
    """Logits of the forward pass resumed from `layer` with states `hidden`.

    Parameters
    ----------
    hidden : ndarray or Tensor, (sequence, position, feature)

    Returns
    -------
    ndarray, float32, (sequence, position, class)
    """
    states = torch.as_tensor(hidden).float()
    device = model_device(model)
    out = []
    for lo in range(0, states.shape[0], batch_size):
        part = states[lo : lo + batch_size].to(device)
        out.append(model.forward_from(layer, part).float().cpu().numpy())
    return np.concatenate(out)


def site_description(arch: str, layer: str, where: str) -> str:
    """Plain words for an intervention site, with the recurrent-state caveat.

    Parameters
    ----------
    arch : str
        The run's architecture.
    layer : str
        ``"embed"`` or a block ``"L{i}"``.
    where : str
        e.g. ``"position 'value'"``, ``"position 7"``, ``"every position"``.

    Returns
    -------
    str
        e.g. "block output of layer L1 at position 'value'"; for the architectures of
        architectures that keep a state along the positions (their registry entry's
        ``keeps_state``) followed by what is *not* patched (the layer's own recurrent / cell
        state).
    """
    if layer == "embed":
        return f"embedding output at {where}"
    text = f"block output of layer {layer} at {where}"
    if architectures.known(arch) and architectures.keeps_state(arch):
        text += (
            f"; changes what the layers above {layer} see there, not {layer}'s own recurrent "
            "state at later positions (that stays the unedited run's)"
        )
        if arch == "lstm":
            text += f"; {layer}'s cell state is not edited either"
    return text


# ----------------------------------------------------------------------------- data
def open_group(store: Store, run_id: str, length: int, kind: str = "len") -> xr.Dataset:
    """One stored (run, length) group, lazily via xarray's own indexing (no dask)."""
    return store.open_length(run_id, length, kind=kind, lazy="xarray")


def target_of(ds: xr.Dataset) -> str:
    """The label the run was trained on."""
    target = ds.attrs.get("target") or ds.attrs.get("run", {}).get("target")
    if target is None or target not in ds:
        raise MissingError(
            f"the stored group of run {ds.attrs.get('run_id')!r} names no target label "
            f"(labels: {ds.attrs.get('labels')}); re-capture it with `layerstate capture`"
        )
    return str(target)


def layer_list(ds: xr.Dataset, layers: Sequence[str] | None) -> list[str]:
    """Requested layers, checked against the stored ``layer`` coordinate (default all)."""
    stored = [str(v) for v in ds.layer.values]
    if layers is None:
        return stored
    unknown = [name for name in layers if name not in stored]
    if unknown:
        raise MissingError(
            f"unknown layer(s) {', '.join(map(repr, unknown))} for run "
            f"{ds.attrs.get('run_id')!r}; stored layers: {', '.join(stored)} (pick among them)"
        )
    return list(layers)


def read_layer(ds: xr.Dataset, layer: str, sequences: np.ndarray | None = None) -> np.ndarray:
    """Hidden states of one layer as float32, (sequence, position, feature).

    float16 is widened before any arithmetic (float16 reductions fail: docs/measured.md).
    """
    da = ds.hidden.sel(layer=layer)
    if sequences is not None:
        da = da.isel(sequence=sequences)
    # torch widens float16 ~5x faster than numpy's astype (same values: the cast is exact)
    return torch.from_numpy(np.ascontiguousarray(da.values)).float().numpy()


def check_lengths(store: Store, run_id: str, lengths: Sequence[int], kind: str = "len") -> None:
    """Raise `MissingError` listing what is stored if a length is missing."""
    have = store.lengths(run_id, kind)
    missing = [L for L in lengths if L not in have]
    if missing:
        raise MissingError(
            f"run {run_id!r} has no {kind} group for length(s) {', '.join(map(str, missing))}; "
            f"stored: {', '.join(map(str, have)) or '(none)'}; capture them with "
            "`layerstate capture`"
        )
