"""The report's probes section shows the stored cross-seed stability beside the probe profile:
a figure, a table whose numbers are the stored intervals and nulls, and one sentence per
architecture naming the layers where the stored interval clears both stored nulls."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reports.readout import probes
from reports.snapshot import take_snapshot
from reports.stability import agreement_sentences
from tests.analysis.probes.stability_stores import probed


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return probed(tmp_path_factory.mktemp("stab") / "s.zarr", n=320, noise=0.5)


def test_probes_section_shows_stored_stability_and_where_seeds_agree(store):
    sec = probes(take_snapshot(store))
    names = [f.name for f in sec.figures]
    assert names.index("probe_stability") > names.index("probe_profiles")
    figure = sec.figures[names.index("probe_stability")]
    assert "lstm: the seeds agree on where the label lives at L1 in toy." in figure.caption
    assert "from results/stability/toy (probes of probes/toy)" in figure.caption  # the result it read
    table = next(t for t in sec.tables if t.name == "probe_stability")
    stored = store.read_result("stability/toy")
    row = table.data[(table.data.layer == "L1") & (table.data.length == 8)].iloc[0]
    at = dict(length=8, layer="L1")
    assert np.isclose(row.overlap, float(stored.stability_estimate.sel(at).squeeze()))
    assert np.isclose(row.overlap_lower, float(stored.stability_lower.sel(at).squeeze()))
    assert np.isclose(row.shuffled_upper, float(stored.shuffled_upper.sel(at).squeeze()))
    assert np.isclose(row.null, float(stored.null_estimate.sel(at).squeeze()))
    shown = table.shown().set_index("cell")
    assert shown.loc["toy lstm/default", "L1"].startswith(f"{row.overlap:.2f} [") and " agree " in \
        shown.loc["toy lstm/default", "L1"]
    assert " agree " not in shown.loc["toy lstm/default", "L0"]


def test_two_seeds_or_no_shuffled_null_are_not_read_as_agreement(store):
    table = next(t for t in probes(take_snapshot(store)).tables if t.name == "probe_stability")
    frame = table.data
    two = frame.assign(n_seeds=2, overlap_lower=np.nan, agree=False)
    assert agreement_sentences(two) == [
        "lstm: toy not read (2 seeds: one pair, no interval)."]
    old = frame.assign(shuffled=np.nan)
    assert agreement_sentences(old) == [
        "lstm: toy not read (no shuffled-label null stored)."]


def test_no_stability_result_no_figure(tmp_path):
    from analysis.probes import probe
    from tests.analysis.probes.stability_stores import rotated_seeds

    st = rotated_seeds(tmp_path / "s.zarr", seeds=2)
    probe(st, "y", positions="last", save=True, scheduler="sync")
    assert "probe_stability" not in [f.name for f in probes(take_snapshot(st)).figures]


def test_architectures_with_the_same_reading_share_a_sentence(store):
    frame = next(t for t in probes(take_snapshot(store)).tables if t.name == "probe_stability").data
    two = frame.assign(n_seeds=2)
    both = pd.concat([two, two.assign(arch="gru")], ignore_index=True)
    assert agreement_sentences(both) == ["lstm, gru: toy not read (2 seeds: one pair, no interval)."]
    mixed = pd.concat([frame, two.assign(arch="gru")], ignore_index=True)
    assert len(agreement_sentences(mixed)) == 2
