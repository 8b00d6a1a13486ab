"""DeltaNet: linear attention with the delta rule, L2-normalised keys and a learned beta.

As the flash-linear-attention ``DeltaNet`` layer that Zoology uses
(``zoology/mixers/delta_net.py``; Schlag et al. 2021, Yang et al. 2024), with its defaults
(``expand_k = expand_v = 1``, SiLU short convolutions on q, k and v, L2 norm on q and k,
beta = sigmoid(b_proj(u)) per head, no output gate, per-head RMSNorm before ``o_proj``)::

    q, k, v = silu(conv(q_proj u)), silu(conv(k_proj u)), silu(conv(v_proj u))   # per head
    q, k = l2(q) / sqrt(d_k), l2(k)                       # the kernel's default scale
    S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T   # S: d_k x d_v fast weights, S_0 = 0
    o_t = S_t^T q_t;  out = o_proj(RMSNorm(o))

**Fast form**: the chunkwise-parallel delta rule (Yang et al. 2024, the WY representation;
pure PyTorch, as flash-linear-attention's naive chunk reference). Within a chunk of C
positions, with M = I + tril(diag(beta) K K^T, -1), the pseudo-values U = M^-1 diag(beta) V
and W = M^-1 diag(beta) K come from one unit-triangular solve for all chunks at once; a loop
over the L / C chunks then carries S::

    U' = U - W S;  O = Q S + tril(Q K^T) U';  S <- S + K^T U'

**Reference** (`set_reference_path`): the recurrence above, one position at a time. The
flash-linear-attention kernels compute in bfloat16 on a GPU; here everything is float32.

**Sites**: ``q_proj``, ``k_proj``, ``v_proj``, ``q_conv1d``, ``k_conv1d``, ``v_conv1d``
(before the SiLU), ``b_proj`` (beta's logits), ``o_proj``, and the recurrent state
``state``: the fast-weight matrix S_t per position flattened as (head, key, value),
d_model^2 / heads values (4,096 at d 128, 4 heads).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from capture.models.base import Extractor, conv_extractor, output_extractor
from capture.models.config import ModelConfig
from capture.models.zoo import (
    l2_normalise,
    merge_heads,
    register_zoo,
    short_conv,
    silu_conv,
    split_heads,
    state_extractor,
)

# Positions per chunk of the fast form, speed only: 32 and 64 tie at L = 160, 64 (one chunk)
# is fastest at L = 40 (batch 64, 4 heads of 32; bench/models.py).
CHUNK = 64
NORM_EPS = 1e-5  # flash-linear-attention's RMSNorm default


def delta_rule_chunked(q, k, v, beta, chunk: int = CHUNK) -> torch.Tensor:
    """The delta rule, chunkwise parallel.

    Parameters
    ----------
    q, k : Tensor, (batch, head, position, d_k)
        Already normalised and scaled.
    v : Tensor, (batch, head, position, d_v)
    beta : Tensor, (batch, head, position), in (0, 1)
    chunk : int
        Most positions per chunk; the L / chunk chunks (rounded up) are made equal, up to
        padding of less than one per chunk. Results do not depend on it beyond rounding.

    Returns
    -------
    Tensor, (batch, head, position, d_v)
    """
    batch, heads, length, d_k = k.shape
    d_v = v.shape[-1]
    chunk = -(-length // -(-length // chunk))  # as even as possible: little padding
    pad = -length % chunk
    if pad:  # zero keys, values and beta: the padded steps change nothing
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        beta = F.pad(beta, (0, pad))
    n = (length + pad) // chunk
    q, k, v = (x.reshape(batch, heads, n, chunk, -1) for x in (q, k, v))
    beta = beta.reshape(batch, heads, n, chunk, 1)
    eye = torch.eye(chunk, dtype=k.dtype, device=k.device)
    m = eye + (beta * k @ k.transpose(-1, -2)).tril(-1)
    rhs = torch.cat([beta * v, beta * k], dim=-1)
    uw = torch.linalg.solve_triangular(m, rhs, upper=False, unitriangular=True)
    u, w = uw.split([d_v, d_k], dim=-1)
    inner = (q @ k.transpose(-1, -2)).tril()  # (batch, head, chunk index, C, C)
    state = k.new_zeros(batch, heads, d_k, d_v)
    out = []
    for c in range(n):
        u_c = u[:, :, c] - w[:, :, c] @ state
        out.append(q[:, :, c] @ state + inner[:, :, c] @ u_c)
        state = state + k[:, :, c].transpose(-1, -2) @ u_c
    return torch.cat(out, dim=2)[:, :, :length]


def delta_rule_recurrent(q, k, v, beta, keep_states: bool = False):
    """The delta rule one position at a time (the reference); same shapes as the chunked form.

    With ``keep_states``, also S_t: (batch, head, position, d_k, d_v).
    """
    batch, heads, length, d_k = k.shape
    state = v.new_zeros(batch, heads, d_k, v.shape[-1])
    outs, states = [], []
    for t in range(length):
        k_t, v_t, b_t = k[:, :, t], v[:, :, t], beta[:, :, t, None]
        old = (k_t[:, :, None, :] @ state).squeeze(-2)  # S^T k: (batch, head, d_v)
        state = state + k_t[..., None] * (b_t * (v_t - old))[:, :, None, :]
        outs.append((q[:, :, t, None, :] @ state).squeeze(-2))
        if keep_states:
            states.append(state)
    out = torch.stack(outs, dim=2)
    return (out, torch.stack(states, dim=2)) if keep_states else out


class DeltaNetMixer(nn.Module):
    """DeltaNet: (batch, position, d_model) -> same (see module doc)."""

    fast_path = "torch-chunked"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, sizes = cfg.d_model, cfg.sizes()
        self.n_heads = sizes["n_heads"]
        kernel = sizes["conv_kernel"]
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.b_proj = nn.Linear(d, self.n_heads, bias=False)
        self.q_conv1d, self.k_conv1d, self.v_conv1d = (
            short_conv(d, kernel, bias=False) for _ in range(3)
        )
        self.o_norm = nn.RMSNorm(d // self.n_heads, eps=NORM_EPS)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.reference = False

    def _qkvb(self, u: torch.Tensor):
        q = l2_normalise(split_heads(silu_conv(self.q_conv1d, self.q_proj(u)), self.n_heads))
        k = l2_normalise(split_heads(silu_conv(self.k_conv1d, self.k_proj(u)), self.n_heads))
        v = split_heads(silu_conv(self.v_conv1d, self.v_proj(u)), self.n_heads)
        beta = torch.sigmoid(self.b_proj(u)).transpose(1, 2)  # (batch, head, position)
        return q * q.shape[-1] ** -0.5, k, v, beta

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        q, k, v, beta = self._qkvb(u)
        rule = delta_rule_recurrent if self.reference else delta_rule_chunked
        o = self.o_norm(rule(q, k, v, beta))  # RMSNorm over each head's d_v
        return self.o_proj(merge_heads(o))

    def states(self, u: torch.Tensor) -> torch.Tensor:
        """S_t per position: (batch, position, heads * d_k * d_v)."""
        q, k, v, beta = self._qkvb(u)
        _, states = delta_rule_recurrent(q, k, v, beta, keep_states=True)
        return states.permute(0, 2, 1, 3, 4).flatten(2)

    def short_convs(self) -> list[nn.Conv1d]:
        return [self.q_conv1d, self.k_conv1d, self.v_conv1d]

    def sites(self) -> dict[str, tuple[str, Extractor]]:
        sites: dict[str, tuple[str, Extractor]] = {}
        for name in ("q", "k", "v"):
            sites[f"{name}_proj"] = (f"{name}_proj", output_extractor)
            sites[f"{name}_conv1d"] = (f"{name}_conv1d", conv_extractor)
        sites["b_proj"] = ("b_proj", output_extractor)
        sites["o_proj"] = ("o_proj", output_extractor)
        sites["state"] = ("", state_extractor("states"))
        return sites


def _heads_divide(cfg: ModelConfig) -> None:
    if cfg.d_model % cfg.sizes()["n_heads"]:
        raise ValueError(f"n_heads={cfg.sizes()['n_heads']} must divide d_model={cfg.d_model}")


def _parameters(d: int, sizes: dict[str, int]) -> int:
    """One mixer's parameters: q/k/v/out projections, the beta projection, three short convs."""
    h, k = sizes["n_heads"], sizes["conv_kernel"]
    return 4 * d * d + d * h + 3 * d * k + d // h


register_zoo("deltanet", "DeltaNet: the delta rule with short convs on q, k, v", DeltaNetMixer,
             lambda d: {"n_heads": 4, "conv_kernel": 4}, _parameters, check=_heads_divide)
