"""Share claims in a group-sequential design (:mod:`analysis.stats.sequential` with the exact
boundaries of :mod:`analysis.stats.seedshare`): a bound or readable_by claim decided by the
share of seeds beyond its threshold is decided at the stage the exact boundaries say, never
where no count can cross, contradicted when the median seed lies on the other side, re-tested
on its earlier looks' counts when another claim's rejection raises its level, and the
procedure's family-wise error under the null, enumerated exactly, stays below alpha."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats
from pydantic import ValidationError

from analysis.claims.hypotheses import from_claim
from analysis.claims.spec import make_claim
from analysis.stats.design import Design, DesignError, Hypothesis
from analysis.stats.seedshare import (
    ShareCount,
    contra_boundaries,
    share_boundaries,
    share_crosses,
    share_test,
)
from analysis.stats.sequential import sequential_decisions

A, B = ("parity", "lstm", "default"), ("parity", "gru", "default")
#: 3 -> 5 -> 7 -> 8 seeds (stage_seeds 2), O'Brien-Fleming, alpha 0.05
D3578 = Design(first_seeds=3, stage_seeds=2, max_seeds=8)


def share(id_: str = "a", cells=(A,), test: str = "greater", value: float = 0.99, **kw) -> Hypothesis:
    return Hypothesis(id=id_, cells=cells, test=test, value=value, statistic="share",
                      **kw)


def decisions(design: Design, hyps, counts: dict[str, list]) -> list[dict[str, str]]:
    """Each stage's decision per claim for per-claim counts ``(beyond, short, n)`` (None: not observed)."""
    k = max(len(v) for v in counts.values())
    observed = [{i: (None if c[s] is None else ShareCount(*c[s])) for i, c in counts.items() if s < len(c)}
                for s in range(k)]
    return [{i: c.decision for i, c in st.claims.items()} for st in sequential_decisions(design, hyps, observed)]


def test_a_share_claim_is_decided_at_the_stage_the_exact_boundaries_say():
    """3 of 3, 5 of 5, then (the 7-seed look not observed) 7 of 8 beyond: on the looks at 3, 5 and
    8 seeds seedshare's boundaries need 4, 6 and 7, so the claim cannot be decided at 3 or 5
    seeds and is supported at 8 with 7 beyond."""
    assert share_boundaries((3, 5, 8), 0.05, top=0.05).counts == (4, 6, 7)
    h = share()
    res = sequential_decisions(D3578, [h], [{"a": ShareCount(3, 0, 3)}, {"a": ShareCount(5, 0, 5)}, {},
                                            {"a": ShareCount(7, 1, 8)}])
    got = [st.claims["a"] for st in res]
    assert [c.decision for c in got] == ["continue", "continue", "continue", "supported"]
    assert [c.needed for c in got[:2]] == [4, 6] and got[3].needed == 7 and got[3].decided_at == 3
    assert math.isnan(got[2].estimate) and "not observed" in got[2].note
    assert "cannot be decided with 3 seeds" in got[0].note and "at least 5 seeds at level 0.05" in got[0].note
    assert "this stage cannot decide it" in got[1].note
    last = got[3]
    assert last.estimate == pytest.approx(7 / 8) and last.boundaries == (pytest.approx(7 / 8),)
    assert (last.beyond, last.short, last.seeds) == (7, 1, 8) and math.isnan(last.se) and math.isnan(last.df)
    assert last.note.startswith("7 of 8 seeds above 0.99, 1 below: 7 needed at level 0.05")
    # every look observed: boundaries 4, 6, 7, 7 on 3, 5, 7, 8 seeds
    assert share_boundaries((3, 5, 7, 8), 0.05, top=0.05).counts == (4, 6, 7, 7)
    assert decisions(D3578, [h], {"a": [(3, 0, 3), (5, 0, 5), (6, 1, 7), (7, 1, 8)]})[-1]["a"] == "supported"
    assert decisions(D3578, [h], {"a": [(3, 0, 3), (5, 0, 5), (7, 0, 7)]})[-1]["a"] == "supported"
    assert decisions(D3578, [h], {"a": [(3, 0, 3), (5, 0, 5), (6, 1, 7), (6, 2, 8)]})[-1]["a"] == "inconclusive"


def test_never_at_three_seeds_whatever_the_count():
    for beyond in range(4):
        for short in range(4 - beyond):
            c = sequential_decisions(D3578, [share()], [{"a": ShareCount(beyond, short, 3)}])[0].claims["a"]
            assert c.decision == "continue", (beyond, short)


def test_every_path_is_decided_as_share_crosses_says():
    """All 72 paths of counts over 3 -> 5 -> 7 -> 8 seeds (no ties): a single claim is supported at
    the first stage at which seedshare's share_crosses (its boundaries at alpha over the stages
    so far) says it crossed, contradicted where contra's does at alpha / 2, else inconclusive."""
    seeds = D3578.seeds()
    for steps in itertools.product(range(4), range(3), range(3), range(2)):
        beyond = np.cumsum(steps).tolist()
        counts = [(b, n - b, n) for b, n in zip(beyond, seeds, strict=True)]
        got = decisions(D3578, [share()], {"a": counts})
        want, stop = "inconclusive", len(seeds) - 1
        for k in range(len(seeds)):
            if share_crosses(beyond[:k + 1], seeds[:k + 1], 0.05, top=0.05, n_max=8)[0]:
                want, stop = "supported", k
                break
            if share_crosses([n - b for b, n in zip(beyond[:k + 1], seeds, strict=False)], seeds[:k + 1], 0.025,
                             contra=True, top=0.025, n_max=8)[0]:
                want, stop = "contradicted", k
                break
        assert [g["a"] for g in got[stop:]] == [want] * (len(seeds) - stop), counts
        assert all(g["a"] == "continue" for g in got[:stop]), counts


def test_the_opposite_side_contradicts_when_the_median_seed_lies_short():
    """Every seed short of the threshold: the opposite side's boundaries at 0.025 (the two-sided
    level of a family of one) need 4, 6, 7, 8 seeds short, so 7 of 7 short contradicts the claim
    at the third stage. A seed exactly at the threshold counts on neither side: 6 short and one
    tie of 7 do not, and 7 short with a tie at 8 seeds leave it inconclusive."""
    assert contra_boundaries((3, 5, 7, 8), 0.025, top=0.025).counts == (4, 6, 7, 8)
    h = share()
    res = sequential_decisions(D3578, [h], [{"a": ShareCount(0, 3, 3)}, {"a": ShareCount(0, 5, 5)},
                                            {"a": ShareCount(0, 7, 7)}])
    c = res[-1].claims["a"]
    assert [st.claims["a"].decision for st in res] == ["continue", "continue", "contradicted"]
    assert c.contra_needed == 7 and "the median seed lies below 0.99" in c.note
    ties = decisions(D3578, [h], {"a": [(0, 3, 3), (0, 5, 5), (0, 6, 7), (0, 7, 8)]})
    assert [t["a"] for t in ties] == ["continue", "continue", "continue", "inconclusive"]
    # a 'less' claim counts seeds below its threshold as beyond: the same counts, the same decisions
    less = share(test="less", value=0.1)
    assert decisions(D3578, [less], {"a": [(0, 3, 3), (0, 5, 5), (0, 7, 7)]})[-1]["a"] == "contradicted"
    c = sequential_decisions(D3578, [less], [{"a": ShareCount(0, 3, 3)}, {"a": ShareCount(0, 5, 5)},
                                             {"a": ShareCount(0, 7, 7)}])[-1].claims["a"]
    assert "the median seed lies above 0.1" in c.note


def _paths(seeds: tuple[int, ...], p: float) -> list[tuple[list[int], float]]:
    """Every path of counts beyond over ``seeds`` (no ties) with its probability when each seed
    lies beyond with probability ``p``."""
    steps = [seeds[0]] + [b - a for a, b in zip(seeds, seeds[1:], strict=False)]
    out = []
    for inc in itertools.product(*[range(m + 1) for m in steps]):
        prob = math.prod(scipy.stats.binom.pmf(i, m, p) for i, m in zip(inc, steps, strict=True))
        out.append((np.cumsum(inc).tolist(), float(prob)))
    return out


def _rates(design: Design, hyps: list[Hypothesis], p: dict[str, float]) -> dict[tuple[str, str], float]:
    """The exact probability that each claim ends supported and contradicted, every pair of
    paths enumerated (each seed of claim i beyond with probability ``p[i]``, no ties)."""
    seeds = design.seeds()
    out: dict[tuple[str, str], float] = {}
    for (pa, qa), (pb, qb) in itertools.product(_paths(seeds, p["a"]), _paths(seeds, p["b"])):
        last = decisions(design, hyps, {"a": [(b, n - b, n) for b, n in zip(pa, seeds, strict=True)],
                                        "b": [(b, n - b, n) for b, n in zip(pb, seeds, strict=True)]})[-1]
        for i, dec in last.items():
            out[(i, dec)] = out.get((i, dec), 0.0) + qa * qb
        for dec in ("supported", "contradicted"):
            out[("any", dec)] = out.get(("any", dec), 0.0) + qa * qb * (dec in last.values())
    return out


@pytest.mark.parametrize("spending", ["obrien-fleming", "pocock"])
def test_family_wise_error_of_two_share_claims_under_the_null_is_below_alpha(spending):
    """Two share claims at their null's worst case (each seed beyond with probability 0.5, no
    ties: both the claim and its opposite side are then false) on 3 -> 6 -> 8 seeds, every pair
    of paths enumerated with its exact probability: the chance that either is called supported
    is that of either crossing its boundaries at alpha / 2 (the first rejection of the family is
    at its starting level), and the same for contradicted at alpha / 4 a side; each at most
    alpha. One claim alone spends exactly seedshare's crossing probability."""
    design = Design(first_seeds=3, stage_seeds=3, max_seeds=8, spending=spending)
    seeds = design.seeds()
    assert seeds == (3, 6, 8)
    paths = _paths(seeds, 0.5)
    assert sum(p for _, p in paths) == pytest.approx(1.0)
    one = sum(p for path, p in paths
              if decisions(design, [share()], {"a": [(b, n - b, n) for b, n in zip(path, seeds, strict=True)]})[-1]["a"]
              == "supported")
    assert one == pytest.approx(share_boundaries(seeds, 0.05, spending, top=0.05).crossed[-1], abs=1e-12)
    rates = _rates(design, [share("a"), share("b", cells=(B,))], {"a": 0.5, "b": 0.5})
    own = share_boundaries(seeds, 0.025, spending, top=0.05).crossed[-1]
    opposite = contra_boundaries(seeds, 0.0125, spending, top=0.025).crossed[-1]
    assert rates[("any", "supported")] == pytest.approx(1 - (1 - own) ** 2, abs=1e-12)
    assert rates[("any", "contradicted")] == pytest.approx(1 - (1 - opposite) ** 2, abs=1e-12)
    assert 0 < rates[("any", "supported")] <= 0.05 and 0 < rates[("any", "contradicted")] <= 0.05


def test_a_null_claim_beside_a_true_one_keeps_its_error_when_it_takes_the_level_passed_on():
    """Claim a true, claim b on its null (3 -> 6 -> 8 seeds, O'Brien-Fleming): when a is certain
    to be supported (every seed beyond) b is tested at the full alpha on every look, so its
    chance of being called supported is exactly that of crossing seedshare's boundaries at 0.05,
    below alpha. Were b's raised level tested on its latest look alone (6 of 6 beyond at the
    second look, where 0.025 needs 7, would then be lost), it would be lower."""
    design = Design(first_seeds=3, stage_seeds=3, max_seeds=8)
    seeds = design.seeds()
    hyps = [share("a"), share("b", cells=(B,))]
    full = share_boundaries(seeds, 0.05, top=0.05).crossed[-1]
    half = share_boundaries(seeds, 0.025, top=0.05).crossed[-1]
    certain = _rates(design, hyps, {"a": 1.0, "b": 0.5})
    assert certain[("a", "supported")] == pytest.approx(1.0)
    assert certain[("b", "supported")] == pytest.approx(full, abs=1e-12) and full <= 0.05
    assert half < full
    last = share_boundaries(seeds, 0.05, top=0.05).counts[-1]
    latest_only = sum(p for path, p in _paths(seeds, 0.5)
                      if share_crosses(path, seeds, 0.025, top=0.05)[0] or path[-1] >= last)
    assert latest_only < full


def test_a_raised_level_re_tests_the_earlier_looks_counts():
    """3 -> 8 seeds one a stage, two claims at 0.025 each. b has 6 of 6 beyond at its fourth look,
    short of the 7 the boundary at 0.025 needs there, and 6 of 7 at its fifth, short of the 7 the
    boundary at 0.05 needs: at the fifth stage a crosses (7 of 7) and passes its level on, and
    b is supported at that stage on its fourth look's counts (6 of 6, which the boundary at 0.05
    needs there). A claim capped at 6 seeds (its own boundaries on 3, 4, 5, 6 of 6 seeds) and
    stopped there, whose 5 of 5 crosses at 0.05 but not at 0.025, is decided the same way."""
    design = Design(first_seeds=3, stage_seeds=1, max_seeds=8)
    assert share_boundaries(design.seeds(), 0.025, top=0.05).counts == (4, 5, 6, 7, 7, 8)
    assert share_boundaries(design.seeds(), 0.05, top=0.05).counts == (4, 5, 6, 6, 7, 7)
    a = [(n, 0, n) for n in (3, 4, 5, 6, 7)]
    b = [(3, 0, 3), (4, 0, 4), (5, 0, 5), (6, 0, 6), (6, 1, 7)]
    hyps = [share("a"), share("b", cells=(B,))]
    res = sequential_decisions(design, hyps, [{"a": ShareCount(*x), "b": ShareCount(*y)} for x, y in zip(a, b, strict=True)])
    assert [st.claims["b"].decision for st in res] == ["continue"] * 4 + ["supported"]
    assert res[3].claims["b"].level == pytest.approx(0.025)
    c = res[4].claims["b"]
    assert c.level == pytest.approx(0.05) and c.decided_at == 4
    assert "its own test crossed on stage 4's 6 seeds" in c.note and "Maurer-Bretz" in c.note
    assert c.note.startswith("6 of 6 seeds above 0.99: 6 needed at level 0.05")
    # its current look alone (6 of 7) does not cross at 0.05: only the earlier look decides it
    assert c.needed == 7 and c.beyond == 6
    assert share_boundaries((3, 4, 5, 6), 0.025, top=0.05).counts == (4, 5, 6, 6)
    assert share_boundaries((3, 4, 5, 6), 0.05, top=0.05).counts == (4, 5, 5, 6)
    capped = [share("a"), share("b", cells=(B,), max_seeds=6)]
    b = [(3, 0, 3), (4, 0, 4), (5, 0, 5), (5, 1, 6)]
    res = sequential_decisions(design, capped, [{"a": ShareCount(*x), **({"b": ShareCount(*b[k])} if k < 4 else {})}
                                                for k, x in enumerate(a)])
    assert [st.claims["b"].decision for st in res] == ["continue"] * 3 + ["inconclusive", "supported"]
    assert "its own test crossed on stage 3's 5 seeds" in res[4].claims["b"].note


def test_a_single_stage_is_the_fixed_exact_test_with_its_interval_and_bound():
    """One stage at 8 seeds: the fixed sign test. Given the seeds' values, the claim's bound is the
    order statistic share_test says (the second-lowest of 8: 7 must lie beyond), its repeated
    interval the 95% Clopper-Pearson interval of the share."""
    design = Design(first_seeds=8, stage_seeds=1, max_seeds=8)
    x = np.array([0.999, 0.995, 0.998, 0.97, 1.0, 0.996, 0.993, 0.997])
    t = share_test(x, 0.99, "greater", level=0.05)
    c = sequential_decisions(design, [share()], [{"a": x}])[0].claims["a"]
    assert c.decision == "supported" and (c.beyond, c.short, c.needed) == (7, 1, t.critical)
    assert c.bound[0] == t.bound == pytest.approx(0.993) and c.bound[0] > 0.99
    assert c.rci == pytest.approx(t.interval, abs=1e-12)
    # a 'less' claim reads the order statistic from the other end
    y = 1.0 - x
    c = sequential_decisions(design, [share(test="less", value=0.01)], [{"a": y}])[0].claims["a"]
    assert c.decision == "supported" and c.bound[1] == pytest.approx(share_test(y, 0.01, "less").bound)


def test_conditional_power_is_the_exact_chance_of_crossing_later():
    """4 -> 8 seeds: 3 of 4 beyond at the first stage; with each later seed beyond with
    probability 0.5 the claim crosses at 8 seeds when at least c - 3 of the 4 new seeds are."""
    design = Design(first_seeds=4, stage_seeds=4, max_seeds=8)
    c8 = share_boundaries((4, 8), 0.05, top=0.05).counts[1]
    c = sequential_decisions(design, [share(effect=0.5)], [{"a": ShareCount(3, 1, 4)}])[0].claims["a"]
    assert c.conditional_power == pytest.approx(scipy.stats.binom.sf(c8 - 3 - 1, 4, 0.5))
    fut = design.model_copy(update={"futility": "conditional-power", "futility_power": 0.2})
    c = sequential_decisions(fut, [share()], [{"a": ShareCount(1, 3, 4)}])[0].claims["a"]
    assert c.decision == "futility" and c.conditional_power < 0.2  # at the share so far, 1 in 4


def test_share_observations_and_hypotheses_of_the_wrong_kind_are_one_line_errors():
    h = share()
    for raw in [(0.99, 0.01, 7.0), (5, 4, 8), "5 of 8"]:
        with pytest.raises(DesignError) as err:
            sequential_decisions(D3578, [h], [{"a": raw}])
        assert "\n" not in str(err.value)
    t = Hypothesis(id="a", cells=(A,), test="greater", value=0.99)
    with pytest.raises(DesignError, match=r"observe \(estimate, se, df\)"):
        sequential_decisions(D3578, [t], [{"a": ShareCount(3, 0, 3)}])
    for bad in [{"test": "within", "margin": 0.1}, {"q": 1.0}, {"effect": 2.0}]:
        with pytest.raises(ValidationError):
            share(**bad)


def test_from_claim_makes_bound_and_readable_claims_share_tests_unless_they_keep_the_mean():
    bound = make_claim(id="f1", statement="s", kind="bound", task="parity", arch="lstm", threshold=0.99,
                  direction="less")
    h = from_claim(bound)
    assert (h.statistic, h.q, h.test, h.value) == ("share", 0.5, "less", 0.99)
    q = from_claim(bound.model_copy(update={"q": 0.75}))
    assert q.q == 0.75
    mean = make_claim(id="f2", statement="s", kind="bound", task="parity", arch="lstm", threshold=0.99,
                 direction="greater", statistic="mean")
    assert from_claim(mean).statistic == "mean"
    readable = make_claim(id="r", statement="s", kind="readable_by", task="parity", arch="lstm", layer="L1",
                     threshold=0.9)
    assert (from_claim(readable).statistic, from_claim(readable).test) == ("share", "greater")


# ---------------------------------------------------------------------- on a planted store

BOUND = [{"id": "s3-high", "statement": "S3 accuracy above 0.8", "kind": "bound", "task": "s3", "arch": "mamba",
          "threshold": 0.8, "direction": "greater", "length": 12}]


@pytest.fixture(scope="module")
def failing_seed_store(tmp_path_factory):
    """9 seeds of S3 accuracy near 0.95, but seed 1 failed (0.5)."""
    from store import Store
    from tests.analysis.claims.test_claims import _write_run

    st = Store.create(str(tmp_path_factory.mktemp("share") / "s.zarr"))
    rng = np.random.default_rng(3)
    with st.deferred_consolidation():
        for seed in range(9):
            _write_run(st, f"s3-d-{seed}", "s3", "default", seed, 0.5 if seed == 1 else 0.95, rng)
    return st


def test_evaluate_sequential_decides_a_bound_claim_by_its_share(failing_seed_store):
    """3 -> 9 seeds by 2: one failing seed in the first stage leaves 2 of 3, 4 of 5, 6 of 7 and 8
    of 9 beyond 0.8; the boundaries on 3, 5, 7, 9 seeds need 4, 6, 7, 8: supported at 9 seeds.
    The claims table then holds the design's counts, share and interval, and the median seed."""
    from analysis.claims import evaluate_claims, parse_claims
    from analysis.claims.sequential import (
        evaluate_sequential,
        sequential_dataset,
        sequential_verdicts,
    )
    from layerstate.present import sequential_lines

    st = failing_seed_store
    design = Design(first_seeds=3, stage_seeds=2, max_seeds=9)
    run = evaluate_sequential(st, parse_claims(BOUND), design)
    assert [s.seeds for s in run.stages] == [3, 5, 7, 9] and run.shares == {"s3-high"}
    looks = [s.claims["s3-high"] for s in run.stages]
    assert [c.decision for c in looks] == ["continue"] * 3 + ["supported"]
    assert [c.beyond for c in looks] == [2, 4, 6, 8] and [c.short for c in looks] == [1, 1, 1, 1]
    assert [c.needed for c in looks] == list(share_boundaries((3, 5, 7, 9), 0.05, top=0.05).counts) == [4, 6, 7, 8]
    ds = sequential_dataset(run)
    assert bool(ds.by_share.sel(claim="s3-high")) and ds.beyond.sel(claim="s3-high").values.tolist() == [2, 4, 6, 8]
    assert float(ds.seed_quantile.sel(claim="s3-high", stage=4)) == pytest.approx(0.95, abs=0.02)
    text = "\n".join(sequential_lines(run))
    assert "8 of 9 seeds above 0.8, 1 below: 8 needed at level 0.05" in text and "nan" not in text.lower()
    res = evaluate_claims(st, parse_claims(BOUND))
    out = sequential_verdicts(res, run).sel(claim="s3-high")
    assert str(out.verdict.values) == "supported" and int(out.sequential_stage) == 4
    assert (float(out.beyond), float(out.short), float(out.n_seeds)) == (8, 1, 9)
    assert float(out.share) == pytest.approx(8 / 9)
    assert (float(out.share_lower), float(out.share_upper)) == pytest.approx(looks[-1].rci)
    assert float(out.estimate) == pytest.approx(float(res.estimate.sel(claim="s3-high")))  # 9 seeds: all held
    reason = str(out.reason.values)
    assert "8 of 9 seeds above 0.8" in reason and "repeated 95% interval" in reason and "nan" not in reason.lower()
