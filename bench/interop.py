"""Interoperability, side by side in one run: importing against reading the same bytes with
the source's own library, and a one-layer pull against the subset's size.

Prints one JSON line:

* ``safetensors_import_vs_load``: ``safetensors.numpy.load_file`` of every file / the import
  of the same files into a store (``layerstate import safetensors``); > 1 means the import is
  faster. Goal >= 0.7. The import writes float16 by default (half the bytes it reads), and is
  timed until its chunks are fsynced; ``..._float32`` stores them as read.
* ``safetensors_import_vs_store_write``: the store's own write of the same activations
  already in memory (``Store.write_length`` + fsync) / the import: what the importer costs
  beyond the write no import can skip (1 = nothing).
* ``datasets_import_vs_read``: ``load_from_disk(...).with_format("numpy")[:]`` / the import
  of the same directory (SAELens' layout: one ``Array2D`` column per layer + ``token_ids``).
* ``pull_bytes_over_subset``: bytes the S3 server (moto, on 127.0.0.1) sent for a pull of one
  layer of one run, counted on the wire, / the size of the pulled store. Goal <= 1.1.
* ``safetensors_load_vs_plain_write``: the load / writing the bytes an import stores (float16:
  half the source) as plain 4 MB files, each fsynced: the ratio an import that did nothing but
  write its output could reach on this disk (the ceiling for ``..._import_vs_load``).
* ``cpu``: the same ratios in CPU time (every thread of the process), steadier than wall time
  on a loaded machine.
* ``import_peak_mb``: the most memory (``tracemalloc``: numpy buffers included) an import
  held, for half of the safetensors files and for all of them, and for the ``datasets``
  directory: flat in the source's size (a few blocks of sequences), not proportional to it.

Reads are cold: the source files are evicted from the page cache (``posix_fadvise``) before
each timed run. Sizes: ``LAYERSTATE_BENCH_MB`` (default 256 MB of float32 activations);
``LAYERSTATE_BENCH_REPEATS`` (default 3) interleaved repeats, best time kept.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from bench.store import evict
from capture.importers import import_hf_datasets, import_safetensors
from store import Store
from store.sharing.transfer import pull

N_LAYERS, LENGTH, WIDTH, PARTS = 5, 128, 256, 4


def _timed(fn) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn()``; CPU counts every thread of the process."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def _sources(root: Path, mb: int) -> tuple[Path, Path, int]:
    """safetensors parts and a datasets directory holding the same float32 activations."""
    import datasets
    from safetensors.numpy import save_file

    per_seq = LENGTH * WIDTH * 4 * N_LAYERS
    n = max(PARTS, (mb * 2**20 // per_seq) // PARTS * PARTS)
    rng = np.random.default_rng(0)
    st_dir, layers = root / "safetensors", ["embed"] + [f"L{i}" for i in range(N_LAYERS - 1)]
    st_dir.mkdir()
    m = n // PARTS
    tokens = rng.integers(0, 50_000, (n, LENGTH)).astype("int32")
    for p in range(PARTS):
        part = {lay: rng.standard_normal((m, LENGTH, WIDTH), dtype="float32") for lay in layers}
        part["tokens"] = tokens[p * m:(p + 1) * m]
        save_file(part, str(st_dir / f"part_{p}.safetensors"))
    feats = datasets.Features({**{lay: datasets.Array2D(shape=(LENGTH, WIDTH), dtype="float32") for lay in layers},
                               "token_ids": datasets.Sequence(datasets.Value("int32"), length=LENGTH)})
    ds_dir = root / "datasets"

    def rows():
        for p in range(PARTS):
            from safetensors.numpy import load_file

            part = load_file(str(st_dir / f"part_{p}.safetensors"))
            for i in range(m):
                yield {**{lay: part[lay][i] for lay in layers}, "token_ids": part["tokens"][i]}

    datasets.disable_progress_bars()
    datasets.Dataset.from_generator(rows, features=feats, cache_dir=str(root / "hf-cache")).save_to_disk(str(ds_dir))
    shutil.rmtree(root / "hf-cache", ignore_errors=True)
    return st_dir, ds_dir, n * per_seq


def _fsync_tree(path: Path) -> None:
    for f in (p for p in path.rglob("*") if p.is_file()):
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def _import_once(root: Path, fn, src: Path, **kw) -> tuple[float, float]:
    evict(src)
    target = root / f"imp-{uuid.uuid4().hex[:6]}.zarr"

    def go() -> None:
        fn(str(target), "r", src, **kw)
        _fsync_tree(target)

    t = _timed(go)
    shutil.rmtree(target)
    return t


def _store_write(root: Path, src: Path) -> tuple[float, float]:
    """The store's own write of the same activations, already in memory (what an import
    cannot avoid): ``Store.write_length`` + fsync."""
    from safetensors.numpy import load_file

    parts = [load_file(str(f)) for f in sorted(src.glob("*.safetensors"), key=lambda f: f.name)]
    layers = ["embed"] + [f"L{i}" for i in range(N_LAYERS - 1)]
    hidden = np.concatenate([np.stack([p[k] for k in layers], axis=2) for p in parts])
    tokens = np.concatenate([p["tokens"] for p in parts])
    del parts
    target = root / f"w-{uuid.uuid4().hex[:6]}.zarr"

    def go() -> None:
        st = Store.create(str(target))
        st.add_run("r", task="imported", arch="unknown", seed=0)
        st.write_length("r", LENGTH, hidden=hidden, tokens=tokens, labels={"token": tokens})
        _fsync_tree(target)

    t = _timed(go)
    shutil.rmtree(target)
    return t


def _read_safetensors(src: Path) -> tuple[float, float]:
    from safetensors.numpy import load_file

    evict(src)
    return _timed(lambda: [load_file(str(f)) for f in sorted(src.glob("*.safetensors"))])


def _read_datasets(src: Path) -> tuple[float, float]:
    import datasets

    evict(src)
    return _timed(lambda: datasets.load_from_disk(str(src)).with_format("numpy")[:])


def _plain_write(root: Path, nbytes: int) -> tuple[float, float]:
    """Write ``nbytes`` as 4 MB files, each fsynced (the disk's own speed, no store)."""
    block = np.random.default_rng(2).integers(0, 255, 4 * 2**20, dtype=np.uint8).tobytes()
    target = root / f"plain-{uuid.uuid4().hex[:6]}"
    target.mkdir()

    def go() -> None:
        for i in range(-(-nbytes // len(block))):
            with open(target / f"f{i}", "wb") as fh:
                fh.write(block)
                fh.flush()
                os.fsync(fh.fileno())

    t = _timed(go)
    shutil.rmtree(target)
    return t


def _peak(root: Path, fn, src: Path) -> float:
    """The most memory (MB, as ``tracemalloc`` counts it) one import of ``src`` held."""
    import tracemalloc

    target = root / f"peak-{uuid.uuid4().hex[:6]}.zarr"
    tracemalloc.start()
    try:
        fn(str(target), "r", src)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    shutil.rmtree(target)
    return peak / 2**20


def _half(root: Path, src: Path) -> Path:
    """A directory with the first half of the safetensors parts (links, no copies)."""
    half = root / "safetensors-half"
    half.mkdir()
    for f in sorted(src.glob("*.safetensors"))[: PARTS // 2]:
        (half / f.name).symlink_to(f)
    return half


class _Proxy:
    """Counts the bytes a server sends back through it (127.0.0.1 only)."""

    def __init__(self, host: str, port: int) -> None:
        self.target, self.down, self.lock = (host, port), 0, threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, up, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, client, True), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket, count: bool) -> None:
        try:
            while data := a.recv(65536):
                if count:
                    with self.lock:
                        self.down += len(data)
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _pull_ratio(root: Path) -> tuple[float, int]:
    """Bytes on the wire / pulled size, for one layer of one run of a 2-run store on moto S3."""
    import boto3
    import s3fs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        creds = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
        boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                     **creds).create_bucket(Bucket="bench")
        local = root / "remote.zarr"
        st = Store.create(str(local))
        rng = np.random.default_rng(1)
        for i, rid in enumerate(("r0", "r1")):
            st.add_run(rid, task="parity", arch="gru", seed=i)
            tok = rng.integers(0, 2, (512, 64))
            st.write_length(rid, 64, hidden=rng.standard_normal((512, 64, 5, 128), dtype="float32"),
                            tokens=tok, labels={"parity": np.cumsum(tok, 1) % 2})
        opts = {"key": "bench", "secret": "bench",
                "client_kwargs": {"endpoint_url": f"http://{host}:{port}", "region_name": "us-east-1"}}
        s3fs.S3FileSystem(**opts).put(str(local), "bench/remote.zarr", recursive=True)
        proxy = _Proxy(host, int(port))
        endpoint = f"http://127.0.0.1:{proxy.port}"
        via = {"key": "bench", "secret": "bench",
               "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
        pull("s3://bench/remote.zarr", root / "pulled", runs=["r1"], layers=["L2"], storage_options=via)
        size = sum(f.stat().st_size for f in (root / "pulled").rglob("*") if f.is_file())
        return proxy.down / size, size
    finally:
        server.stop()


def main() -> None:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    mb = int(os.environ.get("LAYERSTATE_BENCH_MB", "256"))
    repeats = int(os.environ.get("LAYERSTATE_BENCH_REPEATS", "3"))
    with tempfile.TemporaryDirectory(prefix="layerstate-bench-interop-", dir=os.environ.get("TMPDIR")) as tmp:
        root = Path(tmp)
        st_dir, ds_dir, nbytes = _sources(root, mb)
        keys = ("st_load", "st_import", "st_import32", "st_write", "ds_read", "ds_import", "plain_write")
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in keys}
        for _ in range(repeats):
            times["st_load"].append(_read_safetensors(st_dir))
            times["st_import"].append(_import_once(root, import_safetensors, st_dir))
            times["st_import32"].append(_import_once(root, import_safetensors, st_dir, dtype="float32"))
            times["st_write"].append(_store_write(root, st_dir))
            times["ds_read"].append(_read_datasets(ds_dir))
            times["ds_import"].append(_import_once(root, import_hf_datasets, ds_dir))
            times["plain_write"].append(_plain_write(root, nbytes // 2))
        best = {k: min(w for w, _c in v) for k, v in times.items()}
        cpu = {k: min(c for _w, c in v) for k, v in times.items()}
        peaks = {"safetensors_half": _peak(root, import_safetensors, _half(root, st_dir)),
                 "safetensors": _peak(root, import_safetensors, st_dir),
                 "datasets": _peak(root, import_hf_datasets, ds_dir)}
        ratio, pulled = _pull_ratio(root)
    out = {
        "bench": "interop",
        "source_mb": round(nbytes / 2**20, 1),
        "safetensors_import_vs_load": round(best["st_load"] / best["st_import"], 3),
        "safetensors_import_vs_load_float32": round(best["st_load"] / best["st_import32"], 3),
        "safetensors_import_vs_store_write": round(best["st_write"] / best["st_import"], 3),
        "datasets_import_vs_read": round(best["ds_read"] / best["ds_import"], 3),
        "safetensors_load_vs_plain_write": round(best["st_load"] / best["plain_write"], 3),
        "cpu": {"safetensors_import_vs_load": round(cpu["st_load"] / cpu["st_import"], 3),
                "safetensors_import_vs_store_write": round(cpu["st_write"] / cpu["st_import"], 3),
                "datasets_import_vs_read": round(cpu["ds_read"] / cpu["ds_import"], 3)},
        "import_peak_mb": {k: round(v, 1) for k, v in peaks.items()},
        "pull_bytes_over_subset": round(ratio, 4),
        "pulled_mb": round(pulled / 2**20, 2),
        "seconds": {k: round(v, 3) for k, v in best.items()},
        "cpu_seconds": {k: round(v, 3) for k, v in cpu.items()},
        "goals": {"import_vs_read": ">= 0.7", "pull_bytes_over_subset": "<= 1.1"},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
