"""Known answers for the sequences' sampling floor of accuracy contrasts (issue 52, items 1-2):
the variance of a contrast is the larger of the seeds' and the paired (McNemar-type) sampling
variance of the per-sequence outcomes, for the primary model and its cross-check alike, one
continuous rule rather than a switch at SE = 0 (docs/decisions.md, "Identical seeds")."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.claims import evaluate_claims, parse_claims
from analysis.stats.decision import paired_sampling_var, proportion_sampling_var
from store import Store

N_SEQ, LENGTH, CLASSES = 200, 1, 6


def _write(st: Store, rid: str, variant: str, seed: int, labels: np.ndarray, right: np.ndarray,
           rng: np.random.Generator) -> None:
    """A run whose model is right on exactly the sequences ``right`` marks (one labelled
    position per sequence: one outcome per sequence, as McNemar's table counts them)."""
    st.add_run(rid, task="s3", arch="mamba", variant=variant, seed=seed)
    pred = np.where(right[:, None], labels, (labels + 1) % CLASSES)
    st.write_length(rid, LENGTH, hidden=rng.standard_normal((N_SEQ, LENGTH, 2, 4)).astype("float32"),
                    tokens=labels, labels={"state": labels}, logits=np.eye(CLASSES, dtype="float32")[pred] * 5)


def _flipped_store(path, flips: list[int]) -> Store:
    """One seed per entry of ``flips``: the default model right on 160 of 200 sequences, the
    no_conv model the same except ``flips[s]`` of those sequences turned wrong (b = flips, c = 0)."""
    st = Store.create(str(path))
    rng = np.random.default_rng(5)
    with st.deferred_consolidation():
        for seed, k in enumerate(flips):
            labels = rng.integers(0, CLASSES, size=(N_SEQ, LENGTH))
            right = np.arange(N_SEQ) < 160
            flipped = right.copy()
            flipped[:k] = False
            _write(st, f"d-{seed}", "default", seed, labels, right, rng)
            _write(st, f"n-{seed}", "no_conv", seed, labels, flipped, rng)
    return st


BASE = {"statement": "s", "task": "s3", "arch": "mamba", "treatment": "no_conv", "reference": "default",
        "length": LENGTH}


def test_identical_predictions_refute_a_difference_beyond_the_margin_and_the_crosscheck_stays_evaluable(tmp_path):
    """Both variants predict identically in every seed: the estimate is exactly 0. The paired t
    was floored, the MixedLM cross-check was not (SE 0), and the whole claim read "not
    evaluable: ... SE 0". Now both get the paired sampling floor (Agresti-Min: half a pseudo
    discordant sequence each way over 202, SD 0.005 per seed), and "differs by more than 0.05"
    is contradicted: the interval lies inside the margin."""
    st = _flipped_store(tmp_path / "same.zarr", [0, 0, 0])
    claims = [{**BASE, "id": "more", "kind": "difference", "margin": 0.05, "test_against": "margin"},
              {**BASE, "id": "less", "kind": "difference", "margin": 0.05, "test_against": "margin",
               "direction": "less"},
              {**BASE, "id": "eq", "kind": "equivalence", "margin": 0.05},
              {**BASE, "id": "gee", "kind": "equivalence", "margin": 0.05, "model": "gee"}]
    res = evaluate_claims(st, parse_claims(claims))
    v = dict(zip(res.claim.values, res.verdict.values, strict=True))
    assert v == {"more": "contradicted", "less": "contradicted", "eq": "supported", "gee": "supported"}, \
        list(res.reason.values)
    assert (res.estimate == 0).all()
    sd = np.sqrt(1 / 202**2)  # (b + c - (b - c)^2 / m) / m^2 with b = c = 1/2, m = 202
    np.testing.assert_allclose(res.se.values, sd / np.sqrt(3))
    assert (res.crosscheck_model.values != "").all()
    assert (res.crosscheck_verdict.values == res.verdict.values).all()
    assert np.isfinite(res.crosscheck_se.values).all() and (res.crosscheck_se.values > 0).all()
    for text in [*res.variance.values, *res.reason.values, *res.dropped.values]:
        assert "nan" not in str(text).lower()
    assert "paired sampling SD" in str(res.sel(claim="more").variance.values)


def test_a_crosscheck_without_a_standard_error_is_reported_not_fatal(tmp_path, monkeypatch):
    """Whatever the cross-check model returns, the claim is decided by its primary model; a
    cross-check that cannot be tested says why in ``dropped``."""
    from analysis.stats import contrasts

    real = contrasts.KERNELS["mixedlm"]

    def broken(correct, labelled):
        out = dict(real(correct, labelled))
        out["se"], out["df"] = out["se"] * 0 + 0.5, out["df"] * 0 + 0.5  # under 1 df: claim_tests refuses it
        return out

    monkeypatch.setitem(contrasts.KERNELS, "mixedlm", broken)
    st = _flipped_store(tmp_path / "x.zarr", [0, 0, 0])
    res = evaluate_claims(st, parse_claims([{**BASE, "id": "eq", "kind": "equivalence", "margin": 0.05}]))
    r = res.isel(claim=0)
    assert str(r.verdict.values) == "supported" and str(r.crosscheck_verdict.values) == ""
    assert "the cross-check mixedlm gave no verdict" in str(r.dropped.values)
    assert "nan" not in str(r.dropped.values).lower()


def test_a_uniform_larger_drop_is_never_less_significant_than_a_smaller_uneven_one(tmp_path):
    """3 seeds x 200 sequences, sequences flipped right -> wrong (2, 2, 2) per seed against
    (1, 1, 2). With the floor switched on only at SE = 0, (2, 2, 2) got the floor of two
    independent proportions (SE 0.0098, inconclusive) while (1, 1, 2) kept its seeds' SE
    0.0017 and was supported: the larger, uniform drop less significant than the smaller,
    uneven one. With the larger of the seeds' and the paired sampling variance, (2, 2, 2) is at
    least as significant, and neither is supported on 2 or 4 discordant sequences per seed."""
    claim = [{**BASE, "id": "drop", "kind": "difference", "direction": "less"}]
    uniform = evaluate_claims(_flipped_store(tmp_path / "u.zarr", [2, 2, 2]), parse_claims(claim)).isel(claim=0)
    uneven = evaluate_claims(_flipped_store(tmp_path / "v.zarr", [1, 1, 2]), parse_claims(claim)).isel(claim=0)
    assert float(uniform.estimate) == pytest.approx(-0.01) and float(uneven.estimate) == pytest.approx(-0.02 / 3)
    assert float(uniform.p) <= float(uneven.p)
    assert str(uneven.verdict.values) != "supported" or str(uniform.verdict.values) == "supported"
    # the known answers: Agresti-Min's McNemar variance per seed, averaged over the seeds
    per_seed = {k: (k + 1 - k**2 / 202) / 202**2 for k in (1, 2)}
    np.testing.assert_allclose(float(uniform.se), np.sqrt(per_seed[2] / 3))
    np.testing.assert_allclose(float(uneven.se), np.sqrt((2 * per_seed[1] + per_seed[2]) / 3 / 3))
    assert str(uniform.verdict.values) == str(uneven.verdict.values) == "inconclusive"


def test_the_floor_is_the_larger_variance_not_a_switch(tmp_path):
    """Seeds whose differences spread more than their sequences allow keep their own SE."""
    st = _flipped_store(tmp_path / "w.zarr", [0, 10, 30])
    res = evaluate_claims(st, parse_claims([{**BASE, "id": "drop", "kind": "difference", "direction": "less"}]))
    d = np.array([0, -10, -30]) / 200
    assert float(res.se.values[0]) == pytest.approx(d.std(ddof=1) / np.sqrt(3))
    assert str(res.variance.values[0]) == ""


def test_the_paired_sampling_variance_is_mcnemars():
    """Against a direct computation: per seed, b sequences right -> wrong and c wrong -> right
    of m give (b + c - (b - c)^2 / m) / m^2; adjusted, b + 1/2, c + 1/2 and m + 2 (Agresti and
    Min 2005). Several positions per sequence: the sandwich variance with sequences as units."""
    rng = np.random.default_rng(0)
    m = 150
    for b, c in ((0, 0), (3, 0), (7, 4), (30, 45)):
        ref = rng.random(m) < 0.7
        ref[: b + c] = [True] * b + [False] * c
        trt = ref.copy()
        trt[:b] = False
        trt[b: b + c] = True
        C = np.stack([ref, trt]).astype(float)[:, None, :]
        L = np.ones_like(C)
        raw = paired_sampling_var(C, L, adjusted=False)[0]
        assert raw == pytest.approx((b + c - (b - c) ** 2 / m) / m**2, abs=1e-15)
        adj = paired_sampling_var(C, L)[0]
        bt, ct, mt = b + 0.5, c + 0.5, m + 2
        assert adj == pytest.approx((bt + ct - (bt - ct) ** 2 / mt) / mt**2, rel=1e-12)
    # several positions per sequence: the variance of the mean of per-sequence differences
    Lk = rng.integers(1, 9, size=(2, 1, m)).astype(float)
    Lk[1] = Lk[0]
    Ck = rng.binomial(Lk.astype(int), 0.8).astype(float)
    d = (Ck[1, 0] - Ck[0, 0]) / Lk[0, 0]
    w = Lk[0, 0] / Lk[0, 0].sum()
    diff = (w * d).sum()
    direct = (w**2 * (d - diff) ** 2).sum()
    assert paired_sampling_var(Ck, Lk, adjusted=False)[0] == pytest.approx(direct, rel=1e-12)
    # the pseudo-counts weigh one position, not a sequence: models that agree on every one of
    # N labelled positions get (1/2 + 1/2) / (N + 2)^2
    same = np.stack([Ck[0], Ck[0]])
    assert paired_sampling_var(same, Lk)[0] == pytest.approx(1 / (Lk[0].sum() + 2) ** 2, rel=1e-12)
    # a seed missing one condition has none; the one-sample floor is p~ (1 - p~) / m
    C2 = np.concatenate([C, np.zeros_like(C)], axis=1)
    L2 = np.concatenate([L, np.stack([np.ones(m), np.zeros(m)])[:, None, :]], axis=1)
    assert np.isnan(paired_sampling_var(C2, L2)[1])
    p = 0.9
    assert proportion_sampling_var(p, 200) == pytest.approx((200 * p + 2) / 204 * (1 - (200 * p + 2) / 204) / 200)
