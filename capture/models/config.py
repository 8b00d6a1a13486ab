"""One typed, validated configuration for all five architectures.

Sizes left as ``None`` are filled per architecture when the config is built, so a stored
config (``model_dump()``) always names every size that produced the weights.

Default sizes (``d_model`` = 128, 4 layers) are parameter-matched at about 830K parameters,
except Mamba-1 (see below). The rule, per layer: a GPT-NeoX layer with MLP width 4.25 d has
4 d² (attention) + 8.5 d² (MLP) = 12.5 d² weights; an LSTM layer of width H has 8 H², a GRU
layer 6 H², so H = 1.25 d (LSTM: 160) and H = √(12.5/6) d (GRU: 185).

**Ours**: the recurrent models embed tokens directly at width H, so every stored layer
(embedding included) has one feature width; NOTES.md's 162/188 assumed a 128-wide
embedding feeding a wider first layer.

Mamba-2 uses expand 4, head_dim 32, state 16, one group (n_groups 8 would double the
parameters), and chunk_size 16 for its torch chunked scan: a training step at batch 64 took
~30% less time than with 64, at both L = 40 and L = 120 (sequences are padded to a multiple
of it; results do not depend on it beyond rounding).

Mamba-1 uses expand 2, state 16 (about 470K parameters): matching 830K needs a large
expand × state, which on the CPU is slow and memory-hungry (NOTES.md), so Mamba-1 is the
documented exception.
"""

from __future__ import annotations

import math
from typing import Any

import pydantic
from pydantic import Field

ARCHS = ("transformer", "mamba", "mamba2", "lstm", "gru")
VARIANTS = ("default", "no_conv")
SSM_ARCHS = ("mamba", "mamba2")

# Which size fields each architecture uses; every other size field must stay None.
ARCH_FIELDS: dict[str, tuple[str, ...]] = {
    "transformer": ("intermediate_size", "n_heads"),
    "mamba": ("expand", "state_size", "conv_kernel"),
    "mamba2": ("expand", "state_size", "head_dim", "n_groups", "chunk_size", "conv_kernel"),
    "lstm": ("hidden_size",),
    "gru": ("hidden_size",),
}
_ALL_SIZE_FIELDS = sorted({f for fields in ARCH_FIELDS.values() for f in fields})


def default_sizes(arch: str, d_model: int) -> dict[str, int]:
    """The parameter-matched default sizes of `arch` at width `d_model` (see module doc)."""
    defaults = {
        "transformer": {"intermediate_size": round(4.25 * d_model), "n_heads": 4},
        "mamba": {"expand": 2, "state_size": 16, "conv_kernel": 4},
        "mamba2": {
            "expand": 4,
            "state_size": 16,
            "head_dim": 32,
            "n_groups": 1,
            "chunk_size": 16,
            "conv_kernel": 4,
        },
        "lstm": {"hidden_size": round(1.25 * d_model)},
        "gru": {"hidden_size": round(math.sqrt(12.5 / 6) * d_model)},
    }
    return defaults[arch]


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

    arch: str = Field(description="Architecture: one of transformer, mamba, mamba2, lstm, gru.")
    n_layers: int = Field(default=4, ge=1, description="Number of blocks above the embedding.")
    d_model: int = Field(
        default=128,
        ge=1,
        description="Embedding and residual width (transformer, mamba, mamba2); "
        "for lstm/gru it only sets the default hidden_size.",
    )
    variant: str = Field(
        default="default",
        description="'default', or 'no_conv' (mamba/mamba2 only): the Conv1D becomes a frozen "
        "identity.",
    )
    conv_kernel: int | None = Field(
        default=None,
        ge=1,
        description="mamba/mamba2: causal Conv1D width (default 4; 1 = current step only).",
    )
    intermediate_size: int | None = Field(
        default=None, ge=1, description="transformer: MLP width (default 4.25 x d_model = 544)."
    )
    n_heads: int | None = Field(
        default=None,
        ge=1,
        description="transformer: attention heads (default 4; must divide d_model).",
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
        default=None, ge=1, description="mamba/mamba2: SSM state size per channel (default 16)."
    )
    head_dim: int | None = Field(
        default=None,
        ge=1,
        description="mamba2: head width (default 32; must divide expand x d_model).",
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

    def sizes(self) -> dict[str, int]:
        """This arch's size fields (all filled in), e.g. ``{"hidden_size": 160}``."""
        return {name: int(getattr(self, name)) for name in ARCH_FIELDS[self.arch]}

    @pydantic.model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        # Filled before field validation because the model is frozen afterwards.
        if not isinstance(data, dict) or data.get("arch") not in ARCHS:
            return data
        filled = dict(data)
        d_model = filled.get("d_model", 128)
        if not isinstance(d_model, int):
            return data
        for name, value in default_sizes(filled["arch"], d_model).items():
            if filled.get(name) is None:
                filled[name] = value
        return filled

    @pydantic.model_validator(mode="after")
    def _check(self) -> ModelConfig:
        if self.arch not in ARCHS:
            raise ValueError(f"unknown arch {self.arch!r}; expected one of {', '.join(ARCHS)}")
        if self.variant not in VARIANTS:
            raise ValueError(
                f"unknown variant {self.variant!r}; expected one of {', '.join(VARIANTS)}"
            )
        if self.variant == "no_conv" and self.arch not in SSM_ARCHS:
            raise ValueError(
                f"variant 'no_conv' removes Mamba's Conv1D and applies to {' and '.join(SSM_ARCHS)} "
                f"only, not {self.arch!r}; use variant='default'"
            )
        used = ARCH_FIELDS[self.arch]
        stray = [f for f in _ALL_SIZE_FIELDS if f not in used and getattr(self, f) is not None]
        if stray:
            raise ValueError(
                f"{', '.join(stray)} do(es) not apply to arch {self.arch!r}; "
                f"its size fields are {', '.join(used)}"
            )
        self._check_divisibility()
        return self

    def _check_divisibility(self) -> None:
        sizes = self.sizes()
        if self.arch == "transformer":
            heads = sizes["n_heads"]
            if self.d_model % heads:
                raise ValueError(
                    f"n_heads={heads} must divide d_model={self.d_model}; pick a divisor"
                )
        if self.arch == "mamba2":
            inner, head_dim = sizes["expand"] * self.d_model, sizes["head_dim"]
            if inner % head_dim:
                raise ValueError(f"head_dim={head_dim} must divide expand x d_model = {inner}")
            groups = sizes["n_groups"]
            if (inner // head_dim) % groups:
                raise ValueError(
                    f"n_groups={groups} must divide the head count {inner // head_dim}"
                )
