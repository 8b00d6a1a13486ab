"""Bound and readable_by claims decided by the exact sign test on the share of seeds beyond the
threshold (docs/ceiling.md): known answers, each worked out by hand from Bin(n, 1/2) (or
Bin(n, q)) and Holm, that would fail if the share path counted, tested or corrected wrongly."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import xarray as xr

from analysis.claims import evaluate_claims, parse_claims
from analysis.claims.evaluate import verdict_table
from analysis.claims.sampling import share_row
from analysis.claims.spec import Claim, make_claim
from analysis.stats.seedshare import seeds_to_decide
from store import Store
from tests.analysis.claims.test_claims import _write_run


def _bound(cid: str = "c", **over) -> Claim:
    base = {"id": cid, "statement": "s", "kind": "bound", "metric": "accuracy", "task": "parity", "arch": "lstm",
            "threshold": 0.99, "direction": "greater", "length": 12}
    return make_claim(**(base | over))


def _decide(claims: list[Claim], values: list[list[float]], pad: int = 0) -> xr.Dataset:
    """The claims table of share rows (as evaluate_claims builds them) for per-seed ``values``."""
    rows = [share_row(c, np.array(v, dtype=float), c.direction, what="accuracy") for c, v in zip(claims, values,
                                                                                                  strict=True)]
    return verdict_table(claims, [c.id for c in claims], rows, pad=(pad, 0, pad), correction="holm")


def _one(res: xr.Dataset, cid: str = "c") -> xr.Dataset:
    return res.sel(claim=cid)


# ------------------------------------------------------------------ the exact test, by hand


def test_eight_seeds_at_the_ceiling_are_supported_with_p_one_in_256():
    """8 of 8 seeds above 0.99: p = P(Bin(8, 1/2) >= 8) = 1/256, whatever their spread (here
    none: the t over seeds would have no SE at all)."""
    r = _one(_decide([_bound()], [[0.9995] * 8]))
    assert str(r.verdict.values) == "supported"
    assert float(r.p) == pytest.approx(1 / 256, rel=1e-12) and float(r.p_adjusted) == pytest.approx(1 / 256)
    assert (int(r.beyond), int(r.short), int(r.n_seeds)) == (8, 0, 8) and float(r.share) == 1.0
    assert str(r.model.values) == "sign_test" and np.isnan(float(r.se)) and np.isnan(float(r.df))
    assert np.isnan(float(r.power)) and np.isnan(float(r.mde))
    # the median seed, with the order statistics x_(1), x_(8) as its >= 95% interval at 8 seeds
    assert float(r.estimate) == pytest.approx(0.9995) and float(r.lower) == float(r.upper) == pytest.approx(0.9995)
    # Clopper-Pearson for 8 of 8: lower end (0.025)^(1/8)
    assert float(r.share_lower) == pytest.approx(0.025 ** (1 / 8)) and float(r.share_upper) == 1.0
    # at 8 seeds and level 0.05, 7 must lie beyond (P(>= 7) = 9/256 < 0.05 <= P(>= 6) = 37/256):
    # the test's bound is the second-worst seed
    assert float(r.bound) == pytest.approx(0.9995)
    assert str(r.reason.values).startswith("the median seed lies above 0.99: 8 of 8 seeds above 0.99")
    assert float(r.p_contra) == 1.0 and "sign test" in str(r.test.values)


def test_one_failing_seed_of_eight_is_supported_alone_but_not_in_a_family_of_two():
    """7 of 8 above 0.99 and one seed failed at 0.90: p = (1 + 8)/256 = 9/256 = 0.035 < 0.05, so
    alone it is supported; in a family with a second bound claim whose seeds split 4 and 4
    (p = P(Bin(8, 1/2) >= 4) = 163/256), Holm's first step compares 9/256 with 0.025: not
    supported, and its adjusted p is 2 x 9/256. One failed seed is one seed not beyond: the
    mean (0.9871) would lie below the threshold."""
    seeds = [0.9995] * 7 + [0.90]
    alone = _one(_decide([_bound()], [seeds]))
    assert str(alone.verdict.values) == "supported"
    assert float(alone.p) == pytest.approx(9 / 256, rel=1e-12) == pytest.approx(0.03515625)
    assert (int(alone.beyond), int(alone.short)) == (7, 1)
    assert float(alone.estimate) == pytest.approx(0.9995)  # the median seed does not move
    null = [0.9995] * 4 + [0.95] * 4
    pair = _decide([_bound("a"), _bound("b", task="dyck")], [seeds, null])
    a, b = _one(pair, "a"), _one(pair, "b")
    assert float(b.p) == pytest.approx(163 / 256, rel=1e-12)
    assert float(a.p_adjusted) == pytest.approx(18 / 256, rel=1e-12)
    assert float(b.p_adjusted) == pytest.approx(163 / 256, rel=1e-12)
    assert [str(a.verdict.values), str(b.verdict.values)] == ["inconclusive", "inconclusive"]
    assert float(a.level) == pytest.approx(0.025)
    # 8 seeds can decide at 0.025 (0.5^8 < 0.025): this is "not shown", not "cannot be decided"
    assert str(a.reason.values).startswith("not shown that the median seed lies above 0.99: 7 of 8 seeds above")
    # neither is contradicted: 1 and 4 seeds short of 0.99 are not more than half
    assert float(a.p_contra) == 1.0 and float(b.p_contra) == pytest.approx(min(1.0, 2 * 163 / 256))
    # the same family written as one absent claim (p = 1) gives the same step
    padded = _one(_decide([_bound()], [seeds], pad=1))
    assert str(padded.verdict.values) == "inconclusive" and float(padded.p_adjusted) == pytest.approx(18 / 256)


def test_three_seeds_cannot_be_decided_whatever_they_show():
    """The smallest p at 3 seeds is 1/8 (all beyond): no verdict at level 0.05, and the reason
    says so instead of 'not shown'."""
    r = _one(_decide([_bound()], [[1.0, 1.0, 1.0]]))
    assert str(r.verdict.values) == "inconclusive" and float(r.p) == pytest.approx(1 / 8)
    reason = str(r.reason.values)
    assert reason.startswith("cannot be decided with 3 seeds without assuming the seeds' values are roughly normal")
    assert "needs at least 5 seeds at level 0.05" in reason and int(r.seeds_needed) == 5
    # no finite end from 3 seeds: the median's interval is the metric's range
    # 3 seeds bound the median on neither side: no interval (not the metric's whole range)
    assert np.isnan(float(r.lower)) and np.isnan(float(r.upper))
    below = _one(_decide([_bound()], [[0.5, 0.5, 0.5]]))  # all short: 2 x 1/8 is no contradiction either
    assert str(below.verdict.values) == "inconclusive" and float(below.p_contra) == pytest.approx(0.25)


def test_the_seeds_needed_grow_with_the_holm_step():
    """5 perfect seeds: p = 1/32 = 0.031 decides alone; in a family of 2 the first step is 0.025,
    below 0.5^5, so 5 seeds cannot decide it and 6 would (0.5^6 = 0.016)."""
    assert [seeds_to_decide(a) for a in (0.05, 0.025, 0.0125)] == [5, 6, 7]
    five = [1.0] * 5
    assert str(_one(_decide([_bound()], [five])).verdict.values) == "supported"
    crowd = _one(_decide([_bound()], [five], pad=1))
    assert str(crowd.verdict.values) == "inconclusive"
    assert "cannot be decided with 5 seeds" in str(crowd.reason.values)
    assert "needs at least 6 seeds at level 0.025" in str(crowd.reason.values) and int(crowd.seeds_needed) == 6
    assert str(_one(_decide([_bound()], [[1.0] * 6], pad=1)).verdict.values) == "supported"  # 2/64 < 0.05


def test_eight_seeds_all_below_are_contradicted():
    """8 of 8 short of 0.99: the opposite side's p is P(Bin(8, 1/2) >= 8) = 1/256, doubled for
    the two-sided level: 2/256 < 0.05."""
    r = _one(_decide([_bound()], [[0.95, 0.96, 0.97, 0.94, 0.95, 0.96, 0.93, 0.98]]))
    assert str(r.verdict.values) == "contradicted"
    assert float(r.p) == 1.0 and float(r.p_contra) == pytest.approx(2 / 256, rel=1e-12)
    assert float(r.p_contra_adjusted) == pytest.approx(2 / 256, rel=1e-12)
    assert (int(r.beyond), int(r.short)) == (0, 8)
    assert str(r.reason.values).startswith("the median seed does not: 0 of 8 seeds above 0.99, 8 below")


def test_a_seed_exactly_at_the_threshold_counts_against_both_sides():
    """Beyond is strict. 7 above and one at exactly 0.99: 7 beyond, 0 short, p = 9/256. 6 above
    and two at it: p = P(>= 6) = 37/256, not supported (8 above would be). All 8 at it: neither
    beyond nor short, so neither side is shown."""
    seven = _one(_decide([_bound()], [[0.9995] * 7 + [0.99]]))
    assert (int(seven.beyond), int(seven.short), int(seven.n_seeds)) == (7, 0, 8)
    assert float(seven.p) == pytest.approx(9 / 256, rel=1e-12) and str(seven.verdict.values) == "supported"
    six = _one(_decide([_bound()], [[0.9995] * 6 + [0.99] * 2]))
    assert (int(six.beyond), int(six.short)) == (6, 0) and float(six.p) == pytest.approx(37 / 256, rel=1e-12)
    assert str(six.verdict.values) == "inconclusive"
    ties = _one(_decide([_bound()], [[0.99] * 8]))
    assert (int(ties.beyond), int(ties.short)) == (0, 0)
    assert float(ties.p) == 1.0 and float(ties.p_contra) == 1.0 and str(ties.verdict.values) == "inconclusive"
    # direction "less": beyond is strictly below; a drop of exactly the threshold is not below it
    less = _bound(metric="ablation_drop", setting="probe", layer="L3", threshold=0.05, direction="less")
    r = _one(_decide([less], [[0.0] * 7 + [0.05]]))
    assert (int(r.beyond), int(r.short)) == (7, 0) and float(r.p) == pytest.approx(9 / 256)
    assert str(r.verdict.values) == "supported" and "lies below 0.05" in str(r.reason.values)


def test_a_share_of_three_quarters_needs_eleven_seeds():
    """q = 0.75: the smallest p at n seeds is 0.75^n, below 0.05 from n = 11 (0.0422; 0.75^10 =
    0.0563). 10 of 11 beyond is P(Bin(11, 3/4) >= 10) = 0.75^11 + 11 x 0.75^10 x 0.25 = 0.197:
    not shown, where the median claim (q = 0.5) would have p = 12/2048."""
    assert seeds_to_decide(0.05, 0.75) == 11
    ten = _one(_decide([_bound(q=0.75)], [[1.0] * 10]))
    assert str(ten.verdict.values) == "inconclusive" and float(ten.p) == pytest.approx(0.75 ** 10)
    assert "cannot be decided with 10 seeds" in str(ten.reason.values)
    assert "needs at least 11 seeds at level 0.05" in str(ten.reason.values)
    eleven = _one(_decide([_bound(q=0.75)], [[1.0] * 11]))
    assert str(eleven.verdict.values) == "supported" and float(eleven.p) == pytest.approx(0.75 ** 11)
    most = [1.0] * 10 + [0.5]
    three_q = _one(_decide([_bound(q=0.75)], [most]))
    assert float(three_q.p) == pytest.approx(0.75 ** 11 + 11 * 0.75 ** 10 * 0.25)
    assert str(three_q.verdict.values) == "inconclusive"
    median = _one(_decide([_bound()], [most]))
    assert float(median.p) == pytest.approx(12 / 2048) and str(median.verdict.values) == "supported"


# ------------------------------------------------------------------ through a store


def _probe_claims(values: dict[str, list[float]], tmp_path) -> tuple[Store, xr.Dataset]:
    """Probe results whose L1 accuracy per seed is ``values[task]`` (exact numbers)."""
    st = Store.create(str(tmp_path / "p.zarr"))
    runs, prof = [], []
    for task, xs in values.items():
        for seed, x in enumerate(xs):
            rid = f"{task}-lstm-{seed}"
            st.add_run(rid, task=task, arch="lstm", seed=seed)
            runs.append(rid)
            prof.append([0.5, x])
    probes = xr.Dataset({"profile": (("run", "length", "layer"), np.array(prof)[:, None, :])},
                        coords={"run": runs, "length": [40], "layer": ["L0", "L1"]})
    return st, probes


READABLE = {"statement": "s", "kind": "readable_by", "metric": "probe_accuracy", "arch": "lstm", "layer": "L1",
            "threshold": 0.99}


def test_readable_by_from_probe_results_is_the_sign_test_and_mean_keeps_the_t(tmp_path):
    """The same seeds' probe accuracies: by default the exact sign test (8 of 8 above 0.99 at
    0.9995: p = 1/256; one of them exactly at 0.99 counts against), with statistic = 'mean' the
    one-sided t over seeds of the mean, as before."""
    skewed = [0.991, 0.992, 0.993, 0.994, 0.999, 0.9995, 0.9999, 1.0]
    st, probes = _probe_claims({"parity": [0.9995] * 8, "dyck": [0.9995] * 7 + [0.99], "s3": skewed}, tmp_path)
    res = evaluate_claims(st, parse_claims([
        {**READABLE, "id": "ceiling", "task": "parity"},
        {**READABLE, "id": "tie", "task": "dyck"},
        {**READABLE, "id": "median", "task": "s3"},
        {**READABLE, "id": "mean", "task": "s3", "statistic": "mean"},
    ]), probes=probes)
    ceiling, tie, median, mean = (res.sel(claim=c) for c in ("ceiling", "tie", "median", "mean"))
    assert float(ceiling.p) == pytest.approx(1 / 256) and int(ceiling.beyond) == 8
    assert float(tie.p) == pytest.approx(9 / 256) and (int(tie.beyond), int(tie.short)) == (7, 0)
    assert str(median.model.values) == "sign_test" and float(median.p) == pytest.approx(1 / 256)
    assert float(median.estimate) == pytest.approx(np.median(skewed))
    # the mean's claim: the one-sided t over the 8 seeds, its estimate their mean
    x = np.array(skewed)
    t = (x.mean() - 0.99) / (x.std(ddof=1) / np.sqrt(x.size))
    assert str(mean.model.values) != "sign_test" and np.isfinite(float(mean.se)) and float(mean.df) == 7
    assert float(mean.estimate) == pytest.approx(x.mean())
    assert float(mean.p) == pytest.approx(scipy.stats.t.sf(t, 7), rel=1e-6)
    assert str(mean.test.values).startswith("one-sided t")
    # Holm over the 4: the t's p (0.0016) x 4, then 1/256 x 3 and x 2 (monotone: both 3/256), then
    # 9/256 x 1: every step below 0.05, all four supported
    assert float(mean.p) < 1 / 256
    assert float(ceiling.p_adjusted) == float(median.p_adjusted) == pytest.approx(3 / 256, rel=1e-12)
    assert float(tie.p_adjusted) == pytest.approx(9 / 256, rel=1e-12)
    assert set(res.verdict.values) == {"supported"}


@pytest.fixture(scope="module")
def accuracy_store(tmp_path_factory):
    """8 seeds per task, 200 sequences x 12 positions each, accuracy read from captured logits:
    parity: 7 seeds perfect (1.000), seed 7 failed (about 0.90); dyck: 4 perfect, 4 at about
    0.90 (the median seed at the threshold's null)."""
    st = Store.create(str(tmp_path_factory.mktemp("share") / "s.zarr"))
    rng = np.random.default_rng(7)
    with st.deferred_consolidation():
        for seed in range(8):
            _write_run(st, f"parity-d-{seed}", "parity", "default", seed, 0.9 if seed == 7 else 1.0, rng)
            _write_run(st, f"dyck-d-{seed}", "dyck", "default", seed, 0.9 if seed >= 4 else 1.0, rng)
    return st


ACCURACY = {"statement": "s", "kind": "bound", "metric": "accuracy", "arch": "mamba", "threshold": 0.99,
            "direction": "greater", "length": 12}


def test_accuracy_with_a_failing_seed_is_supported_alone_and_inconclusive_beside_a_null(accuracy_store):
    """Accuracy per seed from the captures: 7 of 8 above 0.99 gives p = 9/256 = 0.035, supported
    alone; beside a claim whose seeds split 4/4 (p = 163/256) Holm's first step is 0.025:
    inconclusive. The mean (about 0.9875) lies below 0.99, so the t could show neither."""
    alone = evaluate_claims(accuracy_store, parse_claims([{**ACCURACY, "id": "parity", "task": "parity"}]))
    r = alone.sel(claim="parity")
    assert (int(r.beyond), int(r.short), int(r.n_seeds)) == (7, 1, 8)
    assert float(r.p) == pytest.approx(9 / 256, rel=1e-12) and str(r.verdict.values) == "supported"
    assert float(r.estimate) == 1.0 and str(r.model.values) == "sign_test"
    pair = evaluate_claims(accuracy_store, parse_claims([{**ACCURACY, "id": "parity", "task": "parity"},
                                                         {**ACCURACY, "id": "dyck", "task": "dyck"}]))
    p, d = pair.sel(claim="parity"), pair.sel(claim="dyck")
    assert (int(d.beyond), int(d.short)) == (4, 4) and float(d.p) == pytest.approx(163 / 256, rel=1e-12)
    assert float(p.p_adjusted) == pytest.approx(18 / 256, rel=1e-12)
    assert str(p.verdict.values) == str(d.verdict.values) == "inconclusive"
    mean = evaluate_claims(accuracy_store, parse_claims([{**ACCURACY, "id": "parity", "task": "parity",
                                                          "statistic": "mean"}])).sel(claim="parity")
    assert float(mean.estimate) < 0.99 and str(mean.verdict.values) != "supported"
    assert str(mean.test.values).startswith("one-sided t")
