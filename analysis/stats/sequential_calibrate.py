"""Calibration of the group-sequential designs of :mod:`analysis.stats.sequential` by simulation.

Each simulated experiment draws every claim's per-seed values (normal, the claim's per-seed
SD) for the design's maximum seeds, shows the decision procedure the stages one by one
(:func:`analysis.stats.sequential.sequential_decisions`), and records what it decided, at how
many seeds each cell stopped, and whether each claim's repeated confidence interval at its stop
covers the truth. The same draws at the maximum seeds, decided by the same procedure with one
stage, are the fixed design it is compared with.

Two scenarios (:func:`conv1d_scenario`, :func:`jiang_scenario`): few claims on cheap cells, 5
-> 10 seeds; and many claims on cells whose seeds cost from 25 s to 2,300 s, 3 -> 8 seeds.
Every claim's per-seed SD is set so that the fixed design at the maximum seeds has power 0.5
at its margin when tested at ``alpha / m`` (:func:`sd_for_half_power`), so "power at 1.5 x the
margin" is comparable across claims.

Claims are simulated independently (claims sharing a cell are positively correlated in a real
store; Holm and the Maurer-Bretz procedure hold their level under any dependence).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.stats

from analysis.stats.decision import Pending, Verdict
from analysis.stats.design import Cell, Design, Hypothesis
from analysis.stats.sequential import sequential_decisions


@dataclass(frozen=True)
class SimClaim:
    """A claim of a scenario: its sequential test, its per-seed SD and its margin (or declared
    effect: the distance from the null value the power figures are taken at)."""

    hypothesis: Hypothesis
    sd: float
    delta: float


@dataclass(frozen=True)
class Scenario:
    name: str
    design: Design
    claims: tuple[SimClaim, ...]
    costs: dict[Cell, float] = field(default_factory=dict)  # CPU seconds per seed of each cell

    def cells(self) -> tuple[Cell, ...]:
        return tuple(dict.fromkeys(c for s in self.claims for c in s.hypothesis.cells))


def sd_for_half_power(delta: float, n_max: int, level: float) -> float:
    """The per-seed SD at which a one-sided t test over ``n_max`` seeds at ``level`` has power
    about 0.5 at a true effect ``delta`` (the effect sits on the critical value)."""
    return delta * math.sqrt(n_max) / float(scipy.stats.t.isf(level, n_max - 1))


def _claims(specs: Sequence[tuple[str, tuple[Cell, ...], str, float, float | None]], n_max: int,
            alpha: float) -> tuple[SimClaim, ...]:
    m = len(specs)
    out = []
    for cid, cells, test, delta, margin in specs:
        level = alpha / m / (2 if test in ("within", "outside", "two-sided") else 1)
        out.append(SimClaim(Hypothesis(id=cid, cells=cells, test=test, value=0.0, margin=margin),  # type: ignore[arg-type]
                            sd_for_half_power(delta, n_max, level), delta))
    return tuple(out)


def conv1d_scenario(spending: str = "obrien-fleming", futility: str = "none") -> Scenario:
    """Few claims on cheap cells, shaped like the Conv1D experiment: 4 claims (two directional
    differences with a margin, a bound above a threshold, an equivalence) over 4 cells at 30 s a
    seed; 5 seeds first, one more per stage, at most 10."""
    cells = [("parity", "conv1d", "default"), ("parity", "conv1d", "nodiv"),
             ("dyck", "conv1d", "default"), ("dyck", "conv1d", "nodiv")]
    design = Design(first_seeds=5, stage_seeds=1, max_seeds=10, spending=spending,  # type: ignore[arg-type]
                    futility=futility)  # type: ignore[arg-type]
    specs = [("parity-divider-helps", (cells[0], cells[1]), "greater", 0.05, None),
             ("dyck-divider-helps", (cells[2], cells[3]), "greater", 0.05, None),
             ("parity-above-0.9", (cells[0],), "greater", 0.02, None),
             ("dyck-divider-equivalent", (cells[2], cells[3]), "within", 0.05, 0.05)]
    return Scenario("conv1d", design, _claims(specs, design.max_seeds, design.alpha), {c: 30.0 for c in cells})


def conv1d_margin_scenario(spending: str = "obrien-fleming", futility: str = "none") -> Scenario:
    """The Conv1D-shaped scenario with its two directional differences tested against zero with
    a margin of 0.05 (``beyond_margin``), as the experiment declares them: each also has the
    margin's test (equivalent or negligible), whose error and power ``simulate`` reports as
    ``fwer_margin`` (a true effect at or beyond the margin called equivalent or negligible) and
    ``margin_power``."""
    base = conv1d_scenario(spending, futility)
    claims = tuple(SimClaim(s.hypothesis.model_copy(update={"beyond_margin": 0.05}), s.sd, s.delta)
                   if s.hypothesis.id.endswith("divider-helps") else s for s in base.claims)
    return Scenario("conv1d_margin", base.design, claims, base.costs)


JIANG_COSTS = {"lstm": 30.0, "gru": 40.0, "transformer": 120.0, "mamba": 2000.0, "mamba2": 2300.0}


def jiang_scenario(spending: str = "obrien-fleming", futility: str = "none") -> Scenario:
    """Many claims on cells of very different cost, shaped like the Jiang run: 3 tasks x 5
    architectures (LSTM 30 s, GRU 40 s, Transformer 120 s, Mamba 2,000 s, Mamba-2 2,300 s a
    seed); 24 claims: a bound per cell (15), a directional difference between two architectures
    per task (6), an equivalence per task (3); 3 seeds first (t with 2 df), one more per stage,
    at most 8."""
    tasks, archs = ("parity", "dyck", "s3"), tuple(JIANG_COSTS)
    design = Design(first_seeds=3, stage_seeds=1, max_seeds=8, spending=spending,  # type: ignore[arg-type]
                    futility=futility)  # type: ignore[arg-type]
    specs: list[tuple[str, tuple[Cell, ...], str, float, float | None]] = []
    for t in tasks:
        for a in archs:
            specs.append((f"{t}-{a}-perfect", ((t, a, "default"),), "greater", 0.01, None))
        specs.append((f"{t}-gru-beats-transformer", ((t, "gru", "default"), (t, "transformer", "default")),
                      "greater", 0.05, None))
        specs.append((f"{t}-mamba-beats-lstm", ((t, "mamba", "default"), (t, "lstm", "default")),
                      "greater", 0.05, None))
        specs.append((f"{t}-mamba2-like-mamba", ((t, "mamba", "default"), (t, "mamba2", "default")),
                      "within", 0.05, 0.05))
    costs = {(t, a, "default"): JIANG_COSTS[a] for t in tasks for a in archs}
    return Scenario("jiang", design, _claims(specs, design.max_seeds, design.alpha), costs)


def jiang_capped_scenario(spending: str = "obrien-fleming", futility: str = "none") -> Scenario:
    """The Jiang-shaped scenario with the expensive cells stopped at the first stage
    (``max_seeds_by_arch = {mamba = 3, mamba2 = 3}``) and the cheap ones going 3 -> 8 in one
    stage of 5, as the Dyck re-run's design: every claim reading a Mamba or Mamba-2 cell is a
    single test at 3 seeds, the others a two-look design."""
    base = jiang_scenario(spending, futility)
    design = Design(first_seeds=3, stage_seeds=5, max_seeds=8, spending=spending,  # type: ignore[arg-type]
                    futility=futility, max_seeds_by_arch={"mamba": 3, "mamba2": 3})  # type: ignore[arg-type]
    claims = tuple(SimClaim(s.hypothesis.model_copy(update={"max_seeds": min(design.cap(a) for _, a, _ in
                                                                             s.hypothesis.cells)}), s.sd, s.delta)
                   for s in base.claims)
    return Scenario("jiang_capped", design, claims, base.costs)


TRUTHS = ("null", "effect", "mixed")


def is_null(scenario: Scenario, truth: str) -> np.ndarray:
    """Which claims are null under ``truth``: all (``null``), none (``effect``), or every other
    claim (``mixed``: the first, third, ... null)."""
    if truth not in TRUTHS:
        raise ValueError(f"truth must be one of {', '.join(TRUTHS)}, got {truth!r}")
    m = len(scenario.claims)
    return np.full(m, truth == "null") if truth != "mixed" else (np.arange(m) % 2 == 0)


def true_values(scenario: Scenario, truth: str, factor: float = 1.5) -> np.ndarray:
    """Each claim's true value: a null claim on the edge of its own test's null (the value, or the
    margin of an equivalence claim), where the opposite side's null holds too; the others at
    ``factor`` x their margin in the claimed direction (an equivalence claim: a true difference
    of 0). ``truth``: :func:`is_null`."""
    out = []
    for s, null in zip(scenario.claims, is_null(scenario, truth), strict=True):
        h = s.hypothesis
        if null:
            out.append(h.value + (h.margin or 0.0) if h.test in ("within", "outside") else h.value)
        else:
            sign = -1.0 if h.test == "less" else 1.0
            out.append(h.value if h.test == "within" else h.value + sign * factor * s.delta)
    return np.asarray(out)


def _stage_stats(x: np.ndarray, seeds: Sequence[int]) -> np.ndarray:
    """(sims, claims, stages, 3): estimate, SE and df of the mean of the first n_k seeds."""
    out = np.empty((*x.shape[:2], len(seeds), 3))
    for k, n in enumerate(seeds):
        part = x[..., :n]
        out[..., k, 0] = part.mean(-1)
        out[..., k, 1] = part.std(-1, ddof=1) / math.sqrt(n)
        out[..., k, 2] = n - 1
    return out


def _run(design: Design, hyps: Sequence[Hypothesis], stats: np.ndarray, truth: np.ndarray,
         costs: dict[Cell, float], cells: Sequence[Cell], caps: dict[Cell, int] | None = None) -> dict[str, np.ndarray]:
    """Decide one simulated experiment stage by stage, as the pipeline would."""
    ids = [h.id for h in hyps]
    seeds = design.seeds()
    # the decisions are a function of the stages so far: one call on every stage decides as one
    # call per stage would, and the stages after the one that leaves nothing to do are not run
    observed = [{i: tuple(stats[j, k]) for j, i in enumerate(ids)} for k in range(len(seeds))]
    results = sequential_decisions(design, hyps, observed)
    done = next((k for k, r in enumerate(results) if not r.cells_next), len(results) - 1)
    results = results[: done + 1]
    final = results[-1].claims
    used = {c: min(seeds[0], (caps or {}).get(c, seeds[0])) for c in cells}
    for r in results:
        for c in r.cells_next:
            used[c] = r.seeds_next or used[c]
    dec = np.array([final[i].decision for i in ids])
    lo = np.array([final[i].rci[0] for i in ids])
    hi = np.array([final[i].rci[1] for i in ids])
    stop = np.array([final[i].seeds for i in ids])
    seeds_used = np.array([used[c] for c in cells], dtype=float)
    cpu = float(sum(used[c] * costs.get(c, 0.0) for c in cells))
    return {"decision": dec, "covered": (lo <= truth) & (truth <= hi), "stop": stop, "seeds": seeds_used,
            "cpu": np.asarray(cpu)}


def simulate(scenario: Scenario, truth: str, n_sims: int, seed: int, *, factor: float = 1.5,
             fixed: bool = True) -> dict[str, float]:
    """Error rates, coverage, power and seeds of ``scenario`` over ``n_sims`` simulated
    experiments (and of the fixed design at the maximum seeds on the same draws).

    Returns
    -------
    dict
        ``fwer_supported`` / ``fwer_contradicted`` (share of experiments with any null claim
        supported / contradicted: false decisions; NaN without null claims), ``fwer_margin``
        (share with any claim whose truth lies at or beyond its margin called equivalent or
        negligible; NaN without such claims), ``margin_power`` (share of the claims with a
        margin's test whose truth lies inside the margin called equivalent or negligible), ``power`` (mean over
        the claims with an effect of the share supported; NaN without any), ``coverage`` (share of claims whose repeated confidence interval at
        their stop covers the truth; ``coverage_min``: the lowest claim's), ``seeds`` (mean seeds
        per cell), ``cpu_s`` (CPU seconds of the seeds trained), their fixed-design counterparts
        (``fixed_*``), Monte Carlo SEs (``*_se``), ``n_sims`` and ``seconds``.
    """
    t0 = time.perf_counter()
    design, hyps = scenario.design, [s.hypothesis for s in scenario.claims]
    mu = true_values(scenario, truth, factor)
    null = is_null(scenario, truth)
    sd = np.array([s.sd for s in scenario.claims])
    rng = np.random.default_rng(seed)
    x = mu[None, :, None] + sd[None, :, None] * rng.standard_normal((n_sims, len(hyps), design.max_seeds))
    # claims with a margin's test: its null (|truth - value| >= margin) or its alternative
    margin = np.array([np.inf if h.beyond_margin is None else h.beyond_margin for h in hyps])
    dist = np.abs(mu - np.array([h.value for h in hyps]))
    m_null = np.isfinite(margin) & (dist >= margin - 1e-12)
    m_true = np.isfinite(margin) & ~m_null
    cells = scenario.cells()
    seq_stats = _stage_stats(x, design.seeds())
    fix_design = Design(first_seeds=design.max_seeds, stage_seeds=1, max_seeds=design.max_seeds,
                        alpha=design.alpha)
    # the fixed design tests each claim once at its own maximum (a capped claim's cells stop there)
    caps = [h.max_seeds or design.max_seeds for h in hyps]
    fix_stats = np.concatenate([_stage_stats(x[:, j:j + 1, :n], (n,)) for j, n in enumerate(caps)], axis=1)
    fix_hyps = [h.model_copy(update={"max_seeds": None}) for h in hyps]
    cell_caps = {c: design.cap(c[1]) for c in cells}
    runs = [_run(design, hyps, seq_stats[i], mu, scenario.costs, cells) for i in range(n_sims)]
    fixed_runs = ([_run(fix_design, fix_hyps, fix_stats[i], mu, scenario.costs, cells, cell_caps)
                   for i in range(n_sims)] if fixed else [])
    out: dict[str, float] = {"n_sims": float(n_sims)}
    for prefix, rs in (("", runs), ("fixed_", fixed_runs)):
        if not rs:
            continue
        dec = np.stack([r["decision"] for r in rs])
        cov = np.stack([r["covered"] for r in rs])
        sup, con = (dec == Verdict.SUPPORTED), (dec == Verdict.CONTRADICTED)
        fw_s, fw_c = sup[:, null].any(1), con[:, null].any(1)
        nan = math.nan
        inside = (dec == Verdict.EQUIVALENT) | (dec == Verdict.NEGLIGIBLE)
        fw_m = inside[:, m_null].any(1)
        seeds = np.stack([r["seeds"] for r in rs]).mean(1)
        cpu = np.array([float(r["cpu"]) for r in rs])
        out.update({
            f"{prefix}fwer_supported": float(fw_s.mean()) if null.any() else nan,
            f"{prefix}fwer_supported_se": _se(fw_s) if null.any() else nan,
            f"{prefix}fwer_contradicted": float(fw_c.mean()) if null.any() else nan,
            f"{prefix}fwer_contradicted_se": _se(fw_c) if null.any() else nan,
            f"{prefix}power": float(sup[:, ~null].mean()) if (~null).any() else nan,
            f"{prefix}power_se": (float(sup[:, ~null].mean(1).std(ddof=1) / math.sqrt(n_sims)) if (~null).any()
                                  else nan),
            f"{prefix}coverage": float(cov.mean()), f"{prefix}coverage_min": float(cov.mean(0).min()),
            f"{prefix}coverage_min_se": _se(cov[:, int(np.argmin(cov.mean(0)))]),
            f"{prefix}seeds": float(seeds.mean()), f"{prefix}cpu_s": float(cpu.mean()),
            f"{prefix}futility": float((dec == Pending.FUTILITY).mean()),
            f"{prefix}fwer_margin": float(fw_m.mean()) if m_null.any() else nan,
            f"{prefix}fwer_margin_se": _se(fw_m) if m_null.any() else nan,
            f"{prefix}margin_power": float(inside[:, m_true].mean()) if m_true.any() else nan,
        })
    out["seconds"] = time.perf_counter() - t0
    return out


def _se(flags: np.ndarray) -> float:
    p = float(np.mean(flags))
    return math.sqrt(max(p * (1 - p), 1e-12) / flags.size)
