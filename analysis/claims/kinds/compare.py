"""Claims that contrast two levels of a factor, paired by seed: a ``difference`` (the effect is
not zero, or beyond its margin) and an ``equivalence`` (the effect lies within its margin)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from scipy import stats

from analysis.claims.kinds.base import ALPHA, MODEL_NAMES, ClaimBase
from analysis.claims.kinds.words import contra_text, contradicted, level_text, opposite_p, short_of
from analysis.claims.rows import ClaimRow
from analysis.stats.decision import EFFECT, Verdict, fmt_p, outcome_np
from analysis.stats.design import Cell, Hypothesis
from analysis.stats.power import mde_se, power_se, t_critical, tost_power_se
from analysis.stats.ranges import difference_range

_CONTRAST = frozenset({"compare", "treatment", "reference", "model", "margin"})


class _Contrast(ClaimBase):
    """What both contrasts share: two levels of ``compare``, a model of the contrast, a margin."""

    compares: ClassVar[bool] = True

    def _check_kind(self) -> None:
        if self.model not in (None, "paired_t") and self.metric != "accuracy":
            raise ValueError(
                f"model = {self.model!r} fits per-sequence accuracy: it works with difference and "
                "equivalence claims on metric = 'accuracy'; restoration is compared by paired_t")

    def estimate_range(self) -> tuple[float, float]:
        return difference_range(*self.metric_range())

    @classmethod
    def power_words(cls, power: float, power_at: float, margin: float, *, share: bool = False) -> str:
        if not np.isfinite(margin):
            return "power not computable: no margin declared"
        return "power not computable: no standard error"


class DifferenceClaim(_Contrast):
    kind: Literal["difference"] = "difference"  # type: ignore[assignment]
    required: ClassVar[tuple[str, ...]] = ("task", "treatment", "reference")
    owns: ClassVar[frozenset[str]] = _CONTRAST | {"test_against"}
    example: ClassVar[str] = """\
[[claims]]
id = "conv1d-s3"
statement = "Removing Conv1D lowers Mamba's S3 accuracy by more than 5 points"
kind = "difference"
task = "s3"
arch = "mamba"
compare = "variant"        # the default
treatment = "no_conv"
reference = "default"
direction = "less"
margin = 0.05
length = 40"""
    explained: ClassVar[str] = ("Paired by seed (same seed, same evaluation sequences), the `paired_t` model on "
                                "per-sequence accuracy: supported when the drop differs from 0 and is not within 0.05.")

    def _check_kind(self) -> None:
        super()._check_kind()
        if self.test_against == "margin" and self.margin is None:
            raise ValueError("test_against = 'margin' needs a margin (the effect to exceed)")

    @property
    def tested_direction(self) -> Literal["less", "greater", "two-sided"]:
        return self.direction

    @property
    def against_margin(self) -> bool:
        """Tested against its margin (the minimum-effect test |effect| > margin)."""
        return self.test_against == "margin" and self.margin is not None

    def primary_test(self) -> str:
        return "margin" if self.test_against == "margin" else "zero"

    def secondary_tests(self) -> tuple[str, ...]:
        if self.margin is None:
            return ()
        return ("zero", "equivalence") if self.test_against == "margin" else ("equivalence",)

    def sequential_margin_test(self) -> bool:
        return self.primary_test() == "zero" and self.margin is not None

    def contra_test(self) -> bool:
        """A directional difference claim (a reversal needs no margin), or one tested against its
        margin (an effect shown inside the margin refutes "more than the margin")."""
        return self.direction != "two-sided" or self.against_margin

    def contra_value(self) -> float:
        if self.against_margin:
            return -float(self.margin or 0.0) if self.direction == "less" else float(self.margin or 0.0)
        return 0.0

    def contra_p(self, row: Mapping[str, Any]) -> float:
        if not self.contra_test():
            return np.nan
        if self.direction == "two-sided":  # |effect| > margin, refuted inside it
            p_eq = float(row.get("p_equivalence", np.nan))
            return p_eq if np.isfinite(p_eq) else np.nan
        return opposite_p(row, self.contra_value(), self.greater)

    def judged_power(self, se: float, df: float, level: float) -> dict[str, float]:
        m, direction = self.margin, self.direction
        alt = "two-sided" if direction == "two-sided" else "one-sided"
        sign = -1.0 if direction == "less" else 1.0  # power_at: a true effect in the claimed direction
        mde = float(mde_se(se, df, level, 0.8, alt))
        nan = {"power": np.nan, "power_at": np.nan, "mde": mde}
        if self.against_margin and m is not None:
            # the minimum-effect test at twice the margin is the test against zero at the margin
            return {"power": float(power_se(m, se, df, level, alt)), "power_at": sign * 2 * m, "mde": m + mde}
        if m is not None:
            return {"power": float(power_se(m, se, df, level, alt)), "power_at": sign * m, "mde": mde}
        return nan

    def test_text(self, model: str) -> str:
        text = f"{MODEL_NAMES[model]} ({self.direction})"
        if self.margin is not None:
            against = (f"minimum-effect test |effect| > {self.margin:g}" if self.test_against == "margin"
                       else "against 0")
            text += f"; {against}, and TOST ±{self.margin:g} at alpha/2 per side"
        return text

    def one_sided_bound(self, row: Mapping[str, Any], level: float) -> float:
        """The t bound on the claimed side (NaN for a two-sided claim)."""
        if self.direction == "two-sided":
            return np.nan
        est, se, df = (float(row.get(k, np.nan)) for k in ("estimate", "se", "df"))
        if not (np.isfinite(est) and np.isfinite(se) and not np.isnan(df) and df >= 1 and np.isfinite(level)):
            return np.nan
        q = float(t_critical(level, df))
        return est - q * se if self.greater else est + q * se

    def plan_test(self, estimate: float) -> tuple[Literal["one-sided", "two-sided", "equivalence"], float] | str:
        """The alternative and effect a seed plan powers the claim at, or why it cannot."""
        if self.margin is None:
            return "no margin declared: no effect to plan power at"
        # from zero at the margin, or (against the margin) at twice it
        return ("two-sided" if self.direction == "two-sided" else "one-sided"), self.margin

    def hypothesis(self, cells: Sequence[Cell], effect: float | None = None) -> Hypothesis:
        m = self.margin
        if self.test_against == "margin" and m is not None:
            if self.direction == "two-sided":
                return Hypothesis(id=self.id, cells=tuple(cells), test="outside", margin=m, effect=effect)
            value = m if self.direction == "greater" else -m
            return Hypothesis(id=self.id, cells=tuple(cells), test=self.direction, value=value, effect=effect)
        return Hypothesis(id=self.id, cells=tuple(cells), test=self.direction, effect=effect,
                          beyond_margin=m if m else None)

    def _outcome(self, row: Mapping[str, Any], adj: Mapping[str, float]) -> str:
        """The four outcomes of a difference claim with a margin (:func:`analysis.stats.decision.outcome_np`):
        "different" is the claim's own corrected test, "within" the corrected equivalence test,
        "not within" the uncorrected one."""
        if self.margin is None:
            return ""
        zero_sig = bool(adj.get("zero", np.nan) < ALPHA)
        within = bool(adj.get("equivalence", np.nan) < ALPHA)
        raw_within = bool(float(row.get("p_equivalence", np.nan)) < ALPHA)
        if self.test_against == "margin":
            if adj.get("margin", np.nan) < ALPHA:
                return EFFECT
            return Verdict.NEGLIGIBLE if within and zero_sig else (Verdict.EQUIVALENT if within else Verdict.INCONCLUSIVE)
        return str(outcome_np(zero_sig, within, raw_within))

    def decide(self, row: ClaimRow, adj: Mapping[str, float]) -> tuple[str, str, str]:
        lo, hi = row["lower"], row["upper"]
        iv = f"95% interval [{lo:+.3f}, {hi:+.3f}]"
        level = float(adj.get("level", np.nan))
        bound = float(row.get("bound", np.nan))
        bound_text = (f"its one-sided {1 - level:.4g} bound (the level of its Holm step, {level_text(level)}) is "
                      f"{bound:.3f}" if np.isfinite(bound) else "")
        m = self.margin
        p_zero = adj.get("zero", np.nan)
        zero_sig = bool(p_zero < ALPHA)
        power = _power_text(row, level)
        side = {"less": "below", "greater": "above", "two-sided": "different from"}[self.direction]
        opposite = "above" if self.direction == "less" else "below"
        wrong = (self.direction == "less" and lo > self.contra_value()) or (
            self.direction == "greater" and hi < self.contra_value())
        shown = f"{bound_text}; " if bound_text else ""
        if contradicted(adj):
            if self.test_against == "margin" and m is not None:
                where = ("inside ±" if self.direction == "two-sided" else f"{opposite} {self.contra_value():+g}, "
                         "short of the margin ±")
                return Verdict.CONTRADICTED, self._outcome(row, adj), (
                    f"the {iv} lies {where}{m:g}: the claimed effect beyond the margin is refuted{contra_text(adj)}")
            return Verdict.CONTRADICTED, self._outcome(row, adj), (
                f"the {iv} lies {opposite} zero: the opposite of the claimed direction{contra_text(adj)}")
        short = short_of(adj, wrong, f"{opposite} {'the margin' if self.test_against == 'margin' else 'zero'}")
        if m is None:
            if zero_sig:
                return Verdict.SUPPORTED, "", (f"{side} zero (Holm p = {fmt_p(p_zero)}; {shown}{iv}); no margin "
                                               "declared, so a negligible effect is not told apart")
            return Verdict.INCONCLUSIVE, "", (f"not shown {side} zero (Holm p = {fmt_p(p_zero)}; {shown}{iv}); no "
                                              f"margin declared, so no power ({power}){short}")
        outcome = self._outcome(row, adj)
        if outcome == EFFECT:
            if self.test_against == "margin":
                return Verdict.SUPPORTED, outcome, (f"beyond the margin: |effect| > {m:g} (minimum-effect test, Holm "
                                                    f"p = {fmt_p(adj['margin'])}; {shown}{iv})")
            return Verdict.SUPPORTED, outcome, (f"{side} zero (Holm p = {fmt_p(p_zero)}; {shown.rstrip('; ')}) and "
                                                f"not within ±{m:g}: the {iv} reaches beyond the margin")
        if outcome == Verdict.NEGLIGIBLE:
            return Verdict.NEGLIGIBLE, outcome, (f"{side} zero (Holm p = {fmt_p(p_zero)}) but within ±{m:g}: the {iv} "
                                                 "lies inside the margin, a real but negligible effect")
        if outcome == Verdict.EQUIVALENT:
            return Verdict.EQUIVALENT, outcome, (f"not {side} zero (Holm p = {fmt_p(p_zero)}) and within ±{m:g}: the "
                                                 f"{iv} lies inside the margin{short}")
        if self.test_against == "margin" and zero_sig:
            return Verdict.INCONCLUSIVE, outcome, (f"{side} zero (Holm p = {fmt_p(p_zero)}) but not shown beyond "
                                                   f"±{m:g} (minimum-effect Holm p = {fmt_p(adj['margin'])}; {iv}); "
                                                   f"{power}{short}")
        if zero_sig:  # different, inside the margin, but "within" did not survive the correction
            return Verdict.INCONCLUSIVE, outcome, (f"{side} zero (Holm p = {fmt_p(p_zero)}) and the {iv} lies inside "
                                                   f"±{m:g}, but within the margin is not shown after the correction "
                                                   f"across the claims (TOST Holm p = {fmt_p(adj['equivalence'])})")
        return Verdict.INCONCLUSIVE, outcome, (f"not shown {side} zero (Holm p = {fmt_p(p_zero)}) nor within ±{m:g} "
                                               f"({iv}); {power}{short}")


class EquivalenceClaim(_Contrast):
    kind: Literal["equivalence"] = "equivalence"  # type: ignore[assignment]
    required: ClassVar[tuple[str, ...]] = ("task", "treatment", "reference", "margin")
    owns: ClassVar[frozenset[str]] = _CONTRAST
    example: ClassVar[str] = """\
[[claims]]
id = "gru-like-lstm"
statement = "GRU and LSTM are equally accurate on Parity (within 2 points)"
kind = "equivalence"
task = "parity"
compare = "arch"
treatment = "gru"
reference = "lstm"
margin = 0.02"""
    explained: ClassVar[str] = ("TOST at the margin: supported when the 95% interval of the difference lies inside "
                                "(-0.02, +0.02); a difference claim can never show this.")

    def primary_test(self) -> str:
        return "equivalence"

    def secondary_tests(self) -> tuple[str, ...]:
        return ("zero",)

    def contra_test(self) -> bool:
        return self.margin is not None

    def contra_p(self, row: Mapping[str, Any]) -> float:
        """Twice the smaller one-sided p that the effect lies beyond a margin: the interval wholly outside it."""
        est, se, df = (float(row.get(k, np.nan)) for k in ("estimate", "se", "df"))
        if not (np.isfinite(est) and np.isfinite(se) and se > 0 and not np.isnan(df)):
            return np.nan
        m = float(self.margin or 0.0)
        one = min(float(stats.t.sf((est - m) / se, df)), float(stats.t.cdf((est + m) / se, df)))
        return min(1.0, 2.0 * one)

    def judged_power(self, se: float, df: float, level: float) -> dict[str, float]:
        # the TOST at level/2 per side (p doubled), at a true difference of 0
        return {"power": float(tost_power_se(se, df, float(self.margin or 0.0), level / 2)), "power_at": 0.0,
                "mde": float(mde_se(se, df, level, 0.8))}

    def test_text(self, model: str) -> str:
        return f"{MODEL_NAMES[model]}: TOST ±{self.margin:g}, alpha/2 per side (p doubled); and against 0"

    def plan_test(self, estimate: float) -> tuple[Literal["one-sided", "two-sided", "equivalence"], float] | str:
        return "equivalence", 0.0

    def hypothesis(self, cells: Sequence[Cell], effect: float | None = None) -> Hypothesis:
        return Hypothesis(id=self.id, cells=tuple(cells), test="within", margin=self.margin, effect=effect)

    def decide(self, row: ClaimRow, adj: Mapping[str, float]) -> tuple[str, str, str]:
        lo, hi = row["lower"], row["upper"]
        iv = f"95% interval [{lo:+.3f}, {hi:+.3f}]"
        m = float(self.margin or 0.0)
        p_zero = adj.get("zero", np.nan)
        zero_sig = bool(p_zero < ALPHA)
        within = bool(adj["equivalence"] < ALPHA)
        outcome = str(outcome_np(zero_sig, within, float(row.get("p_equivalence", np.nan)) < ALPHA))
        if within:
            extra = (f"; different from zero (Holm p = {fmt_p(p_zero)}): real but negligible" if zero_sig else "")
            return Verdict.SUPPORTED, outcome, (f"within ±{m:g}: the {iv} lies inside the margin (TOST Holm p = "
                                                f"{fmt_p(adj['equivalence'])}){extra}")
        if contradicted(adj):
            return Verdict.CONTRADICTED, outcome, f"the {iv} lies wholly outside ±{m:g}{contra_text(adj)}"
        outside = lo > m or hi < -m
        power = _power_text(row, float(adj.get("level", np.nan)))
        return Verdict.INCONCLUSIVE, outcome, (f"not shown within ±{m:g} (TOST Holm p = {fmt_p(adj['equivalence'])}; "
                                               f"{iv}); {power} (to show equivalence at a true difference of 0)"
                                               f"{short_of(adj, outside, 'wholly outside the margin')}")


def _power_text(row: Mapping[str, Any], level: float) -> str:
    power = (f"power {row['power']:.2f} at {row['power_at']:+g} and " if np.isfinite(row.get("power", np.nan))
             else "")
    return power + (f"MDE {row['mde']:.3f} at the level of its Holm step ({level_text(level)})"
                    if np.isfinite(row.get("mde", np.nan)) else "")


class NonInferiorityClaim(_Contrast):
    """The treatment is not worse than the reference by more than the margin: one-sided against
    ``-margin`` (``direction = "greater"``: higher is better) or ``+margin`` (``"less"``)."""

    kind: Literal["non_inferiority"] = "non_inferiority"  # type: ignore[assignment]
    required: ClassVar[tuple[str, ...]] = ("task", "treatment", "reference", "margin")
    owns: ClassVar[frozenset[str]] = _CONTRAST
    example: ClassVar[str] = """\
[[claims]]
id = "no-conv-mamba-atr"
statement = "Mamba without its convolution is not worse than Based on ATR by more than 5 points"
kind = "non_inferiority"
task = "assoc_recall"
compare = "arch"
treatment = "mamba"
reference = "based"
direction = "greater"      # higher accuracy is better
margin = 0.05"""
    explained: ClassVar[str] = (
        "One-sided test that the paired difference lies above -0.05 (the treatment loses at most 5 points): "
        "supported when the one-sided bound at its Holm level is above -0.05; contradicted when the 95% "
        "interval lies wholly below it (worse by more than the margin, that side's test surviving Holm). "
        "What an equivalence claim asks of one side only, for \"X is as good as Y\" where X being better "
        "is no objection.")

    def _check_kind(self) -> None:
        super()._check_kind()
        if self.direction == "two-sided":
            raise ValueError("a non_inferiority claim needs direction = 'greater' (higher is better) or 'less'")

    @property
    def bound_value(self) -> float:
        """The value the effect must lie beyond: ``-margin`` (higher is better) or ``+margin``."""
        m = float(self.margin or 0.0)
        return -m if self.greater else m

    def own_p(self, est: float, se: float, df: float) -> float:
        """One-sided p that the effect lies beyond :attr:`bound_value` on the claimed side."""
        stat = (est - self.bound_value) / se
        return float(stats.t.sf(stat, df) if self.greater else stats.t.cdf(stat, df))

    def contra_test(self) -> bool:
        return True

    def contra_value(self) -> float:
        return self.bound_value

    def contra_p(self, row: Mapping[str, Any]) -> float:
        return opposite_p(row, self.bound_value, self.greater)

    def judged_power(self, se: float, df: float, level: float) -> dict[str, float]:
        """Power at a true difference of 0 (the margin away from the bound), MDE beyond the bound."""
        m = float(self.margin or 0.0)
        return {"power": float(power_se(m, se, df, level, "one-sided")), "power_at": 0.0,
                "mde": float(mde_se(se, df, level, 0.8, "one-sided"))}

    def test_text(self, model: str) -> str:
        side = "above" if self.greater else "below"
        return f"{MODEL_NAMES[model]}: non-inferiority, one-sided, {side} {self.bound_value:+g} (margin {self.margin:g})"

    def one_sided_bound(self, row: Mapping[str, Any], level: float) -> float:
        est, se, df = (float(row.get(k, np.nan)) for k in ("estimate", "se", "df"))
        if not (np.isfinite(est) and np.isfinite(se) and not np.isnan(df) and df >= 1 and np.isfinite(level)):
            return np.nan
        q = float(t_critical(level, df))
        return est - q * se if self.greater else est + q * se

    def plan_test(self, estimate: float) -> tuple[Literal["one-sided", "two-sided", "equivalence"], float] | str:
        return "one-sided", float(self.margin or 0.0)  # at a true difference of 0, the margin from the bound

    def hypothesis(self, cells: Sequence[Cell], effect: float | None = None) -> Hypothesis:
        return Hypothesis(id=self.id, cells=tuple(cells), test="greater" if self.greater else "less",
                          value=self.bound_value, effect=effect)

    def decide(self, row: ClaimRow, adj: Mapping[str, float]) -> tuple[str, str, str]:
        lo, hi = row["lower"], row["upper"]
        iv = f"95% interval [{lo:+.3f}, {hi:+.3f}]"
        level = float(adj.get("level", np.nan))
        p, v = adj["other"], self.bound_value
        side, opposite = ("above", "below") if self.greater else ("below", "above")
        bound = float(row.get("bound", np.nan))
        shown = (f"its one-sided {1 - level:.4g} bound (the level of its Holm step, {level_text(level)}) is "
                 f"{bound:+.3f}" if np.isfinite(bound) else iv)
        if p < ALPHA:
            return Verdict.SUPPORTED, "", (f"not worse than {self.reference} by more than {self.margin:g}: {shown}, "
                                           f"{side} {v:+g} (one-sided, Holm p = {fmt_p(p)})")
        if contradicted(adj):
            return Verdict.CONTRADICTED, "", (f"worse than {self.reference} by more than {self.margin:g}: the {iv} lies "
                                              f"{opposite} {v:+g}{contra_text(adj)}")
        beyond = (self.greater and hi < v) or (not self.greater and lo > v)
        return Verdict.INCONCLUSIVE, "", (f"not shown {side} {v:+g} (Holm p = {fmt_p(p)}; {iv}); "
                                          f"{_power_text(row, level)}{short_of(adj, beyond, f'{opposite} it')}")
