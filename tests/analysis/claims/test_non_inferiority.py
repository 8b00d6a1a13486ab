"""The non_inferiority kind (a new kind in one class, issue 70): "the treatment is not worse than
the reference by more than the margin", tested one-sided against -margin, on planted stores
whose truth is known, and counted, planned and designed like the other kinds."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.claims import evaluate_claims, make_claim, parse_claims
from analysis.claims.hypotheses import from_claim
from analysis.claims.kinds import NonInferiorityClaim
from analysis.claims.verdicts import family_share
from store import Store
from tests.analysis.claims.test_claims import _write_run


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """5 seeds x 400 sequences: no_conv loses 1 pp on s3 (inside a 5 pp margin) and 15 pp on dyck."""
    st = Store.create(str(tmp_path_factory.mktemp("noninf") / "s.zarr"))
    rng = np.random.default_rng(5)
    with st.deferred_consolidation():
        for seed in range(5):
            offset = rng.normal(0, 0.003)
            for task, drop in (("s3", 0.01), ("dyck", 0.15)):
                _write_run(st, f"{task}-d-{seed}", task, "default", seed, 0.85 + offset, rng, n=400, L=20)
                _write_run(st, f"{task}-n-{seed}", task, "no_conv", seed, 0.85 + offset - drop, rng, n=400, L=20)
    return st


def _claim(cid: str, task: str, **over) -> dict:
    return {"id": cid, "statement": f"no_conv is about as accurate on {task}", "kind": "non_inferiority",
            "task": task, "arch": "mamba", "treatment": "no_conv", "reference": "default", "length": 20,
            "margin": 0.05, "direction": "greater", **over}


def test_a_small_loss_is_non_inferior_and_a_large_one_contradicted(planted):
    res = evaluate_claims(planted, parse_claims([_claim("s3", "s3"), _claim("dyck", "dyck")]))
    s3, dyck = res.sel(claim="s3"), res.sel(claim="dyck")
    assert str(s3.verdict.values) == "supported", str(s3.reason.values)
    assert -0.05 < float(s3.lower) < float(s3.estimate) < 0  # it does lose a little: not superiority
    assert "not worse than default by more than 0.05" in str(s3.reason.values)
    assert str(dyck.verdict.values) == "contradicted", str(dyck.reason.values)
    assert float(dyck.upper) < -0.05
    assert "non-inferiority, one-sided, above -0.05" in str(s3.test.values)


def test_a_difference_claim_could_not_say_it(planted):
    """The same data as a difference claim with the margin: "equivalent" needs the interval
    inside ±0.05 on both sides, and a two-sided test of zero; the one-sided question is this kind's."""
    diff = _claim("s3", "s3", kind="difference", direction="two-sided")
    res = evaluate_claims(planted, parse_claims([diff]))
    assert str(res.verdict.values[0]) != "supported"


def test_it_counts_plans_and_designs_like_a_one_sided_claim():
    c = make_claim(**_claim("c", "s3", arch=None, compare="arch", treatment="mamba", reference="based",
                            variant="default"))
    assert isinstance(c, NonInferiorityClaim)
    assert family_share([c]) == (1, 0, 1)  # its own test, and the opposite side's
    assert c.plan_test(-0.01) == ("one-sided", 0.05)
    h = from_claim(c)
    assert (h.test, h.value) == ("greater", -0.05)
    lower = make_claim(**_claim("e", "s3", direction="less"))  # lower is better (an error rate)
    assert lower.contra_value() == 0.05 and from_claim(lower).test == "less"
    with pytest.raises(ValueError, match="needs direction = 'greater'"):
        make_claim(**_claim("x", "s3", direction="two-sided"))
