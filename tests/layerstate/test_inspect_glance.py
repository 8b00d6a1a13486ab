"""`layerstate inspect` at a glance: one row per cell, each note once (issue 54, item 4)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from layerstate.cli import main
from store import Store
from tests.conftest import synthetic_arrays

WIDTH = {"lstm": 10, "gru": 9}  # hidden_size, parameter-matched to a Transformer layer of d_model 8


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def twelve(tmp_path):
    """Parity and Dyck x LSTM/GRU x 3 seeds, as the issue's receiver had; Dyck's GRU seed 2 is
    missing its length 16 and Parity's LSTM seed 1 was cut short at length 12."""
    st = Store.create(str(tmp_path / "acts.zarr"), title="twelve")
    rng = np.random.default_rng(0)
    for task in ("parity", "dyck"):
        for arch in ("lstm", "gru"):
            for seed in range(3):
                rid = f"{task}-{arch}-default-s{seed}"
                st.add_run(rid, task=task, arch=arch, seed=seed,
                           model_config={"arch": arch, "d_model": 8, "hidden_size": WIDTH[arch]})
                for L in (12, 16):
                    if (task, arch, seed, L) == ("dyck", "gru", 2, 16):
                        continue
                    arrs = synthetic_arrays(rng, n=16, length=L, n_features=WIDTH[arch])
                    if (task, arch, seed, L) == ("parity", "lstm", 1, 12):
                        with st.length_writer(rid, L, n_sequences=16, n_features=WIDTH[arch],
                                              labels=["parity", "ones"], n_layers=2, block_size=8) as w:
                            s = slice(0, 8)
                            w.write_block(0, hidden=arrs["hidden"][s], tokens=arrs["tokens"][s],
                                          labels={k: v[s] for k, v in arrs["labels"].items()},
                                          logits=arrs["logits"][s])
                        continue
                    st.write_length(rid, L, **arrs, block_size=8)
    return st.location


def test_twelve_runs_fit_one_screen_each_note_once(twelve):
    res = cli("inspect", twelve)
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) <= 20, res.output
    assert "runs     12 in 4 cells" in lines[2]
    table = lines[4:lines.index("notes    (each once, with the runs it applies to)")]
    rows = {ln.split()[0]: ln.split() for ln in table if "/default" in ln.split()[0]}
    assert sorted(rows) == ["dyck/gru/default", "dyck/lstm/default", "parity/gru/default", "parity/lstm/default"]
    # cell, seeds, weights, lengths, sequences, layers, width, dtype
    assert rows["dyck/lstm/default"][:8] == ["dyck/lstm/default", "0,1,2", "no", "12,16", "16", "embed,L0..L1",
                                             "10", "float16"]
    assert rows["dyck/lstm/default"][-1] == "complete"
    # runs that differ within a cell: the column says so, a note says which run has what
    assert rows["dyck/gru/default"][3] == "varies"
    assert "  dyck/gru/default lengths: 12 (its other runs: 12,16) — run dyck-gru-default-s2" in lines
    assert rows["parity/lstm/default"][-1] == "varies"
    assert "  len_012: INCOMPLETE 1/2 blocks — run parity-lstm-default-s1" in lines
    # the width note once per architecture, naming the cells it applies to
    width = [ln for ln in lines if "feature width" in ln]
    assert len(width) == 2 and res.output.count("= its hidden_size, not d_model 8") == 2
    assert any(ln.startswith("  feature width 10 = its hidden_size, not d_model 8") and
               ln.endswith("— dyck/lstm/default, parity/lstm/default (6 runs)") for ln in width), width
    assert "run ids  <task>-<arch>-<variant>-s<seed>" in res.output


def test_detail_and_json_still_list_every_run(twelve):
    res = cli("inspect", twelve, "--detail")
    assert res.exit_code == 0
    assert res.output.count(": task=") == 12 and "parity-lstm-default-s1: task=parity arch=lstm" in res.output
    assert "len_012: hidden 16x12x3x10 float16" in res.output
    assert res.output.count("feature width 10 = its hidden_size") == 1  # once, not per run
    info = json.loads(cli("inspect", twelve, "--json").output)
    assert len(info["runs"]) == 12 and info["runs"]["dyck-gru-default-s2"]["width"].startswith("9 = its hidden_size")
    assert info["cells"]["dyck/gru/default"]["runs"] == [f"dyck-gru-default-s{i}" for i in range(3)]
    note = next(n for n in info["notes"] if n["note"].startswith("feature width 9"))
    assert len(note["runs"]) == 6 and note["applies_to"] == "dyck/gru/default, parity/gru/default (6 runs)"
