"""Long causal convolutions for Hyena and BaseConv: implicit filters, FFT form, direct reference.

A long convolution gives every channel c its own filter as long as the sequence::

    y[t, c] = sum_{j <= t} k[c, j] * u[t - j, c]  (+ a skip term)

The filter is *implicit* (Hyena, Poli et al. 2023; Zoology's ``Filter`` in
``zoology/mixers/hyena.py`` and ``ImplicitLongConvolution`` in ``convolution.py``): a small
MLP with sine activations maps a positional encoding of each lag j to the C filter values,
and a fixed exponential decay per channel modulates it. `fft_causal_conv` computes the
convolution in O(L log L) through an FFT of length 2L (no wrap-around); `direct_causal_conv`
is the plain sum over lags, the reference the tests hold it to.

**Ours**: Zoology builds the positional encoding for a fixed ``l_max`` and refuses longer
sequences. Here the encoding is a function of the lag itself, with ``l_max`` only setting the
time scale (``t = j / (l_max - 1)``, Zoology's normalisation), so any length works, a
sequence's filters do not depend on its length (prefixes of longer sequences give the same
outputs), and nothing length-dependent is stored with the weights. The decay rates are fixed
(Zoology registers them with learning rate 0), so they are recomputed rather than stored.
Zoology's ``ImplicitLongConvolution`` also creates a ``bias`` it never uses; it is left out.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# Zoology's defaults: positional encoding width 3 (time, one cosine, one sine band), two
# inner MLP layers, decay to 1e-2 of the start between 0.3 and 1.5 of l_max.
EMB_DIM = 3
INNER_LAYERS = 2
FAST_DECAY, SLOW_DECAY, DECAY_TARGET = 0.3, 1.5, 1e-2


def positional_encoding(length: int, l_max: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Zoology's ``PositionalEmbedding`` with ``emb_dim`` 3, as a function of the lag.

    Returns
    -------
    z : Tensor, (length, 3)
        ``[t, cos(f w), -sin(f w)]`` with t = j / (l_max - 1), w = 2 pi j / l_max, f = 1e-4
        (the single band of ``linspace(1e-4, bands - 1, bands)``).
    t : Tensor, (length, 1)
    """
    lag = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    t = lag / (l_max - 1)
    w = 2 * math.pi * lag / l_max
    f = 1e-4
    return torch.cat([t, torch.cos(f * w), -torch.sin(f * w)], dim=-1), t


class Sin(nn.Module):
    """sin(freq * x) with a trainable frequency per feature (Zoology's ``Sin``)."""

    def __init__(self, dim: int, freq: float = 1.0):
        super().__init__()
        self.freq = nn.Parameter(freq * torch.ones(1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.freq * x)


class ImplicitFilter(nn.Module):
    """Lag -> filter values: MLP(positional encoding) * exp(-t |delta_c|).

    One `Sin` module is shared by every MLP layer, as in Zoology (one ``act`` object).
    """

    def __init__(self, channels: int, order: int, l_max: int):
        super().__init__()
        self.channels, self.l_max = channels, l_max
        self.linears = nn.ModuleList(
            [nn.Linear(EMB_DIM, order)] + [nn.Linear(order, order) for _ in range(INNER_LAYERS)]
        )
        self.act = Sin(order)
        self.project = nn.Linear(order, channels, bias=False)

    def decay_rates(self) -> torch.Tensor:
        """(channels,) fixed rates |delta_c|, spaced from slow to fast decay."""
        slow = math.log(DECAY_TARGET) / SLOW_DECAY
        fast = math.log(DECAY_TARGET) / FAST_DECAY
        return torch.linspace(slow, fast, self.channels).abs()

    def forward(self, length: int) -> torch.Tensor:
        """The filters for lags 0..length-1, (channels, length)."""
        z, t = positional_encoding(length, self.l_max, self.project.weight.device)
        h = z.to(self.project.weight.dtype)
        for linear in self.linears:
            h = self.act(linear(h))
        h = self.project(h)  # (length, channels)
        decay = torch.exp(-t * self.decay_rates().to(h.device))
        return (h * decay.to(h.dtype)).transpose(0, 1)


def fft_causal_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Causal convolution of every channel with its own filter, through an FFT.

    Parameters
    ----------
    u : Tensor, (batch, length, *channels)
    k : Tensor, (*channels, length)
        Filters, lag last; their leading axes broadcast against u's axes after position
        ((d,) for (batch, length, d); (heads, 1, 1) for (batch, length, heads, p, p)). Only
        the first `length` lags are used.

    Returns
    -------
    Tensor, like `u`, at least float32.
    """
    length = u.shape[1]
    n = 2 * length  # no wrap-around
    dtype = torch.promote_types(u.dtype, torch.float32)
    k = k[..., :length].to(dtype)
    k = k.reshape((1,) * (u.dim() - 1 - k.dim()) + k.shape).movedim(-1, 0)  # (length, *channels)
    u_f = torch.fft.rfft(u.to(dtype), n=n, dim=1)
    k_f = torch.fft.rfft(k, n=n, dim=0)
    return torch.fft.irfft(u_f * k_f, n=n, dim=1)[:, :length]


def direct_causal_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The same as `fft_causal_conv`, as the plain sum over lags (the reference)."""
    length = u.shape[1]
    dtype = torch.promote_types(u.dtype, torch.float32)
    u = u.to(dtype)
    k = k[..., :length].to(dtype)
    y = u * k[..., 0]
    for lag in range(1, length):
        shifted = torch.cat([u.new_zeros(u[:, :lag].shape), u[:, : length - lag]], dim=1)
        y = y + shifted * k[..., lag]
    return y


class LongConv(nn.Module):
    """A long causal convolution with an implicit filter and a skip term.

    ``skip="learned"``: y = k * u + D u with a parameter D (Hyena's filter ``bias``,
    initialised N(0, 1) as in Zoology). ``skip="one"``: y = k * u + u (Zoology's
    ``ImplicitLongConvolution``, used by BaseConv).
    """

    def __init__(self, channels: int, order: int, l_max: int, skip: str):
        super().__init__()
        if skip not in ("learned", "one"):
            raise ValueError(f"skip must be 'learned' or 'one', not {skip!r}")
        self.filter = ImplicitFilter(channels, order, l_max)
        self.skip = nn.Parameter(torch.randn(channels)) if skip == "learned" else None
        self.reference = False

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """(batch, length, channels) -> (batch, length, channels)."""
        k = self.filter(u.shape[1])
        conv = direct_causal_conv if self.reference else fft_causal_conv
        y = conv(u, k).to(u.dtype)
        return y + (u * self.skip if self.skip is not None else u)
