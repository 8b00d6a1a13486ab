"""A stage's new seeds extend a stored intervention result: only the new runs are computed, and
the result joined from the stored rows and theirs is the one computed whole, value for value
(intervals, matched comparisons and mechanisms included)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import xarray as xr

from analysis.interventions import run_ablation, run_interchange, run_patching
from analysis.interventions.intervals import REUSED
from capture.models import ModelConfig, build_model
from capture.record import capture_counterfactuals
from capture.tasks import get_task
from reports.numbers import plain_strings
from store import Store
from tests.analysis.interventions.test_diagnostics import _one_of_many, _store

ABLATE = dict(lengths=[8], settings=["probe", "leace", "random:1"], layers=["L0"], matched=True, fit_length=8)


def _equal(a: xr.Dataset, b: xr.Dataset) -> None:
    a, b = plain_strings(a), plain_strings(b)
    assert sorted(a.variables) == sorted(b.variables)
    for name in a.variables:
        x, y = a[name], b[name]
        assert x.dims == y.dims, name
        if x.dtype.kind in "fc":
            np.testing.assert_array_equal(x.values, y.values, err_msg=name)  # NaN == NaN, bit for bit
        else:
            assert (x.values.astype(str) == y.values.astype(str)).all(), name


@pytest.fixture(scope="module")
def three_lstms(tmp_path_factory):
    st, _ = _store(tmp_path_factory.mktemp("ext") / "s.zarr", _one_of_many, n_runs=3)
    return st


def test_an_ablation_extended_by_a_new_run_is_the_ablation_computed_whole(three_lstms, tmp_path):
    whole = Store.open(str(shutil.copytree(three_lstms.location.url, tmp_path / "whole.zarr")), mode="r+")
    staged = Store.open(str(shutil.copytree(three_lstms.location.url, tmp_path / "staged.zarr")), mode="r+")
    run_ablation(whole, "t", runs=["r0", "r1", "r2"], **ABLATE)
    run_ablation(staged, "t", runs=["r0", "r1"], **ABLATE)
    first = staged.read_result("ablation/t").load()
    out = run_ablation(staged, "t", runs=["r0", "r1", "r2"], extend=True, **ABLATE)
    assert out.attrs[REUSED] == 2  # r2 alone was computed
    back, want = staged.read_result("ablation/t"), whole.read_result("ablation/t")
    assert "matched_estimate" in want and int(want["drop_n_seeds"].max()) == 3
    _equal(back.drop_attrs(), want.drop_attrs())
    # the stored rows of r0 and r1 are the ones the first stage computed
    _equal(back[["accuracy", "correct"]].sel(run=["r0", "r1"]).drop_attrs(),
           first[["accuracy", "correct"]].drop_attrs())


def test_an_extension_that_cannot_stand_for_the_whole_is_computed_whole(three_lstms, tmp_path):
    staged = Store.open(str(shutil.copytree(three_lstms.location.url, tmp_path / "staged.zarr")), mode="r+")
    run_ablation(staged, "t", runs=["r0", "r1"], **ABLATE)
    # a stored run not asked for any more: nothing is reused
    out = run_ablation(staged, "t", runs=["r1", "r2"], extend=True, **ABLATE)
    assert REUSED not in out.attrs and list(out.run.values) == ["r1", "r2"]
    # new rows of other settings than the stored ones: computed whole
    run_ablation(staged, "t", runs=["r0"], **{**ABLATE, "settings": ["probe"], "matched": False})
    out = run_ablation(staged, "t", runs=["r0", "r1"], extend=True, **ABLATE)
    assert REUSED not in out.attrs and list(out.run.values) == ["r0", "r1"] and out.sizes["setting"] == 5


def _ar_runs(path, seeds=(0, 1, 2), length: int = 12):
    """Untrained associative-recall GRUs of several seeds with stored counterfactual twins."""
    task = get_task("assoc_recall", n_keys=8, n_values=8)
    cfg = ModelConfig(arch="gru", d_model=16, n_layers=2)
    n_classes = task.n_classes[task.target]
    st = Store.create(str(path))
    for seed in seeds:
        rid = f"gru-ar-{seed}"
        st.add_run(rid, task="assoc_recall", arch="gru", seed=seed, model_config=cfg.model_dump(),
                   task_config=task.model_dump())
        st.write_weights(rid, build_model(cfg, vocab_size=task.vocab_size, n_classes=n_classes, seed=seed).state_dict())
        st.update_run_attrs(rid, vocab_size=task.vocab_size, n_classes=n_classes, target=task.target,
                            status="trained")
        capture_counterfactuals(st, rid, length, n_pairs=8)
    return st


def test_patching_and_interchange_extended_by_new_runs_are_computed_whole(tmp_path):
    base = _ar_runs(tmp_path / "base.zarr")
    runs = ["gru-ar-0", "gru-ar-1", "gru-ar-2"]
    whole = Store.open(str(shutil.copytree(base.location.url, tmp_path / "whole.zarr")), mode="r+")
    staged = Store.open(str(shutil.copytree(base.location.url, tmp_path / "staged.zarr")), mode="r+")
    for fn, kind in ((run_patching, "patching"), (run_interchange, "interchange")):
        fn(whole, 12, "t", runs=runs)
        fn(staged, 12, "t", runs=runs[:1])
        out = fn(staged, 12, "t", runs=runs, extend=True)
        assert out.attrs[REUSED] == 1, kind
        _equal(staged.read_result(f"{kind}/t").drop_attrs(), whole.read_result(f"{kind}/t").drop_attrs())
    assert "mechanism" in staged.read_result("interchange/t")


def test_the_pipeline_computes_a_first_ablation_whole_and_a_stages_new_runs_alone(three_lstms, tmp_path):
    from types import SimpleNamespace

    from layerstate import stages
    from layerstate.work import Work

    exp = SimpleNamespace(train=SimpleNamespace(length=8), analysis=SimpleNamespace(
        ablate_settings=ABLATE["settings"], ablate_lengths=[8], ablate_fit_length=8, ablate_mode="zero",
        ablate_refit_rows=10_000))

    def unit(*runs: str) -> Work:
        return Work("analyse", "ablation/parity", kind="ablation", task="parity", runs=runs)

    staged = Store.open(str(shutil.copytree(three_lstms.location.url, tmp_path / "staged.zarr")), mode="r+")
    whole = Store.open(str(shutil.copytree(three_lstms.location.url, tmp_path / "whole.zarr")), mode="r+")
    lines: list[str] = []
    assert stages.analyse(unit("r0", "r1"), staged, exp, lines.append, "sync") == "ablation/parity"  # none stored
    assert lines[-1].startswith("ablation/parity: stored in") and "reused" not in lines[-1]
    stages.analyse(unit("r0", "r1", "r2"), staged, exp, lines.append, "sync")
    assert lines[-2].endswith("it lacks 1 of the experiment's runs: r2); computing the runs it lacks")
    assert lines[-1].endswith("(1 new runs computed, the stored rows of 2 reused)")
    stages.analyse(unit("r0", "r1", "r2"), whole, exp, lines.append, "sync")
    assert "reused" not in lines[-1]
    _equal(staged.read_result("ablation/parity").drop_attrs(), whole.read_result("ablation/parity").drop_attrs())
    stages.analyse(unit("r0", "r1", "r2"), staged, exp, lines.append, "sync")
    assert lines[-1] == "ablation/parity: already stored"  # the joined result records every run it answers
