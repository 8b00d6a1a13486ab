"""Store throughput against np.save/np.load of the same array, side by side in one run.

Prints one JSON line. Ratios > 1 mean the store is faster. Sizes: ``LAYERSTATE_BENCH_GB``
(default 1.0 GB of float16 hidden states). Cold reads evict the files from the page cache
with ``posix_fadvise(DONTNEED)`` first (after fsync), so they measure the disk, which is
what matters for stores larger than RAM.

Both writes are timed until the data is on disk: ``np.save`` then fsync; the store's own
write (which fsyncs each block before recording it) then an fsync of every file it left, so
neither side is credited for bytes still in the page cache. Each starts from an empty
directory: removing the previous file or store happens before the clock starts.

Each side is timed ``LAYERSTATE_BENCH_REPEATS`` times (default 3), interleaved, and the
best time is kept (as ``timeit`` does): on a shared machine the minimum is the least
disturbed measurement, and interleaving exposes both sides to the same load.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr.storage

from store import Store


def evict(path: Path) -> None:
    """Drop a file or directory tree from the page cache (clean pages only: fsync first)."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def fsync_tree(path: Path) -> None:
    for f in [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]:
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


class CountingStore(zarr.storage.WrapperStore):
    """Counts the bytes zarr fetches (to show a one-layer read touches only that layer)."""

    nbytes = 0

    async def get(self, key, prototype, byte_range=None):
        buf = await super().get(key, prototype, byte_range)
        if buf is not None and not key.endswith("zarr.json"):
            CountingStore.nbytes += len(buf)
        return buf


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    gb = float(os.environ.get("LAYERSTATE_BENCH_GB", "1.0"))
    L, n_layer, F = 40, 5, 128
    n = int(gb * 2**30 / (L * n_layer * F * 2))
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((n, L, n_layer, F), dtype=np.float32).astype(np.float16)
    tokens = rng.integers(0, 2, (n, L))
    labels = {"parity": np.cumsum(tokens, 1) % 2}
    tmp = Path(tempfile.mkdtemp(prefix="layerstate-bench-", dir=os.environ.get("BENCH_DIR")))
    try:
        npy = tmp / "hidden.npy"

        def np_write():
            np.save(npy, hidden)
            fsync_tree(npy)

        def st_write():
            st = Store.create(str(tmp / "s.zarr"))
            st.add_run("r0", task="parity", arch="x", seed=0)
            st.write_length("r0", L, hidden=hidden, tokens=tokens, labels=labels)
            fsync_tree(tmp / "s.zarr")

        def clear(path: Path) -> None:
            # before each side, outside the timing: deleting the last store's ~300 files is
            # not part of writing one (and np.save's file goes too, for the same start)
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)  # the deletion committed before the clock starts
            finally:
                os.close(fd)

        repeats = int(os.environ.get("LAYERSTATE_BENCH_REPEATS", "3"))
        t_np_w = t_st_w = float("inf")
        for _ in range(repeats):
            clear(npy)
            t_np_w = min(t_np_w, timed(np_write)[0])
            clear(tmp / "s.zarr")
            t_st_w = min(t_st_w, timed(st_write)[0])
        st = Store.open(str(tmp / "s.zarr"))

        def st_read():
            return st.load_length("r0", L).hidden.values

        def np_read():
            return np.load(npy)

        a, b = np_read(), st_read()
        assert np.array_equal(a, b)
        del a, b
        t_np_hot = min(timed(np_read)[0] for _ in range(repeats))
        t_st_hot = min(timed(st_read)[0] for _ in range(repeats))
        t_np_cold = t_st_cold = float("inf")
        for _ in range(repeats):
            evict(npy)
            t_np_cold = min(t_np_cold, timed(np_read)[0])
            evict(tmp / "s.zarr")
            t_st_cold = min(t_st_cold, timed(st_read)[0])

        # bytes fetched to load one layer, against that layer's size
        counting = CountingStore(zarr.storage.LocalStore(tmp / "s.zarr", read_only=True))
        import xarray as xr

        CountingStore.nbytes = 0
        ds = xr.open_zarr(counting, group="runs/r0/len_040", consolidated=False, zarr_format=3, chunks={})
        layer = ds.hidden.sel(layer="L2").values
        layer_ratio = CountingStore.nbytes / layer.nbytes
        size = hidden.nbytes
        out = {
            "bench": "store",
            "hidden_bytes": size,
            "repeats_best_of": repeats,
            "shape": list(hidden.shape),
            "write_s": {"store": round(t_st_w, 3), "np.save": round(t_np_w, 3)},
            "write_speed_ratio_store_vs_npsave": round(t_np_w / t_st_w, 3),
            "read_hot_s": {"store": round(t_st_hot, 3), "np.load": round(t_np_hot, 3)},
            "read_hot_speed_ratio": round(t_np_hot / t_st_hot, 3),
            "read_cold_s": {"store": round(t_st_cold, 3), "np.load": round(t_np_cold, 3)},
            "read_cold_speed_ratio": round(t_np_cold / t_st_cold, 3),
            "one_layer_bytes_read_over_layer_size": round(layer_ratio, 4),
            "store_GBps_write": round(size / t_st_w / 1e9, 3),
            "store_GBps_read_cold": round(size / t_st_cold / 1e9, 3),
        }
        print(json.dumps(out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
