"""Known answers for the verdict rules: planted stores and rows where the right verdict is
known, one test per defect the statistical audit found (each failed on the old rules)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import example, given, settings
from hypothesis import strategies as st

from analysis.claims import evaluate_claims, parse_claims
from analysis.claims.evaluate import verdict_table
from analysis.claims.spec import Claim, make_claim
from analysis.claims.verdicts import adjust, claim_tests, decide
from store import Store
from tests.analysis.claims.test_claims import _write_run


def weakens(small: str, small_outcome: str, big: str) -> bool:
    """Whether a verdict ``big`` in a larger family is the verdict ``small`` of a smaller one or
    a weaker one (docs/decisions.md, "Verdicts and outcomes"). Every verdict reports the tests
    that passed at its family's correction, and a larger family can only make fewer of them
    pass, never a new one. So ``big`` may be ``small``; ``inconclusive`` (nothing shown); or
    ``equivalent`` (the interval inside the margin) where ``small`` rested on more than that and
    the smaller family had shown it too: a ``negligible`` verdict (different from zero and
    within), or a ``contradicted`` one whose interval also lay inside the margin (its outcome
    was already ``equivalent``): the reversal is no longer shown, the refutation by the margin
    still is."""
    if big in (small, "inconclusive"):
        return True
    return big == "equivalent" and small in ("negligible", "contradicted") and small_outcome in (
        "negligible", "equivalent")


def _no_nan(res: xr.Dataset) -> None:
    for col in ("reason", "test", "variance"):
        for text in np.atleast_1d(res[col].values):
            assert "nan" not in str(text).lower().replace("nan(", ""), (col, text)


# ------------------------------------------------------- 1. correction only weakens


@pytest.fixture(scope="module")
def s3_store(tmp_path_factory):
    """5 seeds x 400 sequences; removing the conv costs 3.6 pp on s3 (inside a 5 pp margin),
    nothing on dyck."""
    st_ = Store.create(str(tmp_path_factory.mktemp("defect1") / "s.zarr"))
    rng = np.random.default_rng(21)
    with st_.deferred_consolidation():
        for seed in range(5):
            offset = rng.normal(0, 0.003)
            for task, drop in (("s3", 0.036), ("dyck", 0.0)):
                _write_run(st_, f"{task}-d-{seed}", task, "default", seed, 0.85 + offset, rng, n=400, L=20)
                _write_run(st_, f"{task}-n-{seed}", task, "no_conv", seed, 0.85 + offset - drop, rng, n=400, L=20)
    return st_


def _conv(cid: str, task: str, **over) -> dict:
    return {"id": cid, "statement": f"Removing Conv1D lowers {task} accuracy", "kind": "difference", "task": task,
            "arch": "mamba", "treatment": "no_conv", "reference": "default", "length": 20, "margin": 0.05,
            "direction": "less", **over}


def test_more_claims_in_a_file_never_turn_a_negligible_effect_into_supported(s3_store):
    """The audit's reproduction: a true -3.6 pp effect, 5 seeds, margin 0.05. Alone the claim
    is negligible; with 19 unrelated claims the old rule read "not within" from the
    Holm-corrected TOST and called it supported ("not within ±0.05 (95% interval [-0.049,
    -0.033])", a sentence its own interval contradicts)."""
    alone = evaluate_claims(s3_store, parse_claims([_conv("s3", "s3")]))
    row = alone.sel(claim="s3")
    assert str(row.verdict.values) == "negligible"
    assert -0.05 < float(row.lower) and float(row.upper) < 0
    crowd = [_conv(f"dyck-{i}", "dyck", margin=0.002 + 0.0001 * i) for i in range(19)]  # TOSTs that fail
    many = evaluate_claims(s3_store, parse_claims([_conv("s3", "s3"), *crowd]))
    got = str(many.sel(claim="s3").verdict.values)
    assert got in ("negligible", "inconclusive"), many.sel(claim="s3").reason.values
    assert got != "supported"
    _no_nan(many)


def _row(est: float, se: float, df: float, claim: Claim) -> dict:
    return claim_tests(claim, est, se, df) | {"n_seeds": df + 1}


@settings(max_examples=60, deadline=None)
@given(est=st.floats(-0.2, 0.2), se=st.floats(0.002, 0.05), df=st.sampled_from([2.0, 4.0, 9.0]),
       extra=st.integers(1, 60), direction=st.sampled_from(["less", "greater", "two-sided"]),
       against=st.sampled_from(["zero", "margin"]), kind=st.sampled_from(["difference", "equivalence"]))
@example(est=-0.0117, se=0.0039, df=4.0, extra=1, direction="greater", against="zero", kind="difference")
def test_a_larger_family_only_ever_weakens_a_verdict(est, se, df, extra, direction, against, kind):
    if kind == "equivalence":
        direction, against = "two-sided", "zero"
    claim = make_claim(id="c", statement="s", kind=kind, task="t", treatment="a", reference="b", margin=0.05,
                  direction=direction, test_against=against)
    row = _row(est, se, df, claim)
    small, small_outcome, _ = decide(claim, row, adjust([claim], [row])[0])
    big = decide(claim, row, adjust([claim], [row], absent=(extra, extra, extra))[0])[0]
    assert weakens(small, small_outcome, big), (small, small_outcome, big)


def test_a_negligible_reversal_falls_back_from_contradicted_to_equivalent():
    """The case Hypothesis once drew at random (issue 52): "A > B" with margin 0.05 measured
    -0.0117 (SE 0.0039, 4 df), 95% interval [-0.023, -0.001]: below zero *and* inside the margin.
    Alone the opposite side's test passes (Holm p 0.040): contradicted, with outcome equivalent.
    With one more claim in each family it does not (0.080), the equivalence test still does:
    equivalent. Both refute the claim; the larger family no longer shows the reversal, and
    shows nothing the smaller one had not."""
    claim = make_claim(id="c", statement="s", kind="difference", task="t", treatment="a", reference="b", margin=0.05,
                  direction="greater")
    row = _row(-0.0117, 0.0039, 4.0, claim)
    alone = decide(claim, row, adjust([claim], [row])[0])
    crowd = decide(claim, row, adjust([claim], [row], absent=(1, 1, 1))[0])
    assert alone[:2] == ("contradicted", "equivalent")
    assert crowd[:2] == ("equivalent", "equivalent")
    assert "not contradicted" in crowd[2]
    assert weakens(alone[0], alone[1], crowd[0]) and not weakens("equivalent", "equivalent", "contradicted")
    assert not weakens("contradicted", "inconclusive", "equivalent")


# ------------------------------------------------------- 3. identical seeds


def _probe_store(tmp_path, n_seeds: int, n_seq: int = 512) -> tuple[Store, list[str]]:
    st_ = Store.create(str(tmp_path / "p.zarr"))
    rng = np.random.default_rng(0)
    runs = []
    for seed in range(n_seeds):
        rid = f"parity-lstm-s{seed}"
        st_.add_run(rid, task="parity", arch="lstm", variant="default", seed=seed)
        labels = rng.integers(0, 2, size=(n_seq, 4))
        st_.write_length(rid, 4, hidden=rng.standard_normal((n_seq, 4, 2, 4)).astype("float32"),
                         tokens=labels, labels={"parity": labels})
        runs.append(rid)
    return st_, runs


def test_identical_seeds_get_the_sequences_sampling_error_not_nan_or_zero(tmp_path):
    """Probe accuracy 1.000 at L2 and L3 in every seed: the old paired t divided 0 by 0 (p =
    nan, dropped from Holm); a claim that L3 rises by more than 0.2 is refuted by such data. A
    difference of exactly +0.001 in both of 2 seeds had p = 0 ("supported" from two seeds)."""
    st_, runs = _probe_store(tmp_path, 3)
    prof = np.ones((3, 1, 3))
    probes = xr.Dataset({"profile": (("run", "length", "layer"), prof)},
                        coords={"run": runs, "length": [4], "layer": ["L1", "L2", "L3"]})
    jump = {"id": "jump", "statement": "s", "kind": "difference", "metric": "probe_accuracy", "task": "parity",
            "arch": "lstm", "compare": "layer", "treatment": "L3", "reference": "L2", "direction": "greater",
            "margin": 0.2, "test_against": "margin", "length": 4}
    res = evaluate_claims(st_, parse_claims([jump]), probes=probes)
    row = res.sel(claim="jump")
    assert str(row.verdict.values) == "contradicted"
    assert np.isfinite(float(row.p)) and 0 < float(row.se) < 0.01
    assert "sampling" in str(row.variance.values)
    _no_nan(res)
    # a tiny difference identical in two seeds: a p, not 0, and not supported
    two, runs2 = _probe_store(tmp_path / "two", 2)
    prof2 = np.stack([[[0.999, 1.0]]] * 2)
    probes2 = xr.Dataset({"profile": (("run", "length", "layer"), prof2)},
                         coords={"run": runs2, "length": [4], "layer": ["L2", "L3"]})
    up = {**jump, "id": "up", "margin": None, "test_against": "zero"}
    res2 = evaluate_claims(two, parse_claims([up]), probes=probes2)
    assert 0.05 < float(res2.p.values[0]) < 1 and str(res2.verdict.values[0]) == "inconclusive"
    _no_nan(res2)


def _ablation_store(tmp_path, drops: list[float], n_seq: int = 200) -> Store:
    st_ = Store.create(str(tmp_path / "a.zarr"))
    runs = []
    for seed in range(len(drops)):
        rid = f"parity-lstm-s{seed}"
        st_.add_run(rid, task="parity", arch="lstm", variant="default", seed=seed)
        runs.append(rid)
    n = len(runs)
    clean = np.ones((n, 1))
    abl = clean - np.array(drops)[:, None]
    st_.write_result("ablation/parity", xr.Dataset(
        {"accuracy_clean": (("run", "length"), clean),
         "accuracy": (("run", "length", "layer", "setting"), abl[:, :, None, None]),
         "accuracy_drop": (("run", "length", "layer", "setting"), (clean - abl)[:, :, None, None]),
         "n_labelled": (("run", "length", "sequence"), np.full((n, 1, n_seq), 8))},
        coords={"run": runs, "length": [40], "layer": ["L3"], "setting": ["probe"]},
        attrs={"analysis": "ablation"}))
    return st_


def test_drops_of_exactly_zero_refute_a_claimed_drop(tmp_path):
    """The committed f5-lstm-parity-drop rows: drops exactly 0 in all seeds against "above 5
    pp" were not evaluable; the ablation drop is counted over sequences, so its sampling error
    bounds the seeds' and the data refute the claim."""
    st_ = _ablation_store(tmp_path, [0.0, 0.0, 0.0])
    claim = {"id": "drop", "statement": "s", "kind": "bound", "metric": "ablation_drop", "task": "parity",
             "arch": "lstm", "layer": "L3", "setting": "probe", "threshold": 0.05, "direction": "greater",
             "length": 40, "statistic": "mean"}  # the t over seeds with its sampling floor
    res = evaluate_claims(st_, parse_claims([claim]))
    assert str(res.verdict.values[0]) == "contradicted", res.reason.values[0]
    assert float(res.upper.values[0]) < 0.05 < 1
    _no_nan(res)


# ------------------------------------------------------- 4. power at the level used


def test_power_and_mde_are_those_of_the_corrected_test_and_say_when_no_data_could_pass(tmp_path):
    """f1-lstm-parity-perfect: 3 seeds at 1.000 on 512 sequences against 0.99. Alone it is
    supported; in a family of 30 claims its Holm step is alpha/30 (t >= 18 with 2 df) and the
    best possible data give t = 3.9: the reason says it cannot be supported with 3 seeds, and
    how many would do, instead of "MDE 0.006 above it"."""
    st_, runs = _probe_store(tmp_path, 3)
    probes = xr.Dataset({"profile": (("run", "length", "layer"), np.ones((3, 1, 1)))},
                        coords={"run": runs, "length": [4], "layer": ["L3"]})
    claim = {"id": "perfect", "statement": "s", "kind": "readable_by", "task": "parity", "arch": "lstm",
             "layer": "L3", "threshold": 0.99, "length": 4, "statistic": "mean"}  # the t's power and MDE
    alone = evaluate_claims(st_, parse_claims([claim]), probes=probes)
    assert str(alone.verdict.values[0]) == "supported"
    others = parse_claims([{**claim, "id": f"other-{i}"} for i in range(29)])
    crowd = evaluate_claims(st_, parse_claims([claim]), probes=probes, absent=others)
    row = crowd.sel(claim="perfect")
    assert str(row.verdict.values) == "inconclusive"
    assert float(row.level) == pytest.approx(0.05 / 30)
    reason = str(row.reason.values)
    assert "cannot be supported with 3 seeds" in reason and "alpha/30" in reason
    assert int(row.seeds_needed) > 3 and f"{int(row.seeds_needed)} seeds would let" in reason
    assert float(row.mde) > float(alone.mde.values[0])  # at alpha/30, not alpha
    _no_nan(crowd)


def test_power_of_a_difference_claim_is_at_its_holm_step():
    claim = make_claim(id="c", statement="s", kind="difference", task="t", treatment="a", reference="b", margin=0.05)
    row = _row(0.01, 0.02, 4.0, claim)
    alone = verdict_table([claim], ["c"], [dict(row)], correction="x").isel(claim=0)
    crowd = verdict_table([claim], ["c"], [dict(row)], pad=(19, 0, 0), correction="x").isel(claim=0)
    assert float(crowd.level) == pytest.approx(0.05 / 20)
    assert float(crowd.power) < float(alone.power) and float(crowd.mde) > float(alone.mde)


# ------------------------------------------------------- 5. the interval agrees with the test


@settings(max_examples=40, deadline=None)
@given(x=st.lists(st.floats(0.85, 1.0), min_size=3, max_size=6), m=st.sampled_from([50, 200, 1000]),
       threshold=st.sampled_from([0.9, 0.95, 0.99]), extra=st.integers(0, 40))
def test_a_bound_claims_shown_bound_decides_as_its_test_does(x, m, threshold, extra):
    """The reason cites the one-sided bound at the claim's Holm level: supported exactly when
    it clears the threshold; the 95% interval stays in [0, 1] and holds the estimate."""
    from analysis.claims.evaluate import bound_row

    claim = make_claim(id="c", statement="s", kind="bound", task="t", arch="a", threshold=threshold,
                  direction="greater", length=40, statistic="mean")  # a row of the t (bound_row)
    values = np.array(x)
    row = bound_row(claim, values, "greater", units=np.full(values.size, float(m)), what="accuracy")
    res = verdict_table([claim], ["c"], [row], pad=(extra, 0, extra), correction="x").isel(claim=0)
    supported = str(res.verdict.values) == "supported"
    assert supported == (float(res.bound) > threshold - 1e-12) or abs(float(res.bound) - threshold) < 1e-6
    assert 0 <= float(res.lower) <= float(res.estimate) <= float(res.upper) <= 1
    _no_nan(res)


# ------------------------------------------------------- refuted claims, and families


def test_refuted_claims_are_contradicted():
    more = make_claim(id="c", statement="rises by more than 0.2", kind="difference", task="t", treatment="L3",
                 reference="L2", compare="layer", metric="probe_accuracy", margin=0.2, direction="greater",
                 test_against="margin")
    for est in (0.0, 0.10):  # inside the margin: "more than 0.2" is refuted
        row = _row(est, 0.007, 2.0, more)
        assert decide(more, row, adjust([more], [row])[0])[0] == "contradicted"
    up = make_claim(id="d", statement="A > B", kind="difference", task="t", treatment="a", reference="b",
               direction="greater")
    row = _row(-0.30, 0.008, 2.0, up)  # [-0.33, -0.27] with no margin: a reversal
    assert decide(up, row, adjust([up], [row])[0])[0] == "contradicted"


def test_a_claim_not_evaluable_still_counts_in_its_family():
    claims = [make_claim(id=f"c{i}", statement="s", kind="difference", task="t", treatment="a", reference="b")
              for i in range(2)]
    rows = [{"p": 0.01}, {"test": "not evaluable: x", "not_evaluable": True}]
    adj = adjust(claims, rows)
    assert adj[0]["zero"] == pytest.approx(0.02) and np.isnan(adj[1]["zero"])


def test_the_cli_and_the_report_print_one_interval_for_a_claim_and_no_nan(tmp_path):
    """Issue 47's two interval rules: with 2 seeds `stats` printed the test's interval while the
    report printed the seeds' values as "[too few seeds: ...]" and then called them an interval;
    a readable_by claim printed power=nan."""
    from layerstate.present import claim_lines
    from reports.claims import claim_texts, claims_display, claims_frame

    st_ = _ablation_store(tmp_path, [0.31, 0.29])
    claim = {"id": "drop", "statement": "s", "kind": "bound", "metric": "ablation_drop", "task": "parity",
             "arch": "lstm", "layer": "L3", "setting": "probe", "threshold": 0.05, "direction": "greater",
             "length": 40}
    res = evaluate_claims(st_, parse_claims([claim | {"statistic": "mean"}]))  # the t over 2 seeds
    cli = " ".join(claim_lines(res))
    frame = claims_frame(res)
    page = claim_texts(frame)[0]
    assert page in cli and "from 2 seeds" in page and "too few seeds" not in page
    assert "power not computable: a bound declares no effect size" in cli
    shown = claims_display(frame)
    assert "nan" not in cli.lower() and "nan" not in " ".join(map(str, shown.iloc[0].values)).lower()
    # decided by the share of seeds (the default): 2 seeds bound no distribution-free interval, and
    # neither the CLI nor the report calls it a t interval
    res = evaluate_claims(st_, parse_claims([claim]))
    cli = " ".join(claim_lines(res))
    frame = claims_frame(res)
    page = claim_texts(frame)[0]
    assert page in cli and "[no interval]" in page and "from 2 seeds" not in cli
    assert "exact sign test's power depends on the true share" in cli and "nan" not in cli.lower()
