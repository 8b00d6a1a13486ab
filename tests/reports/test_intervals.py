"""Interval rules (range, too few seeds, uninformative) and the paper comparison, on small frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.stats.resample import t_interval_np
from reports import intervals as I
from reports import references as R


def _t(values):
    est, lo, hi = t_interval_np(np.asarray(values, dtype=float), 0.95)
    return float(est), float(lo), float(hi)


# ---------------------------------------------------------------------- rules
def test_an_interval_past_the_metric_range_is_clipped_and_says_so():
    est, lo, hi = _t([0.90, 0.99, 0.97, 0.999])
    assert hi > 1  # a t interval of an accuracy near 1 reaches past it
    frame = pd.DataFrame({"estimate": [est], "lower": [lo], "upper": [hi], "n_seeds": [4]})
    out = I.apply_rules(frame, *I.RANGES["accuracy"])
    assert out.loc[0, "lower"] == pytest.approx(lo) and out.loc[0, "upper"] == 1.0
    assert out.loc[0, "interval_note"] == I.CLIPPED
    assert np.isnan(out.loc[0, "seed_a"])
    assert frame.loc[0, "upper"] == hi  # the input is not changed


def test_two_seeds_give_no_interval_but_their_own_values():
    seeds = [0.12, 0.27]
    est, lo, hi = _t(seeds)
    assert lo < -1 or hi > 1 or hi - lo > 1.5  # what the issue saw: a t interval from 2 seeds is huge
    frame = pd.DataFrame({"estimate": [est], "lower": [lo], "upper": [hi], "n_seeds": [2]})
    out = I.apply_rules(frame, *I.RANGES["drop"])
    assert np.isnan(out.loc[0, "lower"]) and np.isnan(out.loc[0, "upper"])
    assert out.loc[0, "interval_note"] == I.TOO_FEW
    assert (out.loc[0, "seed_a"], out.loc[0, "seed_b"]) == pytest.approx(seeds, abs=1e-12)
    text = I.texts(out, signed=True)[0]
    assert text == "+0.195 [too few seeds: +0.120, +0.270]"


def test_two_seeds_of_a_bootstrap_interval_say_too_few_without_values():
    frame = pd.DataFrame({"estimate": [0.5], "lower": [0.4], "upper": [0.6], "n_seeds": [2]})
    out = I.apply_rules(frame, 0.0, 1.0, t_based=False)
    assert out.loc[0, "interval_note"] == I.TOO_FEW and np.isnan(out.loc[0, "seed_a"])
    assert I.texts(out)[0] == "0.500 [too few seeds]"


def test_an_interval_as_wide_as_the_range_is_not_shown():
    frame = pd.DataFrame({"estimate": [0.522], "lower": [-0.892], "upper": [1.936], "n_seeds": [3]})
    out = I.apply_rules(frame, *I.auc_range(0.5))
    assert np.isnan(out.loc[0, "lower"]) and out.loc[0, "interval_note"] == I.TOO_WIDE
    assert I.texts(out)[0] == "0.522 [interval spans the whole range]"


def test_unbounded_metrics_are_never_clipped_and_one_seed_keeps_its_interval():
    frame = pd.DataFrame({"estimate": [1.1, 0.98], "lower": [-0.2, 0.95], "upper": [1.4, 1.01],
                          "n_seeds": [5, 1]})
    rec = I.apply_rules(frame.iloc[[0]], *I.RANGES["recovery"])
    assert (rec.loc[0, "lower"], rec.loc[0, "upper"], rec.loc[0, "interval_note"]) == (-0.2, 1.4, "")
    one = I.apply_rules(frame.iloc[[1]].reset_index(drop=True), *I.RANGES["accuracy"])
    assert (one.loc[0, "lower"], one.loc[0, "upper"]) == (0.95, 1.0)  # sequences only, but shown


def test_per_row_ranges_and_missing_intervals():
    frame = pd.DataFrame({"estimate": [0.3, 0.3, np.nan], "lower": [-0.3, np.nan, np.nan],
                          "upper": [0.6, np.nan, np.nan], "n_seeds": [4, 4, 4]})
    low, high = I.auc_range(np.array([0.0, 0.5, 0.5]))
    out = I.apply_rules(frame, low, high)
    assert out.loc[0, "lower"] == 0.0 and out.loc[0, "interval_note"] == I.CLIPPED  # chance 0: AUC >= 0
    assert list(out["interval_note"][1:]) == ["", ""]
    assert I.texts(out) == ["0.300 [0.000, 0.600]", "0.300 [no interval]", "–"]
    assert I.auc_range(0.5) == (-1.0, 1.0)


def test_outside_range_finds_offending_rows():
    frame = pd.DataFrame({"lower": [0.0, -0.1, np.nan], "upper": [1.0, 0.5, np.nan]})
    assert list(I.outside_range(frame, 0, 1).index) == [1]


# ---------------------------------------------------------------------- paper comparison
@pytest.fixture
def frames():
    claims = pd.DataFrame({
        "claim": ["conv1d-s3", "conv1d-dyck", "shape[lstm]", "shape[mamba]"],
        "kind": ["difference", "equivalence", "profile_match", "profile_match"],
        "estimate": [-0.10, 0.01, 0.2, 0.3], "lower": [-0.15, np.nan, 0.1, 0.2], "upper": [-0.05, np.nan, 0.3, 0.4],
        "n_seeds": [5, 2, 5, 5], "interval_note": ["", I.TOO_FEW, "", ""],
        "seed_a": [np.nan, 0.0, np.nan, np.nan], "seed_b": [np.nan, 0.02, np.nan, np.nan],
    })
    behaviour = pd.DataFrame({
        "task": ["parity", "parity"], "arch": ["lstm", "lstm"], "variant": ["default", "default"],
        "length": [40, 120], "estimate": [0.99, 0.95], "lower": [0.98, 0.90], "upper": [1.0, 0.99],
        "n_seeds": [3, 3], "interval_note": ["", ""], "seed_a": [np.nan] * 2, "seed_b": [np.nan] * 2,
    })
    probes = pd.DataFrame({
        "task": ["dyck (depth)", "dyck (top)"], "target": ["depth", "top"], "arch": ["transformer"] * 2,
        "variant": ["default"] * 2, "length": [40, 40], "fit_length": [40, 40], "layer": ["L1", "L1"],
        "estimate": [0.95, 0.6], "lower": [0.93, 0.5], "upper": [0.97, 0.7], "n_seeds": [3, 3],
        "interval_note": ["", ""], "seed_a": [np.nan] * 2, "seed_b": [np.nan] * 2,
    })
    return {"claims": claims, "behaviour": behaviour, "probes": probes}


def test_paper_values_are_placed_beside_ours_with_a_verdict(frames):
    refs = [
        {"source": "Jiang 2026", "metric": "claim", "claim": "conv1d-s3", "value": -12.64, "unit": "pp"},
        {"source": "Jiang 2026", "metric": "claim", "claim": "conv1d-s3", "value": -2.0, "unit": "pp"},
        {"source": "Jiang 2026", "metric": "claim", "claim": "conv1d-dyck", "value": 4.04, "unit": "pp"},
        {"source": "X", "metric": "accuracy", "task": "parity", "arch": "lstm", "length": 120, "value": 0.85},
        {"source": "X", "metric": "probe_accuracy", "task": "dyck", "arch": "transformer", "layer": "L1",
         "target": "depth", "value": 96, "unit": "percent"},
        {"source": "X", "claim": "shape", "arch": "mamba", "value": 0.25},  # metric defaults to claim
    ]
    out = R.comparison(refs, **frames)
    assert list(out["paper"]) == pytest.approx([-0.1264, -0.02, 0.0404, 0.85, 0.96, 0.25])
    assert list(out["inside"][:2]) == [1.0, 0.0] and np.isnan(out["inside"][2])
    assert list(out["verdict"]) == [
        "yes: inside our interval", "no: above our interval", "cannot tell: too few seeds for an interval",
        "no: below our interval", "yes: inside our interval", "yes: inside our interval"]
    assert out.loc[3, "estimate"] == 0.95 and out.loc[4, "estimate"] == 0.95
    shown = R.display(out)
    assert shown.loc[0, "paper"] == "-12.64 pp" and shown.loc[0, "ours [95% CI]"] == "-10.00 [-15.00, -5.00] pp"
    assert shown.loc[2, "ours [95% CI]"] == "+1.00 [too few seeds: +0.00, +2.00] pp"
    assert shown.loc[4, "ours [95% CI]"] == "95.00 [93.00, 97.00]%"


def test_references_that_cannot_be_compared_say_why(frames):
    refs = [
        {"source": "X", "metric": "accuracy", "task": "parity", "arch": "lstm", "value": 0.9},  # two lengths
        {"source": "X", "metric": "claim", "claim": "shape", "value": 0.2},  # one row per arch
        {"source": "X", "metric": "claim", "claim": "nope", "value": 0.2},
        {"source": "X", "metric": "auc", "value": 0.2},
        {"source": "X", "metric": "accuracy", "task": "parity", "arch": "lstm", "length": 40, "value": "high"},
        {"metric": "claim", "claim": "conv1d-s3", "value": 0.1},
        {"source": "X", "metric": "claim", "claim": "conv1d-s3", "value": 1, "unit": "permille"},
        {"source": "X", "metric": "probe_accuracy", "task": "dyck", "arch": "transformer", "value": 0.9},
        "not a table",
    ]
    out = R.comparison(refs, **frames)
    why = list(out["verdict"])
    assert all(v.startswith("not compared: ") for v in why)
    for v, part in zip(why, ["lengths 40, 120; add length", "one row per architecture; add arch",
                             "no claim 'nope'", "metric must be one of claim, accuracy, probe_accuracy",
                             "value must be a number", "source is required", "unit must be one of",
                             "needs layer", "must be a table"], strict=True):
        assert part in v, (v, part)
    assert out["inside"].isna().all()
    assert len(R.display(out)) == len(refs)
    assert R.comparison(refs[:1], claims=None)["verdict"][0] == (
        "not compared: no behaviour results (captured logits) in this store")


def test_references_are_read_from_the_experiment_dict():
    ref = {"source": "s", "metric": "claim", "claim": "c", "value": 1.0}
    assert R.declared({"reference": [ref]}) == [ref]
    assert R.declared({"references": [ref]}) == [ref]
    assert R.declared({"experiment": {"name": "x"}}) == [] and R.declared(None) == []


def test_a_reference_dumped_with_every_field_reads_like_the_table(frames):
    """``Experiment.model_dump(mode="json")`` writes unset fields as None and defaults in full."""
    blank = {k: None for k in ("claim", "task", "arch", "length", "layer", "target", "note", "unit")}
    refs = [
        {**blank, "source": "Jiang 2026", "metric": "claim", "claim": "conv1d-s3", "variant": "default",
         "value": -12.64, "unit": "pp"},
        {**blank, "source": "X", "metric": "accuracy", "task": "parity", "arch": "lstm", "variant": "default",
         "length": 40, "value": 0.99},
    ]
    out = R.comparison(refs, **frames)
    assert list(out["verdict"]) == ["yes: inside our interval", "yes: inside our interval"]
    assert list(out["condition"]) == ["claim conv1d-s3", "task parity, arch lstm, variant default, length 40"]
    assert list(out["unit"]) == ["pp", "fraction"] and list(out["note"]) == ["", ""]


def test_claims_get_their_metric_range_and_a_crosscheck_interval_too():
    import xarray as xr

    from reports.claims import claim_metrics, claims_frame

    ds = xr.Dataset(
        {"statement": ("claim", ["a", "b", "c", "d"]),
         "kind": ("claim", ["difference", "difference", "readable_by", "difference"]),
         "test": ("claim", ["t"] * 4), "verdict": ("claim", ["supported"] * 4),
         "estimate": ("claim", [0.9, 0.9, 0.95, 0.9]), "lower": ("claim", [0.7, 0.7, 0.9, 0.7]),
         "upper": ("claim", [1.1, 1.1, 1.02, 1.1]), "n_seeds": ("claim", [5.0, 5.0, 5.0, 5.0]),
         "crosscheck_estimate": ("claim", [0.9] * 4), "crosscheck_lower": ("claim", [0.6] * 4),
         "crosscheck_upper": ("claim", [1.2] * 4)},
        coords={"claim": ["acc", "rest", "read", "unknown"]})
    experiment = {"claims": [{"id": "acc"}, {"id": "rest", "metric": "restoration"}, {"id": "read"}]}
    assert claim_metrics(experiment) == {"acc": "accuracy", "rest": "restoration", "read": "accuracy"}
    frame = claims_frame(ds, claim_metrics(experiment)).set_index("claim")
    assert frame.loc["acc", "upper"] == 1.0 and frame.loc["acc", "interval_note"] == I.CLIPPED
    assert frame.loc["rest", "upper"] == 1.1  # a restoration difference may exceed 1
    assert frame.loc["read", "upper"] == 1.0  # probe accuracy
    assert frame.loc["unknown", "upper"] == 1.1  # metric unknown (no experiment): not clipped
    assert frame.loc["acc", "crosscheck_upper"] == 1.0 and frame.loc["rest", "crosscheck_upper"] == 1.2


def test_a_report_without_the_experiment_reads_each_claims_metric_from_the_store(tmp_path):
    """`layerstate report STORE` has no experiment file: the stored claims carry their metric,
    so an accuracy bound's interval is still kept inside [0, 1]."""
    import xarray as xr

    from reports.claims import claim_metrics, claims_frame

    ds = xr.Dataset(
        {"statement": ("claim", ["a", "b"]), "kind": ("claim", ["bound", "difference"]),
         "metric": ("claim", ["accuracy", "restoration"]),
         "test": ("claim", ["t"] * 2), "verdict": ("claim", ["inconclusive"] * 2),
         "estimate": ("claim", [0.2, 0.9]), "lower": ("claim", [-0.09, 0.7]),
         "upper": ("claim", [0.49, 1.1]), "n_seeds": ("claim", [3.0, 3.0])},
        coords={"claim": ["h3-fails", "rest"]})
    assert claim_metrics(None, ds) == {"h3-fails": "accuracy", "rest": "restoration"}
    frame = claims_frame(ds, claim_metrics(None, ds)).set_index("claim")
    assert frame.loc["h3-fails", "lower"] == 0.0 and frame.loc["h3-fails", "interval_note"] == I.CLIPPED
    assert frame.loc["rest", "upper"] == 1.1
