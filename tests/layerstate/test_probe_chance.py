"""A probe of a label no layer holds says so instead of naming a best layer (issue 54, item 8)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from layerstate import present
from layerstate.cli import main
from store import Store

N, L, D = 96, 8, 6


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def planted(tmp_path):
    """Two runs whose embedding holds the label ``planted`` (its class's one-hot, plus noise) and
    whose other layers are noise; ``shuffled`` is the same labels permuted across sequences."""
    rng = np.random.default_rng(3)
    st = Store.create(str(tmp_path / "planted.zarr"))
    for i, rid in enumerate(("r0", "r1")):
        st.add_run(rid, task="mine", arch="x", seed=i)
        planted = rng.integers(0, 3, (N, L))
        shuffled = planted[rng.permutation(N)]
        hidden = rng.standard_normal((N, L, 3, D)).astype("float32")
        hidden[:, :, 0, :3] += 3 * np.eye(3, dtype="float32")[planted]
        st.write_length(rid, L, hidden=hidden, tokens=rng.integers(0, 4, (N, L)),
                        labels={"planted": planted, "shuffled": shuffled}, block_size=N)
    return st.location


def test_shuffled_label_is_at_chance_planted_one_is_not(planted, tmp_path):
    res = cli("probe", planted, "--target", "planted", "--positions", "pooled", "--folds", "3",
              "--control", "none", "--scheduler", "sync")
    assert res.exit_code == 0, res.output
    assert "r0 len8: embed=0.9" in res.output and res.output.count("  best embed") == 2
    assert "above chance" not in res.output
    res = cli("probe", planted, "--target", "shuffled", "--positions", "pooled", "--folds", "3",
              "--control", "none", "--scheduler", "sync")
    assert res.exit_code == 0, res.output
    rows = [ln for ln in res.output.splitlines() if ln.startswith(("r0 len8:", "r1 len8:"))]
    assert len(rows) == 2 and all(ln.endswith("  no layer above chance") for ln in rows), res.output
    assert "best " not in res.output
    assert "no layer of any run is above chance" in res.output
    ds = Store.open(str(planted)).read_result("probes/mine.shuffled")
    assert present.probe_summary("probes/mine.shuffled", ds, 1).endswith(
        "best layer r0:none above chance, r1:none above chance")
    ds = Store.open(str(planted)).read_result("probes/mine")
    assert present.probe_summary("probes/mine", ds, 1).endswith("best layer r0:embed, r1:embed")
