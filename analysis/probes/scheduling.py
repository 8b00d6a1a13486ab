"""Running a probe graph: the local threaded scheduler, or dask.distributed, BLAS pinned.

One BLAS thread per worker thread: with two OpenBLAS threads per fit on a loaded 2-core
machine a 50 ms fit took 10 s (NOTES.md "Threads"). Parallelism comes from computing cells
side by side instead.
"""

from __future__ import annotations

import threading
from typing import Any

import dask

LOCAL = {
    "threads": "threads",
    "threading": "threads",
    "sync": "sync",
    "synchronous": "sync",
    "single-threaded": "sync",
}

_pinned = False
_pin_lock = threading.Lock()


def pin_blas_on_worker() -> None:
    """On a dask.distributed worker, limit BLAS/OpenMP to one thread, once per process.

    ``threadpoolctl.threadpool_limits`` is process-wide, not per thread, so entering and leaving
    it inside concurrent tasks would race (one task's exit restores the other's threads). Workers
    therefore pin once and keep it; the local scheduler pins around the whole compute instead.
    """
    global _pinned
    if _pinned:
        return
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return  # not on a distributed worker: the caller's compute() holds the limit
    with _pin_lock:
        if not _pinned:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=1)
            _pinned = True


def compute(tasks: list, scheduler: Any = None, num_workers: int | None = None) -> list:
    """Compute delayed ``tasks`` on ``scheduler``; returns their results in order.

    ``scheduler``: ``None`` or ``"threads"`` (local threads, one per core), ``"sync"`` (one
    thread, in order -- for debugging and for the sequential reference timing), a
    ``distributed.Client``, a cluster object (anything with ``scheduler_address``, e.g.
    ``LocalCluster``), or the address string of a running scheduler (``"tcp://host:8786"``).
    """
    from threadpoolctl import threadpool_limits

    if scheduler is None or (isinstance(scheduler, str) and scheduler in LOCAL):
        name = LOCAL.get(scheduler or "threads")
        kwargs = {"num_workers": num_workers} if name == "threads" and num_workers else {}
        with threadpool_limits(limits=1):
            return list(dask.compute(*tasks, scheduler=name, **kwargs))
    if isinstance(scheduler, str):
        if "://" not in scheduler:
            raise ValueError(
                f"scheduler {scheduler!r} is neither a local scheduler {sorted(LOCAL)} nor an "
                "address like 'tcp://127.0.0.1:8786'"
            )
        from distributed import Client

        with Client(scheduler, set_as_default=False) as client:
            return _on_client(client, tasks)
    if hasattr(scheduler, "scheduler_address") and not hasattr(scheduler, "gather"):
        from distributed import Client

        with Client(scheduler, set_as_default=False) as client:
            return _on_client(client, tasks)
    if hasattr(scheduler, "compute") and hasattr(scheduler, "gather"):
        return _on_client(scheduler, tasks)
    raise TypeError(
        f"scheduler must be None, one of {sorted(LOCAL)}, an address string, a distributed.Client "
        f"or a cluster; got {type(scheduler).__name__}"
    )


def _on_client(client: Any, tasks: list) -> list:
    futures = client.compute(tasks)
    return list(client.gather(futures))
