"""The seed planner (:mod:`analysis.stats.planning`) on known answers: the seeds for power 0.8
against statsmodels' TTestPower, the TOST against its normal approximation, and the costs by
hand."""

import math

import numpy as np
import pytest
import scipy.stats
from statsmodels.stats.power import TTestPower

from analysis.stats.planning import ClaimPlan, plan, plan_total, sd_per_seed, seeds_needed
from analysis.stats.power import tost_power_se


@pytest.mark.parametrize("d", [0.5, 0.8, 1.2, 2.0, 3.0])
@pytest.mark.parametrize("level", [0.05, 0.05 / 10, 0.05 / 48])
@pytest.mark.parametrize("alternative, sm", [("one-sided", "larger"), ("two-sided", "two-sided")])
def test_seeds_match_statsmodels_ttestpower(d, level, alternative, sm):
    sd = 0.04
    nobs = TTestPower().solve_power(effect_size=d, alpha=level, power=0.8, alternative=sm)
    expected = max(2, math.ceil(float(nobs) - 1e-9))
    assert seeds_needed(sd, d * sd, level, alternative=alternative) == expected


def test_seeds_for_a_bound_claim_near_its_ceiling():
    # f1-lstm-parity-perfect-like: 1.000 against 0.99, a seed's SD floored at its 512 sequences'
    # sampling SD at the threshold (the score test's: sqrt(0.99 * 0.01 / 512))
    sd = sd_per_seed(0.0, floor_sd=math.sqrt(0.99 * 0.01 / 512))
    assert sd == pytest.approx(0.004397, rel=1e-3)
    n = seeds_needed(sd, 0.01, 0.05 / 48)
    nobs = TTestPower().solve_power(effect_size=0.01 / sd, alpha=0.05 / 48, power=0.8, alternative="larger")
    assert n == math.ceil(float(nobs)) and n < 10


def test_sd_from_se_and_seeds():
    assert sd_per_seed(se=0.01, n_seeds=4) == pytest.approx(0.02)
    assert sd_per_seed(se=0.01, n_seeds=4, floor_sd=0.05) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="se with n_seeds"):
        sd_per_seed(se=0.01)


def test_equivalence_seeds_agree_with_the_normal_approximation_and_the_tost_power():
    sd, margin, level = 0.02, 0.01, 0.05
    n = seeds_needed(sd, 0.0, level, alternative="equivalence", margin=margin)
    assert n is not None
    # large n: TOST power at 0 is about 2 Phi(margin / se - z) - 1 with z at level/2 per side
    z = scipy.stats.norm.isf(level / 2)
    approx = math.ceil((sd * (z + scipy.stats.norm.isf(0.1)) / margin) ** 2)
    assert abs(n - approx) <= 2
    assert tost_power_se(sd / math.sqrt(n), n - 1, margin, level / 2) >= 0.8
    assert tost_power_se(sd / math.sqrt(n - 1), n - 2, margin, level / 2) < 0.8
    assert seeds_needed(sd, 0.011, level, alternative="equivalence", margin=margin) is None  # outside the margin


def test_plan_costs_new_seeds_in_each_cell_decided_on_their_own():
    # a replication: the seeds held were tested once already; the plan's seeds are all new
    lstm, mamba, gru = ("parity", "lstm", "default"), ("parity", "mamba", "default"), ("dyck", "gru", "default")
    costs = {lstm: 30.0, mamba: 2000.0, gru: 40.0}
    sd = 0.04
    claims = [
        ClaimPlan("bound", (lstm,), sd, 1.5 * sd, 0.05, seeds=3),
        ClaimPlan("diff", (lstm, mamba), sd, 0.8 * sd, 0.05 / 2, seeds=3),
        ClaimPlan("none", (gru,), math.nan, 0.1, 0.05, seeds=3),
        ClaimPlan("far", (gru,), sd, sd / 100, 0.05, seeds=3),
    ]
    rows = plan(claims, costs)
    n0 = math.ceil(float(TTestPower().solve_power(effect_size=1.5, alpha=0.05, power=0.8, alternative="larger")))
    n1 = math.ceil(float(TTestPower().solve_power(effect_size=0.8, alpha=0.025, power=0.8, alternative="larger")))
    assert (rows[0].needed, rows[0].more, rows[0].cpu_s) == (n0, n0, n0 * 30.0)
    assert (rows[1].needed, rows[1].more) == (n1, n1)
    assert rows[1].cpu_s == pytest.approx(n1 * 2030.0)
    assert rows[2].needed is None and "SD" in rows[2].reason and np.isnan(rows[2].cpu_s)
    assert rows[3].needed is None and "more than 200" in rows[3].reason
    assert 0 < rows[0].power_now < 0.8
    total = plan_total(claims, rows, costs)
    assert total["cells"][lstm] == (3, 3 + max(n0, n1)) and total["cells"][mamba] == (3, 3 + n1)
    assert total["cpu_s"] == pytest.approx(max(n0, n1) * 30.0 + n1 * 2000.0)


def test_plan_says_when_a_cell_has_no_measured_time():
    cell = ("s3", "mamba2", "default")
    rows = plan([ClaimPlan("x", (cell,), 0.04, 0.06, 0.05, seeds=3)], {})
    assert rows[0].needed is not None and np.isnan(rows[0].cpu_s) and "s3/mamba2/default" in rows[0].reason
    # as many seeds held as the test needs: they were tested once, the replication still trains its own
    rows = plan([ClaimPlan("y", (cell,), 0.01, 0.06, 0.05, seeds=6)], {cell: 2300.0})
    assert rows[0].needed <= 6 and rows[0].more == rows[0].needed and rows[0].cpu_s == rows[0].needed * 2300.0


def test_cells_holding_different_seeds_each_train_the_replications_new_seeds():
    """After a design that stopped Mamba at 3 and took the GRU to 8, a claim reading both is
    replicated on new seeds in both cells, numbered after each cell's own."""
    from analysis.stats.planning import ClaimPlan, plan, plan_total

    gru, mamba = ("dyck", "gru", "default"), ("dyck", "mamba", "default")
    c = ClaimPlan(id="gru-vs-mamba", cells=(gru, mamba), sd=0.02, effect=0.05, level=0.001, seeds=3)
    costs = {gru: 200.0, mamba: 600.0}
    held = {gru: 8, mamba: 3}
    row = plan([c], costs)[0]
    assert row.needed is not None and 3 < row.needed <= 8
    assert row.more == row.needed and row.cpu_s == row.needed * 800.0  # the GRU's 8 do not count
    total = plan_total([c], [row], costs, held)
    assert total["cells"][gru] == (8, 8 + row.needed) and total["cells"][mamba] == (3, 3 + row.needed)
    assert total["cpu_s"] == row.needed * 800.0


def test_a_claim_whose_cells_are_not_known_is_still_planned():
    from analysis.stats.planning import ClaimPlan, plan

    row = plan([ClaimPlan(id="a", cells=(), sd=0.1, effect=0.1, level=0.05, seeds=3)], {})[0]
    assert row.needed is not None and row.more == row.needed
