"""One chunk of a store copy (:mod:`store.sharing.transfer`): checked as it arrives, cut to the kept
layers where its chunk holds several, and recognised when the target already holds it.

A chunk is checked by its crc32c where the array's codecs end in one (and its size, for raw
arrays); otherwise (another tool's codecs, e.g. xarray's zstd alone) by decoding it with the
array's codecs, which catches a truncated or garbled chunk but not a change that still
decodes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import crc32c
import numpy as np
import zarr
import zarr.storage
from zarr.core.buffer import default_buffer_prototype
from zarr.core.metadata import ArrayV3Metadata

from ..errors import CorruptStoreError
from ..metadata.digests import ZARR_JSON
from ..zarrutil import quiet
from .transfer_plan import ChunkCopy
from .transfer_side import first_line

if TYPE_CHECKING:
    from .transfer_side import Side


def _verify(data: bytes, c: ChunkCopy, where: str) -> None:
    if c.size is not None and len(data) != c.size:
        raise CorruptStoreError(f"{where}: chunk {c.src} has {len(data)} bytes, expected {c.size} "
                                f"(truncated?); `layerstate validate {where}`")
    if c.crc and not crc_ok(data):
        raise CorruptStoreError(f"{where}: chunk {c.src} fails its crc32c (corrupt at the source, or "
                                f"damaged in transit); `layerstate validate {where}`")
    if c.doc is not None:  # no checksum: what can be checked is that it decodes
        _decode(c.doc, data, c.src, where)


def crc_ok(data: bytes) -> bool:
    return len(data) >= 4 and crc32c.crc32c(data[:-4]) == int.from_bytes(data[-4:], "little")


def produce(data: bytes, c: ChunkCopy, where: str) -> dict[str, bytes]:
    """The target bodies one fetched chunk gives, after checking it: the chunk as it is, or,
    for a cut, each kept layer re-encoded with the array's codecs."""
    _verify(data, c, where)
    if c.cut is None:
        return {c.dst: data}
    cut = c.cut
    values = _decode(cut.src_doc, data, c.src, where)
    out = {}
    for key, i in cut.parts:
        index: list[Any] = [slice(None)] * values.ndim
        index[cut.axis] = slice(i, i + 1)
        out[key] = _encode(cut.dst_doc, values[tuple(index)])
    return out


def _chunk_store(doc: dict[str, Any], body: bytes | None) -> tuple[Any, dict[str, Any], str]:
    """A memory store holding the one-chunk array ``doc`` (and its chunk, if given)."""
    proto = default_buffer_prototype()
    key = ArrayV3Metadata.from_dict(dict(doc)).encode_chunk_key((0,) * len(doc["shape"]))
    items = {ZARR_JSON: proto.buffer.from_bytes(json.dumps(doc).encode())}
    if body is not None:
        items[key] = proto.buffer.from_bytes(body)
    return zarr.storage.MemoryStore(items), items, key


def _decode(doc: dict[str, Any], body: bytes, key: str, where: str) -> np.ndarray:
    """One chunk's values, decoded with the array's own codecs (``doc`` from :func:`_one_chunk`)."""
    try:
        with quiet():
            ms, _items, _k = _chunk_store(doc, body)
            return np.asarray(zarr.open_array(store=ms, mode="r", zarr_format=3)[...])
    except Exception as exc:  # any codec's failure: zstd, gzip, blosc, sharding, a short body
        raise CorruptStoreError(
            f"{where}: chunk {key} does not decode with its array's codecs ({type(exc).__name__}: "
            f"{first_line(exc)}): damaged at the source or in transit; `layerstate validate {where}`"
        ) from None


def _encode(doc: dict[str, Any], values: np.ndarray) -> bytes:
    """The stored body of one chunk holding ``values`` (``doc`` from :func:`_one_chunk`)."""
    with quiet():
        ms, items, key = _chunk_store(doc, None)
        arr = zarr.open_array(store=ms, mode="r+", zarr_format=3, config={"write_empty_chunks": True})
        arr[...] = values
    return cast("bytes", items[key].to_bytes())


def part_ok(target: Side, have: dict[str, int], key: str, size: int | None, crc: bool) -> bool:
    """The target holds ``key`` whole (files are renamed into place whole, objects written
    whole) with its expected size; on a local disk its checksum is checked too."""
    if key not in have or (size is not None and have[key] != size):
        return False
    if target.local and crc:
        return crc_ok(Path(target.path(key)).read_bytes())
    return True


def already_copied(target: Side, have: dict[str, int], c: ChunkCopy) -> bool:
    """Every target body of this chunk is there already (no transfer)."""
    return all(part_ok(target, have, key, size, c.crc) for key, size in c.targets())


def rounds(items: list[ChunkCopy], n: int) -> Iterable[list[ChunkCopy]]:
    for i in range(0, len(items), n):
        yield items[i: i + n]

