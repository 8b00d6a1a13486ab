"""Run GPU code paths on a CPU: the ``meta`` device as a stand-in for ``cuda``.

A tensor on ``meta`` has a shape, a dtype and a device but no values, and torch checks
devices on ``meta`` as it does on ``cuda``: combining a ``meta`` tensor with a CPU tensor
that is not a scalar fails with "... is not on the expected device ...", which is exactly
the bug a GPU run meets when a function builds a tensor without ``device=``. So a stage run
with ``device="meta"`` on a CPU machine finds every such tensor.

torch's own ``meta`` kernels check devices in some operators only, so :class:`HostReads`
checks every call: a ``meta`` tensor beside a CPU tensor that is not a scalar fails (copies,
moves and indexing, which may cross devices on a GPU too, excepted).

What a ``meta`` tensor cannot do is give values back to the host: inside
:class:`HostReads`, ``.item()``, ``.numpy()``, ``.tolist()``, ``.cpu()`` and ``.to("cpu")``
of a ``meta`` tensor return zeros of its shape and dtype (a ``copy_`` into a host tensor
fills it with zeros), so a whole stage (training,
capture, an intervention) runs to its end with meaningless values and only device errors
can stop it. Boolean-mask indexing, whose output size depends on values, is taken to keep
every element.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.fx.experimental._config as _fx_config
from torch.overrides import TorchFunctionMode

_SCALARS = {"item", "__float__", "__int__", "__bool__", "__index__"}
#: Calls that may mix devices on a GPU too: copies and moves, and indexing with CPU indices.
_CROSSING = {"copy_", "to", "cpu", "cuda", "__getitem__", "__setitem__", "new_tensor", "__repr__",
             "__format__", "__str__", "as_tensor", "tensor", "from_numpy",
             "_has_compatible_shallow_copy_type", "__set__", "set_", "__get__"}


def _tensors(obj: Any, out: list[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _tensors(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors(o, out)
    return out


def _check_devices(name: str, args: tuple, kwargs: dict) -> None:
    """Raise as CUDA would when a ``meta`` tensor meets a CPU tensor that is not a scalar.

    torch's ``meta`` kernels check devices only in some operators (``cross_entropy`` does,
    ``embedding`` and ``linear`` do not); this checks every call's tensor arguments."""
    if name in _CROSSING:
        return
    found = _tensors(kwargs, _tensors(args, []))
    if not any(t.device.type == "meta" for t in found):
        return
    for t in found:
        if t.device.type == "cpu" and t.dim() > 0:
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, "
                f"meta and cpu! (in {name}: a CPU tensor of shape {tuple(t.shape)})"
            )


def _is_cpu(args: tuple, kwargs: dict) -> bool:
    dev = kwargs.get("device")
    for a in args[1:]:
        if isinstance(a, (str, torch.device)):
            dev = a
    return dev is not None and torch.device(dev).type == "cpu"


def _zeros(t: torch.Tensor) -> torch.Tensor:
    return torch.zeros(tuple(t.shape), dtype=t.dtype)


class HostReads(TorchFunctionMode):
    """Reads of ``meta`` tensors back to the host return zeros (see the module docstring)."""

    def __enter__(self) -> HostReads:
        self._nonzero = _fx_config.meta_nonzero_assume_all_nonzero
        _fx_config.meta_nonzero_assume_all_nonzero = True
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        _fx_config.meta_nonzero_assume_all_nonzero = self._nonzero
        super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        _check_devices(name, args, kwargs)
        t = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if t is not None and t.device.type == "meta":
            if name in _SCALARS:
                value = 0.0 if t.dtype.is_floating_point else 0
                return {"__bool__": False, "__int__": 0, "__index__": 0,
                        "__float__": 0.0}.get(name, value)
            if name == "numpy":
                return _zeros(t).numpy()
            if name == "tolist":
                return np.zeros(tuple(t.shape)).tolist()
            if name == "cpu" or (name == "to" and _is_cpu(args, kwargs)):
                return _zeros(t)
        src = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else None
        if (name == "copy_" and t is not None and src is not None and src.device.type == "meta"
                and t.device.type == "cpu"):
            return t.zero_()  # a copy to the host
        return func(*args, **kwargs)
