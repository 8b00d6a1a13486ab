"""GPT-NeoX (Pythia class), Mamba and Mamba-2 from `transformers`, behind `SequenceModel`.

The `transformers` base model (no language-model head) is kept whole as ``backbone``; an
untied ``head`` maps the final norm's output to the task classes. The forward pass calls the
backbone's embedding, blocks and final norm directly (`SequenceModel`), never the backbone's
own ``forward``: its ``output_hidden_states`` differs by model (docs/measured.md, "Models"),
and resuming from a layer needs the blocks one by one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    GPTNeoXConfig,
    GPTNeoXModel,
    Mamba2Config,
    Mamba2Model,
    MambaConfig,
    MambaModel,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.masking_utils import create_causal_mask

from capture.models import mamba as mamba_paths
from capture.models.base import Extractor, SequenceModel, conv_extractor, output_extractor
from capture.models.config import ModelConfig

# transformers model_type -> our arch name
HF_ARCHS = {"gpt_neox": "transformer", "mamba": "mamba", "mamba2": "mamba2"}


class _HFSequenceModel(SequenceModel):
    """A `transformers` base model plus an untied per-position task head."""

    backbone: Any  # a transformers PreTrainedModel; typed loosely for its dynamic submodules

    def __init__(self, backbone: PreTrainedModel, n_classes: int, config: ModelConfig | None):
        hf = backbone.config
        super().__init__(HF_ARCHS[hf.model_type], hf.hidden_size, hf.num_hidden_layers, config)
        self.backbone = backbone
        self.head = nn.Linear(hf.hidden_size, n_classes)

    @property
    def blocks(self):
        return self.backbone.layers

    @property
    def hf_config_dict(self) -> dict:
        """The backbone's `transformers` config as a JSON-able dict (`build_from_hf_config`)."""
        return json.loads(self.backbone.config.to_json_string(use_diff=False))


class TransformerModel(_HFSequenceModel):
    """GPT-NeoX: pre-norm blocks with rotary attention (Pythia uses parallel residuals)."""

    @property
    def embedding(self) -> nn.Module:
        return self.backbone.embed_in

    @property
    def final_norm(self) -> nn.Module:
        return self.backbone.final_layer_norm

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.backbone.emb_dropout(self.backbone.embed_in(tokens))

    def block_context(self, hidden: torch.Tensor) -> dict[str, Any]:
        # What GPTNeoXModel.forward builds once for all blocks: positions, rotary tables and
        # the causal mask (None when the attention kernel applies causality itself).
        positions = torch.arange(hidden.shape[1], device=hidden.device)[None]
        mask = create_causal_mask(
            config=self.backbone.config,
            inputs_embeds=hidden,
            attention_mask=None,
            cache=None,
            position_ids=positions,
        )
        return {
            "attention_mask": mask,
            "position_ids": positions,
            "position_embeddings": _rotary_tables(self.backbone.rotary_emb, hidden, positions),
        }

    def run_block(self, index, hidden, context):
        return self.backbone.layers[index](hidden, use_cache=False, **context)

    def block_sites(self) -> dict[str, tuple[str, Extractor]]:
        names = (
            "input_layernorm",
            "attention",
            "attention.query_key_value",
            "attention.dense",
            "post_attention_layernorm",
            "mlp",
            "mlp.dense_h_to_4h",
            "mlp.act",
            "mlp.dense_4h_to_h",
        )
        return {name: (name, output_extractor) for name in names}


@torch.compiler.disable
def _rotary_tables(rotary: nn.Module, hidden: torch.Tensor, positions: torch.Tensor):
    """The rotary (cos, sin) tables, computed outside ``torch.compile``'s graph: traced into it,
    inductor recomputed them inside the backward's fused kernels, a sine and a cosine per element
    of every query and key gradient instead of one per (position, frequency), and the compiled
    training step took 1.8x the eager one (docs/measured.md, "Training speed"). As inputs of the
    graph they are computed once per forward; eager calls are unchanged."""
    return rotary(hidden, position_ids=positions)


class MambaFamilyModel(_HFSequenceModel):
    """Mamba or Mamba-2: pre-norm residual blocks around a selective-SSM mixer."""

    def __init__(self, backbone, n_classes, config):
        super().__init__(backbone, n_classes, config)
        mamba_paths.install_mixer_paths(self._mixers())

    def _mixers(self) -> list[nn.Module]:
        return [block.mixer for block in self.backbone.layers]

    @property
    def embedding(self) -> nn.Module:
        return self.backbone.embeddings

    @property
    def final_norm(self) -> nn.Module:
        return self.backbone.norm_f

    def run_block(self, index, hidden, context):
        return self.backbone.layers[index](hidden)

    @property
    def implementation(self) -> str:
        """"torch-fast-scan" / "torch-ssd" on the CPU, "cuda-kernels" with the
        ``gpu`` extra on a GPU, "torch-reference" on request (`capture.models.mamba`)."""
        return mamba_paths.mixer_path(self._mixers()[0], self.head.weight.device)

    def set_reference_path(self, enabled: bool = True) -> None:
        """Run `transformers`' own mixer forward (True) instead of the fast path (False)."""
        mamba_paths.set_reference_path(self._mixers(), enabled)

    def make_conv_identity(self) -> None:
        """Variant ``no_conv``: every mixer's Conv1D becomes a frozen identity."""
        for mixer in self._mixers():
            mamba_paths.make_conv_identity(mixer)

    def block_sites(self) -> dict[str, tuple[str, Extractor]]:
        inner: tuple[str, ...] = ("mixer.in_proj", "mixer.x_proj", "mixer.dt_proj")
        if self.arch == "mamba2":
            inner = ("mixer.in_proj", "mixer.norm")
        sites: dict[str, tuple[str, Extractor]] = {
            name: (name, output_extractor) for name in ("norm", "mixer", *inner)
        }
        sites["mixer.conv1d"] = ("mixer.conv1d", conv_extractor)
        sites["mixer.act"] = ("mixer.act", output_extractor)
        sites["mixer.out_proj"] = ("mixer.out_proj", output_extractor)
        return sites


def hf_config(cfg: ModelConfig, vocab_size: int) -> PretrainedConfig:
    """The `transformers` config for one of our HF-backed `ModelConfig`s."""
    sizes: dict[str, Any] = cfg.sizes()
    common: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "tie_word_embeddings": False,  # MambaConfig ties by default; the head is ours anyway
        # Task vocabularies are tiny and have no BOS/EOS in the LM sense: the defaults
        # (e.g. eos 2 for a 2-token parity vocabulary) only trigger a warning per build.
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }
    if cfg.arch == "transformer":
        return GPTNeoXConfig(
            **common,
            num_attention_heads=sizes["n_heads"],
            intermediate_size=sizes["intermediate_size"],
            hidden_dropout=0.0,
            attention_dropout=0.0,
        )
    if cfg.arch == "mamba":
        return MambaConfig(**common, **sizes)
    return Mamba2Config(
        **common, **sizes, num_heads=sizes["expand"] * cfg.d_model // sizes["head_dim"]
    )


_BACKBONES = {"transformer": GPTNeoXModel, "mamba": MambaModel, "mamba2": Mamba2Model}


def wrap_backbone(
    backbone: PreTrainedModel, n_classes: int, config: ModelConfig | None = None
) -> _HFSequenceModel:
    """A `SequenceModel` around a `transformers` base model, with a new task head."""
    model_type = backbone.config.model_type
    if model_type not in HF_ARCHS:
        raise ValueError(
            f"unsupported transformers model_type {model_type!r}; supported: "
            f"{', '.join(HF_ARCHS)}"
        )
    cls = TransformerModel if model_type == "gpt_neox" else MambaFamilyModel
    return cls(backbone.float(), n_classes, config)


def build_hf(cfg: ModelConfig, vocab_size: int, n_classes: int) -> _HFSequenceModel:
    """Build transformer/mamba/mamba2 from `cfg` (call under a seeded RNG)."""
    model = wrap_backbone(_BACKBONES[cfg.arch](hf_config(cfg, vocab_size)), n_classes, cfg)
    if cfg.variant == "no_conv":
        assert isinstance(model, MambaFamilyModel)  # ModelConfig allows no_conv only for SSMs
        model.make_conv_identity()
    return model


def backbone_from_hf_config(hf_config_dict: dict) -> PreTrainedModel:
    """A freshly initialised `transformers` base model from a config dict (call seeded)."""
    settings = _decode_special_floats(dict(hf_config_dict))
    model_type = settings.pop("model_type", None)
    if model_type not in HF_ARCHS:
        raise ValueError(
            f"hf_config_dict has model_type {model_type!r}; supported: {', '.join(HF_ARCHS)}"
        )
    return AutoModel.from_config(AutoConfig.for_model(model_type, **settings))


def _decode_special_floats(value: Any) -> Any:
    """Undo `transformers`' JSON encoding of inf/nan as ``{"__float__": "Infinity"}``."""
    if isinstance(value, dict):
        if set(value) == {"__float__"}:
            return float(value["__float__"])  # float() reads "Infinity", "-Infinity", "NaN"
        return {key: _decode_special_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode_special_floats(item) for item in value]
    return value


def load_backbone(path: str | Path, arch: str | None) -> PreTrainedModel:
    """Load a GPT-NeoX / Mamba / Mamba-2 base model from a local checkpoint directory."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no transformers checkpoint at {path} (no config.json); save one with "
            f"model.save_pretrained(DIR) or fetch it once with "
            f"`huggingface-cli download EleutherAI/pythia-160m --local-dir DIR`"
        )
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    if config.model_type not in HF_ARCHS:
        raise ValueError(
            f"{path} holds a {config.model_type!r} model; supported: {', '.join(HF_ARCHS)}"
        )
    found = HF_ARCHS[config.model_type]
    if arch is not None and arch != found:
        raise ValueError(f"{path} holds a {found} ({config.model_type}) model, not {arch!r}")
    return AutoModel.from_pretrained(path, local_files_only=True, dtype=torch.float32)
