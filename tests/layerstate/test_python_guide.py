"""docs/guide/python.md runs as it stands: its code blocks, in order, in one namespace, in an
empty folder (issue 73 item 4). A block that stops working fails here, with the block named."""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "python.md"


def test_every_block_of_the_python_guide_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), re.S | re.M)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    space: dict = {"__name__": "guide"}
    for i, block in enumerate(blocks, 1):
        try:
            exec(compile(block, f"{GUIDE.name} block {i}", "exec"), space)  # noqa: S102 -- the guide's own code
        except Exception as exc:
            raise AssertionError(f"block {i} of {GUIDE.name} failed: {exc!r}\n{block}") from exc
    assert (tmp_path / "profile.png").stat().st_size > 1000
    assert "results/claims" not in space["st"].results() and "claims" in space["st"].results()
