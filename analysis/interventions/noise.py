"""Corrupted twins made by noise instead of a stored token replacement: refused unless asked.

A noise corruption adds Gaussian noise to the embedding of each sequence's edited position
(Meng et al. 2022) and recomputes every layer above (`noised_twin`). It moves the corrupted
run off the distribution the model was trained on, so `patching` and `interchange` refuse it
unless ``allow_noise=True`` (`NOISE_REFUSED`); the stored counterfactual twins are token
replacements.
"""

from __future__ import annotations

import numpy as np
import torch
import xarray as xr

from analysis.interventions._common import (
    PortableModel,
    layer_module,
    model_device,
    read_layer,
    target_of,
)
from capture.models import SequenceModel
from store.errors import InvalidArgumentError

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


def check_corruption(corruption: str, allow_noise: bool) -> None:
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
    device = model_device(model)  # the noised embedding goes where the model is
    captured: dict[int, list[torch.Tensor]] = {i: [] for i in range(1, len(names))}
    handles = []
    for i in captured:
        def keep(module, inputs, output, i=i):
            value = output[0] if isinstance(output, tuple) else output
            captured[i].append(value.detach().float())
        handles.append(layer_module(model, i).register_forward_hook(keep))
    try:
        for lo in range(0, n, batch_size):
            model.forward_from(names[0], torch.from_numpy(embed[lo: lo + batch_size]).to(device))
    finally:
        for h in handles:
            h.remove()
    states = [embed] + [torch.cat(captured[i]).cpu().numpy() for i in captured]
    return xr.Dataset(
        {
            "hidden": (("sequence", "position", "layer", "feature"), np.stack(states, axis=2)),
            "tokens": clean.tokens.variable,
            target: (("sequence", "position"), np.full(clean[target].shape, -1, np.int64)),
        },
        coords={"layer": names},
        attrs={**clean.attrs, "corruption": CORRUPTIONS["noise"]},
    )


def noised(model: PortableModel, clean: xr.Dataset, scale: float, seed: int, batch_size: int):
    return noised_twin(model.module, clean, scale=scale, seed=seed, batch_size=batch_size)


def noise_options(corruption: str, allow_noise: bool, noise_scale: float, seed: int) -> dict | None:
    check_corruption(corruption, allow_noise)
    return {"scale": float(noise_scale), "seed": int(seed)} if corruption == "noise" else None
