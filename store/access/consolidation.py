"""One consolidation of a store's metadata at a time, across threads, processes and hosts: the
store's consolidation lease (:func:`~store.access.lease.consolidation_lease`) held around each
rewrite of the consolidated snapshot or of the root attributes, and the check afterwards that
what was written is what the root holds."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from ..errors import WriterLockedError
from ..metadata.digests import consolidate_once, root_is
from .lease import Lease, consolidation_lease, lease_seconds, location_key
from .location import Location

__all__ = ["consolidate_checked", "consolidating"]

#: Per store: threads of one process consolidate one at a time (the lease is per process).
_THREAD_LOCKS: dict[str, Any] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _consolidation_wait() -> float:
    """How long a consolidation waits for another one to finish before giving up."""
    return max(600.0, 10 * lease_seconds())


@contextlib.contextmanager
def consolidating(loc: Location) -> Iterator[Lease]:
    """Hold the store's consolidation lease (and this process's lock for it): one
    consolidation, or root-attribute write, at a time across every process and host."""
    key = location_key(loc)
    with _THREAD_LOCKS_GUARD:
        lock = _THREAD_LOCKS.setdefault(key, threading.RLock())
    with lock:
        lease = consolidation_lease(loc)
        lease.acquire(wait=_consolidation_wait())
        try:
            yield lease
        finally:
            lease.release()


def consolidate_checked(loc: Location, zs: Any) -> None:
    """One consolidation under the lease, checked: the root read back afterwards must still
    be the document written, and the lease still this process's (else it is done again)."""
    for _ in range(3):
        with consolidating(loc) as lease:
            written = consolidate_once(zs)
            if lease.lost is None and root_is(zs, written):
                return
    raise WriterLockedError(
        f"{loc}: the consolidated metadata was replaced by another process three times while "
        "this one wrote it (its consolidation lease was taken over: a process paused for longer "
        "than the lease lasts?); run `layerstate repair` on the store once its writers finish"
    )
