"""The seed planner on a claim decided by the share of seeds beyond its threshold (the exact sign
test): planned at the observed share with the test's exact power, and not reachable when the
share is on the wrong side."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.claims import parse_claims
from analysis.claims.planner import make_plan
from analysis.stats.seedshare import seeds_to_decide, share_power
from store import Store
from tests.analysis.claims.test_claims import _write_run


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """3 seeds of one cell whose accuracy is ~0.9 (per-sequence, 200 sequences each)."""
    st = Store.create(str(tmp_path_factory.mktemp("plan") / "s.zarr"))
    rng = np.random.default_rng(3)
    for seed in range(3):
        _write_run(st, f"s3-d-{seed}", "s3", "default", seed, 0.9, rng)
        st.update_run_attrs(f"s3-d-{seed}", metrics={"train_seconds": 10.0})
    return st


def _claim(cid, threshold, direction="greater"):
    return {"id": cid, "statement": "s", "kind": "bound", "metric": "accuracy", "task": "s3", "arch": "mamba",
            "threshold": threshold, "direction": direction, "length": 12}


def test_a_share_claim_is_planned_with_the_exact_tests_power(store):
    p = make_plan(store, parse_claims([_claim("above", 0.5)]))
    row = next(r for r in p.rows if r.id == "above")
    # every seed lies above 0.5: at face value the share is 1, so the fewest seeds the exact test
    # can decide with at level 0.05 are the seeds it needs, and 3 seeds have no power at all
    assert row.needed == seeds_to_decide(0.05) == 5
    assert row.more == 5 and row.cpu_s == pytest.approx(50.0)  # new seeds: the 3 held were tested once
    assert row.power_now == pytest.approx(share_power((3,), 1.0, 0.05, q=0.5, n_max=3, top=0.05)) == 0.0
    from analysis.claims.planner import plan_note

    assert "observed share of seeds beyond" in plan_note(p, p.claims[0], row)
    assert plan_note(p, p.claims[0], row).endswith("route: a replication, its new seeds decided on their own")


def test_a_share_on_the_wrong_side_is_planned_towards_its_contradiction(store):
    """Every seed lies below 0.99: no seed count supports "above 0.99", but enough seeds decide
    it contradicted: the exact sign test of the seeds short of it, at the two-sided level
    (0.025 a side for one claim), needs 6 seeds all short (2^-6 < 0.025 < 2^-5)."""
    from analysis.claims.planner import CONTRA

    p = make_plan(store, parse_claims([_claim("too-high", 0.99)]))
    row = next(r for r in p.rows if r.id == "too-high")
    assert row.needed == seeds_to_decide(0.025) == 6
    assert row.more == 6 and row.cpu_s == pytest.approx(60.0)
    assert row.power_now == pytest.approx(share_power((3,), 1.0, 0.025, q=0.5, n_max=3, top=0.025)) == 0.0
    assert row.reason.startswith(CONTRA) and "two-sided level 0.05" in row.reason
    assert p.total["cells"][("s3", "mamba", "default")] == (3, 9)  # its new seeds, after the 3 held


def test_a_cell_without_a_measured_time_costs_unknown_not_a_guess():
    # runs written from arrays record no training time: the plan summing each cell's cost was a
    # KeyError for such a cell (found by docs/guide/python.md)
    from analysis.claims.planner import new_seeds

    a, b = ("parity", "lstm", "default"), ("parity", "gru", "default")
    assert new_seeds((b,), 6, {b: 2.0}) == (6, 12.0)
    more, cpu = new_seeds((a, b), 6, {b: 2.0})
    assert more == 6 and math.isnan(cpu)
