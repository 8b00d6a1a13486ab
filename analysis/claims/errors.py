"""The errors of claims: one that is malformed (:class:`ClaimError`), one the stored results
cannot answer (:class:`NotEvaluable`), and the two of choosing what a claim reads
(:class:`AmbiguousResultError`, :class:`StaleResultError`)."""

from __future__ import annotations

from store import LayerstateError


class ClaimError(LayerstateError, ValueError):
    """A claim that is malformed or cannot be evaluated as written (one line, with the fix)."""


class NotEvaluable(ClaimError):
    """The stored results cannot answer a well-formed claim (e.g. fewer than 2 seeds with a
    defined value): the claim is reported with verdict ``not evaluable`` and the reason,
    while the other claims are still evaluated."""


class AmbiguousResultError(ClaimError):
    """Several stored probe results hold every run a claim reads of one task and the claim names
    none: ``task``, ``count`` and ``listed`` (the candidates, in words), ``suggested`` (the short
    name of one)."""

    def __init__(self, message: str, *, task: str, count: int, listed: str, suggested: str) -> None:
        super().__init__(message)
        self.task, self.count, self.listed, self.suggested = task, count, listed, suggested


class StaleResultError(ClaimError):
    """A stored result a claim reads lacks runs that the store holds in the claim's cells (it was
    computed before they were trained): deciding on it would silently use fewer seeds. The message
    names the command that brings the result up to date."""
