"""The fused CPU kernels (`capture.models.scan_kernels`) as torch operators.

Each kernel pair -- Mamba-1's selective scan, the depthwise causal convolution, Mamba-2's
one-block scan -- is a ``torch.library.custom_op`` in the ``layerstate`` namespace with a
shape-only ("fake") implementation and its backward registered as another such operator.
``torch.compile`` then traces a training step through them: the kernels run as calls inside
one compiled graph, where as ``torch.autograd.Function``s kept out of the compiler they split
the step into pieces, and each split cost copies of the gradients crossing it, gradient
additions outside the graph and the compiler's guards and resume frames (docs/measured.md,
"Training speed"). Eager calls go through the same operators. The arithmetic is the
kernels', in the same order, with the same products around them: the weights after a few
training steps are identical, bit for bit, to those of the autograd functions they replace.

Every operator takes contiguous CPU tensors of one floating dtype (float32 or float64) and
returns fresh ones; the wrappers (`fused_scan`, `fused_causal_conv`, `fused_block`) lay the
inputs out. The backward operators are not themselves differentiable (a second derivative
is an error).
"""

from __future__ import annotations

import functools
import warnings
from types import ModuleType

import torch
from torch import Tensor


@functools.cache
def fused_kernels() -> ModuleType | None:
    """`capture.models.scan_kernels`, compiled (or loaded from numba's cache) on first call;
    None, after one warning, where numba is missing or cannot compile it."""
    try:
        from capture.models import scan_kernels  # noqa: PLC0415 -- numba compiles on request only
    except Exception as exc:  # no numba, no writable cache, a compiler error: all mean no
        reason = (str(exc).strip().splitlines() or [""])[0][:200]
        warnings.warn(
            f"fused CPU kernels unavailable ({type(exc).__name__}: {reason}); the torch scan "
            "runs instead -- install numba (pip install numba) or leave [train] fused_kernels off",
            RuntimeWarning, stacklevel=2,
        )
        return None
    return scan_kernels


@torch.compiler.assume_constant_result
def kernels_compiled() -> bool:
    """Whether the fused kernels compiled: fixed for the process, so ``torch.compile`` takes it
    as a constant instead of tracing into `fused_kernels`' cache (which it warns about)."""
    return fused_kernels() is not None


def fused_call(traced: bool, function, *args):
    """``function(*args)`` for a wrapper of the fused operators: where ``torch.compile`` traces
    it (``traced``, the ``[train] compile_through_kernels`` option), or in a frame the compiler
    leaves out, so that the compiled graphs break around it as they did before the kernels
    were operators. The split decides what inductor fuses, and so how some of its sums round:
    runs declared with ``fused_kernels`` and ``compile`` alone keep their bits. Eager, both
    are the same call."""
    return function(*args) if traced else _opaque(function, *args)


@torch.compiler.disable
def _opaque(function, *args):
    return function(*args)


def _kernels() -> ModuleType:
    kernels = fused_kernels()
    assert kernels is not None  # the wrappers come here only when they compiled
    return kernels


def _np(x: Tensor):
    """The numpy view the kernels read or write (x contiguous; autograd's flag dropped)."""
    return x.detach().numpy()


def _empty(x: Tensor) -> Tensor:
    """A contiguous tensor of x's shape and dtype (``empty_like`` would copy x's strides)."""
    return x.new_empty(x.shape)


# -- Mamba-1's selective scan -----------------------------------------------------------------


def _scan_kernels(fma: bool):
    """The scan's (forward, backward) kernels: as declared by ``fused_kernels``, or (``fma``)
    their twins with fused multiply-adds (``fused_kernels_fma``)."""
    kernels = _kernels()
    return kernels.contracted_scan() if fma else (kernels.scan_forward, kernels.scan_backward)


@torch.library.custom_op("layerstate::selective_scan", mutates_args=(), device_types="cpu")
def _scan_op(u: Tensor, delta: Tensor, At: Tensor, B: Tensor, C: Tensor, fma: bool) -> Tensor:
    forward, _ = _scan_kernels(fma)
    y = _empty(u)
    forward(_np(u), _np(delta), _np(At), _np(B), _np(C), _np(y))
    return y


@_scan_op.register_fake
def _(u, delta, At, B, C, fma):
    return _empty(u)


@torch.library.custom_op("layerstate::selective_scan_backward", mutates_args=(), device_types="cpu")
def _scan_backward_op(
    u: Tensor, delta: Tensor, At: Tensor, B: Tensor, C: Tensor, grad_y: Tensor, fma: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    _, backward = _scan_kernels(fma)
    grads = [_empty(x) for x in (u, delta, At, B, C)]
    backward(*(_np(x) for x in (u, delta, At, B, C, grad_y)), *(_np(g) for g in grads))
    return grads[0], grads[1], grads[2], grads[3], grads[4]


@_scan_backward_op.register_fake
def _(u, delta, At, B, C, grad_y, fma):
    return tuple(_empty(x) for x in (u, delta, At, B, C))


def _scan_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs[:5])
    ctx.fma = inputs[5]


def _scan_grad(ctx, grad_y):
    grads = _scan_backward_op(*ctx.saved_tensors, grad_y.contiguous(), ctx.fma)
    return (*grads, None)


_scan_op.register_autograd(_scan_grad, setup_context=_scan_setup)


def fused_scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, fma: bool = False) -> Tensor:
    """y[b, t, i] = sum_n h[b, t, i, n] C[b, t, n] with h[t] = exp(delta[t] A) h[t-1] +
    delta[t] u[t] B[t] from h[-1] = 0, through `scan_kernels.scan_forward` (and
    `scan_backward` for the gradients, recomputing the states a batch row at a time).

    u, delta: (batch, length, d_inner); A: (d_inner, d_state); B, C: (batch, length,
    d_state); one dtype, float32 or float64, on the CPU. ``fma``: the kernels' twins with
    fused multiply-adds (``[train] fused_kernels_fma``)."""
    At = A.t().contiguous()  # (d_state, d_inner): the kernels' inner loop is d_inner
    return _scan_op(u.contiguous(), delta.contiguous(), At, B.contiguous(), C.contiguous(), fma)


# -- the depthwise causal convolution ---------------------------------------------------------


@torch.library.custom_op("layerstate::depthwise_conv", mutates_args=(), device_types="cpu")
def _conv_op(x: Tensor, Wt: Tensor, bias: Tensor, outputs: int) -> Tensor:
    y = x.new_empty(x.shape[0], outputs, x.shape[2])
    _kernels().conv_forward(_np(x), _np(Wt), _np(bias), _np(y))
    return y


@_conv_op.register_fake
def _(x, Wt, bias, outputs):
    return x.new_empty(x.shape[0], outputs, x.shape[2])


@torch.library.custom_op("layerstate::depthwise_conv_backward", mutates_args=(), device_types="cpu")
def _conv_backward_op(x: Tensor, Wt: Tensor, grad_y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    grad_x, grad_Wt, grad_bias = _empty(x), _empty(Wt), x.new_empty(x.shape[2])
    _kernels().conv_backward(_np(x), _np(Wt), _np(grad_y), _np(grad_x), _np(grad_Wt), _np(grad_bias))
    return grad_x, grad_Wt, grad_bias


@_conv_backward_op.register_fake
def _(x, Wt, grad_y):
    return _empty(x), _empty(Wt), x.new_empty(x.shape[2])


def _conv_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0], inputs[1])


def _conv_grad(ctx, grad_y):
    grad_x, grad_Wt, grad_bias = _conv_backward_op(*ctx.saved_tensors, grad_y.contiguous())
    return grad_x, grad_Wt, grad_bias, None


_conv_op.register_autograd(_conv_grad, setup_context=_conv_setup)


def fused_depthwise_conv(x: Tensor, weight: Tensor, bias: Tensor | None, outputs: int) -> Tensor:
    """A depthwise ``nn.Conv1d`` with ``padding = k - 1`` through `scan_kernels.conv_forward`,
    in (batch, position, channel) layout: x (batch, length, channels), the module's weight
    (channels, 1, k) and bias (or None), and the first ``outputs`` positions of the module's
    output, (batch, outputs, channels): ``length + k - 1`` for all of them, ``length`` for the
    causal ones. Each output is computed exactly as the module's full output computes it."""
    Wt = weight[:, 0, :].t().contiguous()  # (k, channels)
    b = bias if bias is not None else x.new_zeros(Wt.shape[1])
    return _conv_op(x.contiguous(), Wt, b.contiguous(), outputs)


# -- Mamba-2's one-block scan -----------------------------------------------------------------


@torch.library.custom_op("layerstate::ssd_block", mutates_args=(), device_types="cpu")
def _block_op(xh: Tensor, dth: Tensor, A: Tensor, Bg: Tensor, Cg: Tensor) -> tuple[Tensor, Tensor]:
    batch, heads, length, _ = xh.shape
    W = xh.new_empty(batch, heads, length, length)
    _kernels().ssd_weights(_np(dth), _np(A), _np(Bg), _np(Cg), _np(W))
    return torch.matmul(W, xh), W


@_block_op.register_fake
def _(xh, dth, A, Bg, Cg):
    batch, heads, length, _ = xh.shape
    return _empty(xh), xh.new_empty(batch, heads, length, length)


@torch.library.custom_op("layerstate::ssd_block_backward", mutates_args=(), device_types="cpu")
def _block_backward_op(
    xh: Tensor, dth: Tensor, A: Tensor, Bg: Tensor, Cg: Tensor, W: Tensor, grad_y: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    grad_x = torch.matmul(W.transpose(-1, -2), grad_y)
    GW = torch.matmul(grad_y, xh.transpose(-1, -2))  # (batch, heads, length, length), contiguous
    grad_dt, grad_A, grad_B, grad_C = (_empty(t) for t in (dth, A, Bg, Cg))
    _kernels().ssd_weights_backward(_np(dth), _np(A), _np(Bg), _np(Cg), _np(GW), _np(grad_dt),
                                    _np(grad_A), _np(grad_B), _np(grad_C))
    return grad_x, grad_dt, grad_A, grad_B, grad_C


@_block_backward_op.register_fake
def _(xh, dth, A, Bg, Cg, W, grad_y):
    return tuple(_empty(t) for t in (xh, dth, A, Bg, Cg))


def _block_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs, output[1])
    ctx.mark_non_differentiable(output[1])


def _block_grad(ctx, grad_y, _grad_W):
    return _block_backward_op(*ctx.saved_tensors, grad_y.contiguous())


_block_op.register_autograd(_block_grad, setup_context=_block_setup)


def fused_block(xh: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor) -> Tensor:
    """Mamba-2's scan from a zero state as y[b, h] = W[b, h] x[b, h], with the block's weights
    W[t, s] = exp(cum[t] - cum[s]) (C[t] . B[s]) dt[s] (cum: the running sum of dt A) built by
    `scan_kernels.ssd_weights` and the product a batched matrix product.

    xh: (batch, heads, length, head_dim); dt: (batch, length, heads), after bias, softplus and
    clamp; A: (heads,); B, C: (batch, length, groups, d_state); one dtype, float32 or float64,
    on the CPU. Returns y like xh; xh's gradient comes back in the same layout. Keeps its
    inputs and W (batch x heads x length^2 floats, 6.5 MB at the Jiang shapes) for the
    backward pass."""
    dth = dt.transpose(1, 2).contiguous()  # (batch, heads, length)
    Bg, Cg = (t.transpose(1, 2).contiguous() for t in (B, C))  # (batch, groups, length, d_state)
    return _block_op(xh.contiguous(), dth, A.contiguous(), Bg, Cg)[0]
