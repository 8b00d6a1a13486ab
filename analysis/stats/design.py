"""A group-sequential design over seeds and the hypotheses it tests, as declared before any
result: the stages (:class:`Design`), each claim's test and cells (:class:`Hypothesis`), and
the one-line error a malformed declaration gets (:class:`DesignError`). The boundaries are
:mod:`analysis.stats.boundaries`; the decisions :mod:`analysis.stats.sequential`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from store import LayerstateError
from store.errors import validation_problems

__all__ = ["Cell", "Design", "DesignError", "Hypothesis"]

#: A (task, arch, variant) cell of the grid: the unit that receives seeds (the one definition;
#: a probe's cell, one run's layer at a length and position, is :class:`analysis.probes.sweep.Cell`).
Cell = tuple[str, str, str]


class DesignError(LayerstateError, ValueError):
    """A design or hypothesis that is malformed (one line, naming the fix)."""


class Design(BaseModel):
    """A group-sequential design over seeds, declared before the first result."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    first_seeds: int = Field(description="Seeds of the first stage (>= 2: a t test needs one degree of freedom).")
    stage_seeds: int = Field(description="Seeds each later stage adds to every cell that still needs them.")
    max_seeds: int = Field(description="The most seeds a cell gets; the last stage may add fewer than stage_seeds.")
    spending: Literal["obrien-fleming", "pocock"] = Field(
        default="obrien-fleming", description="Lan-DeMets alpha-spending function.")
    futility: Literal["none", "conditional-power"] = Field(
        default="none", description="Non-binding futility: stop a claim whose conditional power at max_seeds "
        "is below futility_power.")
    futility_power: float = Field(default=0.1, description="The conditional power below which a claim stops.")
    alpha: float = Field(default=0.05, description="Family-wise level of each family of tests.")
    max_seeds_by_arch: dict[str, int] = Field(
        default_factory=dict, description="A lower maximum for the cells of an architecture (e.g. {mamba = 3}: "
        "expensive cells stop at the first stage); each a number of seeds some stage reaches.")

    @model_validator(mode="after")
    def _check(self) -> Design:
        if self.first_seeds < 2:
            raise ValueError(f"first_seeds is {self.first_seeds}: a t test over seeds needs at least 2; "
                             "write first_seeds = 3 or more")
        if self.stage_seeds < 1:
            raise ValueError(f"stage_seeds is {self.stage_seeds}: each stage adds at least one seed; "
                             "write stage_seeds = 1 or more")
        if self.max_seeds < self.first_seeds:
            raise ValueError(f"max_seeds ({self.max_seeds}) is below first_seeds ({self.first_seeds}); "
                             f"write max_seeds >= {self.first_seeds}")
        if self.max_seeds > 1000:
            raise ValueError(f"max_seeds is {self.max_seeds}; a design over seeds stops at 1000: lower max_seeds")
        if not 0 < self.futility_power < 1:
            raise ValueError(f"futility_power is {self.futility_power}; write a conditional power in (0, 1), "
                             "e.g. 0.1")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha is {self.alpha}; write a level in (0, 0.5), e.g. 0.05")
        stages = self.seeds()
        for arch, n in self.max_seeds_by_arch.items():
            if n not in stages:
                raise ValueError(f"max_seeds_by_arch.{arch} is {n}, which no stage reaches; write one of "
                                 f"{', '.join(map(str, stages))} (the seeds per cell after each stage)")
        return self

    def cap(self, arch: str) -> int:
        """The most seeds a cell of ``arch`` gets."""
        return int(self.max_seeds_by_arch.get(arch, self.max_seeds))

    def capped(self, max_seeds: int | None) -> Design:
        """The same design stopping at ``max_seeds`` (a stage's seeds): the design a claim whose
        cells stop there is tested under (its information fractions are ``n_k / max_seeds``)."""
        if max_seeds is None or max_seeds == self.max_seeds:
            return self
        return self.model_copy(update={"max_seeds": int(max_seeds), "max_seeds_by_arch": {}})

    @classmethod
    def parse(cls, table: Mapping[str, Any], source: str | None = None) -> Design:
        """A design from a ``[design]`` table; a malformed one raises :class:`DesignError` in one
        line (``"<source>: design: <field>: <problem and fix>"``)."""
        prefix = f"{source}: " if source else ""
        try:
            return cls(**dict(table))
        except ValidationError as exc:
            raise DesignError(f"{prefix}design: {_one_line(exc, cls)}") from None

    def seeds(self) -> tuple[int, ...]:
        """Seeds per cell after each stage: first_seeds, + stage_seeds, ..., max_seeds."""
        out = list(range(self.first_seeds, self.max_seeds, self.stage_seeds))
        return (*out, self.max_seeds)

    def fractions(self) -> tuple[float, ...]:
        """Information fractions ``n_k / n_max`` of the stages."""
        return tuple(n / self.max_seeds for n in self.seeds())


def _one_line(exc: ValidationError, model: type[BaseModel]) -> str:
    return validation_problems(exc, model.model_fields, missing="missing; the design must declare it ({description})")[0]


class Hypothesis(BaseModel):
    """One claim as a sequential test: what it reads and what it tests.

    ``test``: ``greater`` / ``less`` (the estimate lies above / below ``value``), ``two-sided``
    (different from ``value``, each side at half the level), ``within`` (inside ``value +-
    margin``: both one-sided tests at half the level, as the TOST of
    :mod:`analysis.stats.decision`), ``outside`` (beyond ``value +- margin``) or ``exact`` (an
    exact test evaluated once, at the claim's maximum, with all its level spent there: its
    observation is the test's p-value, e.g. a profile_match claim's permutation p,
    :func:`profile_hypotheses`). The opposite side ("contradicted") is tested at the two-sided
    level: ``greater`` -> below ``value``, ``less`` -> above, ``within`` -> outside, ``outside``
    -> within; a ``two-sided`` or ``exact`` test has none. A claim with ``beyond_margin`` also
    has the margin's test (:meth:`margin_test`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    cells: tuple[tuple[str, str, str], ...] = Field(description="The (task, arch, variant) cells the claim reads.")
    test: Literal["greater", "less", "two-sided", "within", "outside", "exact"]
    value: float = 0.0
    margin: float | None = None
    effect: float | None = Field(default=None, description="A true value of the estimate to compute conditional "
                                 "power at (futility); None: the current estimate.")
    max_seeds: int | None = Field(default=None, description="The claim's own maximum (the lowest of its cells'; "
                                  "a stage's seeds); None: the design's.")
    beyond_margin: float | None = Field(
        default=None, description="A difference claim tested against zero with a margin: 'supported' also needs "
        "the stage's plain 95% interval to reach beyond +-beyond_margin (else the effect may be negligible, "
        "and the claim is inconclusive), as the fixed design's rule (docs/decisions.md).")
    statistic: Literal["mean", "share"] = Field(
        default="mean", description="mean: a t over seeds, observed as (estimate, se, df); share: the share of "
        "seeds strictly beyond value (above it for test greater, below for less) exceeds q, the exact sign test "
        "of a bound or readable_by claim (docs/ceiling.md), observed as ShareCount(beyond, short, n) or the "
        "seeds' values; its effect, if given, is the true share beyond.")
    q: float = Field(default=0.5, description="statistic = 'share': the share beyond under the null (0.5: the "
                     "median seed).")

    @model_validator(mode="after")
    def _check(self) -> Hypothesis:
        if self.statistic == "share":
            if self.test not in ("greater", "less") or self.margin is not None or self.beyond_margin is not None:
                raise ValueError(f"hypothesis {self.id!r}: a share test is one-sided against its threshold; write "
                                 "test = 'greater' or 'less' and no margin")
            if not 0 < self.q < 1:
                raise ValueError(f"hypothesis {self.id!r}: q is {self.q}; write a share in (0, 1), e.g. 0.5")
            if self.effect is not None and not 0 <= self.effect <= 1:
                raise ValueError(f"hypothesis {self.id!r}: the effect of a share test is the true share of seeds "
                                 f"beyond its threshold, in [0, 1], not {self.effect}")
        if self.test in ("within", "outside") and not (self.margin is not None and self.margin > 0):
            raise ValueError(f"hypothesis {self.id!r}: test = {self.test!r} needs margin > 0")
        if not self.cells:
            raise ValueError(f"hypothesis {self.id!r} reads no cells; name its (task, arch, variant) cells")
        if self.beyond_margin is not None and not (self.test in ("greater", "less", "two-sided")
                                                   and self.beyond_margin > 0):
            raise ValueError(f"hypothesis {self.id!r}: beyond_margin needs a greater, less or two-sided test and "
                             "a margin > 0")
        if self.test == "exact" and self.margin is not None:
            raise ValueError(f"hypothesis {self.id!r}: an exact test reads its p-value; drop the margin")
        return self

    def sides(self, contra: bool = False) -> tuple[tuple[tuple[int, float], ...], str, float]:
        """The one-sided tests of the claim's own test (or its opposite side's): ``((sign,
        value), ...)``, whether ``any`` or ``all`` of them must cross, and the share of the
        claim's level each side is tested at."""
        if self.test == "exact":
            return (), "any", 1.0
        v, m = self.value, self.margin or 0.0
        within = (((+1, v - m), (-1, v + m)), "all", 0.5)
        outside = (((+1, v + m), (-1, v - m)), "any", 0.5)
        if contra:
            return {"greater": (((-1, v),), "any", 0.5), "less": (((+1, v),), "any", 0.5),
                    "two-sided": ((), "any", 0.5), "within": outside, "outside": within}[self.test]
        return {"greater": (((+1, v),), "any", 1.0), "less": (((-1, v),), "any", 1.0),
                "two-sided": (((+1, v), (-1, v)), "any", 0.5), "within": within, "outside": outside}[self.test]

    def contradictable(self) -> bool:
        return self.test not in ("two-sided", "exact")

    def margin_test(self) -> Hypothesis | None:
        """The margin's test of a claim tested against its value with a margin (``beyond_margin``):
        within ``value +- beyond_margin`` (the TOST, each side at half its level), which makes it
        ``equivalent`` (or ``negligible`` when the claim's own test is also rejected). None for
        other claims."""
        if self.beyond_margin is None:
            return None
        return Hypothesis(id=self.id, cells=self.cells, test="within", value=self.value, margin=self.beyond_margin,
                          max_seeds=self.max_seeds)
