"""pull / push: a subset of a store copied chunk by chunk, checked, resumable, and no more
fetched than the subset (measured on the wire between s3fs and the moto S3 server)."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from store import CorruptStoreError, MissingError, NotAStoreError, RunConflictError, Store, validate
from store.sharing.transfer import MARKER, TransferError, pull, push
from tests.conftest import synthetic_arrays

pytest.importorskip("s3fs")
BUCKET = "layerstate-test"


class CountingProxy:
    """A TCP relay on 127.0.0.1 that counts the bytes the server sends back (``down``: what a
    client downloads, headers included) and the bytes clients send (``up``); with ``rate``
    set (bytes per second, all connections together) it also slows them down, so a copy
    run in a subprocess can be killed half-way."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.down = 0
        self.up = 0
        self.rate: float | None = None
        self._lock = threading.Lock()
        self._throttle = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    if down:
                        self.down += len(data)
                    else:
                        self.up += len(data)
                rate = self.rate
                if rate:
                    with self._throttle:  # one budget shared by every connection
                        time.sleep(len(data) / rate)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def wait_quiet(self, still: float = 0.5, timeout: float = 10.0) -> None:
        """Return once no byte has been relayed for ``still`` seconds (or after ``timeout``).

        A pump counts a block before forwarding it, so after a client is killed its
        connections can still count the blocks they had in hand; on a loaded machine that
        happens after the next ``reset`` and is charged to the next copy unless waited out."""
        deadline = time.time() + timeout
        last = (self.down, self.up)
        while time.time() < deadline:
            time.sleep(still)
            now = (self.down, self.up)
            if now == last:
                return
            last = now

    def reset(self) -> int:
        """Bytes downloaded since the last reset (both counters restart)."""
        return self.take()[0]

    def take(self) -> tuple[int, int]:
        """(down, up) since the last reset; both counters restart."""
        with self._lock:
            got, self.down, self.up = (self.down, self.up), 0, 0
        return got

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture(scope="module")
def remote(s3_server, tmp_path_factory):
    """A store on the S3 server: run r0 small, run r1 with 2 MiB per layer at length 32
    (written locally, then uploaded file by file with s3fs)."""
    import s3fs

    key = f"{BUCKET}/{uuid.uuid4().hex}.zarr"
    local = tmp_path_factory.mktemp("remote") / "src.zarr"
    st = Store.create(str(local), title="remote")
    rng = np.random.default_rng(0)
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    st.write_length("r0", 12, **synthetic_arrays(rng, n=32, length=12, n_layers=2), block_size=16)
    st.add_run("r1", task="parity", arch="gru", seed=1)
    big = synthetic_arrays(rng, n=256, length=32, n_layers=3, n_features=128)
    st.write_length("r1", 32, **big, block_size=64)
    st.write_length("r1", 12, **synthetic_arrays(rng, n=32, length=12, n_layers=3), block_size=16)
    st.write_weights("r1", {"w": np.eye(4, dtype="float32")})
    s3fs.S3FileSystem(**s3_server).put(str(local), key, recursive=True)
    url = f"s3://{key}"
    host, port = s3_server["client_kwargs"]["endpoint_url"].removeprefix("http://").split(":")
    proxy = CountingProxy(host, int(port))
    via = {**s3_server, "client_kwargs": {**s3_server["client_kwargs"],
                                          "endpoint_url": f"http://127.0.0.1:{proxy.port}"}}
    yield {"url": url, "opts": s3_server, "via": via, "proxy": proxy, "big": big}
    proxy.close()


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _chunk_bytes(path: Path) -> int:
    """Bytes of the chunk files under ``path`` (whole files only: temp files are dotted)."""
    if not path.exists():
        return 0
    return sum(f.stat().st_size for f in path.rglob("*")
               if f.is_file() and "/c/" in f"/{f.relative_to(path)}" and not f.name.startswith("."))


def _files(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_pull_one_layer_fetches_only_its_chunks(remote, tmp_path):
    proxy = remote["proxy"]
    proxy.reset()
    rep = pull(remote["url"], tmp_path / "one", runs=["r1"], lengths=[32], layers=["L1"],
               storage_options=remote["via"])
    down, size = proxy.reset(), _size(tmp_path / "one")
    assert size > 2 * 2**20 and down <= 1.1 * size, (down, size)
    st = Store.open(str(tmp_path / "one"))
    assert st.run_ids() == ["r1"] and st.lengths("r1") == [32]
    ds = st.open_length("r1", 32)
    assert list(ds.layer.values) == ["L1"] and ds.hidden.shape == (256, 32, 1, 128)
    np.testing.assert_array_equal(ds.hidden.values[:, :, 0], remote["big"]["hidden"][:, :, 2].astype("float16"))
    np.testing.assert_array_equal(ds.parity.values, remote["big"]["labels"]["parity"])
    assert st.attrs["copied_from"]["layers"] == ["L1"] and st.has_weights("r1")
    assert validate(st).ok, validate(st).problems
    assert rep.copied == rep.chunks and rep.skipped == 0


ROOT = Path(__file__).resolve().parents[2]


def _options(opts: dict) -> list[str]:
    """fsspec storage options as ``-S key=value`` command-line flags."""
    import json

    return ["-S", f"key={opts['key']}", "-S", f"secret={opts['secret']}",
            "-S", f"client_kwargs={json.dumps(opts['client_kwargs'])}"]


def _killed_half_way(proxy: CountingProxy, args: list[str], progress) -> None:
    """Run ``layerstate ARGS`` in a subprocess through the slowed-down relay and ``kill -9``
    it once ``progress()`` (bytes of chunks at the target) passes 1 MiB."""
    proxy.rate = 2 * 2**20
    try:
        p = subprocess.Popen([sys.executable, "-m", "layerstate.cli", *args], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 120
        while time.time() < deadline and p.poll() is None and progress() < 2**20:
            time.sleep(0.05)
        os.kill(p.pid, signal.SIGKILL)
        _out, err = p.communicate()
    finally:
        proxy.rate = None
    proxy.wait_quiet()  # the killed client's last blocks are counted before the caller resets
    assert p.returncode == -signal.SIGKILL, err.decode()[-2000:]


def test_cli_pull_killed_resumes_without_refetching_and_bit_identical(remote, tmp_path):
    proxy = remote["proxy"]
    whole = tmp_path / "whole"
    proxy.reset()
    pull(remote["url"], whole, runs=["r1"], storage_options=remote["via"])
    full = proxy.reset()
    killed = tmp_path / "killed"
    _killed_half_way(proxy, ["pull", remote["url"], str(killed), "--runs", "r1", *_options(remote["via"])],
                     lambda: _chunk_bytes(killed))
    assert (killed / MARKER).exists() and not (killed / "zarr.json").exists()
    with pytest.raises(NotAStoreError):
        Store.open(str(killed))
    held = _chunk_bytes(killed)
    assert held > 2**20
    proxy.reset()
    rep = pull(remote["url"], killed, runs=["r1"], storage_options=remote["via"])
    again = proxy.reset()
    assert rep.skipped > 0 and rep.copied + rep.skipped == rep.chunks
    assert again <= full - held + 64 * 2**10, (again, full, held)  # finished chunks not fetched again
    assert _files(killed) == _files(whole)
    assert validate(str(killed)).ok


def _objects(fs, url: str) -> dict[str, str]:
    """Every object under ``url``: relative key -> sha256 of its body."""
    fs.invalidate_cache()
    root = url.removeprefix("s3://")
    return {p[len(root) + 1:]: hashlib.sha256(fs.cat_file(p)).hexdigest() for p in sorted(fs.find(root))}


def _remote_chunk_bytes(fs, url: str) -> int:
    fs.invalidate_cache()
    root = url.removeprefix("s3://")
    return sum(int(i["size"]) for p, i in fs.find(root, detail=True).items() if "/c/" in p[len(root):])


def test_cli_push_killed_resumes_without_resending_and_bit_identical(remote, tmp_path):
    import s3fs

    st = Store.create(str(tmp_path / "src.zarr"))
    st.add_run("p", task="parity", arch="gru", seed=3)
    st.write_length("p", 32, **synthetic_arrays(np.random.default_rng(7), n=256, length=32, n_layers=2,
                                                n_features=128), block_size=64)
    fs = s3fs.S3FileSystem(**remote["opts"], skip_instance_cache=True)
    proxy = remote["proxy"]
    whole = f"s3://{BUCKET}/{uuid.uuid4().hex}.zarr"
    proxy.take()
    push(str(st.location), whole, storage_options=remote["via"])
    full = proxy.take()[1]
    url = f"s3://{BUCKET}/{uuid.uuid4().hex}.zarr"
    _killed_half_way(proxy, ["push", str(st.location), url, *_options(remote["via"])],
                     lambda: _remote_chunk_bytes(fs, url))
    held = _remote_chunk_bytes(fs, url)
    assert held > 2**20 and MARKER in _objects(fs, url) and "zarr.json" not in _objects(fs, url)
    with pytest.raises(NotAStoreError):
        Store.open(url, storage_options=remote["opts"])
    proxy.take()
    rep = push(str(st.location), url, storage_options=remote["via"])
    again = proxy.take()[1]
    assert rep.skipped > 0 and rep.copied + rep.skipped == rep.chunks
    assert again <= full - held + 64 * 2**10, (again, full, held)  # stored objects not sent again
    assert _objects(fs, url) == _objects(fs, whole)
    assert validate(Store.open(url, storage_options=remote["opts"])).ok


def test_push_then_pull_back(remote, tmp_path, make_store):
    st = make_store(runs=("a", "b"), n=40)
    st.write_weights("a", {"w": np.ones((3, 2), "float32")})
    url = f"s3://{BUCKET}/{uuid.uuid4().hex}.zarr"
    rep = push(str(st.location), url, storage_options=remote["opts"])
    assert rep.copied == rep.chunks > 0
    there = Store.open(url, storage_options=remote["opts"])
    assert there.run_ids() == ["a", "b"] and "copied_from" not in there.attrs
    np.testing.assert_array_equal(there.open_length("b", 12).hidden.values, st.open_length("b", 12).hidden.values)
    assert validate(there).ok, validate(there).problems
    with pytest.raises(RunConflictError, match="exists"):
        push(str(st.location), url, storage_options=remote["opts"])
    back = pull(url, tmp_path / "back", runs=["a"], layers=["embed", "L1"], storage_options=remote["opts"])
    assert back.runs == ["a"]
    ds = Store.open(str(tmp_path / "back")).open_length("a", 12)
    np.testing.assert_array_equal(ds.hidden.values, st.open_length("a", 12).hidden.sel(layer=["embed", "L1"]).values)


def test_checksum_failure_at_the_source_is_named(make_store, tmp_path):
    st = make_store(n=40)
    chunk = Path(str(st.location)) / "runs/r0/len_012/hidden/c/1/0/1/0"
    data = bytearray(chunk.read_bytes())
    data[10] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(CorruptStoreError, match=r"runs/r0/len_012/hidden/c/1/0/1/0 fails its crc32c"):
        pull(str(st.location), tmp_path / "copy")


def test_bad_subsets_list_what_exists(remote, tmp_path):
    kw = {"storage_options": remote["opts"]}
    with pytest.raises(MissingError, match="no run 'r9'; its runs: r0, r1"):
        pull(remote["url"], tmp_path / "x", runs=["r9"], **kw)
    with pytest.raises(MissingError, match="lengths stored: 12, 32"):
        pull(remote["url"], tmp_path / "x", lengths=[99], **kw)
    with pytest.raises(MissingError, match="layer 'L7'; layers stored: embed, L0, L1, L2"):
        pull(remote["url"], tmp_path / "x", layers=["L7"], **kw)
    assert not (tmp_path / "x").exists()


def test_target_that_exists_is_never_overwritten(make_store, tmp_path):
    st = make_store(n=40)
    other = make_store(name="other.zarr", n=40, seed=5)
    before = _files(Path(str(other.location)))
    with pytest.raises(RunConflictError, match="exists and holds a store"):
        pull(str(st.location), str(other.location))
    assert _files(Path(str(other.location))) == before


def _cli(*args: str):
    from click.testing import CliRunner

    from layerstate.cli import main

    return CliRunner().invoke(main, list(args))


def test_cli_pull_bad_input_is_one_line(remote, tmp_path):
    import s3fs

    opts = remote["opts"]
    s = _options(opts)
    plain = f"{BUCKET}/{uuid.uuid4().hex}"
    s3fs.S3FileSystem(**opts, skip_instance_cache=True).pipe(f"{plain}/readme.txt", b"not a store")
    cases = [
        ([f"s3://{BUCKET}/{uuid.uuid4().hex}.zarr", str(tmp_path / "a"), *s], "does not exist"),
        ([f"s3://{plain}", str(tmp_path / "g"), *s], "holds no zarr.json at its root"),
        ([remote["url"], str(tmp_path / "b"), "--runs", "r0,nope", *s], "no run 'nope'; its runs: r0, r1"),
        ([remote["url"], str(tmp_path / "c"), "--lengths", "7", *s], "lengths stored: 12, 32"),
        ([remote["url"], str(tmp_path / "d"), "--layers", "L9", *s], "layers stored: embed, L0, L1, L2"),
        ([f"s3://{BUCKET}/x.zarr", str(tmp_path / "e"), "-S", "key=testing", "-S", "secret=testing",
          "-S", 'client_kwargs={"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"}',
          "-S", 'config_kwargs={"retries": {"max_attempts": 1}, "connect_timeout": 2}', "-S", "retries=1"],
         "cannot read"),
    ]
    for args, msg in cases:
        res = _cli("pull", *args)
        lines = res.output.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1, res.output
        assert lines[0].startswith("layerstate: error:") and msg in lines[0], res.output
    assert not any((tmp_path / n).exists() for n in "abcdeg")
    ok = _cli("pull", remote["url"], str(tmp_path / "f"), "--runs", "r0", *s)
    assert ok.exit_code == 0 and "1 run(s) (r0)" in ok.output, ok.output


def test_pull_of_a_directory_that_is_not_a_store(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "readme.txt").write_text("hello")
    with pytest.raises(NotAStoreError, match="holds no zarr.json"):
        pull(str(tmp_path / "plain"), tmp_path / "copy")
    with pytest.raises(TransferError):
        pull("nosuchprotocol://x/y", tmp_path / "copy2")


def test_cli_push_bad_input_is_one_line_and_touches_nothing(remote, tmp_path, make_store):
    import s3fs

    st = make_store(runs=("a",), n=40)
    opts = remote["opts"]
    fs = s3fs.S3FileSystem(**opts, skip_instance_cache=True)
    url = f"s3://{BUCKET}/{uuid.uuid4().hex}.zarr"
    push(str(st.location), url, storage_options=opts)
    before = _objects(fs, url)
    (tmp_path / "plain").mkdir()
    fresh = f"s3://{BUCKET}/{uuid.uuid4().hex}.zarr"
    for args, msg in [
        ([str(st.location), url], "exists and holds a store"),
        ([str(st.location), fresh, "--runs", "zz"], "no run 'zz'; its runs: a"),
        ([str(st.location), fresh, "--layers", "L9"], "layers stored: embed, L0, L1"),
        ([str(tmp_path / "plain"), fresh], "holds no zarr.json at its root"),
    ]:
        res = _cli("push", *args, *_options(opts))
        lines = res.output.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1, res.output
        assert lines[0].startswith("layerstate: error:") and msg in lines[0], res.output
    assert _objects(fs, url) == before and not fs.exists(fresh.removeprefix("s3://"))
