"""The retrieval zoo's shared frame: Based, BaseConv, H3, Hyena and DeltaNet models.

Arora et al. 2025 (``docs/science.md``, Paper B) compare these with a Transformer and Mamba
on associative recall. Each architecture here is one *mixer* (its own file) inside the same
block, following Zoology's ``TransformerBlock`` (HazyResearch/zoology, ``zoology/model.py``)::

    h   = x + mixer(LayerNorm(x))          # pre-norm residual
    out = h + mlp(LayerNorm(h))            # MLP: fc1 -> GELU -> fc2

with a token embedding (no position embedding, as Zoology's ``max_position_embeddings=0``), a
final LayerNorm and our untied per-position task head. Weights are initialised as Zoology's
``_init_weights``: every Linear and the embedding N(0, 0.02) with zero biases, the residual
output projections (``out_proj``, ``fc2``) N(0, 0.02 / sqrt(2 n_layers)); convolutions and
the SSM / filter parameters keep their own initialisation. That includes the Linears of the
implicit-filter MLPs, so Hyena's and BaseConv's long filters start near zero, as in Zoology.
The head keeps ``nn.Linear``'s default, as for every other architecture here.

**Ours**: the Zoology MLP hidden width (``intermediate_size``) is set per architecture so
that every model has about the parameters of a GPT-NeoX model of the same width and depth
(`capture.models.config`); Zoology uses one multiplier for all.

Every mixer has a fast form and a plain sequential reference (`set_reference_path`), held
equal by the tests (outputs and gradients); `implementation` says which one runs. Short
causal convolutions are ``nn.Conv1d`` modules padded by k - 1 on both sides (the first L
outputs are the causal ones, as for Mamba), so ``no_conv`` and the ``conv1d`` sites work
the same way for every architecture.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from capture.models.base import Extractor, LayerStack, output_extractor
from capture.models.config import ModelConfig, matched_mlp_width
from capture.models.registry import Architecture, register_architecture

INIT_STD = 0.02  # Zoology's initializer_range


def causal_conv(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """A depthwise causal convolution through the module (so hooks see it).

    x: (batch, position, channel) -> (batch, position, channel), before any activation.
    """
    return conv(x.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2)


def short_conv(channels: int, kernel: int, bias: bool) -> nn.Conv1d:
    """A depthwise causal ``nn.Conv1d`` of width `kernel` (use with `causal_conv`)."""
    return nn.Conv1d(channels, channels, kernel, groups=channels, padding=kernel - 1, bias=bias)


@torch.no_grad()
def make_conv_identity(conv: nn.Module) -> None:
    """Variant ``no_conv`` for one short convolution: a frozen identity.

    `conv` is an ``nn.Conv1d`` or any module with its ``weight`` layout (channel, 1, kernel),
    last tap on the current step, and a ``bias`` (or None), such as H3's ``ShiftSSM``.

    The weight becomes one-hot on the current step (the last tap of the causal kernel), the
    bias zero, and neither trains; whatever the mixer does around the convolution (gates,
    activations) stays. Same rule as `capture.models.mamba.make_conv_identity`.
    """
    weight, bias = conv.weight, conv.bias
    assert isinstance(weight, torch.Tensor)
    weight.zero_()
    weight[:, 0, -1] = 1.0  # (channel, 1, kernel): tap k-1 multiplies x[t]
    if isinstance(bias, torch.Tensor):
        bias.zero_()
    for parameter in conv.parameters():
        parameter.requires_grad_(False)


def state_extractor(method: str) -> Extractor:
    """A site read by recomputing a mixer's per-position recurrent state from its input.

    ``getattr(module, method)(x)`` must return (batch, position, feature). Nothing is
    computed unless the site is asked for (like an LSTM's cell state, `capture.models.rnn`).
    """

    def extract(module: nn.Module, inputs: tuple, output: Any, length: int) -> torch.Tensor:
        with torch.no_grad():
            return getattr(module, method)(inputs[0])

    return extract


class MLP(nn.Module):
    """Zoology's MLP: fc1 -> GELU -> fc2."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class ZooBlock(nn.Module):
    """Pre-norm residual block: mixer, then MLP (Zoology's ``TransformerBlock``)."""

    def __init__(self, d_model: int, mixer: nn.Module, intermediate_size: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.mixer = mixer
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.mixer(self.norm1(x))
        return h + self.mlp(self.norm2(h))


class ZooModel(LayerStack):
    """Embedding, `ZooBlock` s around one mixer class, final LayerNorm, task head.

    The mixer class is built as ``mixer_cls(cfg)`` and provides ``fast_path`` (the name of
    its fast form), a ``reference`` flag (its own and on any submodule that has one),
    ``short_convs()`` (the convolutions ``no_conv`` freezes) and ``sites()`` (site name ->
    (module path inside the mixer, extractor)).
    """

    def __init__(self, cfg: ModelConfig, vocab_size: int, n_classes: int, mixer_cls: Any):
        super().__init__(cfg.arch, cfg.d_model, cfg.n_layers, cfg)
        d = cfg.d_model
        self.embed_tokens = nn.Embedding(vocab_size, d)
        hidden = int(cfg.intermediate_size or 4 * d)
        self.layers = nn.ModuleList(
            ZooBlock(d, mixer_cls(cfg), hidden) for _ in range(cfg.n_layers)
        )
        self.norm = nn.LayerNorm(d)
        self._zoology_init(cfg.n_layers)
        self.head = nn.Linear(d, n_classes)
        if cfg.variant == "no_conv":
            self.make_conv_identity()

    @torch.no_grad()
    def _zoology_init(self, n_layers: int) -> None:
        nn.init.normal_(self.embed_tokens.weight, std=INIT_STD)
        for module in self.layers.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=INIT_STD)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for name, parameter in self.layers.named_parameters():
            if name.endswith(("out_proj.weight", "fc2.weight")):
                nn.init.normal_(parameter, std=INIT_STD / math.sqrt(2 * n_layers))

    def run_block(self, index, hidden, context):
        return self.layers[index](hidden)

    def _mixers(self) -> list[Any]:
        return [block.mixer for block in self.layers]

    @property
    def implementation(self) -> str:
        """The mixer's fast form (e.g. "torch-fft", "torch-chunked"), or "torch-reference"."""
        mixer = self._mixers()[0]
        return "torch-reference" if mixer.reference else mixer.fast_path

    def set_reference_path(self, enabled: bool = True) -> None:
        """Run every mixer's plain sequential reference (True) or its fast form (False)."""
        for mixer in self._mixers():
            for module in mixer.modules():
                if hasattr(module, "reference"):
                    module.reference = bool(enabled)

    def make_conv_identity(self) -> None:
        """Variant ``no_conv``: every short convolution becomes a frozen identity."""
        convs = [conv for mixer in self._mixers() for conv in mixer.short_convs()]
        if not convs:
            raise TypeError(f"{self.arch} has no short convolution; no_conv does not apply")
        for conv in convs:
            make_conv_identity(conv)

    def block_sites(self) -> dict[str, tuple[str, Extractor]]:
        sites: dict[str, tuple[str, Extractor]] = {
            "norm1": ("norm1", output_extractor),
            "mixer": ("mixer", output_extractor),
        }
        for name, (path, extractor) in self._mixers()[0].sites().items():
            sites[f"mixer.{name}"] = (f"mixer.{path}" if path else "mixer", extractor)
        for name in ("norm2", "mlp", "mlp.fc1", "mlp.act", "mlp.fc2"):
            sites[name] = (name, output_extractor)
        return sites


def l2_normalise(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(|x|^2 + eps) over the last axis (flash-linear-attention's ``l2norm``)."""
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + eps)


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(batch, position, heads * width) -> (batch, heads, position, width)."""
    batch, length, _ = x.shape
    return x.view(batch, length, n_heads, -1).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(batch, heads, position, width) -> (batch, position, heads * width)."""
    batch, heads, length, width = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * width)


def silu_conv(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """SiLU after a causal short convolution (flash-linear-attention's ``ShortConvolution``)."""
    return F.silu(causal_conv(conv, x))


def register_zoo(name: str, what: str, mixer_cls: Any, own: Callable[[int], dict[str, int]],
                 mixer_parameters: Callable[[int, dict[str, int]], int],
                 check: Callable[[ModelConfig], None] | None = None) -> Architecture:
    """Register a zoo architecture: ``mixer_cls`` inside :class:`ZooModel`'s blocks.

    ``own(d_model)`` gives its mixer's default sizes (Zoology's, unless its module says they
    are ours); sizes the caller set replace them before the MLP width (``intermediate_size``)
    is matched to a GPT-NeoX layer of the same width from ``mixer_parameters(d, sizes)``, the
    mixer's parameter count (:func:`capture.models.config.matched_mlp_width`).
    """
    own_fields = tuple(own(8))

    def defaults(d_model: int, given: Any) -> dict[str, int]:
        sizes = own(d_model)
        sizes.update({k: v for k, v in given.items() if k in sizes and isinstance(v, int)})
        return {"intermediate_size": matched_mlp_width(mixer_parameters(d_model, sizes), d_model), **sizes}

    def build(cfg: ModelConfig, vocab_size: int, n_classes: int) -> ZooModel:
        return ZooModel(cfg, vocab_size, n_classes, mixer_cls)

    return register_architecture(Architecture(
        name, what, build, sizes=("intermediate_size", *own_fields), defaults=defaults, conv=True, check=check))
