"""The sequential TOST of a difference claim tested against zero with a margin
(:func:`analysis.stats.sequential.sequential_decisions`): such a claim can end ``equivalent`` or
``negligible`` under a design, as the fixed design's outcomes (docs/decisions.md), each decided
by both one-sided tests against the margin with their own spending in a Holm family of their own."""

import math

import pytest

from analysis.claims.hypotheses import family_counts, from_claim
from analysis.claims.spec import make_claim
from analysis.stats.sequential import (
    Design,
    sequential_decisions,
    stage_critical,
)

#: f3-lstm-dyck-rises-late as experiments/jiang2026_cpu.toml declares it.
RISES_LATE = make_claim(id="f3-lstm-dyck-rises-late", statement="LSTM: probe accuracy still rises from L1 to L3",
                   kind="difference", metric="probe_accuracy", task="dyck", arch="lstm", compare="layer",
                   treatment="L3", reference="L1", direction="greater", margin=0.05)
#: The Dyck re-run's design: 3 seeds, then 8.
DYCK = Design(first_seeds=3, stage_seeds=5, max_seeds=8)
#: Its stages as docs/results/jiang2026_cpu/dyck_sequential records them: (estimate, se, df).
STAGES = [{"f3-lstm-dyck-rises-late": (1.61812297733895e-05, 0.0024233070374361436, 2.0)},
          {"f3-lstm-dyck-rises-late": (6.008471349711053e-06, 0.0014864584012587718, 7.0)}]


def test_a_flat_difference_inside_its_margin_ends_equivalent_not_inconclusive():
    """+0.000 [-0.004, +0.004] at 8 seeds against a margin of 0.05, in a family of 45 tests: both
    one-sided tests against +-0.05 cross their boundaries (t about 34 against 5.3), so the design
    says ``equivalent`` where it said ``inconclusive``; at 3 seeds (boundary 5,392) it goes on."""
    h = from_claim(RISES_LATE, cells=(("dyck", "lstm", "default"),))
    assert h.beyond_margin == 0.05
    res = sequential_decisions(DYCK, [h], STAGES, absent=(44, 0))
    first, last = res[0].claims[h.id], res[1].claims[h.id]
    assert first.decision == "continue" and first.outcome == ""
    assert last.decision == "equivalent" and last.outcome == "equivalent" and last.decided_at == 1
    assert last.margin_level == pytest.approx(0.05 / 45)  # the absent tests count in the margin family too
    c = stage_critical(DYCK.seeds(), 0.05 / 45 / 2, DYCK.spending, 1, 7.0)
    est, se = STAGES[1][h.id][:2]
    assert last.margin_bound == pytest.approx((est - c * se, est + c * se))
    assert -0.05 < last.margin_bound[0] and last.margin_bound[1] < 0.05
    assert "nan" not in last.note.lower()


def test_a_real_effect_inside_the_margin_ends_negligible():
    """+0.010 (SE 0.001, 8 seeds) against zero with a margin of 0.05: different from zero and
    within the margin, both after correction: ``negligible`` (it was ``inconclusive``)."""
    claim = make_claim(id="d", statement="LSTM beats GRU", kind="difference", task="dyck", compare="arch",
                  treatment="lstm", reference="gru", direction="greater", margin=0.05)
    one = Design(first_seeds=8, stage_seeds=1, max_seeds=8)
    c = sequential_decisions(one, [from_claim(claim)], [{"d": (0.010, 0.001, 7.0)}])[0].claims["d"]
    assert (c.decision, c.outcome) == ("negligible", "negligible")
    big = sequential_decisions(one, [from_claim(claim)], [{"d": (0.070, 0.001, 7.0)}])[0].claims["d"]
    assert (big.decision, big.outcome) == ("supported", "effect")


def test_a_real_effect_whose_interval_lies_inside_the_margin_keeps_collecting_seeds_for_the_margin():
    """Different from zero at stage 1 but its plain 95% interval inside +-0.05 and the margin's
    test not yet crossed: it continues (it used to stop as inconclusive); at stage 2 the margin's
    test crosses and it is ``negligible``, decided there."""
    h = from_claim(RISES_LATE, cells=(("dyck", "lstm", "default"),))
    d = Design(first_seeds=4, stage_seeds=4, max_seeds=8)
    # stage 1: t 8.75 against 5.68 (own test), but 0.015 / 0.004 = 3.75 short of the margin's 8.94,
    # and the plain interval [+0.022, +0.048] inside +-0.05; stage 2: 0.02 / 0.003 = 6.7 against 2.40
    stages = [{h.id: (0.035, 0.004, 3.0)}, {h.id: (0.03, 0.003, 7.0)}]
    res = sequential_decisions(d, [h], stages)
    assert res[0].claims[h.id].decision == "continue" and res[0].cells_next == h.cells
    assert "margin" in res[0].claims[h.id].note
    assert res[1].claims[h.id].decision == "negligible" and res[1].claims[h.id].decided_at == 1


def test_a_claim_tested_against_its_margin_is_contradicted_inside_it():
    """test_against = "margin" ("more than 0.05"): an interval wholly short of +0.05 refutes it,
    decided by the opposite side's test (at the two-sided level), never "equivalent"."""
    claim = RISES_LATE.model_copy(update={"test_against": "margin"})
    h = from_claim(claim, cells=(("dyck", "lstm", "default"),))
    assert (h.test, h.value, h.beyond_margin) == ("greater", 0.05, None)
    res = sequential_decisions(DYCK, [h], STAGES, absent=(44, 0))
    assert res[1].claims[h.id].decision == "contradicted" and res[1].claims[h.id].outcome == ""


def test_family_counts_match_the_tests_each_family_holds():
    bound = make_claim(id="b", statement="s", kind="bound", task="dyck", arch="lstm", threshold=0.9, direction="greater")
    prof = make_claim(id="p", statement="s", kind="profile_match", task="s3", matches="parity", differs_from="dyck",
                 archs=["lstm", "gru"])
    beyond = RISES_LATE.model_copy(update={"test_against": "margin", "id": "m"})
    # own: one each, two rows of the profile claim; margin: the difference against zero only;
    # opposite side: the bound and both directional differences
    assert family_counts([RISES_LATE, bound, prof, beyond]) == (5, 1, 3)


def test_a_margin_claim_at_the_edge_of_its_margin_is_not_declared_equivalent_more_than_alpha():
    """Short simulation: differences with a margin whose truth sits on the margin (the margin
    family's null) are declared equivalent or negligible in at most alpha of the experiments."""
    from analysis.stats.sequential_calibrate import conv1d_margin_scenario, simulate

    sc = conv1d_margin_scenario()
    edge = simulate(sc, "effect", 200, seed=12, factor=1.0, fixed=False)
    assert edge["fwer_margin"] <= 0.05 + 2.5 * edge["fwer_margin_se"]
    flat = simulate(sc, "null", 200, seed=13, fixed=False)
    assert flat["margin_power"] > 0.1 and math.isnan(flat["fwer_margin"])


def test_a_claim_decided_by_its_margin_is_shown_with_the_margins_boundaries():
    """Issue 69 item 5: the line, the stored stages, the report's tables and figure of a claim
    decided ``equivalent`` by its margin's test give that test's boundaries (-0.05 + c se,
    +0.05 - c se at the margin's level), not its own test's (0 -+ c se against zero)."""
    from analysis.claims.sequential import SequentialRun, sequential_dataset
    from layerstate.present import sequential_lines
    from reports.seeds import boundary_text, claims_frame, looks_frame

    h = from_claim(RISES_LATE, cells=(("dyck", "lstm", "default"),))
    stages = sequential_decisions(DYCK, [h], STAGES, absent=(44, 0))
    last = stages[1].claims[h.id]
    assert last.decision == "equivalent"
    c = stage_critical(DYCK.seeds(), 0.05 / 45 / 2, DYCK.spending, 1, 7.0)
    est, se = STAGES[1][h.id][:2]
    assert last.margin_boundaries == pytest.approx((-0.05 + c * se, 0.05 - c * se))
    assert last.boundaries[0] < 0.01  # its own test (greater than 0) asks far less: not what decided it
    run = SequentialRun(DYCK, stages, {("dyck", "lstm", "default"): 8}, caps={h.id: 8},
                        tests={h.id: "greater than 0"}, margin_tests={h.id: "within 0 +- 0.05"},
                        added=[(3, 1.0), (5, 2.0)])
    line = [ln for ln in sequential_lines(run) if ln.startswith("stage 2 ")][0]
    assert (f"boundary of its margin's test (within 0 +- 0.05) {-0.05 + c * se:+.3f}, {0.05 - c * se:+.3f} "
            f"at level {0.05 / 45:.2g}") in line, line
    ds = sequential_dataset(run)
    looks = looks_frame(ds, {})
    at2 = looks[looks["stage"] == 2].iloc[0]
    assert (at2["bound_low"], at2["bound_high"]) == pytest.approx((-0.05 + c * se, 0.05 - c * se))
    assert at2["test"] == "within 0 +- 0.05" and at2["level"] == pytest.approx(0.05 / 45)
    row = claims_frame(ds, looks).iloc[0]
    assert boundary_text(row) == f"between {-0.05 + c * se:.3f} and {0.05 - c * se:.3f}"  # unsigned: no kind given
    # stage 1 (3 seeds): the margin's two one-sided boundaries cross; the figure's lines say so
    at1 = looks[looks["stage"] == 1].iloc[0]
    assert at1["bound_low"] > at1["bound_high"]
