"""layerstate's activation store (Zarr v3 + xarray, schema ``layerstate/1``).

Public API::

    from store import Store
    st = Store.create("acts.zarr", title="my experiment")
    st.add_run("lstm-parity-s0", task="parity", arch="lstm", seed=0)
    st.write_length("lstm-parity-s0", hidden=h, tokens=t, labels={"parity": y})
    ds = Store.open("acts.zarr").open_length("lstm-parity-s0", 40)   # lazy, dask-backed

This package imports nothing else of layerstate's.
"""

from .core import Store, config_hash, create_store, open_store, run_identity
from .errors import (
    CorruptStoreError,
    IncompleteError,
    InvalidArrayError,
    LayerstateError,
    MissingError,
    NotAStoreError,
    RunConflictError,
    SchemaVersionError,
    UnsafeArchiveError,
    WriterLockedError,
)
from .inspect import format_summary, summary
from .integrity import Report, validate
from .pack import pack, unpack
from .schema import SCHEMA, layer_names, length_group
from .writer import LengthWriter

__all__ = [
    "SCHEMA",
    "CorruptStoreError",
    "IncompleteError",
    "InvalidArrayError",
    "LayerstateError",
    "LengthWriter",
    "MissingError",
    "NotAStoreError",
    "Report",
    "RunConflictError",
    "SchemaVersionError",
    "Store",
    "UnsafeArchiveError",
    "WriterLockedError",
    "config_hash",
    "create_store",
    "format_summary",
    "layer_names",
    "length_group",
    "open_store",
    "pack",
    "run_identity",
    "summary",
    "unpack",
    "validate",
]
