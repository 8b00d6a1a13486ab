"""Mamba and Mamba-2 mixers on the CPU; the Conv1D variants.

`transformers` binds `mamba-ssm`'s CUDA kernels at import whenever that package imports,
with no device check, so CPU tensors would be sent into CUDA ops (docs/measured.md,
"Models"). And its Mamba-1 torch scan trains quadratically in length. So each mixer instance
gets its own ``forward`` (`install_mixer_paths`), which picks one path per call:

- ``"cuda-kernels"``: tensors on a GPU and `mamba-ssm` + `causal-conv1d` importable (the
  optional ``gpu`` extra): `transformers`' own forward, which uses the fused kernels.
- ``"torch-fast-scan"`` (Mamba) / ``"torch-ssd"`` (Mamba-2): everywhere else. Same
  parameters, pure PyTorch; Mamba uses `capture.models.scan.selective_scan`, Mamba-2
  `capture.models.ssd.ssd_block` up to ``ssd.BLOCK_MAX`` positions (training steps
  1.4x faster at L = 40) and `transformers`' own torch chunked scan beyond (its plain
  function, never the kernel it may have bound). Every submodule used here is called as a module, so hooks see it
  ("L0.mixer.conv1d").
- ``"torch-fused-scan"`` (Mamba) / ``"torch-ssd-fused"`` (Mamba-2), on request
  (`set_fused_path`, the ``[train] fused_kernels`` option), CPU tensors only: the torch paths
  with the depthwise Conv1D, Mamba's selective scan and Mamba-2's one-block weights computed
  by fused numba kernels (`capture.models.scan_kernels`), where they compiled. Same function,
  other float rounding, so it is opt-in and recorded. With no hook on the Conv1D (training)
  its causal outputs come straight from the kernels in the mixer's layout, with the same bits
  as through the module (`_causal_conv`). ``"torch-fused-scan-fma"`` (Mamba, ``[train]
  fused_kernels_fma`` as well): the scan's kernels compiled with fused multiply-adds, another
  rounding again. (Mamba-2's scan as a fused recurrence
  was slower than the block; docs/measured.md, "Training speed".)
- ``"torch-reference"``: `transformers`' forward as written, on request
  (`set_reference_path`): the reference the tests and the benchmark hold the fast path to.
  Calls with a cache or an attention mask (generation, padding), which layerstate itself
  never makes, also go to `transformers`' forward.

The paths give the same results up to float rounding (tests: ~1e-6); fused kernels change
numerics more, which is why runs record `implementation`.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from transformers.models.mamba2 import modeling_mamba2

from capture.models import ssd
from capture.models.scan import fused_kernels, selective_scan

# The widths the causal-conv1d CUDA kernel accepts (docs/measured.md, "Models"); others use
# the torch path.
_KERNEL_CONV_WIDTHS = (2, 3, 4)


@functools.cache
def cuda_kernels_available() -> bool:
    """Whether `mamba-ssm` and `causal-conv1d` import (the optional ``gpu`` extra)."""
    try:
        importlib.import_module("mamba_ssm")
        importlib.import_module("causal_conv1d")
    except Exception:  # a CPU build fails in many ways (missing .so, no CUDA): all mean no
        return False
    return True


def mixer_path(mixer: Any, device: torch.device) -> str:
    """The path `mixer` takes for tensors on `device` (see the module docstring)."""
    if getattr(mixer, "layerstate_reference", False):
        return "torch-reference"
    if (
        device.type == "cuda"
        and mixer.conv1d.kernel_size[0] in _KERNEL_CONV_WIDTHS
        and cuda_kernels_available()
    ):
        return "cuda-kernels"
    return _torch_path(mixer, device)


def _is_mamba1(mixer: Any) -> bool:
    return hasattr(mixer, "x_proj")


def _causal_conv(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """Depthwise causal convolution through the module (so hooks fire).

    x: (batch, position, channel) -> (batch, position, channel). The module pads k-1 steps
    on both sides; the first `position` outputs are the causal ones. On the fused path, with
    no hook that would see the module (training), the fused kernels compute just those
    outputs in this layout (`_FusedCausalConv`: the same bits as through the module, without
    its transposing copies, padding and slicing).
    """
    if "forward" in conv.__dict__:  # set_fused_path's instance forward
        return _fused_causal_conv(conv, x)
    length = x.shape[1]
    return conv(x.transpose(1, 2))[..., :length].transpose(1, 2)


def _hooked(module: nn.Module) -> bool:
    """Whether calling `module` would run a hook (its own or a global one)."""
    from torch.nn.modules import module as nn_module

    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
        or module._backward_pre_hooks or nn_module._global_forward_hooks
        or nn_module._global_forward_pre_hooks or nn_module._global_backward_hooks
        or nn_module._global_backward_pre_hooks
    )


@torch.compiler.disable
def _fused_causal_conv(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """`_causal_conv` on the fused path (kept out of ``torch.compile``, as the kernels are)."""
    if not _hooked(conv) and _fused_conv_applies(conv, x.transpose(1, 2)):
        return _FusedCausalConv.apply(x, conv.weight, conv.bias)
    length = x.shape[1]
    return conv(x.transpose(1, 2))[..., :length].transpose(1, 2)


def _conv_operands(weight: torch.Tensor, bias: torch.Tensor | None, like: torch.Tensor):
    """The kernels' (k, channels) weight and a bias (zeros when the module has none)."""
    Wt = weight.detach()[:, 0, :].t().contiguous()
    b = bias.detach().contiguous() if bias is not None else like.new_zeros(Wt.shape[1])
    return Wt, b


class _FusedConv(torch.autograd.Function):
    """A depthwise ``nn.Conv1d`` (``padding = k - 1``) through `scan_kernels.conv_forward` and
    `scan_kernels.conv_backward`: (batch, channels, length) -> (batch, channels, length + k - 1),
    as the module returns it. Not itself differentiable twice."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        kernels = fused_kernels()
        assert kernels is not None
        x_t = x.detach().transpose(1, 2).contiguous()  # (batch, length, channels)
        Wt, b = _conv_operands(weight, bias, x_t)  # (k, channels), (channels,)
        batch, length, channels = x_t.shape
        y = x.new_empty(batch, length + Wt.shape[0] - 1, channels)
        kernels.conv_forward(x_t.numpy(), Wt.numpy(), b.numpy(), y.numpy())
        ctx.save_for_backward(x_t, Wt)
        ctx.has_bias = bias is not None
        return y.transpose(1, 2)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):
        grad_x, grad_weight, grad_bias = _conv_grads(ctx, grad_y.transpose(1, 2))
        return grad_x.transpose(1, 2), grad_weight, grad_bias


class _FusedCausalConv(torch.autograd.Function):
    """`_FusedConv`'s causal outputs in (batch, length, channels) layout, in and out: what
    `_causal_conv` takes from the module, through the same kernels (an output of ``length``
    positions), so with the same bits, and none of the module layout's copies."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        kernels = fused_kernels()
        assert kernels is not None
        x_c = x.detach().contiguous()
        Wt, b = _conv_operands(weight, bias, x_c)
        y = torch.empty_like(x_c)
        kernels.conv_forward(x_c.numpy(), Wt.numpy(), b.numpy(), y.numpy())
        ctx.save_for_backward(x_c, Wt)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):
        return _conv_grads(ctx, grad_y)


def _conv_grads(ctx, gy: torch.Tensor):
    """The fused convolution's gradients for output gradient ``gy`` in (batch, position,
    channel) layout (the module's whole output, or its causal part): those of x in that
    layout, of the module's weight, and of its bias (None without one)."""
    kernels = fused_kernels()
    assert kernels is not None
    x_c, Wt = ctx.saved_tensors
    grad_x, grad_Wt = torch.empty_like(x_c), torch.empty_like(Wt)
    grad_bias = x_c.new_empty(x_c.shape[2])
    kernels.conv_backward(x_c.numpy(), Wt.numpy(), gy.contiguous().numpy(), grad_x.numpy(), grad_Wt.numpy(),
                          grad_bias.numpy())
    grad_weight = grad_Wt.t().unsqueeze(1).contiguous()
    return grad_x, grad_weight, grad_bias if ctx.has_bias else None


def _fused_conv_applies(conv: nn.Conv1d, x: torch.Tensor) -> bool:
    k = conv.kernel_size[0]
    return (
        conv.groups == conv.in_channels == conv.out_channels
        and conv.stride == (1,) and conv.dilation == (1,) and conv.padding == (k - 1,)
        and conv.padding_mode == "zeros" and x.dim() == 3
        and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
        and conv.weight.dtype == x.dtype
        and fused_kernels() is not None
    )


@torch.compiler.disable
def _fused_conv_forward(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """The instance ``forward`` a mixer's Conv1D gets on the fused path: the same output
    through the fused kernels where they apply, the module's own forward elsewhere."""
    if _fused_conv_applies(conv, x):
        return _FusedConv.apply(x, conv.weight, conv.bias)
    return type(conv).forward(conv, x)


def mamba_torch_forward(mixer: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """Mamba-1 mixer, pure PyTorch with the fast scan: (batch, position, d_model) -> same."""
    # (batch, position, d_inner) each
    x, gate = mixer.in_proj(hidden_states).chunk(2, dim=-1)
    fused = getattr(mixer, "layerstate_fused", False)
    if fused:  # see mamba2_torch_forward
        x, gate = x.contiguous(), gate.contiguous()
    x = mixer.act(_causal_conv(mixer.conv1d, x))
    sizes = [mixer.time_step_rank, mixer.ssm_state_size, mixer.ssm_state_size]
    dt, B, C = mixer.x_proj(x).split(sizes, dim=-1)  # B, C: (batch, position, d_state)
    if fused:
        dt, B, C = dt.contiguous(), B.contiguous(), C.contiguous()
    delta = F.softplus(mixer.dt_proj(dt))  # (batch, position, d_inner)
    A = -torch.exp(mixer.A_log.float())  # (d_inner, d_state)
    fma = getattr(mixer, "layerstate_fma", False)
    y = selective_scan(x, delta, A, B, C, mixer.D.float(), gate, fused=fused, fma=fma)
    return mixer.out_proj(y.to(hidden_states.dtype))


def mamba2_torch_forward(mixer: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """Mamba-2 mixer, pure PyTorch: (batch, position, d_model) -> same."""
    batch, length, _ = hidden_states.shape
    groups_state = mixer.n_groups * mixer.ssm_state_size
    gate, xbc, dt = mixer.in_proj(hidden_states).split(
        [mixer.intermediate_size, mixer.conv_dim, mixer.num_heads], dim=-1
    )
    if getattr(mixer, "layerstate_fused", False):
        # contiguous where they are made: the kernels take contiguous inputs, and under
        # torch.compile the gradients of strided slices crossing a graph break are copied to
        # their strides (AOTAutograd); the same values, so the same bits
        gate, xbc, dt = gate.contiguous(), xbc.contiguous(), dt.contiguous()
    # Mamba-2 convolves x, B and C together: no_conv un-convolves all three
    xbc = mixer.act(_causal_conv(mixer.conv1d, xbc))
    x, B, C = xbc.split([mixer.intermediate_size, groups_state, groups_state], dim=-1)
    args = (
        x.view(batch, length, mixer.num_heads, mixer.head_dim),
        dt,
        -torch.exp(mixer.A_log.float()),
        B.view(batch, length, mixer.n_groups, mixer.ssm_state_size),
        C.view(batch, length, mixer.n_groups, mixer.ssm_state_size),
    )
    common = {"D": mixer.D, "dt_bias": mixer.dt_bias, "dt_softplus": True, "dt_limit": mixer.time_step_limit}
    if length <= ssd.BLOCK_MAX:
        y = ssd.ssd_block(*args, **common, fused=getattr(mixer, "layerstate_fused", False))
    else:
        y = torch_chunk_scan()(*args, chunk_size=mixer.chunk_size, **common)
    y = mixer.norm(y.reshape(batch, length, -1), gate)  # (batch, position, d_inner)
    return mixer.out_proj(y.to(hidden_states.dtype))


def torch_chunk_scan():
    """`transformers`' own torch Mamba-2 chunked scan, whatever kernel it may have bound."""
    return _plain_torch(modeling_mamba2.mamba2_chunk_scan)


def _plain_torch(function):
    """The torch function under `transformers`' kernel-dispatch wrappers.

    Up to transformers 5.24 the wrappers are functions made with ``functools.wraps``. From
    5.25, when the `kernels` package imports, the decorated function becomes an ``nn.Module``
    instance whose ``forward`` calls the wrapped dispatcher it closes over (docs/measured.md,
    "Models"); the plain function is found there, by name and module, and a layout that
    hides it is refused rather than guessed at.
    """
    if isinstance(function, nn.Module):
        name, module = function.__class__.__name__, modeling_mamba2.__name__
        closed = inspect.getclosurevars(type(function).forward).nonlocals.values()
        found = [f for f in map(_unwrapped, closed)
                 if getattr(f, "__module__", None) == module and hasattr(f, "__code__")]
        if len(found) != 1:
            raise RuntimeError(
                f"cannot find the torch function under transformers' kernel dispatch ({name}); "
                "this transformers release changed it: pin the version pyproject.toml allows"
            )
        return found[0]
    return inspect.unwrap(function)


def _unwrapped(value: Any) -> Any:
    return inspect.unwrap(value) if callable(value) else value


def _mixer_forward(mixer, hidden_states, cache=None, attention_mask=None, **kwargs):
    path = mixer_path(mixer, hidden_states.device)
    if cache is not None or attention_mask is not None or path not in _TORCH_PATHS:
        # generation with a cache, padding masks, kernels, the reference: transformers' own
        return type(mixer).forward(
            mixer, hidden_states, cache=cache, attention_mask=attention_mask, **kwargs
        )
    if _is_mamba1(mixer):
        return mamba_torch_forward(mixer, hidden_states)
    return mamba2_torch_forward(mixer, hidden_states)


_TORCH_PATHS = ("torch-fast-scan", "torch-fused-scan", "torch-fused-scan-fma", "torch-ssd", "torch-ssd-fused")


def _torch_path(mixer: Any, device: torch.device | None = None) -> str:
    # set only where the kernels compiled (set_fused_path); read as a plain attribute, so that
    # torch.compile traces no import
    fused = getattr(mixer, "layerstate_fused", False) and (device is None or device.type == "cpu")
    if _is_mamba1(mixer):
        if fused and getattr(mixer, "layerstate_fma", False):
            return "torch-fused-scan-fma"
        return "torch-fused-scan" if fused else "torch-fast-scan"
    return "torch-ssd-fused" if fused else "torch-ssd"


def install_mixer_paths(mixers: list[Any]) -> None:
    """Give each mixer instance the path-choosing forward (the class stays untouched)."""
    for mixer in mixers:
        mixer.forward = types.MethodType(_mixer_forward, mixer)
        mixer.layerstate_reference = False
        mixer.layerstate_fused = False
        mixer.layerstate_fma = False


def set_fused_path(model: nn.Module, enabled: bool, fma: bool = False) -> int:
    """Run the Mamba and Mamba-2 mixers in `model` through the fused CPU kernels (True: their
    Conv1D, and Mamba's scan) or the torch paths (False, or True where the kernels did not
    compile: `fused_kernels` warns once); returns the number of mixers set (0: none in
    `model`). ``fma`` (``[train] fused_kernels_fma``): Mamba's scan through the kernels' twins
    with fused multiply-adds (path "torch-fused-scan-fma"; Mamba-2 is unchanged). The Conv1D
    modules stay modules (hooks see them): each gets an instance ``forward`` that uses the
    kernels, removed again by ``enabled=False``."""
    mixers: list[Any] = [m for m in model.modules() if hasattr(m, "layerstate_reference")]
    on = bool(enabled) and bool(mixers) and fused_kernels() is not None  # else one warning: off
    for mixer in mixers:
        mixer.layerstate_fused = on
        mixer.layerstate_fma = on and bool(fma)
        if on:
            mixer.conv1d.forward = types.MethodType(_fused_conv_forward, mixer.conv1d)
        else:
            mixer.conv1d.__dict__.pop("forward", None)
    return len(mixers)


def set_reference_path(mixers: list[Any], enabled: bool) -> None:
    """Route the mixers through `transformers`' forward as written (True) or not (False)."""
    for mixer in mixers:
        mixer.layerstate_reference = bool(enabled)


@torch.no_grad()
def make_conv_identity(mixer: Any) -> None:
    """Turn the mixer's causal Conv1D into a frozen identity (variant ``no_conv``).

    The mixers pass the conv's weight to functions rather than always calling the module,
    so the module cannot be swapped for ``nn.Identity`` (docs/measured.md, "Models"). Instead
    its weight becomes one-hot on the current step (the last tap of the causal kernel), its
    bias zero, and neither trains. The SiLU after the conv stays. Apply after construction:
    the model's weight initialisation overwrites conv weights.
    """
    conv = mixer.conv1d
    conv.weight.zero_()
    conv.weight[:, 0, -1] = 1.0  # (channel, 1, kernel): tap k-1 multiplies x[t]
    if conv.bias is not None:
        conv.bias.zero_()
    for parameter in conv.parameters():
        parameter.requires_grad_(False)
