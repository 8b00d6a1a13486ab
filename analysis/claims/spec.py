"""What a claim is, as the rest of the package reads it: :data:`Claim` (a claim of any kind, one
class per kind in :mod:`analysis.claims.kinds`), how a claims file is read into them
(:func:`parse_claims`), the verdicts a claim can get, and the constants of the tests (alpha, the
default and cross-check models)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from analysis.claims.errors import AmbiguousResultError, ClaimError, NotEvaluable, StaleResultError
from analysis.claims.kinds import KINDS, Claim, ClaimBase, kind_class, make_claim
from analysis.claims.kinds.base import (
    ABLATION,
    ALPHA,
    CROSSCHECK,
    DEFAULT_MODEL,
    LAYERED,
    MODEL_NAMES,
)
from analysis.stats.decision import Verdict
from store.errors import validation_problems

#: The fields each kind of claim needs.
REQUIRED: dict[str, tuple[str, ...]] = {name: cls.required for name, cls in KINDS.items()}

#: The verdicts a claim can get, and when (docs/claims.md is written from these).
OUTCOMES: dict[str, str] = {
    Verdict.SUPPORTED: "the claim's own test passes after Holm's correction: a difference from 0 in the "
                 "claimed direction (and, with a margin, not within it); an equivalence claim's "
                 "interval inside the margin; a bound's one-sided bound beyond the threshold",
    Verdict.NEGLIGIBLE: "a difference claim with a margin: different from 0, but within the margin (real, too "
                  "small to matter)",
    Verdict.EQUIVALENT: "a difference claim with a margin: not different from 0, and within the margin",
    Verdict.INCONCLUSIVE: "neither test decides: the interval is too wide for the seeds there are (the power "
                    "and the minimum detectable effect say how many more would help)",
    Verdict.CONTRADICTED: "the interval lies wholly on the side opposite to the claim (or outside an "
                    "equivalence margin), and the test of that side survives Holm's correction",
    Verdict.NOT_EVALUABLE: "the stored results cannot answer the claim (e.g. fewer than 2 seeds with a value); "
                     "the reason is given and the other claims are still evaluated",
}


def parse_claims(items: list[dict[str, Any]], source: str | None = None) -> list[Claim]:
    """Validate a list of claim tables; one-line errors name the claim and the field.

    Raises
    ------
    ClaimError
        ``"<source>: claim '<id>': <field>: <problem>"`` (no source prefix when not given).
    """
    prefix = f"{source}: " if source else ""
    if not isinstance(items, list):
        raise ClaimError(f"{prefix}claims must be a list of [[claims]] tables")
    out, seen = [], set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ClaimError(f"{prefix}claim #{i + 1} is not a table; write it as a [[claims]] table")
        name = item.get("id", f"#{i + 1}")
        if "kind" not in item:
            raise ClaimError(f"{prefix}claim {name!r}: kind: missing; the kinds are {', '.join(KINDS)}")
        try:
            cls = kind_class(item["kind"])
        except ValueError as exc:
            raise ClaimError(f"{prefix}claim {name!r}: kind: {exc}") from None
        try:
            claim = make_claim(**item)
        except ValidationError as exc:
            raise ClaimError(f"{prefix}claim {name!r}: {validation_problems(exc, cls.model_fields)[0]}") from None
        if claim.id in seen:
            raise ClaimError(f"{prefix}claim id {claim.id!r} is used twice; ids must be unique")
        seen.add(claim.id)
        out.append(claim)
    return out


def claim_archs(claim: Claim) -> list[str]:
    """The architectures a claim names: its ``archs``, else its one ``arch`` (none without)."""
    return list(claim.archs or ([claim.arch] if claim.arch else []))


def claim_rows(claim: Claim) -> list[str]:
    """The row ids a claim evaluates to: its id, or ``id[arch]`` per architecture of a
    profile_match claim (as :func:`~analysis.claims.evaluate.evaluate_claims` names them)."""
    return claim.row_ids()


__all__ = ["ABLATION", "ALPHA", "CROSSCHECK", "DEFAULT_MODEL", "LAYERED",
           "MODEL_NAMES", "OUTCOMES", "REQUIRED", "AmbiguousResultError", "Claim", "ClaimBase", "ClaimError",
           "NotEvaluable", "StaleResultError", "Verdict", "claim_archs", "claim_rows", "make_claim", "parse_claims"]
