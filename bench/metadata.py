"""A writer's walks of a store's metadata against zarr's own, side by side in one run.

A writer opens a store without its consolidated snapshot (another process may have written
since), so listing the stored results and consolidating after a write walk the whole store.
zarr walks it through its event loop, building every node; on a local disk layerstate walks it
with the operating system's calls and reads each ``zarr.json`` directly
(``store.contents.results``, ``store.metadata.digests``), and writes the same snapshot byte for
byte. Prints one JSON line; ratios > 1 mean layerstate's walk is faster.

The store: ``LAYERSTATE_BENCH_STORE`` (a copy is walked; the demo's ``demo-out/store.zarr``
holds about 4,200 nodes), else a synthetic one of ``LAYERSTATE_BENCH_RUNS`` runs (default 30)
at three lengths with a probe-like result of 40 arrays per run. Each side is timed
``LAYERSTATE_BENCH_REPEATS`` times (default 3), interleaved, best kept.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import xarray as xr
import zarr

from store import Store
from store.contents.results import result_names
from store.metadata.digests import consolidate_once, record_digests


def _synthetic(path: Path, runs: int) -> None:
    rng = np.random.default_rng(0)
    st = Store.create(str(path))
    with st.deferred_consolidation():
        for i in range(runs):
            rid = f"r{i:03d}"
            st.add_run(rid, task="parity", arch="lstm", seed=i)
            for length in (8, 12, 16):
                tokens = rng.integers(0, 2, (16, length))
                hidden = rng.standard_normal((16, length, 2, 8)).astype(np.float16)
                st.write_length(rid, length, hidden=hidden, tokens=tokens, labels={"parity": np.cumsum(tokens, 1) % 2},
                                block_size=16)
            ds = xr.Dataset({f"v{k}": (("layer",), rng.random(4)) for k in range(40)})
            st.write_result(f"probes/{rid}", ds)


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    repeats = int(os.environ.get("LAYERSTATE_BENCH_REPEATS", "3"))
    tmp = Path(tempfile.mkdtemp(prefix="layerstate-bench-meta-", dir=os.environ.get("BENCH_DIR")))
    try:
        path = tmp / "s.zarr"
        source = os.environ.get("LAYERSTATE_BENCH_STORE")
        if source:
            shutil.copytree(source, path)
        else:
            _synthetic(path, int(os.environ.get("LAYERSTATE_BENCH_RUNS", "30")))
        st = Store.open(str(path), mode="r+")
        zs = st.root.store
        nodes = sum(1 for _ in path.rglob("zarr.json"))

        def zarr_names() -> list[str]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return sorted(p for p, node in st.root["results"].members(max_depth=None)
                              if isinstance(node, zarr.Group) and any(True for _ in node.arrays()))

        def zarr_consolidate() -> None:  # what a consolidation did before: zarr's, then the copy file
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                zarr.consolidate_metadata(zs)
            record_digests(zs)

        assert result_names(st.root) == zarr_names()
        consolidate_once(zs)
        ours = (path / "zarr.json").read_bytes()
        zarr_consolidate()
        assert (path / "zarr.json").read_bytes() == ours, "the snapshots differ"
        t = {"names": [float("inf")] * 2, "consolidate": [float("inf")] * 2}
        for _ in range(repeats):
            t["names"][0] = min(t["names"][0], _best(lambda: result_names(st.root), 1))
            t["names"][1] = min(t["names"][1], _best(zarr_names, 1))
            t["consolidate"][0] = min(t["consolidate"][0], _best(lambda: consolidate_once(zs), 1))
            t["consolidate"][1] = min(t["consolidate"][1], _best(zarr_consolidate, 1))
        print(json.dumps({
            "bench": "metadata", "nodes": nodes, "results": len(result_names(st.root)), "repeats_best_of": repeats,
            "result_names_s": {"layerstate": round(t["names"][0], 4), "zarr": round(t["names"][1], 4)},
            "result_names_speed_ratio": round(t["names"][1] / t["names"][0], 2),
            "consolidate_s": {"layerstate": round(t["consolidate"][0], 3), "zarr": round(t["consolidate"][1], 3)},
            "consolidate_speed_ratio": round(t["consolidate"][1] / t["consolidate"][0], 2),
            "same_snapshot_bytes": True,
        }))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
