"""The kinds of claim, one class each (:class:`~analysis.claims.kinds.base.ClaimBase` and its
subclasses), and :data:`Claim`, the claim of any kind: a pydantic union told apart by ``kind``.

A new kind is one module here: a subclass naming itself in ``kind``, its ``required`` fields,
the kind-specific fields it ``owns``, its test's methods (``decide``, ``hypothesis``,
``judged_power``, ``plan_test``, ...) and its worked example; then its entry in :data:`KINDS`.
Nothing outside this package compares the kind string: the rest of the package asks the
claim (its methods and class attributes), and a table's ``kind`` column is read back through
:func:`kind_class`."""

from __future__ import annotations

from typing import Annotated, Any, Literal, cast

from pydantic import Field

from analysis.claims.kinds.base import OWNED, ClaimBase
from analysis.claims.kinds.compare import DifferenceClaim, EquivalenceClaim, NonInferiorityClaim
from analysis.claims.kinds.profile import ProfileMatchClaim
from analysis.claims.kinds.threshold import BoundClaim, ReadableByClaim

#: Every kind by its name, in the order the reference lists them.
KINDS: dict[str, type[ClaimBase]] = {
    "difference": DifferenceClaim, "equivalence": EquivalenceClaim, "readable_by": ReadableByClaim,
    "profile_match": ProfileMatchClaim, "bound": BoundClaim, "non_inferiority": NonInferiorityClaim,
}



def register_kind(cls: type[ClaimBase]) -> type[ClaimBase]:
    """Make ``cls`` a kind of claim: claims files and :func:`make_claim` accept its ``kind``
    (its ``kind`` field's default), and the fields it ``owns`` are refused on other kinds. For
    a kind defined outside this package (docs/guide/extending.md); returns ``cls``, so it
    decorates the class.

    Raises
    ------
    ValueError
        For a kind whose name is taken by another class, or that names no ``kind`` default."""
    name = cls.model_fields["kind"].default
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__} names no kind: declare kind: Literal[\"name\"] = \"name\"")
    if KINDS.get(name, cls) is not cls:
        raise ValueError(f"kind {name!r} is already {KINDS[name].__name__}")
    KINDS[name] = cls
    for field in sorted(cls.owns):
        if name not in OWNED.setdefault(field, []):
            OWNED[field].append(name)
    return cls


for _cls in list(KINDS.values()):
    register_kind(_cls)

#: A claim of any kind (a field of this type is validated into the kind's class).
Claim = Annotated[
    DifferenceClaim | EquivalenceClaim | ReadableByClaim | ProfileMatchClaim | BoundClaim | NonInferiorityClaim,
    Field(discriminator="kind"),
]


def kind_class(kind: str) -> type[ClaimBase]:
    """The class of the kind named ``kind`` (a claims table's ``kind`` column).

    Raises
    ------
    ValueError
        For a name that is no kind, naming the kinds there are."""
    try:
        return KINDS[str(kind)]
    except KeyError:
        raise ValueError(f"{kind!r} is not a kind of claim; the kinds are {', '.join(KINDS)}") from None


def trait(kind: str, name: Literal["compares", "thresholded", "reads_probes", "per_arch"]) -> bool:
    """Whether the kind a table names (its ``kind`` column) has a trait of
    :class:`~analysis.claims.kinds.base.ClaimBase` (``compares``: its estimate is a signed
    difference; ``per_arch``: an exact permutation test without an interval); False for a
    name that is no kind (a table written by another tool)."""
    cls = KINDS.get(str(kind))
    return bool(getattr(cls, name)) if cls is not None else False


def make_claim(**fields: Any) -> Claim:
    """A claim of the kind ``fields["kind"]`` names, validated (pydantic's ``ValidationError``
    for bad fields; :func:`analysis.claims.spec.parse_claims` turns them into one line)."""
    return cast(Claim, kind_class(fields.get("kind", "")).model_validate(fields))


__all__ = ["KINDS", "BoundClaim", "Claim", "ClaimBase", "DifferenceClaim", "EquivalenceClaim", "NonInferiorityClaim",
           "ProfileMatchClaim",
           "ReadableByClaim", "kind_class", "make_claim", "register_kind", "trait"]
