"""Pretrained checkpoints (Pythia/GPT-NeoX, Mamba, Mamba-2) as runs of a store.

A checkpoint directory written by ``save_pretrained`` is loaded with ``transformers``' own
loaders (nothing is downloaded), given a new per-position task head, optionally fine-tuned
on a task, and stored like any trained run: weights as arrays, the transformers config in
``model_config["hf_config"]`` so the model can be rebuilt, variant ``"pretrained"``. From
there ``capture``, probes and interventions work unchanged.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

from capture.device import Device, as_device
from capture.experiment import TrainConfig
from capture.models import count_parameters, load_pretrained
from capture.tasks import get_task
from capture.train import RunnableTask, accuracy_by_length, fit
from store import Store


def add_pretrained_run(
    store: Store,
    checkpoint: str | Path,
    run_id: str,
    *,
    task: str,
    task_params: dict[str, Any] | None = None,
    seed: int = 0,
    arch: str | None = None,
    fine_tune: TrainConfig | None = None,
    device: Device | str = "cpu",
) -> str:
    """Store a local checkpoint (with a fresh task head, fine-tuned if asked) as a run.

    Parameters
    ----------
    checkpoint
        A local directory from ``save_pretrained`` (config.json + safetensors).
    run_id, task, task_params, seed
        The run to create: its task (and parameters) and the seed of the new head and of
        fine-tuning data.
    arch
        Expected architecture ("transformer", "mamba", "mamba2"); checked if given.
    fine_tune
        Training settings; ``None`` stores the checkpoint with an untrained head (probes and
        patching of the frozen model still make sense).
    device
        Where it is fine-tuned and evaluated (a :class:`~capture.device.Device`, or its name,
        checked before the checkpoint is loaded).

    Raises
    ------
    FileNotFoundError
        The directory does not exist (nothing is downloaded).
    ValueError
        The task's vocabulary does not fit the checkpoint's embedding table.
    """
    where = as_device(device)
    cfg = get_task(task, **(task_params or {}))
    # Every registered TaskConfig subclass defines vocab_size, n_classes and target.
    spec = cast(RunnableTask, cfg)
    n_classes = spec.n_classes[spec.target]
    model = load_pretrained(checkpoint, n_classes=n_classes, arch=arch, seed=seed)
    hf_config = model.hf_config_dict
    if hf_config is None:
        raise TypeError(f"load_pretrained returned a non-transformers model for {checkpoint!s}")
    vocab = int(hf_config["vocab_size"])
    if spec.vocab_size > vocab:
        raise ValueError(
            f"task {task!r} uses {spec.vocab_size} token ids but the checkpoint's vocabulary has "
            f"{vocab}; pick a checkpoint with a larger vocabulary or a smaller task vocabulary"
        )
    model_config = {"pretrained": str(Path(checkpoint).resolve()), "hf_config": model.hf_config_dict}
    rid = store.add_run(run_id, task=task, arch=model.arch, variant="pretrained", seed=seed,
                        model_config=model_config, task_config=cfg.model_dump())
    model.to(where.torch_device)  # evaluated on the device even when it is not fine-tuned
    with store.deferred_consolidation(), store.lock(rid):
        metrics: dict[str, Any] = {}
        if fine_tune is not None:
            t0 = time.perf_counter()
            curve, steps = fit(model, cfg, fine_tune, seed)
            metrics = {"steps": steps, "train_seconds": time.perf_counter() - t0, "curve": curve}
        acc = accuracy_by_length(model, cfg, fine_tune or TrainConfig(), seed)
        metrics["accuracy"] = {str(k): v for k, v in acc.items()}
        store.write_weights(rid, model.state_dict(), overwrite=True)
        store.update_run_attrs(
            rid, status="trained", n_classes=n_classes, vocab_size=spec.vocab_size,
            target=spec.target, n_parameters=count_parameters(model),
            implementation=model.implementation, device=where.name, metrics=metrics,
            train_config=None if fine_tune is None else fine_tune.model_dump(),
        )
        store.consolidate()
    return rid
