"""Capture: every layer into the store, deterministic, resumable under kill -9, bounded memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from capture.record import capture_counterfactuals, capture_length, check_length
from capture.train import rebuild_model, train_run
from store import MissingError, Store, validate
from tests.capture.test_train import tiny_experiment


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A store with one tiny trained LSTM on Dyck (two labels: depth and top)."""
    path = tmp_path_factory.mktemp("cap") / "s.zarr"
    st = Store.create(str(path))
    spec = tiny_experiment(task="dyck", steps=10).runs()[0]
    train_run(st, spec)
    return path, spec.run_id


def _copy(trained, tmp_path) -> Store:
    import shutil

    shutil.copytree(trained[0], tmp_path / "s.zarr")
    return Store.open(str(tmp_path / "s.zarr"), mode="r+")


def test_capture_writes_every_layer_label_and_logit(trained, tmp_path):
    st = _copy(trained, tmp_path)
    rid = trained[1]
    capture_length(st, rid, 24, n_sequences=50)
    ds = Store.open(str(st.location)).open_length(rid, 24)
    assert list(ds.layer.values) == ["embed", "L0", "L1"]
    assert ds.hidden.shape == (50, 24, 3, 20) and set(ds.attrs["labels"]) == {"depth", "top"}
    assert ds.attrs["target"] == "top"
    # the stored hidden states and logits are the model's own, for the stored tokens
    model = rebuild_model(st, rid)
    tok = torch.as_tensor(ds.tokens.values[:5].astype("int64"))
    logits, hidden = model.forward_with_hidden(tok)
    np.testing.assert_allclose(ds.hidden.values[:5], hidden.detach().numpy(), atol=2e-2, rtol=1e-2)
    np.testing.assert_allclose(ds.logits.values[:5], logits.detach().numpy(), atol=2e-2, rtol=1e-2)
    assert validate(st).ok


def test_same_experiment_gives_bit_identical_captures(trained, tmp_path):
    a = _copy(trained, tmp_path / "a")
    b = _copy(trained, tmp_path / "b")
    for st in (a, b):
        capture_length(st, trained[1], 12, n_sequences=40)
    da, db = a.load_length(trained[1], 12), b.load_length(trained[1], 12)
    for v in ("hidden", "tokens", "logits", "top", "depth", "mask"):
        np.testing.assert_array_equal(da[v].values, db[v].values)


def test_counterfactual_twins_differ_only_where_recorded(trained, tmp_path):
    st = _copy(trained, tmp_path)
    capture_counterfactuals(st, trained[1], 12, n_pairs=20)
    clean = st.load_length(trained[1], 12, kind="cfclean")
    bad = st.load_length(trained[1], 12, kind="cfcorrupt")
    rows = np.arange(20)
    pc = clean.pos_corrupt.values
    assert (clean.tokens.values[rows, pc] != bad.tokens.values[rows, pc]).all()
    assert np.array_equal(clean.pos_label.values, bad.pos_label.values)
    pl = clean.pos_label.values
    assert (clean.top.values[rows, pl] != bad.top.values[rows, pl]).all()
    # before the edit, the twins' activations are identical (causal models)
    first = pc.min()
    np.testing.assert_array_equal(clean.hidden.values[:, :first], bad.hidden.values[:, :first])


def test_capturing_an_untrained_run_is_refused(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    with pytest.raises(MissingError, match="no trained weights.*layerstate train"):
        capture_length(st, "r0", 12, n_sequences=8)


def test_length_beyond_the_position_limit_is_named():
    class Model:
        max_length = 64

    with pytest.raises(ValueError, match="at most 64 positions.*drop length 100"):
        check_length(Model(), "r0", 100)


KILLED = r"""
import sys
from capture.record import capture_length
from store import Store
st = Store.open(sys.argv[1], mode="r+")
capture_length(st, sys.argv[2], 24, n_sequences=3000, block_size=150, batch_size=50)
print("done")
"""


def _blocks_done(path: Path, rid: str) -> int:
    try:
        grp = Store.open(str(path), mode="r+").root[f"runs/{rid}/len_024"]
        return len(grp.attrs.get("completed_blocks", []))
    except Exception:
        return 0


@pytest.mark.slow
def test_capture_killed_at_several_points_resumes_bit_identically(trained, tmp_path):
    ref = _copy(trained, tmp_path / "ref")
    capture_length(ref, trained[1], 24, n_sequences=3000, block_size=150, batch_size=50)
    ref_ds = ref.load_length(trained[1], 24)
    st = _copy(trained, tmp_path / "kill")
    path, rid = Path(str(st.location)), trained[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-c", KILLED, str(path), rid]
    seen = []
    for target in (2, 7, 13):  # kill once this many of the 20 blocks are recorded
        p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 120
        while _blocks_done(path, rid) < target and p.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        seen.append(_blocks_done(path, rid))
    assert all(0 < s < 20 for s in seen) and seen == sorted(seen), seen
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    ds = Store.open(str(path)).load_length(rid, 24)
    for v in ("hidden", "tokens", "logits", "top", "depth", "mask"):
        np.testing.assert_array_equal(ds[v].values, ref_ds[v].values)


def _peak_rss_of(code: str) -> int:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_number_of_sequences(trained, tmp_path):
    peaks = {}
    for n in (1000, 10000):
        st = _copy(trained, tmp_path / str(n))
        code = (
            "import resource\n"
            "from capture.record import capture_length\nfrom store import Store\n"
            f"st = Store.open({str(st.location)!r}, mode='r+')\n"
            f"capture_length(st, {trained[1]!r}, 120, n_sequences={n})\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        )
        peaks[n] = _peak_rss_of(code)
    # 10x the sequences (260 MB more float32 activations) within 1.2x the peak memory
    assert peaks[10000] <= 1.2 * peaks[1000], peaks


def test_extra_sites_by_pattern_are_stored_beside_hidden(trained, tmp_path):
    st = _copy(trained, tmp_path)
    capture_length(st, trained[1], 12, n_sequences=20, sites=["L*.cell"])  # a glob pattern
    ds = st.load_length(trained[1], 12)
    assert ds.site_L0_cell.dims == ("sequence", "position", "site_L0_cell_feature")
    assert ds.site_L0_cell.shape == (20, 12, 20) and ds.attrs["sites"] == ["L0.cell", "L1.cell"]
    assert np.isfinite(ds.site_L1_cell.values).all()
    with pytest.raises(ValueError, match="matches no site.*L0.cell"):
        capture_length(st, trained[1], 24, n_sequences=4, sites=["L9.nothing"])


def test_experiment_that_no_longer_matches_the_store_is_refused(trained, tmp_path):
    from layerstate.pipeline import capture_experiment

    st = _copy(trained, tmp_path)
    changed = tiny_experiment(task="dyck", steps=10, tasks={"dyck": {"k": 3}})
    with pytest.raises(ValueError, match="no longer matches run .*config hash"):
        capture_experiment(changed, str(st.location))
