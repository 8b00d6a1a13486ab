"""Behaviour as a stored result (``results/behaviour/<task>``): its counts are the ones
counted from the logits, claims read it and give the same verdicts, and the report's
behaviour table is the same whether it reads the stored result or measures it in memory."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from analysis import registry
from analysis.behaviour import (
    accuracy_intervals,
    behaviour_result,
    sequence_correctness,
    store_behaviour,
    stored_behaviour,
)
from store import Store, schema
from tests.reports._data import CLAIMS, LENGTH, OOD_LENGTH, _write_run


def _store(path, seeds_for=None) -> Store:
    rng = np.random.default_rng(3)
    st = Store.create(str(path))
    with st.deferred_consolidation():
        for task in ("parity", "dyck"):
            for arch in ("lstm", "transformer"):
                for seed in (seeds_for or {}).get(task, (0, 1, 2)):
                    _write_run(st, task, arch, seed, rng)
    return st


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Store:
    """Three seeds of parity, one of dyck (its interval is a percentile bootstrap), behaviour
    stored for both."""
    st = _store(tmp_path_factory.mktemp("behaviour") / "s.zarr", {"dyck": (0,)})
    for task in ("parity", "dyck"):
        store_behaviour(st, task)
    return st


def test_the_result_is_named_by_the_schema_and_stamped():
    assert registry.behaviour_name("parity") == "behaviour/parity"
    assert registry.parse_behaviour_name("behaviour/parity") == "parity"
    assert registry.parse_behaviour_name("probes/parity") is None
    assert schema.parse_result_name("behaviour/dyck") == ("behaviour", "dyck")


def test_stored_counts_equal_the_counts_from_the_logits(stored):
    assert stored_behaviour(stored) == ["behaviour/dyck", "behaviour/parity"]
    ds = stored.read_result("behaviour/parity")
    assert ds.attrs["analysis"] == "behaviour" and ds.attrs["ci_level"] == 0.95 and "method" in ds.attrs
    assert {"created", "command", "tool_version"} <= set(ds.attrs)
    runs = [r for r in stored.run_ids() if stored.run_attrs(r)["task"] == "parity"]
    assert [str(r) for r in ds.run.values] == runs
    for L in (LENGTH, OOD_LENGTH):
        fresh = sequence_correctness(stored, runs, [L])
        for var in ("correct", "labelled"):
            np.testing.assert_array_equal(ds[var].sel(length=L).values, fresh[var].sel(length=L).values)
        np.testing.assert_allclose(ds.accuracy.sel(length=L).values,
                                   (fresh.correct.sum("sequence") / fresh.labelled.sum("sequence")).sel(length=L).values)
        for i, arch in enumerate(ds.cell_arch.values):
            sub = fresh.sel(run=[r for r in runs if stored.run_attrs(r)["arch"] == str(arch)])
            acc = accuracy_intervals(sub).isel(task=0, arch=0, variant=0, length=0)
            for var in ("estimate", "lower", "upper"):
                assert float(ds[var].isel(cell=i).sel(length=L)) == float(acc[var])
            assert int(ds.n_seeds.isel(cell=i).sel(length=L)) == 3
            assert str(ds.method.isel(cell=i).sel(length=L).item()) == "seed-level t"
    one = stored.read_result("behaviour/dyck")
    assert set(map(str, one.method.values.ravel())) == {"hierarchical percentile"} and (one.n_seeds.values == 1).all()


def _claims(st: Store):
    from analysis.claims import evaluate_claims, parse_claims

    return evaluate_claims(st, parse_claims(CLAIMS))


def test_claims_read_the_stored_result_and_are_unchanged(tmp_path):
    from analysis.claims.metrics import stored_counts

    st = _store(tmp_path / "c.zarr", {"dyck": (0, 1)})
    before = _claims(st)
    runs = [r for r in st.run_ids() if LENGTH in st.lengths(r)]
    assert stored_counts(st, runs, LENGTH, None) is None  # nothing stored: counted from the logits
    for task in ("parity", "dyck"):
        store_behaviour(st, task)
    read = stored_counts(st, runs, LENGTH, None)
    assert read is not None and read.attrs["results"] == "behaviour/dyck, behaviour/parity"
    fresh = sequence_correctness(st, runs, [LENGTH])
    xr.testing.assert_identical(read.drop_attrs(), fresh[["correct", "labelled"]].drop_attrs())
    assert stored_counts(st, runs, LENGTH, "other") is None  # stored for the declared target only
    after = _claims(st)
    xr.testing.assert_identical(before.drop_vars(["created"], errors="ignore"),
                                after.drop_vars(["created"], errors="ignore"))


def test_the_report_table_is_the_same_stored_or_measured(stored):
    from reports.behaviour import accuracy_frame
    from reports.intervals import RANGES, apply_rules
    from reports.snapshot import take_snapshot

    snap = take_snapshot(stored)
    lengths = sorted({L for ls in snap.with_logits.values() for L in ls})
    frame, notes = accuracy_frame(snap, lengths)
    assert not any("not stored" in n for n in notes)  # read from the stored results
    # the table as the report measured it before behaviour was stored: per length, each
    # (task, arch, variant) of the runs captured there
    from analysis.stats import interval_table

    rows = []
    for L in lengths:
        runs = [r for r in snap.runs if L in snap.with_logits[r]]
        corr = sequence_correctness(snap.store, runs, [L])
        for _, grp in corr[["task", "arch", "variant"]].to_dataframe().reset_index().groupby(["task", "arch", "variant"]):
            sub = corr.sel(run=grp["run"].tolist())
            acc = accuracy_intervals(sub)
            t = interval_table(acc)
            t["n_seeds"], t["note"] = sub.sizes["run"], acc.attrs.get("note", "")
            rows.append(t)
    old = pd.concat(rows, ignore_index=True)
    cols = ["task", "arch", "variant", "length", "estimate", "lower", "upper", "n_seeds", "method", "ci_level", "note"]
    old = old[np.isfinite(old["estimate"])][cols].sort_values(["task", "arch", "variant", "length"]).reset_index(drop=True)
    old = apply_rules(old, *RANGES["accuracy"], t_based=old["method"] == "seed-level t", clipped_before="note")
    pd.testing.assert_frame_equal(frame, old)
    # measured in memory where nothing is stored: the same table, and a note with the command
    bare = Store.open(stored.location.url)
    mem = behaviour_result(bare, at={L: [r for r in snap.runs if L in snap.with_logits[r]] for L in lengths})
    assert float(mem.estimate.sum()) == float(stored.read_result("behaviour/parity").estimate.sum()
                                              + stored.read_result("behaviour/dyck").estimate.sum())


def test_a_store_without_the_result_is_measured_with_a_note(tmp_path):
    from reports.behaviour import accuracy_frame
    from reports.snapshot import take_snapshot

    st = _store(tmp_path / "n.zarr", {"dyck": (0, 1)})
    snap = take_snapshot(st)
    frame, notes = accuracy_frame(snap, [LENGTH, OOD_LENGTH])
    assert any("`layerstate behaviour STORE` stores it" in n for n in notes)
    store_behaviour(st, "parity")
    store_behaviour(st, "dyck")
    st.consolidate()
    again, notes = accuracy_frame(take_snapshot(st), [LENGTH, OOD_LENGTH])
    assert not any("stores it" in n for n in notes)
    pd.testing.assert_frame_equal(frame, again)
    # a run added since: that task's stored result no longer covers the runs, measured again
    _write_run(st, "parity", "lstm", 5, np.random.default_rng(9))
    st.consolidate()
    _, notes = accuracy_frame(take_snapshot(st), [LENGTH, OOD_LENGTH])
    assert any("Behaviour of parity is not stored" in n for n in notes)


def test_the_pipeline_stores_it_and_measures_again_when_a_run_is_added(tmp_path):
    from types import SimpleNamespace

    from layerstate import stages
    from layerstate.work import Work

    st = _store(tmp_path / "p.zarr", {"dyck": (0,)})
    exp = SimpleNamespace(analysis=SimpleNamespace())
    lines: list[str] = []

    def unit(task: str) -> Work:
        runs = tuple(r for r in st.run_ids() if st.run_attrs(r)["task"] == task)
        return Work("analyse", registry.behaviour_name(task), kind="behaviour", task=task, runs=runs)

    assert stages.analyse(unit("parity"), st, exp, lines.append, "sync") == "behaviour/parity"
    assert lines[-1].startswith("behaviour/parity: stored")
    stages.analyse(unit("parity"), st, exp, lines.append, "sync")
    assert lines[-1] == "behaviour/parity: already stored"
    rid = _write_run(st, "parity", "lstm", 7, np.random.default_rng(1))
    before = len(lines)
    stages.analyse(unit("parity"), st, exp, lines.append, "sync")
    assert lines[before] == ("behaviour/parity: the stored result is out of date (it lacks 1 of the experiment's "
                             f"runs: {rid}); computing it again")
    assert rid in [str(r) for r in st.read_result("behaviour/parity").run.values]
    # a length captured since changes what it is measured on: computed again
    stages.analyse(unit("dyck"), st, exp, lines.append, "sync")
    assert lines[-1].startswith("behaviour/dyck: stored")
    dyck = unit("dyck").runs[0]
    y = np.zeros((4, 18), dtype=int)
    st.write_length(dyck, 18, hidden=np.zeros((4, 18, 4, 8), "float32"), tokens=y, labels={"state": y},
                    logits=np.eye(3, dtype="float32")[y])
    before = len(lines)
    stages.analyse(unit("dyck"), st, exp, lines.append, "sync")
    assert lines[before].startswith("behaviour/dyck: the stored result is out of date (its parameters differ: "
                                    "lengths"), lines[before:]
    assert 18 in st.read_result("behaviour/dyck").length.values


def test_the_command_stores_it_for_each_task(tmp_path):
    from click.testing import CliRunner

    from layerstate.cli import main

    st = _store(tmp_path / "cli.zarr", {"dyck": (0, 1)})
    res = CliRunner().invoke(main, ["behaviour", str(tmp_path / "cli.zarr"), "--task", "parity"])
    assert res.exit_code == 0, res.output
    assert "parity lstm/default L=10: accuracy" in res.output and "(3 seeds, seed-level t)" in res.output
    assert "stored results/behaviour/parity" in res.output
    assert stored_behaviour(Store.open(st.location.url)) == ["behaviour/parity"]
    res = CliRunner().invoke(main, ["behaviour", str(tmp_path / "cli.zarr"), "--task", "nope"])
    assert res.exit_code != 0 and "run `layerstate capture` first" in res.output
