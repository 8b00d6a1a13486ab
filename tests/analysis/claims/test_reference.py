"""docs/claims.md is written from the claim model and cannot drift from it (issue 47, item 6)."""

from __future__ import annotations

from pathlib import Path

from analysis.claims.kinds import KINDS, ClaimBase
from analysis.claims.kinds.base import OWNED, listed
from analysis.claims.reference import EXAMPLES, render
from analysis.claims.spec import OUTCOMES, REQUIRED

PAGE = Path(__file__).resolve().parents[3] / "docs" / "claims.md"


def test_the_page_is_what_the_model_writes():
    assert PAGE.read_text() == render(), "regenerate: python -m analysis.claims.reference > docs/claims.md"


def test_every_field_kind_default_and_outcome_appears():
    text = PAGE.read_text()
    for name, field in ClaimBase.model_fields.items():
        row = next((line for line in text.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, name
        assert (field.description or "").split("(")[0].strip()[:40].replace("|", "\\|") in row, name
    for kind in KINDS:
        assert f"#### `{kind}`" in text and kind in EXAMPLES and kind in REQUIRED
    for name, kinds in OWNED.items():  # a field some kinds own says which
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        assert f"({listed(kinds)} claims only)" in row, name
    for verdict in OUTCOMES:
        assert f"| `{verdict}` |" in text
    assert "holds only `[[claims]]` tables" in text  # a claims file need not be an experiment


def test_the_docs_index_links_the_page():
    assert "(claims.md)" in (PAGE.parent / "README.md").read_text()
