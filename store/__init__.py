"""layerstate's activation store (Zarr v3 + xarray, schema ``layerstate/1``).

Public API::

    from store import Store
    st = Store.create("acts.zarr", title="my experiment")
    st.add_run("lstm-parity-s0", task="parity", arch="lstm", seed=0)
    st.write_length("lstm-parity-s0", hidden=h, tokens=t, labels={"parity": y})
    ds = Store.open("acts.zarr").open_length("lstm-parity-s0", 40)   # lazy, dask-backed

Modules (each imports only those listed above it, never one that imports it back)::

    errors     the one-line exceptions (imports nothing)
    schema     names of groups, variables, dims and attributes; schema version
    zarrutil   the leaf every module shares: codecs, jsonable, to_numpy, node access, quiet(), checked reads
    metadata   both copies of every node's zarr.json, their digests, guarded reads, the comparison
    provenance tool version, git commit, package versions, host
    location   where a store lives (directory, zip, fsspec URL); the per-run writer lock
    pairing    results kept beside a read-only store: the source's identity, the sidecar, the record
    chunks     whole-chunk encode/write and read_whole thread pools for raw+crc32c arrays
    runs       the run registry: identity, config hash, attributes, select
    weights    model parameters, one array per tensor
    results    analysis result Datasets under results/
    layout     a length group's spec, creation, and the checks that let a writer resume it
    inputs     checks and casts of the arrays handed to a writer
    lease      leases inside the store: one writer per run and one consolidation at a time,
               across processes, hosts and object stores
    lease_backends  where lease objects live (local directory, fsspec) and a store's lease key
    pipeline   blocks stored one behind the caller, fsynced, then recorded
    writer     LengthWriter: resumable, chunk-aligned writes of one (run, length)
    lengths    length groups: list, open lazily, load whole, write whole
    core       Store: open/create and consolidated metadata; a thin facade over the above;
               PairedStore (a read-only source with a separate results store) and open_analysis
    integrity  validate: every metadata file, schema, completion records and every chunk's checksum
    repair     rebuild damaged metadata from its intact copy
    inspect    summary of what a store holds
    pack       pack a store into one zip, unpack it safely
    transfer   pull/push: copy a subset of a store between locations, checked and resumable

This package imports nothing else of layerstate's.
"""

from .core import (
    PairedStore,
    Store,
    config_hash,
    create_store,
    open_analysis,
    open_store,
    run_identity,
)
from .errors import (
    CorruptStoreError,
    IncompleteError,
    InvalidArrayError,
    LayerstateError,
    MetadataDamagedError,
    MissingDependencyError,
    MissingError,
    NotAStoreError,
    ReadOnlyStoreError,
    ResultsMismatchError,
    RunConflictError,
    SchemaVersionError,
    UnsafeArchiveError,
    WriterLockedError,
)
from .inspect import format_summary, summary
from .integrity import Report, validate
from .pack import pack, unpack
from .repair import RepairRefusedError, RepairReport, format_repair, repair
from .schema import SCHEMA, layer_names, length_group
from .writer import LengthWriter

__all__ = [
    "SCHEMA",
    "CorruptStoreError",
    "IncompleteError",
    "InvalidArrayError",
    "LayerstateError",
    "LengthWriter",
    "MetadataDamagedError",
    "MissingDependencyError",
    "MissingError",
    "NotAStoreError",
    "PairedStore",
    "ReadOnlyStoreError",
    "RepairRefusedError",
    "RepairReport",
    "Report",
    "ResultsMismatchError",
    "RunConflictError",
    "SchemaVersionError",
    "Store",
    "UnsafeArchiveError",
    "WriterLockedError",
    "config_hash",
    "create_store",
    "format_repair",
    "format_summary",
    "layer_names",
    "length_group",
    "open_analysis",
    "open_store",
    "pack",
    "repair",
    "run_identity",
    "summary",
    "unpack",
    "validate",
]
