"""A stage of a seed design is the seeds every result it reads holds, not the seeds trained
(issue 69): seeds trained but not captured, or captured but not analysed, give no verdict of
their stage, and `sequential` says in one line what the stage lacks and the command that
finishes it."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from layerstate.cli import main

pytestmark = pytest.mark.slow

EXPERIMENT = """
[experiment]
name = "ledger"

[grid]
tasks = ["parity"]
archs = ["lstm", "gru"]
seeds = [0, 1]

[train]
length = 12
steps = 20
batch_size = 16
eval_every = 10
n_eval = 32
eval_lengths = [12]
n_test = 32
warmup = 2

[capture]
lengths = [12]
n_sequences = 40

[models.lstm]
d_model = 8
n_layers = 1

[models.gru]
d_model = 8
n_layers = 1

[analysis]
probe_positions = "pooled"
probe_folds = 2

[[claims]]
id = "lstm-gru-same"
statement = "the LSTM and the GRU are equally accurate"
kind = "equivalence"
metric = "accuracy"
task = "parity"
compare = "arch"
treatment = "lstm"
reference = "gru"
margin = 0.05
length = 12

[[claims]]
id = "lstm-readable"
statement = "the LSTM's state is readable at L0"
kind = "readable_by"
task = "parity"
arch = "lstm"
layer = "L0"
threshold = 0.5
length = 12
statistic = "mean"
"""

DESIGN = """
[design]
first_seeds = 2
stage_seeds = 1
max_seeds = 4
spending = "obrien-fleming"
"""


def _cli(*args) -> str:
    res = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def _verdicts_of(output: str, stage: int) -> list[str]:
    """The lines of ``sequential`` that give a claim's decision at ``stage``."""
    return [line for line in output.splitlines()
            if re.match(rf"stage {stage} \(\d+ seeds\) [\w-]+(\[\w+\])?: ", line)]


def test_trained_but_not_captured_or_analysed_seeds_give_no_stage_verdict(tmp_path):
    exp, more, design = tmp_path / "exp.toml", tmp_path / "exp3.toml", tmp_path / "design.toml"
    exp.write_text(EXPERIMENT)
    more.write_text(EXPERIMENT.replace("seeds = [0, 1]", "seeds = [0, 1, 2]"))
    design.write_text(DESIGN)
    out = tmp_path / "out"
    store = out / "store.zarr"
    _cli("run", exp, "--out", out, "--jobs", "1")  # seeds 0-1: trained, captured, analysed
    first = _cli("sequential", exp, "--store", store, "--design", design)
    assert _verdicts_of(first, 1) and not _verdicts_of(first, 2)

    # seed 2 trained, not captured: stage 2 (3 seeds) has no verdict, and says why and how
    _cli("train", more, "--store", store, "--seed", "2")
    trained = _cli("sequential", exp, "--store", store, "--design", design)
    assert _verdicts_of(trained, 1) == _verdicts_of(first, 1)
    assert not _verdicts_of(trained, 2), trained
    line = [ln for ln in trained.splitlines() if ln.startswith("stage 2 (3 seeds) is incomplete")]
    assert line == [f"stage 2 (3 seeds) is incomplete: parity/gru/default seed 2, parity/lstm/default seed 2 "
                    f"are trained but not captured; no verdict of it until they are; to finish it: run "
                    f"`layerstate run {exp} --out {out} --design {design}`: it trains them, analyses them and "
                    f"decides the stage"], trained
    assert "the design is complete" not in trained and "next stage" not in trained

    # captured, but the probes the readable claim reads lack seed 2: still no verdict, and
    # `inspect` shows which seeds each result lacks
    _cli("capture", more, "--store", store)
    shown = next(ln for ln in _cli("inspect", store).splitlines() if ln.startswith("results  "))
    assert ("probes/parity (4 runs; lacks parity/gru/default seed 2; lacks parity/lstm/default seed 2)"
            in shown), shown
    captured = _cli("sequential", exp, "--store", store, "--design", design)
    assert not _verdicts_of(captured, 2), captured
    assert ("stage 2 (3 seeds) is incomplete: its runs are captured but not all analysed (claim 'lstm-readable' "
            "reads probes/parity, which lacks 1 run") in captured

    # analysed (the run brings every stored result up to date): the stage is decided
    _cli("run", more, "--out", out, "--jobs", "1")
    done = _cli("sequential", exp, "--store", store, "--design", design)
    assert len(_verdicts_of(done, 2)) == 2 and "is incomplete" not in done, done

    # `plan` reads the same stages: a claim its design decided needs no seeds, and the next step
    # is the design's
    plan = _cli("plan", exp, "--store", store, "--design", design)
    assert plan.splitlines()[-1] == "under its design: " + done.splitlines()[-1]
    for line in _verdicts_of(done, 2):
        cid, decision = re.match(r"stage 2 \(3 seeds\) ([\w-]+): (\w+)", line).groups()
        row = next(ln for ln in plan.splitlines() if ln.startswith(f"{cid} |"))
        if decision in ("supported", "contradicted", "equivalent", "negligible"):
            assert f"not planned: decided by its design: {decision} at stage" in row, plan
        else:
            assert "decided by its design" not in row, plan


def test_a_plans_new_seeds_go_into_a_replication_store_beside_the_one_it_read(tmp_path, monkeypatch):
    """`plan`'s new seeds are a replication, decided on their own: they are trained into a new
    local store named after the one the plan read (a zip, a URL or a directory, which is never
    written), and the printed command runs as printed."""
    from layerstate.present import replication_store

    assert replication_store("runs/s.zarr") == "runs/s-replication.zarr"
    assert replication_store("https://host/x/acts.zip") == "acts-replication.zarr"
    assert replication_store("s3://bucket/p/s.zarr/") == "s-replication.zarr"
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.replace("steps = 20", "steps = 6").replace("n_sequences = 40", "n_sequences = 16"))
    store = tmp_path / "s.zarr"
    _cli("train", exp, "--store", store, "--task", "parity", "--arch", "lstm", "--seed", "0-1")
    zipped = tmp_path / "acts.zip"
    _cli("pack", store, zipped)
    monkeypatch.chdir(tmp_path)
    new = replication_store(str(zipped))
    assert new == str(tmp_path / "acts-replication.zarr")
    more = tmp_path / "exp3.toml"
    more.write_text(exp.read_text().replace("seeds = [0, 1]", "seeds = [2, 3]"))
    _cli("train", more, "--store", new, "--task", "parity", "--arch", "lstm", "--seed", "2-3")  # as printed
    from store import Store

    assert Store.open(new).run_ids() == ["parity-lstm-default-s2", "parity-lstm-default-s3"]
    assert len(Store.open(str(zipped)).run_ids()) == 2


def test_a_claim_its_design_decided_is_not_planned_and_one_it_stopped_gets_no_seeds():
    from types import SimpleNamespace as NS

    from analysis.claims.planner import design_decisions

    last = NS(seeds=5, seeds_next=7, claims={"a": NS(decided_at=0, decision="supported"),
                                             "b": NS(decided_at=None, decision="continue"),
                                             "c": NS(decided_at=1, decision="inconclusive"),
                                             "d": NS(decided_at=1, decision="equivalent")})
    run = NS(stages=[NS(seeds=3, claims={}), last], design=NS(max_seeds=9))
    said = design_decisions(run)
    assert said["a"] == "decided by its design: supported at stage 1 (3 seeds); it needs no more seeds"
    assert said["d"].startswith("decided by its design: equivalent at stage 2 (5 seeds)")
    assert said["c"].startswith("its design stopped it inconclusive at stage 2 (5 seeds)")
    # one it goes on with gets its seeds from the design's next stages, not a plan's count
    assert said["b"] == ("its design continues (its next stage: 7 seeds), up to 9 seeds, its boundaries paying "
                         "for each look; route: the design's own stages")
    assert design_decisions(NS(stages=[])) == {}
