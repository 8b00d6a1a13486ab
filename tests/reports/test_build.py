"""build_report: files, section order, numbers with intervals (never outside their metric's
range, none from too few seeds), the paper comparison, missing sections, snapshots, refusals."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from analysis.intervals import seed_t_interval
from reports import build_report
from reports import intervals as I
from reports.numbers import fmt_ci
from store import Store

from ._data import LENGTH, REFERENCES, _write_run

SECTIONS = ["summary", "claims", "behaviour", "probes", "interventions", "provenance"]
TITLES = ["1. Summary", "2. Claims: tests and power", "3. Behaviour", "4. Probe profiles", "5. Interventions",
          "A. Appendix: experiment and provenance"]
#: Each CSV's interval columns and the range its metric can take (claims: per kind, below).
RANGES = {
    "behaviour_accuracy": [("", 0, 1)],
    "probe_profiles": [("", 0, 1), ("baseline_", 0, 1), ("control_", 0, 1), ("selectivity_", -1, 1)],
    "probe_selectivity": [("selectivity_", -1, 1), ("control_", 0, 1)],
    "ablation_default_drop": [("", -1, 1)],
    "ablation_default_residual": [("", 0, 1)],
    "ablation_default_ood": [("", -1, 1)],
}


def _csv(folder, name) -> pd.DataFrame:
    return pd.read_csv(folder / "tables" / f"{name}.csv")


def _t_interval(x) -> tuple[float, float, float]:
    x = np.asarray(x, dtype=float)
    half = sps.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return x.mean(), x.mean() - half, x.mean() + half


def _page_text(index) -> str:
    """The page's text without its tags (a cell's number and bracket are two spans)."""
    return re.sub(r"<[^>]+>", "", index.read_text())


def _runs(store, task, arch):
    return store.select(task=task, arch=arch)


# ---------------------------------------------------------------------- files and page
def test_report_writes_page_markdown_figures_and_tables(full_report):
    folder, index = full_report
    assert index == folder / "index.html"
    meta = json.loads((folder / "report.json").read_text())
    assert [s["key"] for s in meta["sections"]] == SECTIONS
    assert [s["appendix"] for s in meta["sections"]] == [False] * 5 + [True]
    every = meta["sections"] + [p for s in meta["sections"] for p in s["parts"]]
    assert {s["status"] for s in every} == {"ok"} and len(every) == 14  # with the seed plan
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
    for title in TITLES:
        assert f"{title}</h2>" in html
    assert "@media print" in html
    assert '<span class="est">' in html and '<span class="ci">[' in html  # the bracket may wrap
    # user text is escaped, never injected
    assert "Report test &lt;store&gt; &amp; friends" in html and "<store>" not in html


def test_markdown_summary_has_sections_tables_and_linked_figures(full_report):
    folder, _ = full_report
    md = (folder / "report.md").read_text()
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings == [f"## {t}" for t in TITLES]
    for link in re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", md):
        assert (folder / link).is_file()
    header = next(line for line in md.splitlines() if line.startswith("| task | arch | variant | L = 10"))
    assert header.count("|") == 7


# ---------------------------------------------------------------------- numbers
def _accuracy_per_seed(store, task, arch, length=LENGTH) -> list[float]:
    out = []
    for rid in _runs(store, task, arch):
        ds = store.load_length(rid, length)
        out.append(float((ds.logits.argmax("class") == ds.state).mean()))
    return out


def test_behaviour_accuracy_and_interval_match_the_stored_logits(full_store, full_report):
    folder, index = full_report
    est, lo, hi = _t_interval(_accuracy_per_seed(full_store, "parity", "lstm"))
    row = _csv(folder, "behaviour_accuracy").query("task == 'parity' and arch == 'lstm' and length == @LENGTH").iloc[0]
    lo, hi = max(lo, 0.0), min(hi, 1.0)  # a proportion's interval is clipped to [0, 1]
    assert (row.estimate, row.lower, row.upper) == pytest.approx((est, lo, hi), abs=1e-9)
    assert row.n_seeds == 3 and row.method == "seed-level t"
    assert fmt_ci(est, lo, hi) in _page_text(index)


def test_two_seeds_show_their_own_values_instead_of_an_interval(full_store, full_report):
    folder, index = full_report
    seeds = _accuracy_per_seed(full_store, "dyck", "lstm")
    assert len(seeds) == 2
    row = _csv(folder, "behaviour_accuracy").query("task == 'dyck' and arch == 'lstm' and length == @LENGTH").iloc[0]
    assert row.estimate == pytest.approx(np.mean(seeds)) and row.n_seeds == 2
    assert np.isnan(row.lower) and np.isnan(row.upper) and row.interval_note == I.TOO_FEW
    assert (row.seed_a, row.seed_b) == pytest.approx(sorted(seeds), abs=1e-9)
    a, b = sorted(seeds)
    assert f"{np.mean(seeds):.3f} [too few seeds: {a:.3f}, {b:.3f}]" in _page_text(index)
    # a claim from 2 seeds: the interval its test used, as the CLI prints it, said in words
    # to come from 2 seeds (one interval rule for a claim, docs/decisions.md)
    claim = _csv(folder, "claims").set_index("claim").loc["dyck-equal"]
    assert claim.n_seeds == 2 and np.isfinite(claim.lower) and np.isfinite(claim.upper)
    assert not isinstance(claim.interval_note, str) or claim.interval_note in ("", I.CLIPPED)
    assert "from 2 seeds" in _page_text(index)
    summary = _csv(folder, "probe_summary").query("task == 'dyck' and n_seeds == 2")
    assert len(summary) and summary["auc_lower"].isna().all()
    assert summary["best_layer_name"].str.contains(r"^L\d \[too few seeds: L\d, L\d\]").all()


def test_no_interval_lies_outside_its_metric_range(full_report):
    folder, index = full_report
    checked = 0
    for name, cols in RANGES.items():
        frame = _csv(folder, name)
        for prefix, low, high in cols:
            lower, upper = (f"{prefix}lower", f"{prefix}upper")
            assert lower in frame and upper in frame, (name, prefix)
            assert I.outside_range(frame, low, high, lower, upper).empty, (name, prefix)
            checked += int(frame[lower].notna().sum())
    auc = _csv(folder, "probe_summary")
    low, high = I.auc_range(auc["chance"].to_numpy())
    assert ((auc["auc_lower"].isna()) | (auc["auc_lower"] >= low - 1e-12)).all()
    assert ((auc["auc_upper"].isna()) | (auc["auc_upper"] <= high + 1e-12)).all()
    claims = _csv(folder, "claims")
    for kind, (low, high) in {"difference": (-1, 1), "equivalence": (-1, 1), "readable_by": (0, 1)}.items():
        assert I.outside_range(claims[claims["kind"] == kind], low, high).empty, kind
    assert checked > 50
    clipped = _csv(folder, "behaviour_accuracy").query("interval_note == 'clipped'")
    assert len(clipped) and (clipped["upper"] == 1.0).all()  # near 1, the t interval reached past it
    assert "Intervals that reached past what the metric can take are clipped" in index.read_text()
    # too few seeds: no interval at all, in any table
    for name, cols in RANGES.items():
        frame = _csv(folder, name)
        prefix = cols[0][0]
        if "n_seeds" in frame:
            few = frame[frame["n_seeds"] == 2]
            assert len(few) and few[f"{prefix}lower"].isna().all() and few[f"{prefix}upper"].isna().all(), name


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
    shown = summary.dropna(subset=["auc_lower"])
    assert len(shown) and (shown["auc_lower"] <= shown["auc"]).all() and (shown["auc"] <= shown["auc_upper"]).all()


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
    assert len(mech) == 10 and set(mech.mechanism) == {"induction"}


def test_which_site_was_edited_is_one_table_not_a_note_per_result(full_report):
    folder, index = full_report
    html = index.read_text()
    sites = _csv(folder, "intervention_sites").set_index("arch")
    assert list(sites.index) == ["transformer", "lstm"]  # the figures' architecture order
    assert sites.loc["lstm", "ablation: default"] == "block output of layer <layer> at every position"
    assert sites.loc["lstm", "interchange: default"] == (
        "block output of layer <layer> at positions 'key', 'value', 'divider', 'query'")
    assert "cell state is not edited" in sites.loc["lstm", "not edited"]
    assert html.count("recurrent state at later positions") == 1  # said once, in the table
    meta = json.loads((folder / "report.json").read_text())
    parts = [p for s in meta["sections"] for p in s["parts"]]
    assert not any("patched sites" in n or "block output" in n for p in parts for n in p["notes"])


def test_claims_table_holds_every_claim_with_interval_test_and_verdict(full_store, full_report):
    folder, index = full_report
    res = full_store.read_result("claims")
    table = _csv(folder, "claims").set_index("claim")
    for cid in res.claim.values:
        r = res.sel(claim=cid)
        row = table.loc[str(cid)]
        assert row.verdict == str(r.verdict.values)
        assert (row.estimate, row.p_adjusted) == pytest.approx((float(r.estimate), float(r.p_adjusted)))
        if row.n_seeds >= I.MIN_SEEDS:  # an accuracy difference's interval fits in [-1, 1] unchanged here
            assert (row.lower, row.upper) == pytest.approx((float(r.lower), float(r.upper)))
        assert str(r.statement.values) in index.read_text()
    assert table.loc["parity-lstm-beats-transformer", "verdict"] == "supported"


# ---------------------------------------------------------------------- summary and paper comparison
def test_the_report_opens_with_the_findings(full_report):
    folder, index = full_report
    html = index.read_text()
    main = html[html.index("<main>"):]
    assert main.index('<section class="summary">') < main.index('id="claims"')
    summary = main[: main.index('<section class="claims">')]
    for table in ("summary_claims", "paper_comparison", "behaviour_accuracy"):
        assert f'id="table-{table}"' in summary and html.count(f'id="table-{table}"') == 1, table
    assert summary.count("<img ") == 1 and "Probe accuracy across layers" in summary  # the probe grid
    assert "too few seeds" in summary and "Seeds per model (task x architecture x variant): 2 to 3" in summary
    assert html.index('<section class="provenance appendix">') > html.index('id="interventions"')
    assert "<details><summary>Experiment configuration as run" in html  # collapsed, in the appendix
    claims = _csv(folder, "summary_claims")
    assert list(claims.columns[:4]) == ["claim", "statement", "kind", "verdict"]
    assert set(claims.claim) == {"parity-lstm-beats-transformer", "dyck-equal"}


def test_paper_values_sit_beside_ours_with_whether_they_fall_inside(full_report):
    folder, index = full_report
    cmp = _csv(folder, "paper_comparison")
    assert len(cmp) == len(REFERENCES)
    claims = _csv(folder, "claims").set_index("claim")
    acc = _csv(folder, "behaviour_accuracy").query("task == 'parity' and arch == 'lstm' and length == @LENGTH").iloc[0]
    probe = _csv(folder, "probe_profiles").query(
        "task == 'parity' and arch == 'lstm' and layer == 'L2' and length == @LENGTH").iloc[0]
    ours = [claims.loc["parity-lstm-beats-transformer"]] * 2 + [acc, probe]
    for i, row in enumerate(ours):
        ref = cmp.iloc[i]
        assert (ref.estimate, ref.lower, ref.upper) == pytest.approx((row.estimate, row.lower, row.upper))
        inside = row.lower <= ref.paper <= row.upper
        assert ref.inside == float(inside)
        assert ref.verdict.startswith("yes" if inside else "no:")
    assert cmp.loc[0, "paper"] == pytest.approx(0.17) and cmp.loc[1, "verdict"] == "no: below our interval"
    # dyck: 2 seeds; a claim's interval is the one its test used, shown from 2 seeds too
    assert cmp.loc[4, "verdict"].startswith(("yes", "no:"))
    assert cmp.loc[5, "verdict"].startswith("not compared: no claim 'no-such-claim'")
    html = index.read_text()
    assert "+17.00 pp" in html and "-50.00 pp" in html and "Paper A (2026), Table 1" in html


def test_references_come_from_the_store_when_no_experiment_is_given(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"), title="refs")
    rng = np.random.default_rng(5)
    for seed in (0, 1, 2):
        _write_run(st, "parity", "lstm", seed, rng, lengths=(LENGTH,))
    ref = {"source": "Paper B", "metric": "accuracy", "task": "parity", "arch": "lstm", "value": 0.5}
    st.root.attrs["experiment"] = {"experiment": {"name": "x"}, "reference": [ref]}
    st.consolidate()
    build_report(st, tmp_path / "r", check_chunks=False)
    cmp = _csv(tmp_path / "r", "paper_comparison")
    assert cmp.loc[0, "verdict"] == "no: below our interval" and cmp.loc[0, "n_seeds"] == 3
    build_report(st, tmp_path / "r2", check_chunks=False, experiment={"experiment": {"name": "x"}})
    assert not (tmp_path / "r2" / "tables" / "paper_comparison.csv").exists()  # the one given wins


# ---------------------------------------------------------------------- missing results
def test_missing_sections_name_the_command_that_produces_them(bare_store, tmp_path):
    index = build_report(bare_store, tmp_path / "r", check_chunks=False)
    html = index.read_text()
    meta = json.loads((tmp_path / "r" / "report.json").read_text())
    status = {s["key"]: s["status"] for s in meta["sections"]}
    assert status["behaviour"] == "ok" and status["provenance"] == "ok" and status["summary"] == "ok"
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
    assert [s["status"] for s in meta["sections"]] == ["ok", "missing", "missing", "missing", "missing", "ok"]
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


def test_a_failing_section_shows_its_error_in_the_summary_too(bare_store, monkeypatch):
    from reports import readout
    from reports.build import collect_sections
    from reports.snapshot import take_snapshot

    def broken(snap):
        raise RuntimeError("probe results unreadable")

    monkeypatch.setattr(readout, "probes", broken)
    with pytest.warns(UserWarning, match="Probe profiles"):
        built = collect_sections(take_snapshot(bare_store), check_chunks=False)
    assert [s.key for s in built] == SECTIONS and built[3].status == "error"
    parts = {p.key: p for p in built[0].parts}
    assert parts["summary-probes"].error == "the probe-profile section failed: RuntimeError: probe results unreadable"
    assert parts["summary-behaviour"].status == "ok" and parts["summary-claims"].status == "missing"


# ---------------------------------------------------------------------- claims: outcomes, cross-check, variance
CLAIM_COLUMNS = ["verdict", "outcome", "reason", "model", "power", "power_at", "crosscheck_model",
                 "crosscheck_estimate", "crosscheck_lower", "crosscheck_upper", "crosscheck_interval_note",
                 "crosscheck_p", "crosscheck_verdict", "disagreement", "sd_seed", "sd_model", "sd_sequence",
                 "dropped", "variance"]


def _page_table(index, name) -> str:
    html = index.read_text()
    start = html.index(f'<table id="table-{name}"')
    return html[start: html.index("</table>", start)]


def test_claims_csv_carries_every_column_of_the_result(full_store, full_report):
    folder, _ = full_report
    table = _csv(folder, "claims").set_index("claim")
    res = full_store.read_result("claims")
    assert set(CLAIM_COLUMNS) <= set(table.columns)
    for cid in res.claim.values:
        r, row = res.sel(claim=cid), table.loc[str(cid)]
        assert row.reason == str(r.reason.values) and row.crosscheck_verdict == str(r.crosscheck_verdict.values)
        assert (row.crosscheck_p, row.sd_sequence, row.power_at) == pytest.approx(
            (float(r.crosscheck_p), float(r.sd_sequence), float(r.power_at)))
        assert bool(row.disagreement) == bool(r.disagreement)


def test_claims_section_shows_the_tests_crosscheck_power_at_and_variance_components(full_store, full_report):
    folder, index = full_report
    page = _page_table(index, "claims")
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", page)
    # statement, estimate and reason are the Summary's table (section 1.1): shown once, not twice
    assert heads[:4] == ["claim", "verdict", "model", "test"]
    assert not {"statement", "reason", "estimate [95% CI]"} & set(heads)
    html = index.read_text()
    html = html[: html.index('<section class="provenance appendix">')]  # the appendix quotes the experiment
    res = full_store.read_result("claims")
    for cid in map(str, res.claim.values):
        assert html.count(str(res.sel(claim=cid).reason.values)) == 1
        assert html.count(str(res.sel(claim=cid).statement.values)) == 1
        # the claims section's row links to the claim's row in the Summary
        assert f'<a href="#claim-{cid}">{cid}</a>' in page and html.count(f'<tr id="claim-{cid}">') == 1
    assert {"power at effect", "cross-check", "cross-check [95% CI]", "cross-check p", "cross-check verdict",
            "SD seed", "SD model", "SD sequence"} <= set(heads)
    assert "dropped" not in heads and "variance" not in heads  # empty for every claim here
    text = re.sub(r"<[^>]+>", "", page)
    assert "0.42 at +0.05" in text or re.search(r"\d\.\d\d at \+0\.05", text)  # power at the margin
    assert "mixedlm" in text
    # the cross-check's interval went through the same rules: dyck has 2 seeds, and a claim's
    # intervals are those its tests used, shown from 2 seeds with words saying so
    claims = _csv(folder, "claims").set_index("claim")
    assert claims.loc["dyck-equal", "crosscheck_interval_note"] != I.TOO_FEW
    assert np.isfinite(claims.loc["dyck-equal", "crosscheck_lower"])
    assert "[too few seeds" not in text
    assert "from 2 seeds" in re.sub(r"<[^>]+>", "", _page_table(index, "summary_claims"))
    notes = json.loads((folder / "report.json").read_text())
    claims_notes = next(s for s in notes["sections"] if s["key"] == "claims")["notes"]
    assert any("more seeds" in n and "sequences" in n for n in claims_notes)


def test_summary_claims_stay_compact_verdict_estimate_reason(full_store, full_report):
    folder, index = full_report
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", _page_table(index, "summary_claims"))
    assert heads == ["claim", "statement", "verdict", "estimate [95% CI]", "reason"]
    text = re.sub(r"<[^>]+>", "", _page_table(index, "summary_claims"))
    reason = str(full_store.read_result("claims").sel(claim="parity-lstm-beats-transformer").reason.values)
    assert reason in text
    assert "reason" in _csv(folder, "summary_claims").columns


def _claims_row(**over) -> dict:
    row = {"claim": "c", "statement": "s", "kind": "difference", "verdict": "supported", "outcome": "effect",
           "reason": "above zero (Holm p = 0.010) and not within ±0.05 (95% interval [+0.060, +0.258])",
           "estimate": 0.16, "lower": 0.06, "upper": 0.26, "n_seeds": 5.0, "model": "paired_t", "test": "t",
           "p": 0.01, "p_adjusted": 0.01, "power": 0.8, "power_at": 0.05, "mde": 0.09, "margin": 0.05,
           "crosscheck_model": "mixedlm", "crosscheck_estimate": 0.15, "crosscheck_lower": -0.01,
           "crosscheck_upper": 0.31, "crosscheck_p": 0.07, "crosscheck_verdict": "inconclusive",
           "disagreement": True, "sd_seed": 0.02, "sd_model": 0.01, "sd_sequence": 0.1, "dropped": "",
           "variance": ""}
    return row | over


def test_a_disagreeing_crosscheck_is_flagged_and_glmm_text_and_drops_are_shown():
    import xarray as xr

    from reports import render
    from reports.claims import DISAGREES, claims_display, claims_frame
    from reports.model import Section, Table

    rows = [_claims_row(),
            _claims_row(claim="g", verdict="negligible", outcome="negligible", disagreement=False,
                        crosscheck_model="glmm", crosscheck_lower=np.nan, crosscheck_upper=np.nan,
                        crosscheck_p=np.nan, crosscheck_verdict="", dropped="paired_t dropped seed 3",
                        variance="GLMM (logit scale): seed SD 0.100"),
            _claims_row(claim="e", verdict="equivalent", outcome="equivalent", disagreement=False,
                        crosscheck_verdict="equivalent", n_seeds=2.0, lower=-0.9, upper=0.9,
                        reason="inside ±0.05 (95% interval [-0.900, +0.900])")]
    frame = pd.DataFrame(rows)
    ds = xr.Dataset({k: ("claim", frame[k].to_numpy()) for k in frame if k != "claim"},
                    coords={"claim": frame["claim"].to_numpy()})
    full = claims_frame(ds, {"c": "accuracy", "g": "accuracy", "e": "accuracy"})
    shown = claims_display(full).set_index("claim")
    assert shown.loc["c", "cross-check verdict"] == f"{DISAGREES}: inconclusive"
    assert shown.loc["g", "cross-check verdict"] == "–" and "estimate only" in shown.loc["g", "cross-check [95% CI]"]
    assert shown.loc["g", "dropped"] == "paired_t dropped seed 3" and shown.loc["c", "dropped"] == "–"
    assert shown.loc["g", "variance"].startswith("GLMM")
    assert shown.loc["c", "power at effect"] == "0.80 at +0.05"
    # one interval rule: the claim's interval is the one its test used, shown as the CLI shows it,
    # with words saying what 2 seeds make of it (never two seeds' values called an interval)
    e = shown.loc["e", "estimate [95% CI]"]
    assert "[-0.900, +0.900]" in e and "from 2 seeds" in e and "too few seeds" not in e
    assert "[-0.900, +0.900]" in shown.loc["e", "reason"]
    sec = Section("claims", "Claims", tables=[Table("claims", "t", full, claims_display(full))])
    html = render._environment().get_template("report.html.j2").render(
        title="t", meta={"built": "now"}, info={"location": "x", "schema": "s", "tool_version": "v"},
        all_stages="run", sections=[render.section_view(sec, "2")])
    assert html.count('class="flag">⚠ disagrees') == 1
    assert 'class="v-negligible"' in html and 'class="v-equivalent"' in html
