"""Claims on MDL compression (metric = "mdl_compression"): per seed, the stored compression
profile at the claim's layer; a planted layer's compression is claimed above 1.5 and above the
embedding's, a layer that does not carry the label is not."""

from __future__ import annotations

import pytest

from analysis.claims import evaluate_claims, parse_claims
from analysis.claims.metrics import ClaimInputs, seed_metric
from analysis.probes import mdl_probe
from store import MissingError
from tests.analysis.probes.test_probes import make

BOUND = {"statement": "s", "kind": "bound", "task": "toy", "arch": "lstm", "metric": "mdl_compression",
         "direction": "greater", "statistic": "mean", "length": 8}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    st = make(tmp_path_factory.mktemp("mdl-claims"), runs=tuple(f"r{i}" for i in range(5)), n=160,
              lengths=(8,), positions=(7,))
    mdl_probe(st, "y", positions="last", save=True, scheduler="sync")
    return st


def test_seed_metric_reads_the_stored_compression_profile(store):
    claim = parse_claims([{**BOUND, "id": "c", "layer": "L1", "threshold": 1.5}])[0]
    da = seed_metric(ClaimInputs(store), claim)
    stored = store.read_result("mdl/toy").compression_profile.sel(length=8)
    assert sorted(da.seed.values.tolist()) == list(range(5))
    assert float(da.sel(task="toy", arch="lstm", layer="L1").mean()) == pytest.approx(
        float(stored.sel(layer="L1").mean()))
    assert da.attrs["results"] == "mdl/toy"


def test_bound_and_layer_claims_on_compression(store):
    res = evaluate_claims(store, parse_claims([
        {**BOUND, "id": "planted", "layer": "L1", "threshold": 1.5},
        {**BOUND, "id": "embed", "layer": "embed", "threshold": 1.2},
        {"id": "jump", "statement": "s", "kind": "difference", "metric": "mdl_compression", "task": "toy",
         "arch": "lstm", "compare": "layer", "treatment": "L1", "reference": "embed", "direction": "greater",
         "length": 8},
    ]))
    verdicts = {str(c): str(v) for c, v in zip(res.claim.values, res.verdict.values, strict=True)}
    assert verdicts == {"planted": "supported", "embed": "contradicted", "jump": "supported"}
    assert "MDL compression at L1" in str(res.sel(claim="planted").test.values)
    assert str(res.sel(claim="planted").result.values) == "mdl/toy"


def test_claim_without_mdl_result_says_what_to_run(tmp_path):
    st = make(tmp_path, runs=("r0", "r1"), n=40, lengths=(8,))
    with pytest.raises(MissingError, match=r"no mdl results .* run `layerstate mdl STORE --task toy --lengths 8`"):
        evaluate_claims(st, parse_claims([{**BOUND, "id": "c", "layer": "L1", "threshold": 1.5}]))
