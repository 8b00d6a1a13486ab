"""The two copies of every node's metadata, their digests, and what is wrong with them.

Two modules, one job each; this one gathers their names (the path readers have imported):

* :mod:`store.integrity.digests`: documents and their digests (:func:`canonical`, :func:`digest`,
  :func:`document_problem`), raw access, the guarded zarr stores that refuse a damaged
  ``zarr.json`` with a :class:`~store.errors.MetadataDamagedError`, the copy file and
  :func:`consolidate_once`;
* :mod:`store.integrity.damage`: :func:`check`, the comparison of every node with its
  snapshot copy and digest that ``validate`` reports and ``repair`` acts on, and :func:`root_damage` /
  :func:`root_changed` for a store that fails to open.

The format: docs/store-format.md, "Metadata copies and digests".
"""

from __future__ import annotations

from .damage import Copy, Finding, MetadataCheck, check, root_changed, root_damage, walk
from .digests import (
    COPY_FORMAT,
    IDENTITY,
    ZARR_JSON,
    GuardedFsspecStore,
    GuardedLocalStore,
    GuardedZipStore,
    canonical,
    consolidate_once,
    copy_document,
    damaged_message,
    digest,
    document_problem,
    file_of,
    forget_listings,
    get,
    list_dir,
    own_document,
    parse,
    put,
    record_digests,
    render,
    root_is,
    snapshot_entries,
)

__all__ = [
    "COPY_FORMAT",
    "IDENTITY",
    "ZARR_JSON",
    "Copy",
    "Finding",
    "GuardedFsspecStore",
    "GuardedLocalStore",
    "GuardedZipStore",
    "MetadataCheck",
    "canonical",
    "check",
    "consolidate_once",
    "copy_document",
    "damaged_message",
    "digest",
    "document_problem",
    "file_of",
    "forget_listings",
    "get",
    "list_dir",
    "own_document",
    "parse",
    "put",
    "record_digests",
    "render",
    "root_changed",
    "root_damage",
    "root_is",
    "snapshot_entries",
    "walk",
]
