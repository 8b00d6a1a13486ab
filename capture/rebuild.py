"""A stored run's trained model, rebuilt from its config and weights: the one way capture and
the interventions (``analysis.interventions``) get it back, with one wording for what is missing.
"""

from __future__ import annotations

import numpy as np
import torch

from capture.device import Device, as_device
from capture.models import SequenceModel, model_for_run
from store import MissingError, Store

__all__ = ["check_weights", "model_from", "rebuild_model", "stored_model"]

#: Run attributes a model is rebuilt from (``layerstate train`` records them).
REBUILT_FROM = ("model_config", "vocab_size", "n_classes")


def check_weights(store: Store, run_id: str) -> None:
    """Raise `MissingError` naming `layerstate train` if a run has no complete weights."""
    if not store.has_weights(run_id):
        raise MissingError(
            f"run {run_id!r} has no trained weights in {store.location}; the model cannot be "
            "re-run from a stored layer. Train it with `layerstate train`, or, for a store another "
            "tool wrote, add the run's weights as arrays under runs/<id>/weights (docs/store-format.md, "
            "S12-S15); probe, stats and report need no weights"
        )


def stored_model(store: Store, run_id: str) -> tuple[dict, dict[str, np.ndarray]]:
    """A run's attributes and weights (numpy), checked to rebuild its model (:func:`model_from`).

    Raises
    ------
    MissingError
        No complete weights, or attributes without the model's config.
    """
    check_weights(store, run_id)
    attrs = store.run_attrs(run_id)
    missing = [k for k in REBUILT_FROM if k not in attrs]
    if missing:
        raise MissingError(
            f"run {run_id!r} lacks {', '.join(missing)} in its attributes, so its model cannot "
            "be rebuilt; train it with `layerstate train`, which records them"
        )
    return attrs, {k: np.asarray(v) for k, v in store.read_weights(run_id).items()}


def model_from(attrs: dict, weights: dict[str, np.ndarray], device: Device) -> SequenceModel:
    """The model of a run with attributes ``attrs`` and ``weights``, on ``device``, in eval mode."""
    model = model_for_run(attrs)
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in weights.items()})
    return model.to(device.torch_device).eval()


def rebuild_model(store: Store, run_id: str, device: Device | str = "cpu") -> SequenceModel:
    """The trained `SequenceModel` of a run, from its stored config and weights, on ``device``
    (eval mode; ``layer_names`` match the stored ``layer`` coordinate).

    Raises
    ------
    MissingError
        See :func:`stored_model`.
    DeviceError
        ``device`` is a name this machine has no device for (:func:`capture.device.parse_device`).
    """
    where = as_device(device)  # before reading the weights
    return model_from(*stored_model(store, run_id), where)
