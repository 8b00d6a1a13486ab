"""A part of a grid evaluates some of a file's claims: the others stay in the Holm families
with p = 1, so no part supports a claim the whole family would not."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.claims.spec import Claim
from analysis.claims.verdicts import adjust, family_share, holm


def _claim(i: int, **over) -> Claim:
    base = {"id": f"c{i}", "statement": "s", "kind": "readable_by", "task": "parity", "arch": "lstm",
            "layer": "L1", "threshold": 0.9}
    return Claim(**(base | over))


CLAIMS = [_claim(i) for i in range(12)]


@settings(max_examples=40, deadline=None)
@given(p=st.lists(st.floats(1e-6, 1.0), min_size=2, max_size=12), data=st.data())
def test_padding_the_absent_tests_with_ones_never_adjusts_below_the_whole_familys_holm(p, data):
    held = sorted(data.draw(st.sets(st.integers(0, len(p) - 1), min_size=1)))
    whole = holm(np.array(p))
    claims = [CLAIMS[i] for i in held]
    rows = [{"p": p[i]} for i in held]
    part = adjust(claims, rows, absent=(len(p) - len(held), 0))
    for i, a in zip(held, part, strict=True):
        assert a["other"] >= whole[i] - 1e-12


def test_a_part_is_corrected_as_one_share_of_the_declared_family():
    claims = [_claim(0), _claim(1)]
    rows = [{"p": 0.01}, {"p": 0.02}]
    alone = adjust(claims, rows)
    padded = adjust(claims, rows, absent=(8, 0))
    assert [a["other"] for a in alone] == [0.02, 0.02]
    assert np.allclose([a["other"] for a in padded], [0.10, 0.18])  # 10 x 0.01, then 9 x 0.02


def test_family_share_counts_a_profile_claims_architectures_and_second_tests():
    profile = _claim(0, kind="profile_match", metric="probe_accuracy", task="s3", matches="parity",
                     differs_from="dyck", archs=["lstm", "gru", "mamba"], arch=None, layer=None, threshold=None)
    margin = _claim(1, kind="difference", compare="arch", treatment="lstm", reference="gru", margin=0.05,
                    arch=None, layer=None, threshold=None)
    assert family_share([profile, margin, _claim(2)]) == (5, 1)
