"""Group-sequential designs over seeds: decide each claim at the fewest seeds the design allows.

A :class:`Design` is declared before any result: the seeds of the first stage, the seeds each
later stage adds, the maximum, the alpha-spending function and an optional non-binding futility
rule. After each stage every undecided claim is tested against its **efficacy boundary**; a
claim that crosses is decided and stays decided, and the next stage trains seeds only for the
(task, arch, variant) cells that undecided claims read (:func:`sequential_decisions`).

The method, and why (docs/sequential.md says more):

* **Spending.** Lan & DeMets (1983) spending functions of the information fraction
  ``t = n_k / n_max`` (seeds): O'Brien-Fleming-like ``2 - 2 Phi(z_{1-a/2} / sqrt t)`` and
  Pocock-like ``a log(1 + (e - 1) t)`` (:func:`spent`). The z-scale boundaries that spend them
  are found by recursive numerical integration of the canonical joint distribution of the
  stage-wise z statistics (Armitage, McPherson & Rowe 1969; Jennison & Turnbull 2000, ch. 19):
  :func:`z_boundaries`.
* **t with few seeds.** A claim's statistic at stage k is a t on its own ``df`` (``n_k - 1``
  for a mean over seeds). The z boundary is carried over by its tail probability, stage by
  stage: ``c_k = F_t^{-1}(Phi(b_k); df_k)`` (the "significance level approach", Jennison &
  Turnbull 2000, sec. 3.8). Its error rates were measured by simulation
  (:mod:`analysis.stats.sequential_calibrate`).
* **Multiplicity.** The sequentially rejective Holm-type graphical procedure for group-sequential
  designs (Maurer & Bretz 2013): each claim's own test starts at ``alpha / m``; a claim whose
  statistic crosses its boundary at its current level is rejected, its level is passed on in
  equal shares to the claims of the family not rejected, and these are tested again at the same
  stage against the boundaries of the same spending function recomputed at their new level
  (earlier stages' boundaries at the new level too). The tests of the opposite side
  ("contradicted", at the two-sided level as in :mod:`analysis.claims.verdicts`) form a second
  family with the same procedure.
* **Intervals.** Repeated confidence intervals (Jennison & Turnbull 1989): at every stage
  ``estimate +- c_k se`` with ``c_k`` the two-sided boundary of level ``alpha`` of the same
  spending function, so that all of them cover together, and the one at a sequential stop
  covers with probability at least ``1 - alpha`` whatever the stopping rule.
* **Futility** (non-binding; the efficacy boundaries ignore it, so stopping or not keeps the
  error rates): conditional power of the claim's own test at the maximum seeds, at a declared
  true value (``Hypothesis.effect``) or else the current estimate; below
  ``Design.futility_power`` the claim stops and its cells get no more seeds for it.
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import scipy.optimize
import scipy.stats
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from store import LayerstateError

if TYPE_CHECKING:
    from analysis.claims.spec import Claim

__all__ = ["DECISIONS", "ClaimStage", "Design", "DesignError", "Hypothesis", "StageResult", "from_claim",
           "calibration_factor", "rci_critical", "seed_estimate",
           "sequential_decisions", "spent", "t_boundaries", "z_boundaries"]

#: What a claim is at a stage: decided (supported, contradicted), still collecting seeds
#: (continue), stopped by the futility rule, or undecided at the maximum (inconclusive).
DECISIONS = ("supported", "contradicted", "continue", "futility", "inconclusive")
SPENDING = ("obrien-fleming", "pocock")
#: A (task, arch, variant) cell: the unit that receives seeds.
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
    errors = exc.errors()  # a misspelt field first: it explains the missing one
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    where = ".".join(str(p) for p in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "missing":
        msg = f"missing; the design must declare it ({model.model_fields[where].description})"
    if err["type"] == "extra_forbidden":
        near = difflib.get_close_matches(where, list(model.model_fields), n=1)
        msg = (f"unknown field; did you mean {near[0]!r}?" if near else
               f"unknown field; the fields are {', '.join(model.model_fields)}")
    return f"{where}: {msg}" if where else msg


class Hypothesis(BaseModel):
    """One claim as a sequential test: what it reads and what it tests.

    ``test``: ``greater`` / ``less`` (the estimate lies above / below ``value``), ``two-sided``
    (different from ``value``, each side at half the level), ``within`` (inside ``value +-
    margin``: both one-sided tests at half the level, as the TOST of
    :mod:`analysis.stats.decision`) or ``outside`` (beyond ``value +- margin``). The opposite
    side ("contradicted") is tested at the two-sided level: ``greater`` -> below ``value``,
    ``less`` -> above, ``within`` -> outside, ``outside`` -> within; a ``two-sided`` test has none.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    cells: tuple[tuple[str, str, str], ...] = Field(description="The (task, arch, variant) cells the claim reads.")
    test: Literal["greater", "less", "two-sided", "within", "outside"]
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

    @model_validator(mode="after")
    def _check(self) -> Hypothesis:
        if self.test in ("within", "outside") and not (self.margin is not None and self.margin > 0):
            raise ValueError(f"hypothesis {self.id!r}: test = {self.test!r} needs margin > 0")
        if not self.cells:
            raise ValueError(f"hypothesis {self.id!r} reads no cells; name its (task, arch, variant) cells")
        return self

    def sides(self, contra: bool = False) -> tuple[tuple[tuple[int, float], ...], str, float]:
        """The one-sided tests of the claim's own test (or its opposite side's): ``((sign,
        value), ...)``, whether ``any`` or ``all`` of them must cross, and the share of the
        claim's level each side is tested at."""
        v, m = self.value, self.margin or 0.0
        within = (((+1, v - m), (-1, v + m)), "all", 0.5)
        outside = (((+1, v + m), (-1, v - m)), "any", 0.5)
        if contra:
            return {"greater": (((-1, v),), "any", 0.5), "less": (((+1, v),), "any", 0.5),
                    "two-sided": ((), "any", 0.5), "within": outside, "outside": within}[self.test]
        return {"greater": (((+1, v),), "any", 1.0), "less": (((-1, v),), "any", 1.0),
                "two-sided": (((+1, v), (-1, v)), "any", 0.5), "within": within, "outside": outside}[self.test]

    def contradictable(self) -> bool:
        return self.test != "two-sided"


def from_claim(claim: Claim, cells: Sequence[Cell] | None = None, effect: float | None = None) -> Hypothesis:
    """The sequential test of a declared claim (:class:`analysis.claims.spec.Claim`), with the
    cells it reads (given, or from its task, arch, variant and compared levels).

    Raises
    ------
    DesignError
        For a profile_match claim (an exact permutation test, not a t on an estimate) and for a
        claim whose cells cannot be told from its fields (pass ``cells``)."""
    if claim.kind == "profile_match":
        raise DesignError(f"claim {claim.id!r}: a profile_match claim is an exact permutation test and has no "
                          "sequential boundary; evaluate it at the maximum seeds")
    if cells is None:
        cells = _claim_cells(claim)
    m = claim.margin
    if claim.kind in ("bound", "readable_by"):
        greater = claim.kind == "readable_by" or claim.direction == "greater"
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


def _claim_cells(claim: Claim) -> tuple[Cell, ...]:
    task, arch, variant = claim.task, claim.arch, claim.variant
    cells: list[tuple[str | None, str | None, str | None]]
    if claim.kind in ("difference", "equivalence") and claim.compare in ("arch", "variant", "task"):
        pair = (claim.treatment, claim.reference)
        if claim.compare == "arch":
            cells = [(task, a, variant) for a in pair]
        elif claim.compare == "variant":
            cells = [(task, arch, v) for v in pair]
        else:
            cells = [(t, arch, variant) for t in pair]
    else:
        cells = [(task, arch, variant)]
    if any(x is None for c in cells for x in c):
        raise DesignError(f"claim {claim.id!r}: its (task, arch, variant) cells cannot be told from its fields "
                          "(no arch); pass cells= explicitly")
    return tuple((str(a), str(b), str(c)) for a, b, c in cells)


# ------------------------------------------------------------------------- boundaries


def spent(spending: str, alpha: float, t) -> np.ndarray | float:
    """Cumulative one-sided alpha spent by information fraction ``t`` (Lan & DeMets 1983)."""
    t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        if spending == "obrien-fleming":
            out = 2.0 * scipy.stats.norm.sf(scipy.stats.norm.isf(alpha / 2) / np.sqrt(t))
        elif spending == "pocock":
            out = alpha * np.log1p((math.e - 1.0) * t)
        else:
            raise DesignError(f"spending {spending!r} is not one of {', '.join(SPENDING)}")
    return out if out.ndim else float(out)


_LOWER = -8.5  # the z density below is < 1e-16: the integration grid starts here
_NODES = 1201


def _simpson(a: float, b: float, n: int = _NODES) -> tuple[np.ndarray, np.ndarray]:
    z = np.linspace(a, b, n)
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return z, w * (b - a) / (n - 1) / 3.0


def _cross(c: float, wf: np.ndarray, z: np.ndarray, s0: float, s1: float, d: float) -> float:
    """P(continue to the previous stage at ``z``, then cross ``c``): the continuation density
    times its Simpson weights ``wf`` integrated against the normal tail of the increment."""
    return float(np.sum(wf * scipy.stats.norm.sf((c * s1 - z * s0) / d)))


@functools.lru_cache(maxsize=8192)
def z_boundaries(fractions: tuple[float, ...], level: float, spending: str) -> tuple[float, ...]:
    """One-sided upper z boundaries ``b_1 .. b_K`` at information ``fractions`` that spend
    ``level`` by ``spending``: ``P0(Z_1 < b_1, ..., Z_{k-1} < b_{k-1}, Z_k >= b_k)`` equals the
    alpha spent between stages k-1 and k. The canonical joint distribution (``Z_k = S_k /
    sqrt(t_k)``, ``S`` with independent N(0, dt) increments) is integrated recursively on a
    Simpson grid of the continuation region (Armitage, McPherson & Rowe 1969). ``inf`` where a
    stage spends nothing."""
    t = np.asarray(fractions, dtype=float)
    if t.size == 0 or np.any(np.diff(t) <= 0) or t[0] <= 0 or t[-1] > 1 + 1e-12:
        raise DesignError(f"information fractions must increase within (0, 1], got {fractions}")
    if not 0 < level < 1:
        raise DesignError(f"a boundary's level must lie in (0, 1), got {level}")
    cum = np.asarray(spent(spending, level, t), dtype=float)
    inc = np.diff(np.concatenate([[0.0], cum]))
    out = []
    b = float(scipy.stats.norm.isf(inc[0])) if inc[0] > 0 else math.inf
    out.append(b)
    z, w = _simpson(_LOWER, min(b, -_LOWER))
    f = scipy.stats.norm.pdf(z)
    for k in range(1, t.size):
        s0, s1, d = math.sqrt(t[k - 1]), math.sqrt(t[k]), math.sqrt(t[k] - t[k - 1])
        wf = w * f
        if inc[k] <= 0:
            b = math.inf
        else:
            lo, hi = _LOWER, 40.0
            while _cross(lo, wf, z, s0, s1, d) < inc[k]:
                lo -= 4.0
            b = float(scipy.optimize.brentq(lambda c, a=float(inc[k]), wf=wf, z=z, s0=s0, s1=s1, d=d:
                                            _cross(c, wf, z, s0, s1, d) - a, lo, hi, xtol=1e-10))
        out.append(b)
        zn, wn = _simpson(_LOWER, min(b, -_LOWER))
        f = (s1 / d) * (wf[None, :] * scipy.stats.norm.pdf((zn[:, None] * s1 - z[None, :] * s0) / d)).sum(1)
        z, w = zn, wn
    return tuple(out)


#: Null paths the t boundaries are calibrated on (fixed seed: the boundaries are reproducible).
CALIBRATION_PATHS = 1_000_000
CALIBRATION_SEED = 20261204


@functools.lru_cache(maxsize=4)
def _null_paths(seeds: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """One-sided p-values under the null of the stage-wise t statistics (mean over seeds, ``n_k -
    1`` df) and of the z statistics (known SD) of the same normal draws, ``(paths, stages)``."""
    rng = np.random.default_rng([CALIBRATION_SEED, *seeds])
    n = np.asarray(seeds)
    pt, pz = [], []
    for start in range(0, CALIBRATION_PATHS, 100_000):
        rows = min(100_000, CALIBRATION_PATHS - start)
        x = rng.standard_normal((rows, int(n[-1])))
        s1, s2 = np.cumsum(x, 1)[:, n - 1], np.cumsum(x * x, 1)[:, n - 1]
        mean = s1 / n
        sd = np.sqrt(np.maximum(s2 - n * mean ** 2, 0.0) / (n - 1))
        pt.append(scipy.stats.t.sf(mean / (sd / np.sqrt(n)), n - 1))
        pz.append(scipy.stats.norm.sf(mean * np.sqrt(n)))
    return np.concatenate(pt), np.concatenate(pz)


@functools.lru_cache(maxsize=65536)
def calibration_factor(seeds: tuple[int, ...], level: float, spending: str) -> float:
    """The factor ``gamma`` on the z boundaries' stage-wise tail probabilities that makes the t
    boundaries ``F_t^{-1}(1 - gamma Phi(-b_k); n_k - 1)`` spend exactly ``level`` under the null,
    calibrated on :data:`CALIBRATION_PATHS` simulated null paths of normal per-seed values.

    Carried over by its tail probability alone (``gamma = 1``) a t boundary with 2-9 df lets
    10-25% more than ``level`` through: a t statistic's stages share its variance estimate, which
    the z scale's joint distribution does not know. The z statistics of the same draws are a
    control variate: ``gamma`` is chosen so the t boundaries cross on as many paths as the z
    boundaries do on those paths (whose exact rate is ``level``), which removes most of the
    Monte Carlo error. 1 for a single stage (the t test is then exact)."""
    if len(seeds) == 1:
        return 1.0
    fr = tuple(n / seeds[-1] for n in seeds)
    nominal = scipy.stats.norm.sf(np.asarray(z_boundaries(fr, level, spending)))
    pt, pz = _null_paths(seeds)
    use = nominal > 0
    with np.errstate(divide="ignore"):
        r_t = np.min(pt[:, use] / nominal[use], axis=1)
        hits_z = float(np.mean(np.min(pz[:, use] / nominal[use], axis=1) <= 1.0))
    target = min(max(hits_z, 1.0 / CALIBRATION_PATHS), 1.0)
    return float(np.quantile(r_t, target))


@functools.lru_cache(maxsize=65536)
def _t_critical(seeds: tuple[int, ...], level: float, spending: str, k: int, df: float,
                calibrated: bool = True) -> float:
    fr = tuple(n / seeds[-1] for n in seeds)
    b = z_boundaries(fr, level, spending)[k]
    if not math.isfinite(b):
        return math.inf
    gamma = calibration_factor(seeds, level, spending) if calibrated else 1.0
    return float(scipy.stats.t.isf(min(gamma * scipy.stats.norm.sf(b), 0.5), df))


def t_boundaries(design: Design, level: float, df: Sequence[float], *, calibrated: bool = True) -> np.ndarray:
    """One-sided t boundaries of the design's stages at ``level`` with each stage's ``df``: the
    z boundary's tail probability, times :func:`calibration_factor` (``calibrated``), carried to
    t on ``df_k`` degrees of freedom."""
    seeds = design.seeds()
    if len(df) > len(seeds):
        raise DesignError(f"{len(df)} stages of degrees of freedom for a design of {len(seeds)} stages")
    return np.array([_t_critical(seeds, float(level), design.spending, k, float(d), calibrated)
                     for k, d in enumerate(df)])


def rci_critical(design: Design, k: int, df: float) -> float:
    """The multiplier of the standard error in the repeated ``1 - alpha`` confidence interval
    at stage ``k`` (each side at ``alpha / 2`` spent by the design's function)."""
    return _t_critical(design.seeds(), design.alpha / 2, design.spending, k, float(df))


# ------------------------------------------------------------------------- decisions


def seed_estimate(values: Sequence[float], sampling_var: Sequence[float] | None = None) -> tuple[float, float, float]:
    """``(estimate, se, df)`` of the mean of a claim's per-seed values at a stage (a difference
    claim's paired per-seed differences), its variance floored at the seeds' mean sampling
    variance where the metric is counted over sequences
    (:func:`analysis.stats.decision.floored_se`): the triple :func:`sequential_decisions` reads."""
    from analysis.stats.decision import floored_se

    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return float(x.mean()) if x.size else math.nan, math.nan, math.nan
    se, _, _ = floored_se(x, sampling_var)
    return float(x.mean()), float(se), float(x.size - 1)


@dataclass(frozen=True)
class ClaimStage:
    """A claim at one stage: its estimate, the boundary it was held to, the decision, the
    repeated confidence interval. Decided claims carry the stage they were decided at."""

    id: str
    stage: int
    seeds: int
    decision: str
    decided_at: int | None
    estimate: float
    se: float
    df: float
    level: float  # the claim's own test's level at this stage (after any alpha passed on to it)
    critical: float  # the t its own test had to reach (each side)
    boundaries: tuple[float, ...]  # in the estimate's units: where each side of its own test lies
    rci: tuple[float, float]
    conditional_power: float
    contra_level: float
    note: str = ""  # why a decision reads as it does, where the decision alone does not say


@dataclass(frozen=True)
class StageResult:
    """All claims after stage ``stage`` and what the next stage trains."""

    stage: int
    seeds: int
    claims: dict[str, ClaimStage]
    cells_next: tuple[Cell, ...]  # cells undecided claims read (none after the last stage)
    seeds_next: int | None  # the seeds those cells reach at the next stage


def _crosses(h: Hypothesis, obs: tuple[float, float, float], design: Design, k: int, level: float,
             contra: bool) -> tuple[bool, float]:
    sides, rule, share = h.sides(contra)
    est, se, df = obs
    if not sides or not (np.isfinite(est) and np.isfinite(se) and se > 0 and np.isfinite(df) and df >= 1):
        return False, math.nan
    c = _t_critical(design.seeds(), level * share, design.spending, k, df)
    hits = [sign * (est - v) / se >= c for sign, v in sides]
    return (all(hits) if rule == "all" else any(hits)), c


def _conditional_power(h: Hypothesis, obs: tuple[float, float, float], design: Design, k: int,
                       level: float) -> float:
    """Conditional power of the claim's own test at the last stage (B-value form on the z scale),
    at ``h.effect`` or the current estimate."""
    est, se, df = obs
    fr = design.fractions()
    tk, n_k = fr[k], design.seeds()[k]
    if not (np.isfinite(est) and np.isfinite(se) and se > 0) or tk >= 1:
        return math.nan
    sides, rule, share = h.sides()
    b_last = z_boundaries(fr, level * share, design.spending)[-1]
    sd = se * math.sqrt(n_k)
    true = est if h.effect is None else h.effect
    cps = []
    for sign, v in sides:
        z = sign * (est - v) / se
        drift = sign * (true - v) / (sd / math.sqrt(design.max_seeds))
        cps.append(float(scipy.stats.norm.sf((b_last - z * math.sqrt(tk) - drift * (1 - tk)) / math.sqrt(1 - tk))))
    return min(cps) if rule == "all" else max(cps)


def _within_margin(h: Hypothesis, obs: tuple[float, float, float]) -> bool:
    """Whether a claim tested against zero with a margin has its plain (uncorrected) 95% interval
    inside ``+-beyond_margin``: different from zero, but not shown to be more than negligible, so
    not supported (the fixed design's 'not within' is read from the uncorrected interval too)."""
    m = h.beyond_margin
    est, se, df = obs
    if m is None or not (np.isfinite(se) and np.isfinite(df) and df >= 1):
        return False
    half = float(scipy.stats.t.isf(0.025, df)) * se
    return -m < est - half and est + half < m


def _triple(x: Sequence[float]) -> tuple[float, float, float]:
    est, se, df = (float(v) for v in x)
    return est, se, df


def _holm_step(family: list[str], rejected: set[str], level: dict[str, float], testable: Sequence[str],
               test, absent: int = 0) -> dict[str, float]:
    """Maurer-Bretz Holm-type step at one stage: reject every testable hypothesis that crosses at
    its current level, pass its level in equal shares to the family's hypotheses not rejected
    (and the ``absent`` ones of the declared family, never rejected here), and test again until
    none crosses. Returns the hypotheses rejected at this stage, each with the level it was
    rejected at."""
    out: dict[str, float] = {}
    while True:
        new = [i for i in testable if i not in rejected and test(i, level[i])]
        if not new:
            return out
        rejected.update(new)
        out.update({i: level[i] for i in new})
        rest = [j for j in family if j not in rejected]
        freed = sum(level[i] for i in new)
        for i in new:
            level[i] = 0.0
        for j in rest:
            level[j] += freed / (len(rest) + absent)


def sequential_decisions(design: Design, hypotheses: Sequence[Hypothesis],
                         observed: Sequence[Mapping[str, tuple[float, float, float]]], *,
                         absent: tuple[int, int] = (0, 0)) -> list[StageResult]:
    """Decide the claims stage by stage.

    Parameters
    ----------
    design
        The declared design.
    hypotheses
        The claims as sequential tests (:func:`from_claim`), one Holm family of their own tests
        and one of their opposite sides'.
    observed
        Per stage run so far, each claim's ``(estimate, se, df)`` at that stage's seeds. Claims
        decided earlier may be left out; an undecided claim left out (or with no SE) is not
        tested at that stage and continues.
    absent
        Declared tests of the two families not given here (another part of a grid): they count
        in the family (``alpha / m`` with ``m`` including them) and are never rejected here.

    Returns
    -------
    list of StageResult
        One per stage of ``observed``: each claim's decision, level, boundary and repeated
        confidence interval, and the cells the next stage trains (those read by claims still
        ``continue``). The function is deterministic: call it again with one more stage.
    """
    seeds = design.seeds()
    if len(observed) > len(seeds):
        raise DesignError(f"{len(observed)} stages observed, but the design has {len(seeds)} "
                          f"(seeds {', '.join(map(str, seeds))})")
    ids = [h.id for h in hypotheses]
    if len(set(ids)) != len(ids):
        raise DesignError("hypothesis ids must be unique")
    by_id = {h.id: h for h in hypotheses}
    contra_ids = [h.id for h in hypotheses if h.contradictable()]
    m_own, m_contra = len(ids) + absent[0], len(contra_ids) + absent[1]
    level = {i: design.alpha / m_own for i in ids}
    contra_level = {i: design.alpha / m_contra for i in contra_ids}
    rej_own: set[str] = set()
    rej_contra: set[str] = set()
    decided: dict[str, ClaimStage] = {}
    out: list[StageResult] = []
    last = len(seeds) - 1
    local = {i: design.capped(by_id[i].max_seeds) for i in ids}  # each claim's own design (its maximum)
    for i, d in local.items():
        if d.max_seeds not in seeds:
            raise DesignError(f"hypothesis {i!r}: max_seeds {d.max_seeds} is not a stage of the design "
                              f"(seeds {', '.join(map(str, seeds))}); cap it at one of them")
    for k, obs_k in enumerate(observed):
        active = [i for i in ids if i not in decided]
        kk = {i: local[i].seeds().index(seeds[k]) for i in active}  # the claim's own stage
        nan3 = (math.nan, math.nan, math.nan)
        obs = {i: _triple(obs_k.get(i, nan3)) for i in active}
        supported = _holm_step(ids, rej_own, level, active,
                               lambda i, lv: _crosses(by_id[i], obs[i], local[i], kk[i], lv, False)[0],  # noqa: B023
                               absent[0])
        contra_testable = [i for i in active if by_id[i].contradictable() and i not in supported]
        contradicted = _holm_step(contra_ids, rej_contra, contra_level, contra_testable,
                                  lambda i, lv: _crosses(by_id[i], obs[i], local[i], kk[i], lv, True)[0],  # noqa: B023
                                  absent[1])
        stage: dict[str, ClaimStage] = {}
        for i in active:
            h, o, d, ki = by_id[i], obs[i], local[i], kk[i]
            lv = supported.get(i, level[i])
            _, c = _crosses(h, o, d, ki, lv, False)
            est, se, df = o
            cp = _conditional_power(h, o, d, ki, lv)
            note = ""
            if i in supported and _within_margin(h, o):
                dec = "inconclusive"
                note = (f"different from {h.value:g}, but its 95% interval lies within +-{h.beyond_margin:g}: "
                        "not shown to be more than negligible")
            elif i in supported:
                dec = "supported"
            elif i in contradicted:
                dec = "contradicted"
            elif ki == len(d.seeds()) - 1:
                dec = "inconclusive"
            elif design.futility != "none" and np.isfinite(cp) and cp < design.futility_power:
                dec = "futility"
            else:
                dec = "continue"
            q = rci_critical(d, ki, df) if np.isfinite(df) and df >= 1 else math.nan
            stage[i] = ClaimStage(
                id=i, stage=k, seeds=seeds[k], decision=dec, decided_at=None if dec == "continue" else k,
                estimate=est, se=se, df=df, level=lv, critical=c,
                boundaries=tuple(v + sign * c * se for sign, v in h.sides()[0]),
                rci=(est - q * se, est + q * se), conditional_power=cp,
                contra_level=contra_level.get(i, math.nan), note=note)
            if dec != "continue":
                decided[i] = stage[i]
        claims = {i: stage.get(i, decided.get(i)) for i in ids}
        going = [i for i in ids if claims[i] is not None and claims[i].decision == "continue"]  # type: ignore[union-attr]
        cells = tuple(dict.fromkeys(c for i in going for c in by_id[i].cells))
        out.append(StageResult(stage=k, seeds=seeds[k], claims={i: c for i, c in claims.items() if c is not None},
                               cells_next=cells if k < last else (),
                               seeds_next=seeds[k + 1] if k < last and cells else None))
    return out

