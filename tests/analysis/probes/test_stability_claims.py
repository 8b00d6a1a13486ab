"""Claims on cross-seed stability (metric = "probe_stability"): per seed, the stored jackknife
pseudo-value at the claim's layer; seeds whose label lies along one direction up to rotation are
claimed to agree above the null, seeds with unrelated directions are not."""

from __future__ import annotations

import pytest

from analysis.claims import evaluate_claims, parse_claims
from analysis.claims.metrics import ClaimInputs, seed_metric
from analysis.probes import probe, probe_stability
from tests.analysis.probes.stability_stores import rotated_seeds

BOUND = {"statement": "s", "kind": "bound", "task": "toy", "arch": "lstm", "metric": "probe_stability",
         "direction": "greater", "statistic": "mean", "length": 8, "layer": "L1", "threshold": 0.3}


def _store(path, same):
    st = rotated_seeds(path, seeds=5, same=same)
    probe(st, "y", positions="last", save=True, scheduler="sync")
    probe_stability(st, "probes/toy", save=True)
    return st


def test_seed_metric_reads_the_pseudo_values_whose_mean_is_the_pair_mean(tmp_path):
    st = _store(tmp_path / "s.zarr", same=True)
    claim = parse_claims([{**BOUND, "id": "c"}])[0]
    da = seed_metric(ClaimInputs(st), claim)
    stored = st.read_result("stability/toy")
    assert sorted(da.seed.values.tolist()) == list(range(5))
    assert float(da.sel(task="toy", arch="lstm", layer="L1").mean()) == pytest.approx(
        float(stored.stability_estimate.sel(length=8, layer="L1").squeeze()))
    res = evaluate_claims(st, parse_claims([{**BOUND, "id": "agree"}]))
    assert str(res.sel(claim="agree").verdict.values) == "supported"
    assert "seed agreement of the probe subspaces at L1" in str(res.sel(claim="agree").test.values)


def test_unrelated_directions_are_not_claimed_to_agree(tmp_path):
    st = _store(tmp_path / "s.zarr", same=False)
    res = evaluate_claims(st, parse_claims([{**BOUND, "id": "agree"}]))
    assert str(res.sel(claim="agree").verdict.values) in ("contradicted", "inconclusive")


def test_a_seed_trained_since_makes_the_stability_result_stale(tmp_path):
    """A stability result computed before a sixth seed was trained and captured does not decide
    a claim on five: the claim is refused and names the missing run (it used to look for
    counterfactual twins, which stability never reads, and so found nothing missing)."""
    import numpy as np

    from analysis.claims.spec import StaleResultError

    st = _store(tmp_path / "s.zarr", same=True)
    g = np.random.default_rng(9)
    st.add_run("r5", task="toy", arch="lstm", seed=5)
    st.write_length("r5", hidden=g.standard_normal((160, 8, 3, 12)).astype(np.float32),
                    tokens=g.integers(0, 4, (160, 8)), labels={"y": g.integers(0, 2, (160, 8))}, block_size=64)
    with pytest.raises(StaleResultError, match=r"reads stability/toy, which lacks 1 run"):
        evaluate_claims(st, parse_claims([{**BOUND, "id": "agree"}]))
