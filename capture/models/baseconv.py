"""BaseConv: a gated short convolution followed by a gated long convolution.

Zoology's ``BaseConv`` (``zoology/mixers/base_conv.py``, Arora et al. 2023) is one gated
convolution with a residual, ``y = conv(u) * projection(u) + u``, whose convolution is either
short (``kernel_size`` 3) or an implicit long one (``kernel_size`` -1); Zoology's models
alternate the two kinds layer by layer. **Ours**: one mixer applies both in turn, so that
every block is the same whatever the number of layers (Paper B's models have two)::

    h = conv1d(u) * short_proj(u) + u          # short depthwise causal conv (bias), gate
    y = long_conv(h) * long_proj(h) + h        # long_conv(h) = k * h + h (implicit filter)

No activation (Zoology's ``use_act=False``). The long filter is Zoology's
``ImplicitLongConvolution`` (filter MLP width ``filter_order``, 16 by default as there;
`capture.models.longconv`). The fast form convolves through an FFT; `set_reference_path`
switches to the direct sum over lags.

Like Hyena, BaseConv has no finite recurrent state: its sites are module outputs (``conv1d``
before the gate, ``short_proj``, ``long_conv``, ``long_proj``).
"""

from __future__ import annotations

import torch
from torch import nn

from capture.models.base import Extractor, conv_extractor, output_extractor
from capture.models.config import ModelConfig
from capture.models.longconv import LongConv
from capture.models.zoo import causal_conv, register_zoo, short_conv


class BaseConvMixer(nn.Module):
    """Gated short then gated long convolution: (batch, position, d_model) -> same."""

    fast_path = "torch-fft"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, sizes = cfg.d_model, cfg.sizes()
        self.conv1d = short_conv(d, sizes["conv_kernel"], bias=True)
        self.short_proj = nn.Linear(d, d)
        self.long_conv = LongConv(d, sizes["filter_order"], sizes["l_max"], skip="one")
        self.long_proj = nn.Linear(d, d)
        self.reference = False

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        h = causal_conv(self.conv1d, u) * self.short_proj(u) + u
        return self.long_conv(h) * self.long_proj(h) + h

    def short_convs(self) -> list[nn.Conv1d]:
        return [self.conv1d]

    def sites(self) -> dict[str, tuple[str, Extractor]]:
        return {
            "conv1d": ("conv1d", conv_extractor),
            "short_proj": ("short_proj", output_extractor),
            "long_conv": ("long_conv", output_extractor),
            "long_proj": ("long_proj", output_extractor),
        }


def _parameters(d: int, sizes: dict[str, int]) -> int:
    """One mixer's parameters: conv1d, short_proj, long_conv (its implicit filter), long_proj."""
    k, o = sizes["conv_kernel"], sizes["filter_order"]
    return d * (k + 1) + 2 * (d * d + d) + 2 * o * o + 7 * o + o * d


register_zoo("baseconv", "BaseConv: short conv gated by a projection, then a long implicit conv",
             BaseConvMixer, lambda d: {"filter_order": 16, "l_max": 256, "conv_kernel": 3}, _parameters)
