"""A combined table says, of each claim still undecided, what the seed planner of the part that
evaluated it said deciding it would cost: the part's results/seed_plan (or its report's
tables/seed_plan.csv), carried row by row and listed under the verdict table."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.claims import combine_parts, parse_claims
from analysis.claims.combine import read_part, read_plan
from tests.analysis.claims.test_kept_profiles import CLAIMS, ROW, kept  # noqa: F401  (a fixture)

TASKS = ("parity", "s3", "dyck")


@pytest.mark.parametrize("source", ["store", "report"])
def test_each_row_carries_the_plan_of_the_part_that_evaluated_it(kept, source):  # noqa: F811
    base, reports, _ = kept
    paths = {t: str(base / f"{t}.zarr") if source == "store" else str(reports[t]) for t in TASKS}
    plans = {t: read_plan(p) for t, p in paths.items()}
    assert all(plan is not None for plan in plans.values())
    combined = combine_parts(parse_claims(CLAIMS), [(p, read_part(p)) for p in paths.values()],
                             plans=[(p, plan) for t, p in paths.items() if (plan := plans[t]) is not None])
    undecided = 0
    for t, p in paths.items():
        plan = plans[t]
        assert plan is not None and len(plan.rows) >= 1
        for _, r in plan.rows.iterrows():
            row = combined.sel(claim=str(r["claim"]))
            assert str(row.part.values) == p
            for k in ("seeds", "needed", "more", "cpu_s"):
                want = float(r[k]) if str(r[k]) != "" else np.nan  # a CSV's empty cell is a NaN
                assert float(row[f"plan_{k}"]) == pytest.approx(want, nan_ok=True), k
            assert str(row.plan_note.values) == str(r["note"]) and str(row.plan_note.values)
            undecided += str(row.verdict.values) == "inconclusive"
    assert undecided >= 1  # the test reads an undecided claim's plan, not only decided ones'
    # a row no part evaluated carries no plan
    assert np.isnan(float(combined.sel(claim=ROW).plan_needed)) and str(combined.sel(claim=ROW).plan_note.values) == ""


def test_the_combined_table_lists_each_undecided_claim_with_its_cost(kept, tmp_path):  # noqa: F811
    from layerstate.cli import main

    base, reports, _ = kept
    exp = tmp_path / "claims.toml"
    exp.write_text("".join("[[claims]]\n" + "".join(
        f"{k} = {v!r}\n".replace("'", '"') for k, v in c.items()) for c in CLAIMS))
    # one part's report without its plan (a report made before plans were stored)
    bare = tmp_path / "dyck-report"
    shutil.copytree(reports["dyck"], bare)
    (bare / "tables" / "seed_plan.csv").unlink()
    # the parts' runs as a report records them: training and capture seconds per run
    import pandas as pd

    for t in ("parity", "s3"):
        shutil.copytree(reports[t], tmp_path / t)
        runs = pd.read_csv(tmp_path / t / "tables" / "runs.csv")
        runs["train_seconds"], runs["capture_seconds"] = 10.0 + runs["seed"], 2.0
        runs.to_csv(tmp_path / t / "tables" / "runs.csv", index=False)
    reports = {**reports, "parity": tmp_path / "parity", "s3": tmp_path / "s3"}
    out = tmp_path / "combined"
    res = CliRunner().invoke(main, ["combine", str(reports["parity"]), str(reports["s3"]), str(bare),
                                    "--claims", str(exp), "--out", str(out)])
    assert res.exit_code == 0, res.output
    md = (out / "claims.md").read_text()
    assert "## What deciding the undecided claims would cost" in md
    section = md.split("## What deciding the undecided claims would cost", 1)[1]
    lines = {ln.split(" | ")[0].lstrip("| "): ln for ln in section.splitlines() if ln.startswith("| ")}
    for t in ("parity", "s3"):
        plan = read_plan(str(reports[t]))
        assert plan is not None
        r = plan.rows.iloc[0]
        line = lines[str(r["claim"])]
        assert f"| {int(float(r['needed']))} |" in line and str(reports[t]) in line
    assert "no plan kept by its part" in lines["dyck-early"]
    # each cell an undecided claim reads trains once the most new seeds they need (a replication,
    # decided on them alone), at its runs' mean cost

    cells = {ln.split(" | ")[0].lstrip("| "): ln.strip("| ").split(" | ") for ln in section.splitlines()
             if ln.startswith("| ") and "/default" in ln.split(" | ")[0]}
    total = 0.0
    for t in ("parity", "s3"):
        plan = read_plan(str(reports[t]))
        assert plan is not None
        need = max(float(v) for v in plan.rows["needed"] if v != "")
        runs = pd.read_csv(reports[t] / "tables" / "runs.csv")
        held = runs["seed"].nunique()
        got = cells[f"{t}/lstm/default"]
        cost = (runs["train_seconds"] + runs["capture_seconds"]).mean() * need
        assert got[1:4] == [str(held), str(held + int(need)), str(int(need))]
        assert float(got[4].replace(",", "")) == pytest.approx(cost, abs=0.5)
        total += cost
    assert total > 0 and f"In all: {total:,.0f} CPU s" in section
    assert ROW not in lines  # decided from the kept profiles: not listed
    # combined without any plan, the table has no such section
    res = CliRunner().invoke(main, ["combine", str(bare), "--claims", str(exp), "--out", str(tmp_path / "c2")])
    assert res.exit_code == 0, res.output
    assert "would cost" not in (tmp_path / "c2" / "claims.md").read_text()


def test_a_part_plan_that_said_only_wrong_side_is_planned_towards_its_contradiction(tmp_path):
    """A part planned before plans went towards a contradiction said "not reachable (estimate on
    the wrong side)"; combining plans it as the planner now does on the part's store: the same
    seeds, more and CPU seconds, from the part's costs."""
    import pandas as pd

    from analysis.claims.cells import cell_costs, seeds_held
    from analysis.claims.combine import PartPlan
    from analysis.claims.planner import CONTRA, WRONG_SIDE, make_plan
    from analysis.claims.stored import evaluate_stored_claims
    from store import Store
    from tests.analysis.claims.test_claims import _write_run

    st = Store.create(str(tmp_path / "s.zarr"))
    rng = np.random.default_rng(3)
    for seed in range(4):
        _write_run(st, f"s3-d-{seed}", "s3", "default", seed, 0.9, rng)
        st.update_run_attrs(f"s3-d-{seed}", metrics={"train_seconds": 10.0 + seed})
    claims = parse_claims([{"id": "too-high", "statement": "s", "kind": "bound", "metric": "accuracy", "task": "s3",
                            "arch": "mamba", "threshold": 0.99, "direction": "greater", "length": 12}])
    part = evaluate_stored_claims(st, claims)
    assert str(part.verdict.sel(claim="too-high").values) == "inconclusive"  # 4 seeds: the sign test cannot decide
    now = next(r for r in make_plan(st, claims).rows if r.id == "too-high")
    assert now.reason.startswith(CONTRA) and now.needed is not None and now.more > 0
    old = PartPlan(pd.DataFrame({"claim": ["too-high"], "seeds": ["4"], "needed": [""], "more": [""], "cpu_s": [""],
                                 "note": [WRONG_SIDE]}), cell_costs(st), seeds_held(st))
    row = combine_parts(claims, [("part", part)], plans=[("part", old)]).sel(claim="too-high")
    assert int(row.plan_needed) == now.needed and int(row.plan_more) == now.more
    assert float(row.plan_cpu_s) == pytest.approx(now.cpu_s) == pytest.approx(now.more * 11.5)
    assert str(row.plan_note.values) == f"{now.reason}; route: a replication, its new seeds decided on their own"
    # read from the store, the plan is the new one already
    stored = read_plan(str(tmp_path / "s.zarr"))
    assert stored is not None and stored.rows.set_index("claim").loc["too-high", "note"] == str(row.plan_note.values)


def test_an_undecided_profile_claim_is_planned_by_resampling_its_kept_profiles(kept, tmp_path):  # noqa: F811
    """With 3 seeds a task the exact permutation test cannot reach the claim's level (smallest p
    2 / C(6, 3) = 0.1); its plan is the fewest seeds a task at which resampled seeds support it
    in 80% of draws, no fewer than the test can decide with, and what they cost per task."""
    import pandas as pd

    from analysis.claims.combine import PartPlan, read_profiles
    from analysis.stats.profiles import attainable_min_p

    base, reports, _ = kept
    paths = {t: str(base / f"{t}.zarr") for t in TASKS}
    three = []
    for p in paths.values():
        frame = read_profiles(p)
        assert frame is not None
        three.append((p, frame[pd.to_numeric(frame["seed"]) < 3]))
    plans = []
    for i, (t, p) in enumerate(paths.items()):  # the parts as if they held 3 seeds, 10, 20, 30 s a seed
        plan = read_plan(p)
        assert plan is not None
        plans.append((p, PartPlan(plan.rows, {(t, "lstm", "default"): 10.0 * (i + 1)}, {(t, "lstm", "default"): 3})))
    combined = combine_parts(parse_claims(CLAIMS), [(p, read_part(p)) for p in paths.values()],
                             profiles=three, plans=plans)
    row = combined.sel(claim=ROW)
    assert str(row.verdict.values) == "inconclusive" and str(row.part.values).startswith("profiles: ")
    level = float(row.level)
    fewest = next(m for m in range(2, 30) if attainable_min_p(m, m) < level)
    assert int(row.plan_needed) == fewest  # the planted profiles differ clearly: power 1 once the test can decide
    assert int(row.plan_more) == fewest and int(row.plan_seeds) == 3  # new seeds: the 3 held were tested once
    assert float(row.plan_cpu_s) == pytest.approx(fewest * (10.0 + 20.0 + 30.0))
    assert str(row.plan_note.values).startswith("planned by resampling the kept per-seed profiles")
    assert str(row.plan_note.values).endswith("route: a replication, its new seeds decided on their own")


def test_the_resampled_power_of_the_shape_test_is_its_level_under_the_null_and_one_far_from_it():
    from analysis.stats.profiles import shape_test_power

    rng = np.random.default_rng(5)
    rising = np.linspace(0.5, 1.0, 5)
    same = [rising + rng.normal(0, 0.05, (12, 5)) for _ in range(3)]
    # one population: the test's rejections stay near its level (0.05; 400 draws, 3 SE = 0.033)
    assert shape_test_power(same[0], same[1], same[2], (8, 8, 8), 0.05, n_resamples=400) < 0.05 + 0.033
    late = np.array([0.5, 0.5, 0.5, 0.55, 1.0]) + rng.normal(0, 0.02, (12, 5))
    assert shape_test_power(same[0], late, same[2], (6, 6, 6), 0.01) == 1.0
    # the claim also needs its profile closer to `matches`: never supported when it is not
    falling = np.linspace(1.0, 0.5, 5) + rng.normal(0, 0.02, (12, 5))
    assert shape_test_power(same[0], late, falling, (6, 6, 6), 0.01) == 0.0
