"""`layerstate run --design`: a group-sequential design run stage by stage on a tiny grid. The
next stage trains new seeds only for the cells undecided claims read, a claim whose cells are
capped (max_seeds_by_arch) is decided at its own maximum, and the stages go into the store."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from layerstate.cli import main
from store import Store

TINY = """
[experiment]
name = "tiny-seq"

[grid]
tasks = ["parity"]
archs = ["lstm", "gru"]
seeds = [0, 1]

[train]
length = 12
steps = 30
batch_size = 16
eval_every = 10
n_eval = 32
eval_lengths = [12, 20]
n_test = 32
warmup = 2

[capture]
lengths = [12, 20]
n_sequences = 40

[models.lstm]
d_model = 16
n_layers = 2

[models.gru]
d_model = 16
n_layers = 2

# Neither can be decided at 2 seeds (a t with 1 degree of freedom against an O'Brien-Fleming
# first boundary): the LSTM's goes on to its third seed; the GRU's cells stop at 2. Both are
# about the mean (statistic = "mean"): the assertions below read the t's SE and repeated interval.
[[claims]]
id = "lstm-above-chance"
statement = "the LSTM is above chance at 20"
kind = "bound"
metric = "accuracy"
task = "parity"
arch = "lstm"
direction = "greater"
threshold = 0.5
length = 20
statistic = "mean"

[[claims]]
id = "gru-above-chance"
statement = "the GRU is above chance at 20"
kind = "bound"
metric = "accuracy"
task = "parity"
arch = "gru"
direction = "greater"
threshold = 0.5
length = 20
statistic = "mean"
"""

DESIGN = """
[design]
first_seeds = 2
stage_seeds = 1
max_seeds = 3
spending = "obrien-fleming"
max_seeds_by_arch = { gru = 2 }
"""


@pytest.mark.slow
def test_run_with_a_design_trains_only_the_cells_undecided_claims_read(tmp_path):
    exp = tmp_path / "tiny.toml"
    exp.write_text(TINY)
    design = tmp_path / "design.toml"
    design.write_text(DESIGN)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["run", str(exp), "--out", str(out), "--design", str(design), "--jobs", "1"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    st = Store.open(str(out / "store.zarr"))
    runs = set(st.run_ids())
    assert {"parity-lstm-default-s0", "parity-lstm-default-s1", "parity-lstm-default-s2"} <= runs
    assert "parity-gru-default-s2" not in runs  # capped at 2: never trained
    assert "stage at 3 seeds: 5 runs (parity/lstm/default 3)" in res.output
    # only the analyses the claims read: behaviour, no probes
    assert any(r.startswith("behaviour/") for r in st.results())
    assert not any(r.startswith("probes/") for r in st.results())
    seq = st.read_result("sequential")
    assert list(seq.seeds.values) == [2, 3]
    assert list(seq.runs_added.values) == [4, 1]
    assert float(seq.cpu_seconds[1]) > 0
    gru = seq.sel(claim="gru-above-chance")
    assert int(gru.max_seeds) == 2 and int(gru.decided_at) == 1 and str(gru.final.item()) in (
        "inconclusive", "contradicted", "supported")
    lstm = seq.sel(claim="lstm-above-chance")
    assert str(lstm.decision.sel(stage=1).item()) == "continue" and int(lstm.max_seeds) == 3
    assert str(lstm.decision.sel(stage=2).item()) in ("inconclusive", "contradicted", "supported")
    assert str(gru.decision.sel(stage=2).item()) == ""  # decided at stage 1: not evaluated again
    assert str(seq.cells_next.sel(stage=1).item()) == "parity/lstm/default"
    assert json.loads(seq.attrs["design"])["max_seeds_by_arch"] == {"gru": 2}
    assert "the design is complete" in res.output
    # the claims table holds the design's verdicts (the fixed look at every seed kept beside)
    claims = st.read_result("claims")
    for cid, row in ((c, seq.sel(claim=c)) for c in ("gru-above-chance", "lstm-above-chance")):
        got = claims.sel(claim=cid)
        assert str(got.verdict.item()) == str(row.final.item())
        assert str(got.reason.item()).startswith("group-sequential design (2 -> 3 seeds")
        assert str(got.fixed_verdict.item()) in ("supported", "inconclusive", "contradicted")
        assert int(got.sequential_stage) == int(row.decided_at)
        stop = int(row.decided_at)
        assert float(got.upper) == pytest.approx(min(1.0, float(row.rci_high.sel(stage=stop))))  # an accuracy: <= 1
        assert int(got.n_seeds) == int(seq.seeds.sel(stage=stop))
        assert float(got.se) == pytest.approx(float(row.se.sel(stage=stop)))
        # the fixed look's tests describe another analysis: blank here, kept as fixed_*
        assert np.isnan(float(got.p_adjusted)) and np.isfinite(float(got.fixed_p_adjusted))
        assert str(got.outcome.item()) == ""
    # a second run resumes: nothing trained again, the same stages
    again = CliRunner().invoke(main, ["run", str(exp), "--out", str(out), "--design", str(design), "--jobs", "1"],
                               catch_exceptions=False)
    assert again.exit_code == 0 and "already trained" in again.output
    assert set(Store.open(str(out / "store.zarr")).run_ids()) == runs


def test_a_design_whose_first_stage_is_not_the_grid_is_refused(tmp_path):
    exp = tmp_path / "tiny.toml"
    exp.write_text(TINY.replace("seeds = [0, 1]", "seeds = [0, 1, 2]"))
    design = tmp_path / "design.toml"
    design.write_text(DESIGN)
    res = CliRunner().invoke(main, ["run", str(exp), "--out", str(tmp_path / "o"), "--design", str(design)])
    assert res.exit_code != 0
    assert "not the design's first stage; write seeds = [0, 1]" in res.output
    assert not (tmp_path / "o" / "store.zarr").exists()


def test_a_design_starting_above_the_grids_seeds_extends_them_and_says_so(tmp_path):
    # a file first run with 2 fixed seeds, then a design whose first stage is 3 (so that an
    # exact test over seeds becomes evaluable): the grid's seeds become 0, 1, 2
    from analysis.stats.design import Design
    from layerstate.experiment import load_experiment
    from layerstate.pipeline import check_staged, with_design

    exp_path = tmp_path / "tiny.toml"
    exp_path.write_text(TINY)
    exp = load_experiment(exp_path)
    said: list[str] = []
    staged = with_design(exp, Design(first_seeds=3, stage_seeds=2, max_seeds=5), "d.toml", said.append)
    assert staged.grid.seeds == [0, 1, 2] and exp.grid.seeds == [0, 1]
    assert said == ["d.toml: the first stage is seeds 0..2 (the grid of the experiment file says 0, 1; "
                    "the design's first stage replaces it)"]
    check_staged(staged)
    assert sorted({r.seed for r in staged.plan.runs()}) == [0, 1, 2]
    # the same first stage: nothing changed, nothing said (a smaller one is refused, above)
    same = with_design(exp, Design(first_seeds=2, stage_seeds=1, max_seeds=3), "d.toml", said.append)
    assert same.grid.seeds == [0, 1] and len(said) == 1


def test_a_cap_no_stage_reaches_is_refused(tmp_path):
    exp = tmp_path / "tiny.toml"
    exp.write_text(TINY)
    design = tmp_path / "design.toml"
    design.write_text(DESIGN.replace("max_seeds = 3", "max_seeds = 6").replace("stage_seeds = 1", "stage_seeds = 2")
                      .replace("gru = 2", "gru = 3"))
    res = CliRunner().invoke(main, ["run", str(exp), "--out", str(tmp_path / "o"), "--design", str(design)])
    assert res.exit_code != 0
    assert "max_seeds_by_arch.gru is 3, which no stage reaches; write one of 2, 4, 6" in res.output


def test_absent_claims_count_in_both_families_as_the_fixed_design_counts_them():
    """An absent equivalence claim naming no architecture still has an opposite side."""
    from analysis.claims import make_claim
    from analysis.claims.hypotheses import family_counts
    from analysis.claims.verdicts import family_share

    eq = make_claim(id="e1", statement="s", kind="equivalence", task="t", treatment="a", reference="b", margin=0.05,
               compare="variant")
    bound = make_claim(id="b1", statement="s", kind="bound", metric="accuracy", task="t", arch="lstm",
                  direction="greater", threshold=0.9)
    own, _, contra = family_share([eq, bound])
    assert family_counts([eq, bound]) == (own, 0, contra) == (2, 0, 2)


READABLE = TINY.split("# Neither can be decided")[0] + """
[analysis]
probe_positions = "pooled"
probe_folds = 2

# written as docs/claims.md shows a readable_by claim: no metric (it reads the probes all the same);
# about the mean (statistic = "mean"), whose estimate is a number the stage and `stats` must share
# exactly (a share claim's stage shows the share beyond, its claims row the median seed)
[[claims]]
id = "lstm-readable-L1"
statement = "the LSTM's state is readable at L1"
kind = "readable_by"
task = "parity"
arch = "lstm"
layer = "L1"
threshold = 0.5
length = 20
statistic = "mean"
"""


@pytest.mark.slow
def test_a_stage_is_decided_on_results_that_hold_its_seeds(tmp_path):
    """A readable_by claim without `metric` reads probes: each stage recomputes them for its seeds,
    and the last stage's estimate is the one `stats` gives on the same seeds trained in one go."""
    exp = tmp_path / "readable.toml"
    exp.write_text(READABLE)
    design = tmp_path / "design.toml"
    design.write_text(DESIGN.replace("max_seeds_by_arch = { gru = 2 }\n", ""))
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["run", str(exp), "--out", str(out), "--design", str(design), "--jobs", "1"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "needs probe results" not in res.output
    st = Store.open(str(out / "store.zarr"))
    seq = st.read_result("sequential")
    row = seq.sel(claim="lstm-readable-L1")
    assert list(seq.seeds.values) == [2, 3]  # undecidable at 2 seeds: the LSTM went on to its third
    last = int(row.decided_at) or int(seq.stage.values[-1])
    n_seeds = int(seq.seeds.sel(stage=last))
    probes = st.read_result("probes/parity")
    lstm_runs = [str(r) for r in probes.run.values if "lstm" in str(r)]
    assert len(lstm_runs) == len([r for r in st.run_ids() if "lstm" in r])  # the probes hold every stored run
    # `stats` on every seed held (the runs a one-go training of these seeds gives: training is
    # deterministic) decides on the same probes: the same estimate as the design's last stage
    assert n_seeds == int(seq.seeds.values[-1])
    got = CliRunner().invoke(main, ["stats", str(out / "store.zarr"), "--claims", str(exp)],
                             catch_exceptions=False)
    assert got.exit_code == 0, got.output
    fixed = Store.open(str(out / "store.zarr")).read_result("claims").sel(claim="lstm-readable-L1")
    assert int(fixed.n_seeds) == n_seeds
    assert float(row.estimate.sel(stage=last)) == pytest.approx(float(fixed.estimate), abs=1e-12)
