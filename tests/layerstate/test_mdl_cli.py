"""`layerstate mdl` says how much work it will do, stores results/mdl/<task> with its settings,
and prints each run's compression per layer beside the control's."""

from __future__ import annotations

import re

from click.testing import CliRunner

from layerstate.cli import main
from tests.analysis.probes.test_probes import make


def test_mdl_announces_stores_and_prints_compression(tmp_path):
    st = make(tmp_path, runs=("r0", "r1"), n=160, lengths=(8,), positions=(7,))
    res = CliRunner().invoke(main, ["mdl", str(st.location), "--scheduler", "sync"])
    assert res.exit_code == 0, res.output
    assert res.stderr.startswith("mdl: 2 runs × 1 length (8) × up to 3 layers × the last labelled position = "
                                 "6 cells, each coded in up to 11 blocks (C per block from 5 values), with the "
                                 "permute control; roughly ")
    lines = res.stdout.splitlines()
    assert lines[-1] == "stored results/mdl/toy"
    row = next(x for x in lines if x.startswith("r0 len8:"))
    vals = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", row)}
    assert vals["L1"] > 2 and abs(vals["embed"] - 1) < 0.15  # planted at L1, position 7
    ds = st.read_result("mdl/toy")
    assert ds.attrs["command"] == "layerstate mdl" and ds.attrs["control"] == "permute"
    assert ds.attrs["positions"] == "last" and ds.attrs["portions"][0] == 0.001


def test_mdl_quiet_and_bad_method(tmp_path):
    st = make(tmp_path, runs=("r0",), n=60, lengths=(8,))
    res = CliRunner().invoke(main, ["mdl", str(st.location), "--scheduler", "sync", "-q", "--layers", "L1"])
    assert res.exit_code == 0 and "cells" not in res.output
    bad = CliRunner().invoke(main, ["mdl", str(st.location), "--method", "screen"])
    assert bad.exit_code == 2 and "screen" in bad.output
