"""Mamba-2's scan (state-space duality) for short sequences on the CPU, as one block.

Per head ``h`` (scalar ``A[h] < 0``), with ``dt`` after bias, softplus and clamp::

    S[t] = exp(dt[t] A) S[t-1] + dt[t] x[t] B[t]^T        (head_dim x d_state)
    y[t] = S[t] C[t] + D x[t]

which unrolled is a masked "attention" over the sequence::

    y[t] = sum_{s <= t} exp(a[s+1] + ... + a[t]) (C[t] . B[s]) dt[s] x[s] + D x[t],
    a = dt A.

`transformers`' torch scan computes this in chunks of ``chunk_size`` positions: the
quadratic form inside each chunk and a recurrence between chunks, with B and C repeated
for every head and the contractions written as broadcast products. For the sequences
layerstate trains on (tens to a few hundred positions) the whole sequence fits one block:
`ssd_block` computes ``C . B`` once per group, the decays once per head, and applies them
with one batched matrix product; autograd differentiates it. Same result up to float
rounding (tests: outputs and gradients against `transformers`' scan); it is quadratic in
length, so longer sequences keep the chunked scan (`BLOCK_MAX`).

``ssd_block(..., fused=True)`` (the ``[train] fused_kernels`` option) builds the block's
weights and their gradients with compiled loops instead (`capture.models.scan_kernels`,
through the `fused_ops.fused_block` operator), and keeps the products with ``x`` as batched
matrix products: the same function up to float rounding, so opt-in and recorded.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from capture.models.fused_ops import fused_block, fused_call, kernels_compiled

#: Longest sequence computed as one block; longer ones go to the chunked scan. The block's
#: (batch, heads, length, length) decay tensor is 4 MB per batch row at 256 positions and 16 heads.
BLOCK_MAX = 64


def ssd_block(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    *,
    D: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    fused: bool = False,
    traced: bool = False,
) -> torch.Tensor:
    """The Mamba-2 scan from a zero state, as one masked block.

    x: (batch, length, heads, head_dim); dt: (batch, length, heads), before bias and
    softplus; A: (heads,); B, C: (batch, length, groups, d_state), heads split evenly over
    groups (head ``j`` reads group ``j // (heads // groups)``); D: (heads,). Returns
    (batch, length, heads, head_dim) in float32, as `transformers`' scan does. ``fused``:
    the weights through the fused CPU kernels where they apply (`fused_block_usable`), the
    torch operations elsewhere; ``traced``: ``torch.compile`` traces through them
    (`fused_ops.fused_call`).
    """
    batch, length, heads, _ = x.shape
    groups = B.shape[2]
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    if dt_softplus:
        dt = F.softplus(dt)
    dt = torch.clamp(dt, min=dt_limit[0], max=dt_limit[1]).float()  # (b, l, h)
    x = x.float()
    A, B, C = A.float(), B.float(), C.float()
    if fused and fused_block_usable(x, dt, A, B, C):
        # in (batch, heads, length, head_dim) layout throughout, the products' own: x is laid
        # out so once, where it is computed (compiled: inside the producing kernel), and the
        # block's output and the gradients that come back need no further transposing copies
        xh = x.transpose(1, 2).contiguous()
        y = fused_call(traced, fused_block, xh, dt, A, B, C)
        if D is not None:
            y = y + D.float()[:, None, None] * xh
        return y.transpose(1, 2).contiguous()
    # log-decay from s to t as a difference of running sums, in float64: in float32 the
    # difference of two sums of a few hundred terms loses digits the exponent then keeps
    total = torch.cumsum((dt * A.float()).double(), dim=1).transpose(1, 2)  # (b, h, l)
    causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
    log_decay = (total[..., :, None] - total[..., None, :]).float()  # (b, h, t, s)
    decay = log_decay.masked_fill(~causal, -torch.inf).exp()
    # C[t] . B[s] once per group: (b, g, t, s), then each head's decay and source dt
    scores = torch.einsum("btgn,bsgn->bgts", C.float(), B.float())
    weights = decay.view(batch, groups, heads // groups, length, length) * scores[:, :, None]
    weights = weights.view(batch, heads, length, length) * dt.transpose(1, 2)[:, :, None, :]
    y = torch.matmul(weights, x.transpose(1, 2))  # (b, h, t, head_dim)
    y = y.transpose(1, 2)
    if D is not None:
        y = y + D.float()[:, None] * x
    return y


def fused_block_usable(*tensors: torch.Tensor) -> bool:
    """Whether `fused_ops.fused_block` can take these inputs (`ssd_block` passes x, dt, A, B,
    C): all on the CPU in float32, what `ssd_block` computes in, and the kernels compiled."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors) and kernels_compiled()
