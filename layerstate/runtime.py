"""Process-wide settings, each only inside a context that restores it.

Nothing here runs at import time: no warning filter, environment variable or thread count
is changed by importing layerstate (docs/design.md). zarr's format notices are the store's
to silence, where it touches zarr (``store.zarrutil.quiet``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


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


@contextmanager
def one_thread() -> Iterator[None]:
    """One BLAS/OpenMP thread and one torch thread inside (a training worker: two 1-thread
    jobs beat one 2-thread job for these small models, docs/measured.md, "Threads")."""
    from threadpoolctl import threadpool_limits

    with torch_threads(1), threadpool_limits(1):
        yield
