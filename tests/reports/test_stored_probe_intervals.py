"""The probes section renders the intervals stored with each probe result, and they are the
numbers it computed itself before probe results kept them (which it still does, with a note,
for a result stored without them)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from analysis.probes.intervals import (
    METRICS,
    SUMMARY,
    probe_interval_frames,
    profile_summary,
    stored_probe_intervals,
    stored_profile_summary,
)
from reports.numbers import read_result
from reports.readout import profile_frame, summary_frame
from store import Store

from ._data import LENGTH, _write_run

#: Three seeds (intervals), two (too few: the seeds' own values) and one (sequences only).
MODELS = {("parity", "lstm"): (0, 1, 2), ("parity", "transformer"): (0, 1), ("dyck", "lstm"): (0,)}


def _without_intervals(ds: xr.Dataset) -> xr.Dataset:
    """A probe result as stored before results kept their intervals."""
    names = [f"{m}_{p}" for m in (*METRICS, *SUMMARY) for p in ("estimate", "lower", "upper", "n_seeds", "method")]
    names += ["profile_n_seeds", "auc_chance", "profile_layers", "best_layer_per_seed", "first_crossing_per_seed",
              "profile_seed_used", "profile_seed", "cell_task", "cell_arch", "cell_variant"]
    old = ds.drop_vars([n for n in names if n in ds.variables])
    old.attrs = {k: v for k, v in ds.attrs.items() if k not in ("interval_metrics", "ci_level") and
                 not k.startswith("profile_")}
    return old


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> Store:
    from analysis.probes import probe

    rng = np.random.default_rng(5)
    st = Store.create(str(tmp_path_factory.mktemp("probes") / "s.zarr"))
    for (task, arch), seeds in MODELS.items():
        for seed in seeds:
            _write_run(st, task, arch, seed, rng)
    probe(st, "state", positions="pooled", folds=2, method="screen", scheduler="sync", save=True,
          train_length=LENGTH)
    for name in [n for n in st.results() if n.startswith("probes/")]:
        st.write_result(name.replace("probes/", "probes/old-"), _without_intervals(read_result(st, name)))
    return st


def test_probe_results_store_their_intervals_and_the_report_shows_the_same_numbers(probed):
    names = sorted(n for n in probed.results() if n.startswith("probes/") and "old-" not in n)
    assert names
    for name in names:
        new = read_result(probed, name)
        old = read_result(probed, name.replace("probes/", "probes/old-"))
        assert "accuracy" in new.attrs["interval_metrics"] and new["accuracy_estimate"].dims == ("cell", "length", "layer")
        assert "accuracy_estimate" not in old
        for metric, computed in probe_interval_frames(old, probed).items():
            stored = stored_probe_intervals(new, metric)
            assert stored is not None
            pd.testing.assert_frame_equal(stored.sort_values(list(stored.columns[:5])).reset_index(drop=True),
                                          computed[list(stored.columns)].sort_values(list(stored.columns[:5]))
                                          .reset_index(drop=True), check_dtype=False, obj=f"{name} {metric}")
        here: list[str] = []
        before = profile_frame(old, probed, target="t", computed=here)
        assert here == ["probes"]
        here = []
        after = profile_frame(new, probed, target="t", computed=here)
        assert here == []
        pd.testing.assert_frame_equal(after, before, check_dtype=False)
        stored_summary = stored_profile_summary(new)
        assert stored_summary is not None and stored_profile_summary(old) is None
        pd.testing.assert_frame_equal(stored_summary, profile_summary(old, probed), check_dtype=False)
        assert set(stored_summary["n_seeds"]) == {1, 2, 3}
        here = []
        before = summary_frame(old, probed, target="t", computed=here)
        assert here == ["summary"]
        here = []
        after = summary_frame(new, probed, target="t", computed=here)
        assert here == []
        pd.testing.assert_frame_equal(after, before, check_dtype=False)


def test_the_probes_section_notes_results_without_stored_intervals(probed):
    from reports.readout import probes
    from reports.snapshot import take_snapshot

    names = sorted(n for n in probed.results() if n.startswith("probes/") and "old-" not in n)
    snap = take_snapshot(probed)
    new = probes(snap, names)
    old = probes(snap, [n.replace("probes/", "probes/old-") for n in names])
    for a, b in zip(new.tables, old.tables, strict=True):
        pd.testing.assert_frame_equal(a.shown(), b.shown(), obj=a.name)
    assert not [n for n in new.notes if "are not stored with the result" in n]
    note = next(n for n in old.notes if "are not stored with the result" in n)
    assert "probes/old-" in note and "`layerstate probe STORE`" in note
