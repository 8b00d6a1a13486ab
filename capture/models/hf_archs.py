"""The architectures built from `transformers` configs: GPT-NeoX, Mamba and Mamba-2.

Registered here, apart from :mod:`capture.models.hf`, because that module imports
`transformers` (seconds): listing the architectures and checking a config must not load it;
building one does.

Default sizes (:mod:`capture.models.config` explains the parameter matching): the
Transformer's MLP is 4.25 x d_model with 4 heads; Mamba-1 uses expand 2, state 16; Mamba-2
expand 4, head_dim 32, state 16, one group and chunk_size 16 for its torch chunked scan.
"""

from __future__ import annotations

from typing import Any

from capture.models.config import ModelConfig
from capture.models.registry import Architecture, register_architecture


def _build(cfg: ModelConfig, vocab_size: int, n_classes: int) -> Any:
    from capture.models import hf  # noqa: PLC0415 -- transformers loads only for its archs

    return hf.build_hf(cfg, vocab_size, n_classes)


def _transformer_check(cfg: ModelConfig) -> None:
    heads = cfg.sizes()["n_heads"]
    if cfg.d_model % heads:
        raise ValueError(f"n_heads={heads} must divide d_model={cfg.d_model}; pick a divisor")


def _mamba2_check(cfg: ModelConfig) -> None:
    sizes = cfg.sizes()
    inner, head_dim = sizes["expand"] * cfg.d_model, sizes["head_dim"]
    if inner % head_dim:
        raise ValueError(f"head_dim={head_dim} must divide expand x d_model = {inner}")
    if (inner // head_dim) % sizes["n_groups"]:
        raise ValueError(f"n_groups={sizes['n_groups']} must divide the head count {inner // head_dim}")


register_architecture(Architecture(
    "transformer", "GPT-NeoX (rotary attention), transformers' GPTNeoXModel", _build,
    sizes=("intermediate_size", "n_heads"),
    defaults=lambda d, given: {"intermediate_size": round(4.25 * d), "n_heads": 4},
    keeps_state=False, check=_transformer_check))
register_architecture(Architecture(
    "mamba", "Mamba-1, transformers' MambaModel", _build,
    sizes=("expand", "state_size", "conv_kernel"),
    defaults=lambda d, given: {"expand": 2, "state_size": 16, "conv_kernel": 4}, conv=True))
register_architecture(Architecture(
    "mamba2", "Mamba-2 (SSD), transformers' Mamba2Model", _build,
    sizes=("expand", "state_size", "head_dim", "n_groups", "chunk_size", "conv_kernel"),
    defaults=lambda d, given: {"expand": 4, "state_size": 16, "head_dim": 32, "n_groups": 1,
                               "chunk_size": 16, "conv_kernel": 4},
    conv=True, check=_mamba2_check))
