"""The compute device: resolved once where a command or a library call starts, then carried
by the model.

``--device`` (or the ``device=`` of an entry point such as ``train_run``, ``capture_unit``,
``rebuild_model`` or ``ablation``) is parsed here once into a :class:`Device`
(:func:`as_device`, a no-op for a :class:`Device`): a malformed name, or CUDA asked for where
there is none, is one line naming the fix before any work starts. The model is then built or
rebuilt there, and every function handed a model finds the device on the model
(:func:`model_device`, :meth:`Device.of`), never in an argument of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from store.errors import InvalidArgumentError

__all__ = ["CPU", "Device", "DeviceError", "as_device", "model_device", "parse_device"]

#: What ``--device`` takes (``meta``, torch's device without values, is the tests' stand-in
#: for a GPU: tests/capture/meta_device.py).
CHOICES = "cpu or cuda[:N]"


class DeviceError(InvalidArgumentError):
    """A device name that is malformed, or names a device this machine does not have."""


@dataclass(frozen=True)
class Device:
    """A torch device, checked to exist, with what the code does differently on it."""

    torch_device: torch.device

    @classmethod
    def of(cls, model: torch.nn.Module) -> Device:
        """Where ``model``'s parameters are (the device it was built or rebuilt on)."""
        return cls(model_device(model))

    @property
    def type(self) -> str:
        return self.torch_device.type

    @property
    def on_host(self) -> bool:
        """The CPU: capture writes one store block per forward, nothing is copied to the host."""
        return self.type == "cpu"

    @property
    def pinned(self) -> bool:
        """Host buffers are pinned and copies into them do not block (CUDA only)."""
        return self.type == "cuda"

    @property
    def name(self) -> str:
        """As the store records it (run attribute ``device``, group attribute ``devices``):
        ``cpu``, ``cuda`` (the machine's one GPU, or the current one as asked), ``cuda:N`` (one
        of several), ``meta``."""
        d = self.torch_device
        if d.type == "cuda" and d.index is not None and torch.cuda.device_count() <= 1:
            return "cuda"
        return str(d)

    def __str__(self) -> str:
        return self.name


CPU = Device(torch.device("cpu"))


def parse_device(text: str) -> Device:
    """The device named ``text`` (``cpu``, ``cuda``, ``cuda:N``; ``meta`` for tests).

    Raises
    ------
    DeviceError
        The name is malformed or unknown, CUDA is asked for without a CUDA GPU, or ``cuda:N``
        names a GPU the machine does not have.
    """
    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        raise DeviceError(f"unknown device {text!r}; use {CHOICES}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device {text!r}: no CUDA GPU is available here; use cpu (--device cpu)")
        n = torch.cuda.device_count()
        if dev.index is not None and dev.index >= n:
            raise DeviceError(f"device {text!r}: this machine has {n} CUDA GPU(s), cuda:0..cuda:{n - 1}; "
                              "name one of them")
    elif dev.type not in ("cpu", "meta"):
        raise DeviceError(f"unknown device {text!r}; use {CHOICES}")
    return Device(dev)


def as_device(device: Device | torch.device | str) -> Device:
    """``device`` as a :class:`Device`: one already resolved as it is, else parsed
    (:func:`parse_device`)."""
    if isinstance(device, Device):
        return device
    return parse_device(str(device))


def model_device(model: torch.nn.Module) -> torch.device:
    """Where ``model``'s parameters are: its inputs go there, its results come back to the host."""
    return next((p.device for p in model.parameters()), torch.device("cpu"))
