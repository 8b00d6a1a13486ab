"""Re-analysing a store one was sent (issue 47): a packed two-task store (Parity and Dyck, LSTM
and GRU, 2 seeds) made by `layerstate run` and `layerstate pack`, probed again with other
settings, then `stats`, `report` and `forget`; each error's suggested command is run and must
get further."""

from __future__ import annotations

import os
import re
import shlex
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from layerstate.cli import main

pytestmark = pytest.mark.slow

TWO_TASKS = """
[experiment]
name = "two"

[grid]
tasks = ["parity", "dyck"]
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
probe_folds = 3
"""

#: A claims file of [[claims]] only, with no length (the runs have only length 12).
DYCK_CLAIM = """
[[claims]]
id = "dyck-readable"
statement = "Dyck's top of stack is readable at L0 of the GRU"
kind = "readable_by"
task = "dyck"
arch = "gru"
layer = "L0"
threshold = 0.5
"""


def cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def ok(*args: str):
    res = cli(*args)
    assert res.exit_code == 0, res.output
    return res


def error_line(res) -> str:
    assert res.exit_code == 2, res.output
    line = [x for x in res.output.splitlines() if x.startswith("layerstate: error: ")]
    assert len(line) == 1 and "Traceback" not in res.output, res.output
    return line[0]


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    """acts.zip: the two-task store `layerstate run` made, packed."""
    base = tmp_path_factory.mktemp("reanalysis")
    exp = base / "two.toml"
    exp.write_text(TWO_TASKS)
    ok("run", exp, "--out", base / "out", "--jobs", "1")
    ok("pack", base / "out" / "store.zarr", base / "acts.zip")
    return base / "acts.zip"


@pytest.fixture
def acts(packed, tmp_path) -> Path:
    """A fresh copy of the zip for one test (its results store goes beside the copy)."""
    import shutil

    copy = tmp_path / "acts.zip"
    shutil.copy(packed, copy)
    return copy


@pytest.fixture(scope="module")
def dyck_twice(packed, tmp_path_factory) -> Path:
    """The zip with a second Dyck probe result beside it (another control task): two results
    that both hold every Dyck run, probed once for the tests that read them."""
    import shutil

    base = tmp_path_factory.mktemp("dyck-twice")
    shutil.copy(packed, base / "acts.zip")
    ok("probe", base / "acts.zip", "--task", "dyck", "--positions", "pooled", "--control", "token")
    return base


@pytest.fixture
def acts_dyck_twice(dyck_twice, tmp_path) -> Path:
    """A fresh copy of :func:`dyck_twice`'s zip and its results for one test."""
    import shutil

    shutil.copytree(dyck_twice, tmp_path / "acts")
    return tmp_path / "acts" / "acts.zip"


def _store(acts: Path):
    from store import open_analysis

    return open_analysis(str(acts), write=False)


# ---------------------------------------------------------------------- item 2: one target per task
def test_a_two_task_store_is_probed_task_by_task_each_with_its_own_target(acts):
    """The README's recipe on a store of two tasks: each task's runs with their own target
    (it said "trained on different targets ['parity', 'top']; pass --target" before)."""
    res = ok("probe", acts, "--positions", "pooled", "--folds", "2")
    assert "held-out probe accuracy per layer (mean over 2 folds); chance (majority class)" in res.output
    assert "control task (permute) accuracy" in res.output
    st = _store(acts)
    # the run stored probes/parity and probes/dyck with 3 folds: these are kept beside them
    assert {"probes/parity", "probes/dyck", "probes/parity-2", "probes/dyck-2"} <= set(st.results())
    assert st.result_attrs("probes/dyck-2")["target"] == "top"
    assert int(st.result_attrs("probes/dyck")["folds"]) == 3  # the run's result is untouched
    made = st.result_attrs("probes/dyck-2")
    assert made["command"].startswith(("layerstate", "python")) and made["created"] and made["tool_version"]
    assert "probes/dyck already holds probes made with other settings" in res.output


def test_a_target_only_one_task_has_names_task_and_the_fix_works(acts):
    line = error_line(cli("probe", acts, "--positions", "pooled", "--target", "parity"))
    assert "label 'parity' does not exist in the runs of task 'dyck'" in line and "--task parity" in line
    ok("probe", acts, "--positions", "pooled", "--target", "parity", "--task", "parity", "--folds", "2")


def test_one_name_for_runs_of_two_targets_names_task_and_the_fix_works(acts):
    line = error_line(cli("probe", acts, "--positions", "pooled", "--name", "both"))
    assert "trained on different targets" in line and "--task dyck" in line
    ok("probe", acts, "--positions", "pooled", "--name", "both", "--task", "dyck", "--folds", "2")
    assert "probes/both" in _store(acts).results()


def test_another_label_gets_a_name_that_says_so(acts):
    ok("probe", acts, "--positions", "pooled", "--task", "dyck", "--target", "depth", "--folds", "2")
    assert "probes/dyck.depth" in _store(acts).results()


# ---------------------------------------------------------------------- item 1: results side by side
def test_a_named_result_with_other_settings_is_refused_with_fixes_that_work(acts):
    ok("probe", acts, "--positions", "pooled", "--task", "parity", "--name", "mine", "--folds", "2")
    again = ok("probe", acts, "--positions", "pooled", "--task", "parity", "--name", "mine", "--folds", "2")
    assert "stored results/probes/mine" in again.output  # the same sweep again replaces it
    line = error_line(cli("probe", acts, "--positions", "pooled", "--task", "parity", "--name", "mine",
                          "--folds", "3"))
    assert "result probes/mine holds probes with other settings (folds 2 -> 3)" in line
    forget = re.search(r"layerstate (forget \S+ --result \S+)", line)
    assert forget, line
    ok(*shlex.split(forget.group(1)))
    assert "probes/mine" not in _store(acts).results()
    # a result inside the zip is not removable: its fix names another --name, which works
    line = error_line(cli("probe", acts, "--positions", "pooled", "--task", "parity", "--name", "parity"))
    assert "layerstate forget" not in line
    name = re.search(r"--name (\S+)\)", line).group(1)
    ok("probe", acts, "--positions", "pooled", "--task", "parity", "--name", name)


def test_stats_reads_one_result_by_name_and_lists_the_candidates(acts_dyck_twice, tmp_path):
    acts = acts_dyck_twice
    claims = tmp_path / "dyckclaim.toml"
    claims.write_text(DYCK_CLAIM)
    line = error_line(cli("stats", acts, "--claims", claims))  # was: a traceback, exit 1
    assert ("2 probe results hold every run of task 'dyck' that claim dyck-readable reads: probes/dyck (" in line
            and "probes/dyck-2 (" in line), line
    assert "folds 3" in line and "control token" in line
    fix = re.search(r'say which with (result = "[^"]+")', line).group(1)
    # the mean's t shows the two results' numbers (the share of seeds above 0.5 is the same in both)
    claims.write_text(DYCK_CLAIM + fix + '\nstatistic = "mean"\n')
    res = ok("stats", acts, "--claims", claims)
    assert "dyck-readable:" in res.output
    second = "probes/dyck" if "dyck-2" in fix else "probes/dyck-2"
    claims.write_text(DYCK_CLAIM + f'result = "{second}"\nstatistic = "mean"\n')
    other = ok("stats", acts, "--claims", claims)
    assert other.output != res.output  # the other result, not a mix of both

    # issue 73 item 2: two claims on the task, neither naming a result: one error naming both and
    # the flag; `--result TASK=NAME` (stats and plan) chooses for both, as `result` in each would
    both = tmp_path / "both.toml"
    both.write_text(DYCK_CLAIM + 'statistic = "mean"\n' + DYCK_CLAIM.replace("dyck-readable", "dyck-readable-lstm")
                    .replace('"gru"', '"lstm"') + 'statistic = "mean"\n')
    line = error_line(cli("stats", acts, "--claims", both))
    assert "2 probe results hold every run of task 'dyck' that claims dyck-readable, dyck-readable-lstm read: " in line
    flag = re.search(r"`--result (dyck=[\w-]+)` for them all", line).group(1)
    name = flag.split("=")[1]
    named = tmp_path / "named.toml"
    named.write_text(both.read_text().replace('statistic = "mean"\n', f'statistic = "mean"\nresult = "{name}"\n'))
    assert ok("stats", acts, "--claims", both, "--result", flag).output == ok("stats", acts, "--claims", named).output
    assert "dyck-readable-lstm |" in ok("plan", both, "--store", acts, "--result", flag).output
    assert "no probe result probes/dyck-3" in error_line(cli("stats", acts, "--claims", both, "--result", "dyck-3"))
    assert "names two probe results for task 'dyck'" in error_line(
        cli("stats", acts, "--claims", both, "--result", "dyck=dyck", "--result", "dyck=dyck-2"))


def test_the_report_shows_one_result_per_task_and_says_which(acts_dyck_twice, tmp_path):
    acts = acts_dyck_twice
    out = tmp_path / "rep"
    ok("report", acts, "--out", out)
    import pandas as pd

    table = pd.read_csv(out / "tables" / "probe_profiles.csv")
    assert not table.duplicated(["task", "arch", "variant", "length", "layer"]).any()
    assert set(table["result"]) == {"probes/parity", "probes/dyck"}
    md = (out / "report.md").read_text()
    assert "Task dyck: shows probes/dyck (" in md and "also stored: probes/dyck-2 (" in md
    ok("report", acts, "--out", tmp_path / "rep2", "--result", "dyck=dyck-2")  # TASK=NAME, as stats takes it
    table = pd.read_csv(tmp_path / "rep2" / "tables" / "probe_profiles.csv")
    assert set(table["result"]) == {"probes/parity", "probes/dyck-2"}
    assert "token control task scores" in (tmp_path / "rep2" / "report.md").read_text()
    mode = stat.S_IMODE(os.stat(out).st_mode)
    assert mode & 0o055 == 0o055 & ~_umask(), oct(mode)  # not mkdtemp's 0700
    assert "no probe result probes/nope" in error_line(cli("report", acts, "--out", tmp_path / "r3",
                                                           "--result", "nope"))


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def test_forget_a_result_beside_a_zip(acts, tmp_path):
    ok("probe", acts, "--task", "parity", "--positions", "pooled", "--name", "extra", "--folds", "2")
    ok("forget", acts, "--result", "probes/extra", "--dry-run")
    assert "probes/extra" in _store(acts).results()
    ok("forget", acts, "--result", "probes/extra")  # said "does not exist" before
    assert "probes/extra" not in _store(acts).results()
    ok("probe", acts, "--task", "parity", "--positions", "pooled", "--name", "extra", "--folds", "2")
    results = acts.with_name("acts.results.zarr")
    ok("forget", results, "--result", "probes/extra")  # the results store named as STORE
    ok("probe", acts, "--task", "parity", "--positions", "pooled", "--name", "extra", "--folds", "2")
    ok("forget", acts, "--results", results, "--result", "probes/extra")  # named with --results
    assert "probes/extra" not in _store(acts).results()
    line = error_line(cli("forget", acts, "--result", "probes/dyck"))
    assert "inside" in line and "cannot be written" in line
    unpack = re.search(r"layerstate (unpack \S+) DIR", line).group(1)
    ok(*shlex.split(unpack), tmp_path / "dir.zarr")
    ok("forget", tmp_path / "dir.zarr", "--result", "probes/dyck")


# ---------------------------------------------------------------------- item 3: fixes that work
def test_a_claim_without_length_reads_the_runs_length(acts, tmp_path):
    claims = tmp_path / "c.toml"
    claims.write_text(DYCK_CLAIM)  # no length: the runs were trained and captured at 12
    res = ok("stats", acts, "--claims", claims)
    assert "L = 12" in res.output or "dyck-readable:" in res.output


def test_a_claim_without_length_on_a_store_of_two_lengths_asks_for_one(make_store, tmp_path):
    st = make_store(runs=("a", "b"), lengths=(12, 16))
    claims = tmp_path / "c.toml"
    base = ('[[claims]]\nid = "c"\nstatement = "s"\nkind = "bound"\ntask = "parity"\narch = "lstm"\n'
            'threshold = 0.1\ndirection = "greater"\n')
    claims.write_text(base)
    line = error_line(cli("stats", str(st.location), "--claims", claims))
    assert "declares no length" in line and "add length = N" in line and "12, 16" in line
    claims.write_text(base + "length = 12\n")
    assert "c:" in ok("stats", str(st.location), "--claims", claims).output


def test_a_claim_at_a_length_never_captured_names_the_one_there_is(acts, tmp_path):
    claims = tmp_path / "c.toml"
    claims.write_text(DYCK_CLAIM + "length = 40\n")
    line = error_line(cli("stats", acts, "--claims", claims))
    assert "no profile at length 40" in line and "layerstate probe" not in line  # it cannot help
    fix = re.search(r"set (length = \d+) in the claim", line).group(1)
    claims.write_text(DYCK_CLAIM + fix + "\n")
    ok("stats", acts, "--claims", claims)


def test_the_stored_ablation_setting_finds_the_tasks_probes(acts):
    """Dyck's runs were trained on 'top': the run stored probes/dyck, which 'stored' reads."""
    res = ok("ablate", acts, "--task", "dyck", "--settings", "stored", "--lengths", "12", "--no-matched")
    assert "[stored] accuracy drop" in res.output


@pytest.mark.parametrize("what", ["missing", "folder"])
def test_validate_a_path_that_is_not_a_store_as_inspect_does(tmp_path, what):
    path = tmp_path / ("nope.zarr" if what == "missing" else "folder")
    if what == "folder":
        path.mkdir()
    v, i = error_line(cli("validate", path)), error_line(cli("inspect", path))
    assert v == i and "repair" not in v and "backup" not in v


# ---------------------------------------------------------------------- item 5, 7: smaller
def test_probe_control_by_name_and_a_trivial_control_flagged(acts):
    res = ok("probe", acts, "--task", "parity", "--positions", "pooled", "--control", "token", "--name", "tok")
    assert "control task (token) accuracy 1.000" in res.output
    assert "FLAG: the token control task scores 1.000" in res.output and "--control permute" in res.output
    res = ok("probe", acts, "--task", "parity", "--positions", "pooled", "--control", "none", "--name", "bare")
    assert "no control task" in res.output and "FLAG" not in res.output
    help_text = ok("probe", "--help").output
    assert "--control [permute|token|none]" in help_text and "probe_control" in help_text
    assert "--train-length L" in help_text and "default: none" in help_text


def test_inspect_explains_the_feature_width(acts):
    out = ok("inspect", acts).output
    assert "feature width 10 = its hidden_size, not d_model 8" in out  # the LSTM


def test_stats_shows_no_future_warning(acts, tmp_path):
    import warnings

    claims = tmp_path / "c.toml"
    claims.write_text(DYCK_CLAIM + '\n[[claims]]\nid = "acc"\nstatement = "s"\nkind = "difference"\n'
                      'task = "parity"\ncompare = "arch"\ntreatment = "gru"\nreference = "lstm"\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        ok("stats", acts, "--claims", claims)
