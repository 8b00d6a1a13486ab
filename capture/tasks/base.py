"""What every task returns, and the checks every task shares.

A task turns a ``numpy.random.Generator`` into a :class:`TaskBatch`: integer tokens, one
integer array per named label (``-1`` where that label is undefined), and the mask of
positions that carry the *training* label. :class:`CounterfactualBatch` pairs a clean batch
with a minimally edited copy for activation patching.

Each task module (``parity``, ``s3``, ``dyck``, ``code_depth``, ``assoc_recall``,
``treecall``) exposes two pure functions, ``generate(rng, n, length, **params)`` and
``counterfactual(rng, n, length, **params)``, and a typed config class built on
:class:`TaskConfig`. Randomness comes only from the Generator passed in: nothing here reads
or seeds a global random state.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from store.errors import InvalidArgumentError

IGNORE = -1
"""The value of a label at a position where it is undefined."""


@dataclass(frozen=True)
class TaskBatch:
    """A batch of sequences with per-position labels.

    Attributes
    ----------
    tokens : numpy.ndarray
        ``(n, length)`` int64, values in ``[0, vocab_size)``.
    labels : dict of str to numpy.ndarray
        Label name -> ``(n, length)`` int64; ``-1`` where the label is undefined.
    mask : numpy.ndarray
        ``(n, length)`` bool: positions where the training target label is defined,
        i.e. ``labels[target] != -1``.
    target : str
        Name of the label the model is trained on (a key of ``labels``).
    """

    tokens: np.ndarray
    labels: dict[str, np.ndarray]
    mask: np.ndarray
    target: str

    def __post_init__(self) -> None:
        shape = self.tokens.shape
        if self.tokens.ndim != 2 or self.tokens.dtype != np.int64:
            raise ValueError(
                f"tokens must be a 2-d int64 array, got {self.tokens.ndim}-d {self.tokens.dtype}"
            )
        if self.target not in self.labels:
            raise ValueError(
                f"target {self.target!r} is not a label; labels are {sorted(self.labels)}"
            )
        for name, values in self.labels.items():
            if values.shape != shape or values.dtype != np.int64:
                raise ValueError(
                    f"label {name!r} must be int64 of shape {shape}, "
                    f"got {values.dtype} of shape {values.shape}"
                )
        if self.mask.shape != shape or self.mask.dtype != np.bool_:
            raise ValueError(f"mask must be bool of shape {shape}, got {self.mask.dtype}")
        if not np.array_equal(self.mask, self.labels[self.target] != IGNORE):
            raise ValueError(f"mask must be exactly where label {self.target!r} is defined")

    @property
    def n(self) -> int:
        """Number of sequences."""
        return int(self.tokens.shape[0])

    @property
    def length(self) -> int:
        """Number of positions per sequence."""
        return int(self.tokens.shape[1])


@dataclass(frozen=True)
class CounterfactualBatch:
    """A clean batch, a minimally edited copy, and where the edit and its effect sit.

    Attributes
    ----------
    clean, corrupted : TaskBatch
        Same shapes; ``corrupted`` differs from ``clean`` at ``corrupt_position`` (and,
        for some tasks, at positions after ``label_position`` that keep the corrupted
        sequence well formed; each task documents which).
    corrupt_position : numpy.ndarray
        ``(n,)`` int64: the token position that was edited.
    label_position : numpy.ndarray
        ``(n,)`` int64: a position at or after ``corrupt_position`` where the target label
        differs between clean and corrupted. The clean label there is always defined; the
        corrupted one may be -1 where the edit leaves no answer (associative recall with
        ``corrupt="key"``).
    sites : dict of str to numpy.ndarray
        Named positions per sequence, each ``(n,)`` int64 (e.g. for associative recall
        ``key``, ``value``, ``divider``, ``query``); may be empty.
    """

    clean: TaskBatch
    corrupted: TaskBatch
    corrupt_position: np.ndarray
    label_position: np.ndarray
    sites: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = self.clean.n
        if self.corrupted.tokens.shape != self.clean.tokens.shape:
            raise ValueError("clean and corrupted batches must have the same shape")
        for name, pos in {"corrupt_position": self.corrupt_position,
                          "label_position": self.label_position, **self.sites}.items():
            if pos.shape != (n,) or pos.dtype != np.int64:
                raise ValueError(f"{name} must be int64 of shape ({n},), got {pos.shape}")
        rows = np.arange(n)
        target = self.clean.target
        at_label = (self.clean.labels[target][rows, self.label_position],
                    self.corrupted.labels[target][rows, self.label_position])
        if np.any(at_label[0] == at_label[1]):
            raise ValueError(f"label {target!r} must differ at label_position in every row")


class TaskConfig(BaseModel):
    """Shared behaviour of the typed task configs (one subclass per task module).

    Subclasses set ``name`` and define ``vocab_size``, ``n_classes``, ``target`` and
    ``token_names``; ``generate`` and ``counterfactual`` are those of the module that defines
    the subclass.

    Each task module's functions ``generate(rng, n, length, **params) -> TaskBatch`` and
    ``counterfactual(rng, n, length, **params) -> CounterfactualBatch`` (which the methods of
    the same names call with the config's fields as ``params``) take ``rng``, a
    ``numpy.random.Generator`` and their only source of randomness, ``n`` sequences and
    ``length`` positions (checked by :func:`check_request`); each function's docstring says
    what its batch holds and the task's minimum length.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: ClassVar[str] = "task"
    #: The named positions of the task's counterfactual pairs (``CounterfactualBatch.sites``),
    #: which interchange interventions patch; empty for a task without them (no interchange).
    interchange_sites: ClassVar[tuple[str, ...]] = ()

    @property
    def label_names(self) -> tuple[str, ...]:
        """Names of the labels every batch of this task carries."""
        return tuple(self.n_classes)  # type: ignore[attr-defined]

    def build(self, seed: int, n: int, length: int) -> TaskBatch:
        """``generate`` with a fresh ``numpy.random.default_rng(seed)``.

        Returns
        -------
        TaskBatch
            ``(n, length)`` tokens and labels.
        """
        return self.generate(np.random.default_rng(seed), n, length)

    def generate(self, rng: np.random.Generator, n: int, length: int) -> TaskBatch:
        """The task module's ``generate`` with this config's fields as ``params``."""
        return sys.modules[type(self).__module__].generate(rng, n, length, **self.model_dump())

    def counterfactual(self, rng: np.random.Generator, n: int, length: int) -> CounterfactualBatch:
        """The task module's ``counterfactual`` with this config's fields as ``params``."""
        return sys.modules[type(self).__module__].counterfactual(rng, n, length, **self.model_dump())


def check_request(task: str, rng: object, n: int, length: int, min_length: int) -> None:
    """Validate the arguments every generator takes; raise with the fix in the message.

    Raises
    ------
    TypeError
        If ``rng`` is not a ``numpy.random.Generator``.
    store.errors.InvalidArgumentError
        (a ValueError) if ``n < 1`` or ``length < min_length``.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"{task}: rng must be a numpy.random.Generator, got {type(rng).__name__}; "
            "pass numpy.random.default_rng(seed)"
        )
    if int(n) < 1:
        raise InvalidArgumentError(f"{task}: n must be >= 1 sequences, got {n}; ask for at least one")
    if int(length) < min_length:
        raise InvalidArgumentError(
            f"{task}: length must be >= {min_length} (the task's minimum), got {length}"
        )


def batch(tokens: np.ndarray, labels: dict[str, np.ndarray], target: str) -> TaskBatch:
    """Build a :class:`TaskBatch` with int64 arrays and the mask of the target label."""
    labels = {name: np.asarray(values, dtype=np.int64) for name, values in labels.items()}
    return TaskBatch(
        tokens=np.asarray(tokens, dtype=np.int64),
        labels=labels,
        mask=labels[target] != IGNORE,
        target=target,
    )


def random_position_from(rng: np.random.Generator, allowed: np.ndarray) -> np.ndarray:
    """One uniformly drawn allowed position per row.

    Parameters
    ----------
    allowed : numpy.ndarray
        ``(n, length)`` bool; every row must have at least one True.

    Returns
    -------
    numpy.ndarray
        ``(n,)`` int64 column indices.
    """
    # Uniform keys in [0, 1) on allowed cells and -1 elsewhere: the row argmax is uniform
    # over the allowed cells.
    keys = np.where(allowed, rng.random(allowed.shape), -1.0)
    return np.argmax(keys, axis=1).astype(np.int64)


def one_token_changed(
    rng: np.random.Generator,
    clean: TaskBatch,
    change: Callable[[np.ndarray, np.ndarray, np.ndarray], None],
    relabel: Callable[[np.ndarray], TaskBatch],
) -> CounterfactualBatch:
    """Copies of ``clean`` with one token changed at a uniform position c per row, and a label
    position uniform in c..length-1 (for tasks whose label at every later position depends on
    every earlier token).

    ``change(tokens, rows, c)`` edits the copied tokens in place (drawing from ``rng`` if it
    needs to, after c and the label position are drawn); ``relabel(tokens)`` is the batch of
    the changed sequences. ``sites`` is empty.
    """
    n, length = clean.n, clean.length
    rows = np.arange(n)
    corrupt = rng.integers(0, length, size=n)
    label_pos = rng.integers(corrupt, length)
    tokens = clean.tokens.copy()
    change(tokens, rows, corrupt)
    return CounterfactualBatch(clean, relabel(tokens), corrupt.astype(np.int64),
                               label_pos.astype(np.int64), {})
