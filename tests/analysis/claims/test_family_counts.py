"""One counting rule for the Holm families of both designs (issue 70 item 1): the fixed
design's second family holds every second test of a claim with a margin, a sequential design's
only the margin's TOST of a difference claim tested against zero; own and opposite-side counts
are the same in both."""

from __future__ import annotations

from analysis.claims.hypotheses import family_counts
from analysis.claims.spec import make_claim
from analysis.claims.verdicts import family_share

BASE = {"statement": "s", "task": "parity"}
CLAIMS = [
    make_claim(id="d0", kind="difference", compare="arch", treatment="lstm", reference="gru", margin=0.05, **BASE),
    make_claim(id="dm", kind="difference", compare="arch", treatment="lstm", reference="gru", margin=0.05,
          direction="greater", test_against="margin", **BASE),
    make_claim(id="dn", kind="difference", compare="arch", treatment="lstm", reference="gru", **BASE),
    make_claim(id="dg", kind="difference", compare="arch", treatment="lstm", reference="gru", direction="greater", **BASE),
    make_claim(id="eq", kind="equivalence", compare="arch", treatment="lstm", reference="gru", margin=0.05, **BASE),
    make_claim(id="b", kind="bound", arch="lstm", threshold=0.9, direction="greater", **BASE),
    make_claim(id="r", kind="readable_by", arch="lstm", layer="L0", threshold=0.6, **BASE),
    make_claim(id="p", kind="profile_match", matches="s3", differs_from="dyck", archs=["lstm", "gru"], **BASE),
]


def test_both_designs_count_by_one_rule():
    # own: 7 claims + 2 architectures of the profile claim; opposite side: dm, dg, eq, b, r
    fixed = family_share(CLAIMS)
    sequential = family_share(CLAIMS, design="sequential")
    # d0: equivalence; dm: zero and equivalence; eq: zero; each profile row: its test without the margin
    assert fixed == (9, 1 + 2 + 1 + 2, 5)
    assert sequential == (9, 1, 5)  # only d0's margin TOST
    assert family_counts(CLAIMS) == sequential
    for c in CLAIMS:  # claim by claim, the sequential second family is part of the fixed one
        assert family_share([c], design="sequential")[1] <= family_share([c])[1]
