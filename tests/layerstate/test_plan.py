"""`layerstate plan`: the seeds each claim needs for power 0.8 at its margin and Holm level, and
their CPU time from the runs' stored training times, on a planted store with a known answer."""

from __future__ import annotations

import re

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.claims import evaluate_claims, parse_claims
from analysis.claims.cells import cell_costs
from analysis.claims.planner import make_plan
from layerstate.cli import main
from layerstate.present import plan_lines, replication_store
from store import Store
from tests.analysis.claims.test_claims import _write_run

CLAIMS = [
    {"id": "s3-conv", "statement": "Removing Conv1D lowers S3 accuracy", "kind": "difference", "task": "s3",
     "arch": "mamba", "treatment": "no_conv", "reference": "default", "direction": "less", "margin": 0.05,
     "length": 12},
    {"id": "s3-high", "statement": "S3 accuracy above 0.8", "kind": "bound", "task": "s3", "arch": "mamba",
     "threshold": 0.8, "direction": "greater", "length": 12, "statistic": "mean"},
    {"id": "s3-any", "statement": "Removing Conv1D changes S3 accuracy", "kind": "difference", "task": "s3",
     "arch": "mamba", "treatment": "no_conv", "reference": "default", "length": 12},
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """3 seeds; the conv costs 4 pp with seed-to-seed noise; training takes 10 s a seed with the
    conv and 30 s without."""
    path = str(tmp_path_factory.mktemp("plan") / "s.zarr")
    st = Store.create(path)
    rng = np.random.default_rng(2)
    with st.deferred_consolidation():
        for seed in range(3):
            offset = rng.normal(0, 0.03)
            for variant, drop, secs in (("default", 0.0, 10.0), ("no_conv", 0.04, 30.0)):
                rid = f"s3-{variant}-{seed}"
                _write_run(st, rid, "s3", variant, seed, 0.85 + offset - drop + rng.normal(0, 0.04), rng)
                st.update_run_attrs(rid, metrics={"train_seconds": secs})
    return st, path


def test_each_claim_needs_the_seeds_its_corrected_test_needs_and_they_cost_their_cells_time(store):
    from analysis.stats.power import power_se

    store, _ = store
    claims = parse_claims(CLAIMS)
    p = make_plan(store, claims)
    assert cell_costs(store) == {("s3", "mamba", "default"): 10.0, ("s3", "mamba", "no_conv"): 30.0}
    res = evaluate_claims(store, claims).sel(claim="s3-conv")
    row = next(r for r in p.rows if r.id == "s3-conv")
    sd, level = float(res.se) * np.sqrt(3), float(res.level)
    # the fewest seeds whose one-sided t at the claim's Holm level has power 0.8 at the margin
    n = row.needed
    assert n is not None and n > 3
    assert power_se(0.05, sd / np.sqrt(n), n - 1, level, "one-sided") >= 0.8
    assert power_se(0.05, sd / np.sqrt(n - 1), n - 2, level, "one-sided") < 0.8
    # new seeds in each cell, decided on their own: the 3 held were tested once already
    assert row.more == n and row.cpu_s == pytest.approx(n * (10 + 30))
    # the bound claim reads one cell: its seeds cost that cell's 10 s each
    high = next(r for r in p.rows if r.id == "s3-high")
    assert high.needed is not None and high.cpu_s == pytest.approx(high.more * 10.0)
    # a claim without a margin has no effect to plan at, and says so
    assert "no margin declared" in p.skipped["s3-any"]
    text = "\n".join(plan_lines(p))
    assert "planned at the observed distance to its threshold" in text and "nan" not in text.lower()


def test_the_plan_command_prints_the_table_and_writes_nothing(store, tmp_path):
    store, path = store
    exp = tmp_path / "claims.toml"
    exp.write_text("".join(
        "[[claims]]\n" + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in c.items()) for c in CLAIMS))
    before = sorted(store.results())
    res = CliRunner().invoke(main, ["plan", str(exp), "--store", path])
    assert res.exit_code == 0, res.output
    assert "s3-conv |" in res.output and "total:" in res.output and "cell s3/mamba/no_conv" in res.output
    assert sorted(store.results()) == before
    # what to run next, for exactly the cells that need seeds: new seeds, numbered after those
    # held, trained into a replication store beside the one read and decided there on their own
    lines = res.output.splitlines()
    cell = next(line for line in lines if line.startswith("cell s3/mamba/no_conv"))
    new, have = (int(x) for x in re.fullmatch(r"cell s3/mamba/no_conv: (\d+) new seeds \(\d+-\d+; it holds "
                                              r"(\d+)\), 30 s per seed", cell).groups())
    assert new > 0 and have == 3
    assert any(line.startswith("next: a replication, its new seeds decided on their own") for line in lines)
    train = [line.strip() for line in lines if line.strip().startswith("layerstate train")]
    seeds = f"{have}-{have + new - 1}" if new > 1 else str(have)  # a range, not a flag per seed
    assert f"layerstate train {exp} --store {replication_store(path)} --task s3 --arch mamba --seed {seeds}" in train
    assert not any(" 0 new seeds" in line for line in lines if line.startswith("cell "))  # no cell that needs none


def test_a_bound_claim_whose_estimate_is_on_the_wrong_side_is_planned_towards_its_contradiction(store):
    """Issue 52: a bound claim `stats` calls contradicted (estimate 0.850, "above 0.95") was
    planned at the absolute distance to its threshold: "power now 1.00, seeds for power 0.8:
    2". Planned at the signed effect, the claim's own side, no seed count supports it; the
    seeds that decide it are those of the other side's test (contradicted, two-sided level),
    at the observed distance. A claim on the right side is still planned at its distance."""
    from analysis.claims.planner import CONTRA

    store, _ = store
    high = {**CLAIMS[1], "id": "s3-very-high", "statement": "S3 accuracy above 0.99", "threshold": 0.99}
    low = {**CLAIMS[1], "id": "s3-below", "statement": "S3 accuracy below 0.99", "threshold": 0.99,
           "direction": "less"}
    claims = parse_claims([high, low])
    res = evaluate_claims(store, claims[:1])
    assert str(res.sel(claim="s3-very-high").verdict.values) == "contradicted"
    assert float(res.sel(claim="s3-very-high").upper) < 0.99
    p = make_plan(store, claims)
    wrong = next(r for r in p.rows if r.id == "s3-very-high")
    assert wrong.reason.startswith(CONTRA) and "two-sided level" in wrong.reason
    assert wrong.needed is not None and wrong.more == wrong.needed
    assert wrong.cpu_s == pytest.approx(10.0 * wrong.more)  # 10 s a seed in its cell
    # planned at the level of that test's Holm step among the two claims' (0.05 / 2, two-sided)
    assert "two-sided level 0.025" in wrong.reason and 0.05 < wrong.power_now < 1
    right = next(r for r in p.rows if r.id == "s3-below")
    assert right.needed is not None and right.reason == ""
    effects = {c.id: c.effect for c in p.claims}
    assert effects["s3-very-high"] < 0 < effects["s3-below"]
    assert effects["s3-below"] == pytest.approx(-effects["s3-very-high"])
    text = "\n".join(plan_lines(p))
    line = next(v for v in text.splitlines() if v.startswith("s3-very-high |"))
    assert CONTRA in line and "not reachable" not in line
    assert "nan" not in text.lower()
    assert p.total["cells"][("s3", "mamba", "default")] == (3, 3 + max(right.needed, wrong.needed))


def test_a_claim_its_design_decided_is_skipped_with_the_designs_words(store):
    store, _ = store
    claims = parse_claims(CLAIMS)
    words = "decided by its design: supported at stage 2 (5 seeds); it needs no more seeds"
    p = make_plan(store, claims, decided={"s3-high": words})
    assert p.skipped["s3-high"] == words and all(r.id != "s3-high" for r in p.rows)
    assert f"s3-high | – | – | – | – | – | not planned: {words}" in "\n".join(plan_lines(p))
