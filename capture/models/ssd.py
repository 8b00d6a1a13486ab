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
through `_FusedBlock`), and keeps the products with ``x`` as batched matrix products: the same
function up to float rounding, so opt-in and recorded.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from capture.models.scan import fused_kernels

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
) -> torch.Tensor:
    """The Mamba-2 scan from a zero state, as one masked block.

    x: (batch, length, heads, head_dim); dt: (batch, length, heads), before bias and
    softplus; A: (heads,); B, C: (batch, length, groups, d_state), heads split evenly over
    groups (head ``j`` reads group ``j // (heads // groups)``); D: (heads,). Returns
    (batch, length, heads, head_dim) in float32, as `transformers`' scan does. ``fused``:
    the weights through the fused CPU kernels where they apply (`fused_block_usable`), the
    torch operations elsewhere.
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
        y = _fused_block(xh, dt, A, B, C)
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
    """Whether `_FusedBlock` can take these inputs (`ssd_block` passes x, dt, A, B, C):
    all on the CPU in float32, what `ssd_block` computes in, and the kernels compiled."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors) and _kernels_compiled()


@torch.compiler.assume_constant_result
def _kernels_compiled() -> bool:
    """Whether the fused kernels compiled: fixed for the process, so ``torch.compile`` takes it
    as a constant instead of tracing into `fused_kernels`' cache (which it warns about)."""
    return fused_kernels() is not None


@torch.compiler.disable
def _fused_block(xh, dt, A, B, C):
    """`_FusedBlock`, kept out of ``torch.compile`` (its kernels are opaque to it)."""
    return _FusedBlock.apply(xh, dt, A, B, C)


class _FusedBlock(torch.autograd.Function):
    """The scan from a zero state with its weights W built by `scan_kernels.ssd_weights`:
    y[b, h] = W[b, h] x[b, h], a batched matrix product. Float32, or float64 (one dtype;
    the tests check its gradients in float64). x: (batch, heads, length, head_dim),
    contiguous; dt: (batch, length, heads), after bias, softplus and clamp; A: (heads,); B, C:
    (batch, length, groups, d_state). Returns y like x, and x's gradient in the same layout.
    Keeps its inputs and W (batch x heads x length^2 floats, 6.5 MB at the Jiang shapes) for
    the backward; not itself differentiable twice."""

    @staticmethod
    def forward(ctx, xh, dt, A, B, C):
        kernels = fused_kernels()
        assert kernels is not None
        xh = xh.detach().contiguous()  # (batch, heads, length, head_dim)
        dth = dt.detach().transpose(1, 2).contiguous()  # (batch, heads, length)
        Bg, Cg = (t.detach().transpose(1, 2).contiguous() for t in (B, C))  # (b, groups, l, n)
        A_ = A.detach().contiguous()
        batch, heads, length, _ = xh.shape
        W = xh.new_empty(batch, heads, length, length)
        kernels.ssd_weights(dth.numpy(), A_.numpy(), Bg.numpy(), Cg.numpy(), W.numpy())
        ctx.save_for_backward(xh, dth, A_, Bg, Cg, W)
        return torch.matmul(W, xh)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):
        kernels = fused_kernels()
        assert kernels is not None
        xh, dth, A_, Bg, Cg, W = ctx.saved_tensors
        gy = grad_y.contiguous()  # (batch, heads, length, head_dim)
        grad_x = torch.matmul(W.transpose(-1, -2), gy)
        GW = torch.matmul(gy, xh.transpose(-1, -2))  # (batch, heads, length, length), contiguous
        grads = [torch.empty_like(t) for t in (dth, A_, Bg, Cg)]
        kernels.ssd_weights_backward(dth.numpy(), A_.numpy(), Bg.numpy(), Cg.numpy(), GW.numpy(),
                                     *(g.numpy() for g in grads))
        grad_dt, grad_A, grad_B, grad_C = grads
        return grad_x, grad_dt.transpose(1, 2), grad_A, grad_B.transpose(1, 2), grad_C.transpose(1, 2)
