"""Mamba-1's selective scan for the CPU: a fast path and the plain reference beside it.

The recurrence, per batch row, channel ``i`` and state index ``n``::

    h[t, i, n] = exp(delta[t, i] * A[i, n]) * h[t-1, i, n] + delta[t, i] * u[t, i] * B[t, n]
    y[t, i]    = sum_n h[t, i, n] * C[t, n]

`transformers`' torch path loops over time and indexes a full (batch, d_inner, length,
d_state) tensor at every step; autograd keeps one node per step whose backward touches that
whole tensor, so training is quadratic in length (docs/measured.md, "Models": 5.2 s per step
at L = 40, ~63 s at L = 120).

`selective_scan` is a custom autograd function with a hand-written backward. What made it
fast on the CPU, measured: (1) no fresh large tensors per call — allocating and first
touching a 40 MB buffer cost 3-4x the arithmetic done in it — so the states are never
materialised for the whole sequence; they are computed chunk by chunk in small reused
buffers that stay in cache, and only the state at each chunk boundary is kept for the
backward pass, which recomputes each chunk's states; (2) the element-wise work is done over a
whole chunk at once, and only the first-order recurrence itself is a Python loop of one
in-place ``addcmul_`` per step (forward in time for the states, backward in time for their
gradients). Measured side by side in a Mamba training step (batch 64, one thread), the
alternatives were slower: unbinding the time axis once and letting autograd differentiate
the loop, 2.2x (L = 40) to 3x (L = 120); the same custom function over whole materialised
(length, batch, d_inner, d_state) tensors, ~2.5x. `selective_scan_reference` is the
obvious autograd loop; the tests hold the two equal, outputs and gradients.

``selective_scan(..., fused=True)`` (the ``[train] fused_kernels`` option) computes the same
function with compiled loops instead (`capture.models.scan_kernels`, through the `fused_ops.fused_scan` operator):
0.37x this path's time, equal to it up to float rounding, so opt-in. ``fma=True`` as well
(``[train] fused_kernels_fma``) uses the kernels' twins with fused multiply-adds, faster again
and rounded differently again.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from capture.models.fused_ops import fused_call, fused_scan, kernels_compiled

# Steps per chunk: 8 was fastest of 2-32 at batch 64, d_inner 256, d_state 16 (bench/models.py).
CHUNK = 8


def _time_major(x: torch.Tensor) -> torch.Tensor:
    """(batch, length, ...) -> contiguous (length, batch, ...): one step is one memory block."""
    return x.transpose(0, 1).contiguous()


def _chunk_states(delta, du, A, B, h0, decay, states) -> None:
    """Fill ``decay[:n]`` and ``states[:n + 1]`` for one chunk of n steps, in place.

    delta, du: (n, batch, d_inner); B: (n, batch, d_state); h0: (batch, d_inner, d_state),
    the state before the chunk. decay[s] = exp(delta[s] A); states[0] = h0 and
    states[s + 1] = decay[s] * states[s] + du[s] B[s].
    """
    n = delta.shape[0]
    torch.mul(delta[..., None], A, out=decay[:n]).exp_()
    torch.mul(du[..., None], B[:, :, None, :], out=states[1 : n + 1])
    states[0].copy_(h0)
    for s in range(n):
        states[s + 1].addcmul_(decay[s], states[s])


class _SelectiveScan(torch.autograd.Function):
    """y[t] = h[t] . C[t], h[t] = exp(delta[t] A) h[t-1] + delta[t] u[t] B[t]; h[-1] = 0."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, chunk):
        u_t, delta_t, B_t, C_t = (_time_major(x) for x in (u, delta, B, C))
        length, batch, d_inner = u_t.shape
        n_chunks = -(-length // chunk)
        du = delta_t * u_t  # (length, batch, d_inner)
        # checkpoints[c]: the state before chunk c, all that the backward pass keeps
        checkpoints = u_t.new_zeros(n_chunks + 1, batch, d_inner, A.shape[1])
        decay = u_t.new_empty(chunk, batch, d_inner, A.shape[1])
        states = u_t.new_empty(chunk + 1, batch, d_inner, A.shape[1])
        y = u_t.new_empty(length, batch, d_inner, 1)
        for c in range(n_chunks):
            sl = slice(c * chunk, min(length, (c + 1) * chunk))
            n = sl.stop - sl.start
            _chunk_states(delta_t[sl], du[sl], A, B_t[sl], checkpoints[c], decay, states)
            # (n, batch, d_inner, d_state) @ (n, batch, d_state, 1) -> (n, batch, d_inner, 1)
            torch.matmul(states[1 : n + 1], C_t[sl, :, :, None], out=y[sl])
            checkpoints[c + 1].copy_(states[n])
        ctx.chunk = chunk
        ctx.save_for_backward(u_t, delta_t, A, B_t, C_t, checkpoints)
        return y.squeeze(-1).transpose(0, 1)

    @staticmethod
    def backward(ctx, grad_y):
        u_t, delta_t, A, B_t, C_t, checkpoints = ctx.saved_tensors
        chunk = ctx.chunk
        length, batch, d_inner = u_t.shape
        gy = _time_major(grad_y)  # (length, batch, d_inner)
        du = delta_t * u_t
        decay = u_t.new_empty(chunk, batch, d_inner, A.shape[1])
        states = u_t.new_empty(chunk + 1, batch, d_inner, A.shape[1])
        grad_h = torch.empty_like(decay)
        # dL/dh flowing into a chunk's last step from the chunk after it
        carry = torch.zeros_like(decay[0])
        grad_C = u_t.new_empty(length, batch, 1, A.shape[1])
        grad_B = u_t.new_empty(length, batch, 1, A.shape[1])
        grad_du = u_t.new_empty(length, batch, d_inner, 1)
        grad_delta_decay = u_t.new_empty(length, batch, d_inner)
        grad_A = torch.zeros_like(A)
        for c in range(checkpoints.shape[0] - 2, -1, -1):
            sl = slice(c * chunk, min(length, (c + 1) * chunk))
            n = sl.stop - sl.start
            _chunk_states(delta_t[sl], du[sl], A, B_t[sl], checkpoints[c], decay, states)
            G = grad_h[:n]
            # G[s] = dL/dh[s] = gy[s] C[s] + decay[s + 1] G[s + 1], backwards in time
            torch.mul(gy[sl, :, :, None], C_t[sl, :, None, :], out=G)
            G[n - 1].add_(carry)
            for s in range(n - 2, -1, -1):
                G[s].addcmul_(decay[s + 1], G[s + 1])
            torch.mul(decay[0], G[0], out=carry)
            torch.matmul(gy[sl, :, None, :], states[1 : n + 1], out=grad_C[sl])
            torch.matmul(G, B_t[sl, :, :, None], out=grad_du[sl])
            torch.matmul(du[sl, :, None, :], G, out=grad_B[sl])
            # dL/d(delta A) = G * h[t-1] * decay, computed in G's memory (G is done)
            grad_log_decay = G.mul_(states[:n]).mul_(decay[:n])
            scratch = states[1 : n + 1]  # done with the states too: reuse as scratch
            torch.sum(torch.mul(grad_log_decay, A, out=scratch), -1, out=grad_delta_decay[sl])
            grad_A.add_(grad_log_decay.mul_(delta_t[sl, :, :, None]).sum((0, 1)))
        grad_du = grad_du.squeeze(-1)
        grad_delta = grad_du * u_t + grad_delta_decay
        grad_u = grad_du * delta_t
        grad_B, grad_C = grad_B.squeeze(2), grad_C.squeeze(2)
        grads = (g.transpose(0, 1) for g in (grad_u, grad_delta, grad_B, grad_C))
        grad_u, grad_delta, grad_B, grad_C = grads
        return grad_u, grad_delta, grad_A, grad_B, grad_C, None


def fused_usable(*tensors: torch.Tensor) -> bool:
    """Whether `fused_ops.fused_scan` can take these (promoted) inputs: CPU, float32 or float64, one
    dtype, and the kernels compiled."""
    dtype = tensors[0].dtype
    return (
        dtype in (torch.float32, torch.float64)
        and all(x.device.type == "cpu" and x.dtype == dtype for x in tensors)
        and kernels_compiled()
    )


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    z: torch.Tensor,
    chunk: int = CHUNK,
    fused: bool = False,
    fma: bool = False,
    traced: bool = False,
) -> torch.Tensor:
    """Mamba-1's gated selective scan, fast on the CPU (runs on any device).

    Parameters
    ----------
    u : Tensor, (batch, length, d_inner)
        The convolved, activated input.
    delta : Tensor, (batch, length, d_inner)
        Step sizes, already through ``softplus`` (positive).
    A : Tensor, (d_inner, d_state)
        Continuous-time decay rates (negative).
    B, C : Tensor, (batch, length, d_state)
        Input-dependent input and output maps.
    D : Tensor, (d_inner,)
        Skip weight.
    z : Tensor, (batch, length, d_inner)
        Gate, applied as ``y * silu(z)``.
    chunk : int
        Steps per chunk of the state computation (memory vs speed; results do not depend
        on it beyond rounding).
    fused : bool
        Compute the scan with the fused numba kernels (`capture.models.scan_kernels`) where
        `fused_usable` says they apply; the same function, other float rounding (~1e-7
        relative). Elsewhere, and by default, the chunked torch scan.
    fma : bool
        With ``fused``: the kernels' twins compiled with fused multiply-adds
        (`scan_kernels.contracted_scan`, the ``[train] fused_kernels_fma`` option): faster,
        another rounding again.
    traced : bool
        With ``fused``: let ``torch.compile`` trace through the fused operator
        (``[train] compile_through_kernels``; `fused_ops.fused_call`) instead of breaking the
        graph around it. Eager, no difference.

    Returns
    -------
    Tensor, (batch, length, d_inner), in at least float32.
    """
    # at least float32: products of decays underflow quickly in half precision
    dtype = torch.promote_types(u.dtype, torch.float32)
    su, sdelta, sA, sB, sC = (x.to(dtype) for x in (u, delta, A, B, C))
    y = _scan(su, sdelta, sA, sB, sC, chunk, fused, fma, traced)
    return (y + u * D) * F.silu(z)


def _scan(u, delta, A, B, C, chunk, fused=False, fma=False, traced=False):
    """The fused operator where it applies (`fused_ops.fused_call`), else the chunked torch scan."""
    if fused and fused_usable(u, delta, A, B, C):
        return fused_call(traced, fused_scan, u, delta, A, B, C, fma)
    return _chunked_scan(u, delta, A, B, C, chunk)


@torch.compiler.disable
def _chunked_scan(u, delta, A, B, C, chunk):
    """The custom function, kept out of ``torch.compile``: traced, its per-step loops unroll
    into a graph whose compiled training step was 4.6x slower than eager (docs/measured.md,
    "Training speed"); around it the rest of the model compiles. Eager calls are unchanged."""
    return _SelectiveScan.apply(u, delta, A, B, C, chunk)


def selective_scan_reference(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    z: torch.Tensor,
) -> torch.Tensor:
    """The same computation as `selective_scan`, as a plain autograd loop over time.

    Same parameters and shapes as `selective_scan` (without ``chunk``). Slow to
    differentiate (one autograd node per step), but obviously right.
    """
    batch, length, d_inner = u.shape
    dtype = torch.promote_types(u.dtype, torch.float32)
    h = u.new_zeros(batch, d_inner, A.shape[1], dtype=dtype)
    ys = []
    for t in range(length):
        decay = torch.exp(delta[:, t, :, None] * A)  # (batch, d_inner, d_state)
        h = decay * h + (delta[:, t] * u[:, t])[..., None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1))
    y = torch.stack(ys, dim=1)  # (batch, length, d_inner)
    return (y + u * D) * F.silu(z)
