"""What a writer is handed: shapes, dtypes and values checked before anything is stored.

Every check names the array, what was expected and how to fix it. Float arrays are cast to
their stored dtype and refused if they hold NaN/Inf — including finite values that only
become Inf in the cast (float16 tops out at 65504) — unless the group allows non-finite
values. The cast itself happens in the chunk threads (:mod:`store.io.blocks`); :func:`cast_finite`
is the same cast and check done here, also to say where a refused value is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import schema
from ..errors import InvalidArrayError
from ..zarrutil import ordered, to_numpy
from .chunks import all_finite
from .layout import Spec


def check_block(spec: Spec, length: int, m: int, hidden: Any, tokens: Any, labels: Mapping[str, Any],
                mask: Any, logits: Any) -> dict[str, np.ndarray]:
    """The core arrays of an ``m``-sequence block as numpy, by variable name, checked against
    ``spec``; float arrays are left in their dtype (cast and checked as they are written)."""
    L = length
    hidden = ordered(hidden, schema.DIMS["hidden"], "hidden")
    want = (m, L, len(spec["layers"]), spec["n_features"])
    if hidden.shape != want:
        raise InvalidArrayError(
            f"hidden has shape {hidden.shape}; expected {want} "
            "(sequence, position, layer, feature) for this block"
        )
    numeric(hidden, "hidden")
    out = {"hidden": hidden}
    out["tokens"] = int2d(tokens, "tokens", m, L)
    if set(labels) != set(spec["labels"]):
        raise InvalidArrayError(
            f"labels {sorted(labels)} do not match the declared labels {sorted(spec['labels'])}"
        )
    for name, val in labels.items():
        out[name] = int2d(val, f"label {name!r}", m, L)
    if mask is None:
        out["mask"] = out[spec["target"]] >= 0
    else:
        mk = ordered(mask, schema.DIMS["mask"], "mask")
        if mk.shape != (m, L):
            raise InvalidArrayError(f"mask has shape {mk.shape}; expected {(m, L)} like tokens")
        if mk.dtype != bool:
            raise InvalidArrayError(f"mask must be boolean, got dtype {mk.dtype}")
        out["mask"] = mk
    if spec["n_classes"]:
        if logits is None:
            raise InvalidArrayError("this group stores logits: pass logits=(m, length, class)")
        lg = ordered(logits, schema.DIMS["logits"], "logits")
        if lg.shape != (m, L, spec["n_classes"]):
            raise InvalidArrayError(f"logits has shape {lg.shape}; expected {(m, L, spec['n_classes'])}")
        numeric(lg, "logits")
        out["logits"] = lg
    return out


def check_extra(spec: Spec, m: int, extra: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The declared extra variables of an ``m``-sequence block, checked; non-float ones are
    cast to their stored dtype here, float ones as they are written."""
    want = spec["extra"]
    if set(extra) != set(want):
        raise InvalidArrayError(
            f"extra variables {sorted(extra)} do not match the declared ones {sorted(want)}"
        )
    out = {}
    for name, value in extra.items():
        _dims, shape, dtype = want[name]
        arr = to_numpy(value)
        if arr.shape != (m, *shape):
            raise InvalidArrayError(f"extra {name!r} has shape {arr.shape}; expected {(m, *shape)}")
        if dtype != "bool":
            numeric(arr, name)
        out[name] = arr if np.dtype(dtype).kind == "f" else arr.astype(dtype, copy=False)
    return out


def int2d(value: Any, name: str, m: int, length: int) -> np.ndarray:
    """A ``(sequence, position)`` integer array as int32."""
    arr = ordered(value, schema.DIMS["tokens"], name)
    if arr.shape != (m, length):
        raise InvalidArrayError(
            f"{name} has shape {arr.shape}; expected {(m, length)} (sequence, position) like hidden"
        )
    if arr.dtype.kind not in "iub":
        raise InvalidArrayError(f"{name} must be integers, got dtype {arr.dtype}")
    return arr.astype("int32", copy=False)


def numeric(arr: np.ndarray, name: str) -> None:
    if arr.dtype.kind not in "fiu":
        raise InvalidArrayError(f"{name} must be a numeric array, got dtype {arr.dtype}")


def cast_finite(values: np.ndarray, name: str, dtype: str, *, start: int, layers: list[str],
                allow_nonfinite: bool) -> np.ndarray:
    """``values`` in the stored ``dtype``, refusing NaN/Inf — including values that only
    become Inf in the cast — unless ``allow_nonfinite``. The error names the first bad
    sequence (``start`` is the block's first), position and, for ``hidden``, layer."""
    with np.errstate(over="ignore", invalid="ignore"):
        stored = values.astype(dtype, copy=False)
    if allow_nonfinite or all_finite(stored):
        return stored
    bad = np.argwhere(~np.isfinite(stored))[0]
    where = f"sequence {bad[0] + start}" + (f", position {bad[1]}" if bad.size > 1 else "")
    if name == "hidden":
        where += f", layer {layers[bad[2]]}"
    if all_finite(values):
        # reduced in float64, never in a narrower float
        big = float(np.abs(values.astype("float64")).max())
        fix = ("store it as float32 (dtype='float32'; in an experiment, [capture] dtype = \"float32\")"
               if np.dtype(dtype).itemsize < 4 else "rescale the values or fix the model")
        raise InvalidArrayError(f"{name} exceeds the {dtype} range (|x| up to {big:.4g}, first at {where}); {fix}")
    raise InvalidArrayError(
        f"{name} contains NaN or Inf (first at {where}); fix the model or pass "
        "allow_nonfinite=True (layerstate import: --allow-nonfinite) to store it anyway "
        "(recorded in the store)"
    )
