"""Ctrl-C on a long command stops it within a step or two (issue 73): `train --jobs 2` signalled
while two runs train and two wait cancels the waiting ones (never started) and checkpoints the
running ones at their step's end, then says what was kept; the same command resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from store import Store

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = """
[experiment]
name = "long"
[grid]
tasks = ["parity"]
archs = ["lstm"]
seeds = [0, 1, 2, 3]
[train]
length = 12
steps = 200000
batch_size = 16
eval_every = 100000
n_eval = 32
eval_lengths = [12]
n_test = 32
warmup = 2
[capture]
lengths = [12]
n_sequences = 40
[models.lstm]
d_model = 8
n_layers = 1
"""


def test_sigint_cancels_queued_runs_and_checkpoints_the_running_ones(tmp_path):
    exp, store = tmp_path / "exp.toml", tmp_path / "s.zarr"
    exp.write_text(EXPERIMENT)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # SIGINT as a terminal leaves it (a background job inherits it ignored)
    p = subprocess.Popen([sys.executable, "-m", "layerstate.cli", "train", str(exp), "--store", str(store),
                          "--jobs", "2"], cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # both processes have begun their runs
            runs = store / "runs"  # each run's group appears as its training begins
            if runs.is_dir() and sum(1 for r in runs.iterdir() if r.is_dir()) >= 2:
                break
            time.sleep(0.5)
        time.sleep(2.0)  # into their steps (200,000 of them: without a stop they would not end)
        os.kill(p.pid, signal.SIGINT)  # the command alone: it passes the stop on to its processes
        out, _ = p.communicate(timeout=60)  # without the stop: 200,000 steps a run, then two more runs
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, out
    assert "interrupted: what was written before it is kept" in out
    st = Store.open(str(store))
    started = st.run_ids()
    assert len(started) == 2, started  # the two waiting runs were cancelled, never begun
    for rid in started:
        saved = st.read_checkpoint(rid)
        assert saved is not None and 0 < saved.step < 200000 and not st.has_weights(rid), rid
