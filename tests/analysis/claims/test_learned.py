"""The "learned" claim (trained minus untrained probe accuracy at a layer above a margin, a
difference claim over variants): known answers on planted stores, probed as a run would be.

Each run's hidden state at L0 carries the parity label along one direction when the label is
planted, and is noise otherwise; the trained ``default`` runs and the ``untrained`` baseline
of the same seeds are probed together, exactly alike."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.claims import evaluate_claims, parse_claims, stored_probe_profiles
from store import Store
from tests.conftest import synthetic_arrays

SEEDS = range(4)
LENGTH = 12


def _planted_store(path, *, untrained_reads: bool, baseline: str = "untrained", flag: bool = False) -> Store:
    """Trained runs hold the parity label at L0 (layer index 1); the untrained ones (variant
    ``baseline``; with ``flag``, recorded ``untrained`` as `layerstate train` does) too when
    ``untrained_reads``, else only noise there."""
    st = Store.create(str(path))
    rng = np.random.default_rng(5)
    with st.deferred_consolidation():
        for variant in ("default", baseline):
            for seed in SEEDS:
                rid = f"parity-lstm-{variant}-s{seed}"
                st.add_run(rid, task="parity", arch="lstm", variant=variant, seed=seed)
                if flag and variant == baseline:
                    st.update_run_attrs(rid, untrained=True)
                arrs = synthetic_arrays(rng, n=96, length=LENGTH, n_layers=2, n_features=6)
                if variant == "default" or untrained_reads:
                    sign = 2.0 * arrs["labels"]["parity"] - 1
                    arrs["hidden"][:, :, 1, 0] += 3.0 * sign
                st.write_length(rid, LENGTH, **arrs)
    from analysis.probes import probe

    probe(st, "parity", positions="pooled", folds=2, method="screen", scheduler="sync", save=True)
    return st


def learned(cid: str, layer: str, **over) -> dict:
    return {"id": cid, "statement": "the label is readable at the layer because training put it there",
            "kind": "difference", "metric": "probe_accuracy", "task": "parity", "arch": "lstm",
            "layer": layer, "compare": "variant", "treatment": "default", "reference": "untrained",
            "direction": "greater", "margin": 0.05, "test_against": "margin", **over}


def _rows(res):
    return {str(c): res.sel(claim=c) for c in res.claim.values}


def test_a_label_only_training_put_there_is_learned(tmp_path):
    st = _planted_store(tmp_path / "s.zarr", untrained_reads=False)
    rows = _rows(evaluate_claims(st, parse_claims([learned("L0", "L0")]), probes=stored_probe_profiles(st)))
    row = rows["L0"]
    assert str(row.verdict.values) == "supported", str(row.reason.values)
    assert float(row.estimate) > 0.3 and float(row.lower) > 0.05  # ~0.98 trained, ~0.5 untrained


def test_a_label_the_untrained_model_holds_too_is_not_learned(tmp_path):
    """Both read the label at L0: the difference lies inside the margin. "More than the margin"
    is then refuted (contradicted); the same claim tested against zero (each claim its own
    family here) says the two are equivalent within ±0.05."""
    st = _planted_store(tmp_path / "s.zarr", untrained_reads=True)
    probes = stored_probe_profiles(st)
    rows = {**_rows(evaluate_claims(st, parse_claims([learned("margin", "L0")]), probes=probes)),
            **_rows(evaluate_claims(st, parse_claims([learned("zero", "L0", test_against="zero")]), probes=probes))}
    assert str(rows["margin"].verdict.values) == "contradicted", str(rows["margin"].reason.values)
    assert str(rows["zero"].verdict.values) == "equivalent", str(rows["zero"].reason.values)
    for row in rows.values():
        assert -0.05 < float(row.lower) <= float(row.estimate) <= float(row.upper) < 0.05
        assert int(row.n_seeds) == len(SEEDS)


@pytest.mark.parametrize("metric", ["accuracy", "ablation_drop"])
def test_claims_on_an_untrained_models_own_readout_are_refused(metric):
    from layerstate.experiment import ExperimentError, parse_experiment

    claim = learned("x", "L0", metric=metric, **({"setting": "probe"} if metric == "ablation_drop" else {}))
    if metric == "accuracy":
        claim = {k: v for k, v in claim.items() if k != "layer"} | {"length": 40}
    data = {"experiment": {"name": "t"},
            "grid": {"tasks": ["parity"], "archs": ["lstm"], "variants": ["default", "untrained"], "seeds": [0]},
            "variants": {"untrained": {"train": False}}, "capture": {"lengths": [40]},
            "analysis": {"ablate": True}, "claims": [claim]}
    with pytest.raises(ExperimentError, match=(
            rf"claim 'x': {metric} measures the model's own readout, which variant 'untrained' never "
            r"trained \(chance by construction\); compare probe_accuracy")) as info:
        parse_experiment(data, source="exp.toml")
    assert "\n" not in str(info.value)
    ok = parse_experiment({**data, "claims": [learned("x", "L0")]}, source="exp.toml")
    assert [c.id for c in ok.claims] == ["x"]
