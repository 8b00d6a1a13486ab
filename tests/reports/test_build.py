"""build_report: files, numbers with intervals, missing sections, snapshots and refusals."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from reports import build_report
from reports.numbers import fmt_ci, seed_t_interval
from store import Store

from ._data import LENGTH, _write_run

SECTIONS = ["provenance", "behaviour", "probes", "interventions", "claims"]


def _csv(folder, name) -> pd.DataFrame:
    return pd.read_csv(folder / "tables" / f"{name}.csv")


def _t_interval(x) -> tuple[float, float, float]:
    x = np.asarray(x, dtype=float)
    half = sps.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return x.mean(), x.mean() - half, x.mean() + half


def _runs(store, task, arch):
    return store.select(task=task, arch=arch)


# ---------------------------------------------------------------------- files and page
def test_report_writes_page_markdown_figures_and_tables(full_report):
    folder, index = full_report
    assert index == folder / "index.html"
    meta = json.loads((folder / "report.json").read_text())
    assert [s["key"] for s in meta["sections"]] == SECTIONS
    every = meta["sections"] + [p for s in meta["sections"] for p in s["parts"]]
    assert {s["status"] for s in every} == {"ok"} and len(every) == 8
    figures = [f for s in every for f in s["figures"]]
    tables = [t for s in every for t in s["tables"]]
    assert len(figures) >= 7 and len(tables) >= 12
    for fig in figures:
        png = (folder / fig).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert (folder / fig).with_suffix(".svg").read_text().lstrip().startswith("<?xml")
    for tab in tables:
        assert len(pd.read_csv(folder / tab)) > 0, tab


def test_page_is_self_contained_and_has_every_section(full_report):
    folder, index = full_report
    html = index.read_text()
    assert "<script" not in html and "http://" not in html and "https://" not in html
    images = re.findall(r'<img src="([^"]+)"', html)
    assert len(images) >= 7
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:4] == b"\x89PNG"
    positions = [html.index(f'id="{key}"') for key in SECTIONS]
    assert positions == sorted(positions)
    assert "@media print" in html
    # user text is escaped, never injected
    assert "Report test &lt;store&gt; &amp; friends" in html and "<store>" not in html


def test_markdown_summary_has_sections_tables_and_linked_figures(full_report):
    folder, _ = full_report
    md = (folder / "report.md").read_text()
    for n, title in enumerate(["Experiment and provenance", "Behaviour", "Probe profiles", "Interventions", "Claims"], 1):
        assert f"## {n}. {title}" in md
    for link in re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", md):
        assert (folder / link).is_file()
    header = next(line for line in md.splitlines() if line.startswith("| task | arch | variant | L = 10"))
    assert header.count("|") == 7


# ---------------------------------------------------------------------- numbers
def test_behaviour_accuracy_and_interval_match_the_stored_logits(full_store, full_report):
    folder, index = full_report
    per_seed = []
    for rid in _runs(full_store, "dyck", "lstm"):
        ds = full_store.load_length(rid, LENGTH)
        per_seed.append(float((ds.logits.argmax("class") == ds.state).mean()))
    est, lo, hi = _t_interval(per_seed)
    row = _csv(folder, "behaviour_accuracy").query("task == 'dyck' and arch == 'lstm' and length == @LENGTH").iloc[0]
    lo, hi = max(lo, 0.0), min(hi, 1.0)  # a proportion's interval is clipped to [0, 1]
    assert (row.estimate, row.lower, row.upper) == pytest.approx((est, lo, hi), abs=1e-9)
    assert row.n_seeds == 3 and row.method == "seed-level t"
    assert fmt_ci(est, lo, hi) in index.read_text()


def test_probe_profiles_show_the_planted_reversal_with_seed_intervals(full_store, full_report):
    folder, _ = full_report
    prof = _csv(folder, "probe_profiles").query("length == @LENGTH")
    acc = prof.set_index(["task", "arch", "layer"])["estimate"]
    assert acc["parity", "lstm", "L2"] > 0.9 > acc["parity", "lstm", "L0"]       # late jump
    assert acc["dyck", "transformer", "L0"] > 0.9 > acc["dyck", "lstm", "L0"]    # early on dyck
    res = full_store.read_result("probes/state")
    runs = _runs(full_store, "parity", "lstm")
    cell = res.sel(run=runs, length=LENGTH)
    per_seed = (cell.correct.sel(layer="L1").sum("sequence") / cell.labelled.sum("sequence")).values
    est, lo, hi = _t_interval(per_seed)
    row = prof.query("task == 'parity' and arch == 'lstm' and layer == 'L1'").iloc[0]
    assert (row.estimate, row.lower, row.upper) == pytest.approx((est, max(lo, 0), min(hi, 1)), abs=1e-9)
    sel = cell.selectivity.sel(layer="L1").mean("fold").values
    assert row.selectivity == pytest.approx(sel.mean(), abs=1e-9)
    assert 0 <= row.baseline <= 1 and np.isfinite(row.selectivity_lower)
    summary = _csv(folder, "probe_summary").set_index(["task", "arch", "length"])
    assert summary.loc[("parity", "lstm", LENGTH), "best_layer_name"].startswith("L2")
    assert summary.loc[("dyck", "transformer", LENGTH), "first_crossing_name"].startswith("L0")
    assert (summary["auc_lower"] <= summary["auc"]).all() and (summary["auc"] <= summary["auc_upper"]).all()


def test_ablation_and_patching_intervals_come_from_per_sequence_counts(full_store, full_report):
    folder, _ = full_report
    runs = _runs(full_store, "parity", "lstm")
    abl = full_store.read_result("ablation/default").sel(run=runs, length=LENGTH, layer="L1")
    n = abl.n_labelled.sum("sequence")
    drop = ((abl.correct_clean.sum("sequence") - abl.correct.sel(setting="probe").sum("sequence")) / n).values
    row = _csv(folder, "ablation_default_drop").query(
        "task == 'parity' and arch == 'lstm' and length == @LENGTH and layer == 'L1' and setting == 'probe'").iloc[0]
    assert (row.estimate, row.lower, row.upper) == pytest.approx(_t_interval(drop), abs=1e-9)
    residual = _csv(folder, "ablation_default_residual")
    assert {"clean", "estimate", "lower", "upper"} <= set(residual.columns)
    pat = full_store.read_result("patching/default").sel(run=runs, layer="L0", position=9)
    rec = (pat.recovered.sum("sequence") / pat.gap.sum("sequence")).values
    row = _csv(folder, "patching_default_recovery").query(
        "task == 'parity' and arch == 'lstm' and layer == 'L0' and position == 9").iloc[0]
    assert (row.estimate, row.lower, row.upper) == pytest.approx(_t_interval(rec), abs=1e-9)
    mech = _csv(folder, "interchange_default_mechanism")
    assert len(mech) == 12 and set(mech.mechanism) == {"induction"}


def test_claims_table_holds_every_claim_with_interval_test_and_verdict(full_store, full_report):
    folder, index = full_report
    res = full_store.read_result("claims")
    table = _csv(folder, "claims").set_index("claim")
    for cid in res.claim.values:
        r = res.sel(claim=cid)
        row = table.loc[str(cid)]
        assert row.verdict == str(r.verdict.values)
        assert (row.estimate, row.lower, row.upper, row.p_adjusted) == pytest.approx(
            (float(r.estimate), float(r.lower), float(r.upper), float(r.p_adjusted)))
        assert str(r.statement.values).replace("±", "±") in index.read_text()
    assert table.loc["parity-lstm-beats-transformer", "verdict"] == "supported"


# ---------------------------------------------------------------------- missing results
def test_missing_sections_name_the_command_that_produces_them(bare_store, tmp_path):
    index = build_report(bare_store, tmp_path / "r", check_chunks=False)
    html = index.read_text()
    meta = json.loads((tmp_path / "r" / "report.json").read_text())
    status = {s["key"]: s["status"] for s in meta["sections"]}
    assert status["behaviour"] == "ok" and status["provenance"] == "ok"
    assert status["probes"] == status["claims"] == status["interventions"] == "missing"
    for command in ("layerstate probe STORE", "layerstate ablate STORE", "layerstate patch STORE",
                    "layerstate stats STORE --claims EXPERIMENT.toml"):
        assert command in html
    assert not (tmp_path / "r" / "tables" / "claims.csv").exists()


def test_an_empty_store_gets_a_report_that_says_what_to_run(tmp_path):
    st = Store.create(str(tmp_path / "empty.zarr"), title="nothing yet")
    index = build_report(st, tmp_path / "r")
    html = index.read_text()
    assert "layerstate capture EXPERIMENT.toml --store STORE" in html
    meta = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [s["status"] for s in meta["sections"]] == ["ok", "missing", "missing", "missing", "missing"]
    assert _csv(tmp_path / "r", "validation").loc[0, "ok"]


# ---------------------------------------------------------------------- snapshots and refusals
@pytest.fixture
def writing_store(tmp_path):
    """Two seeds of one model; seed 1's length 14 is half written by a writer still open."""
    st = Store.create(str(tmp_path / "w.zarr"), title="being written")
    rng = np.random.default_rng(3)
    _write_run(st, "parity", "lstm", 0, rng)
    _write_run(st, "parity", "lstm", 1, rng, lengths=(LENGTH,))
    writer = st.length_writer("lstm-parity-s1", 14, n_sequences=8, n_layers=3, n_features=8,
                              labels=["state"], n_classes=2, block_size=4)
    y = rng.integers(0, 2, (4, 14))
    writer.write_block(0, hidden=rng.standard_normal((4, 14, 4, 8)).astype("float32"), tokens=y,
                       labels={"state": y}, logits=np.eye(2, dtype="float32")[y])
    writer.flush()  # blocks are recorded one behind the writer; flush records block 0 now
    st.consolidate()  # a writer that published its progress: the snapshot shows the group
    st.write_result("probes/broken", __import__("xarray").Dataset({"foo": ("x", [1.0, 2.0])}))
    yield st
    writer._lock.release()


def test_a_store_being_written_is_reported_from_complete_lengths_only(writing_store, tmp_path):
    index = build_report(writing_store, tmp_path / "r", check_chunks=False)
    html = index.read_text()
    assert "run lstm-parity-s1 length 14 is incomplete (1/2 blocks written" in html
    acc = _csv(tmp_path / "r", "behaviour_accuracy").set_index("length")
    assert acc.loc[14, "n_seeds"] == 1 and acc.loc[LENGTH, "n_seeds"] == 2
    assert acc.loc[14, "method"] == "hierarchical percentile"
    assert "results/probes/broken has no &#39;accuracy&#39; variable (variables: foo)" in html


def test_existing_folder_is_refused_unless_forced(writing_store, tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    with pytest.raises(FileExistsError, match=r"r exists; choose another directory or pass --force"):
        build_report(writing_store, out)
    (out / "report.json").write_text("{}")
    (out / "stale.csv").write_text("old")
    index = build_report(writing_store, out, force=True, check_chunks=False)
    assert index.is_file() and not (out / "stale.csv").exists()
    assert json.loads((out / "report.json").read_text())["generator"] == "layerstate reports"


def test_force_never_replaces_a_folder_that_is_not_a_report(writing_store, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="is not a layerstate report .* refusing to replace it even with --force"):
        build_report(writing_store, out, force=True)
    assert (out / "notes.txt").read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".mine")] == []


# ---------------------------------------------------------------------- helpers
def test_seed_interval_uses_each_cells_own_seeds():
    import xarray as xr

    per_seed = xr.DataArray([[0.5, 0.7, np.nan], [0.2, np.nan, np.nan], [0.1, 0.2, 0.3]],
                            dims=("cell", "seed"))
    res = seed_t_interval(per_seed)
    est, lo, hi = _t_interval([0.5, 0.7])
    assert res.estimate.values[0] == pytest.approx(est) and res.lower.values[0] == pytest.approx(lo)
    assert res.estimate.values[1] == pytest.approx(0.2) and np.isnan(res.lower.values[1])
    assert list(res.n_seeds.values) == [2, 1, 3]
    assert fmt_ci(0.2, np.nan, np.nan) == "0.200 [no interval]"
