"""One compute policy for every analysis: where a dask graph runs, and how many threads a task uses.

Every analysis (probes, ablation, patching, interchange) builds a lazy graph and hands it to
:func:`compute`, the one place that picks the scheduler:

=========================  ========================================================================
``scheduler``              where the tasks run
=========================  ========================================================================
``None``, ``"auto"``       local threads, or local processes for long GIL-bound work (below)
``"threads"``              local threads (``num_workers`` of them; default one per core)
``"processes"``            local one-thread worker processes (``num_workers``; default one per
                           core), a pool started (spawned) for this call and closed after it
``"sync"``                 this thread, one task after another (debugging, sequential timings)
``"local:N"``              a ``distributed.LocalCluster`` of N one-thread worker processes, started
                           for this call and closed after it (its dashboard link is printed when
                           bokeh is installed); ``"local"``: N = ``num_workers`` or the core count
``"tcp://host:port"``      a running ``dask.distributed`` scheduler (any ``proto://`` address);
                           unreachable within :data:`CONNECT_TIMEOUT_S` -> :class:`SchedulerError`
a ``distributed.Client``   that client's cluster (left open)
a cluster object           anything with ``scheduler_address`` (``LocalCluster``, ...; left open)
=========================  ========================================================================

The scheduler's forms, sessions, the one-thread pin and the cluster-lost line are defined
here, below every package that runs work: analyses use them for their graphs, and
``layerstate``'s executor for the training and capture units it sends (where those run, on
which processes and in what order, is decided there, not here). A command that computes
several times (``layerstate run``) holds one session: :func:`connect` turns the
``scheduler`` into what to hand every call (a local scheduler unchanged, else one
``Client``, so ``"local:N"`` starts one cluster for the whole command). :func:`check`
refuses a malformed ``scheduler`` without connecting; :func:`reachable` also checks that an
address answers, for commands whose own work is not split into tasks. A TCP address nobody
listens at is refused at once rather than after the client's timeout. A cluster that goes away while a call waits for its tasks is one
:class:`SchedulerError` line naming its address (:func:`cluster_lost`), not distributed's
cancellation traceback.

Threads: one BLAS, OpenMP and torch thread per task; parallelism comes from running tasks side
by side. Two BLAS threads per fit on a loaded 2-core machine turned a 50 ms fit into 10 s
(docs/measured.md, "Threads"). Locally, :func:`one_thread` holds the process-wide limits (BLAS,
torch) around the call and restores them afterwards, and each thread of the pool made for the
call sets its own OpenMP limit (OpenMP's is per thread). On ``dask.distributed`` workers the
:class:`OneThreadPerTask` worker plugin pins each worker process for the call: it is registered
when the call starts and unregistered when it ends, which restores the workers' limits (one
analysis at a time per cluster keeps that exact: a second one replaces the plugin). Workers
started by a nanny (``local:N``, ``dask worker``) also inherit ``OMP_NUM_THREADS=1`` from
distributed's defaults. No module-level state is kept.

Processes: work that runs many small numpy calls between short stretches of Python (the probe
solver's lockstep L-BFGS) does not speed up on threads: every numpy call hands the GIL to the
other thread and takes it back, and on 2 cores 2 threads ran a probe sweep no faster than one
(docs/measured.md, "Probes"). ``None`` therefore picks ``"processes"`` when the caller
estimates its tasks at :data:`PROCESSES_FROM_S` or more single-thread seconds (``cpu_s``), more
than one worker is available, and worker processes can be started safely from here
(:func:`spawn_safe`); otherwise threads. Starting the pool costs about a second (each worker
imports the modules its tasks need), and every task's result travels back through a pipe, so
small or data-heavy work stays on threads.
"""
# Over 600 lines: the one compute policy; the scheduler forms of the table above, their sessions and the one-thread pin change together.

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import dask
from threadpoolctl import threadpool_limits

from analysis.mainguard import spawn_safe
from store.errors import LayerstateError

#: Names of dask's local schedulers accepted as ``scheduler``, and what dask calls them.
LOCAL = {
    "auto": "auto",  # resolved by compute() from the caller's estimate (default_scheduler)
    "threads": "threads",
    "processes": "processes",
    "multiprocessing": "processes",
    "threading": "threads",
    "sync": "sync",
    "synchronous": "sync",
    "single-threaded": "sync",
}
#: Environment variables that size a BLAS/OpenMP library's pool when it loads.
ONE_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: ``scheduler=None`` runs on worker processes when the caller's estimate of its tasks'
#: single-thread CPU seconds is at least this (and threads otherwise).
PROCESSES_FROM_S = 20.0
#: Seconds to wait for a scheduler address to answer before giving up.
CONNECT_TIMEOUT_S = 5.0
#: The worker plugin's name (one per cluster: a second registration replaces the first).
PLUGIN_NAME = "layerstate-one-thread-per-task"


class SchedulerError(LayerstateError, ValueError):
    """A ``scheduler`` that is not one of the accepted forms, or an address nobody answers at."""


# ----------------------------------------------------------------------------- threads
@contextmanager
def one_thread() -> Iterator[None]:
    """BLAS/OpenMP pools (threadpoolctl) and torch's intra-op pool limited to one thread.

    Process-wide limits, restored on exit. torch is pinned only if already imported (every
    analysis that runs torch imports it before building its graph); no import is forced. A BLAS
    library first loaded inside the block (scipy's own OpenBLAS, loaded when a task first
    imports ``scipy.linalg``) is beyond threadpoolctl's reach, so the block also sets
    :data:`ONE_THREAD_ENV`, which such a library reads as it loads: without it, scikit-learn
    fits inside the block ran a second BLAS thread that spun, 2x the CPU for no gain.
    """
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    env_before = {var: os.environ.get(var) for var in ONE_THREAD_ENV}
    os.environ.update(dict.fromkeys(ONE_THREAD_ENV, "1"))
    try:
        with threadpool_limits(limits=1):
            if torch is not None:
                torch.set_num_threads(1)
            try:
                yield
            finally:
                if torch is not None and before is not None:
                    torch.set_num_threads(before)
    finally:
        for var, value in env_before.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


class OneThreadPerTask:
    """Worker plugin: limit BLAS/OpenMP and torch to one thread in each worker process.

    ``setup`` pins BLAS/OpenMP (threadpoolctl) for the lifetime of the registration; torch's
    pool is pinned as soon as torch is imported in the worker (at setup, or before the first
    task that runs after the import: torch is never imported just to pin it, which costs
    seconds per worker). ``teardown`` restores what was there before. Workers inside the
    caller's own process (``processes=False``) are left alone: :func:`compute` holds
    :func:`one_thread` around the call there. Registered through :func:`worker_plugin`, which
    adds ``distributed``'s ``WorkerPlugin`` as a base at call time (importing ``distributed``
    costs about a second, so this module does not do it at import).
    """

    idempotent = False

    def __init__(self, client_pid: int) -> None:
        self.client_pid = client_pid
        self._limits: Any = None
        self._torch_before: int | None = None

    def setup(self, worker: Any) -> None:
        if os.getpid() == self.client_pid:
            return

        torch = sys.modules.get("torch")  # read first: torch's count follows its OpenMP limit
        before = torch.get_num_threads() if torch is not None else None
        self._limits = threadpool_limits(limits=1)
        self._pin_torch(before)

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if finish == "executing" and self._limits is not None and self._torch_before is None:
            self._pin_torch(None)

    def _pin_torch(self, before: int | None) -> None:
        torch = sys.modules.get("torch")
        if torch is not None:
            self._torch_before = before if before is not None else torch.get_num_threads()
            torch.set_num_threads(1)

    def teardown(self, worker: Any) -> None:
        if self._limits is not None:
            self._limits.restore_original_limits()
            self._limits = None
        torch = sys.modules.get("torch")
        if torch is not None and self._torch_before is not None:
            torch.set_num_threads(self._torch_before)
        self._torch_before = None


def worker_plugin() -> Any:
    """A :class:`OneThreadPerTask` plugin that ``distributed`` accepts as a ``WorkerPlugin``."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class Plugin(OneThreadPerTask, WorkerPlugin):
        pass

    return Plugin(os.getpid())


# ----------------------------------------------------------------------------- compute
def compute(
    tasks: Sequence[Any],
    scheduler: Any = None,
    num_workers: int | None = None,
    *,
    cpu_s: float | None = None,
) -> list:
    """Compute dask collections (``Delayed``, dask arrays, lazy xarray objects) on one scheduler.

    Parameters
    ----------
    tasks : sequence
        The collections; they are computed together (shared parts once).
    scheduler : None, str, distributed.Client or cluster
        See the module docstring: ``None``/``"threads"``, ``"sync"``, ``"local:N"``, an address
        ``"tcp://host:port"``, a ``Client`` or a cluster object.
    num_workers : int, optional
        Threads or processes of the local schedulers, or workers of ``"local"``; ignored
        otherwise.
    cpu_s : float, optional
        The caller's estimate of the tasks' single-thread CPU seconds, when they are
        GIL-bound (many small numpy calls): with ``scheduler=None`` and at least
        :data:`PROCESSES_FROM_S`, they run on worker processes. ``None``: threads.

    Returns
    -------
    list
        The computed values, in the order of ``tasks``.

    Raises
    ------
    SchedulerError
        ``scheduler`` is none of the accepted forms, or no scheduler answers at its address
        within :data:`CONNECT_TIMEOUT_S` seconds (the message names the address).
    """
    flat: list = []
    spans = []
    for task in tasks:
        parts, rebuild = _parts(task)
        spans.append((len(flat), len(flat) + len(parts), rebuild))
        flat += parts
    if scheduler is None or scheduler == "auto":
        scheduler = default_scheduler(cpu_s, num_workers)
    values = _dispatch(flat, scheduler, num_workers)
    return [rebuild(values[start:stop]) for start, stop, rebuild in spans]


def _dispatch(tasks: list, scheduler: Any, num_workers: int | None) -> list:
    if is_local(scheduler):
        return _on_local(tasks, LOCAL[scheduler or "threads"], num_workers)
    with connect(scheduler, num_workers) as client:
        return _on_client(client, tasks)


def _parts(task: Any) -> tuple[list, Callable[[list], Any]]:
    """The collections to hand dask for one task, and how to make the task's value of theirs.

    A lazy xarray object goes as the list of its dask arrays, computed together, then put back
    (what ``Dataset.compute`` does): dask 2026.8 computing a Dataset as one collection drops
    the key of a variable that another variable is computed from ("Missing dependency").
    """
    xr = sys.modules.get("xarray")
    if xr is None or not isinstance(task, (xr.Dataset, xr.DataArray)):
        return [task], _only
    name = "__layerstate_value__"
    ds = task.to_dataset(name=name) if isinstance(task, xr.DataArray) else task
    lazy = [k for k, v in ds.variables.items() if dask.is_dask_collection(v.data)]

    def rebuild(values: list) -> Any:
        out = ds.copy(deep=False)
        for key, value in zip(lazy, values, strict=True):
            out.variables[key].data = value
        return out[name].rename(task.name) if isinstance(task, xr.DataArray) else out

    return [ds.variables[k].data for k in lazy], rebuild


def _only(values: list) -> Any:
    return values[0]


def _on_local(tasks: list, name: str, num_workers: int | None) -> list:
    """Local threads (a pool made for this call) or this thread, one thread each for BLAS,
    OpenMP and torch."""
    if name == "sync":
        with one_thread():
            return list(dask.compute(*tasks, scheduler="sync"))
    if name == "processes":
        return _on_processes(tasks, num_workers)

    n = _local_workers(num_workers)
    with one_thread(), ThreadPoolExecutor(n, initializer=_one_openmp_thread) as pool:
        return list(dask.compute(*tasks, scheduler="threads", pool=pool))


def _local_workers(num_workers: int | None) -> int:
    """Threads or processes of a local scheduler: ``num_workers``, else one per core."""
    return int(num_workers or dask.system.CPU_COUNT)


def default_scheduler(cpu_s: float | None, num_workers: int | None = None) -> str:
    """What ``scheduler=None`` means for work estimated at ``cpu_s`` single-thread seconds
    (``None``: not GIL-bound): ``"processes"`` for long work when more than one worker is
    available and :func:`spawn_safe`, else ``"threads"``."""
    n = _local_workers(num_workers)
    if cpu_s is not None and cpu_s >= PROCESSES_FROM_S and n > 1 and spawn_safe():
        return "processes"
    return "threads"


def _on_processes(tasks: list, num_workers: int | None) -> list:
    """A pool of spawned one-thread worker processes made for this call (see the module
    docstring); each task's result comes back through a pipe."""
    n = _local_workers(num_workers)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(n, mp_context=context, initializer=_one_thread_process) as pool:
        return list(dask.compute(*tasks, scheduler="processes", pool=pool))


def _one_thread_process() -> None:
    """A pool process's whole life: one BLAS/OpenMP thread, and torch (imported later, by a
    task) sized by ``OMP_NUM_THREADS``."""
    os.environ.update(dict.fromkeys(ONE_THREAD_ENV, "1"))

    threadpool_limits(limits=1)


def _one_openmp_thread() -> None:
    """OpenMP's thread count is per calling thread: set it in each pool thread (scikit-learn
    sizes its OpenMP loops by it). The pool's threads end with the call."""
    threadpool_limits(limits=1, user_api="openmp")


def _unknown(scheduler: Any) -> str:
    what = repr(scheduler) if isinstance(scheduler, str) else f"of type {type(scheduler).__name__}"
    return (
        f"scheduler {what} is not one of: None or 'auto' (local threads or processes), 'threads', "
        "'processes' (local worker processes), 'sync', 'local:N' (a local cluster of N worker processes), an address like 'tcp://127.0.0.1:8786', a "
        "distributed.Client or a cluster object"
    )


def _n_workers(scheduler: str, num_workers: int | None) -> int:
    text = scheduler.partition(":")[2]
    if not text:
        return int(num_workers or os.cpu_count() or 1)
    if not text.isdigit() or int(text) < 1:
        raise SchedulerError(
            f"scheduler {scheduler!r}: 'local:N' needs a positive number of workers, e.g. 'local:2'"
        )
    return int(text)


def _is_client(obj: Any) -> bool:
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return False
    return isinstance(obj, Client)


#: What a cluster lost in the middle of an analysis leaves: an analysis stores its result
#: whole once it is computed, never part of it.
ANALYSIS_KEPT = ("what finished is kept in the store (trained runs, captured blocks, analyses "
                 "already stored; the one being computed is stored only once complete)")


def _on_client(client: Any, tasks: list) -> list:
    """Compute on a client's cluster with every worker pinned for the call, and this process
    too (in-process workers). A cluster that goes away meanwhile: :func:`cluster_lost`."""
    try:
        client.register_plugin(worker_plugin(), name=PLUGIN_NAME)
        try:
            with one_thread():
                futures = client.compute(tasks)
                try:
                    return list(client.gather(futures))
                except BaseException:
                    _cancel(client, futures)
                    raise
        finally:
            try:
                client.unregister_worker_plugin(PLUGIN_NAME)
            except Exception:  # noqa: BLE001 - a cluster shutting down keeps no pins to undo
                pass
    except Exception as exc:
        lost = cluster_lost(client, exc, ANALYSIS_KEPT)
        if lost is not None:
            raise lost from None
        raise


def _cancel(client: Any, futures: Any) -> None:
    try:
        client.cancel(futures)
    except Exception:  # noqa: BLE001 - a closing cluster cancels them anyway
        pass


def cluster_lost(client: Any, exc: BaseException, kept: str) -> SchedulerError | None:
    """One line if ``exc`` means that ``client`` lost its cluster before its tasks finished,
    else None (a task's own error is left as it is).

    The scheduler closed or became unreachable: distributed cancels every future of the
    client (``scheduler-connection-lost``), or a call on the closed connection fails. The
    line names the address, says what is kept (``kept``, e.g. ``"what finished is kept in
    the store"``) and how to resume.
    """
    from distributed.comm import CommClosedError

    status = str(getattr(client, "status", ""))
    if not (isinstance(exc, CancelledError) or (isinstance(exc, (CommClosedError, OSError))
                                                and status != "running")):
        return None
    try:
        address = client.scheduler.address
    except Exception:  # noqa: BLE001 - a closed client may have dropped its scheduler
        address = "?"
    reason = getattr(exc, "reason", None)
    if isinstance(exc, CancelledError) and reason:
        why = f"its tasks were cancelled: {reason}"
    else:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return SchedulerError(
        f"lost the dask cluster at {address} before its tasks finished ({why}); {kept}: start "
        "a cluster and run the same command again to resume"
    )


# ----------------------------------------------------------------------------- sessions
def is_local(scheduler: Any) -> bool:
    """Whether ``scheduler`` is one of the local schedulers (``None``/``"auto"``, ``"threads"``,
    ``"processes"``, ``"sync"``): work stays on this machine without a cluster. Anything else
    is ``dask.distributed``."""
    return scheduler is None or (isinstance(scheduler, str) and scheduler in LOCAL)


def check(scheduler: Any, num_workers: int | None = None) -> None:
    """Refuse a ``scheduler`` of none of the accepted forms, without connecting to anything.

    Raises
    ------
    SchedulerError
        One line listing the accepted forms (or, for ``"local:N"``, what N must be).
    """
    if is_local(scheduler) or _is_client(scheduler) or hasattr(scheduler, "scheduler_address"):
        return
    if isinstance(scheduler, str):
        if scheduler == "local" or scheduler.startswith("local:"):
            _n_workers(scheduler, num_workers)
            return
        if "://" in scheduler:
            return
    raise SchedulerError(_unknown(scheduler))


@contextmanager
def connect(
    scheduler: Any, num_workers: int | None = None, say: Callable[[str], None] | None = None
) -> Iterator[Any]:
    """What the work inside the block should be handed as its scheduler, ready for use.

    Local schedulers (``None``, ``"threads"``, ``"sync"``) come back unchanged. Anything else
    becomes a ``distributed.Client``, open for the block: ``"local:N"`` starts a
    ``LocalCluster`` of N one-thread worker processes (its address and dashboard link go to
    ``say``, default stderr) and closes it after; an address is connected to (refused or
    silent within :data:`CONNECT_TIMEOUT_S` -> :class:`SchedulerError` naming it) and the
    connection closed after; a ``Client`` is used as it is and left open; a cluster object
    gets a client of its own, closed after (the cluster is left running).

    One session for a whole command (train, capture, then the analyses) starts one local
    cluster, not one per computation.
    """
    check(scheduler, num_workers)
    if is_local(scheduler) or _is_client(scheduler):
        yield scheduler
        return
    if isinstance(scheduler, str) and (scheduler == "local" or scheduler.startswith("local:")):
        with _local_cluster(_n_workers(scheduler, num_workers), say) as cluster, \
                _client(cluster) as client:
            yield client
        return
    with _client(scheduler) as client:
        yield client


def reachable(scheduler: Any) -> None:
    """Check ``scheduler`` without doing any work on it: its form, and for an address that a
    dask scheduler answers there (:class:`SchedulerError` naming it if not). ``"local:N"``
    starts nothing: for commands whose own work is not split into tasks."""
    check(scheduler)
    if isinstance(scheduler, str) and "://" in scheduler:
        with _client(scheduler):
            pass


def _local_cluster(n_workers: int, say: Callable[[str], None] | None) -> Any:
    """A started ``LocalCluster`` of ``n_workers`` one-thread processes (a context manager),
    announced with its address and dashboard link."""
    from distributed import LocalCluster

    dashboard = ":0" if importlib.util.find_spec("bokeh") is not None else None
    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, dashboard_address=dashboard)
    where = (f"dashboard {cluster.dashboard_link}" if dashboard
             else "no dashboard: `pip install bokeh` for one")
    (say or _to_stderr)(
        f"dask: local cluster of {n_workers} worker(s) at {cluster.scheduler_address} ({where})"
    )
    return cluster


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _client(target: Any) -> Any:
    """A client connected to an address string or a cluster object (a context manager that
    closes it), or :class:`SchedulerError` naming the address."""
    from distributed import Client

    address = target if isinstance(target, str) else target.scheduler_address
    try:
        _refused_fast(address)
        return Client(target, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except Exception as exc:  # noqa: BLE001 - refused, timed out, or not a dask scheduler
        raise SchedulerError(
            f"could not connect to a dask scheduler at {address!r} within "
            f"{CONNECT_TIMEOUT_S:g} s ({type(exc).__name__}: {exc}); start one (`dask scheduler`, "
            "then `dask worker ADDRESS`), check the address, or compute locally with scheduler "
            "'threads' or 'local:N'"
        ) from None


def _refused_fast(address: str) -> None:
    """A TCP address nobody listens at fails at once (the client would retry it until its
    timeout); anything else is left to the client."""
    proto, _, rest = address.partition("://")
    if proto not in ("tcp", "tls"):
        return
    from distributed.comm import parse_host_port

    host, port = parse_host_port(rest)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except ConnectionRefusedError:
        raise ConnectionRefusedError(f"nothing listens at {host}:{port}") from None
