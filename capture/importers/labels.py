"""Labels and tokens for imported activations: from arrays, or from a table keyed by
``(sequence, position)``.

A table (CSV or Parquet) has the integer columns ``sequence`` and ``position`` and one
integer column per label; a column ``token`` (or ``tokens``) gives the input tokens and a
boolean column ``mask`` the labelled positions. Cells the table does not name are undefined
(-1; mask false). Arrays (``.npz``, ``.safetensors``) are ``(sequence, position)`` integer
arrays by name, with the same special names. No pickle: ``.npz`` is read with
``allow_pickle=False``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from store import InvalidArrayError, MissingError
from store.errors import MissingFileError

from .checks import Labels, require

TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
ARRAY_SUFFIXES = (".npz", ".safetensors")
_TOKENS = ("token", "tokens", "token_ids", "input_ids")


def read_labels(path: str | os.PathLike[str], n_sequences: int, length: int) -> Labels:
    """Labels, tokens and mask from a table or an array file, shaped ``(n_sequences, length)``."""
    p = Path(path)
    if not p.exists():
        raise MissingFileError(f"labels file {p} does not exist; give a table "
                               f"({', '.join(TABLE_SUFFIXES)}) or arrays ({', '.join(ARRAY_SUFFIXES)})")
    suffix = p.suffix.lower()
    if suffix in TABLE_SUFFIXES:
        return _from_table(p, n_sequences, length)
    if suffix in ARRAY_SUFFIXES:
        return _from_arrays(_load_arrays(p), str(p), n_sequences, length)
    raise InvalidArrayError(f"labels {p}: unknown format {suffix or '(no suffix)'}; give a table "
                            f"({', '.join(TABLE_SUFFIXES)}) or arrays ({', '.join(ARRAY_SUFFIXES)})")


def _load_arrays(p: Path) -> dict[str, np.ndarray]:
    if p.suffix.lower() == ".npz":
        with np.load(p, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    st = require("safetensors.numpy", "reading labels from safetensors")
    return dict(st.load_file(str(p)))


def _from_arrays(arrays: dict[str, np.ndarray], where: str, n: int, L: int) -> Labels:
    out = Labels()
    for name, arr in arrays.items():
        if arr.shape != (n, L):
            raise InvalidArrayError(f"labels {where}: {name!r} has shape {arr.shape}; the activations "
                                    f"are {(n, L)} (sequence, position)")
        if name in _TOKENS:
            out.tokens = arr.astype("int64")
        elif name == "mask":
            out.mask = arr.astype(bool)
        else:
            if arr.dtype.kind not in "iub":
                raise InvalidArrayError(f"labels {where}: {name!r} must be integers, got {arr.dtype}")
            out.labels[name] = arr.astype("int32")
    return out


def _from_table(p: Path, n: int, L: int) -> Labels:
    if p.suffix.lower() == ".csv":
        df = pd.read_csv(p)
    else:
        require("pyarrow", "reading Parquet labels")
        df = pd.read_parquet(p)
    for key in ("sequence", "position"):
        if key not in df.columns:
            raise MissingError(f"labels {p}: no column {key!r}; a table is keyed by sequence and "
                               f"position (columns: {', '.join(map(str, df.columns))})")
    seq, pos = df["sequence"].to_numpy(), df["position"].to_numpy()
    if seq.dtype.kind not in "iu" or pos.dtype.kind not in "iu":
        raise InvalidArrayError(f"labels {p}: sequence and position must be integers")
    bad = (seq < 0) | (seq >= n) | (pos < 0) | (pos >= L)
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidArrayError(f"labels {p}: row {i} names (sequence {seq[i]}, position {pos[i]}), "
                                f"outside the {n} sequences x {L} positions imported")
    if pd.Index(zip(seq, pos, strict=True)).duplicated().any():
        raise InvalidArrayError(f"labels {p}: a (sequence, position) appears twice")
    out = Labels()
    for col in df.columns:
        if col in ("sequence", "position"):
            continue
        values = df[col].to_numpy()
        if col == "mask":
            grid = np.zeros((n, L), bool)
            grid[seq, pos] = values.astype(bool)
            out.mask = grid
            continue
        if values.dtype.kind not in "iub":
            raise InvalidArrayError(f"labels {p}: column {col!r} must hold integers, got {values.dtype}")
        grid_i = np.full((n, L), -1, "int64" if col in _TOKENS else "int32")
        grid_i[seq, pos] = values
        if col in _TOKENS:
            out.tokens = grid_i
        else:
            out.labels[str(col)] = grid_i
    return out


def resolve(labels: Any, n: int, L: int) -> Any:
    """``labels`` as given, or read from its file once the shape is known."""
    if isinstance(labels, str | os.PathLike):
        return read_labels(labels, n, L)
    return labels
