"""A probe sweep run by run keeps each run's part as it finishes: stopped and started again it
computes only the runs it lacks, and the result is the one computing every run at once gives,
value for value, also where the runs differ in shape."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from analysis.probes import plan_probes, probe, resume
from analysis.probes.resume import PARTIAL, compute_by_run
from analysis.probes.sweep import ProbePlan
from tests.analysis.probes.stability_stores import rotated_seeds


@pytest.fixture
def store(tmp_path):
    st = rotated_seeds(tmp_path / "s.zarr", seeds=3, n=60, length=6, d=8)
    g = np.random.default_rng(5)  # a fourth run with fewer sequences: the layouts differ
    st.add_run("r9", task="toy", arch="gru", seed=9)
    st.write_length("r9", hidden=g.standard_normal((40, 6, 3, 8)).astype(np.float32),
                    tokens=g.integers(0, 4, (40, 6)), labels={"y": g.integers(0, 2, (40, 6))}, block_size=64)
    return st


def _plan(st, runs=None) -> ProbePlan:
    return plan_probes(st, "y", runs=runs, positions="all", folds=3, C=1.0)


def test_run_by_run_is_the_sweep_computed_at_once(store):
    whole = _plan(store).compute("sync")
    by_run = compute_by_run(store, _plan(store), lambda runs: _plan(store, runs), scheduler="sync")
    assert whole.sizes["sequence"] == 60 and int(by_run.labelled.sel(run="r9").sum()) > 0
    xr.testing.assert_identical(whole, by_run)
    assert not [n for n in store.results() if n.startswith(PARTIAL)]  # the parts are gone


def test_a_stopped_sweep_resumes_from_the_runs_it_finished(store, monkeypatch):
    monkeypatch.setattr(resume, "RESUME_FROM_S", 0.0)  # this sweep is short: keep its parts anyway
    keep = resume._Keeping._posttask

    def stop_after_two(self, *args):  # Ctrl-C while the third run computes
        keep(self, *args)
        if sum(n.startswith(f"{PARTIAL}/probes-") for n in store.results()) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(resume._Keeping, "_posttask", stop_after_two)
    with pytest.raises(KeyboardInterrupt):
        probe(store, "y", positions="all", folds=3, C=1.0, scheduler="sync")
    monkeypatch.setattr(resume._Keeping, "_posttask", keep)
    kept = [str(store.read_result(n).run.values[0]) for n in store.results() if n.startswith(f"{PARTIAL}/")]
    assert len(kept) == 2
    computed, said, real = [], [], ProbePlan.compute
    monkeypatch.setattr(ProbePlan, "compute", lambda self, *a, **k: computed.append(list(self.runs)) or real(
        self, *a, **k))
    again = probe(store, "y", positions="all", folds=3, C=1.0, scheduler="sync", say=said.append)
    rest = [r for r in ("r0", "r1", "r2", "r9") if r not in kept]
    assert computed == [rest]  # one graph of the runs it lacked
    assert said == [f"resuming: 2 of 4 runs were probed before ({', '.join(sorted(kept))}); probing the other 2"]
    monkeypatch.setattr(ProbePlan, "compute", real)
    xr.testing.assert_identical(again.drop_attrs(), _plan(store).compute("sync").drop_attrs())
    assert not [n for n in store.results() if n.startswith(PARTIAL)]  # removed once the whole is made
