"""`layerstate import npy`: logits by name and the target label chosen or said (issue 54, item 8)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from layerstate.cli import main
from store import Store

N, L, D, V = 32, 10, 8, 5


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def source(tmp_path):
    """A directory as docs/guide/importers.md describes it, the logits under another name."""
    rng = np.random.default_rng(0)
    acts = tmp_path / "acts"
    acts.mkdir()
    for name in ("embed", "L0", "L1"):
        np.save(acts / f"{name}.npy", rng.standard_normal((N, L, D)).astype("float32"))
    logits = rng.standard_normal((N, L, V)).astype("float32")
    np.save(acts / "lm_logits.npy", logits)
    np.save(acts / "tokens.npy", rng.integers(0, V, (N, L)))
    rows = [(s, p, int(rng.integers(0, 2)), int(rng.integers(0, 3))) for s in range(N) for p in range(L)]
    pd.DataFrame(rows, columns=["sequence", "position", "planted", "depth"]).to_csv(tmp_path / "labels.csv",
                                                                                   index=False)
    return acts, tmp_path / "labels.csv", logits


def test_logits_by_name_and_a_chosen_target(source, tmp_path):
    acts, labels, logits = source
    out = tmp_path / "mine.zarr"
    res = cli("import", "npy", acts, out, "--run", "r0", "--labels", labels)
    assert res.exit_code == 2 and "--logits lm_logits" in res.output and not out.exists()
    res = cli("import", "npy", acts, out, "--run", "r0", "--labels", labels, "--logits", "lm_logits",
              "--target", "depth")
    assert res.exit_code == 0, res.output
    assert "layers embed, L0, L1;" in res.output and "(target depth)" in res.output
    assert "logits from 'lm_logits' (5 classes)" in res.output
    ds = Store.open(str(out)).load_length("r0", L)
    np.testing.assert_allclose(ds.logits.values, logits.astype("float16"), rtol=0, atol=0)
    assert list(ds.layer.values) == ["embed", "L0", "L1"]
    grp = Store.open(str(out)).run_group("r0")["len_010"]
    assert grp.attrs["target"] == "depth"


def test_the_default_target_is_said_and_a_wrong_one_refused(source, tmp_path):
    acts, labels, _ = source
    out = tmp_path / "mine.zarr"
    res = cli("import", "npy", acts, out, "--run", "r0", "--labels", labels, "--logits", "lm_logits")
    assert res.exit_code == 0, res.output
    assert "target planted: the first label column" in res.output and "--target" in res.output
    assert Store.open(str(out)).run_group("r0")["len_010"].attrs["target"] == "planted"
    res = cli("import", "npy", acts, out, "--run", "r1", "--labels", labels, "--logits", "lm_logits",
              "--target", "dept")
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "target 'dept' is not a label of this import (labels: planted, depth)" in res.output
    assert Store.open(str(out)).run_ids() == ["r0"]  # nothing written
