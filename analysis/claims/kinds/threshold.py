"""Claims about where the seeds' values lie against a threshold: ``bound`` (any per-seed metric
above or below it) and ``readable_by`` (a probe's accuracy at a layer above it). Each is decided
by the share of seeds beyond the threshold (the exact sign test, docs/ceiling.md) unless it
declares ``statistic = "mean"`` (the one-sided t over seeds)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from analysis.claims.kinds.base import ALPHA, ClaimBase
from analysis.claims.kinds.words import contra_text, contradicted, level_text, opposite_p, short_of
from analysis.claims.rows import ClaimRow
from analysis.stats.decision import Verdict, fmt_p, score_interval
from analysis.stats.design import Cell, Hypothesis
from analysis.stats.power import mde_se, t_critical
from analysis.stats.ranges import unreachable

_THRESHOLD = frozenset({"threshold", "statistic", "q", "assume_normal"})


class _Threshold(ClaimBase):
    thresholded: ClassVar[bool] = True
    #: What the mean is of, in a reason's words.
    mean_words: ClassVar[str] = "mean"

    def _check_kind(self) -> None:
        if self.assume_normal and self.statistic != "mean":
            raise ValueError("assume_normal is for statistic = 'mean' (the t test over seeds); a share claim's "
                             "exact sign test assumes nothing of the seeds' values")
        if self.statistic == "mean" and "q" in self.model_fields_set:
            raise ValueError("q is the share of seeds for statistic = 'share'; a claim about the mean takes none")

    @property
    def value(self) -> float:
        """The threshold."""
        return float(self.threshold or 0.0)

    def estimate_range(self) -> tuple[float, float]:
        return self.metric_range()

    def contra_test(self) -> bool:
        return True

    def contra_value(self) -> float:
        return self.value

    def contra_p(self, row: Mapping[str, Any]) -> float:
        if self.by_share:  # the exact sign test of the other side, at the two-sided level
            return float(row.get("p_contra_exact", np.nan))
        return opposite_p(row, self.value, self.greater)

    def judged_power(self, se: float, df: float, level: float) -> dict[str, float]:
        """No effect to power against (said in words where shown); the MDE beyond the threshold."""
        return {"power": np.nan, "power_at": np.nan, "mde": float(mde_se(se, df, level, 0.8, "one-sided"))}

    @classmethod
    def power_words(cls, power: float, power_at: float, margin: float, *, share: bool = False) -> str:
        if share:
            return ("power not computable: an exact sign test's power depends on the true share of seeds beyond "
                    "the threshold (the seed plan gives it at the observed share)")
        return "power not computable: a bound declares no effect size to power against (see its MDE)"

    def one_sided_bound(self, row: Mapping[str, Any], level: float) -> float:
        """The one-sided bound on the claimed side: for a proportion measured on counted sequences
        the score test's (:func:`analysis.stats.decision.score_interval`), else the t bound (an
        accuracy's kept in [0, 1])."""
        est, se, df = (float(row.get(k, np.nan)) for k in ("estimate", "se", "df"))
        if not (np.isfinite(est) and np.isfinite(se) and not np.isnan(df) and df >= 1 and np.isfinite(level)):
            return np.nan
        q = float(t_critical(level, df))
        greater = self.greater
        seqs, sd = float(row.get("sequences", np.nan)), float(row.get("seed_sd", np.nan))
        if np.isfinite(seqs) and seqs > 0 and np.isfinite(sd):
            n = int(round(df + 1))
            lo, hi = score_interval(est, sd ** 2, 1.0 / (seqs * n), n, q, "lower" if greater else "upper")
            return lo if greater else hi
        out = est - q * se if greater else est + q * se
        if self.reads_probes or self.metric in ("accuracy", "probe_accuracy"):
            out = min(max(out, 0.0), 1.0)  # a proportion's bound stays in its range
        return out

    def ceiling_caveat(self, verdict: str) -> str:
        """What a rejection by the t test over seeds costs on a bounded metric (``statistic =
        "mean"`` and no ``assume_normal``), to append to a supported or contradicted verdict's
        reason; ``""`` otherwise. The figures are the calibration's (docs/measured.md, "Tests at
        the ceiling")."""
        if self.statistic != "mean" or self.assume_normal or verdict not in (Verdict.SUPPORTED, Verdict.CONTRADICTED):
            return ""
        lo, hi = self.metric_range()
        if not (np.isfinite(lo) and np.isfinite(hi)):
            return ""
        return (f"; caveat: statistic = 'mean' on a metric bounded in [{lo:g}, {hi:g}] assumes the seeds' values "
                "are roughly normal, which they are not near the bound: there the t test over seeds rejected up to "
                "0.16 of the time at level 0.05 with Beta-distributed seeds and 0.73 with one seed in ten failing "
                "(docs/measured.md, 'Tests at the ceiling'); statistic = 'share' is exact, or declare "
                "assume_normal = true")

    def plan_test(self, estimate: float) -> tuple[Literal["one-sided", "two-sided", "equivalence"], float] | str:
        """One-sided, at the observed distance beyond the threshold (negative: on the other side)."""
        effect = estimate - self.value
        return "one-sided", (effect if self.greater else -effect)

    def hypothesis(self, cells: Sequence[Cell], effect: float | None = None) -> Hypothesis:
        test: Literal["greater", "less"] = "greater" if self.greater else "less"
        if self.by_share:
            return Hypothesis(id=self.id, cells=tuple(cells), test=test, value=self.value, effect=effect,
                              statistic="share", q=float(self.q))
        return Hypothesis(id=self.id, cells=tuple(cells), test=test, value=self.value, effect=effect)

    def decide(self, row: ClaimRow, adj: Mapping[str, float]) -> tuple[str, str, str]:
        if self.by_share:
            return self._decide_share(row, adj)
        lo, hi = row["lower"], row["upper"]
        iv = f"95% interval [{lo:+.3f}, {hi:+.3f}]"
        level = float(adj.get("level", np.nan))
        n_seeds = int(row["n_seeds"]) if np.isfinite(row.get("n_seeds", np.nan)) else 0
        bound = float(row.get("bound", np.nan))
        bound_text = (f"its one-sided {1 - level:.4g} bound (the level of its Holm step, {level_text(level)}) is "
                      f"{bound:.3f}" if np.isfinite(bound) else "")
        p, v, greater = adj["other"], self.value, self.greater
        side, opposite = ("above", "below") if greater else ("below", "above")
        what = self.mean_words.format(layer=self.layer) + (" minus chance" if self.baseline == "chance" else "")
        if p < ALPHA:
            return Verdict.SUPPORTED, "", (f"{what} {side} {v:g} (one-sided t, Holm p = {fmt_p(p)}): {bound_text}, "
                                           f"{side} {v:g}")
        if contradicted(adj):
            return Verdict.CONTRADICTED, "", f"the {iv} lies {opposite} {v:g}{contra_text(adj)}"
        beyond = (greater and hi < v) or (not greater and lo > v)
        return Verdict.INCONCLUSIVE, "", (f"not shown {side} {v:g} (Holm p = {fmt_p(p)}; {bound_text or iv})"
                                          f"{_cannot(row, level, n_seeds) or self._mde_text(row, side, n_seeds)}"
                                          f"{short_of(adj, beyond, f'{opposite} it')}")

    def _decide_share(self, row: ClaimRow, adj: Mapping[str, float]) -> tuple[str, str, str]:
        """Decided by the share of seeds beyond the threshold (the exact sign test, docs/ceiling.md):
        the count on each side, the median seed with its interval, and the order statistic that had
        to lie beyond at the claim's Holm level."""
        p, v, q, greater = adj["other"], self.value, self.q, self.greater
        side, opposite = ("above", "below") if greater else ("below", "above")
        cannot = row.undecidable
        if not np.isfinite(row.get("beyond", np.nan)):  # decided again from a table that kept no counts
            return Verdict.INCONCLUSIVE, "", cannot or "the seeds beyond the threshold were not counted"
        n, k, short = int(row["n_seeds"]), int(row["beyond"]), int(row["short"])
        who = "the median seed" if q == 0.5 else f"more than {q:g} of the seeds"
        counts = f"{k} of {n} seeds {side} {v:g}" + (f", {short} {opposite}" if short else "")
        median = f"{'median' if q == 0.5 else f'{q:g}-quantile from the far side'} {row['estimate']:.4g}"
        low, high = self.metric_range()
        if (greater and v >= high) or (not greater and v <= low):  # no seed can lie strictly beyond it
            edge = high if greater else low
            return Verdict.INCONCLUSIVE, "", (
                f"cannot be decided: no value can lie {side} {edge:g}, the {'largest' if greater else 'smallest'} the "
                f"metric can take; declare a threshold inside its range (e.g. {0.99 * edge if greater else edge + 0.01:g}) "
                f"or a bound claim about the mean; {counts} ({median})")
        if p < ALPHA:
            return Verdict.SUPPORTED, "", (f"{who} lies {side} {v:g}: {counts} ({median}; exact sign test, Holm p = "
                                           f"{fmt_p(p)})")
        if contradicted(adj):
            return Verdict.CONTRADICTED, "", (f"{who} does not: {counts} ({median}){contra_text(adj)}")
        if cannot:
            return Verdict.INCONCLUSIVE, "", f"{cannot}; {counts} ({median})"
        most = (f"; most seeds lie {opposite} it, but not beyond what the whole family of claims allows by chance (the "
                f"test of that side at the two-sided level, Holm p = {fmt_p(adj['contra'])}): not contradicted"
                if short > n / 2 and np.isfinite(adj.get("contra", np.nan)) else "")
        return Verdict.INCONCLUSIVE, "", (f"not shown that {who} lies {side} {v:g}: {counts} ({median}; exact sign "
                                          f"test, Holm p = {fmt_p(p)}){most}")

    def _mde_text(self, row: Mapping[str, Any], side: str, n_seeds: int) -> str:
        """The minimum detectable effect beyond the threshold, or, where the threshold plus it lies
        beyond what the metric can take, that no value the metric can take is detectable at these
        seeds (:func:`analysis.stats.ranges.unreachable`)."""
        mde = float(row.get("mde", np.nan))
        if not np.isfinite(mde):
            return ""
        v = self.value
        past = unreachable(v + mde if side == "above" else v - mde, *self.metric_range())
        if past:
            return (f"; no value the metric can take is detectable {side} {v:g} at {n_seeds} seeds: the MDE "
                    f"{mde:.3f} at the level of its Holm step reaches {past}")
        return f"; MDE {mde:.3f} {side} it at {n_seeds} seeds, at the level of its Holm step"


def _cannot(row: Mapping[str, Any], level: float, n_seeds: int) -> str:
    """Said of a claim that no data could pass at these seeds and its Holm level: the largest t
    the best possible data give (``max_t``) is below the t the test needs."""
    max_t, df = float(row.get("max_t", np.nan)), float(row.get("df", np.nan))
    if not (np.isfinite(max_t) and np.isfinite(df) and np.isfinite(level)):
        return ""
    need = float(t_critical(level, df))
    if max_t >= need:
        return ""
    more = row.get("seeds_needed", np.nan)
    tail = (f"; {int(more)} seeds would let the best data pass" if np.isfinite(more) else "")
    return (f"; cannot be supported with {n_seeds} seeds at this family's level: the test needs t >= {need:.1f} at "
            f"{level_text(level)} with {df:g} degree{'' if df == 1 else 's'} of freedom, and the best possible data give "
            f"t = {max_t:.1f}{tail}")


class ReadableByClaim(_Threshold):
    kind: Literal["readable_by"] = "readable_by"  # type: ignore[assignment]
    required: ClassVar[tuple[str, ...]] = ("task", "arch", "layer", "threshold")
    owns: ClassVar[frozenset[str]] = _THRESHOLD
    reads_probes: ClassVar[bool] = True
    mean_words: ClassVar[str] = "mean probe accuracy at {layer}"
    example: ClassVar[str] = """\
[[claims]]
id = "dyck-readable"
statement = "Dyck's top of stack is readable at L0 of the median GRU seed"
kind = "readable_by"
task = "dyck"
arch = "gru"
layer = "L0"
threshold = 0.9
result = "dyck"            # only needed when several probe results hold Dyck's runs"""
    explained: ClassVar[str] = (
        "Exact sign test over seeds: more than half the seeds' probe accuracies at L0 (the probe "
        "result `probes/dyck`) exceed 0.9, i.e. the median seed does (docs/ceiling.md: valid at the "
        "ceiling and with a failing seed; it needs at least 5 seeds at level 0.05). `statistic = "
        "\"mean\"` tests the mean by the one-sided t instead, valid only for roughly normal seeds.")

    @property
    def greater(self) -> bool:
        return True

    def metric_range(self) -> tuple[float, float]:
        return 0.0, 1.0


class BoundClaim(_Threshold):
    kind: Literal["bound"] = "bound"  # type: ignore[assignment]
    required: ClassVar[tuple[str, ...]] = ("task", "arch", "threshold")
    owns: ClassVar[frozenset[str]] = _THRESHOLD
    example: ClassVar[str] = """\
[[claims]]
id = "lstm-parity-long"
statement = "The median LSTM seed keeps Parity above 95% at length 120"
kind = "bound"
task = "parity"
arch = "lstm"
threshold = 0.95
direction = "greater"
length = 120"""
    explained: ClassVar[str] = (
        "Exact sign test over seeds that the median seed's accuracy lies above 0.95 (`q = 0.75`: "
        "three quarters of the seeds). With `statistic = \"mean\"`: the one-sided t over seeds that the "
        "mean lies above 0.95 (the score test at the threshold when the seeds agree more closely than "
        "their sequences allow), valid only for roughly normal seeds (docs/ceiling.md). Say in the statement what "
        "the test decides: \"the median seed ...\" for a share claim (\"three quarters of the seeds ...\" "
        "with `q = 0.75`), \"the mean over seeds ...\" with `statistic = \"mean\"`; its estimate reads "
        "\"4 of 5 seeds beyond 0.95; median seed 0.97 [...]\".")

    def _check_kind(self) -> None:
        super()._check_kind()
        if self.direction == "two-sided":
            raise ValueError("a bound claim needs direction = 'greater' (mean above threshold) or 'less'")
