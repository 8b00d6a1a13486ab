"""Mamba-1 selective scan on the CPU: a fast path and the plain reference beside it.

The recurrence, per batch row ``b``, channel ``i`` and state ``n``::

    h[t] = exp(delta[t, i] * A[i, n]) * h[t-1] + delta[t, i] * u[t, i] * B[t, n]
    y[t, i] = sum_n h[t, i, n] * C[t, n]

`transformers`' torch path loops over time and, at every step, indexes a full
(batch, d_inner, length, d_state) tensor; autograd then keeps one node per step whose
backward touches the whole tensor, which makes training quadratic in length (NOTES.md:
5.2 s per step at L=40, ~63 s at L=120). `selective_scan` instead runs a custom autograd
function: the element-wise work is done once over whole time-major tensors, only the
first-order recurrence itself is a time loop (one in-place ``addcmul_`` per step, forward in
time for the states and backward in time for their gradients), and the backward pass is
written out by hand. `selective_scan_reference` is the obvious loop, kept for the tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _time_major(x: torch.Tensor) -> torch.Tensor:
    """(batch, length, ...) -> contiguous (length, batch, ...), so one step is one block."""
    return x.transpose(0, 1).contiguous()


class _SelectiveScan(torch.autograd.Function):
    """y = C . h with h[t] = exp(delta A) h[t-1] + delta u B; see the module docstring."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C):  # noqa: D102 - documented on the class
        u_t, delta_t, B_t, C_t = (_time_major(x) for x in (u, delta, B, C))
        # (length, batch, d_inner, d_state)
        decay = torch.exp(delta_t[..., None] * A)
        states = (delta_t * u_t)[..., None] * B_t[:, :, None, :]
        # the states overwrite the input terms in place: h[t] = decay[t] * h[t-1] + h[t]
        for t in range(1, states.shape[0]):
            states[t].addcmul_(decay[t], states[t - 1])
        # (length, batch, d_inner, d_state) @ (length, batch, d_state, 1) -> (length, batch, d_inner)
        y_t = torch.matmul(states, C_t[..., None]).squeeze(-1)
        ctx.save_for_backward(u_t, delta_t, A, B_t, C_t, decay, states)
        return y_t.transpose(0, 1)

    @staticmethod
    def backward(ctx, grad_y):  # noqa: D102 - documented on the class
        u_t, delta_t, A, B_t, C_t, decay, states = ctx.saved_tensors
        gy_t = _time_major(grad_y)  # (length, batch, d_inner)
        # dL/dh[t], accumulated backwards in time: g[t] = gy[t] C[t] + decay[t+1] g[t+1]
        g = gy_t[..., None] * C_t[:, :, None, :]
        for t in range(g.shape[0] - 2, -1, -1):
            g[t].addcmul_(decay[t + 1], g[t + 1])
        grad_C = torch.matmul(gy_t[:, :, None, :], states).squeeze(2)
        # the input term delta*u*B: its gradient is g itself
        grad_du = torch.matmul(g, B_t[..., None]).squeeze(-1)
        grad_B = torch.matmul((delta_t * u_t)[:, :, None, :], g).squeeze(2)
        # the decay: h[t-1] is zero before the first step, so t = 0 gets no gradient
        grad_logdecay = g[1:].mul_(states[:-1]).mul_(decay[1:])  # reuses g's memory
        grad_delta = grad_du * u_t
        grad_delta[1:] += (grad_logdecay * A).sum(-1)
        grad_A = torch.einsum("lbin,lbi->in", grad_logdecay, delta_t[1:])
        grad_u = grad_du * delta_t
        return (
            grad_u.transpose(0, 1),
            grad_delta.transpose(0, 1),
            grad_A,
            grad_B.transpose(0, 1),
            grad_C.transpose(0, 1),
        )


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    z: torch.Tensor,
) -> torch.Tensor:
    """Mamba-1's gated selective scan, fast on the CPU (any device works).

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

    Returns
    -------
    Tensor, (batch, length, d_inner)
    """
    # at least float32: the decay products underflow quickly in half precision
    dtype = torch.promote_types(u.dtype, torch.float32)
    y = _SelectiveScan.apply(*(x.to(dtype) for x in (u, delta, A, B, C)))
    return (y + u * D) * F.silu(z)


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

    Same parameters and shapes as `selective_scan`. Slow to differentiate (one autograd
    node per step), but obviously right; the tests hold the two equal.
    """
    batch, length, d_inner = u.shape
    h = u.new_zeros(batch, d_inner, A.shape[1], dtype=torch.promote_types(u.dtype, torch.float32))
    ys = []
    for t in range(length):
        decay = torch.exp(delta[:, t, :, None] * A)  # (batch, d_inner, d_state)
        h = decay * h + (delta[:, t] * u[:, t])[..., None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1))
    y = torch.stack(ys, dim=1)  # (batch, length, d_inner)
    return (y + u * D) * F.silu(z)
