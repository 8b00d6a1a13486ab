"""`layerstate sequential`: a declared group-sequential design decided stage by stage on a planted
store whose answer is known: a large S3 effect is decided early and stays decided, its cells get
no more seeds, and a null Dyck claim goes on to the maximum."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.claims import parse_claims
from analysis.claims.sequential import evaluate_sequential
from analysis.stats.design import Design
from layerstate.cli import main
from layerstate.present import sequential_lines
from store import Store
from tests.analysis.claims.test_claims import _write_run

CLAIMS = [
    {"id": "s3-conv", "statement": "Removing Conv1D lowers S3 accuracy", "kind": "difference", "task": "s3",
     "arch": "mamba", "treatment": "no_conv", "reference": "default", "direction": "less", "margin": 0.05,
     "length": 12},
    {"id": "dyck-conv", "statement": "Removing Conv1D lowers Dyck accuracy", "kind": "difference",
     "task": "dyck", "arch": "mamba", "treatment": "no_conv", "reference": "default", "direction": "less",
     "margin": 0.05, "length": 12},
]
DESIGN = {"first_seeds": 3, "stage_seeds": 2, "max_seeds": 9}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("seq") / "s.zarr")
    st = Store.create(path)
    rng = np.random.default_rng(7)
    with st.deferred_consolidation():
        for seed in range(9):
            for task, drop in (("s3", 0.20), ("dyck", 0.0)):
                offset = rng.normal(0, 0.02)
                _write_run(st, f"{task}-d-{seed}", task, "default", seed, 0.85 + offset, rng)
                _write_run(st, f"{task}-n-{seed}", task, "no_conv", seed, 0.85 + offset - drop, rng)
    return st, path


def test_a_decided_claim_stays_decided_and_its_cells_stop_receiving_seeds(store):
    st, _ = store
    run = evaluate_sequential(st, parse_claims(CLAIMS), Design(**DESIGN))
    # the Dyck claim (no true drop, margin 0.05) is shown equivalent at 7 seeds by the margin's
    # sequential TOST, so the design stops there instead of going on to 9
    assert [s.seeds for s in run.stages] == [3, 5, 7]
    assert run.stages[-1].claims["dyck-conv"].decision == "equivalent"
    s3 = [s.claims["s3-conv"] for s in run.stages]
    first = next(i for i, c in enumerate(s3) if c.decision == "supported")
    assert first < len(run.stages) - 1  # decided before the maximum
    assert all(c.decision == "supported" and c.decided_at == first for c in s3[first:])
    s3_cells = {("s3", "mamba", "default"), ("s3", "mamba", "no_conv")}
    assert not s3_cells & set(run.stages[first].cells_next)
    assert {("dyck", "mamba", "default"), ("dyck", "mamba", "no_conv")} <= set(run.stages[first].cells_next)
    # the repeated interval holds the estimate at every stage
    for s in run.stages:
        c = s.claims["dyck-conv"]
        assert c.rci[0] <= c.estimate <= c.rci[1]
    assert run.stages[-1].claims["dyck-conv"].decision != "supported"
    text = "\n".join(sequential_lines(run))
    assert "the design is complete" in text and "nan" not in text.lower()
    # each line shows the one-sided bound the verdict rests on (a 'less' claim: an upper bound)
    s3_line = next(line for line in text.splitlines() if "s3-conv: supported" in line)
    assert "one-sided bound <= -" in s3_line
    dyck_line = next(line for line in text.splitlines() if "dyck-conv: equivalent" in line)
    assert "(equivalent)" not in dyck_line and "margin" in dyck_line


def test_a_stage_the_store_does_not_hold_yet_says_which_cells_to_train(store, tmp_path):
    st, path = store
    exp = tmp_path / "claims.toml"
    # without its margin the Dyck claim cannot end equivalent: undecided at 9 seeds, it asks for 11
    body = "".join("[[claims]]\n" + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in c.items()
                                           if not (c["id"] == "dyck-conv" and k == "margin"))
                   for c in CLAIMS)
    exp.write_text(body + "[design]\nfirst_seeds = 3\nstage_seeds = 2\nmax_seeds = 11\n")
    res = CliRunner().invoke(main, ["sequential", str(exp), "--store", path])
    assert res.exit_code == 0, res.output
    # a claims file is not an experiment: no run command can train its cells, so it says what to do
    assert "next stage: seeds up to 11 for dyck/mamba/default, dyck/mamba/no_conv (only these cells); train " \
        "them into the store" in res.output
    exp.write_text(body)
    res = CliRunner().invoke(main, ["sequential", str(exp), "--store", path])
    assert res.exit_code != 0 and "declares no [design]" in res.output
