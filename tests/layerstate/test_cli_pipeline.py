"""The command line over training, capture, claims and the whole run (tiny experiment)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from layerstate.cli import main

TINY = """
[experiment]
name = "tiny"

[grid]
tasks = ["parity"]
archs = ["lstm"]
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

"""


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def exp_file(tmp_path) -> Path:
    p = tmp_path / "tiny.toml"
    p.write_text(TINY)
    return p


@pytest.mark.slow
def test_train_then_capture_then_inspect(exp_file, tmp_path):
    store = str(tmp_path / "s.zarr")
    res = run("train", str(exp_file), "--store", store)
    assert res.exit_code == 0, res.output
    assert "parity-lstm-default-s1: 30 steps" in res.output or "parity-lstm-default-s1:" in res.output
    again = run("train", str(exp_file), "--store", store)
    assert again.output.count("already trained") == 2
    res = run("capture", str(exp_file), "--store", store)
    assert res.exit_code == 0 and "captured 4 groups" in res.output
    out = run("inspect", store, "--detail").output
    assert "len_020: hidden 40x20x3x20" in out and "complete" in out
    assert run("validate", store).exit_code == 0


@pytest.mark.slow
def test_train_a_part_of_the_grid_then_the_rest(exp_file, tmp_path):
    """--seed trains that part only; the whole grid later reuses it (same configs and hashes)."""
    store = str(tmp_path / "s.zarr")
    res = run("train", str(exp_file), "--store", store, "--seed", "1")
    assert res.exit_code == 0, res.output
    assert "[1/1] parity-lstm-default-s1: 30 steps" in res.output and "-s0" not in res.output
    from store import Store

    assert Store.open(store).run_ids() == ["parity-lstm-default-s1"]
    rest = run("train", str(exp_file), "--store", store, "--jobs", "2")
    assert rest.exit_code == 0, rest.output
    lines = rest.output.strip().splitlines()
    assert lines[0].startswith("[1/2] parity-lstm-default-s0: 30 steps")
    assert lines[1] == "[2/2] parity-lstm-default-s1: already trained; accuracy " + res.output.split("accuracy ")[1].strip()


@pytest.mark.parametrize("flags, message", [
    (["--seed", "7"], "seed 7 is not in the experiment's grid; its seeds: 0, 1"),
    (["--arch", "mamba"], "arch mamba is not in the experiment's grid; its archs: lstm"),
    (["--task", "s3", "--task", "dyck"], "task s3, dyck is not in the experiment's grid; its tasks: parity"),
    (["--runs", "parity-lstm-default-s9"], "run parity-lstm-default-s9 is not in the experiment's grid"),
    (["--jobs", "0"], "--jobs must be at least 1, got 0"),
])
def test_a_part_the_grid_does_not_have_is_one_line_and_nothing_is_created(exp_file, tmp_path, flags, message):
    store = tmp_path / "s.zarr"
    res = CliRunner().invoke(main, ["train", str(exp_file), "--store", str(store), *flags])
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1 and message in res.output
    assert not store.exists()


def test_capture_before_training_is_refused(exp_file, tmp_path):
    store = tmp_path / "s.zarr"
    from store import Store

    Store.create(str(store))
    res = CliRunner().invoke(main, ["capture", str(exp_file), "--store", str(store)])
    assert res.exit_code == 2 and "never trained" in res.output and "layerstate train" in res.output


def test_unknown_task_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(TINY.replace('tasks = ["parity"]', 'tasks = ["sorting"]'))
    res = CliRunner().invoke(main, ["train", str(bad), "--store", str(tmp_path / "s.zarr")])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        f"layerstate: error: {bad}: unknown task 'sorting'; "
        "valid: assoc_recall, code_depth, dyck, parity, s3, treecall"
    ]
    assert not (tmp_path / "s.zarr").exists()


def test_cuda_without_gpu_is_a_clear_error(exp_file, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    res = CliRunner().invoke(main, ["train", str(exp_file), "--store", str(tmp_path / "s"), "--device", "cuda"])
    assert res.exit_code == 2 and "no CUDA GPU" in res.output


@pytest.mark.slow
def test_run_does_every_stage_and_resumes(exp_file, tmp_path):
    text = exp_file.read_text() + """
[analysis]
probe_positions = "pooled"
probe_folds = 3
ablate = true
ablate_settings = ["probe", "pca:2"]
patch = true
patch_length = 12
mdl = true
stability = true
stability_shuffles = 2

[[claims]]
id = "parity-readable"
statement = "Parity is readable at L1"
kind = "readable_by"
metric = "probe_accuracy"
task = "parity"
arch = "lstm"
layer = "L1"
threshold = 0.4
length = 12
"""
    exp_file.write_text(text.replace("n_sequences = 40", "n_sequences = 40\ncounterfactual_pairs = 16\ncounterfactual_lengths = [12]"))
    out = tmp_path / "out"
    res = run("run", str(exp_file), "--out", str(out), "--jobs", "1")
    assert res.exit_code == 0, res.output
    for stage in ("== train", "== capture", "== probes", "== interventions", "== claims", "== report"):
        assert stage in res.output
    assert "claim parity-readable:" in res.output
    assert (out / "report" / "index.html").is_file() and (out / "report" / "report.md").is_file()
    from store import Store

    st = Store.open(str(out / "store.zarr"))
    assert {"probes/parity", "ablation/parity", "patching/parity", "claims", "mdl/parity",
            "stability/parity"} <= set(st.results())  # MDL and stability too, when asked (issue 70 item 2)
    assert st.read_result("stability/parity").attrs["probe_result"] == "probes/parity"
    html = (out / "report" / "index.html").read_text()
    assert "Ablation" in html or "ablation" in html
    res = run("ablate", str(out / "store.zarr"), "--settings", "random:1", "--lengths", "12",
              "--name", "cli")
    assert res.exit_code == 0 and "[random:1] accuracy drop:" in res.output
    res = run("patch", str(out / "store.zarr"), "--length", "12", "--name", "cli", "--task", "parity")
    assert res.exit_code == 0 and "max recovery" in res.output
    again = run("run", str(exp_file), "--out", str(out), "--jobs", "1")
    assert again.output.count("already trained") == 2 and "probes/parity: already stored" in again.output
    assert "ablation/parity: already stored" in again.output
    assert "mdl/parity: already stored" in again.output and "stability/parity: already stored" in again.output
    # a third seed and other ablation settings: every stored result that no longer answers
    # the experiment is computed again, said in one line, and the claims see the new seed
    exp_file.write_text(exp_file.read_text().replace("seeds = [0, 1]", "seeds = [0, 1, 2]")
                        .replace('ablate_settings = ["probe", "pca:2"]', 'ablate_settings = ["probe"]'))
    grown = run("run", str(exp_file), "--out", str(out), "--jobs", "1")
    assert grown.exit_code == 0, grown.output
    assert ("probes/parity: the stored result is out of date (it lacks 1 of the experiment's "
            "runs: parity-lstm-default-s2); computing it again") in grown.output
    assert "ablation/parity: the stored result is out of date (it lacks 1 of" in grown.output
    assert "its parameters differ: settings ['probe', 'pca:2'] -> ['probe']" in grown.output
    st = Store.open(str(out / "store.zarr"))
    for name in ("probes/parity", "ablation/parity", "patching/parity", "mdl/parity"):
        assert len(st.read_result(name).run) == 3, name
    assert "stability/parity: the stored result is out of date" in grown.output  # its probes changed
    assert set(st.read_result("ablation/parity").setting.values) == {"probe"}


BAD_CLAIM = """
[[claims]]
id = "lstm-parity"
statement = "The LSTM holds parity by L1"
kind = "readable_by"
task = "parity"
arch = "lstm"
layer = "L1"
treshold = 0.9
"""


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        (BAD_CLAIM, "claim 'lstm-parity': treshold: unknown field; did you mean 'threshold'?"),
        (BAD_CLAIM.replace('arch = "lstm"', 'arch = "gru"').replace("treshold", "threshold"),
         "claim 'lstm-parity': arch 'gru' is not one of this experiment's archs (lstm)"),
        (BAD_CLAIM.replace("treshold = 0.9", ""), "claim 'lstm-parity': a readable_by claim needs threshold"),
    ],
)
@pytest.mark.parametrize("command", ["run", "train", "capture"])
def test_a_malformed_claim_is_refused_before_anything_is_created(exp_file, tmp_path, command, claim, message):
    exp_file.write_text(TINY + claim)
    where = tmp_path / "out"
    args = ["--out", str(where)] if command == "run" else ["--store", str(where)]
    res = CliRunner().invoke(main, [command, str(exp_file), *args])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [f"layerstate: error: {exp_file}: {message}"]
    assert not where.exists()  # no store, no output folder: nothing was trained


def test_training_restores_the_thread_count(exp_file, tmp_path):
    import torch

    from layerstate.experiment import load_experiment
    from layerstate.pipeline import train_experiment
    from store import Store

    exp_file.write_text(TINY.replace("seeds = [0, 1]", "seeds = [0]").replace("steps = 30", "steps = 2")
                        + "\n[train_overrides.parity]\nthreads = 2\n")
    store = str(tmp_path / "s.zarr")
    Store.create(store)
    before = torch.get_num_threads()
    res = list(train_experiment(load_experiment(exp_file), store))
    assert [r.run_id for r in res] == ["parity-lstm-default-s0"] and not res[0].skipped
    assert torch.get_num_threads() == before


def test_a_stored_result_is_reused_only_for_the_runs_and_parameters_it_came_from():
    from layerstate.staleness import staleness as _staleness

    req = {"runs": {"a": {"config_hash": "h", "created": "t0"}, "b": {"config_hash": "h", "created": "t0"}},
           "params": {"lengths": [40, 80], "folds": 5}}
    assert _staleness(req, req) is None
    retrained = {**req, "runs": {**req["runs"], "b": {"config_hash": "h", "created": "t1"}}}
    assert _staleness(req, retrained) == "1 run trained again since it was computed: b"
    fewer = {**req, "runs": {"a": req["runs"]["a"]}}
    assert _staleness(req, fewer) == "it covers 1 run the experiment no longer has: b"
    more = {**req, "runs": {**req["runs"], **{f"r{i}": {} for i in range(5)}}}
    assert _staleness(req, more) == ("it lacks 5 of the experiment's runs: r0, r1, r2 and 2 more")
    other = {**req, "params": {"lengths": [40], "folds": 5}}
    assert _staleness(req, other) == "its parameters differ: lengths [40, 80] -> [40]"
    # a result written by hand (or before runs recorded what they were computed from)
    assert "no record" in _staleness(None, req)
    # only a result lacking runs, and nothing else, is extended by them rather than recomputed
    from layerstate.staleness import added_runs

    assert added_runs(req, more) == [f"r{i}" for i in range(5)]
    for other_request in (req, retrained, fewer, other, {**more, "params": other["params"]}):
        assert added_runs(req, other_request) == []
    assert added_runs({**req, "runs": {**req["runs"], "b": {"config_hash": "h", "created": "t1"}}}, more) == []
    assert added_runs(None, more) == []


PART_CLAIMS = """
[[claims]]
id = "parity-readable"
statement = "Parity is readable at L1"
kind = "readable_by"
metric = "probe_accuracy"
task = "parity"
arch = "lstm"
layer = "L1"
threshold = 0.4
length = 12

[[claims]]
id = "dyck-readable"
statement = "Dyck is readable at L1"
kind = "readable_by"
metric = "probe_accuracy"
task = "dyck"
arch = "lstm"
layer = "L1"
threshold = 0.4
length = 12
"""


@pytest.mark.slow
def test_run_a_grid_one_task_at_a_time_into_one_store(exp_file, tmp_path):
    """`run --task`: that task's runs, analyses and claims only; the next part reuses the
    store and leaves the first part's runs and results as they were."""
    exp_file.write_text(TINY.replace('tasks = ["parity"]', 'tasks = ["parity", "dyck"]')
                        .replace("seeds = [0, 1]", "seeds = [0]") + '[analysis]\nprobe_positions = "pooled"\n'
                        'probe_folds = 3\n' + PART_CLAIMS)
    out = tmp_path / "out"
    first = run("run", str(exp_file), "--out", str(out), "--jobs", "1", "--task", "parity")
    assert first.exit_code == 0, first.output
    assert "tasks parity; 1 runs, 1 of its 2 claims (those reading only these tasks; the other 1 stay in" in first.output
    assert "claim parity-readable:" in first.output and "dyck-readable" not in first.output
    assert "once every part has run, `layerstate combine " in first.output
    from store import Store

    st = Store.open(str(out / "store.zarr"))
    assert st.run_ids() == ["parity-lstm-default-s0"] and "probes/dyck" not in st.results()
    probes = st.read_result("probes/parity")
    assert st.read_result("claims").attrs["absent_claims"] == ["dyck-readable"]
    second = run("run", str(exp_file), "--out", str(out), "--jobs", "1", "--task", "dyck")
    assert second.exit_code == 0, second.output
    assert "parity-lstm" not in second.output and "claim dyck-readable:" in second.output
    st = Store.open(str(out / "store.zarr"))
    assert st.run_ids() == ["dyck-lstm-default-s0", "parity-lstm-default-s0"]
    assert st.read_result("probes/parity").identical(probes)
    assert {"probes/parity", "probes/dyck"} <= set(st.results())
    assert "dyck" in (out / "report" / "report.md").read_text()


def test_run_of_a_task_the_grid_does_not_have_is_one_line_and_nothing_is_created(exp_file, tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["run", str(exp_file), "--out", str(out), "--task", "s3"])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == ("layerstate: error: task s3 is not in the experiment's grid; its tasks: "
                                  "parity") and not out.exists()
