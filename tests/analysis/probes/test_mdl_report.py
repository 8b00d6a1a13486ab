"""The report's probes section shows the stored MDL compression beside the probe profile: a
figure and a table whose numbers are the stored intervals (the report computes none)."""

from __future__ import annotations

import numpy as np

from analysis.probes import mdl_probe, probe
from reports.readout import probes
from reports.snapshot import take_snapshot
from tests.analysis.probes.test_probes import make


def test_probes_section_shows_stored_mdl_compression(tmp_path):
    st = make(tmp_path, runs=("r0", "r1", "r2"), n=120, lengths=(8,), positions=(7,))
    probe(st, "y", positions="last", folds=3, C=1.0, save=True, scheduler="sync")
    without = probes(take_snapshot(st))
    assert "mdl_compression" not in [f.name for f in without.figures]
    mdl_probe(st, "y", positions="last", save=True, scheduler="sync")
    sec = probes(take_snapshot(st))
    names = [f.name for f in sec.figures]
    assert names.index("mdl_compression") == names.index("probe_profiles") + 1  # beside the profile
    table = next(t for t in sec.tables if t.name == "mdl_compression")
    stored = st.read_result("mdl/toy")
    est = stored.compression_estimate.sel(length=8).isel(cell=0)
    row = table.data[(table.data.layer == "L1") & (table.data.length == 8)].iloc[0]
    assert np.isclose(row.compression, float(est.sel(layer="L1")))
    assert np.isclose(row.compression_lower, float(stored.compression_lower.sel(length=8, layer="L1").isel(cell=0)))
    assert row.compression > 2 and abs(row.control - 1) < 0.15
    shown = table.shown()
    assert shown.loc[0, "L1"].startswith(f"{row.compression:.2f} [")
