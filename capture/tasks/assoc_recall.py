"""Associative recall (AR): look a key up among in-context key-value pairs (paper B).

Layout, as in Arora et al.'s tinylang::

    [BOS, k1, v1, ..., kp, vp, EOS, kq, vq, EOS, PAD ...]

Keys and values are drawn without replacement from disjoint vocabularies; the query key
kq is one of the p in-context keys, and vq is its value. Token ids: 0 ``PAD``, 1 ``BOS``,
2 ``EOS``, keys ``3 .. 3+n_keys-1``, then values.

The one label, ``answer``, is the index of vq among the values (``n_values`` classes). It
is defined *only at the query position* (the token kq after the divider): a causal model
predicts the next token, vq, from there; ``mask`` is true only there and ``answer`` is -1
elsewhere.

Worked example (``n_keys = n_values = 4``, ``length = 12``: p = 3 pairs, one PAD)::

    position  0    1   2   3   4   5   6   7    8   9   10   11
    token     BOS  k2  v0  k0  v3  k1  v1  EOS  k0  v3  EOS  PAD
    token id  1    5   7   3   10  4   8   2    3   10  2    0
    answer    -1   -1  -1  -1  -1  -1  -1  -1   3   -1  -1   -1

Choices that are **ours**:

- The number of pairs comes from the length: ``p = min((length - 5) // 2, n_keys - 1,
  n_values - 1)`` unless ``n_pairs`` is given; the rest of the sequence is PAD at the
  end. One key and one value always stay unused, so a counterfactual can draw a fresh one.
  Minimum length 7 (one pair).
- Defaults ``n_keys = n_values = 64`` suit a CPU; :meth:`AssocRecallConfig.paper` gives the
  paper's 4096 + 4096 vocabulary with 16 pairs.
- The query pair is uniform among the p pairs.
- Counterfactual, ``corrupt="key"`` (tinylang's intervention on the in-context key): the
  in-context key matching the query becomes a key that is not in the context. The query
  then has no match and the corrupted ``answer`` is undefined (-1, mask false at the
  query); what is measured is how much of the clean answer's probability patching
  restores. ``corrupt="value"``: the value paired with the query becomes an unused value,
  which is then the corrupted answer. The value token after the query is edited to match,
  after the label position, so a causal model has not seen it there.
- ``sites``: ``key`` and ``value`` (the in-context pair the query matches), ``divider``
  (the EOS before the query) and ``query``; ``label_position`` is the query.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from capture.tasks.base import (
    IGNORE,
    CounterfactualBatch,
    TaskBatch,
    TaskConfig,
    batch,
    check_request,
)
from store.errors import InvalidArgumentError

PAD, BOS, EOS = 0, 1, 2
N_SPECIAL = 3
MIN_LENGTH = 7


class AssocRecallConfig(TaskConfig):
    """Associative recall over in-context key-value pairs; label ``answer`` at the query."""

    name: ClassVar[str] = "assoc_recall"
    interchange_sites: ClassVar[tuple[str, ...]] = ("key", "value", "divider", "query")
    n_keys: int = Field(default=64, ge=2, description="Size of the key vocabulary.")
    n_values: int = Field(default=64, ge=2, description="Size of the value vocabulary.")
    n_pairs: int | None = Field(
        default=None, ge=1, description="Pairs per sequence; None = as many as the length allows."
    )
    corrupt: Literal["key", "value"] = Field(
        default="key", description="Which in-context token a counterfactual edits."
    )

    @model_validator(mode="after")
    def _pairs_leave_a_spare(self) -> AssocRecallConfig:
        most = min(self.n_keys, self.n_values) - 1
        if self.n_pairs is not None and self.n_pairs > most:
            raise ValueError(
                f"n_pairs={self.n_pairs} must be <= min(n_keys, n_values) - 1 = {most} "
                "(one key and one value stay unused for counterfactuals)"
            )
        return self

    @classmethod
    def paper(cls) -> AssocRecallConfig:
        """Arora et al.'s setting: 4096 keys, 4096 values, 16 pairs."""
        return cls(n_keys=4096, n_values=4096, n_pairs=16)

    @property
    def vocab_size(self) -> int:
        """PAD, BOS, EOS, the keys, then the values."""
        return N_SPECIAL + self.n_keys + self.n_values

    @property
    def n_classes(self) -> dict[str, int]:
        """``answer`` has one class per value."""
        return {"answer": self.n_values}

    @property
    def target(self) -> str:
        """The training label."""
        return "answer"

    def token_names(self) -> list[str]:
        """``PAD BOS EOS k0 .. v0 ..``."""
        return (["PAD", "BOS", "EOS"] + [f"k{i}" for i in range(self.n_keys)]
                + [f"v{i}" for i in range(self.n_values)])

    def pairs_for(self, length: int) -> int:
        """Number of in-context pairs at a sequence length."""
        if self.n_pairs is not None:
            return self.n_pairs
        return min((length - 5) // 2, self.n_keys - 1, self.n_values - 1)


def _unused(rng: np.random.Generator, used: np.ndarray, size: int) -> np.ndarray:
    """``(n,)``: per row, an id of ``range(size)`` not in ``used[row]``, uniformly.

    Draws the r-th free id directly (r uniform over the ``size - k`` free ones): walking the
    sorted used ids, each one at or below the candidate pushes it up by one. Memory is
    ``O(n k)``, not ``O(n size)``, so the paper's 4096-id vocabularies stay cheap.
    """
    n, k = used.shape
    candidate = rng.integers(0, size - k, size=n)
    for u in np.sort(used, axis=1).T:
        candidate += u <= candidate
    return candidate


def _draw_without_replacement(rng: np.random.Generator, n: int, size: int, k: int) -> np.ndarray:
    """``(n, k)``: per row, k distinct ids of ``range(size)`` in random order."""
    drawn = np.empty((n, k), dtype=np.int64)
    for j in range(k):
        drawn[:, j] = _unused(rng, drawn[:, :j], size)
    return drawn


def _layout(keys: np.ndarray, values: np.ndarray, query: np.ndarray, length: int,
            n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens ``(n, length)`` and the ``answer`` label for given pairs and query index."""
    n, p = keys.shape
    rows = np.arange(n)
    tokens = np.full((n, length), PAD, dtype=np.int64)
    tokens[:, 0] = BOS
    tokens[:, 1:2 * p + 1:2] = N_SPECIAL + keys
    tokens[:, 2:2 * p + 2:2] = N_SPECIAL + n_keys + values
    q = 2 * p + 2
    tokens[:, q - 1] = EOS
    tokens[:, q] = N_SPECIAL + keys[rows, query]
    tokens[:, q + 1] = N_SPECIAL + n_keys + values[rows, query]
    tokens[:, q + 2] = EOS
    answer = np.full((n, length), IGNORE, dtype=np.int64)
    answer[:, q] = values[rows, query]
    return tokens, answer


def _sample(rng: np.random.Generator, n: int, length: int, cfg: AssocRecallConfig):
    check_request(AssocRecallConfig.name, rng, n, length, MIN_LENGTH)
    p = cfg.pairs_for(length)
    if 2 * p + 5 > length:
        raise InvalidArgumentError(
            f"assoc_recall: n_pairs={p} needs length >= {2 * p + 5}, got {length}; "
            "lower n_pairs or raise the length"
        )
    keys = _draw_without_replacement(rng, n, cfg.n_keys, p)
    values = _draw_without_replacement(rng, n, cfg.n_values, p)
    query = rng.integers(0, p, size=n)
    return keys, values, query


def generate(rng: np.random.Generator, n: int, length: int, **params: Any) -> TaskBatch:
    """Key-value pairs, a query key, and its value.

    ``tokens`` ``(n, length)``; label ``answer`` ``(n, length)``, defined only at the query
    position ``2p + 2``. Needs ``length >= 7`` (and ``>= 2 * n_pairs + 5``); ``params``: fields
    of :class:`AssocRecallConfig`. Arguments as every task's
    (:class:`~capture.tasks.base.TaskConfig`).
    """
    cfg = AssocRecallConfig(**params)
    keys, values, query = _sample(rng, n, length, cfg)
    tokens, answer = _layout(keys, values, query, length, cfg.n_keys)
    return batch(tokens, {"answer": answer}, "answer")


def counterfactual(
    rng: np.random.Generator, n: int, length: int, **params: Any
) -> CounterfactualBatch:
    """Clean sequences and copies whose matching in-context key (or value) is replaced:
    ``corrupt_position``: the in-context key (``corrupt="key"``) or value (``corrupt="value"``)
    of the queried pair; ``label_position``: the query; ``sites``: ``key``, ``value``,
    ``divider``, ``query``."""
    cfg = AssocRecallConfig(**params)
    keys, values, query = _sample(rng, n, length, cfg)
    clean_tokens, clean_answer = _layout(keys, values, query, length, cfg.n_keys)
    clean = batch(clean_tokens, {"answer": clean_answer}, "answer")
    rows = np.arange(n)
    p = keys.shape[1]
    sites = {"key": 2 * query + 1, "value": 2 * query + 2,
             "divider": np.full(n, 2 * p + 1), "query": np.full(n, 2 * p + 2)}
    sites = {name: pos.astype(np.int64) for name, pos in sites.items()}
    tokens = clean.tokens.copy()
    answer = clean.labels["answer"].copy()
    if cfg.corrupt == "key":
        tokens[rows, sites["key"]] = N_SPECIAL + _unused(rng, keys, cfg.n_keys)
        answer[rows, sites["query"]] = IGNORE
    else:
        fresh = _unused(rng, values, cfg.n_values)
        tokens[rows, sites["value"]] = N_SPECIAL + cfg.n_keys + fresh
        tokens[rows, sites["query"] + 1] = N_SPECIAL + cfg.n_keys + fresh
        answer[rows, sites["query"]] = fresh
    corrupted = batch(tokens, {"answer": answer}, "answer")
    return CounterfactualBatch(clean, corrupted, sites[cfg.corrupt], sites["query"], sites)
