"""Results kept beside a store instead of inside it: where, and for which source.

A store that cannot be written (a zip, a read-only directory, a store served over HTTP) is
analysed with a separate *results store*: a layerstate store with no runs, whose root
attribute :data:`RESULTS_FOR` records the source it belongs to (its URL, and an identity
that changes when the source's activations change). :class:`store.paired.PairedStore` reads
the two as one; this module holds what that needs without importing it:

* :func:`source_identity`: a digest of the source's root attributes, every node's metadata
  under ``runs/`` (configs, config hashes, layouts, completion records, weights) and the
  crc32c of the first block of each length group's ``logits`` (``hidden``'s last layer
  where there are no logits), read from the consolidated snapshot plus one 4-byte read per
  length group;
* :func:`sidecar`: where results of a read-only local store go when no place is given
  (``store.contents.results.zarr`` beside ``store.zip``);
* :func:`check_record`: the one-line refusal when a results store belongs to another source.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import zarr
from zarr.abc.store import SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from .. import schema
from ..errors import ResultsMismatchError
from ..metadata.digests import canonical, own_document
from ..zarrutil import chunk_key, group, quiet
from .location import Location

#: Root attribute of a results store: ``{url, identity, title, created}`` of its source.
RESULTS_FOR = "results_for"
#: Suffix of the sidecar results store beside a read-only local store.
SIDECAR_SUFFIX = ".results.zarr"


def source_identity(root: zarr.Group) -> str:
    """16 hex digits that change when the source's runs or activations change (see the
    module docs); its results (under ``results/``) do not count."""
    h = hashlib.sha256()
    h.update(canonical(dict(root.attrs)))
    if schema.RUNS not in root:
        return h.hexdigest()[:16]
    with quiet():
        runs = group(root, schema.RUNS)
        for path, node in sorted(runs.members(max_depth=None), key=lambda m: m[0]):
            h.update(path.encode() + b"\0")
            h.update(canonical(own_document(node.metadata.to_dict())))
            h.update(_activation_crc(runs, path, node))
    return h.hexdigest()[:16]


def _activation_crc(runs: zarr.Group, path: str, node: Any) -> bytes:
    """For a length group's ``logits`` (small: one block x positions x classes), else its
    ``hidden`` when it has no logits (the last layer's chunk of the first block): the crc32c
    of the first block, which changes with the model that produced the activations."""
    name = path.rsplit("/", 1)[-1]
    if not isinstance(node, zarr.Array) or node.size == 0:
        return b""
    if name == "logits" and node.ndim == 3:
        return _chunk_crc(node, (0, 0, 0))
    if name == "hidden" and node.ndim == 4 and "logits" not in group(runs, path.rsplit("/", 1)[0]):
        return _chunk_crc(node, (0, 0, node.shape[2] - 1, 0))
    return b""


def _chunk_crc(arr: zarr.Array, coord: tuple[int, ...]) -> bytes:
    """The last 4 bytes (the crc32c) of one stored chunk; empty if it is absent."""
    buf = sync(arr.store_path.store.get(chunk_key(arr, coord), prototype=default_buffer_prototype(),
                                        byte_range=SuffixByteRequest(4)))
    # a server that ignores Range requests (python -m http.server) sends the whole chunk
    return b"" if buf is None else buf.to_bytes()[-4:]


def sidecar(loc: Location) -> Location:
    """``<dir>/<name>.results.zarr`` beside a local store ``<dir>/<name>.zip`` (or ``.zarr``)."""
    path = Path(loc.url.removeprefix("file://"))
    stem = path.name[: -len(path.suffix)] if path.suffix in (".zip", ".zarr") else path.name
    return Location(str(path.with_name(stem + SIDECAR_SUFFIX)))


def absolute_url(loc: Location) -> str:
    """A location as it is recorded: local paths made absolute."""
    return str(loc.local_path) if loc.is_local else loc.url


def record(source_url: str, identity: str, source_attrs: dict[str, Any]) -> dict[str, Any]:
    """The :data:`RESULTS_FOR` attribute for a source."""
    return {"url": source_url, "identity": identity, "title": source_attrs.get("title", ""),
            "created": source_attrs.get("created")}


def check_record(rec: Any, results_url: str, source_url: str, identity: str) -> None:
    """Refuse (one line naming both) a results store recorded for another source."""
    if not isinstance(rec, dict) or rec.get("identity") == identity:
        return
    raise ResultsMismatchError(
        f"results store {results_url} belongs to {rec.get('url')} (identity {rec.get('identity')}), "
        f"not to {source_url} (identity {identity}; its runs or activations differ): give --results "
        "a new directory, or analyse the store these results belong to"
    )


def recorded_source(results_root: zarr.Group) -> dict[str, Any] | None:
    """The source recorded by a results store, or None for an ordinary store."""
    rec = results_root.attrs.get(RESULTS_FOR)
    return rec if isinstance(rec, dict) and rec.get("url") else None


def writable_dir(path: Path) -> bool:
    """Whether a new directory can be created in ``path``."""
    return path.is_dir() and os.access(path, os.W_OK)
