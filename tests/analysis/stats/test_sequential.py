"""Group-sequential designs over seeds (:mod:`analysis.stats.sequential`): boundaries against
published and exact values, the t calibration, the Holm-type procedure on planted stages whose
decisions are known, and a fixed-seed short calibration (:mod:`analysis.stats.sequential_calibrate`)."""

import math

import numpy as np
import pytest
import scipy.stats

from analysis.claims.hypotheses import from_claim
from analysis.claims.spec import make_claim
from analysis.stats.boundaries import rci_critical, t_boundaries, z_boundaries
from analysis.stats.design import Design, DesignError, Hypothesis
from analysis.stats.sequential import sequential_decisions
from analysis.stats.sequential_calibrate import conv1d_scenario, simulate
from analysis.stats.spending import spent

A, B, C = ("parity", "lstm", "default"), ("parity", "gru", "default"), ("dyck", "lstm", "default")


def test_design_stages_and_fractions():
    d = Design(first_seeds=5, stage_seeds=2, max_seeds=10)
    assert d.seeds() == (5, 7, 9, 10)
    assert d.fractions() == (0.5, 0.7, 0.9, 1.0)
    assert Design(first_seeds=4, stage_seeds=1, max_seeds=4).seeds() == (4,)


@pytest.mark.parametrize("table, words", [
    ({"first_seeds": 1, "stage_seeds": 1, "max_seeds": 5}, "first_seeds = 3"),
    ({"first_seeds": 5, "stage_seeds": 0, "max_seeds": 5}, "stage_seeds = 1"),
    ({"first_seeds": 5, "stage_seeds": 1, "max_seeds": 3}, "max_seeds >= 5"),
    ({"first_seeds": 3, "stage_seeds": 1, "max_seeds": 5, "spending": "haybittle"}, "spending"),
    ({"first_seeds": 3, "stage_seed": 1, "max_seeds": 5}, "did you mean 'stage_seeds'"),
])
def test_design_errors_are_one_line_and_name_the_fix(table, words):
    with pytest.raises(DesignError) as err:
        Design.parse(table, "exp.toml")
    text = str(err.value)
    assert "\n" not in text and text.startswith("exp.toml: design: ") and words in text


def test_spending_functions_spend_alpha_by_the_end_and_obf_spends_little_early():
    for s in ("obrien-fleming", "pocock"):
        assert spent(s, 0.05, 1.0) == pytest.approx(0.05)
    assert spent("obrien-fleming", 0.025, 0.5) == pytest.approx(2 * scipy.stats.norm.sf(2.2414 / math.sqrt(0.5)),
                                                                 rel=1e-3)
    assert spent("pocock", 0.025, 0.5) == pytest.approx(0.025 * math.log(1 + (math.e - 1) * 0.5))
    assert spent("obrien-fleming", 0.05, 0.3) < spent("pocock", 0.05, 0.3) / 10


@pytest.mark.parametrize("fractions, spending, expected", [
    # one-sided 0.025, equally spaced: the values gsDesign's sfLDOF / sfLDPocock give
    ((0.5, 1.0), "obrien-fleming", (2.9626, 1.9686)),
    ((0.5, 1.0), "pocock", (2.1570, 2.2010)),
    ((1 / 3, 2 / 3, 1.0), "obrien-fleming", (3.7103, 2.5114, 1.9930)),
])
def test_z_boundaries_match_published_values(fractions, spending, expected):
    np.testing.assert_allclose(z_boundaries(fractions, 0.025, spending), expected, atol=2e-4)


@pytest.mark.parametrize("spending", ["obrien-fleming", "pocock"])
def test_z_boundaries_spend_exactly_their_level_by_the_multivariate_normal(spending):
    t = np.array([0.3, 0.6, 1.0])
    b = z_boundaries(tuple(t), 0.01, spending)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    for k in range(1, 4):  # cumulative crossing probability by stage k, exactly
        cont = scipy.stats.multivariate_normal(np.zeros(k), cov[:k, :k]).cdf(np.array(b[:k]))
        assert 1 - cont == pytest.approx(spent(spending, 0.01, t[k - 1]), rel=2e-3, abs=1e-7)


def _one_hypothesis_rate(design: Design, level: float, calibrated: bool, n: int, seed: int) -> float:
    x = np.random.default_rng(seed).standard_normal((n, design.max_seeds))
    hit = np.zeros(n, bool)
    seeds = design.seeds()
    c = t_boundaries(design, level, [s - 1 for s in seeds], calibrated=calibrated)
    for k, s in enumerate(seeds):
        part = x[:, :s]
        hit |= part.mean(1) / (part.std(1, ddof=1) / math.sqrt(s)) >= c[k]
    return float(hit.mean())


def test_t_boundaries_calibrated_hold_their_level_where_tail_matching_alone_does_not():
    d = Design(first_seeds=3, stage_seeds=1, max_seeds=8)
    n = 200_000
    se = math.sqrt(0.05 * 0.95 / n)
    raw = _one_hypothesis_rate(d, 0.05, False, n, 11)
    cal = _one_hypothesis_rate(d, 0.05, True, n, 11)
    assert raw > 0.05 + 6 * se  # t with 2-7 df: tail matching alone lets ~14% more through
    assert abs(cal - 0.05) < 4 * se


def test_single_stage_is_the_ordinary_t_test():
    d = Design(first_seeds=6, stage_seeds=1, max_seeds=6)
    assert t_boundaries(d, 0.01, [5])[0] == pytest.approx(scipy.stats.t.isf(0.01, 5))
    assert rci_critical(d, 0, 5) == pytest.approx(scipy.stats.t.isf(0.025, 5))
    # several stages: the repeated interval is wider than the fixed one at every stage
    d2 = Design(first_seeds=3, stage_seeds=1, max_seeds=6)
    for k, n in enumerate(d2.seeds()):
        assert rci_critical(d2, k, n - 1) > scipy.stats.t.isf(0.025, n - 1)


D2 = Design(first_seeds=4, stage_seeds=2, max_seeds=8)  # stages 4, 6, 8


def _c(level: float, k: int, df: float) -> float:
    return float(t_boundaries(D2, level, [df] * (k + 1))[k])


def test_holm_passes_alpha_within_a_stage():
    h1 = Hypothesis(id="a", cells=(A,), test="greater", value=0.9)
    h2 = Hypothesis(id="b", cells=(B,), test="greater", value=0.9)
    c_half, c_full = _c(0.025, 0, 3), _c(0.05, 0, 3)
    assert c_full < c_half
    t_b = (c_half + c_full) / 2  # crosses at alpha, not at alpha/2
    a_obs = (0.9 + (c_half + 5) * 0.01, 0.01, 3)
    b_obs = (0.9 + t_b * 0.01, 0.01, 3)
    res = sequential_decisions(D2, [h1, h2], [{"a": a_obs, "b": b_obs}])[0]
    assert res.claims["a"].decision == "supported" and res.claims["a"].level == pytest.approx(0.025)
    assert res.claims["b"].decision == "supported" and res.claims["b"].level == pytest.approx(0.05)
    assert res.claims["b"].critical == pytest.approx(c_full)
    assert res.cells_next == () and res.seeds_next is None
    # without a's rejection b is held to alpha/2 and continues
    a_weak = (0.9, 0.01, 3)
    res = sequential_decisions(D2, [h1, h2], [{"a": a_weak, "b": b_obs}])[0]
    assert res.claims["b"].decision == "continue" and res.claims["b"].level == pytest.approx(0.025)
    assert res.claims["b"].boundaries[0] == pytest.approx(0.9 + c_half * 0.01)
    assert set(res.cells_next) == {A, B} and res.seeds_next == 6


def test_decided_claims_stay_decided_and_their_cells_stop_unless_another_claim_reads_them():
    h1 = Hypothesis(id="a", cells=(A,), test="greater", value=0.0)
    h2 = Hypothesis(id="ab", cells=(A, B), test="greater", value=0.0)
    h3 = Hypothesis(id="c", cells=(C,), test="greater", value=0.0)
    strong, weak = (1.0, 0.01, 3), (0.0, 1.0, 3)
    stages = [{"a": strong, "ab": weak, "c": weak}, {"a": (-5.0, 0.01, 5), "ab": weak, "c": weak}]
    res = sequential_decisions(D2, [h1, h2, h3], stages)
    assert res[0].claims["a"].decision == "supported"
    assert set(res[0].cells_next) == {A, B, C}  # A is still read by "ab"
    assert res[1].claims["a"].decision == "supported" and res[1].claims["a"].decided_at == 0
    h2b = Hypothesis(id="ab", cells=(B,), test="greater", value=0.0)
    res = sequential_decisions(D2, [h1, h2b, h3], stages[:1])
    assert set(res[0].cells_next) == {B, C}  # only "a" read A: it gets no more seeds


def test_contradicted_futility_and_inconclusive():
    h = Hypothesis(id="a", cells=(A,), test="greater", value=0.5)
    res = sequential_decisions(D2, [h], [{"a": (0.3, 0.005, 3)}])[0]
    assert res.claims["a"].decision == "contradicted" and res.cells_next == ()
    flat = (0.5, 0.05, 3)  # on the threshold: its conditional power at the trend is tiny
    futile = Design(first_seeds=4, stage_seeds=2, max_seeds=8, futility="conditional-power")
    assert sequential_decisions(futile, [h], [{"a": flat}])[0].claims["a"].decision == "futility"
    assert sequential_decisions(D2, [h], [{"a": flat}])[0].claims["a"].decision == "continue"
    # a declared true effect far beyond the threshold keeps it going
    h_eff = Hypothesis(id="a", cells=(A,), test="greater", value=0.5, effect=0.8)
    assert sequential_decisions(futile, [h_eff], [{"a": flat}])[0].claims["a"].decision == "continue"
    last = sequential_decisions(D2, [h], [{"a": flat}, {"a": flat}, {"a": (0.5, 0.05, 7)}])
    assert last[-1].claims["a"].decision == "inconclusive"
    with pytest.raises(DesignError, match="the design has 3"):
        sequential_decisions(D2, [h], [{"a": flat}] * 4)


def test_equivalence_needs_both_sides_and_two_sided_has_no_contra():
    h = Hypothesis(id="eq", cells=(A, B), test="within", margin=0.05)
    c = _c(0.025, 0, 3)
    inside = (0.0, 0.05 / (c + 0.5), 3)  # both one-sided tests at alpha/2 cross
    assert sequential_decisions(D2, [h], [{"eq": inside}])[0].claims["eq"].decision == "supported"
    off = (0.03, 0.05 / (c + 0.5), 3)  # the upper side does not
    assert sequential_decisions(D2, [h], [{"eq": off}])[0].claims["eq"].decision == "continue"
    two = Hypothesis(id="t", cells=(A,), test="two-sided")
    res = sequential_decisions(D2, [two], [{"t": (-1.0, 0.01, 3)}])[0]
    assert res.claims["t"].decision == "supported" and math.isnan(res.claims["t"].contra_level)


def test_from_claim_reads_the_cells_and_the_test():
    bound = make_claim(id="f1", statement="s", kind="bound", task="parity", arch="lstm", threshold=0.99,
                  direction="greater")
    h = from_claim(bound)
    assert (h.test, h.value, h.cells) == ("greater", 0.99, (("parity", "lstm", "default"),))
    diff = make_claim(id="d", statement="s", kind="difference", task="dyck", compare="arch", treatment="gru",
                 reference="transformer", direction="greater", margin=0.05)
    h = from_claim(diff)
    assert h.test == "greater" and h.value == 0.0
    assert h.cells == (("dyck", "gru", "default"), ("dyck", "transformer", "default"))
    beyond = make_claim(id="m", statement="s", kind="difference", task="dyck", compare="arch", treatment="gru",
                   reference="lstm", direction="less", margin=0.1, test_against="margin")
    assert (from_claim(beyond).test, from_claim(beyond).value) == ("less", -0.1)
    eq = make_claim(id="e", statement="s", kind="equivalence", task="dyck", arch="lstm", compare="variant",
               treatment="a", reference="b", margin=0.05)
    assert from_claim(eq).test == "within" and from_claim(eq).cells == (("dyck", "lstm", "a"), ("dyck", "lstm", "b"))
    prof = make_claim(id="p", statement="s", kind="profile_match", task="s3", matches="parity", differs_from="dyck")
    with pytest.raises(DesignError, match="permutation"):
        from_claim(prof)


def test_short_calibration_conv1d_holds_alpha_covers_and_saves_seeds():
    sc = conv1d_scenario()
    null = simulate(sc, "null", 400, seed=3)
    assert null["fwer_supported"] <= 0.05 + 2.5 * null["fwer_supported_se"]
    assert null["fwer_contradicted"] <= 0.05 + 2.5 * null["fwer_contradicted_se"]
    assert null["coverage"] >= 0.95 - 0.02 and null["coverage_min"] >= 0.95 - 2.5 * null["coverage_min_se"]
    eff = simulate(sc, "effect", 300, seed=4)
    assert eff["seeds"] < eff["fixed_seeds"] == 10 and eff["cpu_s"] < eff["fixed_cpu_s"]
    assert eff["power"] > 0.6 and eff["power"] >= eff["fixed_power"] - 0.1


def test_seed_estimate_floors_identical_seeds_at_their_sampling_error():
    from analysis.stats.sequential import seed_estimate

    est, se, df = seed_estimate([0.2, 0.4, 0.6])
    assert (est, df) == pytest.approx((0.4, 2)) and se == pytest.approx(0.2 / math.sqrt(3))
    est, se, df = seed_estimate([1.0, 1.0, 1.0, np.nan], sampling_var=[1e-4] * 3)
    assert (est, df) == (1.0, 2.0) and se == pytest.approx(math.sqrt(1e-4 / 3))
    assert math.isnan(seed_estimate([0.5])[1])


def test_short_calibration_jiang_mixed_truth_many_claims_and_costly_cells():
    from analysis.stats.sequential_calibrate import is_null, jiang_scenario

    sc = jiang_scenario()
    assert len(sc.claims) == 24 and is_null(sc, "mixed").sum() == 12
    mix = simulate(sc, "mixed", 200, seed=5)
    assert mix["fwer_supported"] <= 0.05 + 2.5 * mix["fwer_supported_se"]
    assert mix["coverage"] >= 0.95 - 0.02
    assert mix["power"] > 0.5 and mix["cpu_s"] < mix["fixed_cpu_s"]
    assert math.isnan(simulate(sc, "effect", 2, seed=6, fixed=False)["fwer_supported"])


def test_absent_tests_count_in_the_family_and_take_their_share():
    h1 = Hypothesis(id="a", cells=(A,), test="greater")
    h2 = Hypothesis(id="b", cells=(B,), test="greater")
    strong, weak = (1.0, 0.01, 3), (0.0, 1.0, 3)
    res = sequential_decisions(D2, [h1, h2], [{"a": strong, "b": weak}], absent=(2, 0))[0]
    assert res.claims["a"].level == pytest.approx(0.05 / 4)
    # a's level is shared by b and the two absent tests, as Holm over the whole family would
    assert res.claims["b"].level == pytest.approx(0.05 / 4 + 0.05 / 4 / 3)


def test_a_capped_claim_is_a_fixed_test_at_its_own_maximum_and_its_cells_stop():
    """max_seeds_by_arch: a claim whose cells stop at the first stage is tested once, at the
    exact t quantile of its Holm level, and is final there; the uncapped claim goes on alone."""
    import scipy.stats as ss

    design = Design(first_seeds=3, stage_seeds=5, max_seeds=8, max_seeds_by_arch={"mamba": 3})
    assert design.cap("mamba") == 3 and design.cap("lstm") == 8
    capped = Hypothesis(id="cheap-vs-dear", cells=(("dyck", "lstm", "default"), ("dyck", "mamba", "default")),
                        test="greater", value=0.05, max_seeds=3)
    free = Hypothesis(id="cheap", cells=(("dyck", "lstm", "default"),), test="greater", value=0.9)
    obs = {"cheap-vs-dear": (0.06, 0.01, 2.0), "cheap": (0.95, 0.02, 2.0)}
    st = sequential_decisions(design, [capped, free], [obs])[0]
    c = st.claims["cheap-vs-dear"]
    assert c.decision == "inconclusive" and c.decided_at == 0
    assert c.critical == pytest.approx(ss.t.isf(0.05 / 2, 2), rel=1e-9)  # one look: the plain t test
    assert st.claims["cheap"].decision == "continue"
    assert st.cells_next == (("dyck", "lstm", "default"),) and st.seeds_next == 8
    with pytest.raises(DesignError, match="design: max_seeds_by_arch.mamba is 4, which no stage reaches; write one of 3, 8"):
        Design.parse({"first_seeds": 3, "stage_seeds": 5, "max_seeds": 8, "max_seeds_by_arch": {"mamba": 4}})


def test_short_calibration_capped_cells_hold_alpha_and_never_get_seeds():
    """The Dyck re-run's shape: Mamba and Mamba-2 cells stop at 3 seeds, the others may go to 8."""
    from analysis.stats.sequential_calibrate import jiang_capped_scenario

    sc = jiang_capped_scenario()
    null = simulate(sc, "null", 300, seed=7)
    assert null["fwer_supported"] <= 0.05 + 2.5 * null["fwer_supported_se"]
    assert null["coverage"] >= 0.95 - 0.02
    # 6 of 15 cells stop at 3 and the 9 cheap ones reach 8 under the null: 6.0 seeds a cell
    assert null["seeds"] == pytest.approx((6 * 3 + 9 * 8) / 15) == null["fixed_seeds"]
    eff = simulate(sc, "effect", 200, seed=8)
    assert eff["seeds"] <= eff["fixed_seeds"] and eff["power"] > 0.3


def test_a_real_but_negligible_effect_is_not_supported_sequentially():
    """A difference claim tested against zero with a 5 pp margin: +0.010 with SE 0.001 over 8
    seeds crosses any boundary, but its 95% interval [+0.008, +0.012] lies inside +-0.05, so the
    fixed design would not call it supported: the margin's test crosses too, so it is negligible.
    +0.032 with SE 0.0065 ([+0.017, +0.047]) with the margin's test held to 0.05 / 4 (three
    absent margin tests) crosses neither way: inconclusive. The same estimate at +0.070
    (interval reaching beyond the margin) is supported."""
    from analysis.claims.hypotheses import from_claim

    claim = make_claim(id="d", statement="LSTM beats GRU", kind="difference", task="dyck", compare="arch",
                  treatment="lstm", reference="gru", direction="greater", margin=0.05)
    h = from_claim(claim)
    assert h.test == "greater" and h.value == 0.0 and h.beyond_margin == 0.05
    design = Design(first_seeds=8, stage_seeds=1, max_seeds=8)
    small = sequential_decisions(design, [h], [{"d": (0.010, 0.001, 7.0)}])[0].claims["d"]
    assert small.decision == "negligible" and small.outcome == "negligible"
    near = sequential_decisions(design, [h], [{"d": (0.032, 0.0065, 7.0)}], absent=(0, 3, 0))[0].claims["d"]
    assert near.decision == "inconclusive" and "not shown to be more than negligible" in near.note
    assert near.bound[0] > 0 and near.margin_bound[1] > 0.05 and near.outcome == "inconclusive"
    large = sequential_decisions(design, [h], [{"d": (0.070, 0.001, 7.0)}])[0].claims["d"]
    assert large.decision == "supported" and large.note == "" and large.outcome == "effect"
