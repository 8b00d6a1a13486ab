"""Based: Taylor linear attention plus sliding-window softmax attention and a short convolution.

Based (Arora et al. 2024) combines three layer kinds: BaseConv gated short convolutions,
linear attention with the 2nd-order Taylor feature map, and softmax attention over a small
sliding window. **Ours**: the Based paper (and Zoology's 2-layer MQAR models) stack them as
separate layers; here one mixer holds all three so that every block is the same::

    h = conv1d(u) * gate(u) + u                              # BaseConv, short kernel (3)
    y = linear_attention(h) + sliding_attention(h)           # summed; window 0 drops the second

**Linear attention** (Zoology's ``Based``, ``zoology/mixers/based.py``; its names): per head,
q, k of width ``feature_dim`` (16) and v of width d_model / heads, no biases; with the feature
map phi(x) = [1, x / f^(1/4), vec(x x^T) / (sqrt 2 sqrt f)], so that
phi(q).phi(k) = 1 + s + s^2 / 2 with s = q.k / sqrt(f) (> 0 for every s)::

    y_t = sum_{j<=t} phi(q_t).phi(k_j) v_j / (sum_{j<=t} phi(q_t).phi(k_j) + 1e-12)

The fast form is the quadratic "train view" (the L x L matrix 1 + s + s^2/2, masked; cheap at
the lengths used here); `set_reference_path` switches to the recurrent view, a loop carrying
the state S_t = sum_{j<=t} phi(k_j) v_j^T and normaliser z_t = sum_{j<=t} phi(k_j). The
reference uses the deduplicated feature map (Zoology's ``forward_mem_save``: the f(f+1)/2
distinct products, off-diagonal ones unscaled, squares / sqrt 2), which gives the same inner
products with 1 + f + f(f+1)/2 features instead of 1 + f + f^2.

**Sliding-window attention** (Zoology's ``SlidingAttn``): softmax attention of each position
to itself and the ``window - 1`` positions before it (Zoology's ``block_size`` w attends to
w + 1), one q/k/v projection with biases; fast form a banded mask, reference a loop over
positions. Default window 8 (ours), the smallest of Zoology's sliding-window MQAR sweep
(8-1024): the Based language models' 64 would cover most sequences here and make this full
softmax attention; 0 turns it off, as in Zoology's 2-layer MQAR ``based`` models.

**Sites**: ``conv1d`` (before the gate), ``gate``, ``linear_attention``,
``sliding_attention`` (when on), and the recurrent state: ``linear_attention.state``, S_t per
position flattened as (head, feature, value) — (1 + f + f(f+1)/2) x d_model / heads per head,
19,584 values at f = 16, d 128, one head, so capture it only when asked — and
``linear_attention.normalizer``, z_t flattened as (head, feature).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from capture.models.base import Extractor, conv_extractor, output_extractor
from capture.models.config import ModelConfig
from capture.models.zoo import (
    causal_conv,
    merge_heads,
    register_zoo,
    short_conv,
    split_heads,
    state_extractor,
)

EPS = 1e-12  # Zoology's denominator epsilon


def taylor_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal Taylor linear attention, quadratic form.

    q, k: (batch, head, position, feature); v: (batch, head, position, value) -> like v.
    """
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    a = (1 + s + 0.5 * s * s).tril()  # phi(q_i).phi(k_j), zero for j > i
    return (a @ v) / (a.sum(-1, keepdim=True) + EPS)


def taylor_features(x: torch.Tensor) -> torch.Tensor:
    """The deduplicated 2nd-order Taylor feature map: (..., f) -> (..., 1 + f + f(f+1)/2)."""
    f = x.shape[-1]
    outer = x[..., :, None] * x[..., None, :] / math.sqrt(f)
    rows, cols = torch.tril_indices(f, f, -1, device=x.device)
    return torch.cat(
        [
            torch.ones_like(x[..., :1]),
            x / f**0.25,
            torch.diagonal(outer, dim1=-2, dim2=-1) / math.sqrt(2),
            outer[..., rows, cols],
        ],
        dim=-1,
    )


def taylor_recurrence(q, k, v, keep_states: bool = False):
    """The recurrent view of `taylor_attention`, one step per position (the reference).

    Returns y like v; with ``keep_states`` also the states S (batch, head, position,
    n_features, value) and normalisers z (batch, head, position, n_features).
    """
    fq, fk = taylor_features(q), taylor_features(k)
    batch, heads, length, n_features = fk.shape
    state = v.new_zeros(batch, heads, n_features, v.shape[-1])
    norm = v.new_zeros(batch, heads, n_features)
    ys, states, norms = [], [], []
    for t in range(length):
        state = state + fk[:, :, t, :, None] * v[:, :, t, None, :]
        norm = norm + fk[:, :, t]
        num = (fq[:, :, t, None, :] @ state).squeeze(-2)
        ys.append(num / ((fq[:, :, t] * norm).sum(-1, keepdim=True) + EPS))
        if keep_states:
            states.append(state)
            norms.append(norm)
    y = torch.stack(ys, dim=2)
    if keep_states:
        return y, torch.stack(states, dim=2), torch.stack(norms, dim=2)
    return y


class TaylorLinearAttention(nn.Module):
    """Zoology's ``Based`` linear attention (causal, Taylor feature map, no biases)."""

    def __init__(self, d_model: int, feature_dim: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.proj_q = nn.Linear(d_model, feature_dim * n_heads, bias=False)
        self.proj_k = nn.Linear(d_model, feature_dim * n_heads, bias=False)
        self.proj_v = nn.Linear(d_model, d_model, bias=False)
        self.proj_o = nn.Linear(d_model, d_model, bias=False)
        self.reference = False

    def _qkv(self, x: torch.Tensor):
        return (split_heads(p(x), self.n_heads) for p in (self.proj_q, self.proj_k, self.proj_v))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x)
        y = taylor_recurrence(q, k, v) if self.reference else taylor_attention(q, k, v)
        return self.proj_o(merge_heads(y))

    def states(self, x: torch.Tensor) -> torch.Tensor:
        """S_t per position, (batch, position, head * n_features * value)."""
        q, k, v = self._qkv(x)
        _, state, _ = taylor_recurrence(q, k, v, keep_states=True)
        return state.permute(0, 2, 1, 3, 4).flatten(2)

    def normalizers(self, x: torch.Tensor) -> torch.Tensor:
        """z_t per position, (batch, position, head * n_features)."""
        q, k, v = self._qkv(x)
        _, _, norm = taylor_recurrence(q, k, v, keep_states=True)
        return norm.permute(0, 2, 1, 3).flatten(2)


class SlidingWindowAttention(nn.Module):
    """Causal softmax attention over the last `window` positions (itself included)."""

    def __init__(self, d_model: int, n_heads: int, window: int):
        super().__init__()
        self.n_heads, self.window = n_heads, window
        self.Wqkv = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.reference = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (split_heads(p, self.n_heads) for p in self.Wqkv(x).chunk(3, dim=-1))
        attend = self._loop if self.reference else self._banded
        return self.out_proj(merge_heads(attend(q, k, v)))

    def _banded(self, q, k, v):
        length = q.shape[2]
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        i = torch.arange(length, device=q.device)
        lag = i[:, None] - i[None, :]
        banned = (lag < 0) | (lag >= self.window)
        return scores.masked_fill(banned, float("-inf")).softmax(-1) @ v

    def _loop(self, q, k, v):
        out = []
        for t in range(q.shape[2]):
            lo = max(0, t - self.window + 1)
            scores = (k[:, :, lo : t + 1] @ q[:, :, t, :, None]).squeeze(-1)
            weights = (scores / math.sqrt(q.shape[-1])).softmax(-1)
            out.append((weights[..., None] * v[:, :, lo : t + 1]).sum(2))
        return torch.stack(out, dim=2)


class BasedMixer(nn.Module):
    """Short gated convolution, then linear + sliding-window attention (see module doc)."""

    fast_path = "torch-quadratic"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, sizes = cfg.d_model, cfg.sizes()
        heads = sizes["n_heads"]
        self.conv1d = short_conv(d, sizes["conv_kernel"], bias=True)
        self.gate = nn.Linear(d, d)
        self.linear_attention = TaylorLinearAttention(d, sizes["feature_dim"], heads)
        self.sliding_attention = (
            SlidingWindowAttention(d, heads, sizes["window"]) if sizes["window"] > 0 else None
        )
        self.reference = False

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        h = causal_conv(self.conv1d, u) * self.gate(u) + u
        y = self.linear_attention(h)
        if self.sliding_attention is not None:
            y = y + self.sliding_attention(h)
        return y

    def short_convs(self) -> list[nn.Conv1d]:
        return [self.conv1d]

    def sites(self) -> dict[str, tuple[str, Extractor]]:
        sites: dict[str, tuple[str, Extractor]] = {
            "conv1d": ("conv1d", conv_extractor),
            "gate": ("gate", output_extractor),
            "linear_attention": ("linear_attention", output_extractor),
            "linear_attention.state": ("linear_attention", state_extractor("states")),
            "linear_attention.normalizer": ("linear_attention", state_extractor("normalizers")),
        }
        if self.sliding_attention is not None:
            sites["sliding_attention"] = ("sliding_attention", output_extractor)
        return sites


def _heads_divide(cfg: ModelConfig) -> None:
    if cfg.d_model % cfg.sizes()["n_heads"]:
        raise ValueError(f"n_heads={cfg.sizes()['n_heads']} must divide d_model={cfg.d_model}")


def _parameters(d: int, sizes: dict[str, int]) -> int:
    """One mixer's parameters: short conv, gate, Taylor attention's q/k/v/out, the window's."""
    k, f, h, window = sizes["conv_kernel"], sizes["feature_dim"], sizes["n_heads"], sizes["window"]
    attention = 2 * d * f * h + 2 * d * d
    sliding = 4 * d * d + 4 * d if window > 0 else 0
    return d * (k + 1) + d * d + d + attention + sliding


register_zoo("based", "Based: short conv, Taylor linear attention and window attention", BasedMixer,
             lambda d: {"n_heads": 1, "feature_dim": 16, "window": 8, "conv_kernel": 3}, _parameters,
             check=_heads_divide)
