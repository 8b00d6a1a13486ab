"""Dyck-k: bracket sequences of k types with bounded depth (paper A).

Tokens: id ``j`` opens a bracket of type j, id ``k + j`` closes one (``0..k-1`` open,
``k..2k-1`` close). With the default k=2, ``( [ ) ]`` are ids ``0 1 2 3``.

Labels, both read *after* the token at position t:

- ``depth``: number of open brackets, 0..max_depth (``max_depth + 1`` classes);
- ``top``: type of the innermost open bracket plus one, 0 when nothing is open
  (``k + 1`` classes). **The training target is ``top``.**

Worked example (k=2)::

    position   0  1  2  3  4  5  6
    token      (  [  ]  (  )  )  [
    token id   0  1  3  0  2  2  1
    depth      1  2  1  2  1  0  1
    top        1  2  1  1  1  0  2

Choices that are **ours** (the paper's exact generator and label are not public):

- k=2 and max_depth=10 by default. Each step opens a bracket with probability ``p_open``
  (0.5), except that it must open at depth 0 and must close at ``max_depth``; an opened
  bracket's type is uniform over the k types; a close always matches the innermost open
  bracket. So every prefix is valid and within the depth bound at any length, but a
  sequence need not end balanced.
- Counterfactual: draw a label position t uniformly among positions with depth > 0; the
  innermost open bracket there (position c <= t) gets a uniformly drawn different type.
  To keep the corrupted sequence well formed, its matching close bracket, if the sequence
  has one, is retyped too; that close lies after t, so a causal model has not seen it at t.
  ``top`` differs at t (and wherever c is the innermost open bracket); ``depth`` is
  unchanged. Needs k >= 2.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import numpy as np
from pydantic import Field

from capture.tasks.base import (
    CounterfactualBatch,
    TaskBatch,
    TaskConfig,
    batch,
    check_request,
    random_position_from,
)
from store.errors import InvalidArgumentError

MIN_LENGTH = 1
_BRACKETS = ("()", "[]", "{}", "<>")


class DyckConfig(TaskConfig):
    """Bounded-depth Dyck-k bracket sequences; labels ``depth`` and ``top`` (the target)."""

    name: ClassVar[str] = "dyck"
    k: int = Field(default=2, ge=1, le=64, description="Number of bracket types.")
    max_depth: int = Field(
        default=10, ge=1, le=1000, description="Largest number of open brackets."
    )
    p_open: float = Field(
        default=0.5, gt=0.0, lt=1.0,
        description="Probability of opening when both moves are allowed.",
    )

    @property
    def vocab_size(self) -> int:
        """``2k`` tokens: k opening, then k closing brackets."""
        return 2 * self.k

    @property
    def n_classes(self) -> dict[str, int]:
        """``depth``: ``max_depth + 1`` classes; ``top``: ``k + 1`` classes."""
        return {"depth": self.max_depth + 1, "top": self.k + 1}

    @property
    def target(self) -> str:
        """The training label."""
        return "top"

    def token_names(self) -> list[str]:
        """Bracket characters for k <= 4, else ``(j`` / ``)j``."""
        if self.k <= len(_BRACKETS):
            pairs = _BRACKETS[: self.k]
            return [p[0] for p in pairs] + [p[1] for p in pairs]
        return [f"({j}" for j in range(self.k)] + [f"){j}" for j in range(self.k)]


class _Walk(NamedTuple):
    """A simulated batch and the bracket structure behind it; all ``(n, length)`` int64."""

    tokens: np.ndarray
    depth: np.ndarray
    top: np.ndarray
    innermost: np.ndarray  # position of the innermost open bracket after t, -1 if none
    match: np.ndarray  # at an opening bracket: position of its close, -1 if never closed


def _walk(rng: np.random.Generator, n: int, length: int, cfg: DyckConfig) -> _Walk:
    rows = np.arange(n)
    stack_type = np.zeros((n, cfg.max_depth), dtype=np.int64)  # (sequence, stack slot)
    stack_pos = np.zeros((n, cfg.max_depth), dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    out = _Walk(*(np.full((n, length), -1, dtype=np.int64) for _ in range(5)))
    for t in range(length):
        wants_open = rng.random(n) < cfg.p_open
        new_type = rng.integers(0, cfg.k, size=n)
        opens = (depth == 0) | ((depth < cfg.max_depth) & wants_open)
        o, c = rows[opens], rows[~opens]
        stack_type[o, depth[o]] = new_type[o]
        stack_pos[o, depth[o]] = t
        out.tokens[o, t] = new_type[o]
        depth[o] += 1
        depth[c] -= 1
        out.tokens[c, t] = cfg.k + stack_type[c, depth[c]]
        out.match[c, stack_pos[c, depth[c]]] = t
        slot = np.maximum(depth - 1, 0)
        out.depth[:, t] = depth
        out.top[:, t] = np.where(depth > 0, stack_type[rows, slot] + 1, 0)
        out.innermost[:, t] = np.where(depth > 0, stack_pos[rows, slot], -1)
    return out


def generate(rng: np.random.Generator, n: int, length: int, **params: Any) -> TaskBatch:
    """Random bounded-depth bracket sequences with their stack labels.

    ``tokens`` ``(n, length)`` in ``0..2k-1``; labels ``depth`` and ``top`` ``(n, length)``,
    defined everywhere; target ``top``. Needs ``length >= 1``; ``params``: fields of
    :class:`DyckConfig` (``k``, ``max_depth``, ``p_open``). Arguments as every task's
    (:class:`~capture.tasks.base.TaskConfig`).
    """
    cfg = DyckConfig(**params)
    check_request(DyckConfig.name, rng, n, length, MIN_LENGTH)
    walk = _walk(rng, n, length, cfg)
    return batch(walk.tokens, {"depth": walk.depth, "top": walk.top}, "top")


def counterfactual(
    rng: np.random.Generator, n: int, length: int, **params: Any
) -> CounterfactualBatch:
    """Clean sequences and copies where one open bracket (and its close) changes type:
    ``label_position`` t uniform over positions with depth > 0; ``corrupt_position`` the
    innermost open bracket at t; ``sites`` empty."""
    cfg = DyckConfig(**params)
    if cfg.k < 2:
        raise InvalidArgumentError("dyck: a counterfactual needs k >= 2 bracket types to swap; got k=1")
    check_request(DyckConfig.name, rng, n, length, MIN_LENGTH)
    walk = _walk(rng, n, length, cfg)
    rows = np.arange(n)
    label_pos = random_position_from(rng, walk.depth > 0)
    corrupt = walk.innermost[rows, label_pos]
    old_type = walk.tokens[rows, corrupt]
    new_type = (old_type + rng.integers(1, cfg.k, size=n)) % cfg.k
    tokens = walk.tokens.copy()
    tokens[rows, corrupt] = new_type
    close = walk.match[rows, corrupt]
    closed = close >= 0
    tokens[rows[closed], close[closed]] = cfg.k + new_type[closed]
    # Only positions whose innermost open bracket is the edited one change their top.
    top = np.where(walk.innermost == corrupt[:, None], new_type[:, None] + 1, walk.top)
    clean = batch(walk.tokens, {"depth": walk.depth, "top": walk.top}, "top")
    corrupted = batch(tokens, {"depth": walk.depth, "top": top}, "top")
    return CounterfactualBatch(clean, corrupted, corrupt, label_pos, {})
