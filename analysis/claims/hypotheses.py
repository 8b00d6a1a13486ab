"""Declared claims as the tests of a group-sequential design
(:mod:`analysis.stats.sequential`): each claim's :class:`~analysis.stats.design.Hypothesis`
(its cells, the test and its value), a profile_match claim's single looks, and how many tests a
set of claims puts in each of the design's Holm families."""

from __future__ import annotations

from collections.abc import Sequence

from analysis.claims.cells import declared_cells
from analysis.claims.kinds import ProfileMatchClaim
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
    if cells is None and not claim.per_arch:
        cells = declared_cells(claim)
        if cells is None:
            raise DesignError(f"claim {claim.id!r}: its (task, arch, variant) cells cannot be told from its fields "
                              "(no arch); pass cells= (claim_cells(store, claim) reads them from a store)")
    return claim.hypothesis(tuple(cells or ()), effect)


def profile_hypotheses(claim: Claim, variant: str | None = None) -> list[Hypothesis]:
    """A profile_match claim's rows (one per architecture, ids ``"<id>[<arch>]"`` as
    :func:`analysis.claims.evaluate_claims` names them) as single-look hypotheses (``test =
    "exact"``): each reads its architecture's cells of the three tasks and is decided at its
    maximum by its permutation p, in the design's Holm-type family with all its level spent
    there (docs/sequential.md, "Profile-match claims")."""
    if not isinstance(claim, ProfileMatchClaim):
        raise DesignError(f"claim {claim.id!r} is a {claim.kind} claim; profile_hypotheses takes profile_match "
                          "claims (use from_claim)")
    return claim.row_hypotheses(variant)


def family_counts(claims: Sequence[Claim]) -> tuple[int, int, int]:
    """How many tests ``claims`` put in each of a group-sequential design's three Holm families
    (own, the margin's, the opposite side's): :func:`analysis.claims.verdicts.family_share`'s
    one rule, for that design."""
    return family_share(claims, design="sequential")
