"""Every architecture layerstate can build, registered where it is defined.

An architecture is its name, the :class:`~capture.models.config.ModelConfig` size fields it
uses with their defaults at a width, the function that builds it, and two facts the rest of
the package reads from here rather than from lists of names:

- ``keeps_state``: whether each layer carries a state from one position to the next (a
  recurrence, a state space, a long convolution) or reads every earlier position afresh
  (attention). Patching a layer's output at one position changes what the layers above see,
  not the layer's own state at later positions, and patching results say so for these
  (:mod:`analysis.interventions`);
- ``conv``: whether it has a short causal convolution, so that variant ``no_conv`` applies.

The built-ins register themselves in their modules (``rnn.py``: LSTM, GRU; ``hf_archs.py``:
GPT-NeoX, Mamba, Mamba-2; the zoo's ``based.py``, ``baseconv.py``, ``h3.py``, ``hyena.py``,
``deltanet.py``); another is one module calling :func:`register_architecture`
(docs/guide/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: The built-in architectures, by the paper they serve: Jiang et al.'s five core ones, and the
#: other retrieval architectures of Arora et al. 2025 (docs/science.md).
CORE_ARCHS = ("transformer", "mamba", "mamba2", "lstm", "gru")
ZOO_ARCHS = ("based", "baseconv", "h3", "hyena", "deltanet")
BUILTIN_ARCHS = CORE_ARCHS + ZOO_ARCHS

#: ``(cfg, vocab_size, n_classes) -> SequenceModel``, called with torch's generator seeded.
Build = Callable[[Any, int, int], Any]
#: ``(d_model, given) -> sizes``: the default size fields at width ``d_model``; ``given`` holds
#: the fields the caller set (None where unset), for defaults that depend on them.
Defaults = Callable[[int, Mapping[str, Any]], dict[str, int]]


@dataclass(frozen=True)
class Architecture:
    """One buildable architecture."""

    name: str
    what: str
    build: Build
    #: The ModelConfig size fields it uses (every other one must stay unset).
    sizes: tuple[str, ...] = ()
    defaults: Defaults | None = None
    #: Layers carry a state along the positions (False: attention).
    keeps_state: bool = True
    #: Has a short causal convolution (variant ``no_conv`` applies).
    conv: bool = False
    #: Rules between its sizes (raise ValueError naming the fix), given the filled-in config.
    check: Callable[[Any], None] | None = None

    def default_sizes(self, d_model: int, given: Mapping[str, Any] | None = None) -> dict[str, int]:
        return dict(self.defaults(d_model, given or {})) if self.defaults is not None else {}


_ARCHITECTURES: dict[str, Architecture] = {}


def register_architecture(entry: Architecture) -> Architecture:
    """Add ``entry``; a name another architecture already has is refused (one line naming it)."""
    known = _ARCHITECTURES.get(entry.name)
    if known is not None and known != entry:
        raise ValueError(f"architecture {entry.name!r} is already registered; choose another name")
    unset = [s for s in entry.sizes if entry.defaults is None]
    if unset:
        raise ValueError(f"architecture {entry.name!r} uses size fields {', '.join(unset)} but gives no "
                         "defaults for them; pass defaults=(d_model, given) -> sizes")
    _ARCHITECTURES[entry.name] = entry
    return entry


def names() -> tuple[str, ...]:
    """Every registered architecture: the built-ins in :data:`BUILTIN_ARCHS` order, then those
    added, in the order they were registered."""
    builtin = tuple(a for a in BUILTIN_ARCHS if a in _ARCHITECTURES)
    return builtin + tuple(a for a in _ARCHITECTURES if a not in BUILTIN_ARCHS)


def architecture(name: str) -> Architecture:
    """The architecture ``name``; an unknown name raises ValueError listing those there are."""
    try:
        return _ARCHITECTURES[name]
    except KeyError:
        raise ValueError(f"unknown arch {name!r}; expected one of {', '.join(names())}") from None


def known(name: object) -> bool:
    return isinstance(name, str) and name in _ARCHITECTURES


def keeps_state(name: str) -> bool:
    """Whether ``name``'s layers carry a state along the positions (see the module doc)."""
    return architecture(name).keeps_state


def conv_names() -> tuple[str, ...]:
    """The architectures with a short convolution (variant ``no_conv`` applies to them)."""
    return tuple(a for a in names() if _ARCHITECTURES[a].conv)
