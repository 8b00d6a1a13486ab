"""Parity: the running XOR of a bit string (paper A).

Tokens are bits. The label ``parity`` at position t is the XOR of bits 0..t (the paper's
1..t, counted from 1), so every position is labelled and the target is ``parity``.

Worked example (``length=6``)::

    position   0  1  2  3  4  5
    token      1  0  1  1  0  1
    parity     1  1  0  1  1  0

Choices that are **ours**: bits are i.i.d. Bernoulli(``p_one``) with ``p_one=0.5``; the
counterfactual flips one bit at a uniform position c and reports a label position drawn
uniformly from c..length-1 (flipping bit c flips every later parity, so the label differs
at each of them).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from capture.tasks.base import (
    CounterfactualBatch,
    TaskBatch,
    TaskConfig,
    batch,
    check_request,
    one_token_changed,
)

MIN_LENGTH = 1


class ParityConfig(TaskConfig):
    """Parity of a random bit string; every position carries the running XOR."""

    name: ClassVar[str] = "parity"
    p_one: float = Field(default=0.5, gt=0.0, lt=1.0, description="Probability that a bit is 1.")

    @property
    def vocab_size(self) -> int:
        """Two tokens: the bits 0 and 1."""
        return 2

    @property
    def n_classes(self) -> dict[str, int]:
        """``parity`` has 2 classes."""
        return {"parity": 2}

    @property
    def target(self) -> str:
        """The training label."""
        return "parity"

    def token_names(self) -> list[str]:
        """Printable name of each token id."""
        return ["0", "1"]


def running_parity(bits: np.ndarray) -> np.ndarray:
    """XOR of ``bits[:, 0..t]`` for every t.

    Parameters
    ----------
    bits : numpy.ndarray
        ``(n, length)`` of 0/1.

    Returns
    -------
    numpy.ndarray
        ``(n, length)`` int64 of 0/1.
    """
    return np.cumsum(bits, axis=1, dtype=np.int64) % 2


def generate(rng: np.random.Generator, n: int, length: int, **params: Any) -> TaskBatch:
    """Random bit strings with their running parity.

    ``tokens`` ``(n, length)`` in {0, 1}; label ``parity`` ``(n, length)``, defined everywhere.
    Needs ``length >= 1``; ``params``: fields of :class:`ParityConfig` (``p_one``). Arguments
    as every task's (:class:`~capture.tasks.base.TaskConfig`).
    """
    cfg = ParityConfig(**params)
    check_request(ParityConfig.name, rng, n, length, MIN_LENGTH)
    bits = (rng.random((n, length)) < cfg.p_one).astype(np.int64)
    return _labelled(bits)


def _labelled(bits: np.ndarray) -> TaskBatch:
    return batch(bits, {"parity": running_parity(bits)}, "parity")


def counterfactual(
    rng: np.random.Generator, n: int, length: int, **params: Any
) -> CounterfactualBatch:
    """Clean bit strings and copies with one bit flipped: ``corrupt_position`` c uniform in
    0..length-1; ``label_position`` uniform in c..length-1; ``sites`` empty."""
    def flip(bits: np.ndarray, rows: np.ndarray, at: np.ndarray) -> None:
        bits[rows, at] ^= 1

    return one_token_changed(rng, generate(rng, n, length, **params), flip, _labelled)
