"""Model weights: ``runs/<run_id>/weights``, one checksummed array per parameter tensor.

No pickle, ever: each tensor is a plain array (bfloat16, which Zarr and numpy lack, is
widened to float32 and its original dtype recorded). The group is marked complete only after
every array is written, so a killed writer never leaves weights that look usable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np
import zarr

from .. import schema
from ..errors import InvalidArrayError, MissingError, RunConflictError
from ..zarrutil import CHECKSUM, array, group, row_chunks, to_numpy, torch_dtype

#: Largest chunk of a weight array (chunks split the first axis only).
WEIGHT_CHUNK_BYTES = 8 * 2**20


def write_weights(run: zarr.Group, run_id: str, state_dict: Mapping[str, Any], *,
                  overwrite: bool = False) -> None:
    """Store ``state_dict`` (numpy arrays or torch tensors) in ``run``'s weights group."""
    if schema.WEIGHTS in run:
        if run[schema.WEIGHTS].attrs.get("complete") and not overwrite:
            raise RunConflictError(
                f"run {run_id!r} already has weights; pass overwrite=True to replace them"
            )
        del run[schema.WEIGHTS]
    grp = write_arrays(run, schema.WEIGHTS, state_dict, what="weights")
    grp.attrs["complete"] = True


def write_arrays(parent: zarr.Group, name: str, arrays: Mapping[str, Any], *,
                 what: str) -> zarr.Group:
    """Write ``arrays`` (numpy arrays or torch tensors) as checksummed arrays of a new group.

    The group ``parent/name`` must not exist. Each array is chunked along its first axis only
    (chunks of at most ``WEIGHT_CHUNK_BYTES``); the group's attributes list the names in order and
    each array's original dtype (torch's name for a widened bfloat16). ``what`` names the
    arrays in the error raised for a non-numeric one. The caller marks the group complete.
    """
    grp = parent.create_group(name)
    dtypes = {}
    for key, value in arrays.items():
        arr = to_numpy(value)
        if arr.dtype == object or arr.dtype.kind in "USV":
            raise InvalidArrayError(f"{what} must be numeric arrays, got {key!r} of dtype {arr.dtype}")
        dtypes[key] = torch_dtype(value) or str(arr.dtype)
        a = grp.create_array(
            key, shape=arr.shape, dtype=arr.dtype, fill_value=0,
            chunks=row_chunks(arr.shape, arr.dtype.itemsize, WEIGHT_CHUNK_BYTES),
            compressors=CHECKSUM, config={"write_empty_chunks": True},
            # Plain xarray needs dim names on every array: one private dim per axis.
            dimension_names=[f"{key}:{i}" for i in range(arr.ndim)],
        )
        a[...] = arr
    grp.attrs.update({"dtypes": dtypes, "names": list(arrays)})
    return grp


def has_weights(run: zarr.Group) -> bool:
    return schema.WEIGHTS in run and bool(run[schema.WEIGHTS].attrs.get("complete"))


def read_weights(run: zarr.Group, run_id: str, where: object) -> dict[str, np.ndarray]:
    """The stored parameters as numpy arrays, in the order they were written."""
    if not has_weights(run):
        raise MissingError(
            f"run {run_id!r} has no (complete) weights in {where}; "
            "train it first with `layerstate train`"
        )
    grp = group(run, schema.WEIGHTS)
    names = cast("list[str] | None", grp.attrs.get("names")) or sorted(n for n, _ in grp.arrays())
    return {n: np.asarray(array(grp, n)[...]) for n in names}
