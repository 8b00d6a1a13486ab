"""What a receiver of a store found reading its report (issue 54, items 7 and 8): the probe
result the claims read is the one shown and named; a profile without a band says why; missing
interventions are one short line; the claims section says what its mixed model really does;
an imported store without logits is told how to bring them, not to run a capture."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reports import build_report
from reports.intervals import TOO_FEW, TOO_WIDE
from reports.snapshot import take_snapshot
from store import Store

from ._data import LENGTH, build_store

# ---------------------------------------------------------------------- the probe result the claims read
READS_DYCK_2 = {"id": "dyck-readable", "statement": "Dyck's state is readable at L2 of the LSTM",
                "kind": "readable_by", "metric": "probe_accuracy", "task": "dyck", "arch": "lstm",
                "layer": "L2", "threshold": 0.6, "length": LENGTH, "result": "dyck-2"}


@pytest.fixture(scope="module")
def two_probe_results(tmp_path_factory) -> Store:
    """Dyck with two probe results: ``probes/dyck`` (named after the task, the default pick) and
    ``probes/dyck-2`` (made later with other settings), which the stored claim reads."""
    from analysis.claims import evaluate_stored_claims, parse_claims
    from analysis.probes import probe

    st = build_store(tmp_path_factory.mktemp("probes") / "s.zarr", probes=False, interventions=False,
                     claims=False, tasks=("dyck",))
    probe(st, "state", positions="pooled", folds=2, method="screen", scheduler="sync", save=True,
          train_length=LENGTH, name="probes/dyck")
    probe(st, "state", positions="pooled", folds=3, method="screen", scheduler="sync", save=True,
          train_length=LENGTH, name="probes/dyck-2")
    evaluate_stored_claims(st, parse_claims([READS_DYCK_2]))
    return st


def test_the_probe_figure_shows_and_names_the_result_the_claims_read(two_probe_results, tmp_path):
    from reports import readout

    st = two_probe_results
    assert str(st.read_result("claims")["result"].values[0]) == "probes/dyck-2"  # what the claim read
    sec = readout.probes(take_snapshot(st))
    fig = next(f for f in sec.figures if f.name == "probe_profiles")
    assert "Results: dyck: probes/dyck-2, the result claim dyck-readable reads." in fig.caption
    assert "probes/dyck," not in fig.caption  # the other result is not the one shown
    assert fig.figure.axes[0].get_title() == "dyck · probes/dyck-2"  # the panel names it too
    table = next(t for t in sec.tables if t.name == "probe_profiles")
    assert set(table.data["result"]) == {"probes/dyck-2"} and "results dyck: probes/dyck-2" in table.caption
    assert any(n.startswith("Task dyck: shows probes/dyck-2 (") and "the result claim dyck-readable reads" in n
               and "also stored: probes/dyck (" in n for n in sec.notes)
    # asked for the other one, the page says which claim reads a result it does not show
    other = readout.probes(take_snapshot(st), ["dyck"])
    caption = next(f for f in other.figures if f.name == "probe_profiles").caption
    assert "Results: dyck: probes/dyck." in caption
    assert "Claim dyck-readable reads probes/dyck-2, not shown here (`layerstate report STORE --result " \
           "probes/dyck-2` shows it)." in caption
    # the built page: summary figure and probe table read the same name as the claims
    index = build_report(st, tmp_path / "r", check_chunks=False)
    assert "Results: dyck: probes/dyck-2, the result claim dyck-readable reads." in index.read_text()


# ---------------------------------------------------------------------- a profile without its band
def _profile_rows(task, arch, n, lower, upper, note=""):
    return pd.DataFrame({"task": task, "arch": arch, "variant": "default", "layer": ["L0", "L1"],
                         "estimate": [0.6, 0.8], "lower": lower, "upper": upper, "n_seeds": n,
                         "interval_note": note})


def test_a_profile_without_a_band_says_why():
    from reports.readout import band_text

    banded = _profile_rows("parity", "lstm", 3, [0.5, 0.7], [0.7, 0.9])
    assert band_text(banded) == ""
    frame = pd.concat([
        banded,
        _profile_rows("dyck", "lstm", 2, [np.nan] * 2, [np.nan] * 2, TOO_FEW),
        _profile_rows("dyck", "gru", 2, [np.nan] * 2, [np.nan] * 2, TOO_FEW),
        _profile_rows("s3", "lstm", 1, [np.nan] * 2, [np.nan] * 2),
        _profile_rows("s3", "gru", 3, [np.nan] * 2, [np.nan] * 2),
        _profile_rows("s5", "gru", 3, [np.nan] * 2, [np.nan] * 2, TOO_WIDE),
        _profile_rows("s5", "lstm", 3, [1.0, 1.0], [1.0, 1.0]),
    ], ignore_index=True)
    text = band_text(frame)
    assert text.startswith(" No band: ")
    assert "dyck/gru, dyck/lstm: 2 seeds, too few for an interval" in text
    assert "s3/lstm: 1 seed, and the stored result has no per-sequence counts" in text
    assert "s3/gru: 3 seeds, but the stored result holds no interval for it (no per-seed values" in text
    assert "s5/gru: its interval spans the whole range" in text
    assert "s5/lstm: its interval has no visible width" in text
    assert "parity" not in text


def test_the_full_report_says_why_dyck_has_no_band(full_report):
    import html

    _, index = full_report
    assert ("No band: dyck/lstm, dyck/transformer: 2 seeds, too few for an interval (each seed's value is a "
            "vertical line).") in html.unescape(index.read_text())


# ---------------------------------------------------------------------- interventions: one short line
def test_missing_interventions_are_one_line_naming_each_command(bare_store):
    from reports.interventions import interventions

    sec = interventions(take_snapshot(bare_store))
    assert sec.status == "missing" and sec.parts == [] and sec.command is None
    assert sec.missing.startswith("No intervention results in this store (ablation: `layerstate ablate STORE`; "
                                  "patching: `layerstate patch STORE`; interchange: `layerstate patch STORE "
                                  "--interchange`).")
    assert "no run of this store holds its weights" in sec.missing  # the bare store keeps no weights


def test_some_missing_interventions_are_a_note_beside_the_others(tmp_path):
    from reports.interventions import interventions

    from ._data import synthetic_ablation

    st = build_store(tmp_path / "s.zarr", probes=False, interventions=False, claims=False, tasks=("parity",),
                     seeds=(0, 1, 2))
    st.write_result("ablation/default", synthetic_ablation(st.run_ids(), np.random.default_rng(0)))
    sec = interventions(take_snapshot(st))
    assert sec.status == "ok" and sec.missing is None
    assert len(sec.parts) == 1
    assert not any(p.missing for p in sec.parts)
    assert [n for n in sec.notes if n.startswith("No ")] == [
        "No patching or interchange results in this store (patching: `layerstate patch STORE`; interchange: "
        "`layerstate patch STORE --interchange`). They rerun the trained models, and no run of this store holds "
        "its weights (imported activations, or weights left behind): they can be computed only where the "
        "models are."]


# ---------------------------------------------------------------------- what the claim models do
def test_the_claims_text_says_what_the_mixed_model_does(full_report):
    from analysis.stats.contrasts import contrast_np
    from reports.claims import CLAIMS_INTRO

    assert "Satterthwaite" not in CLAIMS_INTRO
    assert "cluster-robust (CR2) standard error, seeds as clusters, and Bell-McCaffrey degrees" in CLAIMS_INTRO
    assert "the mixed model's test is exactly the paired t" in CLAIMS_INTRO
    _, index = full_report
    assert "Bell-McCaffrey" in index.read_text() and "Satterthwaite" not in index.read_text()
    # what the sentence says, held against the claims' own mixed model: with every seed scored on
    # as many sequences its test (SE and degrees of freedom) is the paired t's, not a Satterthwaite df
    rng = np.random.default_rng(4)
    labelled = np.full((2, 5, 40), 10.0)
    correct = rng.binomial(10, np.array([0.7, 0.75])[:, None, None] + rng.normal(0, 0.05, (2, 5, 1)).clip(-0.2, 0.2),
                           size=(2, 5, 40)).astype(float)
    mixed, paired = contrast_np("mixedlm", correct, labelled), contrast_np("paired_t", correct, labelled)
    assert float(mixed["df"]) == pytest.approx(4.0) and float(paired["df"]) == pytest.approx(4.0)
    assert float(mixed["se"]) == pytest.approx(float(paired["se"]), rel=1e-6)


# ---------------------------------------------------------------------- an imported store
def test_an_imported_store_without_logits_is_told_to_bring_them_with_the_import(tmp_path):
    from capture.importers import import_npy

    rng = np.random.default_rng(1)
    src = tmp_path / "acts"
    src.mkdir()
    for layer in ("embed", "L0", "L1"):
        np.save(src / f"{layer}.npy", rng.standard_normal((8, 6, 4)).astype("float32"))
    import_npy(str(tmp_path / "s.zarr"), "gpt-s0", src, labels={"depth": rng.integers(0, 3, (8, 6))},
               task="dyck", arch="gpt2")
    st = Store.open(str(tmp_path / "s.zarr"))
    assert "experiment" not in st.attrs
    index = build_report(st, tmp_path / "r", check_chunks=False)
    html = index.read_text()
    behaviour = html[html.index('<section class="behaviour">'):html.index('<section class="probes">')]
    assert "layerstate capture" not in behaviour
    assert "the runs were imported without them" in behaviour and "docs/guide/importers.md" in behaviour
    assert "`logits` array" in behaviour


def test_a_trained_store_without_logits_is_still_told_to_capture(bare_store, tmp_path):
    from reports.behaviour import behaviour, imported_run

    snap = take_snapshot(bare_store)
    assert not any(imported_run(snap, r) for r in snap.runs)
    snap.with_logits = {r: [] for r in snap.runs}  # as if no capture had stored logits
    sec = behaviour(snap)
    assert sec.status == "missing" and sec.command == "layerstate capture EXPERIMENT.toml --store STORE"
