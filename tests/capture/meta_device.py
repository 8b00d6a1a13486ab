"""Run GPU code paths on a CPU: the ``meta`` device as a stand-in for ``cuda``.

A tensor on ``meta`` has a shape, a dtype and a device but no values, and torch checks
devices on ``meta`` as it does on ``cuda``: combining a ``meta`` tensor with a CPU tensor
that is not a scalar fails with "... is not on the expected device ...", which is exactly
the bug a GPU run meets when a function builds a tensor without ``device=``. So a stage run
with ``device="meta"`` on a CPU machine finds every such tensor.

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
