"""Whole-chunk writes for arrays whose codecs are exactly ``bytes`` + ``crc32c``.

Every array the writer creates uses those two codecs (raw little-endian bytes, then a
4-byte crc32c appended; no compressor, see ``store.core.CHECKSUM``). When a block of
sequences covers whole chunks, zarr's generic ``Array.__setitem__`` spends most of its
time outside the bytes themselves: it fills each chunk with the fill value, copies the
data in, appends the checksum with a second copy, and hops through its event loop per
chunk (measured: ~0.3x ``np.save`` for the same bytes). Here each chunk is encoded with
one copy (the layer slice is not contiguous in the input, so one copy is unavoidable),
checksummed with the same ``google_crc32c`` function zarr uses, and stored from a small
thread pool, so chunks are encoded and written on both cores. On a local disk the file is
written the way zarr's ``LocalStore`` writes it (temp file + atomic rename) but directly
from the pool thread: a hop through zarr's event loop per chunk cost as much as the write
itself. Other stores (fsspec: memory://, s3://) get ``Store.set``. The chunk keys come from the array's metadata, so the bytes on disk are exactly
what zarr writes (tested bit for bit in tests/store/test_chunks.py) and zarr, xarray and
``layerstate validate`` read them as usual.

Anything else — partial chunks at the end of an array, other codecs, other layouts — goes
through zarr's ``__setitem__``.

:func:`read_whole` is the mirror image for loading whole arrays: zarr 3.1 decodes (checks
the crc32c, copies into the output) on its single event-loop thread, so a 2-core machine
reads at one core's speed; here each chunk is fetched (a plain file read on local disks),
checked and copied into place by a pool thread, with the same checksum check and the same
error text on a mismatch (``Stored and computed checksum do not match``).
"""

from __future__ import annotations

import itertools
import os
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore


def fast_path_ok(arr: zarr.Array) -> bool:
    """True if ``arr``'s chunks are raw little-endian bytes + crc32c, on a regular grid."""
    meta = arr.metadata
    codecs: tuple[Any, ...] = tuple(getattr(meta, "codecs", ()))
    if len(codecs) != 2 or not isinstance(codecs[1], Crc32cCodec):
        return False
    first = codecs[0]
    if not isinstance(first, BytesCodec):
        return False
    endian = getattr(first.endian, "value", first.endian)
    if endian not in (None, "little") or arr.dtype.kind not in "biuf":
        return False
    return hasattr(meta.chunk_grid, "chunk_shape")


def encode_chunk(piece: np.ndarray) -> np.ndarray:
    """One chunk's stored bytes: the values little-endian, then their crc32c (one copy)."""
    out = np.empty(piece.nbytes + 4, np.uint8)
    out[:-4].view(piece.dtype.newbyteorder("<")).reshape(piece.shape)[...] = piece
    out[-4:] = np.frombuffer(np.asarray(google_crc32c.value(out[:-4]), "<u4").tobytes(), np.uint8)
    return out


class ChunkWriter:
    """Writes whole chunks of zarr arrays concurrently; :meth:`wait` before recording them."""

    def __init__(self, workers: int = 2) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="layerstate-chunks")
        self._pending: list[Future[None]] = []
        self._proto = default_buffer_prototype()

    def write_row(self, arr: zarr.Array, row: int, values: np.ndarray) -> bool:
        """Write chunk row ``row`` along axis 0 (every chunk in it) from ``values``.

        Returns False, writing nothing, when the fast path does not apply (``values`` is not
        exactly one full chunk row, or the codecs differ): the caller then uses zarr.
        """
        if not fast_path_ok(arr):
            return False
        chunk: tuple[int, ...] = tuple(arr.metadata.chunk_grid.chunk_shape)  # type: ignore[attr-defined]
        if values.shape[0] != chunk[0] or values.shape[1:] != arr.shape[1:]:
            return False
        if (row + 1) * chunk[0] > arr.shape[0]:
            return False
        if any(s % c for s, c in zip(arr.shape[1:], chunk[1:], strict=True)):
            return False  # edge chunks along other axes would need padding: leave to zarr
        values = values.astype(arr.dtype, copy=False)
        store, base = arr.store_path.store, arr.store_path.path
        grid = [range(s // c) for s, c in zip(arr.shape[1:], chunk[1:], strict=True)]
        for coord in itertools.product(*grid):
            sel = (slice(None),) + tuple(slice(i * c, (i + 1) * c) for i, c in zip(coord, chunk[1:], strict=True))
            key = arr.metadata.encode_chunk_key((row, *coord))
            key = f"{base}/{key}" if base else key
            # encoded in the pool too: the copy releases the GIL, so both cores work
            self._pending.append(self._pool.submit(self._encode_and_set, store, key, values[sel]))
            if len(self._pending) > 8:  # bound the encoded bytes held in memory
                self._pending.pop(0).result()
        return True

    def _encode_and_set(self, store: Any, key: str, piece: np.ndarray) -> None:
        data = encode_chunk(piece)
        if isinstance(store, LocalStore):  # a plain file: write it as LocalStore does, no event-loop hop
            path = Path(store.root) / key
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{uuid.uuid4().hex}.partial")  # zarr's atomic write
            try:
                with open(tmp, "wb") as fh:
                    fh.write(data.data)
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            return
        _set(store, key, self._proto.buffer.from_array_like(data))

    def wait(self) -> None:
        """Block until every submitted chunk is stored (re-raising the first failure)."""
        pending, self._pending = self._pending, []
        errors = []
        for fut in pending:
            try:
                fut.result()
            except BaseException as exc:  # keep waiting: no write may outlive the block
                errors.append(exc)
        if errors:
            raise errors[0]

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)


def _set(store, key, buf) -> None:
    sync(store.set(key, buf))


def read_whole(arr: zarr.Array, workers: int = 2) -> np.ndarray | None:
    """All of ``arr`` as a numpy array, or None when the fast path does not apply."""
    if not fast_path_ok(arr) or arr.size == 0:
        return None
    chunk: tuple[int, ...] = tuple(arr.metadata.chunk_grid.chunk_shape)  # type: ignore[attr-defined]
    shape, dtype = tuple(arr.shape), arr.dtype
    stored = np.dtype(dtype).newbyteorder("<")
    out = np.empty(shape, dtype)
    store, base = arr.store_path.store, arr.store_path.path
    proto = default_buffer_prototype()
    fill = arr.metadata.fill_value
    local = Path(store.root) if isinstance(store, LocalStore) else None
    nbytes = int(np.prod(chunk)) * stored.itemsize

    def one(coord: tuple[int, ...]) -> None:
        region = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(coord, chunk, shape, strict=True))
        key = arr.metadata.encode_chunk_key(coord)
        full = f"{base}/{key}" if base else key
        if local is not None:  # a plain file: read it straight into memory, no event-loop hop
            try:
                with open(local / full, "rb") as fh:
                    raw = np.frombuffer(fh.read(), np.uint8)
            except FileNotFoundError:
                out[region] = fill
                return
        else:
            buf = sync(store.get(full, proto))
            if buf is None:
                out[region] = fill
                return
            raw = buf.as_numpy_array()
        if raw.size != nbytes + 4:
            raise ValueError(f"chunk {key} of {base}: buffer size {raw.size} != {nbytes + 4} (truncated?)")
        data = raw[:-4]
        if google_crc32c.value(data) != int.from_bytes(raw[-4:].tobytes(), "little"):
            raise ValueError(f"Stored and computed checksum do not match in chunk {key} of {base}")
        values = data.view(stored).reshape(chunk)
        out[region] = values[tuple(slice(0, r.stop - r.start) for r in region)]

    coords = list(itertools.product(*(range(-(-s // c)) for s, c in zip(shape, chunk, strict=True))))
    with ThreadPoolExecutor(workers, thread_name_prefix="layerstate-read") as pool:
        for fut in [pool.submit(one, c) for c in coords]:
            fut.result()
    return out
