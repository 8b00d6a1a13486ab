"""A claim whose seeds were measured on one evaluation set says that its interval is over seeds on
those sequences only (issue 72 item 8's check; a crossed design is not modelled); seeds with
sequences of their own, as layerstate's capture draws them, say nothing."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.claims import evaluate_claims, parse_claims
from store import Store

CLAIMS = [
    {"id": "high", "statement": "S3 accuracy above 0.5", "kind": "bound", "metric": "accuracy", "task": "s3",
     "arch": "mamba", "threshold": 0.5, "direction": "greater", "length": 12},
    {"id": "conv", "statement": "Removing the conv lowers S3 accuracy", "kind": "difference", "task": "s3",
     "arch": "mamba", "treatment": "no_conv", "reference": "default", "direction": "less", "length": 12,
     "margin": 0.05},
]


def _store(path, shared: bool) -> Store:
    st = Store.create(str(path))
    rng = np.random.default_rng(0)
    n, L, C = 60, 12, 6
    fixed = rng.integers(0, C, size=(n, L))  # one evaluation set, for every seed when shared
    with st.deferred_consolidation():
        for seed in range(4):
            labels = fixed if shared else np.random.default_rng(100 + seed).integers(0, C, size=(n, L))
            for variant, p in (("default", 0.85), ("no_conv", 0.7)):
                rid = f"s3-{variant}-{seed}"
                st.add_run(rid, task="s3", arch="mamba", variant=variant, seed=seed)
                right = rng.random((n, L)) < p + rng.normal(0, 0.02)
                pred = np.where(right, labels, (labels + 1) % C)
                st.write_length(rid, L, hidden=rng.standard_normal((n, L, 2, 4)).astype("float32"), tokens=labels,
                                labels={"state": labels}, logits=np.eye(C, dtype="float32")[pred] * 5)
    return st


@pytest.mark.parametrize("shared", [True, False])
def test_seeds_on_one_evaluation_set_are_said_to_leave_the_sequences_out(tmp_path, shared):
    res = evaluate_claims(_store(tmp_path / "s.zarr", shared), parse_claims(CLAIMS))
    for cid in ("high", "conv"):
        reason = str(res.sel(claim=cid).reason.values)
        said = "were captured on the same 60 sequences (one evaluation set)" in reason
        assert said == shared, reason
    if shared:
        assert "s3/mamba/default, s3/mamba/no_conv" in str(res.sel(claim="conv").reason.values)


def test_a_design_decided_claim_carries_it_over_from_the_fixed_look(tmp_path):
    # the design rewrites the reason from its stages: the seeds' shared sequences are said again
    from analysis.claims.sequential import evaluate_sequential, sequential_verdicts
    from analysis.stats.design import Design

    st = _store(tmp_path / "s.zarr", shared=True)
    claims = parse_claims(CLAIMS[:1])
    run = evaluate_sequential(st, claims, Design(first_seeds=2, stage_seeds=1, max_seeds=4))
    reason = str(sequential_verdicts(evaluate_claims(st, claims), run).reason.values[0])
    assert reason.startswith("group-sequential design"), reason
    assert reason.count("were captured on the same 60 sequences (one evaluation set)") == 1, reason
