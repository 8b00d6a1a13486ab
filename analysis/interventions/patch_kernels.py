"""One patched cell, computed: the patched run's logits (the resumed fast path and the hooked
reference), the two metrics (logit difference, clean answer's probability), and
`patch_effects`: every site of one run and layer patched both ways. The graphs that run it
over a store are in :mod:`analysis.interventions.patching`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import xarray as xr

from analysis.interventions._common import (
    layer_module,
    model_device,
    read_layer,
    resume_logits,
    target_of,
)
from capture.models import SequenceModel
from store import MissingError
from store.errors import InvalidArgumentError, InvalidArrayError


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
    device = model_device(model)  # the hook's tensors beside the layer's output
    where = torch.from_numpy(patch.transpose("sequence", "position").values.astype(bool)).to(device)
    source = torch.from_numpy(read_layer(clean, layer)).to(device)
    tokens = torch.from_numpy(np.asarray(corrupted.tokens.values, dtype=np.int64)).to(device)
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
            out.append(model(tokens[current["rows"]]).float().cpu().numpy())
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
