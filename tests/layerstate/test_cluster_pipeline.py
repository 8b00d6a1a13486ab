"""The pipeline on a dask.distributed cluster: workers train and capture their own runs into
the shared store, which then holds exactly what local threads store; a store the workers cannot
see stops the work before it starts; an object-store URL travels with its -S options.

One LocalCluster of two worker processes serves the whole module (starting one costs seconds).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from layerstate.cli import main

# The tiniest grid that still has two runs to send to two workers: 1 task, 2 architectures,
# a width-8 single layer, 6 steps, one captured length.
TINY = """
[experiment]
name = "tiny-cluster"

[grid]
tasks = ["parity"]
archs = ["lstm", "gru"]
seeds = [0]

[train]
length = 8
steps = 6
batch_size = 8
eval_every = 3
n_eval = 16
eval_lengths = [8]
n_test = 16
warmup = 1

[capture]
lengths = [8]
n_sequences = 16

[models.lstm]
d_model = 8
n_layers = 1

[models.gru]
d_model = 8
n_layers = 1

[analysis]
probe_positions = "pooled"
probe_folds = 2
"""
RUNS = ["parity-gru-default-s0", "parity-lstm-default-s0"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # a task that cannot travel hangs


@pytest.fixture(scope="module")
def cluster():
    """Two one-thread worker processes, shared by the module's tests."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as c:
        yield c


@pytest.fixture
def exp_file(tmp_path) -> Path:
    p = tmp_path / "tiny.toml"
    p.write_text(TINY)
    return p


def cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def _arrays(url: str, storage_options: dict | None = None) -> dict[str, np.ndarray]:
    """Every stored array of every run: weights and the captured length, by name."""
    from store import Store

    st = Store.open(url, storage_options=storage_options)
    out = {}
    for rid in st.run_ids():
        for name, w in st.read_weights(rid).items():
            out[f"{rid}/weights/{name}"] = w
        for L in st.lengths(rid):
            ds = st.open_length(rid, L).compute()
            for var_name, var in ds.data_vars.items():
                out[f"{rid}/len{L}/{var_name}"] = var.values
    return out


def test_run_on_a_cluster_stores_bit_identical_arrays_to_threads(cluster, exp_file, tmp_path):
    """The same grid trained and captured here (threads) and by `layerstate run --scheduler
    ADDR` on two worker processes: every stored array equal bit for bit, every run present,
    the store valid, the probes equal within float tolerance."""
    from layerstate.experiment import load_experiment
    from layerstate.pipeline import capture_experiment, probe_experiment, train_experiment
    from store import Store, validate

    exp = load_experiment(exp_file)
    here = str(tmp_path / "threads.zarr")
    Store.create(here)
    trained_here = {r.run_id: r for r in train_experiment(exp.plan, here, scheduler="threads")}
    capture_experiment(exp.plan, here, scheduler="threads")
    probe_experiment(Store.open(here, mode="r+"), exp, say=lambda line: None, scheduler="threads")

    res = cli("run", exp_file, "--out", tmp_path / "out", "--scheduler", cluster.scheduler_address)
    assert res.exit_code == 0, res.output
    assert f"on the dask cluster at {cluster.scheduler_address} (2 workers)" in res.output
    assert "captured 2 groups (2 blocks written)" in res.output
    there = str(tmp_path / "out" / "store.zarr")

    a, b = _arrays(here), _arrays(there)
    assert sorted(a) == sorted(b) and len(a) > 10
    assert {k.split("/")[0] for k in b} == set(RUNS)
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes(), key
    st = Store.open(there)
    assert st.run_ids() == RUNS
    for rid in RUNS:  # trained on a worker, with the same held-out accuracy
        assert st.run_attrs(rid)["metrics"]["accuracy"] == {"8": trained_here[rid].accuracy[8]}
    report = validate(there)
    assert report.ok, report.problems
    p_here, p_there = (Store.open(u).read_result("probes/parity") for u in (here, there))
    assert list(p_there.run.values) == list(p_here.run.values)
    for var in ("accuracy", "profile"):
        xr.testing.assert_allclose(p_here[var], p_there[var], rtol=1e-6, atol=1e-9)
    assert (tmp_path / "out" / "report" / "index.html").exists()


def test_a_store_the_workers_cannot_see_stops_before_any_training(cluster, exp_file, tmp_path):
    """memory:// lives in each process: the driver's token is not there for the workers. A
    store that does not exist is named before the workers are asked."""
    from store import Store

    missing = tmp_path / "missing.zarr"
    res = cli("capture", exp_file, "--store", missing, "--scheduler", cluster.scheduler_address)
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert f"{missing} does not exist" in res.output and not missing.exists()

    url = "memory://layerstate-not-shared/store.zarr"
    res = cli("train", exp_file, "--store", url, "--scheduler", cluster.scheduler_address)
    assert res.exit_code == 2, res.output
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"layerstate: error: the store {url} is not the same store for every "
                           "dask worker (2 of 2")
    assert "a shared filesystem every worker mounts at the same path" in line
    assert "object-store URL" in line
    st = Store.open(url)
    assert st.run_ids() == []  # nothing was trained
    assert not [p for p in st.location.filesystem()[0].ls(st.location.filesystem()[1])
                if ".layerstate-shared-" in str(p)]  # the token is gone


def test_workers_write_their_runs_to_an_object_store_with_the_storage_options(
        cluster, exp_file, s3_server):
    """train and capture on the cluster into s3:// (a local moto server): each worker opens
    the store with the -S options it was handed (the endpoint and keys exist nowhere else)."""
    from store import Store, validate

    url = "s3://layerstate-test/cluster.zarr"
    opts = [f"-S{k}={json.dumps(v) if isinstance(v, dict) else v}" for k, v in s3_server.items()]
    address = cluster.scheduler_address
    res = cli("train", exp_file, "--store", url, "--scheduler", address, *opts)
    assert res.exit_code == 0, res.output
    assert sum("6 steps" in line for line in res.output.splitlines()) == 2
    res = cli("capture", exp_file, "--store", url, "--scheduler", address, *opts)
    assert res.exit_code == 0, res.output
    assert f"captured 2 groups into {url} (2 blocks written, 0 already there)" in res.output

    st = Store.open(url, storage_options=s3_server)
    assert st.run_ids() == RUNS and all(st.lengths(r) == [8] for r in RUNS)
    assert all(st.run_attrs(r)["status"] == "trained" for r in RUNS)
    report = validate(url, storage_options=s3_server)
    assert report.ok, report.problems


def test_the_executor_runs_one_work_list_here_and_on_the_cluster_alike(cluster, exp_file, tmp_path):
    """The same work list (training and capture of the grid) run by the executor on local
    threads and as tasks on the cluster's two workers: the same units with the same
    results (here in list order), and stores equal bit for bit."""
    from distributed import Client

    from layerstate.executor import Executor
    from layerstate.experiment import load_experiment
    from layerstate.work import work_list
    from store import Store

    work = work_list(load_experiment(exp_file), stages=("train", "capture"))
    assert [w.stage for w in work] == ["train", "train", "capture", "capture"]
    here, there = str(tmp_path / "threads.zarr"), str(tmp_path / "cluster.zarr")
    for url in (here, there):
        Store.create(url)
    done_here = Executor("threads", here).results(work)
    with Client(cluster, set_as_default=False) as client:
        done_there = Executor(client, there).results(work)
    assert list(done_here) == [w.key for w in work]
    assert sorted(done_there) == sorted(done_here)
    for item in work:
        a, b = done_here[item.key], done_there[item.key]
        if item.stage == "train":
            assert (a.run_id, a.skipped, a.steps, a.accuracy) == (b.run_id, b.skipped, b.steps, b.accuracy)
        else:
            assert a == b and a.blocks_written == a.blocks_total == 1
    a, b = _arrays(here), _arrays(there)
    assert sorted(a) == sorted(b) and len(a) > 10
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes(), key
