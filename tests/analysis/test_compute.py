"""The one compute policy: every scheduler gives the same results; threads pinned and restored;
bad schedulers are named quickly."""

from __future__ import annotations

import socket
import time

import dask
import numpy as np
import pytest
import torch
import xarray as xr
from threadpoolctl import threadpool_info, threadpool_limits

from analysis.compute import SchedulerError, compute, one_thread, worker_plugin
from analysis.interventions import ablation, patching
from analysis.probes import plan_probes
from tests.analysis.test_interventions import _ar_store, _planted_store
from tests.analysis.test_probes import make


def _threads() -> tuple[int, list[int]]:
    """torch's threads and every BLAS/OpenMP pool's, as seen by the calling thread."""
    return torch.get_num_threads(), [p["num_threads"] for p in threadpool_info()]


@pytest.fixture
def two_threads():
    """torch and every BLAS/OpenMP pool at two threads (the test environment pins them to one,
    which would hide a pin that is never undone); restored afterwards."""
    torch_before = torch.get_num_threads()
    with threadpool_limits(limits=2):
        torch.set_num_threads(2)
        try:
            if _threads() != (2, [2] * len(_threads()[1])):
                pytest.skip(f"cannot raise the thread pools to 2 here: {_threads()}")
            yield _threads()
        finally:
            torch.set_num_threads(torch_before)


def _small_graphs(tmp_path):
    """A small probe sweep, ablation and patching grid, built (not computed)."""
    plan = plan_probes(make(tmp_path), "y", folds=3)
    st, u, _ = _planted_store(tmp_path / "planted.zarr")
    ablate = ablation(st, ["r0"], [8, 12], settings=["pca:1", "leace"], layers=["L0"], folds=2)
    twins, rid = _ar_store(tmp_path / "ar.zarr", arch="gru", n_pairs=8)
    patch = patching(twins, [rid], 12, positions=[2, 5])
    return plan, ablate, patch


def _computed(graphs, scheduler):
    plan, ablate, patch = graphs
    *probe_parts, ablated, patched = compute([*plan.tasks, ablate, patch], scheduler)
    return plan.assemble(probe_parts), ablated, patched


@pytest.mark.slow  # starts two worker processes
@pytest.mark.timeout(300)  # a task result the workers cannot ship would hang, not fail
def test_threads_sync_and_a_local_cluster_give_the_same_results(tmp_path):
    """The same graphs (a probe sweep, an ablation, a patching grid) on local threads, in
    order, and on a LocalCluster of two worker processes (the tasks travel to other
    processes: stored groups, models and erasers are shipped by dask's own transport)."""
    graphs = _small_graphs(tmp_path)
    threads = _computed(graphs, "threads")
    for scheduler in ("sync", "local:2"):
        other = _computed(graphs, scheduler)
        for a, b in zip(threads, other, strict=True):
            xr.testing.assert_identical(a, b)
    probes, ablated, patched = threads
    assert np.isfinite(probes["accuracy"]).all()
    assert float(ablated.accuracy_drop.sel(run="r0", length=8, layer="L0", setting="pca:1")) > 0.4
    assert np.isfinite(patched.recovery.values).all()


def test_an_xarray_result_keeps_variables_computed_from_each_other():
    lazy = xr.Dataset({"a": ("x", dask.array.ones(4, chunks=2))})
    lazy["b"] = lazy.a * 2
    lazy["c"] = lazy.b + 1  # dask computing the Dataset as one collection lost "b"'s key
    done, c = compute([lazy, lazy.c], "threads")
    assert done.c.values.tolist() == [3.0] * 4 and c.name == "c"
    assert dask.is_dask_collection(lazy.c.data)  # the lazy one is left as it was


def test_an_unreachable_address_is_named_within_ten_seconds():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    start = time.perf_counter()
    with pytest.raises(SchedulerError, match=f"could not connect .*{address}"):
        compute([dask.delayed(sum)([1, 2])], address)
    assert time.perf_counter() - start < 10
    assert issubclass(SchedulerError, ValueError)  # the CLI turns it into one line, exit 2


@pytest.mark.parametrize("scheduler", ["processes", "local:0", "local:two", 3])
def test_a_scheduler_that_is_none_of_the_forms_is_refused(scheduler):
    with pytest.raises(SchedulerError, match="scheduler|local:N"):
        compute([dask.delayed(sum)([1, 2])], scheduler)


def test_threads_are_one_inside_and_restored_after(two_threads):
    before = two_threads

    def seen() -> tuple[int, list[int]]:
        return _threads()

    for scheduler in ("threads", "sync"):
        inside = compute([dask.delayed(seen, pure=False)() for _ in range(3)], scheduler)
        assert all(t == 1 and set(pools) == {1} for t, pools in inside), inside
        assert _threads() == before
    with one_thread():
        assert _threads()[0] == 1 and set(_threads()[1]) == {1}
    assert _threads() == before


def test_the_worker_plugin_pins_a_worker_process_and_restores_it(two_threads):
    plugin = worker_plugin()
    before = two_threads
    plugin.setup(worker=None)  # in the caller's process: left alone (compute pins it)
    assert _threads() == before
    plugin.client_pid = -1  # as in a worker process
    plugin.setup(worker=None)
    try:
        assert _threads()[0] == 1 and set(_threads()[1]) == {1}
    finally:
        plugin.teardown(worker=None)
    assert _threads() == before
