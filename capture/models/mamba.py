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
from torch.nn.modules import module as nn_module
from transformers.models.mamba2 import modeling_mamba2

from capture.models import ssd
from capture.models.fused_ops import (
    fused_call,
    fused_depthwise_conv,
    fused_kernels,
    kernels_compiled,
)
from capture.models.scan import selective_scan

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


def _causal_conv(conv: nn.Conv1d, x: torch.Tensor, traced: bool = False) -> torch.Tensor:
    """Depthwise causal convolution through the module (so hooks fire).

    x: (batch, position, channel) -> (batch, position, channel). The module pads k-1 steps
    on both sides; the first `position` outputs are the causal ones. On the fused path, with
    no hook that would see the module (training), the fused kernels compute just those
    outputs in this layout (`fused_ops.fused_depthwise_conv`: the same bits as through the
    module, without its transposing copies, padding and slicing); ``traced``: as
    `fused_ops.fused_call` says.
    """
    if "forward" in conv.__dict__:  # set_fused_path's instance forward
        return fused_call(traced, _fused_causal_conv, conv, x)
    length = x.shape[1]
    return conv(x.transpose(1, 2))[..., :length].transpose(1, 2)


def _hooked(module: nn.Module) -> bool:
    """Whether calling `module` would run a hook (its own or a global one)."""

    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
        or module._backward_pre_hooks or nn_module._global_forward_hooks
        or nn_module._global_forward_pre_hooks or nn_module._global_backward_hooks
        or nn_module._global_backward_pre_hooks
    )


def _fused_causal_conv(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """`_causal_conv` on the fused path: the fused operator, which ``torch.compile`` traces
    through, unless a hook would see the module (capture)."""
    length = x.shape[1]
    if not _hooked(conv) and _fused_conv_applies(conv, x.transpose(1, 2)):
        return fused_depthwise_conv(x, conv.weight, conv.bias, length)
    return conv(x.transpose(1, 2))[..., :length].transpose(1, 2)


def _fused_conv_applies(conv: nn.Conv1d, x: torch.Tensor) -> bool:
    k = conv.kernel_size[0]
    return (
        conv.groups == conv.in_channels == conv.out_channels
        and conv.stride == (1,) and conv.dilation == (1,) and conv.padding == (k - 1,)
        and conv.padding_mode == "zeros" and x.dim() == 3
        and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
        and conv.weight.dtype == x.dtype
        and kernels_compiled()
    )


def _fused_conv_forward(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """The instance ``forward`` a mixer's Conv1D gets on the fused path: the same output
    through the fused operator where it applies, the module's own forward elsewhere."""
    if _fused_conv_applies(conv, x):
        outputs = x.shape[2] + conv.kernel_size[0] - 1
        return fused_depthwise_conv(x.transpose(1, 2), conv.weight, conv.bias, outputs).transpose(1, 2)
    return type(conv).forward(conv, x)


def _fused_layout(mixer: Any, *parts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """On the fused path, the parts of a projection's output each made contiguous where they
    are made: the kernels take contiguous inputs, and under torch.compile the gradients of
    strided slices crossing a graph break are copied to their strides (AOTAutograd). The same
    values, so the same bits. Elsewhere the parts as they are."""
    if getattr(mixer, "layerstate_fused", False):
        return tuple(part.contiguous() for part in parts)
    return parts


def mamba_torch_forward(mixer: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """Mamba-1 mixer, pure PyTorch with the fast scan: (batch, position, d_model) -> same."""
    fused = getattr(mixer, "layerstate_fused", False)
    traced = getattr(mixer, "layerstate_traced", False)
    # (batch, position, d_inner) each
    x, gate = _fused_layout(mixer, *mixer.in_proj(hidden_states).chunk(2, dim=-1))
    x = mixer.act(_causal_conv(mixer.conv1d, x, traced))
    sizes = [mixer.time_step_rank, mixer.ssm_state_size, mixer.ssm_state_size]
    # B, C: (batch, position, d_state)
    dt, B, C = _fused_layout(mixer, *mixer.x_proj(x).split(sizes, dim=-1))
    delta = F.softplus(mixer.dt_proj(dt))  # (batch, position, d_inner)
    A = -torch.exp(mixer.A_log.float())  # (d_inner, d_state)
    fma = getattr(mixer, "layerstate_fma", False)
    y = selective_scan(x, delta, A, B, C, mixer.D.float(), gate, fused=fused, fma=fma, traced=traced)
    return mixer.out_proj(y.to(hidden_states.dtype))


def mamba2_torch_forward(mixer: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """Mamba-2 mixer, pure PyTorch: (batch, position, d_model) -> same."""
    batch, length, _ = hidden_states.shape
    groups_state = mixer.n_groups * mixer.ssm_state_size
    traced = getattr(mixer, "layerstate_traced", False)
    gate, xbc, dt = _fused_layout(mixer, *mixer.in_proj(hidden_states).split(
        [mixer.intermediate_size, mixer.conv_dim, mixer.num_heads], dim=-1
    ))
    # Mamba-2 convolves x, B and C together: no_conv un-convolves all three
    xbc = mixer.act(_causal_conv(mixer.conv1d, xbc, traced))
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
        y = ssd.ssd_block(*args, **common, fused=getattr(mixer, "layerstate_fused", False), traced=traced)
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
        mixer.layerstate_traced = False


def set_fused_path(model: nn.Module, enabled: bool, fma: bool = False, traced: bool = False) -> int:
    """Run the Mamba and Mamba-2 mixers in `model` through the fused CPU kernels (True: their
    Conv1D, and Mamba's scan) or the torch paths (False, or True where the kernels did not
    compile: `fused_kernels` warns once); returns the number of mixers set (0: none in
    `model`). ``fma`` (``[train] fused_kernels_fma``): Mamba's scan through the kernels' twins
    with fused multiply-adds (path "torch-fused-scan-fma"; Mamba-2 is unchanged). ``traced``
    (``[train] compile_through_kernels``): ``torch.compile`` traces through the kernels'
    operators instead of breaking its graphs around them (`fused_ops.fused_call`). The Conv1D
    modules stay modules (hooks see them): each gets an instance ``forward`` that uses the
    kernels, removed again by ``enabled=False``."""
    mixers: list[Any] = [m for m in model.modules() if hasattr(m, "layerstate_reference")]
    on = bool(enabled) and bool(mixers) and fused_kernels() is not None  # else one warning: off
    for mixer in mixers:
        mixer.layerstate_fused = on
        mixer.layerstate_fma = on and bool(fma)
        mixer.layerstate_traced = on and bool(traced)
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
