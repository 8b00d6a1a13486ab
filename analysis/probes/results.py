"""Where a probe result is stored and how it is found again: its default name
(:func:`result_name`), a name that replaces no sweep made with other settings
(:func:`storage_name`, :func:`setting_differences`), writing it with its intervals
(:func:`save_probes`), and the stored result that holds a target's probes (:func:`find_result`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import xarray as xr

from analysis import registry
from store import RunConflictError, schema
from store.contents.results import describe_settings

from .intervals import add_probe_intervals


def runs_by_task(store: Any, runs: Sequence[str] | None = None) -> dict[str, list[str]]:
    """The runs (default: every run) grouped by their ``task`` attribute, tasks sorted."""
    out: dict[str, list[str]] = {}
    for r in store.run_ids() if runs is None else runs:
        out.setdefault(str(store.run_attrs(r).get("task")), []).append(r)
    return dict(sorted(out.items()))


def result_name(ds: xr.Dataset) -> str:
    """The default result name of a probe Dataset: ``probes/<task>`` for the target its runs
    were trained on, ``probes/<task>.<target>`` for another label (:func:`store.registry.probe_name`);
    ``probes/<target>`` when its runs are of several tasks."""
    task = ds.attrs.get("task")
    if not task:
        return schema.result_name(registry.PROBES, str(ds.attrs["target"]))
    return registry.probe_name(str(task), str(ds.attrs["target"]), ds.attrs.get("trained_target"))


#: The attributes that make two probe results of the same runs different results.
SETTING_ATTRS = ("target", "positions", "folds", "control", "train_length", "method", "C", "seed")


def setting_differences(old: xr.Dataset, new: xr.Dataset) -> list[str]:
    """How the probe result ``new`` differs from the stored ``old`` in what it was made from:
    ``["folds 3 -> 5", "control permute -> token"]``; empty when they are the same sweep.
    No training length (stored as ``-1``) reads ``none``: ``train_length 40 -> none``."""
    out = [f"{k} {_setting(k, old.attrs.get(k))} -> {_setting(k, new.attrs.get(k))}" for k in SETTING_ATTRS
           if str(old.attrs.get(k)) != str(new.attrs.get(k))]
    for dim in ("run", "length", "layer"):
        a = sorted(map(str, old[dim].values)) if dim in old.coords else []
        b = sorted(map(str, new[dim].values)) if dim in new.coords else []
        if a != b:
            out.append(f"{dim}s {','.join(a)} -> {','.join(b)}")
    return out


def _setting(key: str, value: Any) -> Any:
    """A setting as a user reads it: no training length (``-1`` or None) is ``none``."""
    if key == "train_length" and value in (-1, None):
        return "none"
    return value


def storage_name(store: Any, ds: xr.Dataset, name: str | None = None, *,
                 where: str | None = None) -> tuple[str, str | None]:
    """Where to store the probe result ``ds`` without silently replacing another one:
    ``(name, note)``.

    A stored result of that name made with the same settings from the same runs is replaced
    (the same sweep again). One with other settings is kept: with ``name`` given, a
    :class:`~store.RunConflictError` says so and how to go on; with the default name
    (:func:`result_name`) this result goes under the next free ``<name>-2``, ``-3``, ... and
    ``note`` says why. ``where``: the store as the user named it, for the suggested commands.
    """
    default = result_name(ds)
    wanted = name or default
    where = where or str(store.location)
    have = store.results()
    if wanted not in have or not setting_differences(store.read_result(wanted), ds):
        return wanted, None
    old = store.read_result(wanted)
    diff = "; ".join(setting_differences(old, ds))
    if name is not None:
        in_source = wanted not in getattr(store, "results_store", store).results()
        fix = (f"give another --name (e.g. --name {_next_free(wanted, have)})"
               + ("" if in_source else f", or remove it first: layerstate forget {where} --result {wanted}"))
        raise RunConflictError(f"result {wanted} holds probes with other settings ({diff}); {fix}")
    free = _next_free(wanted, have)
    return free, (f"{wanted} already holds probes made with other settings "
                  f"({describe_settings(old.attrs)}); this result ({diff}) is stored as {free}, "
                  f"beside it (--name chooses the name; claims pick one with result = \"{_short(free)}\")")


def find_result(store: Any, target: str, run_id: str | None = None) -> str:
    """The stored probe result that holds probes of ``target`` (for ``run_id``, when given):
    ``probes/<target>`` where one has that name, else the result whose ``target`` attribute
    it is and that holds the run; of several, ``probes/<task>`` of the run's task, else the
    newest. ``probes/<target>`` (absent) when there is none, so the caller says what to run."""
    plain = schema.result_name(registry.PROBES, target)
    names = store.results()
    if plain in names:
        return plain
    found = []
    for n in names:
        parsed = schema.parse_result_name(n)
        if parsed is None or parsed[0] != registry.PROBES or str(store.result_attrs(n).get("target")) != target:
            continue
        if run_id is None or run_id in [str(r) for r in store.read_result(n).run.values]:
            found.append(n)
    if not found:
        return plain
    if run_id is not None:
        own = registry.probe_name(str(store.run_attrs(run_id).get("task")))
        if own in found:
            return own
    return sorted(found, key=lambda n: str(store.result_attrs(n).get("created", "")))[-1]


def _short(name: str) -> str:
    """``probes/dyck-2`` -> ``dyck-2``: how a claim's ``result`` names it."""
    parsed = schema.parse_result_name(name)
    return parsed[1] if parsed else name


def _next_free(name: str, have: Sequence[str]) -> str:
    i = 2
    while f"{name}-{i}" in have:
        i += 1
    return f"{name}-{i}"


def save_probes(store: Any, ds: xr.Dataset, name: str | None = None) -> str:
    """Write a probe Dataset to ``results/<name>`` (default :func:`result_name`), with the
    seed-level intervals of its profiles (:func:`analysis.probes.intervals.add_probe_intervals`);
    returns the name."""
    name = name or result_name(ds)
    store.write_result(name, add_probe_intervals(ds, store))
    return name
