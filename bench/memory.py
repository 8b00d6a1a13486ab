"""Peak memory of a probe sweep over a store larger than it should ever hold, vs the store's size.

Prints one JSON line. Builds a store of ``LAYERSTATE_BENCH_MEMORY_GB`` (default 2.1) GB of
float16 hidden states in a temporary directory -- 8 runs x 5120 sequences x 40 positions x
(4 layers + embedding) x 128 features, a 6-class label -- then runs the sweep in a fresh
subprocess and reads that process's peak resident set size (``ru_maxrss``). A second
subprocess only imports the libraries and opens the store, so the sweep's own share is visible.

The sweep is ``probe(method="exact")`` over every run and layer at positions 9, 19, 29, 39:
every stored chunk is read (a chunk holds all positions of one layer), which is what an
all-position sweep reads too; fitting all 40 positions would only take longer, not hold more
(tasks are sized by ``analysis.probes.sweep.BLOCK_BYTES``). Out of core means the ratio
``peak_rss / store_bytes`` stays far below 1 (goal <= 0.25).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.probes import make_arrays
from store import Store

N_RUNS, N_SEQ, LENGTH = 8, 5120, 40
POSITIONS = [9, 19, 29, 39]

CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from analysis.probes import probe
from store import Store
st = Store.open(sys.argv[1])
mode = sys.argv[2]
if mode == "sweep":
    ds = probe(st, "state", positions=[int(p) for p in sys.argv[3].split(",")], method="exact")
    extra = {"cells": int(ds["accuracy"].notnull().all("fold").sum()),
             "mean_accuracy": round(float(ds["accuracy"].mean()), 4)}
else:
    extra = {}
def peak_rss():
    # VmHWM belongs to this process image; ru_maxrss would keep the parent's high-water mark
    # across fork + exec (the parent held the store's arrays while building it)
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"peak_rss": peak_rss(), "seconds": round(time.perf_counter() - t0, 2), **extra}))
"""


def build(path: Path, gb: float) -> int:
    """Write the store; returns its size on disk in bytes."""
    n_runs = max(1, round(N_RUNS * gb / 2.1))
    st = Store.create(str(path), title="bench memory")
    rng = np.random.default_rng(0)
    for r in range(n_runs):
        hidden, tokens, state = make_arrays(rng, n=N_SEQ, length=LENGTH)
        st.add_run(f"r{r}", task="s3", arch="lstm", seed=r)
        st.write_length(f"r{r}", hidden=hidden, tokens=tokens, labels={"state": state})
        del hidden
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def child(store: Path, mode: str) -> dict:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]
    )
    out = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-c",
            CHILD,
            str(store),
            mode,
            ",".join(map(str, POSITIONS)),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"memory bench child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    gb = float(os.environ.get("LAYERSTATE_BENCH_MEMORY_GB", "2.1"))
    tmp = Path(tempfile.mkdtemp(prefix="layerstate-bench-memory-", dir=os.environ.get("BENCH_DIR")))
    try:
        t0 = time.perf_counter()
        size = build(tmp / "s.zarr", gb)
        build_s = time.perf_counter() - t0
        base = child(tmp / "s.zarr", "open")
        sweep = child(tmp / "s.zarr", "sweep")
        print(
            json.dumps(
                {
                    "bench": "memory",
                    "store_bytes": size,
                    "store_gb": round(size / 2**30, 2),
                    "peak_rss_bytes": sweep["peak_rss"],
                    "peak_rss_mb": round(sweep["peak_rss"] / 2**20, 1),
                    "ratio_peak_to_store": round(sweep["peak_rss"] / size, 3),
                    "baseline_rss_mb": round(base["peak_rss"] / 2**20, 1),
                    "sweep_increment_mb": round((sweep["peak_rss"] - base["peak_rss"]) / 2**20, 1),
                    "ratio_increment_to_store": round(
                        (sweep["peak_rss"] - base["peak_rss"]) / size, 3
                    ),
                    "sweep_s": sweep["seconds"],
                    "cells": sweep["cells"],
                    "mean_accuracy": sweep["mean_accuracy"],
                    "build_s": round(build_s, 1),
                }
            )
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
