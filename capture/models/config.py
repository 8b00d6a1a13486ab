"""One typed, validated configuration for all ten architectures (five core, five of the zoo).

Sizes left as ``None`` are filled per architecture when the config is built, so a stored
config (``model_dump()``) always names every size that produced the weights.

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

import math
from typing import Any

import pydantic
from pydantic import Field

CORE_ARCHS = ("transformer", "mamba", "mamba2", "lstm", "gru")
# Arora et al. 2025's other retrieval architectures (capture/models/zoo.py)
ZOO_ARCHS = ("based", "baseconv", "h3", "hyena", "deltanet")
ARCHS = CORE_ARCHS + ZOO_ARCHS
VARIANTS = ("default", "no_conv")
SSM_ARCHS = ("mamba", "mamba2")
# Archs with a short causal convolution: variant no_conv makes it a frozen identity
CONV_ARCHS = SSM_ARCHS + ZOO_ARCHS
# Archs whose layers keep no state from one position to the next: attention reads every
# earlier position afresh at each one
ATTENTION_ARCHS = ("transformer",)
# The others: each layer carries a state along the positions (a recurrence, a state space, a
# long convolution). Patching a layer's output at one position then changes what the layers
# above see, not that layer's own state at later positions (the caveat patching results carry,
# analysis.interventions). A new architecture is one of the two by being listed, or not, above.
RECURRENT_ARCHS = tuple(a for a in ARCHS if a not in ATTENTION_ARCHS)

# Which size fields each architecture uses; every other size field must stay None.
ARCH_FIELDS: dict[str, tuple[str, ...]] = {
    "transformer": ("intermediate_size", "n_heads"),
    "mamba": ("expand", "state_size", "conv_kernel"),
    "mamba2": ("expand", "state_size", "head_dim", "n_groups", "chunk_size", "conv_kernel"),
    "lstm": ("hidden_size",),
    "gru": ("hidden_size",),
    "based": ("intermediate_size", "n_heads", "feature_dim", "window", "conv_kernel"),
    "baseconv": ("intermediate_size", "filter_order", "l_max", "conv_kernel"),
    "h3": ("intermediate_size", "head_dim", "state_size", "conv_kernel"),
    "hyena": ("intermediate_size", "filter_order", "l_max", "conv_kernel"),
    "deltanet": ("intermediate_size", "n_heads", "conv_kernel"),
}
_ALL_SIZE_FIELDS = sorted({f for fields in ARCH_FIELDS.values() for f in fields})


def default_sizes(arch: str, d_model: int, given: dict | None = None) -> dict[str, int]:
    """The parameter-matched default sizes of `arch` at width `d_model` (see module doc).

    For the zoo archs, sizes in `given` (not None) are used when matching the MLP width.
    """
    if arch in ZOO_ARCHS:
        return _zoo_sizes(arch, d_model, given or {})
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


def mixer_parameters(arch: str, d: int, sizes: dict[str, int]) -> int:
    """Parameters of one `arch` mixer at width `d` (counted from the modules in capture/models/<arch>.py)."""
    k = sizes["conv_kernel"]
    if arch in ("baseconv", "hyena"):
        o = sizes["filter_order"]
        implicit = 2 * o * o + 7 * o + o * d  # ImplicitFilter: 3 Linears, one Sin, projection
        if arch == "baseconv":  # conv1d, short_proj, long_conv, long_proj
            return d * (k + 1) + 2 * (d * d + d) + implicit
        return 3 * d * d + 3 * d + 3 * d * (k + 1) + implicit + d + d * d + d
    if arch == "based":
        f, h, window = sizes["feature_dim"], sizes["n_heads"], sizes["window"]
        attention = 2 * d * f * h + 2 * d * d
        sliding = 4 * d * d + 4 * d if window > 0 else 0
        return d * (k + 1) + d * d + d + attention + sliding
    if arch == "h3":
        heads, n = d // sizes["head_dim"], sizes["state_size"]
        diag = heads * (1 + 3 * n)  # log_dt, then per mode A (2), B (2), C (2)
        return 4 * (d * d + d) + d * k + d + diag + heads
    if arch == "deltanet":
        h = sizes["n_heads"]
        return 4 * d * d + d * h + 3 * d * k + d // h
    raise KeyError(f"no mixer parameter count for {arch!r}")


def matched_mlp_width(arch: str, d: int, sizes: dict[str, int]) -> int:
    """The MLP width that gives a block about a GPT-NeoX layer's parameters at width `d`.

    A GPT-NeoX layer with MLP width 4.25 d has 12.5 d^2 + 13.25 d parameters (weights,
    biases, two LayerNorms); a zoo block has its mixer's, two LayerNorms (4 d) and an MLP of
    width m (2 d m + m + d).
    """
    remainder = 12.5 * d * d + 13.25 * d - mixer_parameters(arch, d, sizes) - 5 * d
    return max(1, round(remainder / (2 * d + 1)))


def _zoo_sizes(arch: str, d_model: int, given: dict) -> dict[str, int]:
    """Zoology's sizes (capture/models/<arch>.py says which are ours), then the MLP width
    that matches a GPT-NeoX layer of the same width (`matched_mlp_width`)."""
    state = 2 * max(1, d_model // 8)  # H3: d_model / 4, even (N/2 complex modes)
    sizes = {
        "based": {"n_heads": 1, "feature_dim": 16, "window": 8, "conv_kernel": 3},
        "baseconv": {"filter_order": 16, "l_max": 256, "conv_kernel": 3},
        "h3": {"head_dim": 2, "state_size": state, "conv_kernel": state},
        "hyena": {"filter_order": max(8, min(64, d_model // 2)), "l_max": 256, "conv_kernel": 3},
        "deltanet": {"n_heads": 4, "conv_kernel": 4},
    }[arch]
    sizes.update({k: v for k, v in given.items() if k in sizes and isinstance(v, int)})
    return {"intermediate_size": matched_mlp_width(arch, d_model, sizes), **sizes}


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
        for name, value in default_sizes(filled["arch"], d_model, filled).items():
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
        if self.variant == "no_conv" and self.arch not in CONV_ARCHS:
            raise ValueError(
                f"variant 'no_conv' freezes a short convolution as the identity and applies to "
                f"{', '.join(CONV_ARCHS)} only, not {self.arch!r}; use variant='default'"
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
        if self.arch in ("based", "deltanet") and self.d_model % sizes["n_heads"]:
            raise ValueError(f"n_heads={sizes['n_heads']} must divide d_model={self.d_model}")
        if self.arch == "h3":
            if self.d_model % sizes["head_dim"]:
                raise ValueError(f"head_dim={sizes['head_dim']} must divide d_model={self.d_model}")
            if sizes["state_size"] % 2:
                raise ValueError(f"h3 state_size={sizes['state_size']} must be even (complex modes)")
        if self.arch == "mamba2":
            inner, head_dim = sizes["expand"] * self.d_model, sizes["head_dim"]
            if inner % head_dim:
                raise ValueError(f"head_dim={head_dim} must divide expand x d_model = {inner}")
            groups = sizes["n_groups"]
            if (inner // head_dim) % groups:
                raise ValueError(
                    f"n_groups={groups} must divide the head count {inner // head_dim}"
                )
