"""S3 composition: the running product of permutations of three objects (paper A).

Tokens are the six elements of the symmetric group S3. The label ``state`` at position t
is the product g_0 · g_1 · … · g_t (6 classes), so every position is labelled and the
target is ``state``. S3 is not commutative: the order of the factors matters.

Conventions (**ours**; the paper does not fix them):

- Element ids, each a permutation written in one-line notation ``[g(0), g(1), g(2)]``::

      id  one-line   cycles
      0   [0 1 2]    e
      1   [0 2 1]    (1 2)
      2   [1 0 2]    (0 1)
      3   [1 2 0]    (0 1 2)
      4   [2 0 1]    (0 2 1)
      5   [2 1 0]    (0 2)

- Composition applies the right factor first: ``(g · h)(i) = g(h(i))``. The running
  product grows on the right: ``state_t = state_{t-1} · g_t``.
- Tokens are i.i.d. uniform over the six elements.
- The counterfactual replaces the element at a uniform position c by a uniformly drawn
  different element; the label position is uniform in c..length-1. In a group
  ``a · g · b == a · g' · b`` only if ``g == g'``, so every state from c on changes.

Worked example (``length=6``)::

    position   0  1  2  3  4  5
    token      3  1  3  5  0  2
    state      3  2  1  3  3  5

e.g. at position 1: ``[1 2 0] · [0 2 1]`` maps 0 -> 1, 1 -> 0, 2 -> 2, i.e. ``[1 0 2]`` = 2.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from capture.tasks.base import (
    CounterfactualBatch,
    TaskBatch,
    TaskConfig,
    batch,
    check_request,
    one_token_changed,
)

MIN_LENGTH = 1

PERMUTATIONS = np.array(
    [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]], dtype=np.int64
)
"""``(6, 3)``: row g is the permutation with id g, in one-line notation."""


def _product_table() -> np.ndarray:
    index = {tuple(p): i for i, p in enumerate(PERMUTATIONS.tolist())}
    return np.array(
        [[index[tuple(PERMUTATIONS[g][PERMUTATIONS[h]].tolist())] for h in range(6)]
         for g in range(6)],
        dtype=np.int64,
    )


PRODUCT = _product_table()
"""``(6, 6)``: ``PRODUCT[g, h]`` is the id of ``g · h``, with ``(g · h)(i) = g(h(i))``."""


class S3Config(TaskConfig):
    """Running product of uniformly drawn S3 elements; every position carries the product."""

    name: ClassVar[str] = "s3"

    @property
    def vocab_size(self) -> int:
        """Six tokens, one per group element."""
        return 6

    @property
    def n_classes(self) -> dict[str, int]:
        """``state`` has 6 classes."""
        return {"state": 6}

    @property
    def target(self) -> str:
        """The training label."""
        return "state"

    def token_names(self) -> list[str]:
        """Each element in one-line notation, e.g. ``"120"`` for ``[1 2 0]``."""
        return ["".join(map(str, p)) for p in PERMUTATIONS.tolist()]


def running_product(elements: np.ndarray) -> np.ndarray:
    """``g_0 · … · g_t`` for every t.

    Parameters
    ----------
    elements : numpy.ndarray
        ``(n, length)`` element ids in 0..5.

    Returns
    -------
    numpy.ndarray
        ``(n, length)`` int64 element ids.
    """
    state = np.empty_like(elements, dtype=np.int64)
    state[:, 0] = elements[:, 0]
    for t in range(1, elements.shape[1]):
        state[:, t] = PRODUCT[state[:, t - 1], elements[:, t]]
    return state


def generate(rng: np.random.Generator, n: int, length: int, **params: Any) -> TaskBatch:
    """Uniform S3 elements with their running product.

    ``tokens`` ``(n, length)`` in 0..5; label ``state`` ``(n, length)``, defined everywhere.
    Needs ``length >= 1``; ``params``: fields of :class:`S3Config` (none). Arguments as every
    task's (:class:`~capture.tasks.base.TaskConfig`).
    """
    S3Config(**params)
    check_request(S3Config.name, rng, n, length, MIN_LENGTH)
    elements = rng.integers(0, 6, size=(n, length))
    return _labelled(elements)


def _labelled(elements: np.ndarray) -> TaskBatch:
    return batch(elements, {"state": running_product(elements)}, "state")


def counterfactual(
    rng: np.random.Generator, n: int, length: int, **params: Any
) -> CounterfactualBatch:
    """Clean sequences and copies with one element replaced by a different one:
    ``corrupt_position`` c uniform in 0..length-1; ``label_position`` uniform in c..length-1;
    ``sites`` empty."""
    def replace(elements: np.ndarray, rows: np.ndarray, at: np.ndarray) -> None:
        # Adding 1..5 modulo 6 always lands on a different element, uniformly.
        elements[rows, at] = (elements[rows, at] + rng.integers(1, 6, size=n)) % 6

    return one_token_changed(rng, generate(rng, n, length, **params), replace, _labelled)
