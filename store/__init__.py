"""layerstate's activation store (Zarr v3 + xarray, schema ``layerstate/1``).

Public API::

    from store import Store
    st = Store.create("acts.zarr", title="my experiment")
    st.add_run("lstm-parity-s0", task="parity", arch="lstm", seed=0)
    st.write_length("lstm-parity-s0", hidden=h, tokens=t, labels={"parity": y})
    ds = Store.open("acts.zarr").open_length("lstm-parity-s0", 40)   # lazy, dask-backed

Layout, bottom up: each module imports only from its own layer or those listed above it,
never one that imports it back (the import-linter contracts "store", "store-subpackages" and
"acyclic" in pyproject.toml check the graph: ``make lint``). The five subpackages import
nothing in their ``__init__``; import their modules by full name::

    errors, schema, zarrutil, provenance    the base every layer shares
        errors       the one-line exceptions (imports nothing)
        schema       names of groups, variables, dims and attributes; schema version
        zarrutil     the leaf: codecs, jsonable, to_numpy, node access, quiet(), checked reads
        provenance   tool version, git commit, package versions, host
    metadata/    both copies of every node's zarr.json and their digests
        digests      documents, digests, guarded zarr stores, the copy file, consolidation
        damage       the comparison that tells damage from a legitimate unfinished write
    access/      where a store lives and who may write it
        location     directory, zip or fsspec URL; the per-run writer lock
        lease_backends  where lease objects live (local directory, fsspec) and a store's lease key
        lease        one writer per run and one consolidation at a time, across hosts
        consolidation  the consolidated snapshot rewritten under the lease, and checked
        pairing      results kept beside a read-only store: the source's identity, the record
    io/          the activations: length groups, block by block
        chunks       whole-chunk encode/write and read_whole thread pools (raw + crc32c)
        layout       a length group's spec, creation, and the checks that let a writer resume
        inputs       checks and casts of the arrays handed to a writer
        blocks       blocks stored one behind the caller, fsynced, then recorded
        writer       LengthWriter: resumable, chunk-aligned writes of one (run, length)
        lengths      length groups: list, open lazily, load whole, write whole
    contents/    what a store holds beside the activations
        runs         the run registry: identity, config hash, attributes, select
        weights      model parameters, one array per tensor
        checkpoints  an unfinished training's state
        results      analysis result Datasets under results/
        forget       removing a result, a run's captures or a whole run
    core         Store: open/create and consolidated metadata, a thin facade over the above
    paired       PairedStore (a read-only source with a separate results store) and
                 open_analysis, which chooses where an analysis writes
    view         several stores (or one store's first seeds) read as one, read-only
    inspect      summary of what a store holds
    integrity/   is the store intact, on a whole Store
        validation   validate: metadata, schema, completion records, every chunk's checksum
        assess       what validate's findings lose and what can still be analysed
        repair       rebuild damaged metadata from its intact copy
    sharing/     a store between places
        pack         pack a store into one zip, unpack it safely
        transfer     pull/push: copy a subset between locations, checked and resumable;
                     transfer_plan, transfer_chunks, transfer_resume, transfer_side its parts

This package imports nothing else of layerstate's.
"""

from .core import Store, config_hash, run_identity
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
from .integrity.repair import RepairRefusedError, RepairReport, format_repair, repair
from .integrity.validation import Report, validate
from .io.writer import LengthWriter
from .paired import PairedStore, open_analysis
from .schema import SCHEMA, layer_names, length_group
from .sharing.pack import pack, unpack

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
    "format_repair",
    "format_summary",
    "layer_names",
    "length_group",
    "open_analysis",
    "pack",
    "repair",
    "run_identity",
    "summary",
    "unpack",
    "validate",
]
