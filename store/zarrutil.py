"""Helpers every store module shares: the leaf of the package.

It imports no other module of ``store`` except :mod:`store.errors` (the exception classes,
which import nothing), so any module may import it without forming a cycle. Here:

* the codecs and chunk size of every array the store writes (:data:`CHECKSUM`,
  :data:`TARGET_CHUNK_BYTES`);
* :func:`jsonable` (attributes stay plain JSON), :func:`to_numpy` (the one torch/xarray/
  anything-to-numpy conversion) and :func:`ordered` (arrays in storage dim order);
* :func:`group` / :func:`array`, schema-checked ``parent[name]``, and :func:`iter_arrays`;
* :func:`quiet`, which silences zarr's notices about its own format choices where the store
  opens, reads or writes zarr, and nowhere else;
* :class:`CheckedStore`, so that a checksum failure on read names its
  chunk itself, and :func:`naming_corruption`, which turns such failures into one
  :class:`~store.errors.CorruptStoreError` line.
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import crc32c
import numpy as np
import xarray as xr
import zarr
import zarr.storage
from zarr.codecs import BytesCodec, Crc32cCodec
from zarr.errors import UnstableSpecificationWarning
from zarr.storage import WrapperStore

from .errors import CorruptStoreError, InvalidArrayError

#: Codecs of every array we write: raw bytes plus a crc32c checksum per chunk. Float16
#: activations barely compress (1.06-1.09x) and compression costs 2-3x write speed
#: (docs/measured.md, "Zarr settings").
CHECKSUM = (Crc32cCodec(),)
#: Bytes of one chunk of ``hidden`` (one block of sequences x one layer), about 4 MB
#: (docs/measured.md, "Zarr settings").
TARGET_CHUNK_BYTES = 4 * 2**20


# ---------------------------------------------------------------------- plain values
def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars/arrays as Python values and tuples as lists, so attributes
    stay plain JSON; non-finite floats become strings (``"nan"``, ``"inf"``)."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return obj


def torch_dtype(value: Any) -> str | None:
    """The dtype name of a torch tensor (``"bfloat16"``), None for anything else."""
    return str(value.dtype).removeprefix("torch.") if hasattr(value, "detach") else None


def to_numpy(value: Any) -> np.ndarray:
    """Any array as numpy: a torch tensor detached and moved to the CPU (bfloat16, which numpy
    lacks, widened to float32), an ``xarray.DataArray``'s values as they are, anything else
    through ``np.asarray``. The store never imports torch: tensors are recognised by
    ``.detach``."""
    if hasattr(value, "detach"):
        t = value.detach().cpu()
        if torch_dtype(t) == "bfloat16":
            t = t.float()
        return t.numpy()
    return np.asarray(value)


def ordered(value: Any, dims: tuple[str, ...], name: str) -> np.ndarray:
    """A DataArray (any dim order) or array (storage order) as numpy in storage order."""
    if isinstance(value, xr.DataArray):
        if set(value.dims) != set(dims):
            raise InvalidArrayError(
                f"{name} has dims {value.dims}; expected {dims} (rename or transpose the DataArray)"
            )
        return np.asarray(value.transpose(*dims).values)
    arr = to_numpy(value)
    if arr.ndim != len(dims):
        raise InvalidArrayError(
            f"{name} has {arr.ndim} dims {arr.shape}; expected {len(dims)} dims {dims}"
        )
    return arr


def row_chunks(shape: tuple[int, ...], itemsize: int, target: int) -> tuple[int, ...]:
    """Chunk only along the first axis, keeping each chunk at most ``target`` bytes."""
    if not shape:
        return ()
    row = max(1, math.prod(shape[1:]) * itemsize)
    return (max(1, min(shape[0], target // row)),) + tuple(shape[1:])


# ---------------------------------------------------------------------- nodes
def group(parent: zarr.Group, name: str) -> zarr.Group:
    """``parent[name]``, which the schema says is a group (KeyError if it is absent)."""
    node = parent[name]
    if not isinstance(node, zarr.Group):
        raise CorruptStoreError(
            f"{node_path(parent, name)} is an array where the layerstate schema expects a group; "
            "the store was changed by another tool: re-create it or restore it from a copy"
        )
    return node


def array(parent: zarr.Group, name: str) -> zarr.Array:
    """``parent[name]``, which the schema says is an array (KeyError if it is absent)."""
    node = parent[name]
    if not isinstance(node, zarr.Array):
        raise CorruptStoreError(
            f"{node_path(parent, name)} is a group where the layerstate schema expects an array; "
            "the store was changed by another tool: re-create it or restore it from a copy"
        )
    return node


def node_path(parent: zarr.Group, name: str) -> str:
    return "/".join(p for p in (parent.path, name) if p)


def from_snapshot(grp: zarr.Group) -> bool | None:
    """``consolidated=`` for xarray to reopen ``grp``: True (read the root's snapshot, no
    listing) for a group read from a consolidated snapshot on a remote store, where listing
    is slow or impossible (a static web server); False (read the group's own documents, as
    writers do) otherwise."""
    if grp.metadata.consolidated_metadata is None:
        return False
    store = grp.store_path.store
    return not isinstance(store, zarr.storage.LocalStore | zarr.storage.ZipStore)


def iter_arrays(grp: zarr.Group, prefix: str = "") -> Iterable[tuple[str, zarr.Array]]:
    """Every array below a group, with its path."""
    for path, node in grp.members(max_depth=None):
        if isinstance(node, zarr.Array):
            yield (f"{prefix}{path}", node)


def chunk_key(arr: zarr.Array, coord: tuple[int, ...]) -> str:
    """The store key of chunk ``coord`` of ``arr`` (its path inside the store)."""
    key = arr.metadata.encode_chunk_key(coord)
    base = arr.store_path.path
    return f"{base}/{key}" if base else key


def raw_crc32c_chunk_bytes(arr: zarr.Array) -> int | None:
    """The stored size of each chunk if ``arr``'s codecs are exactly raw little-endian bytes +
    crc32c on a regular grid (every array the writer creates), else None."""
    meta = arr.metadata
    codecs: tuple[Any, ...] = tuple(getattr(meta, "codecs", ()))
    if len(codecs) != 2 or not isinstance(codecs[1], Crc32cCodec):
        return None
    first = codecs[0]
    if not isinstance(first, BytesCodec):
        return None
    endian = getattr(first.endian, "value", first.endian)
    if endian not in (None, "little") or arr.dtype.kind not in "biuf":
        return None
    shape = getattr(meta.chunk_grid, "chunk_shape", None)
    if shape is None:
        return None
    return math.prod(shape) * arr.dtype.itemsize + 4


# ---------------------------------------------------------------------- zarr's notices
#: zarr's notices about its own format choices, which a user can do nothing about: the
#: consolidated-metadata snapshot the store keeps for readers, data types (strings) whose
#: Zarr v3 spec is not final, and the metadata copy file beside the root's zarr.json
#: (``schema.METADATA_COPY``), which is not a Zarr node and is met when zarr lists the root.
_ZARR_NOTICES = ("Consolidated metadata is currently not part",
                 r"Object at layerstate-metadata\.json is not recognized",
                 r"Object at layerstate-leases is not recognized")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence zarr's format notices inside the block only (no filter outlives it).

    Every place the store opens, reads or writes zarr metadata uses it, so ordinary commands
    print nothing, while a user's own zarr calls elsewhere still warn as zarr decides.
    """
    with warnings.catch_warnings():
        for message in _ZARR_NOTICES:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        warnings.filterwarnings("ignore", category=UnstableSpecificationWarning)
        yield


# ---------------------------------------------------------------------- damaged chunks
def check_chunk(raw: np.ndarray, nbytes: int | None, array_path: str, coord: tuple[int, ...],
                key: str) -> np.ndarray:
    """The data bytes of one stored raw+crc32c chunk, or :class:`~store.errors.CorruptStoreError` naming it.

    ``nbytes`` is the chunk's expected stored size (None: not checked).
    """
    if (nbytes is not None and raw.size != nbytes) or raw.size < 4:
        raise CorruptStoreError.in_chunk(array_path, coord, key,
                                         f"buffer size {raw.size} != {nbytes if nbytes is not None else '>= 4'} (truncated?)")
    data = raw[:-4]
    if crc32c.crc32c(data.data) != int.from_bytes(raw[-4:].tobytes(), "little"):
        raise CorruptStoreError.in_chunk(array_path, coord, key,
                                         "Stored and computed checksum do not match")
    return data


class CheckedStore(WrapperStore[Any]):
    """A read view of a zarr store that checks each chunk's crc32c as it is fetched, so a
    damaged chunk fails with a :class:`~store.errors.CorruptStoreError` naming it.

    zarr's own checksum error says only that *a* chunk failed; finding which one used to mean
    decoding every chunk of the store again. Which arrays end in the ``crc32c`` codec (and
    their chunks' stored size) is learnt from their ``zarr.json`` as zarr fetches it through
    this view: no extra reads. The extra CRC costs ~0.5 ms per 4 MB chunk (the ``crc32c``
    package, GIL-free), next to milliseconds for zarr to decode the chunk.
    """

    def __init__(self, store: Any, arrays: Mapping[str, int | None] | None = None) -> None:
        super().__init__(store)
        #: array path -> stored chunk size (None: size unknown, the crc32c is still checked)
        self.arrays: dict[str, int | None] = dict(arrays or {})

    def _with_store(self, store: Any) -> CheckedStore:
        return type(self)(store, self.arrays)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        buf = await self._store.get(key, prototype, byte_range)
        if buf is None or byte_range is not None:
            return buf
        path, sep, coord = key.rpartition("/c/")
        if sep and path in self.arrays:
            parts = tuple(int(c) for c in coord.split("/") if c.isdigit())
            check_chunk(buf.as_numpy_array(), self.arrays[path], path, parts, key)
        elif key == "zarr.json" or key.endswith("/zarr.json"):
            self._learn(key[: -len("zarr.json")].rstrip("/"), buf.to_bytes())
        return buf

    def _learn(self, path: str, document: bytes) -> None:
        """Note the array at ``path`` if its codecs end in crc32c (from its metadata)."""
        try:
            meta = json.loads(document)
        except ValueError:
            return
        codecs = meta.get("codecs") if isinstance(meta, dict) and meta.get("node_type") == "array" else None
        if not codecs or not isinstance(codecs[-1], dict) or codecs[-1].get("name") != "crc32c":
            return
        self.arrays[path] = _stored_chunk_bytes(meta)


def _stored_chunk_bytes(meta: dict[str, Any]) -> int | None:
    """The stored size of a raw (``bytes``, little-endian) + crc32c chunk, from an array's
    v3 metadata; None where it cannot be told (other codecs, variable-size data types)."""
    try:
        first = meta["codecs"][0]
        shape = meta["chunk_grid"]["configuration"]["chunk_shape"]
        if len(meta["codecs"]) != 2 or first.get("name") != "bytes" or meta["chunk_grid"]["name"] != "regular":
            return None
        if (first.get("configuration") or {}).get("endian", "little") != "little":
            return None
        dtype = np.dtype(meta["data_type"])
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    if dtype.kind not in "biuf":
        return None
    return math.prod(shape) * dtype.itemsize + 4


_CORRUPTION_WORDS = ("checksum", "crc32c", "buffer size", "cannot reshape", "decod")


def is_corruption(exc: BaseException) -> bool:
    """True if ``exc`` is how zarr (or :mod:`store.io.chunks`) reports damaged chunk bytes."""
    if isinstance(exc, CorruptStoreError) and exc.array_path is not None:
        return True
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(s in text for s in _CORRUPTION_WORDS)


@contextlib.contextmanager
def naming_corruption(where: object) -> Iterator[None]:
    """Turn a checksum/decoding failure inside the block into one :class:`CorruptStoreError`
    line that names the array and chunk, taken from the error itself."""
    try:
        yield
    except Exception as exc:  # zarr raises plain ValueErrors on a checksum mismatch
        if not is_corruption(exc):
            raise
        if isinstance(exc, CorruptStoreError) and exc.array_path is not None:
            detail = exc.describe()
        else:
            detail = f"{type(exc).__name__}: {exc}"
        raise CorruptStoreError(
            f"corrupted data in {where}: {detail}; re-run the capture for that run "
            "(it rewrites the block) or restore the store from a copy"
        ) from None


class PrefixStore(WrapperStore[Any]):
    """The part of a zarr store under ``prefix``, as a store of its own (every key read, written,
    listed or deleted is the inner store's ``prefix/key``).

    For writing one group whole (a result): zarr checks, for each array it creates, that no
    parent of it is an array, reading and parsing every parent's ``zarr.json`` -- the store
    root's too, which holds the metadata snapshot of every node (4 MB on the demo store: 0.11 s
    an array, 11 s of a 75-array result). Through this view the group is the root, the only
    parent zarr checks. The inner store's own writes (atomic, fsynced, checked) are unchanged."""

    def __init__(self, store: Any, prefix: str) -> None:
        super().__init__(store)
        self.prefix = prefix.strip("/")

    def _with_store(self, store: Any) -> PrefixStore:
        return type(self)(store, self.prefix)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if key else self.prefix

    def _strip(self, key: str) -> str:
        return key[len(self.prefix) + 1:] if key.startswith(self.prefix + "/") else key

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        return await self._store.get(self._key(key), prototype, byte_range)

    async def get_partial_values(self, prototype: Any, key_ranges: Iterable[tuple[str, Any]]) -> Any:
        return await self._store.get_partial_values(prototype, [(self._key(k), r) for k, r in key_ranges])

    async def exists(self, key: str) -> bool:
        return bool(await self._store.exists(self._key(key)))

    async def set(self, key: str, value: Any) -> None:
        await self._store.set(self._key(key), value)

    async def set_if_not_exists(self, key: str, value: Any) -> None:
        await self._store.set_if_not_exists(self._key(key), value)

    async def _set_many(self, values: Iterable[tuple[str, Any]]) -> None:
        await self._store._set_many([(self._key(k), v) for k, v in values])

    async def delete(self, key: str) -> None:
        await self._store.delete(self._key(key))

    async def delete_dir(self, prefix: str) -> None:
        await self._store.delete_dir(self._key(prefix))

    async def is_empty(self, prefix: str) -> bool:
        return bool(await self._store.is_empty(self._key(prefix)))

    async def list(self) -> Any:  # type: ignore[override]
        async for key in self._store.list_prefix(self.prefix + "/"):
            yield self._strip(key)

    async def list_prefix(self, prefix: str) -> Any:  # type: ignore[override]
        async for key in self._store.list_prefix(self._key(prefix)):
            yield self._strip(key)

    async def list_dir(self, prefix: str) -> Any:  # type: ignore[override]
        async for key in self._store.list_dir(self._key(prefix)):
            yield key

    async def _get_many(self, requests: Iterable[tuple[str, Any, Any]]) -> Any:  # type: ignore[override]
        async for key, buf in self._store._get_many([(self._key(k), p, r) for k, p, r in requests]):
            yield self._strip(key), buf

    def __eq__(self, value: object) -> bool:
        return isinstance(value, PrefixStore) and value.prefix == self.prefix and value._store == self._store

    def __hash__(self) -> int:
        return hash((self.prefix, id(self._store)))
