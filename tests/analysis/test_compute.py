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

from analysis.compute import (
    PROCESSES_FROM_S,
    SchedulerError,
    compute,
    default_scheduler,
    one_thread,
    spawn_safe,
    worker_plugin,
)
from analysis.interventions import ablation, patching
from analysis.probes import plan_probes
from tests.analysis.interventions.test_interventions import _ar_store, _planted_store
from tests.analysis.probes.test_probes import make


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
    for scheduler in ("sync", "processes", "local:2"):
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


@pytest.mark.parametrize("scheduler", ["process", "processes:2", "local:0", "local:two", 3])
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


def _pids(n: int, scheduler, **kw) -> set[int]:
    import os

    return set(compute([dask.delayed(os.getpid, pure=False)() for _ in range(n)], scheduler, **kw))


def test_none_runs_long_gil_bound_work_on_processes_and_the_rest_on_threads():
    """The caller's estimate decides: at least PROCESSES_FROM_S seconds -> worker processes
    (other pids), less or no estimate -> threads of this process; one worker -> threads."""
    import os

    assert spawn_safe()  # pytest's main script runs its guarded block
    assert default_scheduler(PROCESSES_FROM_S, 2) == "processes"
    assert default_scheduler(PROCESSES_FROM_S - 1, 2) == "threads"
    assert default_scheduler(None, 2) == "threads"
    assert default_scheduler(1e6, 1) == "threads"
    assert _pids(4, None, num_workers=2) == {os.getpid()}
    assert _pids(4, None, num_workers=2, cpu_s=1.0) == {os.getpid()}
    far = _pids(6, None, num_workers=2, cpu_s=PROCESSES_FROM_S)
    assert os.getpid() not in far and 1 <= len(far) <= 2


def test_the_process_pool_pins_one_blas_thread_and_ships_errors_back():
    def seen():
        return [p["num_threads"] for p in threadpool_info()]

    inside = compute([dask.delayed(seen, pure=False)() for _ in range(2)], "processes",
                     num_workers=2)
    assert all(set(pools) == {1} for pools in inside), inside

    def bad():
        raise SchedulerError("planted failure in a worker")

    with pytest.raises(SchedulerError, match="planted failure"):
        compute([dask.delayed(bad)()], "processes", num_workers=2)


_SCRIPT = """
import sys
import threading
sys.path.insert(0, {root!r})
from analysis.compute import default_scheduler
print("top", default_scheduler(1e6, 2))
def f():
    return default_scheduler(1e6, 2)
threading.Thread(target=lambda: print("via a library, unguarded", f())).run()
if __name__ == "__main__":
    print("guarded", f())
    threading.Thread(target=lambda: print("via a library, guarded", f())).run()
else:
    print("else", default_scheduler(1e6, 2))
"""


@pytest.mark.slow  # runs a script in a subprocess
def test_a_script_gets_processes_only_inside_its_main_guard(tmp_path):
    """Spawned workers import the main script again: only a call from the script's
    ``if __name__ == "__main__":`` block is safe; unguarded top-level code keeps threads."""
    import pathlib
    import subprocess
    import sys

    root = str(pathlib.Path(__file__).resolve().parents[2])
    script = tmp_path / "analysis_script.py"
    script.write_text(_SCRIPT.format(root=root))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split("\n")
    assert out[:4] == ["top threads", "via a library, unguarded threads", "guarded processes",
                       "via a library, guarded processes"], out


@pytest.mark.slow  # a fresh interpreter, so that scipy's BLAS is not loaded yet
def test_a_blas_first_loaded_inside_one_thread_starts_with_one_thread():
    """scipy ships its own OpenBLAS, loaded when scipy.linalg is first imported: loaded inside
    the block, it must come up with one thread (threadpoolctl only limits what is loaded)."""
    import subprocess
    import sys

    code = (
        "import os; os.environ.pop('OPENBLAS_NUM_THREADS', None); os.environ.pop('OMP_NUM_THREADS', None)\n"
        "from threadpoolctl import threadpool_info, threadpool_limits\n"
        "from analysis.compute import one_thread\n"
        "with threadpool_limits(limits=2):\n"
        "    loaded = {p['filepath'] for p in threadpool_info()}\n"
        "    with one_thread():\n"
        "        import scipy.linalg, sklearn.linear_model\n"
        "        new = [p for p in threadpool_info() if p['filepath'] not in loaded]\n"
        "        print(len(new), sorted({p['num_threads'] for p in new}))\n"
        "    print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120, env={**__import__("os").environ, "OPENBLAS_NUM_THREADS": "2",
                                           "OMP_NUM_THREADS": "2"}).stdout.split("\n")
    n_new, counts = out[0].split(" ", 1)
    assert int(n_new) >= 1 and counts == "[1]", out  # scipy's OpenBLAS (and libgomp) at one
    assert out[1] == "None"  # the environment is restored
