"""Claims on stored behaviour: paired by seed, corrected, and never 'no effect' from a p-value."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.stats

from analysis.behaviour import accuracy_intervals, sequence_correctness
from analysis.claims import ClaimError, evaluate_claims, parse_claims
from store import Store


def _write_run(st, rid, task, variant, seed, p_correct, rng, n=200, L=12, C=6):
    st.add_run(rid, task=task, arch="mamba", variant=variant, seed=seed)
    labels = rng.integers(0, C, size=(n, L))
    right = rng.random((n, L)) < p_correct
    pred = np.where(right, labels, (labels + 1 + rng.integers(0, C - 1, (n, L))) % C)
    logits = np.eye(C, dtype="float32")[pred] * 5
    st.write_length(rid, L, hidden=rng.standard_normal((n, L, 2, 4)).astype("float32"),
                    tokens=labels, labels={"state": labels}, logits=logits)


@pytest.fixture(scope="module")
def conv_store(tmp_path_factory):
    """5 seeds; removing the conv costs 10 pp on s3 and nothing on dyck."""
    st = Store.create(str(tmp_path_factory.mktemp("claims") / "s.zarr"))
    rng = np.random.default_rng(0)
    with st.deferred_consolidation():  # one snapshot for the 20 runs, not one per write
        for seed in range(5):
            offset = rng.normal(0, 0.02)
            for task, drop in (("s3", 0.10), ("dyck", 0.0)):
                base = 0.85 + offset
                _write_run(st, f"{task}-d-{seed}", task, "default", seed, base, rng)
                _write_run(st, f"{task}-n-{seed}", task, "no_conv", seed, base - drop, rng)
    return st


CLAIMS = [
    {"id": "s3-drop", "statement": "Removing Conv1D lowers Mamba's S3 accuracy", "kind": "difference",
     "task": "s3", "arch": "mamba", "treatment": "no_conv", "reference": "default",
     "direction": "less", "length": 12, "margin": 0.05},
    {"id": "dyck-null", "statement": "Removing Conv1D leaves Dyck accuracy within ±5 pp",
     "kind": "equivalence", "task": "dyck", "arch": "mamba", "treatment": "no_conv",
     "reference": "default", "margin": 0.05, "length": 12},
    {"id": "dyck-diff", "statement": "Removing Conv1D changes Dyck accuracy", "kind": "difference",
     "task": "dyck", "arch": "mamba", "treatment": "no_conv", "reference": "default", "length": 12},
]


def test_known_effects_get_the_right_verdicts(conv_store):
    res = evaluate_claims(conv_store, parse_claims(CLAIMS))
    v = dict(zip(res.claim.values, res.verdict.values, strict=True))
    assert v == {"s3-drop": "supported", "dyck-null": "supported", "dyck-diff": "inconclusive"}
    assert list(res.outcome.values) == ["effect", "equivalent", ""]  # no margin: no four outcomes
    s3 = res.sel(claim="s3-drop")
    assert s3.lower < -0.10 + 0.05 and s3.upper > -0.10 - 0.05 and s3.estimate < 0
    assert (res.p_adjusted >= res.p).all() and int(s3.n_seeds) == 5
    assert np.isfinite(float(s3.power)) and float(s3.mde) > 0 and float(s3.power_at) == -0.05
    assert str(s3.reason.values).startswith("below zero (Holm p = ") and "not within ±0.05" in str(s3.reason.values)
    assert "no margin declared" in str(res.sel(claim="dyck-diff").reason.values)


def _precise_store(path):
    """5 seeds, 400 sequences x 20 positions per run, seeds nearly alike: removing the conv
    costs 10 pp on s3, 1.5 pp on parity (real but inside a 5 pp margin) and nothing on dyck."""
    st = Store.create(str(path))
    rng = np.random.default_rng(5)
    with st.deferred_consolidation():  # one snapshot for the 30 runs, not one per write
        for seed in range(5):
            offset = rng.normal(0, 0.002)
            for task, drop in (("s3", 0.10), ("parity", 0.015), ("dyck", 0.0)):
                _write_run(st, f"{task}-d-{seed}", task, "default", seed, 0.85 + offset, rng, n=400, L=20)
                _write_run(st, f"{task}-n-{seed}", task, "no_conv", seed, 0.85 + offset - drop, rng,
                           n=400, L=20)
    return st


@pytest.fixture(scope="module")
def precise_store(tmp_path_factory):
    return _precise_store(tmp_path_factory.mktemp("precise") / "s.zarr")


def _claim(cid, task, **over):
    return {"id": cid, "statement": f"Removing Conv1D changes {task} accuracy", "kind": "difference",
            "task": task, "arch": "mamba", "treatment": "no_conv", "reference": "default", "length": 20,
            "margin": 0.05, **over}


def test_four_outcomes_against_the_margin(precise_store):
    """Lakens' four outcomes: a difference claim with a margin is supported only when the
    effect is real and not inside the margin; a real effect inside it is negligible (the
    issue: +0.004 [+0.000, +0.008] was 'supported'), a null inside it equivalent; the wrong
    direction contradicts; an equivalence claim is supported by either within-margin outcome."""
    res = evaluate_claims(precise_store, parse_claims([
        _claim("s3", "s3"), _claim("parity", "parity"), _claim("dyck", "dyck"),
        _claim("s3-up", "s3", direction="greater"),
        _claim("parity-narrow", "parity", margin=0.012),
        {**_claim("parity-eq", "parity"), "kind": "equivalence"},
    ]))
    got = {c: (str(v), str(o)) for c, v, o in zip(res.claim.values, res.verdict.values, res.outcome.values,
                                                  strict=True)}
    assert got == {"s3": ("supported", "effect"), "parity": ("negligible", "negligible"),
                   "dyck": ("equivalent", "equivalent"), "s3-up": ("contradicted", "inconclusive"),
                   "parity-narrow": ("supported", "effect"), "parity-eq": ("supported", "negligible")}
    parity = res.sel(claim="parity")
    assert parity.lower > -0.05 and parity.upper < 0 and "real but negligible" in str(parity.reason.values)
    assert "real but negligible" in str(res.sel(claim="parity-eq").reason.values)
    assert "opposite of the claimed direction" in str(res.sel(claim="s3-up").reason.values)
    # both tests of each margin claim are Holm-corrected (the second as its own family)
    assert (res.p_equivalence_adjusted.sel(claim=["s3", "parity", "dyck"]) >=
            res.p_equivalence.sel(claim=["s3", "parity", "dyck"])).all()


def test_minimum_effect_test_supports_only_effects_beyond_the_margin(precise_store):
    res = evaluate_claims(precise_store, parse_claims([
        _claim("s3", "s3", direction="less", test_against="margin"),
        _claim("parity", "parity", direction="less", test_against="margin"),
        _claim("parity-wide", "parity", direction="less", test_against="margin", margin=0.01),
    ]))
    v = dict(zip(res.claim.values, res.verdict.values, strict=True))
    # -1.5 pp shown inside the 5 pp margin refutes "lowers by more than the margin"
    assert v["s3"] == "supported" and v["parity"] == "contradicted"
    assert "short of the margin" in str(res.sel(claim="parity").reason.values)
    assert "minimum-effect test" in str(res.sel(claim="s3").test.values)
    # -1.5 pp against a 1 pp margin: real, but whether it exceeds 1 pp is not shown here
    assert v["parity-wide"] in ("supported", "inconclusive")
    assert float(res.sel(claim="s3").power_at) == pytest.approx(-0.10)  # twice the margin, claimed side


def test_every_accuracy_claim_shows_a_second_model_and_variance_components(conv_store):
    claims = parse_claims([CLAIMS[0], {**CLAIMS[0], "id": "gee", "model": "gee"},
                           {**CLAIMS[0], "id": "mixed", "model": "mixedlm"}])
    res = evaluate_claims(conv_store, claims)
    assert list(res.model.values) == ["paired_t", "gee", "mixedlm"]
    assert list(res.crosscheck_model.values) == ["mixedlm", "paired_t", "paired_t"]
    assert (res.verdict == "supported").all() and (res.crosscheck_verdict == "supported").all()
    assert not res.disagreement.any()
    for k in ("crosscheck_estimate", "crosscheck_lower", "crosscheck_upper", "crosscheck_p",
              "sd_seed", "sd_model", "sd_sequence"):
        assert np.isfinite(res[k].values).all(), k
    # the sequences of one run vary far more than seeds here (binomial noise on 12 positions)
    assert float(res.sd_sequence[0]) > float(res.sd_seed[0])
    np.testing.assert_allclose(res.crosscheck_estimate[0], res.estimate[2])  # mixedlm both ways


def test_a_cross_check_that_reaches_another_verdict_is_flagged(conv_store, monkeypatch):
    from analysis.stats import contrasts

    real = contrasts.KERNELS["mixedlm"]

    def doubtful(correct, labelled):
        out = dict(real(correct, labelled))
        out["se"] = out["se"] * 50  # as if the mixed model saw far more noise
        return out

    monkeypatch.setitem(contrasts.KERNELS, "mixedlm", doubtful)
    res = evaluate_claims(conv_store, parse_claims([CLAIMS[0]]))
    assert str(res.verdict[0].values) == "supported" and str(res.crosscheck_verdict[0].values) == "inconclusive"
    assert bool(res.disagreement[0])
    from layerstate import present

    assert "DISAGREES" in next(present.claim_lines(res))
    assert "cross-check mixedlm says inconclusive" in next(present.claim_summaries(res))


def test_models_use_what_is_there_and_say_what_they_dropped(tmp_path):
    """Seed 4's no_conv run is missing and runs hold different numbers of sequences."""
    st = Store.create(str(tmp_path / "s.zarr"))
    rng = np.random.default_rng(2)
    for seed in range(5):
        _write_run(st, f"s3-d-{seed}", "s3", "default", seed, 0.85, rng, n=120)
        if seed < 4:
            _write_run(st, f"s3-n-{seed}", "s3", "no_conv", seed, 0.75, rng, n=80 + 10 * seed)
    res = evaluate_claims(st, parse_claims([CLAIMS[0], {**CLAIMS[0], "id": "gee", "model": "gee"}]))
    t, gee = res.sel(claim="s3-drop"), res.sel(claim="gee")
    assert int(t.n_seeds) == 4 and int(gee.n_seeds) == 5
    assert "paired_t dropped seed 4 (only in default)" in str(t.dropped.values)
    assert "mixedlm dropped seed 4 (only in default) and 100 sequences evaluated in one condition only" in str(
        t.dropped.values)
    assert "gee used seed 4 (only in default) for that condition only" in str(gee.dropped.values)
    assert (res.verdict == "supported").all()


def test_glmm_claims_report_estimates_and_components_and_take_the_verdict_from_the_default(conv_store):
    res = evaluate_claims(conv_store, parse_claims([{**CLAIMS[0], "model": "glmm"}]))
    r = res.isel(claim=0)
    assert str(r.model.values) == "paired_t" and str(r.crosscheck_model.values) == "glmm"
    assert str(r.verdict.values) == "supported" and str(r.crosscheck_verdict.values) == ""
    assert np.isnan(float(r.crosscheck_lower)) and float(r.crosscheck_estimate) == pytest.approx(-0.10, abs=0.03)
    assert "GLMM (logit scale): seed SD" in str(r.variance.values)
    assert "too narrow to decide" in str(r.test.values)


def test_accuracy_per_sequence_and_intervals(conv_store):
    corr = sequence_correctness(conv_store)
    assert corr.correct.dims == ("run", "length", "sequence")
    assert (corr.labelled == 12).all()
    acc = accuracy_intervals(corr)
    est = acc.estimate.sel(task="s3", arch="mamba", length=12)
    assert 0.07 < float(est.sel(variant="default") - est.sel(variant="no_conv")) < 0.13
    assert (acc.lower <= acc.estimate).all() and (acc.estimate <= acc.upper).all()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"model": "gee", "metric": "restoration", "compare": "site", "treatment": "value",
          "reference": "query", "layer": "L0"}, r"model = 'gee' fits per-sequence accuracy"),
        ({"test_against": "margin", "margin": None}, r"test_against = 'margin' needs a margin"),
        ({"test_against": "margin", "kind": "equivalence"}, r"test_against is for difference claims, not equivalence claims"),
        ({"model": "lmer"}, r"model: Input should be 'paired_t', 'gee', 'mixedlm' or 'glmm'"),
    ],
)
def test_bad_model_fields_are_refused_in_one_line(change, match):
    with pytest.raises(ClaimError, match=match):
        parse_claims([{k: v for k, v in {**CLAIMS[0], **change}.items() if v is not None}])


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"margin": 0}, r"margin must be positive"),
        ({"kind": "equivalence", "margin": None}, r"equivalence claim needs margin"),
        ({"task": "sorting"}, r"task 'sorting' is not one of the store's tasks \(dyck, s3\)$"),
        ({"treatment": "no_mixer"}, r"treatment 'no_mixer' is not one of the store's variants \(default, no_conv\)"),
        ({"treatment": "no-conv"}, r"did you mean 'no_conv'\?"),
        ({"length": 99}, r"no run has captured length 99"),
    ],
)
def test_bad_claims_get_one_line_errors(conv_store, change, match):
    with pytest.raises((ClaimError, ValueError, KeyError), match=match):
        evaluate_claims(conv_store, parse_claims([{**CLAIMS[0], **change}]))


def test_fewer_than_two_seeds_is_explained(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    rng = np.random.default_rng(1)
    _write_run(st, "a", "s3", "default", 0, 0.9, rng)
    _write_run(st, "b", "s3", "no_conv", 0, 0.8, rng)
    res = evaluate_claims(st, parse_claims([CLAIMS[0]]))
    assert str(res.verdict.values[0]) == "not evaluable"
    assert "at least 2 seeds" in str(res.test.values[0]) and "train more seeds" in str(res.test.values[0])
    assert np.isnan(float(res.p_adjusted[0])) and np.isnan(float(res.estimate[0]))


def test_probe_claims_without_probe_results_name_the_command(conv_store):
    claim = {"id": "r", "statement": "x", "kind": "readable_by", "task": "dyck",
             "arch": "mamba", "layer": "L0", "threshold": 0.9}
    with pytest.raises(ClaimError, match="layerstate probe"):
        evaluate_claims(conv_store, parse_claims([claim]))



def test_stats_command_writes_claims_and_prints_verdicts(conv_store, tmp_path):
    import shutil

    from click.testing import CliRunner

    from layerstate.cli import main

    path = tmp_path / "s.zarr"
    shutil.copytree(str(conv_store.location), path)
    claims = tmp_path / "claims.toml"
    claims.write_text(
        '[[claims]]\nid = "s3-drop"\nstatement = "Removing Conv1D lowers S3 accuracy"\n'
        'kind = "difference"\ntask = "s3"\narch = "mamba"\ntreatment = "no_conv"\n'
        'reference = "default"\ndirection = "less"\nlength = 12\nmargin = 0.05\n'
    )
    res = CliRunner().invoke(main, ["stats", str(path), "--claims", str(claims)])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("s3-drop: supported — below zero (Holm p = ")
    assert "not within ±0.05" in res.output and "cross-check mixedlm:" in res.output
    assert "→ supported (agrees)" in res.output and "SD seed" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert str(Store.open(str(path)).read_result("claims").verdict.values[0]) == "supported"
    bad = tmp_path / "bad.toml"
    bad.write_text(claims.read_text().replace("margin = 0.05", "margin = -1"))
    res = CliRunner().invoke(main, ["stats", str(path), "--claims", str(bad)])
    assert res.exit_code == 2 and "margin must be positive" in res.output


def _fake_probes(store, rng, n_seeds=5):
    """Probe profiles: parity and s3 jump at the last layer, dyck is readable from L0."""
    import xarray as xr

    layers = ["embed", "L0", "L1", "L2", "L3"]
    shapes = {"parity": [0.5, 0.52, 0.55, 0.6, 0.98], "s3": [0.2, 0.22, 0.25, 0.3, 0.97],
              "dyck": [0.6, 0.95, 0.97, 0.98, 0.98]}
    runs, prof = [], []
    for task, shape in shapes.items():
        for seed in range(n_seeds):
            rid = f"{task}-lstm-{seed}"
            store.add_run(rid, task=task, arch="lstm", seed=seed)
            runs.append(rid)
            prof.append(np.clip(np.array(shape) + rng.normal(0, 0.01, 5), 0, 1))
    return xr.Dataset({"profile": (("run", "length", "layer"), np.array(prof)[:, None, :])},
                      coords={"run": runs, "length": [40], "layer": layers})


#: A profile claim and a readable_by claim on _fake_probes.
PROFILE_CLAIMS = (
    {"id": "s3-like-parity", "statement": "S3 matches Parity, not Dyck", "kind": "profile_match",
     "metric": "probe_accuracy", "task": "s3", "matches": "parity", "differs_from": "dyck",
     "archs": ["lstm"]},
    {"id": "dyck-early", "statement": "Dyck readable by L0", "kind": "readable_by",
     "metric": "probe_accuracy", "task": "dyck", "arch": "lstm", "layer": "L0", "threshold": 0.9},
)


def test_probe_claims_profile_match_and_readable_by(tmp_path):
    """8 seeds: readable_by claims are decided by the exact sign test on the seeds beyond the
    threshold (docs/ceiling.md), which 5 seeds cannot decide in a family of three. By hand: Dyck's
    8 of 8 seeds above 0.9 give p = 1/256, Holm-corrected at most 3/256 < 0.05 (the profile claim's
    p is smaller); Parity's 8 of 8 below give the opposite side's p = 2/256 at the two-sided level,
    Holm over the family's two opposite sides 4/256 < 0.05: contradicted."""
    st = Store.create(str(tmp_path / "p.zarr"))
    probes = _fake_probes(st, np.random.default_rng(0), n_seeds=8)
    claims = parse_claims([
        *PROFILE_CLAIMS,
        {"id": "parity-early", "statement": "Parity readable by L0", "kind": "readable_by",
         "metric": "probe_accuracy", "task": "parity", "arch": "lstm", "layer": "L0", "threshold": 0.9},
    ])
    res = evaluate_claims(st, claims, probes=probes)
    v = dict(zip(res.claim.values, res.verdict.values, strict=True))
    assert v == {"s3-like-parity[lstm]": "supported", "dyck-early": "supported",
                 "parity-early": "contradicted"}
    assert float(res.sel(claim="dyck-early").estimate) == pytest.approx(0.95, abs=0.02)  # the median seed
    assert float(res.sel(claim="dyck-early").p_adjusted) == pytest.approx(2 / 256)  # second Holm step
    assert float(res.sel(claim="parity-early").p_contra_adjusted) == pytest.approx(4 / 256)


def test_readable_by_with_seeds_alike_has_an_interval_from_the_sequences(tmp_path):
    """Three seeds all probing at exactly 1.000: the seeds' spread is 0, so the interval comes
    from the sampling error of each seed's 64 captured sequences, not a zero width and p = 0:
    the score test at the threshold, and as interval the values it does not reject (Wilson's)."""
    import xarray as xr

    st = Store.create(str(tmp_path / "p.zarr"))
    rng = np.random.default_rng(0)
    runs = []
    for seed in range(3):
        rid = f"dyck-lstm-{seed}"
        st.add_run(rid, task="dyck", arch="lstm", seed=seed)
        labels = rng.integers(0, 2, size=(64, 8))
        st.write_length(rid, 8, hidden=rng.standard_normal((64, 8, 2, 4)).astype("float32"),
                        tokens=labels, labels={"depth": labels})
        runs.append(rid)
    probes = xr.Dataset({"profile": (("run", "length", "layer"), np.ones((3, 1, 2)))},
                        coords={"run": runs, "length": [8], "layer": ["L0", "L1"]})
    claim = {**PROFILE_CLAIMS[1], "threshold": 0.9, "length": 8, "statistic": "mean"}  # the t's score test
    res = evaluate_claims(st, parse_claims([claim, {**claim, "id": "strict", "threshold": 0.99}]),
                          probes=probes)
    row = res.sel(claim="dyck-early")
    q, h = scipy.stats.t.ppf(0.975, 2), 1 / 64 / 3
    assert float(row.upper) == 1.0
    # (1 - p)^2 = q^2 p (1 - p) h at the lower end: p = 1 / (1 + q^2 h)
    assert float(row.lower) == pytest.approx(1 / (1 + q ** 2 * h), abs=1e-9)
    assert float(row.se) == pytest.approx(np.sqrt(0.9 * 0.1 * h))  # the SE at the threshold
    assert "over 64 sequences per seed" in str(row.variance.values)
    assert str(row.verdict.values) == "supported"
    assert str(res.sel(claim="strict").verdict.values) == "inconclusive"  # 192 sequences can't show 0.99
    # no captures to take the sequence count from: identical seeds give no interval at all
    bare = Store.create(str(tmp_path / "bare.zarr"))
    for seed in range(3):
        bare.add_run(f"dyck-lstm-{seed}", task="dyck", arch="lstm", seed=seed)
    res = evaluate_claims(bare, parse_claims([claim]), probes=probes)
    assert str(res.verdict.values[0]) == "not evaluable"
    assert "are identical (1)" in str(res.test.values[0])


def test_probe_claims_from_one_seed_are_not_evaluable_not_an_error(tmp_path):
    """A grid's seed 0 alone (trained first to read its curves): every probe claim says it
    needs 2 seeds, the profile test included (it raised a ValueError that ended the run)."""
    st = Store.create(str(tmp_path / "p.zarr"))
    probes = _fake_probes(st, np.random.default_rng(0), n_seeds=1)
    claims = parse_claims([
        *PROFILE_CLAIMS,
    ])
    res = evaluate_claims(st, claims, probes=probes)
    assert list(res.verdict.values) == ["not evaluable", "not evaluable"]
    assert "needs at least 2 seeds with a s3 probe profile for lstm (found 1)" in str(res.test.values[0])


def test_a_profile_claim_that_three_seeds_cannot_decide_says_so(tmp_path):
    """3 seeds per task: 20 splits, the observed one and its mirror among them, so no p is
    below 0.1 — the verdict names that floor instead of a p that could never be small."""
    st = Store.create(str(tmp_path / "p.zarr"))
    probes = _fake_probes(st, np.random.default_rng(0), n_seeds=3)
    res = evaluate_claims(st, parse_claims([PROFILE_CLAIMS[0]]), probes=probes)
    row = res.sel(claim="s3-like-parity[lstm]")
    assert str(row.verdict.values) == "inconclusive"
    assert float(row.min_p) == pytest.approx(0.1)
    assert ("cannot be supported with 3 seeds per task: the exact permutation test's smallest "
            "attainable p is 0.100, above the level of its Holm step (0.05): 4 seeds per task would be needed with "
            "as many in each") in str(row.reason.values)


def test_reading_an_experiment_warns_of_a_profile_claim_its_seeds_cannot_decide(tmp_path):
    from layerstate.experiment import parse_experiment

    def exp(seeds):
        return {"experiment": {"name": "x"},
                "grid": {"tasks": ["parity", "s3", "dyck"], "archs": ["lstm"], "seeds": seeds},
                "claims": [PROFILE_CLAIMS[0]]}

    with pytest.warns(UserWarning, match=r"cannot be supported with 3 seeds per task .*smallest p is 0.100"):
        parse_experiment(exp([0, 1, 2]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_experiment(exp([0, 1, 2, 3]))  # 2/70 < 0.05: no warning
    both = exp([0, 1, 2]) | {"claims": list(PROFILE_CLAIMS)}  # a family of 2: Holm's first step at 0.025
    with pytest.warns(UserWarning, match=r"4 or more seeds can decide it, 5 or more whatever the file's other "
                                         r"tests give \(Holm over its 2 tests\)"):
        parse_experiment(both)


def test_a_design_says_what_a_profile_claim_can_reach_not_the_files_grid():
    """`layerstate run --design` reads the file's grid of 3 seeds quietly and warns for the seeds
    the design reaches: none for a design of 4 or more in every cell, one at a cell capped at 3."""
    import re

    from analysis.stats.design import Design
    from layerstate.experiment import UNTESTABLE, parse_experiment
    from layerstate.pipeline import with_design

    raw = {"experiment": {"name": "x"}, "grid": {"tasks": ["parity", "s3", "dyck"], "archs": ["lstm", "gru"],
                                                 "seeds": [0, 1, 2]},
           "claims": [{**PROFILE_CLAIMS[0], "archs": ["lstm", "gru"]}]}
    with pytest.warns(UserWarning) as seen:
        exp = parse_experiment(raw)
    assert all(re.match(UNTESTABLE, str(w.message)) for w in seen)  # what the pipeline silences
    design = Design(first_seeds=4, stage_seeds=4, max_seeds=11, max_seeds_by_arch={"gru": 8})
    staged = with_design(exp, design, "d.toml", lambda _: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        staged.warn_untestable()
    capped = exp.model_copy(update={"design": Design(first_seeds=3, stage_seeds=1, max_seeds=4,
                                                     max_seeds_by_arch={"gru": 3})})
    with pytest.warns(UserWarning, match=r"cannot be supported with 3 seeds per task"):
        capped.warn_untestable()


def _interchange_store(tmp_path, n_seeds=4, no_conv=False):
    """Transformer restores at the value (induction), Mamba at the query (direct retrieval);
    ``no_conv``: also Mamba without its convolution, restoring at the value instead."""
    st = Store.create(str(tmp_path / "s.zarr"))
    rng = np.random.default_rng(3)
    runs, rest = [], []
    sites = ["key", "value", "divider", "query"]
    cells = [("transformer", "default", "value"), ("mamba", "default", "query")]
    if no_conv:
        cells.append(("mamba", "no_conv", "value"))
    for arch, variant, best in cells:
        for seed in range(n_seeds):
            rid = f"assoc_recall-{arch}-{variant}-s{seed}"
            st.add_run(rid, task="assoc_recall", arch=arch, variant=variant, seed=seed)
            r = rng.uniform(0.0, 0.1, size=(3, 4))  # (layer, site)
            r[1, sites.index(best)] = 0.8 + rng.normal(0, 0.05)
            r[0, 0] = 1.0  # the embedding at the corrupted key restores trivially
            runs.append(rid)
            rest.append(r)
    import xarray as xr

    trivial = np.zeros((len(runs), 4), bool)
    trivial[:, 0] = True
    ds = xr.Dataset(
        {"restoration": (("run", "layer", "site"), np.array(rest)),
         "trivial": (("run", "site"), trivial)},
        coords={"run": runs, "layer": ["embed", "L0", "L1"], "site": sites},
        attrs={"length": 40, "analysis": "interchange"},
    )
    st.write_result("interchange/assoc_recall", ds)
    return st


def test_restoration_claims_tell_induction_from_direct_retrieval(tmp_path):
    st = _interchange_store(tmp_path)
    base = {"kind": "difference", "task": "assoc_recall", "metric": "restoration", "length": 40,
            "margin": 0.2, "layer": "L0"}
    claims = parse_claims([
        {**base, "id": "tf-induction", "statement": "Transformer restores at the value, not the query",
         "arch": "transformer", "compare": "site", "treatment": "value", "reference": "query",
         "direction": "greater"},
        {**base, "id": "mamba-induction", "statement": "Mamba restores at the value, not the query",
         "arch": "mamba", "compare": "site", "treatment": "value", "reference": "query",
         "direction": "greater"},
        {**base, "id": "value-arch", "statement": "Value patching restores more in the Transformer",
         "compare": "arch", "site": "value", "treatment": "transformer", "reference": "mamba",
         "direction": "greater", "layer": "L0"},
    ])
    res = evaluate_claims(st, claims)
    v = dict(zip(res.claim.values, res.verdict.values, strict=True))
    assert v == {"tf-induction": "supported", "mamba-induction": "contradicted", "value-arch": "supported"}
    tf = res.sel(claim="tf-induction")
    # at L0: ~0.8 at the value vs <= 0.1 at the query
    assert 0.6 < float(tf.estimate) < 0.85 and int(tf.n_seeds) == 4
    # at L0 the Transformer restores ~0.8 at the value, Mamba <= 0.1
    assert 0.6 < float(res.sel(claim="value-arch").estimate) < 0.9


def test_site_and_arch_claims_read_one_variant_when_the_grid_has_several(tmp_path):
    st = _interchange_store(tmp_path, no_conv=True)
    base = {"kind": "difference", "task": "assoc_recall", "metric": "restoration", "length": 40,
            "margin": 0.2, "statement": "s", "layer": "L0"}
    site = {**base, "arch": "mamba", "compare": "site", "treatment": "query", "reference": "value",
            "direction": "greater"}
    claims = parse_claims([
        {**site, "id": "mamba-direct"},  # the default variant, unnamed
        {**site, "id": "no-conv-direct", "variant": "no_conv"},
        {**base, "id": "value-arch", "compare": "arch", "site": "value", "treatment": "transformer",
         "reference": "mamba", "direction": "greater", "layer": "L0"},
    ])
    res = evaluate_claims(st, claims)
    v = dict(zip(res.claim.values, res.verdict.values, strict=True))
    # before, the unpinned variant made every one of these "ambiguous: results vary over ['variant']"
    assert v == {"mamba-direct": "supported", "no-conv-direct": "contradicted", "value-arch": "supported"}
    with pytest.raises(ClaimError, match="variant 'nope' is not one of the store's variants"):
        evaluate_claims(st, parse_claims([{**site, "id": "x", "variant": "nope"}]))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"metric": "accuracy"}, r"compare = 'site' needs metric = 'restoration'"),
        ({"compare": "arch", "treatment": "transformer", "reference": "mamba"}, r"names one site"),
        ({"kind": "readable_by", "layer": "L0", "threshold": 0.5}, r"works with difference and equivalence"),
    ],
)
def test_bad_restoration_claims(change, match):
    claim = {"id": "c", "statement": "s", "kind": "difference", "task": "assoc_recall", "arch": "mamba",
             "metric": "restoration", "compare": "site", "treatment": "value", "reference": "query", "layer": "L0",
             **change}
    with pytest.raises(ClaimError, match=match):
        parse_claims([claim])


def test_restoration_claims_without_interchange_results_name_the_command(conv_store):
    claim = parse_claims([{"id": "c", "statement": "s", "kind": "difference", "task": "s3", "arch": "mamba",
                           "metric": "restoration", "compare": "site", "treatment": "value",
                           "reference": "query", "length": 12, "layer": "L0"}])
    with pytest.raises(Exception, match=r"layerstate patch STORE --interchange --tasks s3 --length 12"):
        evaluate_claims(conv_store, claim)


def test_restoration_claims_name_their_layer_and_identical_seeds_are_not_evaluable(tmp_path):
    """A restoration claim without a layer is refused (each run's best layer, chosen on the
    data it is tested on, biased "> 0.5" at a true 0.47 to 5.3% false support). With a layer,
    results of models of different depths merge; seeds whose restorations are identical have
    no spread and restoration is not counted over sequences: not evaluable, in words."""
    import xarray as xr

    st = Store.create(str(tmp_path / "s.zarr"))
    sites = ["key", "value", "divider", "query"]
    for name, arch, layers in (("a", "lstm", ["embed", "L0", "L1"]), ("b", "gru", ["embed", "L0", "L1", "L2", "L3"])):
        runs = []
        for seed in range(3):
            rid = f"assoc_recall-{arch}-default-s{seed}"
            st.add_run(rid, task="assoc_recall", arch=arch, variant="default", seed=seed)
            runs.append(rid)
        rest = np.full((3, len(layers), 4), 0.05)
        rest[:, -1, 3] = 1.0  # the readout: trivially restored
        pos = np.tile([[9, 9]], (3, 1))
        ds = xr.Dataset(
            {"restoration": (("run", "layer", "site"), rest),
             "trivial": (("run", "site"), np.tile([True, False, False, False], (3, 1))),
             "pos_query": (("run", "sequence"), pos), "pos_label": (("run", "sequence"), pos)},
            coords={"run": runs, "layer": layers, "site": sites}, attrs={"length": 40},
        )
        st.write_result(f"interchange/{name}", ds)
    claims = parse_claims([{"id": f"{arch}-direct", "statement": "s", "kind": "difference",
                            "metric": "restoration", "task": "assoc_recall", "arch": arch,
                            "compare": "site", "treatment": "query", "reference": "value",
                            "direction": "greater", "length": 40, "layer": "L0"} for arch in ("lstm", "gru")])
    res = evaluate_claims(st, claims)
    assert set(res.verdict.values) == {"not evaluable"}
    assert all("differences are identical (+0)" in str(t) and "not counted over sequences" in str(t)
               for t in res.test.values)
    with pytest.raises(ClaimError, match=r"names its layer = \.\.\. .*biases the estimate up"):
        parse_claims([{**claims[0].model_dump(exclude_none=True), "layer": None}])


def test_a_run_in_two_interchange_results_must_be_named(tmp_path):
    st = _interchange_store(tmp_path)
    st.write_result("interchange/again", st.read_result("interchange/assoc_recall"))
    claim = {"id": "c", "statement": "s", "kind": "difference", "metric": "restoration",
             "task": "assoc_recall", "arch": "mamba", "compare": "site", "treatment": "query",
             "reference": "value", "length": 40, "layer": "L0"}
    with pytest.raises(ClaimError, match=r"has interchange results in interchange/\w+.*interchange/\w+.*say which"):
        evaluate_claims(st, parse_claims([claim]))
    res = evaluate_claims(st, parse_claims([{**claim, "result": "again"}]))
    assert float(res.estimate[0]) > 0.5
    with pytest.raises(ClaimError, match="restoration claims compare sites, architectures or variants"):
        parse_claims([{**claim, "compare": "task", "site": "value"}])


def test_restoration_of_models_the_corruption_does_not_move_is_not_evaluable(tmp_path):
    """AR models that never learned the task: the clean-corrupt gap is ~0, restoration is a
    ratio of noise. Such seeds are left out; with < 2 left the claim is 'not evaluable' and
    the other claims are still tested (the one not evaluable counts with p = 1 in the family)."""
    st = _interchange_store(tmp_path / "a")
    ds = st.read_result("interchange/assoc_recall")
    arch = np.array([st.run_attrs(str(r))["arch"] for r in ds.run.values])
    gap = np.where(arch == "mamba", 0.001, 0.5)[:, None, None] * np.ones((1, 3, 6))
    ds = ds.assign(p_clean=(("run", "layer", "sequence"), 0.1 + gap),
                   p_corrupt=(("run", "layer", "sequence"), np.full(gap.shape, 0.1)))
    st.write_result("interchange/assoc_recall", ds)
    base = {"kind": "difference", "metric": "restoration", "task": "assoc_recall", "compare": "site",
            "length": 40, "direction": "greater", "statement": "s", "layer": "L0"}
    res = evaluate_claims(st, parse_claims([
        {**base, "id": "tf", "arch": "transformer", "treatment": "value", "reference": "query"},
        {**base, "id": "mamba", "arch": "mamba", "treatment": "query", "reference": "value"},
    ]))
    v = dict(zip(res.claim.values, res.verdict.values, strict=True))
    assert v == {"tf": "supported", "mamba": "not evaluable"}
    assert "probability gap < 0.05" in str(res.sel(claim="mamba").test.values)
    # two declared claims: the one not evaluable still counts (p = 1), so Holm doubles the other's p
    assert float(res.sel(claim="tf").p_adjusted) == pytest.approx(min(1.0, 2 * float(res.sel(claim="tf").p)))
    assert np.isnan(float(res.sel(claim="mamba").p_adjusted))
