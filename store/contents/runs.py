"""The run registry: ``runs/<run_id>`` groups, their identity and attributes.

A run is defined by its task, arch, variant, seed and both configs; their
:func:`config_hash` is stored with it, so adding the same run twice is a no-op and adding a
different one under the same id is refused. Functions here take the store's root group and
its location (for messages); :class:`~store.core.Store` wraps them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import pandas as pd
import zarr

from .. import schema
from ..errors import MissingError, RunConflictError
from ..provenance import now
from ..zarrutil import group, jsonable

#: Run attributes that define a run: fixed once it exists.
IDENTITY = ("task", "arch", "variant", "seed", "model_config", "task_config", "config_hash")


def config_hash(config: Mapping[str, Any]) -> str:
    """A stable short hash of a JSON-able config (key order does not matter)."""
    blob = json.dumps(jsonable(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _set_fields(config: Mapping | None) -> dict[str, Any]:
    """A config without its unset (None) fields.

    A field a model does not use is None; dropping them keeps a run's identity the same when a
    later version adds optional fields for other architectures (store-format rule S10).
    """
    return {k: v for k, v in dict(config or {}).items() if v is not None}


def run_identity(
    task: str, arch: str, variant: str, seed: int,
    model_config: Mapping | None = None, task_config: Mapping | None = None,
) -> dict[str, Any]:
    """What defines a run; its :func:`config_hash` is the run's ``config_hash`` attribute.

    Unset (None) config fields are not part of the identity.
    """
    return {
        "task": task, "arch": arch, "variant": variant, "seed": int(seed),
        "model_config": _set_fields(model_config), "task_config": _set_fields(task_config),
    }


def identity_of(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical identity of a stored run, rebuilt from its attributes."""
    return run_identity(
        str(attrs.get("task")), str(attrs.get("arch")), str(attrs.get("variant")),
        int(attrs.get("seed", -1)), attrs.get("model_config"), attrs.get("task_config"),
    )


def same_run(attrs: Mapping[str, Any], identity: Mapping[str, Any]) -> bool:
    """Whether a stored run (its attributes) is the run ``identity`` defines.

    True when the stored ``config_hash`` matches, or when the stored configs, canonicalised
    the current way, do: a store written before an optional config field existed hashed that
    field's None, and its runs are still the same runs.
    """
    h = config_hash(identity)
    if attrs.get("config_hash") == h:
        return True
    if "model_config" not in attrs and "task_config" not in attrs:
        return False
    return config_hash(identity_of(attrs)) == h


def runs_group(root: zarr.Group) -> zarr.Group:
    return group(root, schema.RUNS)


def run_ids(root: zarr.Group) -> list[str]:
    """All run ids, sorted."""
    return sorted(name for name, _ in runs_group(root).groups())


def run_group(root: zarr.Group, run_id: str, where: object) -> zarr.Group:
    """The group of run ``run_id``; :class:`MissingError` naming the runs there if absent."""
    try:  # one lookup: a membership test first read the run's metadata twice
        return group(runs_group(root), run_id)
    except KeyError:
        raise MissingError(
            f"run {run_id!r} is not in {where}; runs there: "
            f"{', '.join(run_ids(root)) or '(none)'}"
        ) from None


def add_run(root: zarr.Group, run_id: str, identity: dict[str, Any], attrs: Mapping[str, Any],
            where: object) -> bool:
    """Create run ``run_id`` with ``identity`` and ``attrs``; False if an identical run exists.

    A run id that exists with a different config hash raises :class:`RunConflictError` and
    changes nothing.
    """
    schema.check_run_id(run_id)
    h = config_hash(identity)
    runs = runs_group(root)
    if run_id in runs:
        old_attrs = dict(runs[run_id].attrs)
        old = old_attrs.get("config_hash")
        if not same_run(old_attrs, identity):
            raise RunConflictError(
                f"run {run_id!r} already exists in {where} with a different config "
                f"(hash {old} vs {h}); use a new run id, or a new store for the new config"
            )
        return False
    grp = runs.create_group(run_id)
    grp.attrs.update(jsonable({**identity, **attrs, "config_hash": h, "created": now()}))
    return True


def update_run_attrs(run: zarr.Group, run_id: str, attrs: Mapping[str, Any]) -> None:
    """Add or replace run attributes (metrics, evaluation, …); the identity is refused."""
    frozen = set(attrs) & set(IDENTITY)
    if frozen:
        raise RunConflictError(
            f"cannot change {sorted(frozen)} of run {run_id!r}: they define it; add a new run instead"
        )
    run.attrs.update(jsonable(attrs))


def runs_table(st: Any) -> pd.DataFrame:
    """One row per run of ``st`` (a :class:`~store.core.Store` or a store view: anything with
    ``run_ids``, ``run_attrs``, ``lengths`` and ``has_weights``), indexed by run id (the
    columns :meth:`Store.runs` documents)."""
    rows = []
    for rid in st.run_ids():
        a = st.run_attrs(rid)
        rows.append({"run": rid, **{k: a.get(k) for k in ("task", "arch", "variant", "seed")},
                     "lengths": st.lengths(rid), "weights": st.has_weights(rid)})
    cols = ["run", "task", "arch", "variant", "seed", "lengths", "weights"]
    return pd.DataFrame(rows, columns=cols).set_index("run")


def select(attrs_by_run: Mapping[str, Mapping[str, Any]], filters: Mapping[str, Any]) -> list[str]:
    """Run ids whose attributes match every filter (a value, or a list of accepted values).

    Unknown attribute names raise ``KeyError`` naming the ones there are.
    """
    out = []
    for rid, a in attrs_by_run.items():
        for key in filters:
            if key not in a:
                raise KeyError(
                    f"runs have no attribute {key!r}; filter on one of: {', '.join(sorted(a))}"
                )
        if all(_matches(a[k], v) for k, v in filters.items()):
            out.append(rid)
    return out


def _matches(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, list | tuple | set):
        return value in wanted
    return value == wanted
