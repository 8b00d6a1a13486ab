"""Writers killed with SIGKILL at any point resume to a bit-identical store; one writer per run."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from store import Store, WriterLockedError

WRITER = r"""
import sys, time
import numpy as np
from store import Store
path, pause = sys.argv[1], float(sys.argv[2])
st = Store.create(path, exist_ok=True)
st.add_run("r0", task="parity", arch="lstm", seed=0)
with st.length_writer("r0", 16, n_sequences=200, n_layers=2, n_features=24,
                      labels=["parity"], n_classes=2, block_size=20) as w:
    for b in w.missing_blocks():
        start, stop = w.block_range(b)
        rng = np.random.default_rng(1000 + b)   # data depends only on the block: deterministic
        m = stop - start
        tok = rng.integers(0, 2, (m, 16))
        w.write_block(b, hidden=rng.standard_normal((m, 16, 3, 24)), tokens=tok,
                      labels={"parity": np.cumsum(tok, 1) % 2},
                      logits=rng.standard_normal((m, 16, 2)))
        time.sleep(pause)
print("finished")
"""


def _run_writer(path: Path, pause: float = 0.0, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(pause)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _chunk_digests(path: Path) -> dict[str, str]:
    """Hash of every chunk file (metadata holds timestamps, so compare data bytes)."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and "/c/" in str(p.relative_to(path)) + "/"
            and p.name != "zarr.json"}


def _completed(path: Path) -> int:
    try:
        st = Store.open(str(path), mode="r+")
        return len(st.root["runs/r0/len_016"].attrs.get("completed_blocks", []))
    except Exception:
        return -1


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    ref = tmp_path_factory.mktemp("ref") / "s.zarr"
    p = _run_writer(ref)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return ref


@pytest.mark.slow
@pytest.mark.parametrize("kill_after_blocks", [0, 1, 4, 9])
def test_sigkill_then_resume_is_bit_identical(tmp_path, reference, kill_after_blocks):
    path = tmp_path / "s.zarr"
    p = _run_writer(path, pause=0.15)
    deadline = time.time() + 60
    while _completed(path) < kill_after_blocks and time.time() < deadline:
        time.sleep(0.01)
    if kill_after_blocks == 0:
        time.sleep(0.3)  # somewhere in store creation or the first block
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    before = _completed(path)
    q = _run_writer(path)
    out, err = q.communicate(timeout=120)
    assert q.returncode == 0, err
    st = Store.open(str(path))
    ds = st.open_length("r0", 16)
    ref = Store.open(str(reference)).open_length("r0", 16)
    assert ds.sizes["sequence"] == 200 and before < 10
    np.testing.assert_array_equal(ds.hidden.values, ref.hidden.values)
    np.testing.assert_array_equal(ds.parity.values, ref.parity.values)
    assert _chunk_digests(path) == _chunk_digests(reference)


def test_second_writer_to_the_same_run_is_refused(tmp_path):
    path = tmp_path / "s.zarr"
    p = _run_writer(path, pause=2.0)  # holds the run's lock while it sleeps
    try:
        deadline = time.time() + 60
        while _completed(path) < 1 and time.time() < deadline:
            time.sleep(0.02)
        st = Store.open(str(path), mode="r+")
        with pytest.raises(WriterLockedError, match=rf"run 'r0' .* another process \(pid {p.pid}\)"):
            st.length_writer("r0", 16, n_sequences=200, n_layers=2, n_features=24,
                             labels=["parity"], n_classes=2, block_size=20)
    finally:
        p.kill()
        p.wait()
    # the lock died with its process: a new writer may now resume
    st = Store.open(str(path), mode="r+")
    with st.length_writer("r0", 16, n_sequences=200, n_layers=2, n_features=24,
                          labels=["parity"], n_classes=2, block_size=20) as w:
        assert 0 < len(w.completed_blocks()) < 10
