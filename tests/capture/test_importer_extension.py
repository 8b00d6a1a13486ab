"""An import format added from outside the packages (docs/guide/extending.md): one function,
registered, then read by ``layerstate import`` (and named in its help and its error for an
unknown format) like the formats layerstate ships."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import capture.importers.registry as registry
from capture.importers import ImportOptions, ImportResult, RunInfo, import_source, register_format
from capture.importers.common import Batches, as_run, options_plan, write
from layerstate.cli import main
from store import Store

N, L = 5, 6


def read_npz(store: Store | str, run: RunInfo | str, source: str | os.PathLike[str],
             options: ImportOptions) -> ImportResult:
    """One .npz file: an array per layer, (sequence, position, width), and ``tokens``."""
    with np.load(source) as f:
        arrays = {name: f[name] for name in f.files}
    tokens = arrays.pop("tokens")
    fields = {k: v for k, v in options.items() if k in ("task", "seed", "variant", "arch")}
    return write(store, as_run(run, {"arch": "npz", **fields}), Batches("an .npz file", [arrays], len(tokens)),
                 options_plan(list(arrays), options), labels=options.get("labels"), tokens=tokens,
                 dtype=options.get("dtype", "float16"), fmt="npz")


@pytest.fixture
def npz_format(monkeypatch):
    """The registry with the new format, restored afterwards."""
    monkeypatch.setattr(registry, "_FORMATS", dict(registry._FORMATS))
    register_format("npz", "one .npz file: an array per layer and tokens")(read_npz)
    return read_npz


def test_a_format_from_outside_is_read_by_the_command_line(npz_format, tmp_path):
    rng = np.random.default_rng(0)
    arrays = {k: rng.standard_normal((N, L, 4)).astype("float32") for k in ("embed", "L0", "L1")}
    np.savez(tmp_path / "acts.npz", tokens=rng.integers(0, 9, (N, L)), **arrays)
    pd.DataFrame({"sequence": [0, 2], "position": [1, 4], "depth": [3, 1]}).to_csv(
        tmp_path / "labels.csv", index=False)
    runner = CliRunner()
    assert "npz: one .npz file" in runner.invoke(main, ["import", "--help"]).output
    res = runner.invoke(main, ["import", "npz", str(tmp_path / "acts.npz"), str(tmp_path / "s.zarr"),
                               "--run", "z", "--labels", str(tmp_path / "labels.csv"), "--seed", "3"])
    assert res.exit_code == 0, res.output
    st = Store.open(str(tmp_path / "s.zarr"))
    assert st.run_attrs("z")["arch"] == "npz" and st.run_attrs("z")["seed"] == 3
    ds = st.open_length("z", L)
    np.testing.assert_array_equal(ds.hidden.sel(layer="L1").values, arrays["L1"].astype("float16"))
    assert ds.depth.values[2, 4] == 1 and int(ds["mask"].sum()) == 2
    bad = runner.invoke(main, ["import", "pickle", str(tmp_path / "acts.npz"), str(tmp_path / "s.zarr"),
                               "--run", "y"])
    assert bad.exit_code == 2 and "formats: nnsight, npy, npz, saelens" in bad.output


def test_a_taken_name_is_refused(npz_format):
    with pytest.raises(ValueError, match="import format 'npy' is already registered"):
        register_format("npy", "another reader")(read_npz)
    with pytest.raises(Exception, match="unknown import format 'npzz'"):
        import_source("npzz", "x", "s.zarr", "r")
