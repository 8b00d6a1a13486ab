"""``profile_match``: a task's layer profile of probe accuracy has the shape of one task's and
differs from another's, tested per architecture by an exact permutation test over seeds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from analysis.claims.kinds.base import ALPHA, ClaimBase
from analysis.claims.kinds.words import level_text
from analysis.claims.rows import ClaimRow
from analysis.stats.decision import Verdict, fmt_p
from analysis.stats.design import Cell, DesignError, Hypothesis
from analysis.stats.profiles import seeds_for_profile_test

#: The margin of a profile_match claim that declares none, on the scale of the shape distance (the
#: RMS over layers between min-max normalised profiles, 0 to 1): about a 10-point gap of the
#: normalised profile at one layer of five (sqrt(0.1^2 / 5) = 0.045). Closer to ``matches`` than
#: to ``differs_from`` by less is no match worth claiming: two profiles that both saturate at
#: the first layer differ by a few thousandths.
DEFAULT_PROFILE_MARGIN = 0.05


class ProfileMatchClaim(ClaimBase):
    kind: Literal["profile_match"] = "profile_match"  # type: ignore[assignment]
    required: ClassVar[tuple[str, ...]] = ("task", "matches", "differs_from")
    owns: ClassVar[frozenset[str]] = frozenset({"archs", "matches", "differs_from", "margin"})
    reads_probes: ClassVar[bool] = True
    #: A row per architecture, each an exact permutation test decided in a single look.
    per_arch: ClassVar[bool] = True
    example: ClassVar[str] = """\
[[claims]]
id = "s3-like-parity"
statement = "S3's probe profile has Parity's shape, not Dyck's"
kind = "profile_match"
task = "s3"
matches = "parity"
differs_from = "dyck"
archs = ["lstm", "mamba"]  # one row each
margin = 0.05              # the default: closer to Parity's than to Dyck's by more than this"""
    explained: ClassVar[str] = (
        "Once per architecture: the exact permutation test over seeds that S3's layer profile differs in shape "
        "from Dyck's (the RMS over layers between min-max normalised mean profiles), and a seed bootstrap of how "
        "much closer it lies to Parity's than to Dyck's (the difference of the two distances). Supported when "
        "the test passes after Holm's correction and that difference's 95% interval lies above the margin "
        f"(default {DEFAULT_PROFILE_MARGIN:g}); negligible when the profile differs from Dyck's but the whole "
        "interval lies within the margin (both profiles alike, e.g. saturated from the first layer).")

    def named_archs(self) -> list[str]:
        return list(self.archs or ([self.arch] if self.arch else []))

    @property
    def decision_margin(self) -> float:
        return DEFAULT_PROFILE_MARGIN if self.margin is None else float(self.margin)

    def secondary_tests(self) -> tuple[str, ...]:
        """The permutation test without the margin (``p_zero``), which tells a negligible match."""
        return ("zero",)

    def row_ids(self) -> list[str]:
        return [f"{self.id}[{a}]" for a in self.named_archs()]

    def own_tests(self) -> int:
        return max(len(self.archs), 1)

    def row_cells(self, row_id: str) -> tuple[Cell, ...]:
        """The cells one row reads: the three tasks of the row's architecture."""
        arch = dict(zip(self.row_ids(), self.named_archs(), strict=True)).get(row_id, str(self.arch))
        return tuple((str(t), arch, str(self.variant or "default"))
                     for t in (self.task, self.differs_from, self.matches) if t is not None)

    @classmethod
    def power_words(cls, power: float, power_at: float, margin: float, *, share: bool = False) -> str:
        return "power not computable: the permutation test has no effect size"

    def judged_power(self, se: float, df: float, level: float) -> dict[str, float]:
        return {"power": np.nan, "power_at": np.nan, "mde": np.nan}

    def one_sided_bound(self, row: Mapping[str, Any], level: float) -> float:
        return np.nan

    def hypothesis(self, cells: Sequence[Cell], effect: float | None = None) -> Hypothesis:
        raise DesignError(f"claim {self.id!r}: a profile_match claim is an exact permutation test with a row per "
                          "architecture; use profile_hypotheses(claim): single looks at its maximum")

    def row_hypotheses(self, variant: str | None = None) -> list[Hypothesis]:
        """The rows (one per architecture, ids ``"<id>[<arch>]"``) as single-look hypotheses
        (``test = "exact"``): each reads its architecture's cells of the three tasks and is decided
        at its maximum by its permutation p (docs/sequential.md, "Profile-match claims")."""
        archs = self.named_archs()
        if not archs:
            raise DesignError(f"claim {self.id!r}: a profile_match claim names no architecture; write archs = [...]")
        v = str(variant or self.variant or "default")
        tasks = (self.task, self.matches, self.differs_from)
        return [Hypothesis(id=f"{self.id}[{a}]", cells=tuple((str(t), str(a), v) for t in tasks), test="exact")
                for a in archs]

    def decide(self, row: ClaimRow, adj: Mapping[str, float]) -> tuple[str, str, str]:
        p, level = adj["other"], float(adj.get("level", np.nan))
        p_zero = adj.get("zero", np.nan)
        n_seeds = int(row["n_seeds"]) if np.isfinite(row.get("n_seeds", np.nan)) else 0
        m, lo, hi = self.decision_margin, float(row["lower"]), float(row["upper"])
        closer = (f"closer to {self.matches}'s than to {self.differs_from}'s by {float(row['estimate']):+.3f} "
                  f"(95% interval [{lo:+.3f}, {hi:+.3f}])")
        if p < ALPHA:
            return Verdict.SUPPORTED, "", (f"profile differs from {self.differs_from}'s (Holm p = {fmt_p(p)}) and lies "
                                           f"{closer}, beyond the margin {m:g}")
        floor = row.get("min_p", np.nan)
        if np.isfinite(floor) and np.isfinite(level) and floor > level:
            return Verdict.INCONCLUSIVE, "", (
                f"cannot be supported with {n_seeds} seeds per task: the exact permutation test's smallest "
                f"attainable p is {floor:.3f}, above the level of its Holm step ({level_text(level)}): "
                f"{seeds_for_profile_test(level)} seeds per task would be needed with as many in each (fewer in one "
                "task where the other holds more)")
        if p_zero < ALPHA and hi < m:
            return Verdict.NEGLIGIBLE, Verdict.NEGLIGIBLE, (
                f"profile differs from {self.differs_from}'s (Holm p = {fmt_p(p_zero)}) but lies {closer}: within "
                f"the margin {m:g}, a real but negligible difference (the profiles are alike)")
        if p_zero < ALPHA:
            return Verdict.INCONCLUSIVE, "", (f"profile differs from {self.differs_from}'s (Holm p = {fmt_p(p_zero)}) "
                                              f"and lies {closer}: not shown beyond the margin {m:g}")
        return Verdict.INCONCLUSIVE, "", (f"not shown to differ from {self.differs_from}'s profile (Holm p = "
                                          f"{fmt_p(p_zero if np.isfinite(p_zero) else p)}); it lies {closer}")
