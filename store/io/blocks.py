"""The block pipeline of a length writer: a block's chunks are stored one block behind the caller.

:meth:`BlockPipeline.submit` hands every array of block ``b`` to a small thread pool
(:class:`~store.io.chunks.ChunkWriter`: cast, NaN/Inf check and encoding in one copy, then the
file), returns once the block's float chunks passed their checks, and meanwhile settles the
blocks before it: waits for their chunks, fsyncs the files (:func:`~store.io.chunks.make_durable`)
and only then reports them as finished. So a recorded block survives a power cut, a chunk
write that fails keeps its block unrecorded, and the threads store block ``b`` while the
caller prepares block ``b + 1``. The fast path writes a short last block too (padded with
the fill value, as zarr pads it). Anything it cannot write (other codecs, chunks cut short
along other axes) goes through zarr's ``__setitem__``; the files such a write touched are
found from the array's chunk grid (:func:`written_files`) and fsynced with the block's other
files before it is recorded.

A block is recorded only while this process still holds its run's lease (:mod:`store.access.lease`):
a writer whose lease was taken over (paused or cut off for longer than the lease lasts) stops
with one line instead of recording blocks over the writer that took over (S41).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore

from ..access.lease import check_group
from ..zarrutil import array, chunk_key
from .chunks import ChunkWriter, NotFinite, make_durable, wait_all

#: ``cast(var, values)``: values in their stored dtype, raising if they are not finite.
Cast = Callable[[str, np.ndarray], np.ndarray]


def written_files(arr: zarr.Array, rows: slice) -> list[Path]:
    """The local files ``arr[rows] = values`` writes: the chunk (shard, if sharded) of every
    key whose rows along axis 0 meet ``rows``, across the whole of the other axes (zarr
    stores each chunk it touches as a whole file, the fill value padding an edge chunk).
    Empty for a store that is not a local directory: there is no file to fsync, and an
    object store's write is stored when it returns."""
    store = arr.store_path.store
    if not isinstance(store, LocalStore) or not arr.shape:
        return []
    stored = tuple(arr.shards or arr.chunks)  # what one key holds
    along = sorted({r // stored[0] for r in range(*rows.indices(arr.shape[0]))})
    others = [range(-(-s // c)) for s, c in zip(arr.shape[1:], stored[1:], strict=True)]
    root = Path(store.root)
    return [root / chunk_key(arr, (r, *coord)) for r in along for coord in itertools.product(*others)]


class BlockPipeline:
    """Stores blocks of one group's arrays; ``record(blocks)`` is called with each batch of
    blocks whose chunks are all stored and durable."""

    def __init__(self, grp: zarr.Group, record: Callable[[list[int]], None]) -> None:
        self.group = grp
        self._record = record
        self._chunks: ChunkWriter | None = None
        # submitted, not yet recorded: (block, its fast-path writes, files zarr wrote for it)
        self._inflight: list[tuple[int, list[Future[Any]], list[Path]]] = []
        self._arrays: dict[str, zarr.Array] = {}

    def in_flight(self, b: int) -> bool:
        """True if block ``b`` was submitted and is not recorded yet."""
        return any(b == prev for prev, _, _ in self._inflight)

    def _array(self, var: str) -> zarr.Array:
        arr = self._arrays.get(var)
        if arr is None:  # opening reads its metadata: once per writer, not per block
            arr = self._arrays[var] = array(self.group, var)
        return arr

    def submit(self, b: int, rows: slice, data: Mapping[str, np.ndarray], *, uncast: set[str],
               check_finite: bool, cast: Cast) -> None:
        """Store ``data`` (variable -> values of rows ``rows``) as block ``b``.

        Variables in ``uncast`` are floats still in the caller's dtype: the chunk threads
        cast them (checking NaN/Inf when ``check_finite``), zarr's path uses ``cast``. On a
        NaN/Inf, ``cast`` is called again to raise the error that says where it is. Returns
        after the checks; the block is recorded by a later :meth:`settle`.
        """
        if self._chunks is None:
            self._chunks = ChunkWriter()
        stored: list[Future[Any]] = []
        written: list[Path] = []  # files zarr's own write stored: fsynced with the rest
        checks: list[tuple[str, list[Future[None]]]] = []
        try:
            # write_empty_chunks is a runtime setting, not stored with the array: without it
            # zarr compares every float16 chunk with the fill value (~4x slower writes).
            with zarr.config.set({"array.write_empty_chunks": True}):
                for var, values in data.items():
                    arr = self._array(var)
                    check = var in uncast and check_finite
                    submitted = self._chunks.write_row(arr, b, values, check_finite=check, pad_last=True)
                    if submitted is None:
                        arr[rows] = cast(var, values) if var in uncast else values
                        written += written_files(arr, rows)
                    else:
                        stored.extend(submitted.stored)
                        checks.append((var, submitted.checked))
            # the blocks before this one: fsynced and recorded while the threads work on it
            self.settle(keep=0)
            for var, futures in checks:
                for fut in futures:
                    try:
                        fut.result()
                    except NotFinite:  # say where, and what to do (the chunk was not written)
                        cast(var, data[var])
                        raise
        except BaseException:
            with contextlib.suppress(BaseException):
                wait_all(stored)  # no write of this block may outlive the error
            raise
        self._inflight.append((b, stored, written))

    def settle(self, keep: int) -> None:
        """Record the blocks in flight whose chunks are all stored, waiting for all but the
        newest ``keep``; a failed chunk write is raised and its block stays unrecorded.
        Local chunk files are fsynced first, those zarr wrote too: a recorded block survives a
        power cut."""
        ready, paths, error = [], [], None
        while len(self._inflight) > keep:
            b, futures, written = self._inflight.pop(0)
            try:
                paths += [p for p in wait_all(futures) if p is not None] + written
            except BaseException as exc:  # the other blocks may still be recorded
                error = error or exc
                continue
            ready.append(b)
        if ready:
            make_durable(paths)
            check_group(self.group)  # this writer's run lease still ours (else one line)
            self._record(ready)
        if error is not None:
            raise error

    def close(self) -> None:
        """Wait for every write and stop the threads. Failures are not raised again: each
        was raised by :meth:`submit` or :meth:`settle`, or an exception is on its way out."""
        if self._chunks is not None:
            chunks, self._chunks = self._chunks, None
            chunks.close(raise_errors=False)
