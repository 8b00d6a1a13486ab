"""Faults on a dask.distributed cluster: a worker killed in the middle of a capture, and a
cluster that goes away in the middle of training.

The grid is the tiny two-run experiment of tests/layerstate/test_cluster_pipeline.py without probes
(only training and capture are under test). A worker is made to stop at a chosen point by
patching one function in the worker processes (``client.run``); the patch stops only the
first task that reaches that point, so a task run again after the fault goes through.
Leases last ten minutes here: a writer that died is taken over because its pid is gone,
never because its lease ran out (a lease still counted live would refuse the new writer).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.layerstate.test_cluster_pipeline import RUNS, TINY, _arrays, cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # a stopped worker that is never killed hangs

TINY_NO_PROBES = TINY.replace("[analysis]\n", "[analysis]\nprobe = false\n")
#: Worker environment: leases far longer than the tests, so only a dead pid frees one.
WORKER_ENV = {"LAYERSTATE_LEASE_SECONDS": "600"}
#: Seconds to wait for a patched worker to reach its stopping point.
WAIT_S = 120.0

#: Run in a worker by ``client.run(exec, ...)``: the first block about to be recorded (its
#: chunks stored, the run's lease held) stops its process, after writing the pid and the run
#: into MARKER; every later block, in any process, is recorded as usual.
STOP_BEFORE_RECORD = """
import os, time
from store.io.writer import LengthWriter

def _record(self, blocks, _original=LengthWriter._record):
    try:
        fd = os.open(MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return _original(self, blocks)
    os.write(fd, f"{os.getpid()} {self.run_id}".encode())
    os.close(fd)
    while True:
        time.sleep(1)

LengthWriter._record = _record
"""

#: Run in a worker: training of the LSTM run stops its process once the run's lease is held
#: (in ``fit``), after writing the pid into MARKER; every finished training writes
#: ``trained-<run>`` beside it.
STOP_LSTM_TRAINING = """
import os, time
from pathlib import Path
import capture.train as train

def fit(model, *args, _original=train.fit, **kwargs):
    if getattr(model, "arch", None) == "lstm":
        Path(MARKER).write_text(str(os.getpid()))
        while True:
            time.sleep(1)
    return _original(model, *args, **kwargs)

def train_run(store, spec, *args, _original=train.train_run, **kwargs):
    result = _original(store, spec, *args, **kwargs)
    (Path(MARKER).parent / f"trained-{spec.run_id}").write_text("")
    return result

train.fit = fit
train.train_run = train_run
"""


def _cluster():
    from distributed import LocalCluster

    return LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                        dashboard_address=None, env=WORKER_ENV)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("faults") / "tiny.toml"
    p.write_text(TINY_NO_PROBES)
    return p


@pytest.fixture(scope="module")
def reference(tiny, tmp_path_factory) -> dict:
    """Every array of the grid trained and captured on local threads."""
    from layerstate.experiment import load_experiment
    from layerstate.pipeline import capture_experiment, train_experiment
    from store import Store

    exp = load_experiment(tiny)
    url = str(tmp_path_factory.mktemp("threads") / "store.zarr")
    Store.create(url)
    list(train_experiment(exp.plan, url, scheduler="threads"))
    capture_experiment(exp.plan, url, scheduler="threads")
    return _arrays(url)


def _patch_workers(address: str, source: str, marker: Path) -> dict[str, int]:
    """Run ``source`` (with MARKER set) in every worker of the cluster; their pids by address."""
    from distributed import Client

    with Client(address, set_as_default=False) as client:
        client.run(exec, source, {"MARKER": str(marker)})
        return client.run(os.getpid)


def _wait_for(*paths: Path) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if all(p.exists() for p in paths):
            return True
        time.sleep(0.1)
    return False


def _lease_holders(store: Path, run_id: str) -> list[int]:
    """The pids written in the run's lease objects (store/access/lease.py)."""
    from store.access.lease import LEASE_DIR

    return [json.loads(p.read_text())["pid"] for p in (store / LEASE_DIR).glob(f"run-{run_id}.g*.json")]


def _same_arrays(reference: dict, store: Path) -> None:
    got = _arrays(str(store))
    assert sorted(got) == sorted(reference) and len(got) > 10
    for key, value in reference.items():
        assert got[key].dtype == value.dtype and got[key].tobytes() == value.tobytes(), key


def test_a_worker_killed_mid_capture_is_replaced_and_the_store_is_bit_identical(
        tiny, reference, tmp_path):
    """SIGKILL the worker process that is capturing a run (its block's chunks stored, not
    yet recorded; the run's lease held): dask runs the capture again on a live worker, which
    takes the dead writer's lease over at once and rewrites the block. The command succeeds
    and the store is complete, valid and bit-identical to the threads run, with no lease
    left behind."""
    from distributed import Client

    from store import validate
    from store.access.lease import LEASE_DIR

    marker = tmp_path / "stopped"
    store = tmp_path / "out" / "store.zarr"
    seen: dict = {}

    with _cluster() as cluster:
        pids = _patch_workers(cluster.scheduler_address, STOP_BEFORE_RECORD, marker)

        def kill_when_stopped() -> None:
            if not _wait_for(marker):
                return
            time.sleep(0.2)  # the marker's text is written right after it is created
            pid, run_id = marker.read_text().split()
            seen.update(pid=int(pid), run=run_id, holders=_lease_holders(store, run_id))
            os.kill(int(pid), signal.SIGKILL)

        killer = threading.Thread(target=kill_when_stopped, daemon=True)
        killer.start()
        res = cli("run", tiny, "--out", tmp_path / "out", "--scheduler", cluster.scheduler_address)
        killer.join(timeout=WAIT_S)
        assert res.exit_code == 0, res.output
        assert seen, "no worker reached the point where it was to be killed"
        assert seen["pid"] in pids.values() and seen["run"] in RUNS
        assert seen["holders"] == [seen["pid"]]  # killed while holding the run's lease
        assert "captured 2 groups (2 blocks written)" in res.output

        with Client(cluster.scheduler_address, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=WAIT_S)  # the nanny restarted the killed one
            after = client.run(os.getpid)
        assert seen["pid"] not in after.values()

    _same_arrays(reference, store)
    report = validate(str(store))
    assert report.ok, report.problems
    assert not (store / LEASE_DIR).exists()  # the dead writer's lease was taken over, then released


def test_a_cluster_that_goes_away_mid_training_fails_in_one_line_and_a_rerun_resumes(
        tiny, reference, tmp_path):
    """Close the cluster while one run is trained and the other is training: `layerstate
    run` stops with one line naming the address and saying how to resume. The same command
    on a new cluster skips the trained run, trains the other (taking over the lease its
    killed worker held) and completes: the store equals the threads run."""
    from store import Store, validate

    marker = tmp_path / "stopped"
    out = tmp_path / "out"
    first = _cluster()
    address = first.scheduler_address
    _patch_workers(address, STOP_LSTM_TRAINING, marker)

    def close_when_stopped() -> None:
        _wait_for(marker, tmp_path / f"trained-{RUNS[0]}")
        first.close()

    closer = threading.Thread(target=close_when_stopped, daemon=True)
    closer.start()
    try:
        res = cli("run", tiny, "--out", out, "--scheduler", address)
    finally:
        closer.join(timeout=WAIT_S)
        first.close()
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    errors = [line for line in res.output.splitlines() if line.startswith("layerstate: error:")]
    assert len(errors) == 1 and res.output.strip().splitlines()[-1] == errors[0], res.output
    assert f"lost the dask cluster at {address}" in errors[0]
    assert "run the same command again to resume" in errors[0]
    st = Store.open(str(out / "store.zarr"))
    assert st.run_attrs(RUNS[0])["status"] == "trained"
    assert st.run_attrs(RUNS[1]).get("status") != "trained"

    with _cluster() as second:
        res = cli("run", tiny, "--out", out, "--scheduler", second.scheduler_address)
    assert res.exit_code == 0, res.output
    assert f"{RUNS[0]}: already trained" in res.output
    assert f"{RUNS[1]}: 6 steps" in res.output
    assert "captured 2 groups" in res.output  # the trained run's capture may have finished before
    _same_arrays(reference, out / "store.zarr")
    report = validate(str(out / "store.zarr"))
    assert report.ok, report.problems


# ------------------------------------------------------------- a dead worker on another host
def _foreign_lease(store: Path, run_id: str, expires_in: float) -> Path:
    """A run lease written as a process of another host holds it (its pid cannot be checked
    from here, so only its expiry frees it)."""
    from store.access.lease import FORMAT, LEASE_DIR

    d = store / LEASE_DIR
    d.mkdir(exist_ok=True)
    f = d / f"run-{run_id}.g0.json"
    f.write_text(json.dumps({"format": FORMAT, "name": f"run-{run_id}", "host": "other",
                             "node": "other||", "pid": 4242, "uuid": "f" * 32, "generation": 0,
                             "expires": time.time() + expires_in}))
    return f


@pytest.fixture
def short_leases(monkeypatch):
    import store.access.lease

    monkeypatch.setenv("LAYERSTATE_LEASE_SECONDS", "1")
    monkeypatch.setattr(store.access.lease, "TAKEOVER_MARGIN_S", 0.3)


def test_a_task_run_again_waits_out_the_lease_of_a_dead_writer_on_another_host(
        tiny, tmp_path, short_leases):
    """The training and capture tasks, run again after their worker died on another host
    holding the run's lease, wait for that lease to expire (plus the margin) and take it
    over, instead of refusing; then they train and capture as usual."""
    from layerstate.experiment import load_experiment
    from layerstate.stages import capture_task, train_task
    from store import Store
    from store.access.lease import LEASE_DIR

    spec = load_experiment(tiny).plan.runs()[0]
    store = tmp_path / "store.zarr"
    Store.create(str(store))
    lease = _foreign_lease(store, spec.run_id, 1.0)
    expires = json.loads(lease.read_text())["expires"]
    res = train_task(spec, str(store), None, "cpu")
    assert time.time() >= expires + 0.3  # not taken before the lease ran out
    assert res.run_id == spec.run_id and not res.skipped and res.steps == 6
    assert Store.open(str(store)).run_attrs(spec.run_id)["status"] == "trained"
    assert not (store / LEASE_DIR).exists()  # the dead one's deleted, then ours released

    _foreign_lease(store, spec.run_id, 1.0)
    cap = capture_task(spec, str(store), None, "len", 8, "cpu")
    assert (cap.blocks_written, cap.blocks_total) == (1, 1)
    assert Store.open(str(store)).open_length(spec.run_id, 8).sizes["sequence"] == 16
    assert not (store / LEASE_DIR).exists()


def test_a_task_does_not_wait_out_a_lease_that_is_being_renewed(tiny, tmp_path, short_leases):
    """A lease of another host that keeps being renewed has a live writer: the task fails
    with the one line naming it, writes nothing and leaves that lease alone."""
    from layerstate.experiment import load_experiment
    from layerstate.stages import train_task
    from store import Store
    from store.errors import WriterLockedError

    spec = load_experiment(tiny).plan.runs()[0]
    store = tmp_path / "store.zarr"
    Store.create(str(store))
    lease = _foreign_lease(store, spec.run_id, 1.0)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(0.2):
            doc = json.loads(lease.read_text())
            lease.write_text(json.dumps({**doc, "expires": time.time() + 1.0}))

    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    try:
        with pytest.raises(WriterLockedError) as exc:
            train_task(spec, str(store), None, "cpu")
    finally:
        stop.set()
        renewer.join()
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"run {spec.run_id!r} in {store} is being written by another process "
                          "(pid 4242) on host other (lease ffffffff")
    assert spec.run_id not in Store.open(str(store)).run_ids()
    assert json.loads(lease.read_text())["uuid"] == "f" * 32  # still the live writer's


# ------------------------------------------------------------- a cluster lost mid-analysis
def test_a_cluster_that_goes_away_mid_analysis_fails_in_one_line(tmp_path):
    """An analysis's graph computing on a cluster (analysis.compute.compute, as probes,
    ablation and patching do) when the cluster is closed: one SchedulerError line naming the
    address and saying how to resume (what the CLI prints with exit 2), not distributed's
    cancellation traceback."""
    import dask
    from distributed import LocalCluster

    from analysis.compute import SchedulerError, compute
    from layerstate.cli import bad_input_types

    marker = tmp_path / "started"

    def slow(path: str) -> int:
        Path(path).write_text("")
        time.sleep(120)
        return 1

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    address = cluster.scheduler_address

    def close_when_started() -> None:
        _wait_for(marker)
        cluster.close()

    closer = threading.Thread(target=close_when_started, daemon=True)
    closer.start()
    try:
        with pytest.raises(SchedulerError) as exc:
            compute([dask.delayed(slow)(str(marker))], scheduler=address)
    finally:
        closer.join(timeout=WAIT_S)
        cluster.close()
    assert marker.exists()  # the task was running when the cluster went away
    msg = str(exc.value)
    assert "\n" not in msg and isinstance(exc.value, bad_input_types())
    assert msg.startswith(f"lost the dask cluster at {address} before its tasks finished (")
    assert "what finished is kept in the store" in msg
    assert msg.endswith("run the same command again to resume")
