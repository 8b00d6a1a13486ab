"""What ablation and patching share: rebuilding a run's model, reading one layer, computing.

Models are rebuilt here from the run's stored config and weights (`capture.models` only:
`analysis` may import `store` and `capture.models`, not the training code). Every graph is
computed through :func:`compute`, which pins BLAS and torch to one thread per task and runs
dask's threaded scheduler (NOTES.md: 2-thread BLAS under load was 200x slower).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import xarray as xr

from capture.models import SequenceModel, model_for_run
from store import MissingError, Store

#: Architectures whose blocks carry a state along positions (patching caveat, SCIENCE.md).
RECURRENT_ARCHS = ("lstm", "gru", "mamba", "mamba2")


# ----------------------------------------------------------------------------- models
def check_weights(store: Store, run_id: str) -> None:
    """Raise `MissingError` naming `layerstate train` if a run has no complete weights."""
    if not store.has_weights(run_id):
        raise MissingError(
            f"run {run_id!r} has no trained weights in {store.location}; the model cannot be "
            "re-run from a stored layer. Run `layerstate train` first (or capture into a store "
            "that keeps weights)"
        )


def rebuild(store: Store, run_id: str, device: str = "cpu") -> SequenceModel:
    """The trained `SequenceModel` of a run, from its stored config and weights (eval mode).

    Parameters
    ----------
    store : Store
    run_id : str
    device : str

    Returns
    -------
    SequenceModel
        With ``layer_names`` matching the stored ``layer`` coordinate.
    """
    check_weights(store, run_id)
    attrs = store.run_attrs(run_id)
    missing = [k for k in ("model_config", "vocab_size", "n_classes") if k not in attrs]
    if missing:
        raise MissingError(
            f"run {run_id!r} lacks {', '.join(missing)} in its attributes, so its model cannot "
            "be rebuilt; train it with `layerstate train`, which records them"
        )
    model = model_for_run(attrs)
    weights = {k: torch.from_numpy(np.asarray(v)) for k, v in store.read_weights(run_id).items()}
    model.load_state_dict(weights)
    return model.to(device).eval()


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
    out = []
    for lo in range(0, states.shape[0], batch_size):
        out.append(model.forward_from(layer, states[lo : lo + batch_size]).float().numpy())
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
        e.g. "block output of layer L1 at position 'value'"; for lstm, gru, mamba and mamba2
        followed by what is *not* patched (the layer's own recurrent / cell state).
    """
    if layer == "embed":
        return f"embedding output at {where}"
    text = f"block output of layer {layer} at {where}"
    if arch in RECURRENT_ARCHS:
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
        raise KeyError(
            f"unknown layer(s) {', '.join(map(repr, unknown))} for run "
            f"{ds.attrs.get('run_id')!r}; stored layers: {', '.join(stored)}"
        )
    return list(layers)


def read_layer(ds: xr.Dataset, layer: str, sequences: np.ndarray | None = None) -> np.ndarray:
    """Hidden states of one layer as float32, (sequence, position, feature).

    float16 is widened before any arithmetic (NOTES.md: float16 reductions fail).
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


# ----------------------------------------------------------------------------- computing
@contextmanager
def one_thread_per_task():
    """BLAS and torch pinned to one thread; parallelism comes from dask tasks."""
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        torch.set_num_threads(before)


def compute(obj: Any, *, scheduler: str | None = "threads", num_workers: int | None = None) -> Any:
    """Compute a lazy result (xarray or dask) with one BLAS/torch thread per task.

    Parameters
    ----------
    obj : xarray.Dataset or xarray.DataArray or dask collection
    scheduler : str or None
        dask scheduler: "threads" (default), "sync" (debugging), or None to use whatever is
        configured (e.g. an active ``dask.distributed`` client).
    num_workers : int, optional
        Threads for the threaded scheduler (default: dask's, the number of cores).

    Returns
    -------
    The computed object.
    """
    import dask

    settings: dict[str, Any] = {}
    if scheduler is not None:
        settings["scheduler"] = scheduler
    if num_workers is not None:
        settings["num_workers"] = num_workers
    with one_thread_per_task(), dask.config.set(**settings):
        return obj.compute() if hasattr(obj, "compute") else dask.compute(obj)[0]
