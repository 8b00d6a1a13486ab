"""What an importer checks before it writes: that its library is installed, that a source's
arrays have the shapes the plan needs, and that labels, tokens and mask fit the activations.

A *source* is what one tool produced, seen as named arrays with a leading ``sequence`` axis
and ``position`` second: ``(sequence, position, d)`` activations (more trailing dims are
flattened into one), plus perhaps tokens and logits. Sources come two ways:

* *ranged* (files: safetensors, ``.npy``, a ``datasets`` directory): every array's shape is
  known from headers before anything is read, so every check runs before the first write;
* *batches* (in-memory TransformerLens caches, nnsight trace outputs): a list is checked
  whole before writing; a generator is checked batch by batch, and a batch that fails stops
  the import with its blocks before it recorded and the group marked incomplete (readers
  refuse it; running the import again resumes).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from store import InvalidArrayError, MissingError
from store.errors import MissingDependencyError
from store.zarrutil import to_numpy

from .plans import ImportPlan, some_names

#: The optional extra that brings every importer's library.
EXTRA = "interop"


def require(module: str, what: str) -> Any:
    """Import ``module`` for ``what``, or one line saying which extra brings it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(
            f"{what} needs the Python package {module.split('.')[0]!r}: "
            f"pip install 'layerstate[{EXTRA}]'"
        ) from None


# ---------------------------------------------------------------------- sources
Arrays = dict[str, np.ndarray]


class Ranged(Protocol):
    """A source whose arrays can be read by sequence range (files)."""

    what: str
    n_sequences: int
    shapes: dict[str, tuple[int, ...]]   # name -> shape (sequence first)

    def read(self, names: Sequence[str], start: int, stop: int) -> Arrays: ...

    def dtype(self, name: str) -> np.dtype: ...


@dataclass
class Batches:
    """A source that arrives in batches (in-memory caches, trace outputs).

    ``batches`` yields one mapping name -> array (sequence first) per batch; ``n_sequences``
    is needed up front when ``batches`` is a generator (the store is laid out at full size).
    """

    what: str
    batches: Iterable[Mapping[str, Any]]
    n_sequences: int | None = None


def activation_dims(shape: Sequence[int]) -> tuple[int, int, int]:
    """(sequences, positions, width) of an activation shape (trailing dims flattened)."""
    width = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return int(shape[0]), int(shape[1]), width


def check_shapes(shapes: Mapping[str, Sequence[int]], plan: ImportPlan, where: str,
                 ref: Mapping[str, Sequence[int]] | None = None) -> int:
    """Check one batch's (or a whole file source's) shapes against the plan and against the
    first batch's ``ref``; the number of sequences. Each failure is one line naming the hook
    and the batch."""
    counts = {}
    for name in plan.names():
        if name not in shapes:
            had = " (the first batch has it)" if ref is not None and name in ref else ""
            raise MissingError(f"{where}: hook {name!r} is missing{had}; it has {some_names(list(shapes))}")
        shape = tuple(shapes[name])
        kind = "tokens" if name == plan.tokens else "activation"
        if len(shape) < (2 if kind == "tokens" else 3):
            raise InvalidArrayError(f"{where}: hook {name!r} has shape {shape}; expected (sequence, position"
                                    f"{'' if kind == 'tokens' else ', feature…'})")
        counts[name] = shape[0]
        if ref is not None and name in ref and tuple(ref[name])[1:] != shape[1:]:
            raise InvalidArrayError(f"{where}: hook {name!r} has shape {shape}, the first batch "
                                    f"{tuple(ref[name])}: positions and widths must agree across batches")
    if len(set(counts.values())) > 1:
        a, b = sorted(counts.items(), key=lambda kv: kv[1])[:: max(1, len(counts) - 1)][:2]
        raise InvalidArrayError(f"{where}: hook {a[0]!r} has {a[1]} sequences but {b[0]!r} has {b[1]}")
    lengths = {n: tuple(shapes[n])[1] for n in plan.names()}
    if len(set(lengths.values())) > 1:
        lo, hi = min(lengths.items(), key=lambda kv: kv[1]), max(lengths.items(), key=lambda kv: kv[1])
        raise InvalidArrayError(f"{where}: hook {lo[0]!r} has {lo[1]} positions but {hi[0]!r} has {hi[1]}")
    flat: dict[str, int] = {}
    for lay, src in plan.layers:
        widths = {activation_dims(shapes[s])[2] for s in src}
        if len(widths) > 1:
            raise InvalidArrayError(f"{where}: hooks {list(src)} summed into {lay!r} have different widths")
        flat[lay] = widths.pop()
    if len(set(flat.values())) > 1:
        by_width = sorted(flat.items(), key=lambda kv: kv[1])
        (l1, w1), (l2, w2) = by_width[0], by_width[-1]
        src1, src2 = dict(plan.layers)[l1][0], dict(plan.layers)[l2][0]
        odd = next((n for n in (src1, src2) if "logit" in n.lower()), None)
        hint = (f"; if {odd!r} holds the model's logits, name it so: --logits {odd} (Python: logits=...)"
                if odd else "")
        raise InvalidArrayError(f"{where}: hook {src1!r} has width {w1} but {src2!r} has {w2}: every layer "
                                f"of hidden has one width (store the odd one as a site: sites=[...]){hint}")
    return next(iter(counts.values()))


# ---------------------------------------------------------------------- labels
@dataclass
class Labels:
    """Per-position labels (name -> (sequence, position) ints, -1 undefined), tokens, mask."""

    labels: dict[str, np.ndarray] = field(default_factory=dict)
    tokens: np.ndarray | None = None
    mask: np.ndarray | None = None


def label_arrays(labels: Mapping[str, Any] | Labels | None, tokens: Any, mask: Any) -> Labels:
    if isinstance(labels, Labels):
        out = labels
    else:
        out = Labels({k: np.asarray(to_numpy(v)) for k, v in (labels or {}).items()})
    if tokens is not None:
        out.tokens = np.asarray(to_numpy(tokens))
    if mask is not None:
        out.mask = np.asarray(to_numpy(mask)).astype(bool)
    return out


def check_labels(lab: Labels, n: int, L: int) -> None:
    for name, arr in [*lab.labels.items(), ("tokens", lab.tokens), ("mask", lab.mask)]:
        if arr is None:
            continue
        if arr.shape != (n, L):
            raise InvalidArrayError(f"{name} has shape {arr.shape}; the activations are {(n, L)} "
                                    "(sequence, position)")
        if arr.dtype.kind not in "iub":
            raise InvalidArrayError(f"{name} must be integers, got dtype {arr.dtype}")

