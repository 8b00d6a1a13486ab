"""One claim's test results on their way to its verdict: :class:`ClaimRow`.

A row is a dict of the claims table's columns by name (``estimate``, ``lower``, ``p``, ...: the
names of :data:`analysis.claims.evaluate.NUMERIC` and ``TEXT``), which the evaluation of each
kind fills, and what deciding it needs beside those columns, typed and never stored:

* ``crosscheck``: the cross-check model's tests (``estimate``, ``lower``, ``upper``, ``p``, and
  ``se``/``df`` where it has them), decided like the row's own to give its cross-check verdict;
* ``crosscheck_verdict``: a cross-check verdict taken as given (a part's table), where there is
  no ``crosscheck`` to decide;
* ``kept``: ``(verdict, outcome, reason)`` a part's group-sequential design decided: kept as it
  is, its tests counted at p = 1;
* ``seed_values``: the per-seed values a share-of-seeds test counts (bound and readable_by
  claims), so a table decided again at another Holm level keeps the values it was decided on;
* ``undecidable``: why no count of the seeds held can decide the claim at its level ('' when
  one can).

:func:`~analysis.claims.evaluate.verdict_table` turns a list of rows into the claims Dataset,
once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np


class ClaimRow(dict[str, Any]):
    """A claim's columns by name, with its typed decision inputs (see the module's docs)."""

    def __init__(self, columns: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), *,
                 crosscheck: Mapping[str, float] | None = None, crosscheck_verdict: str = "",
                 kept: tuple[str, str, str] | None = None, seed_values: np.ndarray | None = None,
                 undecidable: str = "") -> None:
        super().__init__(columns)
        self.crosscheck: dict[str, float] | None = None if crosscheck is None else dict(crosscheck)
        self.crosscheck_verdict = crosscheck_verdict
        self.kept = kept
        self.seed_values = seed_values
        self.undecidable = undecidable

    def _fields(self) -> dict[str, Any]:
        return {"crosscheck": self.crosscheck, "crosscheck_verdict": self.crosscheck_verdict,
                "kept": self.kept, "seed_values": self.seed_values, "undecidable": self.undecidable}

    def with_columns(self, columns: Mapping[str, Any]) -> ClaimRow:
        """A copy with ``columns`` set (the decision inputs kept)."""
        return ClaimRow({**self, **columns}, **self._fields())

    def under(self, defaults: Mapping[str, Any]) -> ClaimRow:
        """A copy with every column of ``defaults`` this row does not set."""
        return ClaimRow({**defaults, **self}, **self._fields())

    def __or__(self, other: Mapping[str, Any]) -> ClaimRow:  # type: ignore[override]
        return self.with_columns(other)

    def __repr__(self) -> str:
        extra = {k: v for k, v in self._fields().items() if v not in (None, "")}
        return f"ClaimRow({dict.__repr__(self)}, {extra})"


def as_row(row: Mapping[str, Any]) -> ClaimRow:
    """``row`` itself when it is a :class:`ClaimRow`, else its columns as one (no decision inputs)."""
    return row if isinstance(row, ClaimRow) else ClaimRow(row)
