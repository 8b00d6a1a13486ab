"""A kind of claim added from outside the packages (docs/guide/extending.md): one class,
registered, then read from a claims table, evaluated on a store, Holm-corrected with the others
and refused where malformed like any kind."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import pytest

import analysis.claims.kinds as kinds
import analysis.claims.kinds.base as base
from analysis.claims import ClaimError, evaluate_claims, parse_claims
from analysis.claims.kinds import NonInferiorityClaim, register_kind
from analysis.stats.decision import Verdict
from tests.analysis.claims.test_non_inferiority import _claim, planted  # noqa: F401  (the planted store)


class SuperiorityClaim(NonInferiorityClaim):
    """Better than the reference by more than the margin: one-sided against +margin."""

    kind: Literal["superiority"] = "superiority"  # type: ignore[assignment]
    example: ClassVar[str] = ""

    @property
    def bound_value(self) -> float:
        m = float(self.margin or 0.0)
        return m if self.greater else -m

    def decide(self, row: Mapping[str, Any], adj: Mapping[str, float]) -> tuple[str, str, str]:
        if adj["other"] < 0.05:
            return Verdict.SUPPORTED, "", f"better than {self.reference} by more than {self.margin:g}"
        return Verdict.INCONCLUSIVE, "", f"not shown better than {self.reference} by more than {self.margin:g}"


@pytest.fixture
def registered(monkeypatch):
    """The registry with the new kind, restored afterwards."""
    owned = copy.deepcopy(base.OWNED)
    monkeypatch.setattr(kinds, "KINDS", dict(kinds.KINDS))
    monkeypatch.setattr(kinds, "OWNED", owned)
    monkeypatch.setattr(base, "OWNED", owned)
    register_kind(SuperiorityClaim)


def test_a_kind_from_outside_is_read_evaluated_and_corrected_with_the_others(planted, registered):  # noqa: F811
    claims = parse_claims([_claim("s3-better", "s3", kind="superiority", direction="less", margin=0.002),
                           _claim("s3", "s3")])
    assert type(claims[0]) is SuperiorityClaim
    res = evaluate_claims(planted, claims)
    # no_conv loses 1 point: "lower by more than 0.2 points" (direction less) is supported, beside
    # the non-inferiority claim, both at their Holm steps of a family of two
    assert list(res.verdict.values) == ["supported", "supported"], list(res.reason.values)
    assert sorted(float(v) for v in res.level.values) == [0.025, 0.05]
    with pytest.raises(ClaimError, match="a superiority claim needs margin"):
        parse_claims([_claim("x", "s3", kind="superiority", margin=None)])


def test_without_registering_it_the_kind_is_refused_naming_the_kinds():
    with pytest.raises(ClaimError, match="'superiority' is not a kind of claim; the kinds are difference"):
        parse_claims([_claim("x", "s3", kind="superiority")])


def test_a_name_taken_by_another_class_is_refused(registered):
    class Other(SuperiorityClaim):
        kind: Literal["superiority"] = "superiority"  # type: ignore[assignment]

    with pytest.raises(ValueError, match="kind 'superiority' is already SuperiorityClaim"):
        register_kind(Other)
