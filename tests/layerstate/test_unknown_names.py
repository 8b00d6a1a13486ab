"""A misspelled name or a wrong path gets the closest known one, and the suggested fix gets
further; a command that fails leaves no results store behind."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from layerstate.cli import main
from tests.conftest import synthetic_arrays

CLAIM = """
[[claims]]
id = "readable"
statement = "the state is readable at L1"
kind = "readable_by"
task = "{task}"
arch = "lstm"
layer = "L1"
threshold = 0.4
length = 12
"""


def cli(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def ok(*args: object):
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
    """acts.zip: Parity and Dyck runs of an LSTM (2 seeds each) with their probes, packed, in a
    folder ``out`` laid out as `layerstate run --out` leaves it (``out/store.zarr``)."""
    from store import Store

    base = tmp_path_factory.mktemp("names")
    st = Store.create(str(base / "out" / "store.zarr"), title="names")
    rng = np.random.default_rng(0)
    for task in ("parity", "dyck"):
        for seed in (0, 1):
            rid = f"{task}-{seed}"
            st.add_run(rid, task=task, arch="lstm", seed=seed)
            st.write_length(rid, 12, **synthetic_arrays(rng, n=40, length=12), block_size=20)
    ok("probe", base / "out" / "store.zarr", "--positions", "pooled", "--folds", "2", "--target", "parity")
    ok("pack", base / "out" / "store.zarr", base / "acts.zip")
    return base


@pytest.fixture
def acts(packed, tmp_path) -> Path:
    copy = tmp_path / "acts.zip"
    shutil.copy(packed / "acts.zip", copy)
    return copy


def test_a_misspelled_store_path_names_the_file_beside_it(acts):
    line = error_line(cli("validate", acts.with_name("act.zip")))
    assert "does not exist; did you mean" in line and "acts.zip" in line and "layerstate capture" not in line
    fix = re.search(r"did you mean (\S+)\?", line).group(1)
    ok("validate", fix)


def test_a_run_folder_points_at_the_store_inside(packed):
    line = error_line(cli("validate", packed / "out"))
    assert "is a folder, not a store; the store in it is" in line
    ok("validate", line.rsplit(" ", 1)[-1])
    assert error_line(cli("inspect", packed / "out")) .endswith(str(packed / "out" / "store.zarr"))


def test_a_misspelled_task_in_a_claim_gets_the_stored_one_and_the_fix_works(acts, tmp_path):
    claims = tmp_path / "c.toml"
    claims.write_text(CLAIM.format(task="dyk"))
    line = error_line(cli("stats", acts, "--claims", claims))
    assert "task 'dyk' is not one of the store's tasks (dyck, parity); did you mean 'dyck'?" in line
    assert "length" not in line.split("did you mean")[0].split("task 'dyk'")[0]  # not the length error first
    assert not acts.with_name("acts.results.zarr").exists()  # a command that fails writes nothing
    fixed = re.search(r"did you mean '(\w+)'", line).group(1)
    claims.write_text(CLAIM.format(task=fixed))
    assert "readable:" in ok("stats", acts, "--claims", claims).output


def test_a_misspelled_layer_and_arch_get_the_closest(acts, tmp_path):
    claims = tmp_path / "c.toml"
    claims.write_text(CLAIM.format(task="dyck").replace('layer = "L1"', 'layer = "l1"'))
    assert "did you mean 'L1'?" in error_line(cli("stats", acts, "--claims", claims))
    claims.write_text(CLAIM.format(task="dyck").replace('arch = "lstm"', 'arch = "lsmt"'))
    assert "did you mean 'lstm'?" in error_line(cli("stats", acts, "--claims", claims))


def test_a_misspelled_task_on_the_command_line_gets_the_stored_one(acts):
    line = error_line(cli("probe", acts, "--task", "dyk", "--positions", "pooled", "--folds", "2"))
    assert "did you mean --task 'dyck'?" in line
    assert not acts.with_name("acts.results.zarr").exists()


def test_a_result_not_in_the_store_says_where_results_written_elsewhere_are(acts, tmp_path):
    """The receiver probed into mine.zarr, then forgot --results: the claim's result is not in
    the zip, and the error says that --results must be given again; nothing is left behind."""
    mine = tmp_path / "mine.zarr"
    ok("probe", acts, "--results", mine, "--task", "dyck", "--positions", "pooled", "--folds", "2",
       "--target", "ones", "--name", "dyck-ones")
    claims = tmp_path / "c.toml"
    claims.write_text(CLAIM.format(task="dyck") + 'result = "dyck-ones"\n')
    line = error_line(cli("stats", acts, "--claims", claims))
    assert "is not a stored probe result" in line and "--results DIR" in line
    assert not acts.with_name("acts.results.zarr").exists()
    assert "readable:" in ok("stats", acts, "--results", mine, "--claims", claims).output
    # a near miss of a stored name is named instead
    claims.write_text(CLAIM.format(task="dyck") + 'result = "dyck-one"\n')
    assert "did you mean 'dyck-ones'" in error_line(cli("stats", acts, "--results", mine, "--claims", claims))
    assert mine.exists()  # a results store that was there before is never removed


def test_a_name_for_runs_of_tasks_with_different_targets_says_how(tmp_path):
    """`--name` over a store of two tasks whose runs were trained on different targets named
    the targets but not --name; the fix it gives (one task) works."""
    from store import Store

    st = Store.create(str(tmp_path / "two.zarr"), title="two")
    rng = np.random.default_rng(1)
    for task, target in (("parity", "parity"), ("dyck", "ones")):
        for seed in (0, 1):
            rid = f"{task}-{seed}"
            st.add_run(rid, task=task, arch="lstm", seed=seed, target=target)
            st.write_length(rid, 12, **synthetic_arrays(rng, n=40, length=12), block_size=20, target=target)
    line = error_line(cli("probe", tmp_path / "two.zarr", "--positions", "pooled", "--folds", "2", "--name", "mine"))
    assert "--name names one result" in line and "different targets" in line
    fix = re.search(r"add (--task \w+)", line).group(1).split()
    ok("probe", tmp_path / "two.zarr", "--positions", "pooled", "--folds", "2", "--name", "mine", *fix)
