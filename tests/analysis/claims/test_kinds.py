"""Claims by kind (issue 70 item 1): one class per kind owns its fields and its test, and nothing
outside analysis/claims/kinds compares the kind string."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from analysis.claims import ClaimError, make_claim, parse_claims
from analysis.claims.kinds import (
    KINDS,
    BoundClaim,
    DifferenceClaim,
    ProfileMatchClaim,
    kind_class,
    trait,
)
from analysis.claims.kinds.base import OWNED, listed
from analysis.claims.verdicts import family_share

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("store", "capture", "analysis", "reports", "layerstate")


def test_every_kind_parses_its_own_example_into_its_class():
    for name, cls in KINDS.items():
        (claim,) = parse_claims(tomllib.loads(cls.example)["claims"])
        assert type(claim) is cls and claim.kind == name
        assert kind_class(name) is cls


@pytest.mark.parametrize(("kind", "field", "value", "owners"), [
    ("difference", "threshold", 0.9, "readable_by and bound"),
    ("bound", "matches", "parity", "profile_match"),
    ("readable_by", "treatment", "gru", "difference, equivalence and non_inferiority"),
    ("equivalence", "test_against", "margin", "difference"),
    ("profile_match", "threshold", 0.9, "readable_by and bound"),
])
def test_a_field_of_another_kind_is_refused_in_one_line_naming_its_kinds(kind, field, value, owners):
    base = tomllib.loads(KINDS[kind].example)["claims"][0]
    with pytest.raises(ClaimError) as info:
        parse_claims([base | {field: value}], source="claims.toml")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"claims.toml: claim {base['id']!r}: ")
    assert f"{field} is for {owners} claims, not {kind} claims; drop it" in message


def test_a_default_written_out_is_not_another_kinds_field():
    base = tomllib.loads(KINDS["equivalence"].example)["claims"][0]
    (claim,) = parse_claims([base | {"test_against": "zero", "archs": []}])
    assert claim.kind == "equivalence"


def test_a_kind_that_is_none_names_the_kinds():
    with pytest.raises(ClaimError, match=r"claim 'x': kind: 'bounds' is not a kind of claim; the kinds are "
                                         r"difference, equivalence, readable_by, profile_match, bound, non_inferiority"):
        parse_claims([{"id": "x", "statement": "s", "kind": "bounds", "task": "parity"}])
    with pytest.raises(ClaimError, match=r"claim 'x': kind: missing"):
        parse_claims([{"id": "x", "statement": "s", "task": "parity"}])


def test_what_the_kinds_answer_instead_of_their_name():
    diff = make_claim(id="d", statement="s", kind="difference", task="parity", treatment="a", reference="b",
                      direction="less", margin=0.05, test_against="margin")
    prof = make_claim(id="p", statement="s", kind="profile_match", task="s3", matches="parity",
                      differs_from="dyck", archs=["lstm", "mamba"])
    bound = make_claim(id="b", statement="s", kind="bound", task="parity", arch="lstm", threshold=0.9,
                       direction="less")
    assert isinstance(diff, DifferenceClaim) and isinstance(prof, ProfileMatchClaim) and isinstance(bound, BoundClaim)
    assert diff.primary_test() == "margin" and diff.secondary_tests() == ("zero", "equivalence")
    assert diff.contra_value() == -0.05 and not diff.greater
    assert prof.row_ids() == ["p[lstm]", "p[mamba]"] and prof.own_tests() == 2
    assert bound.plan_test(0.8) == ("one-sided", pytest.approx(0.1))  # below 0.9 is the claimed side
    assert family_share([diff, prof, bound]) == (4, 2 + 2, 2)
    assert trait("difference", "compares") and trait("profile_match", "per_arch") and not trait("", "compares")


def _kind_comparisons(path: Path) -> list[int]:
    """Lines of ``path`` that compare something called ``kind`` with a claim kind's name."""
    names = set(KINDS)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        is_kind = any((isinstance(s, ast.Attribute) and s.attr == "kind") or (isinstance(s, ast.Name) and s.id == "kind")
                      for s in sides)
        consts = [c.value for s in sides for c in ast.walk(s) if isinstance(c, ast.Constant)]
        if is_kind and names & {c for c in consts if isinstance(c, str)}:
            found.append(node.lineno)
    return found


def test_only_the_kinds_package_compares_the_kind_string():
    offenders = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.is_relative_to(ROOT / "analysis" / "claims" / "kinds"):
                continue
            lines = _kind_comparisons(path)
            if lines:
                offenders[str(path.relative_to(ROOT))] = lines
    assert offenders == {}, "ask the claim (analysis.claims.kinds) instead of comparing its kind"


def test_every_owned_field_is_a_field_its_owners_read():
    for field, owners in OWNED.items():
        for name in owners:
            assert field in KINDS[name].model_fields and field in KINDS[name].owns
    assert listed(["a"]) == "a" and listed(["a", "b"]) == "a and b" and listed(["a", "b", "c"]) == "a, b and c"


def test_every_kind_writes_the_methods_the_base_leaves_abstract():
    from analysis.claims.kinds import ClaimBase

    for name, cls in KINDS.items():
        for method in ("decide", "judged_power", "hypothesis"):
            assert getattr(cls, method) is not getattr(ClaimBase, method), (name, method)
