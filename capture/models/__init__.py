"""The ten architectures (five core, five from the retrieval zoo) behind one interface.

Example (``tokens``: a (batch, position) LongTensor)::

    from capture.models import ModelConfig, build_model
    model = build_model(ModelConfig(arch="mamba"), vocab_size=16, n_classes=2, seed=0)
    logits, hidden = model.forward_with_hidden(tokens)  # (b, p, 2), (b, p, 5, 128)
    model.forward_from("L1", hidden[:, :, 2])           # resume above layer L1
    _, acts = model.forward_with_sites(tokens, ["L*.mixer.conv1d"])

Every model is a `SequenceModel`: ``forward``, ``forward_with_hidden``, ``forward_from``,
``sites``/``forward_with_sites``, ``layer_names``, ``hidden_size``, ``implementation``.
Models are returned in eval mode; call ``.train()`` to train them. ``state_dict()`` holds
every tensor needed: `build_model` with the same config, then ``load_state_dict``,
reproduces a model; pretrained ones are rebuilt with `build_from_hf_config` from
``model.hf_config_dict``.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import torch

# the modules that register the built-in architectures (capture.models.registry)
from capture.models import baseconv, based, deltanet, h3, hf_archs, hyena, registry, rnn, zoo  # noqa: F401
from capture.models.base import SequenceModel, count_parameters
from capture.models.config import VARIANTS, ModelConfig
from capture.models.registry import BUILTIN_ARCHS, CORE_ARCHS, ZOO_ARCHS

__all__ = [
    "BUILTIN_ARCHS",
    "CORE_ARCHS",
    "VARIANTS",
    "ZOO_ARCHS",
    "ModelConfig",
    "SequenceModel",
    "build_from_hf_config",
    "build_model",
    "count_parameters",
    "load_pretrained",
    "model_for_run",
    "make_conv_identity",
    "parameter_table",
]


@contextmanager
def _seeded(seed: int):
    """Seed torch's CPU generator inside, restore the caller's state after.

    `transformers` and ``nn`` initialise weights from the global generator; forking it is
    the only way to make construction reproducible without leaving the global state changed.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def build_model(cfg: ModelConfig, vocab_size: int, n_classes: int, seed: int) -> SequenceModel:
    """A freshly initialised model; the same arguments give the same weights.

    Parameters
    ----------
    cfg : ModelConfig
    vocab_size : int
        Number of token ids.
    n_classes : int
        Width of the per-position task head.
    seed : int
        Seeds weight initialisation; the caller's global RNG state is left unchanged.

    Returns
    -------
    SequenceModel, in eval mode.
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a ModelConfig, not {type(cfg).__name__}")
    model: SequenceModel
    with _seeded(seed):
        model = registry.architecture(cfg.arch).build(cfg, vocab_size, n_classes)
    return model.eval()


def load_pretrained(
    path: str | Path, n_classes: int, arch: str | None = None, seed: int = 0
) -> SequenceModel:
    """A GPT-NeoX / Mamba / Mamba-2 checkpoint with a new task head.

    Parameters
    ----------
    path : str or Path
        A local directory written by ``save_pretrained`` (config.json + safetensors);
        nothing is downloaded.
    n_classes : int
        Width of the new per-position task head.
    arch : str, optional
        If given, the checkpoint must be this architecture ("transformer", "mamba",
        "mamba2").
    seed : int
        Seeds the head's initialisation.

    Returns
    -------
    SequenceModel, in eval mode; ``config`` is None, ``hf_config_dict`` rebuilds it.
    """
    from capture.models import hf  # noqa: PLC0415 -- transformers loads only for its archs

    backbone = hf.load_backbone(path, arch)
    with _seeded(seed):
        model = hf.wrap_backbone(backbone, n_classes)
    return model.eval()


def build_from_hf_config(hf_config_dict: dict, n_classes: int, seed: int = 0) -> SequenceModel:
    """A model of the same shape as one with ``model.hf_config_dict == hf_config_dict``.

    Weights are freshly initialised: load the stored ``state_dict`` into it.
    """
    from capture.models import hf  # noqa: PLC0415 -- transformers loads only for its archs

    with _seeded(seed):
        model = hf.wrap_backbone(hf.backbone_from_hf_config(hf_config_dict), n_classes)
    return model.eval()


def model_for_run(attrs: dict) -> SequenceModel:
    """A freshly initialised model of the shape a stored run was trained with.

    ``attrs`` are a run's attributes in the store: ``model_config`` (a :class:`ModelConfig`
    dump, or ``{"pretrained": path, "hf_config": {...}}`` for a checkpoint), ``vocab_size``,
    ``n_classes`` and ``seed``. Load the stored weights into the result.
    """
    mc = attrs["model_config"]
    if "hf_config" in mc:
        return build_from_hf_config(mc["hf_config"], int(attrs["n_classes"]), int(attrs["seed"]))
    return build_model(ModelConfig(**mc), vocab_size=int(attrs["vocab_size"]),
                       n_classes=int(attrs["n_classes"]), seed=int(attrs["seed"]))


def make_conv_identity(model: SequenceModel) -> None:
    """Apply variant ``no_conv`` to an existing Mamba / Mamba-2 (e.g. pretrained) or zoo model.

    Every mixer's Conv1D becomes a frozen identity (`capture.models.mamba.make_conv_identity`).
    """
    hf = sys.modules.get("capture.models.hf")  # not loaded: the model is no transformers model
    if not (isinstance(model, zoo.ZooModel) or (hf is not None and isinstance(model, hf.MambaFamilyModel))):
        raise TypeError(
            f"make_conv_identity applies to mamba and mamba2 models, not {model.arch!r}, and to "
            f"the zoo archs with a short convolution ({', '.join(ZOO_ARCHS)})"
        )
    model.make_conv_identity()


def _sizes(cfg: ModelConfig) -> str:
    # a recurrent model's hidden_size is its width (d_model only sets its default)
    sizes = [s for s in cfg.sizes() if s != "chunk_size"]  # chunk_size: speed only
    fields = sizes if "hidden_size" in sizes else ["d_model", *sizes]
    return ", ".join(f"{name} {getattr(cfg, name)}" for name in fields)


def parameter_table(
    vocab_size: int = 16,
    n_classes: int = 16,
    archs: tuple[str, ...] = CORE_ARCHS,
    d_model: int = 128,
    n_layers: int = 4,
) -> list[dict]:
    """Parameter counts of the default configs, measured by building.

    By default the five core archs at 4 layers, d_model 128; the zoo is matched at Arora et
    al.'s widths, e.g. ``parameter_table(archs=("transformer", *ZOO_ARCHS), d_model=64,
    n_layers=2)``.

    Returns
    -------
    list of dict
        One row per arch: ``arch``, ``parameters`` (all, head included), ``sizes``.
    """
    rows = []
    for arch in archs:
        cfg = ModelConfig(arch=arch, d_model=d_model, n_layers=n_layers)
        model = build_model(cfg, vocab_size, n_classes, seed=0)
        rows.append({"arch": arch, "parameters": count_parameters(model), "sizes": _sizes(cfg)})
    return rows
