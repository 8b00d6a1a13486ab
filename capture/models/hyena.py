"""Hyena: implicit long convolution with order-2 multiplicative gating and a short convolution.

The operator of Poli et al. 2023 as in Zoology's ``Hyena`` (``zoology/mixers/hyena.py``),
one head, one block::

    x1, x2, v = split(conv1d(in_proj(u)))      # short depthwise causal conv on 3d channels
    y = out_proj(x2 * long_conv(x1 * v))       # long_conv: implicit filter k, y = k * . + D .

Zoology's names, except ``short_filter`` -> ``conv1d`` and ``filter_fn`` -> ``long_conv``, so
that the short convolution has one site name across architectures ("L0.mixer.conv1d").
The fast form convolves through an FFT; `set_reference_path` switches to the direct sum over
lags (`capture.models.longconv`).

Hyena has no finite recurrent state (the long convolution reads the whole prefix), so its
sites are module outputs only: ``in_proj``, ``conv1d`` (before the split), ``long_conv``
(after the D skip, before the x2 gate) and ``out_proj``.

**Ours**: the filter MLP width ``filter_order`` defaults to Zoology's 64 at d_model >= 128
and d_model / 2 below (minimum 8): at 64 the filter alone would outweigh a whole GPT-NeoX
layer at width 16, so the widths of Arora et al. (16-256) could not be parameter-matched.
"""

from __future__ import annotations

import torch
from torch import nn

from capture.models.base import Extractor, conv_extractor, output_extractor
from capture.models.config import ModelConfig
from capture.models.longconv import LongConv
from capture.models.zoo import causal_conv, register_zoo, short_conv


class HyenaMixer(nn.Module):
    """Hyena operator of order 2: (batch, position, d_model) -> same."""

    fast_path = "torch-fft"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, sizes = cfg.d_model, cfg.sizes()
        self.d_model = d
        self.in_proj = nn.Linear(d, 3 * d)
        self.conv1d = short_conv(3 * d, sizes["conv_kernel"], bias=True)
        self.long_conv = LongConv(d, sizes["filter_order"], sizes["l_max"], skip="learned")
        self.out_proj = nn.Linear(d, d)
        self.reference = False

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        x1, x2, v = causal_conv(self.conv1d, self.in_proj(u)).split(self.d_model, dim=-1)
        return self.out_proj(x2 * self.long_conv(x1 * v))

    def short_convs(self) -> list[nn.Conv1d]:
        return [self.conv1d]

    def sites(self) -> dict[str, tuple[str, Extractor]]:
        return {
            "in_proj": ("in_proj", output_extractor),
            "conv1d": ("conv1d", conv_extractor),
            "long_conv": ("long_conv", output_extractor),
            "out_proj": ("out_proj", output_extractor),
        }


def _parameters(d: int, sizes: dict[str, int]) -> int:
    """One mixer's parameters: in/out projections, short convs, the implicit filter and its bias."""
    k, o = sizes["conv_kernel"], sizes["filter_order"]
    implicit = 2 * o * o + 7 * o + o * d
    return 3 * d * d + 3 * d + 3 * d * (k + 1) + implicit + d + d * d + d


register_zoo("hyena", "Hyena: short convs and a long implicit conv, order 2", HyenaMixer,
             lambda d: {"filter_order": max(8, min(64, d // 2)), "l_max": 256, "conv_kernel": 3}, _parameters)
