"""Concurrent writers: nothing lost, one writer per run, leases across processes and S3.

Several processes write different runs into one store (a local directory, and the moto S3
server on 127.0.0.1) at once: every run, length, weight, attribute and result is in the
consolidated snapshot a fresh read-only opener sees, and ``validate`` is clean. Two processes
racing for one run: exactly one is refused, in one line naming the run, the holder and when
its lease expires. A writer killed with SIGKILL: its lease is taken over (at once on this
host; after it expires when it looks like another host's) and the rerun gives a store
bit-identical to an uninterrupted write. Leases are short here (LAYERSTATE_LEASE_SECONDS).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from store import Store, WriterLockedError
from store.access import lease as L
from store.errors import InvalidArgumentError
from store.integrity.validation import validate
from store.metadata import digests as M

#: Lease duration for the subprocesses: a killed writer's lease expires within seconds.
TTL = "2"

PRELUDE = r"""
import json, os, sys, time
import numpy as np
from store import Store, WriterLockedError
url, opts, me, barrier, n = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
defer = sys.argv[6] == "defer"
st = Store.open(url, mode="r+", storage_options=opts or None)
open(os.path.join(barrier, "ready-" + me), "w").close()
deadline = time.time() + 60
while len([f for f in os.listdir(barrier) if f.startswith("ready-")]) < n and time.time() < deadline:
    time.sleep(0.005)
"""

#: One run per process; each write consolidates on its own (many consolidations race), or
#: once at the end (``defer``: fewer, for S3, where each one lists the whole store).
DIFFERENT_RUNS = PRELUDE + r"""
import contextlib
import xarray as xr
i = int(me)
rid = f"r{i}"
rng = np.random.default_rng(i)
with st.deferred_consolidation() if defer else contextlib.nullcontext():
    st.add_run(rid, task="parity", arch="lstm", seed=i, model_config={"d": i})
    tok = rng.integers(0, 2, (24, 6))
    st.write_length(rid, 6, hidden=rng.standard_normal((24, 6, 2, 4)).astype("float32"),
                    tokens=tok, labels={"parity": np.cumsum(tok, 1) % 2}, block_size=6)
    st.update_run_attrs(rid, metrics={"accuracy": {"6": i / 10}})
    if not defer:  # (each object store request costs; S3 writes runs and lengths only)
        st.write_weights(rid, {"w": np.arange(6, dtype="float32").reshape(2, 3) + i})
        st.write_result(f"res/{rid}", xr.Dataset({"v": ("x", np.arange(3) + i)}))
print("done", os.getpid())
"""

#: Every process wants the same run: the winner holds it while it writes slowly.
SAME_RUN = PRELUDE + r"""
try:
    w = st.length_writer("r0", 6, n_sequences=12, n_layers=1, n_features=4, labels=["y"],
                         block_size=4)
except WriterLockedError as exc:
    print("REFUSED", exc)
    sys.exit(0)
print("WON", os.getpid(), flush=True)
with w:
    for b in range(3):
        w.write_block(b, hidden=np.full((4, 6, 2, 4), b, "float32"), tokens=np.zeros((4, 6), int),
                      labels={"y": np.zeros((4, 6), int)})
        time.sleep(0.5)
print("done")
"""

#: A deterministic writer that resumes (data depends only on the block).
RESUMABLE = r"""
import sys, time
import numpy as np
from store import Store
path, pause = sys.argv[1], float(sys.argv[2])
st = Store.create(path, exist_ok=True)
st.add_run("r0", task="parity", arch="lstm", seed=0)
with st.length_writer("r0", 8, n_sequences=80, n_layers=1, n_features=8, labels=["parity"],
                      n_classes=2, block_size=8) as w:
    for b in w.missing_blocks():
        start, stop = w.block_range(b)
        rng = np.random.default_rng(100 + b)
        m = stop - start
        tok = rng.integers(0, 2, (m, 8))
        w.write_block(b, hidden=rng.standard_normal((m, 8, 2, 8)), tokens=tok,
                      labels={"parity": np.cumsum(tok, 1) % 2}, logits=rng.standard_normal((m, 8, 2)))
        time.sleep(pause)
print("finished")
"""


def _env() -> dict[str, str]:
    return {**os.environ, L.ENV_TTL: TTL, "OMP_NUM_THREADS": "1"}


def _spawn(script: str, url: str, opts: dict | None, n: int, barrier: Path,
           defer: bool = False) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", script, url, json.dumps(opts or {}), str(i),
                              str(barrier), str(n), "defer" if defer else "each"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
            for i in range(n)]


def _finish(procs: list[subprocess.Popen]) -> list[str]:
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
        outs.append(out)
    return outs


def _s3_url() -> str:
    return f"s3://layerstate-test/{uuid.uuid4().hex}.zarr"


def _leases_left(st: Store) -> list[str]:
    fs, root = st.location.filesystem()
    path = f"{root.rstrip('/')}/{L.LEASE_DIR}"
    try:
        fs.invalidate_cache(path)
        return list(fs.ls(path, detail=False))
    except FileNotFoundError:
        return []


# ---------------------------------------------------------------------- many writers, one store
@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_processes_writing_different_runs_lose_nothing(where, tmp_path, request):
    n = 3
    opts = None
    if where == "s3":
        pytest.importorskip("s3fs")
        opts = request.getfixturevalue("s3_server")
        url = _s3_url()
    else:
        url = str(tmp_path / "s.zarr")
    Store.create(url, title="shared", storage_options=opts)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    _finish(_spawn(DIFFERENT_RUNS, url, opts, n, barrier, defer=where == "s3"))

    st = Store.open(url, storage_options=opts)  # read-only: reads the consolidated snapshot
    assert st.root.metadata.consolidated_metadata is not None
    runs = [f"r{i}" for i in range(n)]
    assert st.run_ids() == runs
    snapshot, _ = M.snapshot_entries(json.loads(M.get(st.root.store, "zarr.json") or b"{}"))
    assert snapshot is not None
    full = where == "local"
    for i, rid in enumerate(runs):
        nodes = [f"runs/{rid}", f"runs/{rid}/len_006/hidden"]
        nodes += [f"runs/{rid}/weights/w", f"results/res/{rid}/v"] if full else []
        for node in nodes:
            assert node in snapshot, node
        assert st.lengths(rid) == [6] and st.has_weights(rid) == full
        assert st.run_attrs(rid)["metrics"] == {"accuracy": {"6": i / 10}}
        assert st.run_attrs(rid)["model_config"] == {"d": i}
        rng = np.random.default_rng(i)
        tok = rng.integers(0, 2, (24, 6))
        hidden = rng.standard_normal((24, 6, 2, 4)).astype("float32").astype("float16")
        got = st.load_length(rid, 6)
        np.testing.assert_array_equal(got.hidden.values, hidden)
        np.testing.assert_array_equal(got.tokens.values, tok)
        if full:
            np.testing.assert_array_equal(st.read_weights(rid)["w"], np.arange(6).reshape(2, 3) + i)
            np.testing.assert_array_equal(st.read_result(f"res/{rid}").v.values, np.arange(3) + i)
    assert st.results() == ([f"res/{rid}" for rid in runs] if full else [])
    rep = validate(url, storage_options=opts)
    assert rep.ok, rep.problems
    assert rep.warnings == []  # nothing newer than the snapshot: the last consolidation saw all
    assert _leases_left(st) == []  # every lease was given back


#: Adds run ``b`` once the other process's consolidation has listed the store.
ADD_B = r"""
import json, os, sys, time
from store import Store
url, opts, signals = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
st = Store.open(url, mode="r+", storage_options=opts or None)
open(os.path.join(signals, "ready"), "w").close()
deadline = time.time() + 60
while not os.path.exists(os.path.join(signals, "listed")) and time.time() < deadline:
    time.sleep(0.01)
st.add_run("b", task="parity", arch="lstm", seed=1)
open(os.path.join(signals, "b-done"), "w").close()
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_consolidation_cannot_hide_a_run_added_while_it_ran(where, tmp_path, request, monkeypatch):
    """The interleaving that lost runs: this process lists the store, another adds run ``b``
    and consolidates, then this process writes its snapshot (without ``b``) last."""
    opts = None
    if where == "s3":
        pytest.importorskip("s3fs")
        opts = request.getfixturevalue("s3_server")
        url = _s3_url()
    else:
        url = str(tmp_path / "s.zarr")
    st = Store.create(url, storage_options=opts)
    signals = tmp_path / "signals"
    signals.mkdir()
    other = subprocess.Popen([sys.executable, "-c", ADD_B, url, json.dumps(opts or {}), str(signals)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    deadline = time.time() + 120
    while not (signals / "ready").exists() and other.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    cls = type(st.root.store)
    write = cls.set
    armed = [True]

    async def slow_root_write(self, key, value):
        if key == "zarr.json" and armed[0]:  # listed, snapshot not yet written: let b in
            armed[0] = False
            (signals / "listed").touch()
            until = time.time() + 3
            while not (signals / "b-done").exists() and time.time() < until:
                await asyncio.sleep(0.02)
        return await write(self, key, value)

    monkeypatch.setattr(cls, "set", slow_root_write)
    st.add_run("a", task="parity", arch="lstm", seed=0)
    monkeypatch.setattr(cls, "set", write)
    err = other.communicate(timeout=120)[1]
    assert other.returncode == 0, err[-3000:]
    assert not armed[0]
    assert Store.open(url, storage_options=opts).run_ids() == ["a", "b"]
    rep = validate(url, storage_options=opts)
    assert rep.ok and rep.warnings == [], rep.problems + rep.warnings


# ---------------------------------------------------------------------- one writer per run
@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_processes_racing_for_one_run_one_is_refused(where, tmp_path, request):
    opts = None
    if where == "s3":
        pytest.importorskip("s3fs")
        opts = request.getfixturevalue("s3_server")
        url = _s3_url()
    else:
        url = str(tmp_path / "s.zarr")
    st = Store.create(url, storage_options=opts)
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    outs = _finish(_spawn(SAME_RUN, url, opts, 2, barrier))
    won = [o for o in outs if o.startswith("WON")]
    refused = [o for o in outs if o.startswith("REFUSED")]
    assert len(won) == 1 and len(refused) == 1, outs
    winner = won[0].split()[1]
    msg = refused[0].removeprefix("REFUSED ").strip()
    assert "\n" not in msg
    assert msg.startswith(f"run 'r0' in {url} is being written by another process (pid {winner}) "
                          "on this host (lease ")
    assert "expires 20" in msg and "wait for it to finish or stop it, then run again" in msg
    got = Store.open(url, storage_options=opts).open_length("r0", 6)
    assert got.hidden.values[:, 0, 0, 0].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert validate(url, storage_options=opts).ok


# ---------------------------------------------------------------------- a killed writer
def _run(path: Path, pause: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RESUMABLE, str(path), str(pause)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def _recorded(path: Path) -> int:
    try:
        doc = json.loads((path / "runs/r0/len_008/zarr.json").read_text())
    except (OSError, ValueError):
        return 0
    return len(doc["attributes"].get("completed_blocks", []))


def _chunks(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and "/c/" in str(p.relative_to(path))}


@pytest.mark.slow
def test_sigkilled_writer_lease_is_taken_over_and_rerun_is_bit_identical(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(L.ENV_TTL, TTL)

    def in_process(path: Path) -> None:  # the same writer, run here
        monkeypatch.setattr(sys, "argv", ["writer", str(path), "0"])
        exec(RESUMABLE, {"__name__": "writer"})
        assert capsys.readouterr().out.strip().endswith("finished")

    ref = tmp_path / "ref.zarr"
    in_process(ref)

    path = tmp_path / "s.zarr"
    p = _run(path, 0.2)
    deadline = time.time() + 120
    while _recorded(path) < 3 and p.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert 3 <= _recorded(path) < 10
    leases = list((path / L.LEASE_DIR).glob("run-r0.g*.json"))
    assert len(leases) == 1  # the killed writer's lease stays behind
    doc = json.loads(leases[0].read_text())
    assert doc["pid"] == p.pid and doc["ttl"] == float(TTL)

    # as if it had died on another host: its pid cannot be checked, only its expiry
    doc.update(node="elsewhere||", host="elsewhere", expires=time.time() + 3)
    leases[0].write_text(json.dumps(doc))
    st = Store.open(str(path), mode="r+")
    with pytest.raises(WriterLockedError) as exc:
        st.length_writer("r0", 8, n_sequences=80, n_layers=1, n_features=8, labels=["parity"],
                         n_classes=2, block_size=8)
    assert f"another process (pid {p.pid}) on host elsewhere (lease {doc['uuid'][:8]}, generation 0, " \
           "expires " in str(exc.value)
    deadline = time.time() + 30
    while time.time() < deadline:  # taken over once it expires
        try:
            with st.lock("r0"):
                taken = json.loads(next((path / L.LEASE_DIR).glob("run-r0.g*.json")).read_text())
            break
        except WriterLockedError:
            time.sleep(0.1)
    assert taken["generation"] == 1 and taken["pid"] == os.getpid()
    assert not (path / L.LEASE_DIR).exists()  # released, the stale one cleaned up

    in_process(path)  # the rerun completes
    got, want = Store.open(str(path)).load_length("r0", 8), Store.open(str(ref)).load_length("r0", 8)
    for v in ("hidden", "tokens", "parity", "mask", "logits"):
        np.testing.assert_array_equal(got[v].values, want[v].values)
    assert _chunks(path) == _chunks(ref)
    assert validate(str(path)).ok


def test_a_dead_writer_on_this_host_is_taken_over_at_once(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    lease = L.run_lease(st.location, "r0")
    doc = lease._document(0, time.time())
    doc["pid"] = int(dead.stdout)  # reaped: gone, though its lease has a minute left
    d = tmp_path / "s.zarr" / L.LEASE_DIR
    d.mkdir()
    (d / "run-r0.g0.json").write_text(json.dumps(doc))
    with lease:
        assert sorted(p.name for p in d.iterdir()) == ["run-r0.g1.json"]
    doc["pid"] = os.getppid()  # alive: refused
    d.mkdir()
    (d / "run-r0.g0.json").write_text(json.dumps(doc))
    with pytest.raises(WriterLockedError, match=rf"pid {os.getppid()}\) on this host"):
        lease.acquire()


# ---------------------------------------------------------------------- leases in process
def _foreign(st: Store, name: str, gen: int, expires_in: float) -> Path:
    """A lease held by a process on another host."""
    d = Path(str(st.location.local_path)) / L.LEASE_DIR
    d.mkdir(exist_ok=True)
    f = d / f"{name}.g{gen}.json"
    f.write_text(json.dumps({"format": L.FORMAT, "name": name, "host": "other", "node": "other||",
                             "pid": 4242, "uuid": "f" * 32, "generation": gen,
                             "expires": time.time() + expires_in}))
    return f


def test_a_lease_is_renewed_while_held(tmp_path, monkeypatch):
    monkeypatch.setenv(L.ENV_TTL, "0.6")
    st = Store.create(str(tmp_path / "s.zarr"))
    f = tmp_path / "s.zarr" / L.LEASE_DIR / "run-r0.g0.json"
    with st.lock("r0"):
        first = json.loads(f.read_text())["expires"]
        deadline = time.time() + 20
        while time.time() < first + 0.5 and time.time() < deadline:
            time.sleep(0.05)
        # past its first expiry and still held: renewed, so nobody may take it over
        assert json.loads(f.read_text())["expires"] > max(first, time.time())
    assert not f.exists()


def test_an_expired_lease_is_taken_over_and_a_live_one_refused(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    live = _foreign(st, "run-r0", 0, 60)
    with pytest.raises(WriterLockedError) as exc:
        st.length_writer("r0", 4, n_sequences=4, n_layers=1, n_features=2, labels=["y"])
    msg = str(exc.value)
    assert msg.startswith(f"run 'r0' in {st.location} is being written by another process "
                          "(pid 4242) on host other (lease ffffffff, generation 0, expires ")
    assert "\n" not in msg and "is taken over once its lease expires" in msg
    live.unlink()
    _foreign(st, "run-r0", 4, -1)  # expired
    with st.lock("r0") as held:
        files = sorted(p.name for p in (tmp_path / "s.zarr" / L.LEASE_DIR).iterdir())
        assert files == ["run-r0.g5.json"] and held.lease.lost is None


def test_a_writer_whose_lease_was_taken_over_records_nothing_more(tmp_path, monkeypatch):
    monkeypatch.setenv(L.ENV_TTL, "0.6")
    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    w = st.length_writer("r0", 4, n_sequences=8, n_layers=1, n_features=2, labels=["y"], block_size=4)
    blk = {"hidden": np.zeros((4, 4, 2, 2)), "tokens": np.zeros((4, 4), int),
           "labels": {"y": np.zeros((4, 4), int)}}
    w.write_block(0, **blk)
    w.flush()
    _foreign(st, "run-r0", 1, 60)  # another host took over (this one was cut off)
    deadline = time.time() + 20
    while L.run_lease(st.location, "r0").lost is None and time.time() < deadline:
        time.sleep(0.05)
    w.write_block(1, **blk)
    with pytest.raises(WriterLockedError, match=r"lost its lease \(taken over by another process "
                       r"\(pid 4242\) on host other"):
        w.close()
    assert st.root["runs/r0/len_004"].attrs["completed_blocks"] == [0]


def test_consolidation_waits_for_another_consolidation(tmp_path, monkeypatch):
    st = Store.create(str(tmp_path / "s.zarr"))
    monkeypatch.setenv(L.ENV_TTL, "1")
    busy = _foreign(st, "consolidate", 3, 1.0)  # a consolidation elsewhere, then it dies
    st.add_run("r0", task="parity", arch="lstm", seed=0)  # consolidates once that one expired
    assert not busy.exists()
    assert Store.open(str(tmp_path / "s.zarr")).run_ids() == ["r0"]
    assert not (tmp_path / "s.zarr" / L.LEASE_DIR).exists()


def test_root_attributes_are_written_under_the_consolidation_lease(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"), title="t")
    st.set_root_attrs(note="kept")
    other = Store.open(str(tmp_path / "s.zarr"), mode="r+")  # opened before: stale attrs
    st.set_root_attrs(more=1)
    other.set_root_attrs(third=True)  # reads the root afresh: nothing set before is lost
    attrs = Store.open(str(tmp_path / "s.zarr")).attrs
    assert attrs["note"] == "kept" and attrs["more"] == 1 and attrs["third"] is True
    assert attrs["title"] == "t"
    assert validate(str(tmp_path / "s.zarr")).ok


def test_lease_seconds_from_the_environment(monkeypatch):
    monkeypatch.setenv(L.ENV_TTL, "2.5")
    assert L.lease_seconds() == 2.5
    monkeypatch.setenv(L.ENV_TTL, "soon")
    with pytest.raises(InvalidArgumentError, match=r"LAYERSTATE_LEASE_SECONDS='soon' is not a positive"):
        L.lease_seconds()


def test_s3_creates_a_lease_with_a_conditional_put(s3_server):
    """moto and s3fs honour ``If-None-Match: *``: the second create of a name fails."""
    pytest.importorskip("s3fs")
    st = Store.create(_s3_url(), storage_options=s3_server)
    backend = L.backend_for(st.location)
    assert backend.kind == "conditional-put"
    # a writer's blocks find its run lease by the store they are written to
    assert L.zarr_store_key(st.root.store) == L.location_key(st.location)
    assert backend.create("x.g0.json", b"{}") is True
    assert backend.create("x.g0.json", b'{"other": 1}') is False
    assert backend.read("x.g0.json") == b"{}"
    with st.lock("r0"):
        assert any("run-r0.g0.json" in p for p in _leases_left(st))
        held = L.live_leases(st.location)
        assert len(held) == 1 and held[0].startswith(f"run 'r0': held by process (pid {os.getpid()}) on this host")
    assert not any("run-r0" in p for p in _leases_left(st)) and L.live_leases(st.location) == []


def test_repair_and_pack_respect_leases(tmp_path):
    from store.integrity.repair import repair
    from store.sharing.pack import pack

    st = Store.create(str(tmp_path / "s.zarr"))
    st.add_run("r0", task="parity", arch="lstm", seed=0)
    lease = _foreign(st, "run-r0", 0, 60)
    with pytest.raises(WriterLockedError, match=r"not repaired, nothing changed: run-r0: held by .*pid 4242"):
        repair(str(tmp_path / "s.zarr"))
    out = pack(Store.open(str(tmp_path / "s.zarr")), tmp_path / "s.zip")
    import zipfile

    names = zipfile.ZipFile(out).namelist()
    assert names and not any(n.startswith(L.LEASE_DIR) for n in names)  # a copy holds no leases
    lease.unlink()
    assert repair(str(tmp_path / "s.zarr")).actions == []
