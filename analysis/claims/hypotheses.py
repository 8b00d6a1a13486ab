"""Declared claims as the tests of a group-sequential design
(:mod:`analysis.stats.sequential`): each claim's :class:`~analysis.stats.design.Hypothesis`
(its cells, the test and its value), a profile_match claim's single looks, and how many tests a
set of claims puts in each of the design's Holm families."""

from __future__ import annotations

from collections.abc import Sequence

from analysis.claims.cells import declared_cells
from analysis.claims.spec import Claim
from analysis.claims.verdicts import family_share
from analysis.stats.design import Cell, DesignError, Hypothesis


def from_claim(claim: Claim, cells: Sequence[Cell] | None = None, effect: float | None = None) -> Hypothesis:
    """The sequential test of a declared claim (:class:`analysis.claims.spec.Claim`), with the
    cells it reads (given, or from its task, arch, variant and compared levels).

    A bound or readable_by claim decided by the share of seeds beyond its threshold
    (``claim.by_share``, docs/ceiling.md) is a share test (``statistic = "share"``, its ``q``):
    observed by its counts, tested by the exact boundaries of :mod:`analysis.stats.seedshare`;
    its ``effect``, if given, is the true share of seeds beyond the threshold. With
    ``statistic = "mean"`` it is the t over seeds, as every other claim.

    Raises
    ------
    DesignError
        For a profile_match claim (an exact permutation test with a row per architecture:
        :func:`profile_hypotheses`) and for a claim whose cells cannot be told from its fields
        (pass ``cells``)."""
    if claim.kind == "profile_match":
        raise DesignError(f"claim {claim.id!r}: a profile_match claim is an exact permutation test with a row per "
                          "architecture; use profile_hypotheses(claim): single looks at its maximum")
    if cells is None:
        cells = declared_cells(claim)
    if cells is None:
        raise DesignError(f"claim {claim.id!r}: its (task, arch, variant) cells cannot be told from its fields "
                          "(no arch); pass cells= (claim_cells(store, claim) reads them from a store)")
    m = claim.margin
    if claim.kind in ("bound", "readable_by"):
        greater = claim.kind == "readable_by" or claim.direction == "greater"
        if claim.by_share:
            return Hypothesis(id=claim.id, cells=tuple(cells), test="greater" if greater else "less",
                              value=float(claim.threshold or 0.0), effect=effect, statistic="share",
                              q=float(claim.q))
        return Hypothesis(id=claim.id, cells=tuple(cells), test="greater" if greater else "less",
                          value=float(claim.threshold or 0.0), effect=effect)
    if claim.kind == "equivalence":
        return Hypothesis(id=claim.id, cells=tuple(cells), test="within", margin=m, effect=effect)
    if claim.test_against == "margin" and m is not None:
        if claim.direction == "two-sided":
            return Hypothesis(id=claim.id, cells=tuple(cells), test="outside", margin=m, effect=effect)
        value = m if claim.direction == "greater" else -m
        return Hypothesis(id=claim.id, cells=tuple(cells), test=claim.direction, value=value, effect=effect)
    return Hypothesis(id=claim.id, cells=tuple(cells), test=claim.direction, effect=effect,
                      beyond_margin=m if m else None)


def profile_hypotheses(claim: Claim, variant: str | None = None) -> list[Hypothesis]:
    """A profile_match claim's rows (one per architecture, ids ``"<id>[<arch>]"`` as
    :func:`analysis.claims.evaluate_claims` names them) as single-look hypotheses (``test =
    "exact"``): each reads its architecture's cells of the three tasks and is decided at its
    maximum by its permutation p, in the design's Holm-type family with all its level spent
    there (docs/sequential.md, "Profile-match claims")."""
    if claim.kind != "profile_match":
        raise DesignError(f"claim {claim.id!r} is a {claim.kind} claim; profile_hypotheses takes profile_match "
                          "claims (use from_claim)")
    archs = claim.archs or ([claim.arch] if claim.arch else [])
    if not archs:
        raise DesignError(f"claim {claim.id!r}: a profile_match claim names no architecture; write archs = [...]")
    v = str(variant or claim.variant or "default")
    tasks = (claim.task, claim.matches, claim.differs_from)
    return [Hypothesis(id=f"{claim.id}[{a}]", cells=tuple((str(t), str(a), v) for t in tasks), test="exact")
            for a in archs]


def family_counts(claims: Sequence[Claim]) -> tuple[int, int, int]:
    """How many tests ``claims`` put in each of a group-sequential design's three Holm families
    (own, the margin's, the opposite side's): :func:`analysis.claims.verdicts.family_share`'s
    one rule, for that design."""
    return family_share(claims, design="sequential")
