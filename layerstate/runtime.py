"""Where the pipeline's work runs: threads, the store as every process sees it, and leases.

Nothing here runs at import time: no warning filter, environment variable or thread count
is changed by importing layerstate (docs/design.md). zarr's format notices are the store's
to silence, where it touches zarr (``store.zarrutil.quiet``).

* Threads. Every unit of work runs inside :func:`analysis.compute.one_thread` (the one
  thread pin, used by the analyses too: BLAS, OpenMP and torch at one thread, restored
  after); :func:`torch_threads` restores torch's count around code that sets it (training
  sets its ``[train] threads``).
* The store. Every process opens it by :func:`store_url`; before work is sent to a cluster,
  :func:`check_store_shared` makes sure every worker sees the same store.
* Leases. A unit that a cluster may run again after its worker died waits out the dead
  writer's lease (:func:`task_writer`) instead of being refused.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from analysis.compute import SchedulerError
from store.access.lease import acquire_waiting
from store.access.location import Location
from store.errors import LayerstateError

__all__ = ["StoreNotSharedError", "check_store_shared", "store_url", "task_writer", "torch_threads"]

#: Seconds the driver waits for a cluster's first worker, and for every worker to read the
#: store's token (:func:`check_store_shared`).
WORKER_WAIT_S = 60.0
#: Prefix of the token file :func:`check_store_shared` writes into a store's root (and removes).
TOKEN_PREFIX = ".layerstate-shared-"


@contextmanager
def torch_threads(n: int | None = None) -> Iterator[None]:
    """torch's intra-op thread count, ``n`` inside when given, restored on exit (whatever
    the code inside set it to)."""
    import torch

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class StoreNotSharedError(LayerstateError):
    """The workers of a dask cluster cannot see the store the driver writes to."""


def store_url(path: str | Path) -> str:
    """The store's address as every process should use it: a local path made absolute
    (workers need not share the driver's working directory); URLs unchanged."""
    loc = Location(str(path))
    return str(loc.local_path) if loc.is_local else loc.url


@contextmanager
def task_writer(store: Any, run_id: str) -> Iterator[None]:
    """A cluster task's hold on run ``run_id``'s writer lock (its lease and local lock) for
    the whole task; the library's writers inside take it again (re-entrant).

    Unlike the library, which refuses a second writer at once, a task waits out a lease held
    by another host (:func:`store.access.lease.acquire_waiting`): dask runs the task of a worker
    that died again elsewhere, and the dead worker's lease can only expire from there. A
    lease that is renewed meanwhile (a live writer) is refused in one line, as is a live
    writer on this host."""
    lease = acquire_waiting(store.lock(run_id).lease)
    try:
        with store.lock(run_id):
            yield
    finally:
        lease.release()


def check_store_shared(client: Any, url: str, storage_options: dict | None = None) -> int:
    """Make sure every worker of ``client``'s cluster sees the store at ``url``.

    The driver writes a random token into the store's root, each worker reads it back
    through the same URL and storage options, and the token is removed. A worker that reads
    nothing (a local directory on another host, a ``memory://`` store) or another token (a
    different directory at the same path) stops the work before it starts. Returns the number
    of workers checked (waiting up to :data:`WORKER_WAIT_S` for a first one).

    Raises
    ------
    StoreNotSharedError
        Naming the store, what a worker saw, and the fix: a shared filesystem every worker
        mounts at the same path, or an object-store URL.
    SchedulerError
        No worker joined the cluster in time, or the workers did not answer.
    """
    address = client.scheduler.address
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT_S)
    except Exception:  # noqa: BLE001 - distributed's timeout type varies by version
        raise SchedulerError(
            f"no dask worker joined the scheduler at {address} within {WORKER_WAIT_S:g} s; "
            f"start some (`dask worker {address}`)"
        ) from None
    token = secrets.token_hex(16)
    name = TOKEN_PREFIX + token
    fs, root = Location(url, storage_options or {}).filesystem()
    path = f"{root.rstrip('/')}/{name}"
    fs.pipe_file(path, token.encode())
    try:
        workers = sorted(client.nthreads())
        futures = [client.submit(_read_token, url, storage_options, name, token, workers=[w],
                                 allow_other_workers=False, pure=False, key=f"layerstate-share-{w}-{token}")
                   for w in workers]
        deadline = time.monotonic() + WORKER_WAIT_S
        answers = []
        for fut in futures:
            try:
                answers.append(fut.result(timeout=max(deadline - time.monotonic(), 0.1)))
            except TimeoutError:
                client.cancel(futures)
                raise SchedulerError(
                    f"dask workers at {address} did not answer within {WORKER_WAIT_S:g} s (busy "
                    "with other work?); run again when they are free"
                ) from None
        seen = dict(zip(workers, answers, strict=True))
    finally:
        try:
            fs.rm_file(path)
        except Exception:  # noqa: BLE001 - a token left behind is harmless (zarr ignores it)
            pass
    blind = {w: why for w, why in seen.items() if why}
    if blind:
        worker, why = next(iter(blind.items()))
        raise StoreNotSharedError(
            f"the store {url} is not the same store for every dask worker ({len(blind)} of "
            f"{len(seen)} could not read what this process wrote there; {worker}: {why}); put it "
            "on a shared filesystem every worker mounts at the same path, or use an object-store URL "
            "(e.g. s3://bucket/acts.zarr with -S KEY=VALUE options)"
        )
    return len(seen)


def _read_token(url: str, storage_options: dict | None, name: str, token: str) -> str:
    """On a worker: '' when the store's token reads back, else what went wrong (one line)."""
    try:
        fs, root = Location(url, storage_options or {}).filesystem()
        found = fs.cat_file(f"{root.rstrip('/')}/{name}").decode(errors="replace")
    except Exception as exc:  # noqa: BLE001 - any failure means the worker cannot see it
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return "" if found == token else "a different store answers at that address"
