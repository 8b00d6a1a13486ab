"""Training checkpoints: ``runs/<run_id>/checkpoint/step_<NNNNNNN>/`` (docs/store-format.md, S46).

A checkpoint is what an unfinished training needs to go on exactly where it stopped: named
sections of plain arrays (the model's parameters, the best weights so far, the optimiser's
moments, the random generators' states) and one JSON document of everything else (step,
counters, the curve so far, the schedule). No pickle: the arrays are checksummed Zarr arrays
written like weights (S12-S14), and the document is the step group's attributes.

A new checkpoint is written beside the last one and marked ``complete`` only after every
array is there; then the older ones are removed. A writer killed at any moment therefore
leaves at least one complete checkpoint (or none, before the first), never a half-written
one that would be read. Finishing the run (its weights written) removes the whole group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import zarr

from .. import schema
from ..zarrutil import array, group, jsonable
from .weights import write_arrays

_PREFIX = "step_"


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint as read back: its step, arrays by section, and its document."""

    step: int
    arrays: dict[str, dict[str, np.ndarray]]
    dtypes: dict[str, dict[str, str]]
    state: dict[str, Any]


def _steps(ck: zarr.Group) -> list[tuple[int, zarr.Group]]:
    """The checkpoints under ``ck`` as (step, group), complete or not, oldest first."""
    out = []
    for name, grp in ck.groups():
        if name.startswith(_PREFIX) and name[len(_PREFIX):].isdigit():
            out.append((int(name[len(_PREFIX):]), grp))
    return sorted(out, key=lambda sg: sg[0])


def write_checkpoint(run: zarr.Group, step: int, sections: Mapping[str, Mapping[str, Any]],
                     state: Mapping[str, Any]) -> None:
    """Write a checkpoint at ``step``; on success, remove every other checkpoint of the run."""
    ck = group(run, schema.CHECKPOINT) if schema.CHECKPOINT in run else run.create_group(schema.CHECKPOINT)
    name = f"{_PREFIX}{int(step):07d}"
    if name in ck:  # a leftover of a writer killed while writing this very step
        del ck[name]
    grp = ck.create_group(name)
    for section, arrays in sections.items():
        write_arrays(grp, section, arrays, what="checkpoint arrays")
    grp.attrs.update({schema.ATTR_COMPLETE: True, "step": int(step), "sections": list(sections),
                      "state": jsonable(dict(state))})
    for other, _ in _steps(ck):
        if other != step:
            del ck[f"{_PREFIX}{other:07d}"]


def _newest(run: zarr.Group) -> tuple[int, zarr.Group, dict[str, Any]] | None:
    if schema.CHECKPOINT not in run:
        return None
    for step, grp in reversed(_steps(group(run, schema.CHECKPOINT))):
        a: dict[str, Any] = dict(grp.attrs)
        if a.get(schema.ATTR_COMPLETE):
            return step, grp, a
    return None


def checkpoint_state(run: zarr.Group) -> tuple[int, dict[str, Any]] | None:
    """(step, state document) of the run's newest complete checkpoint, its arrays unread."""
    newest = _newest(run)
    return None if newest is None else (newest[0], dict(newest[2].get("state") or {}))


def read_checkpoint(run: zarr.Group) -> Checkpoint | None:
    """The run's newest complete checkpoint, or None when it has none."""
    newest = _newest(run)
    if newest is not None:
        step, grp, a = newest
        arrays: dict[str, dict[str, np.ndarray]] = {}
        dtypes: dict[str, dict[str, str]] = {}
        for section in cast("list[str]", a.get("sections") or []):
            sec = group(grp, section)
            names = cast("list[str]", sec.attrs.get("names") or [])
            arrays[section] = {n: np.asarray(array(sec, n)[...]) for n in names}
            dtypes[section] = dict(cast("dict[str, str]", sec.attrs.get("dtypes") or {}))
        return Checkpoint(step, arrays, dtypes, dict(a.get("state") or {}))
    return None


def delete_checkpoint(run: zarr.Group) -> bool:
    """Remove every checkpoint of the run; True if there was one."""
    if schema.CHECKPOINT not in run:
        return False
    del run[schema.CHECKPOINT]
    return True
