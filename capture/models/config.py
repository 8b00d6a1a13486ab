"""One typed, validated configuration for every registered architecture (ten built in: five
core, five of the zoo; :mod:`capture.models.registry`).

Sizes left as ``None`` are filled per architecture when the config is built (each
architecture's registration gives its size fields and their defaults), so a stored config
(``model_dump()``) always names every size that produced the weights.

Default sizes (``d_model`` = 128, 4 layers) are parameter-matched at about 830K parameters,
except Mamba-1 (see below). The rule, per layer: a GPT-NeoX layer with MLP width 4.25 d has
4 d² (attention) + 8.5 d² (MLP) = 12.5 d² weights; an LSTM layer of width H has 8 H², a GRU
layer 6 H², so H = 1.25 d (LSTM: 160) and H = √(12.5/6) d (GRU: 185).

**Ours**: the recurrent models embed tokens directly at width H, so every stored layer
(embedding included) has one feature width; the 162/188 of docs/measured.md ("Models")
assumed a 128-wide embedding feeding a wider first layer.

Mamba-2 uses expand 4, head_dim 32, state 16, one group (n_groups 8 would double the
parameters), and chunk_size 16 for its torch chunked scan: a training step at batch 64 took
~30% less time than with 64, at both L = 40 and L = 120 (sequences are padded to a multiple
of it; results do not depend on it beyond rounding).

Mamba-1 uses expand 2, state 16 (about 470K parameters): matching 830K needs a large
expand × state, which on the CPU is slow and memory-hungry (docs/measured.md, "Models"), so
Mamba-1 is the documented exception.
"""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic import Field

from capture.models import registry

VARIANTS = ("default", "no_conv")
#: The fields of a ModelConfig that are not sizes; every other field is a size some
#: architecture uses (its registry entry says which).
SHARED_FIELDS = ("arch", "n_layers", "d_model", "variant")


def default_sizes(arch: str, d_model: int, given: dict | None = None) -> dict[str, int]:
    """The default sizes of ``arch`` at width ``d_model`` (its registry entry's ``defaults``);
    ``given`` holds sizes the caller set, for defaults that depend on them."""
    return registry.architecture(arch).default_sizes(d_model, given)


def matched_mlp_width(mixer_parameters: int, d: int) -> int:
    """The MLP width that gives a block with a mixer of ``mixer_parameters`` about a GPT-NeoX
    layer's parameters at width ``d``.

    A GPT-NeoX layer with MLP width 4.25 d has 12.5 d^2 + 13.25 d parameters (weights,
    biases, two LayerNorms); a zoo block has its mixer's, two LayerNorms (4 d) and an MLP of
    width m (2 d m + m + d).
    """
    remainder = 12.5 * d * d + 13.25 * d - mixer_parameters - 5 * d
    return max(1, round(remainder / (2 * d + 1)))


class ModelConfig(pydantic.BaseModel):
    """Architecture and sizes of one model; build it with `capture.models.build_model`.

    Examples
    --------
    >>> ModelConfig(arch="lstm").hidden_size
    160
    >>> ModelConfig(arch="mamba", variant="no_conv").conv_kernel
    4
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    arch: str = Field(
        description="Architecture: one of transformer, mamba, mamba2, lstm, gru, based, "
        "baseconv, h3, hyena, deltanet."
    )
    n_layers: int = Field(default=4, ge=1, description="Number of blocks above the embedding.")
    d_model: int = Field(
        default=128,
        ge=1,
        description="Embedding and residual width (transformer, mamba, mamba2); "
        "for lstm/gru it only sets the default hidden_size.",
    )
    variant: str = Field(
        default="default",
        description="'default', or 'no_conv' (mamba, mamba2 and the zoo archs): the short "
        "convolution(s) become a frozen identity.",
    )
    conv_kernel: int | None = Field(
        default=None,
        ge=1,
        description="mamba/mamba2/deltanet: causal Conv1D width (default 4; 1 = current step "
        "only); based/baseconv/hyena: 3; h3: the shift SSM's length (default state_size).",
    )
    intermediate_size: int | None = Field(
        default=None,
        ge=1,
        description="transformer: MLP width (default 4.25 x d_model = 544); zoo archs: MLP "
        "width matching a GPT-NeoX layer's parameters.",
    )
    n_heads: int | None = Field(
        default=None,
        ge=1,
        description="transformer/deltanet: attention heads (default 4), based: 1; must "
        "divide d_model.",
    )
    hidden_size: int | None = Field(
        default=None,
        ge=1,
        description="lstm/gru: state and embedding width (default 1.25 x d_model = 160 for LSTM, "
        "1.443 x d_model = 185 for GRU).",
    )
    expand: int | None = Field(
        default=None,
        ge=1,
        description="mamba/mamba2: inner width / d_model (default 2 mamba, 4 mamba2).",
    )
    state_size: int | None = Field(
        default=None,
        ge=1,
        description="mamba/mamba2: SSM state size per channel (default 16); h3: diagonal SSM "
        "state size (default d_model / 4, even).",
    )
    head_dim: int | None = Field(
        default=None,
        ge=1,
        description="mamba2: head width (default 32; must divide expand x d_model); h3: "
        "width of the k v^T blocks (default 2; must divide d_model).",
    )
    n_groups: int | None = Field(
        default=None,
        ge=1,
        description="mamba2: B/C groups (default 1; must divide the head count).",
    )
    chunk_size: int | None = Field(
        default=None,
        ge=1,
        description="mamba2: chunk length of the torch chunked scan (default 16; speed only).",
    )
    feature_dim: int | None = Field(
        default=None, ge=1, description="based: q/k width of the Taylor linear attention (16)."
    )
    window: int | None = Field(
        default=None,
        ge=0,
        description="based: sliding-window attention span, itself included (8; 0 = none).",
    )
    filter_order: int | None = Field(
        default=None,
        ge=1,
        description="hyena/baseconv: implicit filter MLP width (hyena: min(64, d_model / 2), "
        "at least 8; baseconv: 16).",
    )
    l_max: int | None = Field(
        default=None,
        ge=2,
        description="hyena/baseconv: time scale of the implicit filters (256); longer sequences "
        "still work.",
    )

    def sizes(self) -> dict[str, int]:
        """This arch's size fields (all filled in), e.g. ``{"hidden_size": 160}``."""
        return {name: int(getattr(self, name)) for name in registry.architecture(self.arch).sizes}

    @pydantic.model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        # Filled before field validation because the model is frozen afterwards.
        if not isinstance(data, dict) or not registry.known(data.get("arch")):
            return data
        filled = dict(data)
        d_model = filled.get("d_model", 128)
        if not isinstance(d_model, int):
            return data
        for name, value in default_sizes(filled["arch"], d_model, filled).items():
            if filled.get(name) is None:
                filled[name] = value
        return filled

    @pydantic.model_validator(mode="after")
    def _check(self) -> ModelConfig:
        entry = registry.architecture(self.arch)  # an unknown name: one line with the names there are
        if self.variant not in VARIANTS:
            raise ValueError(
                f"unknown variant {self.variant!r}; expected one of {', '.join(VARIANTS)}"
            )
        if self.variant == "no_conv" and not entry.conv:
            raise ValueError(
                f"variant 'no_conv' freezes a short convolution as the identity and applies to "
                f"{', '.join(registry.conv_names())} only, not {self.arch!r}; use variant='default'"
            )
        fields = [f for f in type(self).model_fields if f not in SHARED_FIELDS]
        stray = [f for f in fields if f not in entry.sizes and getattr(self, f) is not None]
        if stray:
            raise ValueError(
                f"{', '.join(stray)} do(es) not apply to arch {self.arch!r}; "
                f"its size fields are {', '.join(entry.sizes) or 'none'}"
            )
        if entry.check is not None:
            entry.check(self)
        return self
