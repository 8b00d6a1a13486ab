"""`layerstate stability` says how much work it will do, stores results/stability/<task> with the
probe result it read, and prints per layer the mean overlap over seed pairs, its interval and
the null; without a probe result it says what to run."""

from __future__ import annotations

import re

from click.testing import CliRunner

from analysis.probes import probe
from layerstate.cli import main
from tests.analysis.probes.stability_stores import rotated_seeds


def test_stability_announces_stores_and_prints_agreement(tmp_path):
    st = rotated_seeds(tmp_path / "s.zarr", seeds=3, same=False)
    probe(st, "y", positions="last", save=True, scheduler="sync")
    res = CliRunner().invoke(main, ["stability", str(st.location)])
    assert res.exit_code == 0, res.output
    assert res.stderr.startswith("stability: 1 cell, 3 seed pairs × 1 length (8) × 3 layers = 9 maps; roughly ")
    lines = res.stdout.splitlines()
    assert lines[-1] == "stored results/stability/toy"
    # the probe result it read, with that result's settings (issue 73 item 6)
    assert lines[0].startswith("read the probes of probes/toy (target y, positions last, ") and "control" in lines[0]
    row = next(x for x in lines if x.startswith("toy/lstm/default len8:"))
    vals = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", row)}
    assert vals["L1"] < 0.3  # unrelated directions per seed: about the null
    assert "null 0.08" in row
    ds = st.read_result("stability/toy")
    assert ds.attrs["command"] == "layerstate stability" and ds.attrs["probe_result"] == "probes/toy"
    quiet = CliRunner().invoke(main, ["stability", str(st.location), "-q", "--layers", "L1"])
    assert quiet.exit_code == 0 and "maps" not in quiet.output


def test_stability_without_probes_says_what_to_run(tmp_path):
    st = rotated_seeds(tmp_path / "s.zarr", seeds=2)
    res = CliRunner().invoke(main, ["stability", str(st.location)])
    assert res.exit_code != 0
    assert "no probe result probes/toy" in res.output and "layerstate probe STORE" in res.output
